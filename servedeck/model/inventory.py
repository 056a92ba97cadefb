"""The host inventory (``deploy/hosts.yaml``): where profiles are deployed.

File format (YAML 1.2; JSON Schema ``schema/hosts.schema.json``)::

    hosts:
      b70:
        ssh: {alias: b70}                 # or {hostname, port, user, identity_file}
        workdir: /srv/llm/b70             # absolute; the compose file lives here
        render_gid: "992"                 # gid of /dev/dri/renderD* on that host
        port: 9932                        # the served API port
        ready_timeout_s: 1800             # optional, default 30 min
        container_name: b70               # optional: overrides the profile's container_name
        host_port: 9932                   # optional: overrides the profile's published port
        card: arc-pro-b70                 # optional: the card (servedeck/model/cards.py table)
        memory_bandwidth_gb_s: 560        # optional: overrides the card's (or a measured) figure
    groups:                               # optional: named sets of hosts (fleet commands)
      lab: [b70]
        sysfs_root: /sys                  # optional; where the card's hwmon power limit is

``container_name`` and ``host_port`` let several deployments share one Docker engine (the
loopback test fleet) or give each host of a fleet its own name and port without a profile per
host. ``groups`` name hosts for ``invoke deploy --hosts GROUP`` and ``invoke sweep``; a group
``all`` is implicit.
``--inventory FILE`` or ``$SERVEDECK_INVENTORY`` selects another file (tests use their own).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servedeck.errors import ServedeckError
from servedeck.grammar import HOST_NAME_RE, check_all
from servedeck.model.ssh_target import SshTarget, read_inventory_data

if TYPE_CHECKING:
    from servedeck.model.profile import Profile

DEFAULT_READY_TIMEOUT_S = 1800.0


class HostEntry(BaseModel):
    """One card host.

    Attributes:
        ssh: how to reach it (see :class:`servedeck.model.ssh_target.SshTarget`).
        workdir: absolute working directory on the host (compose file, models/, cache/).
        render_gid: expected group id of the GPU render node, as a string (``"992"``);
            None when the host has no GPU (CPU serving).
        port: the served API's port on the host.
        ready_timeout_s: readiness timeout in seconds (the real image compiles for minutes).
        api_host: address the API is reached at from here (default: the SSH hostname).
        container_name: overrides the profile's ``container.container_name`` on this host.
        host_port: overrides the profile's ``container.host_port`` (the port published on the
            host); ``port`` defaults to it and must equal it when both are given.
        sysfs_root: where sysfs is mounted on the host (``/sys``); the card's power limit is
            read and set under it (:mod:`servedeck.host.power`). Tests point it at a stand-in
            tree, since the test machine has no GPU.
        card: the host's card, an id of the shipped table (:mod:`servedeck.model.cards`,
            ``arc-pro-b70``, ``rtx-4090``, ``cpu``): the roofline's ceilings. None: recognised
            from ``nvidia-smi``, else matched by the device kind and the memory the startup log
            states.
        memory_bandwidth_gb_s / matrix_fp16_tflops / matrix_int8_tops: this host's own
            figures (GB/s, dense TFLOPS / TOPS), overriding the card table's and a measured one.
    """

    model_config = ConfigDict(extra="forbid")

    ssh: SshTarget
    workdir: str
    render_gid: str | None = None
    port: int = Field(default=8000, ge=1, le=65535)
    ready_timeout_s: float = Field(default=DEFAULT_READY_TIMEOUT_S, gt=0)
    api_host: str | None = None
    container_name: str | None = None
    host_port: int | None = Field(default=None, ge=1, le=65535)
    sysfs_root: str = "/sys"
    card: str | None = None
    memory_bandwidth_gb_s: float | None = Field(default=None, gt=0)
    matrix_fp16_tflops: float | None = Field(default=None, gt=0)
    matrix_int8_tops: float | None = Field(default=None, gt=0)

    @field_validator("card")
    @classmethod
    def _known_card(cls, v: str | None) -> str | None:
        if v is not None:
            from servedeck.model.cards import card
            try:
                card(v)
            except KeyError as exc:
                raise ValueError(exc.args[0]) from None
        return v

    @model_validator(mode="after")
    def _port_follows_host_port(self) -> "HostEntry":
        if self.host_port is not None:
            if "port" not in self.model_fields_set:
                self.port = self.host_port
            elif self.port != self.host_port:
                raise ValueError(f"port {self.port} and host_port {self.host_port} differ: the API "
                                 "is served on the published port (drop port or make them equal)")
        return self

    def place(self, profile: "Profile", image: str | None = None) -> "Profile":
        """``profile`` as this host runs it: with ``image`` (a deploy's ``--image``, a
        digest-pinned reference) in place of its own, and this host's ``container_name`` /
        ``host_port`` overrides applied (the same object when nothing is replaced).

        Raises:
            ServedeckError: ``image`` is not a digest-pinned reference.
        """
        if image:
            try:
                profile = type(profile).model_validate({**profile.model_dump(exclude_unset=True), "image": image})
            except ValidationError as exc:
                raise ServedeckError(f"--image {image[:200]!r}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}",
                                     field="image", hint="give a digest-pinned reference: "
                                                         "REPOSITORY[:TAG]@sha256:<64 hex>") from None
        container: dict = {}
        if self.container_name is not None:
            container["container_name"] = self.container_name
        if self.host_port is not None:
            container["host_port"] = self.host_port
        if not container:
            return profile
        return profile.model_copy(update={"container": profile.container.model_copy(update=container)})

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
    groups: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("hosts")
    @classmethod
    def _host_names(cls, v: dict[str, HostEntry]) -> dict[str, HostEntry]:
        return check_all(HOST_NAME_RE, v, "host name", "letters, digits, '.', '_', '-', starting with a "
                         "letter or digit (it names run records and files)")

    @model_validator(mode="after")
    def _group_members_exist(self) -> "Inventory":
        for group, members in self.groups.items():
            unknown = [m for m in members if m not in self.hosts]
            if unknown:
                raise ValueError(f"group {group!r} names unknown host(s) {', '.join(unknown)}")
        return self


def shared_deployments(hosts: dict[str, HostEntry]) -> list[str]:
    """Findings for inventory hosts that are one deployment under two names: the same SSH
    target (alias or hostname, port, user, ssh config) and the same working directory, hence the
    same Compose project (:func:`servedeck.grammar.compose_project_name`) on the same engine: a
    deploy to one replaces the other's server. Different working directories never share a
    project. One message per pair, naming both hosts and the project."""
    from servedeck.grammar import compose_project_name
    seen: dict[tuple, str] = {}
    out = []
    for name, entry in hosts.items():
        s = entry.ssh
        key = (s.alias or s.hostname, s.port, s.user, s.ssh_config, compose_project_name(entry.workdir))
        if key in seen:
            out.append(f"hosts {seen[key]} and {name} are one deployment: the same SSH target and "
                       f"working directory {entry.workdir} (Compose project {key[-1]}); a deploy to "
                       f"one replaces the other's server")
        else:
            seen[key] = name
    return out


def load_inventory(path: str | Path, raw: Any = None) -> Inventory:
    """Read and validate an inventory file (``raw``: its YAML data, when the caller has read
    it already).

    Raises:
        ServedeckError: missing file, YAML error or invalid entry (file + field path).
    """
    path = Path(path)
    if raw is None:
        raw = read_inventory_data(path)
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
