"""The launchers servedeck knows, and the questions every other module asks about them.

A new launcher is one module of :mod:`servedeck.launchers` (a :class:`~servedeck.launchers.
base.Launcher` subclass) and one line in :data:`_BUILT_IN` (or :func:`register` at run time).
Recognition from an image, first match in registration order:

* :func:`of_image`: an image's ENTRYPOINT;
* :func:`of_repository`: a repository name (first contact with an unknown digest);
* :func:`default`: the launcher assumed when nothing says otherwise (``vllm serve``, the start
  of vLLM's own images).

Recognition from a command (a process argv, the arguments to an image without facts, an image
named after vLLM) is part of reading how a container starts its server:
:mod:`servedeck.launchers.server` (``start_of``, ``of_arguments``, ``of_repository_name``).
"""

from __future__ import annotations

import difflib

from servedeck.errors import ServedeckError
from servedeck.launchers import api_server, exl3xpu, vllm_serve
from servedeck.launchers.base import Launcher

_BUILT_IN: tuple[Launcher, ...] = (exl3xpu.LAUNCHER, vllm_serve.LAUNCHER, api_server.LAUNCHER)
_KNOWN: dict[str, Launcher] = {launcher.name: launcher for launcher in _BUILT_IN}
_DEFAULT = vllm_serve.LAUNCHER


def register(launcher: Launcher) -> Launcher:
    """Add ``launcher`` (after the known ones; a known name is replaced in place).

    Raises:
        ValueError: the launcher has no name.
    """
    if not launcher.name:
        raise ValueError("a launcher needs a name")
    _KNOWN[launcher.name] = launcher
    return launcher


def unregister(name: str) -> None:
    """Forget launcher ``name`` (a built-in one comes back as it was)."""
    _KNOWN.pop(name, None)
    for launcher in _BUILT_IN:
        if launcher.name == name:
            _KNOWN[name] = launcher


def launchers() -> list[Launcher]:
    """Every known launcher, in registration order."""
    return list(_KNOWN.values())


def names() -> list[str]:
    """The known launcher names, in registration order."""
    return list(_KNOWN)


def find(name: str | None) -> Launcher | None:
    """The launcher named ``name``, or None."""
    return _KNOWN.get(name) if name else None


def known_name(name: str) -> str:
    """``name`` when a launcher has it: the field validator of every model that names a launcher.

    Raises:
        ValueError: no launcher has that name (pydantic reports it at the field, the known ones named).
    """
    if find(name) is None:
        raise ValueError(f"unknown launcher {name!r} (known: {', '.join(names())})")
    return name


def named(name: str) -> Launcher:
    """The launcher named ``name``.

    Raises:
        ServedeckError: no launcher has that name (the known ones, and the closest, in the hint).
    """
    launcher = find(name)
    if launcher is None:
        close = difflib.get_close_matches(name, names(), n=1)
        raise ServedeckError(f"unknown launcher {name!r}",
                             hint=(f"did you mean {close[0]}? " if close else "") + f"known: {', '.join(names())}")
    return launcher


def known_starts() -> str:
    """The starts of the known launchers, for messages: ``python3 scripts/serve.py, vllm serve, ...``."""
    return ", ".join(" ".join(launcher.start) for launcher in _KNOWN.values())


def default() -> Launcher:
    """The launcher assumed when neither the image nor the command says which one runs."""
    return _DEFAULT


def of_image(entrypoint: list[str] | None) -> Launcher | None:
    """The launcher an image's ENTRYPOINT starts, or None."""
    entry = [str(e) for e in entrypoint or []]
    return next((launcher for launcher in _KNOWN.values() if launcher.recognises_image(entry)), None)


def of_repository(repository: str) -> tuple[Launcher, str] | None:
    """``(launcher, device)`` of the first repository hint ``repository`` matches, or None."""
    for launcher in _KNOWN.values():
        device = launcher.hint_device(repository)
        if device is not None:
            return launcher, device
    return None


__all__ = ["register", "unregister", "launchers", "names", "find", "named", "default", "known_starts",
           "of_image", "of_repository"]
