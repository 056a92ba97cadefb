"""Every figure against its physical limit: the roofline of a benchmarked run.

Pure code: the inputs are data (the run's startup facts and samples, the model's ``config.json``
as a dict, the size of its weight files, the card's ceilings); :mod:`servedeck.bench.record`
gathers them and writes the result as the run's ``roofline.json``.

**Decode** at batch 1 is bound by memory bandwidth: each engine step streams the weights and
the KV cache of the context once and yields ``accepted length`` tokens (1 without speculative
decoding; with it, the server's mean accepted length of that request), so

    decode ceiling (tokens/s) = bandwidth × accepted length / bytes per step
    bytes per step = weights + KV bytes per token × context + recurrent state

* weights: the weights actually loaded, the startup log's figure (``Model loading took 17.34
  GiB``, else the XPU log's "model load takes N MB"); without one (the CPU build logs none) the
  size of the weight files on the host. A drafter's weights are part of that figure and counted
  once per step (its repeated passes per drafted token are not).
* KV bytes per token: :func:`servedeck.vllm.kv.bytes_per_token` of the model's attention layers
  (``layer_types``: linear-attention and Mamba layers hold no per-token KV) at the KV cache's
  dtype (``kv_cache_dtype``, ``auto`` = the engine's or the model's dtype).
* context: the request's prompt plus half its output (the mean context over its decode).
* recurrent state: the linear-attention (Gated DeltaNet) layers of a hybrid model read and write
  their fixed state every step: ``2 × layers × value heads × key head size × value head size``
  elements plus the convolution state, at the model's dtype, when ``config.json`` states the
  ``linear_*`` sizes (Qwen3-Next / Qwen3.5 names); other non-attention layers are not counted,
  and the figure says so.

**Prefill** is bound by the matrix engines: a prompt of ``P`` tokens of which ``c`` were cached
costs ``2 × N × (P − c)`` FLOPs for the linear layers (``N``: the active parameters of the
non-embedding layers, from ``config.json``: attention projections, dense or mixture-of-experts
MLPs with their active experts, linear-attention projections) plus
``attention layers × heads × (K + V head size) × (P² − c²)`` for causal attention; its time is
the engine's prefill time for that request (``vllm:request_prefill_time_seconds``), else the
client's TTFT. The ceiling is the card's dense FP16 matrix rate, or its INT8 rate when the
server's prefill linears run W8A8 (exl3xpu ``EXL3_INT8_PREFILL=1``).

**Flags**: a share above 100 % is a measurement problem (the weights figure, the accepted
length, the card or the timing is wrong); so is a share below :data:`LOW_SHARE` of a step long
enough (at least :data:`OVERHEAD_STEP_S` at the ceiling) that the engine's fixed per-step costs
cannot explain it. A shorter step is *overhead-bound*: the ceiling does not bind, which is said,
not flagged (the tiny CPU model).
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from servedeck.model.cards import Card, card, card_for_name, cards_for_memory
from servedeck.runs.records import Ceilings, ModelCost, PhaseRoofline, RequestRoofline, Roofline

__all__ = ["Ceilings", "ModelCost", "RequestRoofline", "PhaseRoofline", "Roofline", "resolve_ceilings",
           "model_cost", "roofline", "int8_prefill", "LOW_SHARE", "OVERHEAD_STEP_S", "GIB"]

GIB = 1024 ** 3
#: below this fraction of the ceiling a figure is implausibly low (unless overhead-bound)
LOW_SHARE = 0.05
#: a decode step shorter than this at the ceiling (s) is dominated by the engine's fixed costs
OVERHEAD_STEP_S = 0.002
#: a prefill shorter than this at the ceiling (s) is dominated by the engine's fixed costs
OVERHEAD_PREFILL_S = 0.02
_STATE_LAYER_TYPES = {"linear_attention", "gdn"}
_NO_KV_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "gdn", "conv", "ssm"}


def int8_prefill(env: dict[str, str] | None) -> bool:
    """True when the server's prefill linears run W8A8 (exl3xpu ``EXL3_INT8_PREFILL=1``)."""
    return str((env or {}).get("EXL3_INT8_PREFILL", "")).strip() == "1"


