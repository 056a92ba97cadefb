"""Rules across the services of one project: ``deps/*`` (``depends_on``), ``ports/host-port-*``
(host ports two containers cannot both bind), ``container/name-*``.

Compose's facts (docker/compose ``pkg/compose/convergence.go``, compose-go's loader): a
``depends_on`` entry with ``condition: service_healthy`` waits for the dependency's health
status, and a container without a healthcheck (none in the service, none in its image) has
none: ``docker compose up`` ends with "dependency failed to start: container ... has no
healthcheck configured" (older docker-compose: 'Service "x" is missing a healthcheck
configuration'); ``service_completed_successfully`` waits for the dependency to exit 0, which a
server never does; a dependency on a service the file does not define, or a cycle, makes
Compose refuse the file. A host port (with its address and protocol) can be bound by one
container only: the second fails with "Bind for 0.0.0.0:8000 failed: port is already
allocated" (replicas of one service included); ``container_name`` is one container's name.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from servedeck.compose import document
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import healthcheck, server_port
from servedeck.compose.rules._service import Ctx, Service


def check_project(ctx: Ctx, svcs: list[Service]) -> None:
    """Every cross-service rule of this module over the document's services."""
    by_name = {s.name: s for s in svcs}
    _depends_on(ctx, svcs, by_name)
    _cycles(ctx, svcs)
    _host_ports(ctx, svcs)
    _container_names(ctx, svcs)


# ----------------------------------------------------------------------------- depends_on

def dependencies(svc: Service) -> list[tuple[str, str, bool, Path]]:
    """(service, condition, required, document path) of ``depends_on``, short (list: the
    condition is ``service_started``) or long syntax."""
    deps = svc.data.get("depends_on")
    base = svc.path + ("depends_on",)
    out = []
    if isinstance(deps, list):
        out = [(str(d), "service_started", True, base + (i,)) for i, d in enumerate(deps) if isinstance(d, str)]
    elif isinstance(deps, dict):
        for name, spec in deps.items():
            spec = spec if isinstance(spec, dict) else {}
            out.append((str(name), str(spec.get("condition") or "service_started"), spec.get("required") is not False,
                        base + (str(name),)))
    return out


def _no_healthcheck(svc: Service) -> bool | None:
    """True when the container has no healthcheck (none in the service, the image has none or
    the service disables it), False when it has one, None when it cannot be told (the image's
    own HEALTHCHECK is unknown)."""
    hc = svc.data.get("healthcheck")
    if isinstance(hc, dict):
        if hc.get("disable") is True or hc.get("test") in (["NONE"], "NONE"):
            return True
        return healthcheck(svc) is None and not hc.get("test")
    if svc.facts is not None and svc.facts.healthcheck is not None:
        return not svc.facts.healthcheck
    if svc.launcher is not None:
        return True  # a vLLM server image servedeck knows: vLLM's images define no HEALTHCHECK
    return None


def _depends_on(ctx: Ctx, svcs: list[Service], by_name: dict[str, Service]) -> None:
    for svc in svcs:
        for name, condition, required, path in dependencies(svc):
            dep = by_name.get(name)
            if dep is None:
                ctx.error("deps/unknown-service", path,
                          f"{svc.name} depends on {name!r}, which the file does not define: Compose refuses "
                          f"the file (\"depends on undefined service\")",
                          f"name one of: {', '.join(by_name)}" if by_name else "define the service")
                continue
            if condition == "service_healthy":
                missing = _no_healthcheck(dep)
                if missing is None:
                    ctx.warning("deps/healthy-needs-healthcheck", path,
                                f"{svc.name} waits for {name} to be service_healthy, but {name} defines no "
                                f"healthcheck: unless its image has a HEALTHCHECK, Compose cannot tell when it "
                                f"is healthy and {svc.name} never starts",
                                f"give {name} a healthcheck (test on its /health)")
                elif missing:
                    report = ctx.error if required else ctx.warning
                    port = server_port(dep) or 8000
                    report("deps/healthy-needs-healthcheck", path,
                           f"{svc.name} waits for {name} to be service_healthy, but {name} has no healthcheck "
                           f"(none in the service, none in its image): `docker compose up` ends with "
                           f"\"dependency failed to start: container ... has no healthcheck configured\" and "
                           f"{svc.name} never starts",
                           f"give {name} a healthcheck, e.g. test: [\"CMD\", \"python3\", \"-c\", \"import "
                           f"urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', "
                           f"timeout=5)\"] with a start_period that covers its startup; or wait for "
                           f"condition: service_started")
            elif condition == "service_completed_successfully" and dep.launcher is not None:
                ctx.error("deps/waits-for-server-to-exit", path,
                          f"{svc.name} waits for {name} to complete successfully, but {name} is a server that "
                          f"runs until stopped: {svc.name} never starts",
                          "use condition: service_healthy (with a healthcheck) or service_started")


