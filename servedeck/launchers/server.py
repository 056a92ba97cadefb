"""How a container starts its server, read in one descent: which launcher runs (an
``entrypoint``'s start, else the image's launcher from its facts, else the command's own shape,
else inferred facts, else a repository that names vLLM), the command as that launcher reads it,
the server's environment and the effective engine settings, each with its provenance
(:func:`read_server`).

How Compose and Docker start the server (Compose Specification ``entrypoint``/``command``;
Docker runs ENTRYPOINT + CMD as one argv): an ``entrypoint`` replaces the image's and must start
a server a launcher knows (after wrappers such as ``env`` or ``tini``, or as the one plain
command of an ``sh -c`` script); without one, the image's own entrypoint runs the command, and a
command that repeats a server start gives those words to the server as arguments. A string
``command``/``entrypoint`` is split shell-style as Compose splits it (:func:`split_command`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Protocol

from servedeck.launchers import registry
from servedeck.launchers.base import DocPath, EnvItem, Launch, Launcher, LauncherDefaults, Setting, Token
from servedeck.yamlio import to_plain


class ImageFacts(Protocol):
    """What the reading needs of an image's facts (:class:`servedeck.model.catalog.ImageFacts`)."""

    @property
    def entrypoint(self) -> list[str]: ...

    @property
    def inferred(self) -> bool: ...

    @property
    def runs(self) -> Launcher: ...

    @property
    def release(self) -> tuple[int, int, int] | None: ...

    @property
    def launcher_defaults(self) -> list[LauncherDefaults]: ...

    @property
    def port(self) -> int: ...


@dataclass
class Server:
    """A service's server as it will run.

    Attributes:
        launch: the command as its launcher reads it (``launch.launcher`` None when the start is
            not one servedeck knows: nothing else is read then).
        defaults: the launcher config shipped in the image that the command names, if known.
        env_items: the environment the service itself gives, in order (its ``env_file``
            files, its ``environment``, the ``NAME=value`` words of its argv).
        environment: the server's environment, in order: :attr:`env_items`, then what the
            launcher sets over them (a later item wins; value None unsets).
        effective: the effective engine settings by vLLM dest name, each a :class:`Setting`.
    """

    launch: Launch
    defaults: LauncherDefaults | None = None
    env_items: list[EnvItem] = field(default_factory=list)
    environment: list[EnvItem] = field(default_factory=list)
    effective: dict[str, Setting] = field(default_factory=dict)


def read_server(entrypoint: Any, command: Any, path: DocPath, facts: ImageFacts | None,
                repository: str | None, env_items: list[EnvItem]) -> Server:
    """Read a service's server: its launcher, command, environment and effective settings.

    Args:
        entrypoint / command: the service's ``entrypoint`` and ``command`` as Compose reads
            them (a list, a string split shell-style, or None: the image's).
        path: the service's document path (``("services", name)``).
        facts: the image's facts (catalog, read from the image, or inferred), or None.
        repository: the image's repository (``ghcr.io/0xsero/exl3xpu``), None without an image.
        env_items: what the service's ``env_file`` files and ``environment`` give, in order;
            the ``NAME=value`` words of the argv follow them.
    """
    launch = _launch(entrypoint, command, path, facts, repository)
    items = list(env_items)
    for t in launch.env_words:
        k, _, v = t.s.partition("=")
        items.append(EnvItem(k, v, t.path, True))
    server = Server(launch, env_items=items, environment=list(items))
    launcher = launch.launcher
    if launcher is None:
        return server
    image_path = path + ("image",)
    config = launch.config.s if launch.config is not None else None
    server.defaults = launcher.defaults(facts.launcher_defaults, config) if facts is not None else None
    server.environment = launcher.environment(launch, items, server.defaults, image_path)
    image_port = facts.port if facts is not None and facts.runs is launcher else None
    server.effective = launcher.effective(launch, server.defaults, server.environment, image_port, image_path)
    return server


# --------------------------------------------------------------------------- which launcher starts it

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
"""A ``NAME=value`` word: a variable assignment before a command (POSIX shell, and ``env``)."""


def wrapper_length(argv: list[str]) -> int:
    """Number of leading items that only wrap the program they run: ``env`` (with its options
    and ``NAME=value`` words), the init processes ``tini`` / ``dumb-init`` (their options and
    ``--``), ``nice -n N``."""
    i = 0
    while i < len(argv):
        base = argv[i].rsplit("/", 1)[-1]
        if base == "env":
            i += 1
            while i < len(argv) and (ASSIGNMENT.fullmatch(argv[i]) or argv[i].startswith("-")):
                i += 2 if argv[i] in ("-u", "--unset", "-C", "--chdir") else 1
        elif base in ("tini", "dumb-init"):
            i += 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 1
                if argv[i - 1] == "--":
                    break
        elif base == "nice":
            i += 1
            if i < len(argv) and argv[i] == "-n":
                i += 2
            elif i < len(argv) and re.fullmatch(r"-n?-?\d+", argv[i]):
                i += 1
        else:
            return i
    return i