def resolve_ceilings(entry: Any = None, *, host: str | None = None, device: str | None = None,
                     nvidia_name: str | None = None, total_memory_gib: float | None = None,
                     measured: dict[str, Any] | None = None, int8: bool = False) -> Ceilings:
    """The ceilings of one host, first found wins:

    * card: the inventory's ``card``; else the card ``nvidia-smi`` names; else the one card of
      ``device`` kind whose memory matches the startup log's total; else, for ``device`` cpu,
      the CPU build's entry (no figures);
    * bandwidth and matrix rate: the inventory's own figures; else one measured on the host
      (``measured``: ``{"memory_bandwidth_gb_s", "matrix_tflops", "matrix_dtype", "measured_at",
      "method"}``, :mod:`servedeck.host.ceilings`); else the card's.

    Args:
        entry: the host's :class:`servedeck.model.inventory.HostEntry` (or None).
        int8: the prefill runs INT8 (:func:`int8_prefill`).
    """
    out = Ceilings(matrix_precision="int8" if int8 else "fp16")
    name = host or "the host"
    c: Card | None = None
    if entry is not None and getattr(entry, "card", None):
        c, out.card_source = card(entry.card), f"inventory: hosts.{name}.card"
    elif nvidia_name and card_for_name(nvidia_name):
        c, out.card_source = card_for_name(nvidia_name), f"nvidia-smi names {nvidia_name!r}"
    elif device and total_memory_gib:
        found = cards_for_memory(device, total_memory_gib)
        if len(found) == 1:
            c = found[0]
            out.card_source = (f"the only {device} card with {total_memory_gib:g} GiB (startup log's total "
                               f"memory); set hosts.{name}.card to be sure")
        elif found:
            out.notes.append(f"{len(found)} {device} cards have {total_memory_gib:g} GiB "
                             f"({', '.join(x.id for x in found)}): set hosts.{name}.card")
    if c is None and device == "cpu":
        c, out.card_source = card("cpu"), "device cpu (the CPU build)"
    if c is not None:
        out.card, out.card_name, out.board_power_w = c.id, c.name, c.board_power_w
    if c is None and not out.notes:
        out.notes.append(f"no card is known for {name}: set hosts.{name}.card (servedeck ceilings lists them)")
    bw_inv = getattr(entry, "memory_bandwidth_gb_s", None) if entry is not None else None
    measured = measured or {}
    if bw_inv:
        out.memory_bandwidth_gb_s = float(bw_inv)
        out.bandwidth_source = f"inventory: hosts.{name}.memory_bandwidth_gb_s"
    elif measured.get("memory_bandwidth_gb_s"):
        out.memory_bandwidth_gb_s = float(measured["memory_bandwidth_gb_s"])
        out.bandwidth_source = (f"measured on {name} {measured.get('measured_at', '')} "
                                f"({measured.get('method', 'read bandwidth')})").replace("  ", " ")
    elif c is not None and c.memory_bandwidth_gb_s:
        out.memory_bandwidth_gb_s = c.memory_bandwidth_gb_s
        out.bandwidth_source = f"card table: {c.name} ({'; '.join(c.sources)})"
    else:
        out.notes.append(f"no memory bandwidth for {name}: measure it (servedeck ceilings --host {name} "
                         f"--measure) or set hosts.{name}.memory_bandwidth_gb_s")
    if c is not None and c.memory_bandwidth_gb_s and out.memory_bandwidth_gb_s != c.memory_bandwidth_gb_s:
        out.spec_memory_bandwidth_gb_s = c.memory_bandwidth_gb_s
    key = "matrix_int8_tops" if int8 else "matrix_fp16_tflops"
    what = "INT8 TOPS (EXL3_INT8_PREFILL=1)" if int8 else "FP16 TFLOPS"
    inv = getattr(entry, key, None) if entry is not None else None
    measured_ok = measured.get("matrix_tflops") and (measured.get("matrix_dtype") == "int8") == int8
    if inv:
        out.matrix_tflops, out.matrix_source = float(inv), f"inventory: hosts.{name}.{key}"
        out.matrix_dtype = "int8" if int8 else "float16"
    elif measured_ok:
        out.matrix_tflops = float(measured["matrix_tflops"])
        out.matrix_dtype = measured.get("matrix_dtype")
        out.matrix_source = (f"measured on {name} {measured.get('measured_at', '')} "
                             f"({out.matrix_dtype} matmul)")
    elif c is not None and getattr(c, key):
        out.matrix_tflops = getattr(c, key)
        out.matrix_dtype = "int8" if int8 else "float16"
        out.matrix_source = f"card table: {c.name} dense {what}"
    else:
        out.notes.append(f"no matrix rate ({what}) for {name}: the prefill has no ceiling")
    return out


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    return config["text_config"] if isinstance(config.get("text_config"), dict) else config