def _cycles(ctx: Ctx, svcs: list[Service]) -> None:
    graph = {s.name: [d for d, *_ in dependencies(s)] for s in svcs}
    reported: set[frozenset[str]] = set()
    for start in graph:
        stack: list[str] = []

        def visit(node: str) -> list[str] | None:
            if node in stack:
                return stack[stack.index(node):] + [node]
            if node not in graph:
                return None
            stack.append(node)
            for nxt in graph[node]:
                found = visit(nxt)
                if found:
                    return found
            stack.pop()
            return None

        cycle = visit(start)
        if cycle and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            svc = next(s for s in svcs if s.name == cycle[0])
            ctx.error("deps/cycle", svc.path + ("depends_on",),
                      f"depends_on forms a cycle ({' -> '.join(cycle)}): Compose refuses the file "
                      f"(\"dependency cycle detected\")", "drop one of the dependencies")


# ----------------------------------------------------------------------------- host ports

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


def _range(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    lo, _, hi = str(text).partition("-")
    if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()):
        return None
    return int(lo), int(hi or lo)


def _replicas(svc: Service) -> int:
    n = (svc.data.get("deploy") or {}).get("replicas") if isinstance(svc.data.get("deploy"), dict) else None
    n = svc.data.get("scale", n)
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


def host_bindings(svc: Service) -> list[HostBinding]:
    """The host ports the service's container binds: its published ports with a host port, and,
    on the host network, the port its server listens on."""
    out = []
    for i, item in enumerate(svc.data.get("ports") or []):
        if isinstance(item, bool) or not isinstance(item, (int, str, dict)):
            continue
        try:
            port = document.Port.parse(item)
        except ValueError:
            continue
        published = _range(getattr(port, "published", None))
        if published is None:
            continue  # no host port: Docker picks a free one
        out.append(HostBinding(svc.name, getattr(port, "host_ip", None) or None, *published,
                               str(getattr(port, "protocol", None) or "tcp"), svc.path + ("ports", i)))
    if svc.data.get("network_mode") == "host" and svc.launcher is not None:
        port = server_port(svc)
        if port is not None:
            out.append(HostBinding(svc.name, None, port, port, "tcp", svc.path + ("network_mode",)))
    return out


def _host_ports(ctx: Ctx, svcs: list[Service]) -> None:
    seen: list[HostBinding] = []
    for svc in svcs:
        mine = host_bindings(svc)
        if _replicas(svc) > 1:
            for b in mine:
                if b.path[-2:-1] == ("ports",):
                    ctx.error("ports/host-port-replicas", b.path,
                              f"{svc.name} runs {_replicas(svc)} replicas that all publish host port "
                              f"{_show(b)}: only the first container can bind it (\"port is already "
                              f"allocated\")", "publish a host port range, or leave the host port out")
        for b in mine:
            clash = next((o for o in seen if o.overlaps(b)), None)
            if clash is not None:
                who = "itself" if clash.service == b.service else clash.service
                ctx.error("ports/host-port-conflict", b.path,
                          f"{b.service} binds host port {_show(b)}, which {who} binds already "
                          f"({_show(clash)}): the second container cannot start (\"Bind for "
                          f"{b.ip or '0.0.0.0'}:{b.lo} failed: port is already allocated\")",
                          "give each service its own host port")
        seen += mine


def _show(b: HostBinding) -> str:
    port = f"{b.lo}" if b.lo == b.hi else f"{b.lo}-{b.hi}"
    return (f"{b.ip}:" if b.ip else "") + port + ("" if b.protocol == "tcp" else f"/{b.protocol}")


# ----------------------------------------------------------------------------- container names

def _container_names(ctx: Ctx, svcs: list[Service]) -> None:
    names: dict[str, Service] = {}
    for svc in svcs:
        name = svc.data.get("container_name")
        if not isinstance(name, str) or not name:
            continue
        path = svc.path + ("container_name",)
        if _replicas(svc) > 1:
            ctx.error("container/name-with-replicas", path,
                      f"{svc.name} sets container_name {name!r} and runs {_replicas(svc)} replicas: a name "
                      f"belongs to one container, Compose refuses to scale it", "drop container_name")
        other = names.get(name)
        if other is not None:
            ctx.error("container/name-conflict", path,
                      f"{svc.name} and {other.name} both set container_name {name!r}: the second container "
                      f"cannot be created (\"Conflict. The container name ... is already in use\")",
                      "give each service its own container_name, or none")
        names[name] = svc