def start_of(argv: list[str]) -> tuple[Launcher | None, int]:
    """``(launcher, n)``: the known launcher (:func:`servedeck.launchers.registry.launchers`,
    first match in registration order) whose start begins process argv ``argv`` (after
    wrappers: :func:`wrapper_length`) and the number of leading items up to the end of that
    start; ``(None, 0)``."""
    w = wrapper_length(argv)
    rest = [a.strip() for a in argv[w:]]
    for launcher in registry.launchers():
        n = launcher.start_length(rest)
        if n:
            return launcher, w + n
    return None, 0


def of_arguments(argv: list[str]) -> Launcher | None:
    """The first known launcher whose own argument shape ``argv`` has (arguments to an image
    servedeck has no facts for), or None."""
    return next((launcher for launcher in registry.launchers() if launcher.recognises_arguments(argv)), None)


def of_repository_name(repository: str) -> Launcher | None:
    """The launcher assumed for an image without facts whose name (the repository's last part)
    mentions vLLM: :func:`servedeck.launchers.registry.default`; None for any other name."""
    return registry.default() if "vllm" in repository.lower().rsplit("/", 1)[-1] else None


# --------------------------------------------------------------------------- the server command


def _tokens(value: Any, path: DocPath) -> tuple[list[Token], bool]:
    """An ``entrypoint``/``command`` value at ``path`` as argv items, and whether it was a
    string (split shell-style, every item at ``path``); a list gives one item per entry (at
    ``path + (i,)``), anything else none."""
    if isinstance(value, str):
        return [Token(p, path) for p in split_command(value) or []], True
    if isinstance(value, list):
        return [Token("" if v is None else str(v), path + (i,)) for i, v in enumerate(value)], False
    return [], False


def _shell_script(argv: list[Token]) -> tuple[Token | None, list[Token], list[Token] | None, list[Token]]:
    """:func:`shell_script` on argv items: (the SCRIPT item, the items after a one-word SCRIPT,
    the SCRIPT's argv as items at the SCRIPT's path, or None, its leading ``NAME=value`` words
    as items at the SCRIPT's path)."""
    found = shell_script([t.s for t in argv])
    if found is None:
        return None, [], None, []
    i, split, words, assignments = found
    script = argv[i]
    return (script, argv[i + 1:i + 1 + split], None if words is None else [Token(w, script.path) for w in words],
            [Token(w, script.path) for w in assignments])


def _repeat_length(cmd: list[Token], entry: list[str]) -> int:
    """Number of leading command items that repeat an entrypoint (0 if none): a server start a
    launcher knows (:func:`start_of`), or the effective entrypoint itself."""
    s = [t.s for t in cmd]
    launcher, n = start_of(s)
    if launcher is not None:
        return n
    if entry and s[: len(entry)] == entry:
        return len(entry)
    return 0


def _launch(entrypoint: Any, command: Any, path: DocPath, facts: ImageFacts | None,
            repository: str | None) -> Launch:
    """The server command of a service: which launcher starts it (an ``entrypoint``'s start,
    else the image's launcher from its facts, else the command's own shape, else inferred facts,
    else a repository that names vLLM) and the command as that launcher reads it."""
    entry_tokens, _ = _tokens(entrypoint, path + ("entrypoint",))
    cmd, string_form = _tokens(command, path + ("command",))
    has_entry = entrypoint is not None
    effective_entry = [t.s for t in entry_tokens] if has_entry else (list(facts.entrypoint) if facts else [])
    launcher: Launcher | None = None
    start: list[Token] = []
    script: Token | None = None
    split: list[Token] = []
    inner: list[Token] | None = None
    env_words: list[Token] = []
    if has_entry:
        # Docker runs entrypoint + command as one argv; a shell's -c script is read as its argv
        argv_tokens = entry_tokens + cmd
        script, split, inner, env_words = _shell_script(argv_tokens)
        if inner is not None:
            argv_tokens = inner
        launcher, n = start_of([t.s for t in argv_tokens])
        if launcher is not None:
            start = argv_tokens[:n]
            effective_entry = [t.s for t in start]
            cmd = argv_tokens[n:]
            env_words += [t for t in argv_tokens[:n] if ASSIGNMENT.fullmatch(t.s)]  # env NAME=v
    elif facts is not None and not facts.inferred:
        launcher = facts.runs
    elif cmd and (found := of_arguments([t.s for t in cmd])) is not None:
        launcher = found
    elif facts is not None:
        launcher = facts.runs
    elif repository is not None:
        launcher = of_repository_name(repository)

    repeat = _repeat_length(cmd, effective_entry) if launcher is not None else 0
    release = facts.release if facts else None
    launch = launcher.read(cmd[repeat:], release) if launcher is not None else Launch(None, tokens=cmd)
    launch.start_items = start
    launch.repeated_entrypoint = cmd[:repeat]
    launch.string_form = string_form
    launch.shell_script, launch.shell_split = script, split
    launch.entry_unknown = has_entry and launcher is None
    launch.shell_plain = script is not None and inner is not None
    launch.env_words = env_words
    # the start is known: written in the file, or the image's own (not guessed from its name)
    launch.start_known = launcher is not None and (has_entry or bool(repeat)
                                                   or (facts is not None and not facts.inferred))
    return launch


