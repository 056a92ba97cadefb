"""``container/*``: ``container_name`` across the services of one project (Compose
Specification ``container_name``: the name of one container; Docker refuses a second container
of that name, "Conflict. The container name ... is already in use", and Compose refuses to scale
a service that sets one).
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._facts import replicas


def check_container_names(ctx: Ctx, svcs: list[Service]) -> None:
    """``container/name-conflict`` and ``container/name-with-replicas``."""
    names: dict[str, Service] = {}
    for svc in svcs:
        name = svc.data.get("container_name")
        if not isinstance(name, str) or not name:
            continue
        path = svc.path + ("container_name",)
        if replicas(svc) > 1:
            ctx.error("container/name-with-replicas", path,
                      f"{svc.name} sets container_name {name!r} and runs {replicas(svc)} replicas: a name "
                      f"belongs to one container, Compose refuses to scale it", "drop container_name")
        other = names.get(name)
        if other is not None:
            ctx.error("container/name-conflict", path,
                      f"{svc.name} and {other.name} both set container_name {name!r}: the second container "
                      f"cannot be created (\"Conflict. The container name ... is already in use\")",
                      "give each service its own container_name, or none")
        names[name] = svc
