"""Open an inventory host: its :class:`~servedeck.host.remote.RemoteHost` and inventory entry,
the SSH session started as early as the inventory's plain data allows.

A host's login shell takes 0.1 to 0.3 s to start a session. :func:`open_host` reads the host's
target from the inventory file's plain data (:mod:`servedeck.model.ssh_target`: no pydantic) and
starts the session first, so that the session opens while the validated inventory (pydantic) and
the host layer import; the validated entry then decides whether that session is kept. This
module imports only the SSH transport and the plain target at import time, for that reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from servedeck.errors import ServedeckError
from servedeck.host.ssh import SshTransport
from servedeck.model.ssh_target import inventory_ssh_target, read_inventory_data

if TYPE_CHECKING:
    from servedeck.host.remote import RemoteHost
    from servedeck.model.inventory import HostEntry


def early_session(name: str, inventory: Path) -> tuple[Any, SshTransport | None]:
    """``(the inventory's plain data, an SshTransport opening its session)`` for host ``name``;
    ``(None, None)`` when the file cannot be read as data or the entry is not plainly an SSH
    target (the validated load that follows says what is wrong)."""
    try:
        raw = read_inventory_data(inventory)
    except ServedeckError:
        return None, None
    target = inventory_ssh_target(raw, name)
    if target is None:
        return None, None
    transport = SshTransport(name, target)
    transport.open_session_soon()
    return raw, transport


def open_host(name: str, inventory: Path, *, session_soon: bool = False) -> tuple[RemoteHost, HostEntry]:
    """The inventory host ``name`` as ``(RemoteHost, HostEntry)``; with ``session_soon`` its SSH
    session starts first (:func:`early_session`) and is kept when its target is the one the
    inventory validates to, else dropped for a session of the validated target.

    Raises:
        ServedeckError: the inventory file is missing or invalid, or names no such host.
    """
    raw, early = early_session(name, inventory) if session_soon else (None, None)
    from servedeck.host.remote import RemoteHost
    from servedeck.model.inventory import get_host, load_inventory
    entry = get_host(load_inventory(inventory, raw), name, inventory)
    if early is not None and early.target != entry.ssh:
        early.close()
        early = None
    remote = RemoteHost(name, entry.ssh, entry.workdir, transport=early)
    if session_soon and early is None:
        remote.transport.open_session_soon()
    return remote, entry
