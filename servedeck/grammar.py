"""The grammar of every name servedeck takes from outside and writes into a file name, a path or
a compose file: checked where the name enters (a profile, an inventory, a host's history, a
fleet host's result file), before any file is opened or any text is rendered.

Compose names follow the Compose Specification schema (``servedeck/compose/compose-spec.json``:
service and volume keys ``^[a-zA-Z0-9._-]+$``, ``container_name`` ``[a-zA-Z0-9][a-zA-Z0-9_.-]+``)
and Compose's project-name rule (lower-case letters, digits, ``-`` and ``_``, starting with a
letter or digit; ``docker compose -p``). Environment variable names are POSIX names (letters,
digits and ``_``, not starting with a digit; IEEE Std 1003.1, "Environment Variables") plus
``.`` and ``-``, which Docker passes through: never ``=``, white space, quotes or YAML syntax.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

PROFILE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,199}$")
"""A profile name (its file stem): lower-case letters, digits, ``.``, ``_``, ``-``."""

HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
"""An inventory host name (``b70``, ``card1.example.com``): one path component."""

RUN_ID_RE = re.compile(r"^\d{4,}-[A-Za-z0-9][A-Za-z0-9._-]{0,300}$")
"""A run id ``<sequence>-<profile>-<host>``: one path component (no ``/``, never ``..``)."""

SERVICE_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,63}$")
"""A Compose service name (compose-spec ``services`` keys)."""

CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{1,127}$")
"""A container name (compose-spec ``container_name``)."""

VOLUME_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
"""A named volume (compose-spec ``volumes`` keys; Docker's volume names)."""

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,255}$")
"""An environment variable name."""

PROJECT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
"""A Compose project name."""

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
"""A SHA-256 in hex (a compose file's hash, the name of its known-good copy)."""


def compose_project_name(workdir: str) -> str:
    """The Compose project of a host working directory: the directory's name made a project name,
    then 8 hex digits of the SHA-256 of the whole path, so ``/srv/a/same`` and ``/srv/b/same`` are
    two projects (Compose's own default, the directory name alone, made them one: a deploy to one
    removed the other's container). The same working directory always gets the same name,
    whichever inventory name reaches it."""
    path = workdir.rstrip("/") or "/"
    base = re.sub(r"[^a-z0-9_-]+", "-", path.rsplit("/", 1)[-1].lower()).strip("-_")[:40] or "servedeck"
    return f"{base}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def check(pattern: re.Pattern[str], value: object, what: str, rule: str) -> str:
    """``value`` when it is a string matching ``pattern``; else ``ValueError`` saying what
    ``what`` may hold (``rule``, in words). For pydantic validators and loaders."""
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"{what} {str(value)[:120]!r} is not valid: {rule}")
    return value


def check_all(pattern: re.Pattern[str], values: Any, what: str, rule: str) -> Any:
    """``values`` (a mapping's keys, or a list) when every one passes :func:`check`."""
    for value in values:
        check(pattern, value, what, rule)
    return values
