"""``ports/*``: the container ports a service publishes against the port its server listens on
(Compose Specification ``ports``, short and long syntax; ``network_mode: host`` ignores them),
and the host ports the project's containers bind: one container per host port, address and
protocol (Docker: "Bind for 0.0.0.0:8000 failed: port is already allocated").
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from servedeck.compose.document import Port
from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import network_siblings, port_range, port_specs, replicas, server_port


def check_ports(ctx: Ctx, svc: Service) -> None:
    """``ports/*``: published container port vs the port the server listens on."""
    host_net = svc.data.get("network_mode") == "host"
    ports = svc.data.get("ports")
    path = svc.path + ("ports",)
    if host_net and ports:
        ctx.warning("ports/ignored-with-host-network", path,
                    "network_mode: host ignores `ports`; the server is reachable on its own port on "
                    "the host directly", "drop `ports`, or use the default bridge network")
        return
    if svc.launcher is None:
        return
    mode = str(svc.data.get("network_mode") or "")
    if not ports and not host_net and not svc.data.get("expose") \
            and not mode.startswith(("service:", "container:")) and not network_siblings(ctx, svc):
        ctx.warning("ports/none", svc.path,
                    "the server publishes no ports and does not use the host network; nothing outside "
                    "the container can reach it", "add ports: [\"PORT:PORT\"]", key=True)
        return
    port = svc.eff("port")
    if not isinstance(port, int) or isinstance(port, bool):
        return
    specs = port_specs(svc)
    if any(s.lo is None for s in specs) or not specs:
        return  # interpolated or unparsable: cannot judge
    if not any(s.covers(port) for s in specs):
        e = svc.effective.get("port")
        how = {"flag": f"--port {port}", "image": f"the image default port {port}",
               "launcher-config": f"the port of the image's launcher config, {port}"}.get(
            e.source if e else "image", str(port))
        published = ", ".join(s.text for s in specs)
        ctx.error("ports/mismatch", specs[0].path,
                  f"ports publish container port(s) {published} but the server listens on {port} ({how})",
                  f"publish \"{port}:{port}\" or change --port")


@dataclass(frozen=True)
class HostBinding:
    """One host port a service's container binds: address (None: every address), port range,
    protocol, and the document path of the entry."""

    service: str
    ip: str | None
    lo: int
    hi: int
    protocol: str
    path: Path

    def overlaps(self, other: "HostBinding") -> bool:
        if self.protocol != other.protocol or self.hi < other.lo or other.hi < self.lo:
            return False
        return _same_address(self.ip, other.ip)


def _same_address(a: str | None, b: str | None) -> bool:
    """Two bind addresses that take the same port: equal, or one of them every address."""
    wild = {None, "", "0.0.0.0", "::", "[::]"}
    if a in wild or b in wild:
        return True
    try:
        return ipaddress.ip_address(str(a).strip("[]")) == ipaddress.ip_address(str(b).strip("[]"))
    except ValueError:
        return a == b


def host_bindings(svc: Service) -> list[HostBinding]:
    """The host ports the service's container binds: its published ports with a host port, and,
    on the host network, the port its server listens on."""
    out = []
    for i, item in enumerate(svc.data.get("ports") or []):
        if isinstance(item, bool) or not isinstance(item, (int, str, dict)):
            continue
        try:
            port = Port.parse(item)
        except ValueError:
            continue
        lo, hi = port_range(str(port.published or ""))
        if lo is None or hi is None:
            continue  # no host port: Docker picks a free one
        out.append(HostBinding(svc.name, getattr(port, "host_ip", None) or None, lo, hi,
                               str(getattr(port, "protocol", None) or "tcp"), svc.path + ("ports", i)))
    if svc.data.get("network_mode") == "host" and svc.launcher is not None:
        listen = server_port(svc)
        if listen is not None:
            out.append(HostBinding(svc.name, None, listen, listen, "tcp", svc.path + ("network_mode",)))
    return out


def check_host_ports(ctx: Ctx, svcs: list[Service]) -> None:
    """``ports/host-port-conflict`` and ``ports/host-port-replicas``: a host port (with its
    address and protocol) can be bound by one container only; the second fails with "Bind for
    0.0.0.0:8000 failed: port is already allocated" (replicas of one service included)."""
    seen: list[tuple[HostBinding, frozenset[str]]] = []
    for svc in svcs:
        mine = host_bindings(svc)
        profiles = _profiles(svc)
        if replicas(svc) > 1:
            for b in mine:
                if b.path[-2:-1] == ("ports",) and b.hi - b.lo + 1 < replicas(svc):
                    ctx.error("ports/host-port-replicas", b.path,
                              f"{svc.name} runs {replicas(svc)} replicas that all publish host port "
                              f"{_show(b)}: only the first container can bind it (\"port is already "
                              f"allocated\")", "publish a host port range, or leave the host port out")
        for b in mine:
            clash = next((o for o, theirs in seen if o.overlaps(b) and not _alternatives(profiles, theirs)), None)
            if clash is not None:
                who = "itself" if clash.service == b.service else clash.service
                ctx.error("ports/host-port-conflict", b.path,
                          f"{b.service} binds host port {_show(b)}, which {who} binds already "
                          f"({_show(clash)}): the second container cannot start (\"Bind for "
                          f"{b.ip or '0.0.0.0'}:{b.lo} failed: port is already allocated\")",
                          "give each service its own host port")
        seen += [(b, profiles) for b in mine]


def _profiles(svc: Service) -> frozenset[str]:
    """The Compose profiles a service belongs to (none: it always runs)."""
    p = svc.data.get("profiles")
    return frozenset(str(x) for x in p) if isinstance(p, list) else frozenset()


def _alternatives(a: frozenset[str], b: frozenset[str]) -> bool:
    """Two services of disjoint profiles (``profiles: [cpu]`` / ``[gpu]``): Compose starts them
    together only when both profiles are enabled, so a shared host port is a choice between
    them, not a clash."""
    return bool(a) and bool(b) and not (a & b)


def _show(b: HostBinding) -> str:
    port = f"{b.lo}" if b.lo == b.hi else f"{b.lo}-{b.hi}"
    return (f"{b.ip}:" if b.ip else "") + port + ("" if b.protocol == "tcp" else f"/{b.protocol}")
