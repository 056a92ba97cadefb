"""``server/*``: the server's own settings against the container around it.

Facts used: Docker forwards a published port to the container's bridge address, so a server
bound to ``127.0.0.1`` inside the container is unreachable from outside (moby/moby PR #10900);
a healthcheck runs inside the container (Compose Specification ``healthcheck``) with the image's
own binaries; vLLM serves ``/health`` without authentication and every ``/v1/*`` route behind
``--api-key`` / ``VLLM_API_KEY`` (``vllm/entrypoints/openai/api_server.py``); vLLM's default
``--host`` is all interfaces and its default ``--port`` 8000.
"""


from __future__ import annotations

import ipaddress
import socket

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._facts import (env_value, healthcheck, healthcheck_urls, network_siblings, published_ports,
                                            server_port)


_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def is_loopback(host: str) -> bool:
    """Whether ``--host`` names a loopback address: any spelling of 127.0.0.0/8 the C resolver
    accepts (``127.0.0.2``, ``127.1``), ``::1`` in any form (``[::1]``, ``0:0:0:0:0:0:0:1``,
    ``::ffff:127.0.0.1``), or a name that Debian's ``/etc/hosts`` maps to one."""
    h = host.strip().lower().rstrip(".")
    if h in _LOOPBACK_NAMES:
        return True
    h = h[1:-1] if h.startswith("[") and h.endswith("]") else h
    try:
        addr = ipaddress.ip_address(h)
    except ValueError:
        try:
            addr = ipaddress.IPv4Address(socket.inet_aton(h))
        except OSError:
            return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or bool(mapped and mapped.is_loopback)


#: seconds a vLLM server typically needs to be ready when no measured run exists (weights load +
#: compile + CUDA-graph capture of a mid-size model); start_period below this is reported.
TYPICAL_STARTUP_S = 120.0


def check_server_container(ctx: Ctx, svc: Service) -> None:
    """``server/host-loopback``, ``server/healthcheck-port``, ``server/healthcheck-start-period``,
    ``server/healthcheck-binary-missing``, ``server/healthcheck-needs-api-key``."""
    if svc.launcher is None:
        return
    host = svc.eff("host")
    published = published_ports(svc)
    mode = str(svc.data.get("network_mode") or "")
    siblings = network_siblings(ctx, svc)
    if isinstance(host, str) and is_loopback(host) and mode != "host" \
            and (published or siblings or svc.data.get("expose")):
        e = svc.effective.get("host")
        how = ("Docker forwards the published port to the container's bridge address, so every "
               "request from outside gets 'connection reset'" if published else
               f"the other services of the project ({', '.join(siblings)}) connect to its address on "
               f"the project network and are refused" if siblings else
               "containers that reach its exposed port connect to its network address and are refused")
        ctx.error("server/host-loopback", e.path if e else svc.path,
                  f"--host {host} makes the server listen on the container's own loopback; {how}, "
                  f"while a healthcheck inside the container (127.0.0.1) still passes",
                  "drop --host (vLLM listens on all interfaces by default) or use --host 0.0.0.0")
    port = server_port(svc)
    hc = healthcheck(svc)
    if hc is None:
        return
    urls = healthcheck_urls(hc)
    for _, hport, _ in urls:
        if port is not None and (hport or 80) != port:
            ctx.error("server/healthcheck-port", hc.path + ("test",),
                      f"the healthcheck asks port {hport or 80} but the server listens on {port}; the "
                      f"service never becomes healthy", f"point the healthcheck at port {port}")
            break
    expected = ctx.expect.startup_seconds
    basis = "the measured time to ready of the last run" if expected is not None else \
        "a typical vLLM startup (load, compile, graph capture)"
    need = expected if expected is not None else TYPICAL_STARTUP_S
    if hc.start_period is not None and hc.start_period < need:
        ctx.warning("server/healthcheck-start-period", hc.path + ("start_period",),
                    f"healthcheck start_period is {hc.start_period:g}s but the server needs about "
                    f"{need:g}s to be ready ({basis}); failed probes before then count as retries and "
                    f"the service turns unhealthy while still starting",
                    f"start_period: {int(need * 1.5)}s")
    binaries = svc.facts.binaries if svc.facts else {}
    if hc.argv:
        prog = hc.argv[0].rsplit("/", 1)[-1]
        if binaries.get(prog) is False:
            have = ", ".join(b for b, ok in sorted(binaries.items()) if ok) or "none of curl/wget/python3"
            ctx.error("server/healthcheck-binary-missing", hc.path + ("test",),
                      f"the healthcheck runs {prog}, which the image does not have (it has: {have}); the "
                      f"check always fails and the service never becomes healthy",
                      "use python3 -c \"import urllib.request; urllib.request.urlopen("
                      "'http://127.0.0.1:PORT/health', timeout=5)\"" if binaries.get("python3")
                      else "use a binary the image has")
    key_set = env_value(svc, "VLLM_API_KEY") or svc.eff("api_key")
    if key_set:
        words = " ".join(hc.argv)
        for _, _, path in urls:
            if path.startswith("/v1/") and "authorization" not in words.lower():
                ctx.error("server/healthcheck-needs-api-key", hc.path + ("test",),
                          f"the healthcheck asks {path} without an Authorization header, but an API key "
                          f"is set (VLLM_API_KEY / --api-key): every probe gets HTTP 401",
                          "probe /health, which needs no key")
                break
