"""``entrypoint/*``: Compose semantics of ``entrypoint``/``command`` against the image's own
(Compose Specification: ``entrypoint:`` replaces the image's ENTRYPOINT, ``command:`` becomes its
arguments): an entrypoint that replaces the image's wrapper script. (``entrypoint/api-server-
positional`` is judged with the model argument: :func:`servedeck.compose.rules.argv.
check_model_argument`.)
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service


def _is_wrapper(entry: list[str]) -> bool:
    if not entry:
        return False
    head = entry[0].rsplit("/", 1)[-1]
    return head.endswith(".sh") or head in ("bash", "sh", "tini", "dumb-init") \
        or any(e.endswith(".sh") for e in entry[1:2])


def check_entrypoint(ctx: Ctx, svc: Service) -> None:
    """``entrypoint/replaces-wrapper`` (``entrypoint/api-server-positional`` is judged with the
    model argument, :func:`servedeck.compose.rules.argv.check_model_argument`)."""
    data = svc.data
    if "entrypoint" in data and svc.facts is not None and _is_wrapper(svc.facts.entrypoint):
        image_entry = " ".join(svc.facts.entrypoint)
        why = " (Intel XPU images source the oneAPI environment in it)" if svc.device == "xpu" else ""
        ctx.warning("entrypoint/replaces-wrapper", svc.path + ("entrypoint",),
                    f"entrypoint: replaces the image's wrapper script {image_entry!r}{why}; whatever it "
                    f"prepares is skipped", "drop entrypoint: and put the server arguments in command:",
                    key=True)
