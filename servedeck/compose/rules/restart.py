"""``restart/*``: restart policies that turn a failed start into a loop (Compose Specification
``restart`` and ``deploy.restart_policy``), and an unquoted ``restart: no``, which YAML 1.1
readers take for the boolean false.
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service


_LOOPING = {"always", "unless-stopped", "on-failure"}


def check_restart(ctx: Ctx, svc: Service) -> None:
    """``restart/*``: restart policies that turn a failed start into a loop."""
    path = svc.path + ("restart",)
    sc = ctx.doc.scalars.get(path)
    value = svc.data.get("restart")
    if sc is not None and sc.plain and sc.raw.lower() in ("no", "off", "n"):
        ctx.error("restart/no-unquoted", path,
                  f"unquoted `restart: {sc.raw}` is the boolean false for YAML 1.1 readers, not the "
                  f"policy \"no\"", "quote it: restart: \"no\"")
        return
    if isinstance(value, str) and value in _LOOPING:
        # servedeck's own deploy watches the restart count and rolls back a looping start, so
        # for a file it rendered the loop is caught: information, not a warning
        report = ctx.info if ctx.expect.rendered else ctx.warning
        caught = " (servedeck deploy detects the loop and rolls back)" if ctx.expect.rendered else ""
        report("restart/loops-on-failure", path,
               f"restart: {value} turns a startup failure into a restart loop that keeps the GPU "
               f"busy and hides the first error{caught}", "use restart: on-failure:3 or \"no\"")
    policy = ((svc.data.get("deploy") or {}).get("restart_policy") or {})
    if isinstance(policy, dict) and policy.get("condition") in ("any", "on-failure", None) and policy \
            and policy.get("max_attempts") is None:
        ctx.warning("restart/loops-on-failure", svc.path + ("deploy", "restart_policy"),
                    "deploy.restart_policy restarts without max_attempts: a startup failure loops",
                    "set max_attempts: 3 or condition: none")