def _params(cfg: dict[str, Any]) -> tuple[float | None, str]:
    """Active non-embedding parameters from a Hugging Face config (see the module docstring)."""
    try:
        hidden = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        return None, "config.json lacks hidden_size / num_hidden_layers / num_attention_heads"
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or hidden // heads)
    hd_v = int(cfg.get("v_head_dim") or hd)
    types = cfg.get("layer_types") if isinstance(cfg.get("layer_types"), list) else None
    n_lin = sum(1 for t in types if str(t) in _STATE_LAYER_TYPES) if types and len(types) == layers else 0
    n_attn = layers - n_lin
    attn = hidden * heads * hd + 2 * hidden * kv_heads * hd + heads * hd_v * hidden
    if cfg.get("attn_output_gate"):
        attn += hidden * heads * hd  # gated attention: a second query-sized projection
    lin = 0
    if n_lin:
        nk = int(cfg.get("linear_num_key_heads") or 0)
        nv = int(cfg.get("linear_num_value_heads") or 0)
        dk = int(cfg.get("linear_key_head_dim") or 0)
        dv = int(cfg.get("linear_value_head_dim") or 0)
        if not (nk and nv and dk and dv):
            return None, "config.json has linear-attention layers without linear_* head sizes"
        lin = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + nv * dv * hidden
    experts = int(cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)
    if experts:
        per_tok = int(cfg.get("num_experts_per_tok") or 0)
        moe_i = int(cfg.get("moe_intermediate_size") or 0)
        if not (per_tok and moe_i):
            return None, "config.json has num_experts without num_experts_per_tok / moe_intermediate_size"
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        mlp = per_tok * 3 * hidden * moe_i + 3 * hidden * shared + hidden * experts
        how = f"MoE MLP ({per_tok} of {experts} experts active)"
    else:
        inter = cfg.get("intermediate_size")
        if not inter:
            return None, "config.json lacks intermediate_size"
        mlp = 3 * hidden * int(inter)
        how = "dense gated MLP"
    total = n_attn * (attn + mlp) + n_lin * (lin + mlp)
    src = (f"config.json: {n_attn} attention layers (q/k/v/o projections) + {n_lin} linear-attention layers, "
           f"{how}; embeddings and lm_head not counted")
    return float(total), src


def _state_bytes(cfg: dict[str, Any], elem: int) -> tuple[float, str | None, list[str]]:
    layer_types = cfg.get("layer_types")
    types = layer_types if isinstance(layer_types, list) else []
    n_lin = sum(1 for t in types if str(t) in _STATE_LAYER_TYPES)
    others = sorted({str(t) for t in types if str(t) in _NO_KV_LAYER_TYPES - _STATE_LAYER_TYPES})
    notes = [f"state of {', '.join(others)} layers not counted"] if others else []
    if not n_lin:
        return 0.0, None, notes
    nk = int(cfg.get("linear_num_key_heads") or 0)
    nv = int(cfg.get("linear_num_value_heads") or 0)
    dk = int(cfg.get("linear_key_head_dim") or 0)
    dv = int(cfg.get("linear_value_head_dim") or 0)
    kernel = int(cfg.get("linear_conv_kernel_dim") or 0)
    if not (nv and dk and dv):
        return 0.0, None, [*notes, (f"{n_lin} linear-attention layers: no linear_* sizes in config.json, "
                                    "their state is not counted")]
    per_layer = nv * dk * dv + (2 * nk * dk + nv * dv) * max(kernel - 1, 0)
    total = 2.0 * n_lin * per_layer * elem
    src = (f"{n_lin} linear-attention layers × ({nv} value heads × {dk} × {dv} recurrent state + conv state "
           f"of kernel {kernel}) × {elem} B, read and written each step")
    return total, src, notes


