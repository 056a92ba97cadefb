"""``features/*``: settings that need each other: thinking switched on without a reasoning
parser, a reasoning parser of another model family, a full context whose KV cache cannot fit
(vLLM's ``validate_parsed_serve_args``, ``vllm/entrypoints/launchers/cli_args.py``: without
``--reasoning-parser`` the thinking text stays in ``content``; the KV model of
:mod:`servedeck.vllm.kv`).
"""

from __future__ import annotations

import json

from servedeck.compose.rules._context import Ctx, Service


_THINKING_KEYS = ("enable_thinking", "thinking")


def check_features(ctx: Ctx, svc: Service) -> None:
    """``features/thinking-without-reasoning-parser``."""
    if svc.launcher is None:
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


def check_context_fits(ctx: Ctx, svc: Service) -> None:
    """``features/full-context-does-not-fit``: no ``--max-model-len`` while one request of the
    model's full context (``max_position_embeddings``) needs more KV cache than the GPU memory
    vLLM may use (``gpu_memory_utilization``, vLLM's default when unset, x GPU memory x
    tensor-parallel GPUs); vLLM then refuses to start ("... larger than the maximum number of
    tokens that can be stored in KV cache"). The KV per token is the one KV model's
    (:mod:`servedeck.vllm.kv`: layers without a KV cache, as in hybrid models, hold none; the
    element size as vLLM's auto dtype runs it). Judged only when the model's config and the GPU
    size are known."""
    cfg = ctx.expect.hf_config
    gib = ctx.expect.gpu_memory_gib
    if svc.launcher is None or not cfg or not gib or svc.eff("max_model_len") is not None:
        return
    from servedeck.compose.rules._facts import int_setting
    from servedeck.vllm.kv import GIB, model_shape_from_config, request_kv_bytes
    ctx_len = (cfg.get("text_config") or cfg).get("max_position_embeddings")
    if not isinstance(ctx_len, int):
        return
    try:
        settings = svc.kv_settings()
        need = request_kv_bytes(model_shape_from_config(cfg), settings, ctx_len)
    except ValueError:
        return  # a config without the attention shape, an unknown KV dtype: not judged
    budget = settings.gmu * gib * GIB * max(int_setting(svc, "tensor_parallel_size"), 1)
    if need > budget:
        per_token = need / ctx_len
        fit = int(budget / per_token) // 1024 * 1024
        ctx.error("features/full-context-does-not-fit", svc.path + ("command",),
                  f"no --max-model-len: vLLM sizes for the model's full context of {ctx_len} tokens, whose "
                  f"KV cache alone ({need / GIB:.1f} GiB) exceeds what vLLM may use on the GPU(s) "
                  f"({budget / GIB:.1f} GiB before weights); vLLM refuses to start",
                  f"set --max-model-len well below {fit} (weights also need room), or --max-model-len auto",
                  key=True)


#: reasoning parsers that read the generic ``<think>...</think>`` form, used across families
_GENERIC_REASONING = {"deepseek_r1", "hf"}


_FAMILY_ALIASES = {"openai": "gpt"}  # openai_gptoss is for model_type gpt_oss


def _family(name: str) -> str:
    import re
    m = re.match(r"[a-z]+", name.lower())
    stem = m.group(0) if m else name.lower()
    return _FAMILY_ALIASES.get(stem, stem)


def check_reasoning_family(ctx: Ctx, svc: Service) -> None:
    """``features/reasoning-parser-family``: ``--reasoning-parser`` made for another model family
    than the served model's ``model_type`` (Hugging Face config), while the release has a parser
    of the model's own family (families: the leading letters of the names, e.g. ``qwen3`` and
    ``qwen3_moe`` → ``qwen``). Generic ``<think>`` parsers are not judged."""
    cfg = ctx.expect.hf_config
    parser = svc.eff("reasoning_parser")
    if not cfg or not isinstance(parser, str) or parser in _GENERIC_REASONING:
        return
    model_type = (cfg.get("text_config") or {}).get("model_type") or cfg.get("model_type")
    if not isinstance(model_type, str):
        return
    from servedeck.compose.rules._facts import judge
    j = judge(ctx, svc, "reasoning_parsers")
    names = j.facts.reasoning_parsers if j else []
    own = sorted(n for n in names if _family(n) == _family(model_type) and n not in _GENERIC_REASONING)
    if own and _family(parser) != _family(model_type):
        e = svc.effective.get("reasoning_parser")
        ctx.warning("features/reasoning-parser-family", e.path if e else svc.path,
                    f"reasoning parser {parser!r} is made for another model family than the served model "
                    f"(model_type {model_type!r}); its think markers may not match, so reasoning stays in "
                    f"the content or the answer is cut", f"use --reasoning-parser {own[0]}")
