"""Accessors the newer rule families use instead of reading argv or the document themselves:
the release facts that judge a service, its environment entries, its healthcheck and the
``vllm serve`` flag occurrences (as its launcher read them: :mod:`servedeck.compose.service`).

Keeping rules on these few functions lets the argv grammar underneath change without touching
the rules.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servedeck.compose.document import Port
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._context import Ctx, Flag, Service

if TYPE_CHECKING:
    from servedeck.vllm.facts import TableChoice


def judge(ctx: Ctx, svc: Service, need: str) -> TableChoice | None:
    """:func:`servedeck.vllm.facts.table_for` of ``svc``'s image for ``need`` (``serve_args``,
    ``env_vars``, ``json_configs`` ...), memoised per check run. None when nothing fits."""
    cache = ctx.memo
    key = ("judge", svc.name, need)
    if key not in cache:
        from servedeck.vllm.facts import table_for
        own = own_facts(ctx, svc)
        cache[key] = table_for(svc.facts.vllm_version if svc.facts else None, need, own)
    return cache[key]


def own_facts(ctx: Ctx, svc: Service) -> Any:
    """The vLLM facts extracted from ``svc``'s image itself (the catalog's, by digest), or None."""
    if svc.image is not None and svc.image.digest and ctx.catalog is not None:
        from servedeck.vllm.facts import image_vllm_facts
        return image_vllm_facts(ctx.catalog, svc.image.digest)
    return None


def served_model(svc: Service) -> str | None:
    """The model (path or repo id, as written) the service's server serves (its launcher's
    reading: the model argument as the image's release reads it, or the launcher's own model
    option). None when none is given or the start is unknown."""
    return svc.launch.served_model if svc.launcher is not None else None


def vllm_flags(svc: Service) -> list[Flag]:
    """``vllm serve`` flag occurrences in order (a launcher's passthrough or the whole command)."""
    return list(svc.launch.flags) if svc.launcher is not None else []


def env_value(svc: Service, key: str) -> str | None:
    """The last value the server gets for ``key`` from the service itself (env_file,
    environment, argv: :attr:`servedeck.compose.service.Service.env_items`; None when absent)."""
    val = None
    for e in svc.env_items:
        if e.key == key:
            val = e.value
    return val


def server_environment(svc: Service) -> dict[str, str]:
    """The variables the server process has: the image's ``ENV``, then the service's and what
    its launcher sets over them (:meth:`~servedeck.compose.service.Service.server_env`), a later
    value winning."""
    env = dict(svc.facts.env) if svc.facts is not None else {}
    env.update(svc.server_env())
    return env


@dataclass(frozen=True)
class Healthcheck:
    """A service's healthcheck: ``argv`` (words after CMD / of CMD-SHELL), ``shell`` form,
    ``start_period`` in seconds (None when unset), and its document path."""

    argv: list[str]
    shell: bool
    start_period: float | None
    path: Path


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)")
_UNIT_S = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def parse_duration(text: Any) -> float | None:
    """Compose duration (``1m30s``, ``900s``, ``5m``) → seconds; None when unparsable."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str) or not text.strip():
        return None
    parts = _DURATION.findall(text.strip())
    if not parts or "".join(a + b for a, b in parts) != text.strip():
        return None
    return sum(float(a) * _UNIT_S[b] for a, b in parts)


def healthcheck(svc: Service) -> Healthcheck | None:
    """The healthcheck, or None when absent, disabled, or not readable."""
    hc = svc.data.get("healthcheck")
    if not isinstance(hc, dict) or hc.get("disable") is True:
        return None
    test = hc.get("test")
    path = svc.path + ("healthcheck",)
    if isinstance(test, str):
        argv, shell = test.split(), True
    elif isinstance(test, list) and test:
        head = str(test[0])
        if head == "NONE":
            return None
        shell = head == "CMD-SHELL"
        rest = [str(t) for t in test[1:]] if head in ("CMD", "CMD-SHELL") else [str(t) for t in test]
        if shell:
            try:
                argv = shlex.split(" ".join(rest))
            except ValueError:
                argv = " ".join(rest).split()
        else:
            argv = rest
    else:
        return None
    return Healthcheck(argv, shell, parse_duration(hc.get("start_period")), path)


_URL = re.compile(r"https?://(?P<host>\[[^\]]+\]|[^/:'\"\s]+)(?::(?P<port>\d+))?(?P<path>/[^'\"\s)]*)?")


def healthcheck_urls(hc: Healthcheck) -> list[tuple[str, int | None, str]]:
    """(host, port, path) of every http(s) URL in the healthcheck command."""
    out = []
    for word in hc.argv:
        for m in _URL.finditer(word):
            out.append((m["host"], int(m["port"]) if m["port"] else None, m["path"] or "/"))
    return out


@dataclass(frozen=True)
class PortSpec:
    """Container side of one published port entry (a range when ``hi > lo``)."""

    lo: int | None
    hi: int | None
    text: str
    path: Path

    def covers(self, port: int) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= port <= self.hi


def port_range(text: str) -> tuple[int | None, int | None]:
    """(first, last) port of ``"8000"`` or ``"8000-8010"``; (None, None) for anything else."""
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if not m:
        return None, None
    lo = int(m[1])
    return lo, int(m[2]) if m[2] else lo


def port_specs(svc: Service) -> list[PortSpec]:
    """Parse ``ports`` (short ``[IP:][HOST:]CONTAINER[/proto]`` and long ``target:`` syntax)."""
    out: list[PortSpec] = []
    ports = svc.data.get("ports")
    if not isinstance(ports, list):
        return out
    for i, item in enumerate(ports):
        if isinstance(item, bool) or not isinstance(item, (int, str, dict)):
            continue
        try:
            port = Port.parse(item)  # the one ports grammar (short and long syntax)
        except ValueError:
            continue
        lo, hi = port_range(port.target)
        out.append(PortSpec(lo, hi, item if isinstance(item, str) else port.target, svc.path + ("ports", i)))
    return out


def published_ports(svc: Service) -> list[int]:
    """Container ports the service publishes (ranges expanded up to 64 ports)."""
    out: list[int] = []
    for s in port_specs(svc):
        if s.lo is not None and s.hi is not None and s.hi - s.lo < 64:
            out.extend(range(s.lo, s.hi + 1))
    return out


def replicas(svc: Service) -> int:
    """How many containers Compose runs for the service (``scale``, else ``deploy.replicas``,
    else 1)."""
    deploy = svc.data.get("deploy")
    n = deploy.get("replicas") if isinstance(deploy, dict) else None
    n = svc.data.get("scale", n)
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


def server_port(svc: Service) -> int | None:
    """The port the server listens on (``--port`` or the image default), or None."""
    port = svc.eff("port")
    return port if isinstance(port, int) and not isinstance(port, bool) else None


def int_setting(svc: Service, dest: str, default: int = 1) -> int:
    """An integer engine setting (``tensor_parallel_size`` ...) or ``default``."""
    v = svc.eff(dest)
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return default


def network_siblings(ctx: Ctx, svc: Service) -> list[str]:
    """The other services of the document that reach ``svc`` over a network (Compose puts a
    project's services on its ``default`` network, where they connect by service name): every
    service except those sharing ``svc``'s network namespace (``network_mode: service:NAME``,
    which reach its loopback) or without a network (``network_mode: none``). ``svc`` itself on
    the host network or another's namespace has none."""
    mode = str(svc.data.get("network_mode") or "")
    services = ctx.doc.data.get("services") if isinstance(ctx.doc.data, dict) else None
    if mode == "host" or mode.startswith(("service:", "container:")) or mode == "none" \
            or not isinstance(services, dict):
        return []
    out = []
    for name, other in services.items():
        if name == svc.name or not isinstance(other, dict):
            continue
        theirs = str(other.get("network_mode") or "")
        if theirs in (f"service:{svc.name}", "none"):
            continue
        out.append(str(name))
    return out