def model_cost(config: dict[str, Any] | None, *, startup: dict[str, Any] | None,
               weights_file_bytes: int | None = None, weights_files_source: str | None = None,
               kv_cache_dtype: str | None = None, engine_dtype: str | None = None) -> ModelCost:
    """The model's bytes per step and FLOPs per token (module docstring) with their sources."""
    from servedeck.vllm.kv import bytes_per_token, kv_dtype_bytes, model_shape_from_config
    out = ModelCost()
    st = startup or {}
    if st.get("model_loading_gib"):
        out.weights_bytes = float(st["model_loading_gib"]) * GIB
        out.weights_source = f"startup log: Model loading took {st['model_loading_gib']} GiB"
    elif st.get("weights_gib"):
        out.weights_bytes = float(st["weights_gib"]) * GIB
        out.weights_source = f"startup log: model load takes {st['weights_gib']} GiB"
    elif weights_file_bytes:
        out.weights_bytes = float(weights_file_bytes)
        out.weights_source = weights_files_source or "weight files on the host"
    else:
        out.notes.append("no weights figure: neither the startup log nor the weight files state it")
    if config is None:
        out.notes.append("no config.json: KV bytes, recurrent state and prefill FLOPs are unknown")
        return out
    cfg = _text_config(config)
    try:
        shape = model_shape_from_config(config)
        db = kv_dtype_bytes(kv_cache_dtype, shape.dtype, engine_dtype)
        out.kv_bytes_per_token = float(bytes_per_token(shape, db.value))
        out.kv_source = (f"{shape.attention_layers.value} attention layers × {shape.num_kv_heads.value} KV heads × "
                         f"({shape.head_size.value} + {shape.head_size_v.value}) × {db.value} B ({db.source})")
        out.attention_layers = int(shape.attention_layers.value)
        out.head_size, out.head_size_v = int(shape.head_size.value), int(shape.head_size_v.value)
        out.attention_heads = int(cfg.get("num_attention_heads") or 0) or None
        elem = kv_dtype_bytes(None, shape.dtype, engine_dtype).value
        out.state_bytes_per_step, out.state_source, notes = _state_bytes(cfg, elem)
        out.notes += notes
    except ValueError as exc:
        out.notes.append(f"KV bytes unknown: {exc}")
    out.linear_params, why = _params(cfg)
    if out.linear_params is None:
        out.notes.append(f"prefill FLOPs unknown: {why}")
    else:
        out.params_source = why
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _judge(share: float, step_s: float | None, overhead_s: float, what: str) -> tuple[str | None, str | None]:
    """``(kind, text)`` for one share: kind ``above`` / ``low`` (measurement problems),
    ``overhead`` (a note), or None."""
    if share > 1.0:
        return "above", (f"{what} at {share:.0%} of its ceiling: above 100 % is a measurement problem "
                         "(check the weights figure, the accepted length, the card's figures and the timing)")
    if share < LOW_SHARE:
        if step_s is not None and step_s < overhead_s:
            return "overhead", (f"{what} is overhead-bound: at the ceiling it would take {step_s * 1e3:.2g} ms, "
                                "less than the engine's fixed costs, so the ceiling does not bind")
        return "low", (f"{what} at {share:.1%} of its ceiling: implausibly low for "
                       f"{(step_s or 0) * 1e3:.3g} ms at the ceiling (check the measurement)")
    return None, None


_SUMMARY = {"above": "{what} above 100 % of its ceiling in {k} of {n} requests: a measurement problem "
                     "(check the weights figure, the accepted length, the card's figures and the timing)",
            "low": "{what} below {low:.0%} of its ceiling in {k} of {n} requests although a step at the "
                   "ceiling takes long enough to bind: implausibly low, a measurement problem",
            "overhead": "{what} is overhead-bound in {k} of {n} requests: at the ceiling it would take "
                        "less than {ms:g} ms, below the engine's fixed costs, so the ceiling does not bind"}


