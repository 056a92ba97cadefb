"""How to reach a card host over SSH (:class:`SshTarget`), and the inventory file's plain data.

Kept apart from :mod:`servedeck.model.inventory` and free of pydantic, so that a deploy can read
its host's target from the inventory and start the SSH session (the host's login shell takes 0.1
to 0.3 s) before pydantic is imported: :func:`servedeck.host.connect.open_host` reads the target
with :func:`inventory_ssh_target`, and then the validated inventory
(:func:`servedeck.model.inventory.load_inventory`) decides whether that session is kept. Inside
the inventory model pydantic validates the target (types, unknown keys refused), and
``__post_init__``'s ValueError becomes a pydantic.ValidationError there. The OpenSSH options a
target gives are the host layer's (:func:`servedeck.host.ssh.ssh_options`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servedeck.errors import ServedeckError


@dataclass(frozen=True)
class SshTarget:
    """How to reach a host over SSH.

    Either ``alias`` (a ``Host`` entry of ``ssh_config``, or of ``~/.ssh/config`` when
    ``ssh_config`` is not given) or ``hostname`` with optional ``port``/``user``/
    ``identity_file``. ``known_hosts`` overrides the known-hosts file(s) of the config.
    Explicit ``port``/``user``/``identity_file`` also apply on top of an alias.

    Raises:
        pydantic.ValidationError: when neither or both of ``alias`` and ``hostname`` are set.
    """

    __pydantic_config__ = {"extra": "forbid"}  # pydantic's ConfigDict is a TypedDict

    alias: str | None = None
    hostname: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    ssh_config: str | None = None
    known_hosts: str | None = None

    def __post_init__(self) -> None:
        if bool(self.alias) == bool(self.hostname):
            raise ValueError("give exactly one of 'alias' (ssh config Host) or 'hostname'")

    @property
    def destination(self) -> str:
        """The destination argument given to ``ssh`` (alias or hostname)."""
        return self.alias or self.hostname or ""


def read_inventory_data(path: str | Path) -> Any:
    """An inventory file's YAML data, not validated (``{}`` for an empty file).

    Raises:
        ServedeckError: missing, too large, not UTF-8, a YAML error or beyond
            :data:`servedeck.yamlio.LIMITS` (naming the file and line).
    """
    from servedeck.fsutil import read_bounded
    from servedeck.yamlio import LIMITS, YAMLError, file_error, load_data
    path = Path(path)
    try:
        return load_data(read_bounded(path, LIMITS.max_bytes, what="inventory")) or {}
    except FileNotFoundError:
        raise ServedeckError("inventory file not found", file=str(path),
                             hint="create deploy/hosts.yaml or pass --inventory FILE "
                                  "(or set SERVEDECK_INVENTORY)") from None
    except YAMLError as exc:
        raise file_error(exc, path) from None


def inventory_ssh_target(data: Any, name: str) -> SshTarget | None:
    """Host ``name``'s target in an inventory's plain ``data`` (:func:`read_inventory_data`),
    or None when the entry is not plainly one (the validated load says what is wrong)."""
    try:
        return SshTarget(**data["hosts"][name]["ssh"])
    except Exception:  # noqa: BLE001 - best effort: any fault is reported by the validated load
        return None
