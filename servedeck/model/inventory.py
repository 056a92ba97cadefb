"""The host inventory (``deploy/hosts.yaml``): where profiles are deployed.

File format (YAML 1.2; JSON Schema ``schema/hosts.schema.json``)::

    hosts:
      b70:
        ssh: {alias: b70}                 # or {hostname, port, user, identity_file}
        workdir: /srv/llm/b70             # absolute; the compose file lives here
        render_gid: "992"                 # gid of /dev/dri/renderD* on that host
        port: 9932                        # the served API port
        ready_timeout_s: 1800             # optional, default 30 min
        sysfs_root: /sys                  # optional; where the card's hwmon power limit is

``--inventory FILE`` or ``$SERVEDECK_INVENTORY`` selects another file (tests use their own).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from servedeck.errors import ServedeckError
from servedeck.host.remote import SshTarget

DEFAULT_READY_TIMEOUT_S = 1800.0


class HostEntry(BaseModel):
    """One card host.

    Attributes:
        ssh: how to reach it (see :class:`servedeck.host.remote.SshTarget`).
        workdir: absolute working directory on the host (compose file, models/, cache/).
        render_gid: expected group id of the GPU render node, as a string (``"992"``);
            None when the host has no GPU (CPU serving).
        port: the served API's port on the host.
        ready_timeout_s: readiness timeout in seconds (the real image compiles for minutes).
        api_host: address the API is reached at from here (default: the SSH hostname).
        sysfs_root: where sysfs is mounted on the host (``/sys``); the card's power limit is
            read and set under it (:mod:`servedeck.host.power`). Tests point it at a stand-in
            tree, since the test machine has no GPU.
    """

    model_config = ConfigDict(extra="forbid")

    ssh: SshTarget
    workdir: str
    render_gid: str | None = None
    port: int = Field(default=8000, ge=1, le=65535)
    ready_timeout_s: float = Field(default=DEFAULT_READY_TIMEOUT_S, gt=0)
    api_host: str | None = None
    sysfs_root: str = "/sys"

    @field_validator("workdir", "sysfs_root")
    @classmethod
    def _absolute(cls, v: str, info) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{info.field_name} {v!r} must be an absolute path on the host")
        return v.rstrip("/") or "/"


class Inventory(BaseModel):
    """Top level of ``deploy/hosts.yaml``."""

    model_config = ConfigDict(extra="forbid")

    hosts: dict[str, HostEntry] = Field(default_factory=dict)


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file.

    Raises:
        ServedeckError: missing file, YAML error or invalid entry (file + field path).
    """
    path = Path(path)
    try:
        raw = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ServedeckError("inventory file not found", file=str(path),
                             hint="create deploy/hosts.yaml or pass --inventory FILE "
                                  "(or set SERVEDECK_INVENTORY)") from None
    except YAMLError as exc:
        raise ServedeckError(f"not valid YAML: {exc}", file=str(path)) from None
    try:
        return Inventory.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ServedeckError(err["msg"].removeprefix("Value error, "), file=str(path),
                             field=loc, hint="see servedeck/inventory.py for the format") from None


def get_host(inventory: Inventory, name: str, path: str | Path) -> HostEntry:
    """The entry ``name``.

    Raises:
        ServedeckError: unknown host, with the closest names.
    """
    if name not in inventory.hosts:
        close = difflib.get_close_matches(name, list(inventory.hosts), n=3)
        hint = (f"did you mean {', '.join(close)}?" if close
                else f"hosts: {', '.join(inventory.hosts) or '(none)'}")
        raise ServedeckError(f"no host named {name!r}", file=str(path), field="hosts", hint=hint)
    return inventory.hosts[name]
