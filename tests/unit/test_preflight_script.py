"""The preflight script (``servedeck.host.facts.PREFLIGHT_SCRIPT``) run by this machine's
``/bin/sh`` (the host side of a preflight, without SSH), and the parsing of its records."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from servedeck.errors import ServedeckError
from servedeck.host.facts import PREFLIGHT_SCRIPT, parse_facts
from servedeck.host.remote import RemoteHost, SshTarget


def _facts(workdir: Path | str, paths: list[str], port: int | None = None) -> dict:
    out = subprocess.run(["sh", "-c", PREFLIGHT_SCRIPT, "sh", str(workdir),
                          "" if port is None else str(port), "", *paths],
                         capture_output=True, text=True, check=True).stdout
    host = RemoteHost("h", SshTarget(alias="unused"), str(workdir))  # its path rule; it connects to nothing
    return parse_facts("h", str(workdir), out, port, [(p, host.abspath(p)) for p in paths])


def test_every_kind_of_path_is_told_apart_hidden_entries_and_dangling_links_included(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / ".only").write_text("")
    (tmp_path / "dangling").mkdir()
    os.symlink("/nonexistent/target", tmp_path / "dangling" / "link")
    (tmp_path / "dots").mkdir()
    (tmp_path / "dots" / "..x").write_text("")
    (tmp_path / "file").write_text("x")
    (tmp_path / "zero").write_text("")
    given = ["empty", "empty", "hidden", "dangling", "dots", "file", "zero", "missing", "/dev/null",
             "with space", "empty"]  # a repeat, also right after itself: the records are by position
    (tmp_path / "with space").mkdir()
    facts = _facts(tmp_path, given)
    got = {p: (f["kind"], f["exists"], f["nonempty"]) for p, f in facts["paths"].items()}
    assert got == {"empty": ("dir", True, False), "hidden": ("dir", True, True),
                   "dangling": ("dir", True, True), "dots": ("dir", True, True),
                   "file": ("file", True, True), "zero": ("file", True, False),
                   "missing": (None, False, False), "/dev/null": ("other", True, True),
                   "with space": ("dir", True, False)}
    assert facts["paths"]["file"]["path"] == f"{tmp_path}/file"
    assert facts["workdir"]["exists"] is True and facts["workdir"]["free_gib"] > 0
    assert facts["hostname"] == os.uname().nodename and facts["kernel"] == os.uname().release


def test_a_missing_workdir_reports_the_free_space_of_its_nearest_parent(tmp_path):
    facts = _facts(tmp_path / "a" / "b" / "c", ["models"])
    assert facts["workdir"]["exists"] is False and facts["workdir"]["free_gib"] > 0
    assert facts["paths"]["models"]["exists"] is False
    assert facts["port"] is None and facts["image"] is None


def test_a_listening_port_is_found_in_proc_net_tcp(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert _facts(tmp_path, [], port)["port"]["listening"] is True
    assert _facts(tmp_path, [], port)["port"] == {"port": port, "listening": False, "containers": [],
                                                  "compose_workdirs": {}}


def test_output_that_is_not_the_scripts_is_an_error_naming_the_host():
    with pytest.raises(ServedeckError, match="host h: the preflight printed an unexpected line"):
        parse_facts("h", "/w", "hostname\tx\nWelcome to the host!\n", None)
    with pytest.raises(ServedeckError, match="incomplete"):
        parse_facts("h", "/w", "kernel\t6.1\n", None)


def test_power_caps_are_read_in_watts_with_and_without_a_max(tmp_path):
    """sysfs hwmon ``power1_cap`` / ``power1_cap_max`` (microwatts); the script's sysfs glob is
    pointed at a directory laid out the same way."""
    for card, cap, cap_max in (("card0", "250000000", "300000000"), ("card1", "120000000", None)):
        hw = tmp_path / card / "device" / "hwmon" / "hwmon1"
        hw.mkdir(parents=True)
        (hw / "power1_cap").write_text(cap + "\n")
        if cap_max:
            (hw / "power1_cap_max").write_text(cap_max + "\n")
    script = PREFLIGHT_SCRIPT.replace("/sys/class/drm/card*", f"{tmp_path}/card*")
    assert script != PREFLIGHT_SCRIPT
    out = subprocess.run(["sh", "-c", script, "sh", str(tmp_path), "", ""], capture_output=True, text=True)
    assert out.stderr == ""
    caps = parse_facts("h", str(tmp_path), out.stdout, None)["gpu_power_caps"]
    assert [(c["cap_w"], c["cap_max_w"]) for c in caps] == [(250.0, 300.0), (120.0, None)]
