"""``ports/*``: the container ports a service publishes against the port its server listens on
(Compose Specification ``ports``, short and long syntax; ``network_mode: host`` ignores them).
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._facts import network_siblings, port_specs


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