def roofline(samples: Sequence[dict[str, Any]], cost: ModelCost, ceilings: Ceilings) -> Roofline:
    """Each request of ``bench.jsonl`` (dicts of :class:`servedeck.bench.client.Sample`) against
    the ceilings; ``warmup`` requests are computed too, phases summarise each phase."""
    out = Roofline(ceilings=ceilings, model=cost)
    bw = ceilings.memory_bandwidth_gb_s
    peak = ceilings.matrix_tflops
    seen: dict[tuple[str, str], int] = {}
    for i, s in enumerate(samples):
        server = s.get("server") or {}
        prompt = int(s.get("prompt_tokens") or 0)
        output = int(s.get("output_tokens") or 0)
        acc = _num(server.get("spec_accept_len")) or 1.0
        r = RequestRoofline(index=i, phase=str(s.get("phase")), rep=int(s.get("rep") or 0),
                            context_tokens=prompt + output / 2, accept_len=acc)
        if cost.weights_bytes is not None:
            r.bytes_per_step = (cost.weights_bytes + (cost.kv_bytes_per_token or 0.0) * r.context_tokens
                                + cost.state_bytes_per_step)
        r.decode_tok_s = _num(s.get("decode_tok_s"))
        if r.bytes_per_step and bw:
            r.decode_ceiling_tok_s = bw * 1e9 * acc / r.bytes_per_step
            if r.decode_tok_s:
                r.decode_share = r.decode_tok_s / r.decode_ceiling_tok_s
                r.decode_gb_s = r.decode_tok_s / acc * r.bytes_per_step / 1e9
                kind, text = _judge(r.decode_share, r.bytes_per_step / (bw * 1e9), OVERHEAD_STEP_S, "decode")
                if kind and text:
                    r.flags.append(text)
                    seen[("decode", kind)] = seen.get(("decode", kind), 0) + (r.phase != "warmup")
        cached = int(server.get("prompt_tokens_cached") or server.get("prefix_cache_hits") or 0)
        cached = min(cached, prompt)
        r.prefill_tokens = prompt - cached
        if server.get("prefill_s"):
            r.prefill_s, r.prefill_time_source = float(server["prefill_s"]), "server prefill time"
        elif _num(s.get("ttft_s")):
            r.prefill_s, r.prefill_time_source = float(s["ttft_s"]), "client TTFT"
        if (cost.linear_params is not None and r.prefill_s and r.prefill_tokens > 0 and cost.attention_layers
                and cost.attention_heads and cost.head_size):
            flops = (2 * cost.linear_params * r.prefill_tokens
                     + cost.attention_layers * cost.attention_heads
                     * (cost.head_size + (cost.head_size_v or cost.head_size)) * (prompt ** 2 - cached ** 2))
            r.prefill_tflops = flops / r.prefill_s / 1e12
            if peak:
                r.prefill_share = r.prefill_tflops / peak
                kind, text = _judge(r.prefill_share, flops / (peak * 1e12), OVERHEAD_PREFILL_S, "prefill")
                if kind and text:
                    r.flags.append(text)
                    seen[("prefill", kind)] = seen.get(("prefill", kind), 0) + (r.phase != "warmup")
        out.requests.append(r)
    for phase in dict.fromkeys(r.phase for r in out.requests):
        rs = [r for r in out.requests if r.phase == phase]
        out.phases[phase] = PhaseRoofline(
            requests=len(rs), decode_share=_median([r.decode_share for r in rs]),
            decode_tok_s=_median([r.decode_tok_s for r in rs]),
            decode_ceiling_tok_s=_median([r.decode_ceiling_tok_s for r in rs]),
            decode_gb_s=_median([r.decode_gb_s for r in rs]), accept_len=_median([r.accept_len for r in rs]),
            context_tokens=_median([r.context_tokens for r in rs]),
            prefill_share=_median([r.prefill_share for r in rs]),
            prefill_tflops=_median([r.prefill_tflops for r in rs]))
    n = sum(1 for r in out.requests if r.phase != "warmup")
    for (what, kind), k in seen.items():
        if not k:
            continue
        text = _SUMMARY[kind].format(what=what, k=k, n=n, low=LOW_SHARE,
                                     ms=(OVERHEAD_STEP_S if what == "decode" else OVERHEAD_PREFILL_S) * 1e3)
        (out.notes if kind == "overhead" else out.problems).append(text)
    if bw is None:
        out.notes.append("no memory bandwidth: no decode ceiling")
    if cost.weights_bytes is None:
        out.notes.append("no weights figure: no decode ceiling")
    out.notes += [n for n in ceilings.notes + cost.notes if n not in out.notes]
    return out
