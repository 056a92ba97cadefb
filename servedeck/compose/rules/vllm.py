"""``vllm/*``: vLLM constraints and names on the effective settings (vLLM's
``vllm/engine/arg_utils.py``, ``vllm/config/scheduler.py``, ``vllm/config/speculative.py``; names
per version from :mod:`servedeck.vllm.names`).
"""

from __future__ import annotations

import difflib
from typing import Any

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import judge, served_model
from servedeck.errors import ServedeckError
from servedeck.vllm.names import check_name, parse_version


_NAME_KINDS = {"tool_call_parser": "tool-call parser", "reasoning_parser": "reasoning parser",
               "speculative_method": "speculative method", "kv_cache_dtype": "KV-cache dtype"}


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _where(svc: Service, dest: str) -> str:
    e = svc.effective.get(dest)
    if e is None:
        return "vLLM default"
    launcher = svc.launcher
    config = (launcher.config_file if launcher else None) or "launcher config"
    return {"image": "the image's default", "launcher-config": f"the image's {config}",
            "set": (launcher.edit_option if launcher else None) or "a config edit", "flag": "a flag",
            "environment": "the environment"}[e.source]


def check_vllm(ctx: Ctx, svc: Service) -> None:
    """``vllm/*``: vLLM constraints and names on the effective settings."""
    launch = svc.launch
    if svc.launcher is None:
        return
    eff = svc.effective
    version = svc.facts.vllm_version if svc.facts else None

    def path_of(dest: str) -> Path:
        e = eff.get(dest)
        return e.path if e else svc.path + ("command",)

    if svc.eff("enable_auto_tool_choice") is True and not svc.eff("tool_call_parser"):
        ctx.error("vllm/auto-tool-choice-needs-parser", path_of("enable_auto_tool_choice"),
                  "--enable-auto-tool-choice without --tool-call-parser: vLLM exits with "
                  "'--enable-auto-tool-choice requires --tool-call-parser'",
                  "add --tool-call-parser NAME (e.g. qwen3_coder or qwen3_xml for Qwen3)")

    spec = svc.eff("speculative_config")
    names: list[tuple[str, str, Path]] = []
    for dest in ("tool_call_parser", "reasoning_parser", "kv_cache_dtype"):
        e = eff.get(dest)
        if e and e.source in ("set", "flag") and isinstance(e.value, str):
            names.append((dest, e.value, e.path))
    e_spec = eff.get("speculative_config")
    method_given = any(f.name == "speculative-config" for f in launch.flags) or any(
        svc.launcher.edit_target(s) in (("engine", ["speculative_config"]),
                                        ("engine", ["speculative_config", "method"]))
        for s in launch.edits)
    if e_spec and method_given and isinstance(spec, dict) and isinstance(spec.get("method"), str):
        names.append(("speculative_method", spec["method"], e_spec.path))
    if version is not None:
        from servedeck.compose.rules._facts import own_facts
        own = own_facts(ctx, svc)
        for kind, name, path in names:
            try:
                res = check_name(kind, name, version, own)
            except ServedeckError:
                break
            label = _NAME_KINDS[kind]
            if res is None or res.status == "valid":
                continue
            close = difflib.get_close_matches(name, sorted(res.valid_names), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else \
                f"valid: {', '.join(sorted(res.valid_names))}"
            if res.status == "invalid":
                ctx.error(f"vllm/unknown-{kind.replace('_', '-')}", path,
                          f"{label} {name!r} is not accepted by vLLM {version} (checked against "
                          f"vLLM {res.basis})", hint)
            else:
                ctx.warning(f"vllm/uncertain-{kind.replace('_', '-')}", path,
                            f"{label} {name!r} is accepted by only one of the checked vLLM releases "
                            f"bracketing {version} ({res.basis})", hint)

    gmu = eff.get("gpu_memory_utilization")
    if gmu is not None and gmu.value is not None:
        x = _num(gmu.value)
        if x is None or not (0 < x <= 1):
            ctx.error("vllm/gpu-memory-utilization-range", gmu.path,
                      f"gpu_memory_utilization {gmu.value!r} (from {_where(svc, 'gpu_memory_utilization')}) "
                      f"must be a fraction in (0, 1]", "e.g. 0.90")

    mnbt = _num(svc.eff("max_num_batched_tokens"))
    seqs = _num(svc.eff("max_num_seqs"))
    mml = _num(svc.eff("max_model_len"))
    if mnbt is not None and seqs is not None and mnbt < seqs:
        ctx.error("vllm/batched-tokens-below-max-num-seqs", path_of("max_num_batched_tokens"),
                  f"max_num_batched_tokens ({mnbt:g}) is smaller than max_num_seqs ({seqs:g}); "
                  f"vLLM refuses to start", "raise max_num_batched_tokens or lower max_num_seqs")
    if mnbt is not None and mml is not None and mml > 0 and mnbt < mml \
            and svc.eff("enable_chunked_prefill") is False:
        ctx.error("vllm/batched-tokens-below-max-model-len", path_of("enable_chunked_prefill"),
                  f"with chunked prefill off, max_num_batched_tokens ({mnbt:g}) must be >= "
                  f"max_model_len ({mml:g}); vLLM refuses to start",
                  "enable chunked prefill or raise max_num_batched_tokens")
    if isinstance(spec, dict):
        k = spec.get("num_speculative_tokens")
        kn = _num(k)
        if k is not None and (kn is None or kn <= 0):
            ctx.error("vllm/num-speculative-tokens", path_of("speculative_config"),
                      f"speculative num_speculative_tokens {k!r} must be a positive integer",
                      "use 1..4, or drop speculative_config to turn speculation off")
        touched = any(eff[d].source in ("set", "flag") for d in ("speculative_config", "max_num_batched_tokens")
                      if d in eff)
        if mnbt is not None and mnbt < 8192 and touched:
            ctx.info("vllm/spec-scheduled-tokens", path_of("max_num_batched_tokens"),
                     f"speculative decoding with max_num_batched_tokens {mnbt:g} < 8192: vLLM will warn "
                     f"'max_num_scheduled_tokens is set to ... suboptimal performance' (usually cosmetic)")

    j = judge(ctx, svc, "serve_args")
    if j is not None and j.exact:
        return  # flags/unknown judges every flag with the release's own parser facts
    # no facts of this release: what is known of the removal by version judges, unless the
    # nearest older release's facts have the flag as a live option (0.33 took it back as the
    # --disable- half of --enable-log-requests)
    for flag in launch.flags:
        action = j.facts.option(flag.name) if j is not None else None
        live = action is not None and not action.deprecated
        if flag.name == "disable-log-requests" and not live:
            if version is not None and parse_version(version) >= (0, 26, 0):
                ctx.error("vllm/disable-log-requests-removed", flag.token.path,
                          f"vLLM {version} rejects --disable-log-requests "
                          f"('vllm: error: unrecognized arguments')", "use --no-enable-log-requests")
            elif version is None:
                ctx.warning("vllm/disable-log-requests-removed", flag.token.path,
                            "--disable-log-requests is rejected by vLLM 0.26 and later",
                            "use --no-enable-log-requests")


def check_max_model_len_unknown(ctx: Ctx, svc: Service) -> None:
    """``vllm/no-max-model-len`` (advisory, info): no ``--max-model-len`` (nor from the image's
    launcher config) while the model's facts are unknown to the check: vLLM then sizes for the
    model's full context (its ``max_position_embeddings``, 128K-1M tokens for current models),
    which may not fit the KV pool (vLLM refuses to start) or lowers the concurrency it reports.
    With the model's config known, :func:`check_context_fits` judges it instead."""
    if svc.launcher is None or ctx.expect.hf_config or svc.eff("max_model_len") is not None:
        return
    if served_model(svc) is None or (svc.launch.config is not None and svc.defaults is None):
        return  # a launcher config the image ships may set it: unknown here
    ctx.info("vllm/no-max-model-len", svc.path + ("command",) if "command" in svc.data else svc.path,
             "no --max-model-len: vLLM sizes the server for the model's full context "
             "(max_position_embeddings), which the check cannot read here; if its KV cache does not fit, "
             "vLLM refuses to start, and the concurrency it can hold is set by that full length",
             "set --max-model-len to the longest request you serve (or auto: the longest that fits)",
             key=True)
