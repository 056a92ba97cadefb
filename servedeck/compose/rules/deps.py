"""``deps/*``: ``depends_on`` across the services of one project.

Compose's facts (docker/compose ``pkg/compose/convergence.go``, compose-go's loader): a
``depends_on`` entry with ``condition: service_healthy`` waits for the dependency's health
status, and a container without a healthcheck (none in the service, none in its image) has
none: ``docker compose up`` ends with "dependency failed to start: container ... has no
healthcheck configured" (older docker-compose: 'Service "x" is missing a healthcheck
configuration'); ``service_completed_successfully`` waits for the dependency to exit 0, which a
server never does; a dependency on a service the file does not define, or a cycle, makes
Compose refuse the file. So does an ``extends`` of a service the file does not have ("cannot
extend service "a" in FILE: service "x" not found"), one that comes back to itself ("Circular
reference"), or one whose ``file`` cannot be read or parsed ("open FILE: no such file or
directory", "read FILE: is a directory", "failed to parse FILE: ..."): Compose v2.40.3's
``docker compose config`` on such files.
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import healthcheck, server_port


def check_depends_on(ctx: Ctx, svcs: list[Service]) -> None:
    """``deps/*`` over the document's services."""
    _depends_on(ctx, svcs, {s.name: s for s in svcs})
    _cycles(ctx, svcs)
    _extends(ctx, svcs)


def _extends(ctx: Ctx, svcs: list[Service]) -> None:
    """``deps/extends-unknown-service``, ``deps/extends-cycle`` and ``deps/extends-file-unreadable``:
    the ``extends`` a service still holds once the document is read
    (:func:`servedeck.compose.document.resolve_extends` merges every one it can resolve) whose
    base is in this file, or in another file the caller read (``CheckExpectations.extends_files``:
    a file that could not be read or parsed is :class:`~servedeck.compose.document.Unreadable`);
    a base in a file the caller did not read is not judged."""
    from servedeck.compose.document import Unreadable
    graph: dict[str, list[str]] = {}
    for svc in svcs:
        spec = svc.data.get("extends")
        base = spec if isinstance(spec, str) else spec.get("service") if isinstance(spec, dict) else None
        if not isinstance(base, str):
            continue
        as_written = (ctx.doc.data.get("services") or {}).get(svc.name)  # the file's name: extends_files' key
        raw = as_written.get("extends") if isinstance(as_written, dict) else None
        other = raw.get("file") if isinstance(raw, dict) else None
        if other is None:
            pool = ctx.doc.data.get("services") or {}
            graph[svc.name] = [base]
        else:
            if str(other) not in ctx.expect.extends_files:
                continue  # a file the caller did not read
            doc = ctx.expect.extends_files[str(other)]
            if isinstance(doc, Unreadable):
                ctx.error("deps/extends-file-unreadable", svc.path + ("extends", "file"),
                          f"service {svc.name} extends {base!r} in {other}, which cannot be read "
                          f"({doc.reason}): Compose refuses the file",
                          "correct the path, or create the file there")
                continue
            pool = (doc.get("services") if isinstance(doc, dict) else None) or {}  # an empty file: none
        if not isinstance(pool, dict) or base not in pool:
            ctx.error("deps/extends-unknown-service", svc.path + ("extends",),
                      f"service {svc.name} extends {base!r}, which {'this file' if other is None else other} "
                      f"does not define: Compose refuses the file (\"service {base!r} not found\")",
                      "name a service the file defines (`extends: {file: F, service: NAME}` for another file)")
    for svc, cycle in _each_cycle(graph, svcs):
        ctx.error("deps/extends-cycle", svc.path + ("extends",),
                  f"extends comes back to where it started ({' -> '.join(cycle)}): Compose refuses the file "
                  "(\"Circular reference\")", "let one of them extend none")


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


def _cycle_from(graph: dict[str, list[str]], node: str, stack: list[str]) -> list[str] | None:
    """The first dependency cycle reached from ``node`` (its services, the first repeated at the
    end), with ``stack`` the path that led to it; None when there is none."""
    if node in stack:
        return stack[stack.index(node):] + [node]
    if node not in graph:
        return None
    stack.append(node)
    for nxt in graph[node]:
        found = _cycle_from(graph, nxt, stack)
        if found:
            return found
    stack.pop()
    return None


def _each_cycle(graph: dict[str, list[str]], svcs: list[Service]) -> list[tuple[Service, list[str]]]:
    """Each cycle of ``graph`` (service name -> the names it needs) once, with the service it is
    reported at (its first)."""
    out: list[tuple[Service, list[str]]] = []
    reported: set[frozenset[str]] = set()
    for start in graph:
        cycle = _cycle_from(graph, start, [])
        if cycle and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            out.append((next(s for s in svcs if s.name == cycle[0]), cycle))
    return out


def _cycles(ctx: Ctx, svcs: list[Service]) -> None:
    graph = {s.name: [d for d, *_ in dependencies(s)] for s in svcs}
    for svc, cycle in _each_cycle(graph, svcs):
        ctx.error("deps/cycle", svc.path + ("depends_on",),
                  f"depends_on forms a cycle ({' -> '.join(cycle)}): Compose refuses the file "
                  f"(\"dependency cycle detected\")", "drop one of the dependencies")
