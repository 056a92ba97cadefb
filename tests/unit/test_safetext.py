"""Terminal-safe output: what a container or a host said is shown and recorded as text, never
acted on by the terminal; an invalid ``--image`` is an error, not a traceback (issue 28)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from servedeck.deploy.console import ConsoleReporter, Reporter
from servedeck.errors import ServedeckError
from servedeck.safetext import one_line, printable

HOSTILE = "INFO ok\x1b]0;owned\x07\x1b[2J\x1b[1;1Hfake prompt$ \rhidden\u202eevil\x9b31m [/] [bold]x"


def test_control_sequences_become_visible_escapes():
    out = printable(HOSTILE)
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out and "\u202e" not in out
    assert "\\x1b]0;owned\\x07" in out and "\\u202e" in out and "\\x9b" in out
    assert out.splitlines() == ["INFO ok\\x1b]0;owned\\x07\\x1b[2J\\x1b[1;1Hfake prompt$ ",
                                "hidden\\u202eevil\\x9b31m [/] [bold]x"]
    assert printable("a\tb\nc\r\nd") == "a\tb\nc\nd"
    assert one_line("a\nb\tc") == "a\\nb\\tc"


def test_reporters_print_no_control_character_and_no_markup_from_the_text(capsys):
    Reporter().info(HOSTILE)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    rep = ConsoleReporter()  # on a terminal: rich
    from rich.console import Console
    rep._terminal = True
    rep._console = Console(file=io.StringIO(), force_terminal=False, highlight=False, soft_wrap=True)
    rep.phase("wait", HOSTILE)  # "[/]" in the text must not reach rich's markup parser
    rep.warn(HOSTILE)
    rep.info(HOSTILE)
    rep.waiting("wait", 1.0, HOSTILE)
    rep.done_waiting()
    text = rep._console.file.getvalue()
    assert "\x1b" not in text and "[/]" in text and "[bold]x" in text
    plain = ConsoleReporter()  # into a pipe: plain lines
    plain._terminal = False
    plain.phase("wait", HOSTILE)
    plain.warn(HOSTILE)
    plain.info(HOSTILE)
    plain.waiting("wait", 11.0, HOSTILE)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out
    assert out.count("\\x1b]0;owned\\x07") == 4, out


def test_an_invalid_image_is_an_error_naming_the_option():
    from servedeck.model.inventory import HostEntry
    from servedeck.model.profile import ProfileStore
    from servedeck.model.ssh_target import SshTarget
    root = Path(__file__).resolve().parents[2]
    profile = ProfileStore(root / "profiles").load("speed").profile
    entry = HostEntry(ssh=SshTarget(hostname="card"), workdir="/srv/b70")
    with pytest.raises(ServedeckError) as exc:
        entry.place(profile, "not an image\x1b[2J")
    assert exc.value.field == "image" and "digest-pinned" in exc.value.hint
