"""``devices/*``: ``devices`` entries Compose refuses: the long syntax without a ``target``
(compose-go loader, v2.40: "service device ... is missing a mount target"; CDI names included).
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service


def check_devices(ctx: Ctx, svc: Service) -> None:
    """``devices/missing-target``."""
    for path, d in svc.devices:
        if d.long and not d.target:
            i = path[-1]
            ctx.error("devices/missing-target", path,
                      f"device {d.source!r} in the long syntax has no target: Compose refuses the file "
                      f"(\"service device services.{svc.name}.devices.[{i}] is missing a mount target\")",
                      f"write it in the short syntax (devices: [\"{d.source}\"]) or add target:")