# --------------------------------------------------------------------------- the shell


def split_command(value: Any) -> list[str] | None:
    """``command``/``entrypoint`` → argv items. A list gives one item each (``None`` items
    become ``""``); a string is split shell-style as Compose does (compose-go ``shellwords``);
    None stays None (image default); any other value (a number, a mapping: Compose refuses it,
    "must be a null, string or array", the schema rule says so) is one item, its text."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            return value.split()
    if not isinstance(value, (list, tuple)):
        return [str(to_plain(value))]
    return ["" if v is None else str(to_plain(v)) for v in value]


_SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh"}
_OPERATOR = re.compile(r"[;&|<>()]+")
_KEYWORDS = {"if", "for", "while", "until", "case", "function", "{", "!"}


def plain_command(script: str) -> list[str] | None:
    """The words of a shell script that is one plain command (quotes removed as the shell
    removes them; ``#`` starts a comment only at the start of a word, POSIX XCU 2.3), or None
    when it uses expansions (``$``, backquotes), operators (``;``, ``&&``, ``|``, redirections,
    subshells) or compound commands: those are not read."""
    if "$" in script or "`" in script:
        return None
    lex = shlex.shlex(script, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        words = list(lex)
    except ValueError:  # an unclosed quote: the shell refuses it too
        return None
    comment = next((k for k, w in enumerate(words) if w.startswith("#")), None)
    words = words[:comment] if comment is not None else words
    if not words or words[0] in _KEYWORDS or any(_OPERATOR.fullmatch(w) for w in words):
        return None
    return words


def shell_script(argv: list[str]) -> tuple[int, int, list[str] | None, list[str]] | None:
    """For a process argv ``sh|bash|... [OPTIONS] -c SCRIPT [ARG0 ARGS...]`` (options such as
    ``-e``, ``-o pipefail``, ``--login``; ``-c`` alone or in a cluster such as ``-lc``): (index
    of SCRIPT, how many items follow a one-word SCRIPT (the shell takes them as ``$0``, ``$1``,
    ...: 0 otherwise), the command SCRIPT runs when it is one plain command (:func:`plain_command`;
    leading ``NAME=value`` words, then ``exec`` and its options, left out) or None, and those
    leading ``NAME=value`` words (the command's environment)). None for any other argv."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    i = 1
    while i < len(argv) and argv[i][:1] in ("-", "+") and argv[i] != "--":
        opt = argv[i]
        if opt[:2] != "--" and "c" in opt[1:]:
            break
        i += 2 if opt in ("-o", "+o", "-O", "+O") else 1
    else:
        return None
    if i + 1 >= len(argv):
        return None
    script = argv[i + 1]
    words = plain_command(script)
    split = len(argv) - i - 2 if len(words if words is not None else script.split()) == 1 else 0
    assignments: list[str] = []
    if words is not None:
        while words and ASSIGNMENT.fullmatch(words[0]):
            assignments.append(words[0])
            words = words[1:]
        if words[:1] == ["exec"]:
            words = words[1:]
            while words and words[0] in ("-a", "-c", "-l", "-cl", "-lc"):
                words = words[2:] if words[0] == "-a" else words[1:]
    return i + 1, split, words, assignments


__all__ = ["ASSIGNMENT", "ImageFacts", "Server", "read_server", "wrapper_length", "start_of", "of_arguments",
           "of_repository_name", "split_command", "plain_command", "shell_script"]
