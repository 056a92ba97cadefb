"""``features/*`` (settings that need each other) and ``entrypoint/*`` (Compose semantics of
``entrypoint``/``command`` against the image's own).

Facts: vLLM's ``validate_parsed_serve_args`` (``vllm/entrypoints/launchers/cli_args.py``)
refuses ``--enable-auto-tool-choice`` without ``--tool-call-parser``; without
``--reasoning-parser`` the thinking text stays in ``content``; Compose replaces the image's
ENTRYPOINT with ``entrypoint:`` and passes ``command:`` as its arguments (Compose Specification);
the legacy ``python3 -m vllm.entrypoints.openai.api_server`` takes the model only as
``--model`` (a positional is "unrecognized arguments").
"""

from __future__ import annotations

import json

from servedeck.compose.rules._facts import vllm_flags
from servedeck.compose.rules._service import Ctx, Service

_THINKING_KEYS = ("enable_thinking", "thinking")


def check_features(ctx: Ctx, svc: Service) -> None:
    """``features/thinking-without-reasoning-parser``."""
    if svc.launch.kind is None:
        return
    kwargs = svc.eff("default_chat_template_kwargs") or svc.eff("chat_template_kwargs")
    if isinstance(kwargs, str):
        try:
            kwargs = json.loads(kwargs)
        except ValueError:
            kwargs = None
    if isinstance(kwargs, dict) and any(kwargs.get(k) is True for k in _THINKING_KEYS) \
            and not svc.eff("reasoning_parser"):
        e = svc.effective.get("default_chat_template_kwargs") or svc.effective.get("chat_template_kwargs")
        ctx.warning("features/thinking-without-reasoning-parser", e.path if e else svc.path,
                    "thinking is switched on by default (chat-template kwargs) but no --reasoning-parser "
                    "is set: the model's reasoning text lands in the answer's content",
                    "add --reasoning-parser NAME for the model family (e.g. qwen3)")


def _is_wrapper(entry: list[str]) -> bool:
    if not entry:
        return False
    head = entry[0].rsplit("/", 1)[-1]
    return head.endswith(".sh") or head in ("bash", "sh", "tini", "dumb-init") \
        or any(e.endswith(".sh") for e in entry[1:2])


def check_entrypoint(ctx: Ctx, svc: Service) -> None:
    """``entrypoint/replaces-wrapper`` and ``entrypoint/api-server-positional``."""
    data = svc.data
    if "entrypoint" in data and svc.facts is not None and _is_wrapper(svc.facts.entrypoint):
        image_entry = " ".join(svc.facts.entrypoint)
        why = " (Intel XPU images source the oneAPI environment in it)" if svc.device == "xpu" else ""
        ctx.warning("entrypoint/replaces-wrapper", svc.path + ("entrypoint",),
                    f"entrypoint: replaces the image's wrapper script {image_entry!r}{why}; whatever it "
                    f"prepares is skipped", f"drop entrypoint: and put the server arguments in command:",
                    key=True)
    entry = data.get("entrypoint")
    words = entry.split() if isinstance(entry, str) else [str(x) for x in entry or []]
    if not any(w.endswith("vllm.entrypoints.openai.api_server") for w in words):
        return
    if svc.launch.positionals and not any(f.name == "model" for f in vllm_flags(svc)):
        tok = svc.launch.positionals[0]
        ctx.error("entrypoint/api-server-positional", tok.path,
                  f"the legacy api_server entrypoint takes the model only as --model; the positional "
                  f"{tok.s!r} is rejected ('unrecognized arguments')",
                  f"write --model {tok.s}, or use the `vllm serve` entrypoint")
