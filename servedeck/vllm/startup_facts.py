"""What a vLLM startup log said, as data (:class:`StartupFacts`), and its summary in words.

:mod:`servedeck.vllm.startup_log` reads a log into these facts (its docstring gives the log
formats, vLLM 0.10.2 to 0.33.0, and the meaning of ``starts``, readiness, runtime errors and
compile time); a run's ``startup.json`` holds :meth:`StartupFacts.to_dict`. This module is all
that a command showing recorded facts needs (``servedeck show``), without the parser's rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from servedeck.textfmt import clip

__all__ = ["DOCUMENTED_KEYS", "StartupFacts", "compile_range_signature", "start_history", "summarize",
           "format_summary", "prefix_caching_reach"]

#: The ``startup.json`` keys documented in ``docs/run-record.md`` ("startup.json keys"),
#: in that order. :meth:`StartupFacts.to_dict` emits these first, then the extra keys.
DOCUMENTED_KEYS: tuple[str, ...] = (
    "vllm_version", "non_default_args", "chunked_prefill_max_num_batched_tokens", "warnings",
    "max_num_scheduled_tokens_warning", "model_loading_gib", "model_loading_s", "compile_ranges",
    "torch_compile_total_s", "compile_cache_hit", "available_kv_cache_gib", "kv_cache_tokens",
    "max_concurrency", "max_concurrency_tokens_per_request", "graph_capture_s",
    "graph_capture_gib", "init_engine_s", "init_engine_compilation_s", "free_memory_gib",
    "total_memory_gib", "peak_activation_gib", "non_torch_gib", "server_address",
    "server_started", "application_startup_complete", "first_log_ts", "server_start_ts",
    "time_to_ready_s", "error",
)


@dataclass
class StartupFacts:
    """Facts read from one vLLM startup log; every field is ``None`` when the log does not say.

    Units are in the names (``_gib`` GiB, ``_s`` seconds, ``_tokens`` tokens). Timestamps are
    the log's own ``"MM-DD HH:MM:SS"`` (no year). List/dict shapes:

    - ``warnings``: ``[{"id", "text", "level"}]``, exact duplicates dropped. Known ids:
      ``max_num_scheduled_tokens``, ``spec_method_deprecated``, ``min_p_logit_bias_spec``,
      ``padding_layers``, ``async_scheduling_disabled``, ``xpu_graph_unsupported``,
      ``compile_cache_load_failed``; any other
      WARNING/ERROR/CRITICAL line has id ``other``.
    - ``compile_ranges``: ``[{"graph", "range", "compile_s", "cache_hit"}]``; ``graph`` is the
      ``[tag]`` prefix or the last ``Using cache directory: .../<graph>`` name (else ``None``);
      ``range`` is as printed (``"(1, 8192)"``), ``"shape 8"`` or ``"dynamic shape"`` for
      0.10/0.11; ``compile_s`` is the cache load time when ``cache_hit``.
    - ``error``: ``{"kind", "text", "suggested_value", "value", "valid_values", "phase",
      "progress", "process", "ts", "hint"}`` (see :func:`parse_startup_log`; ``phase`` is the
      startup phase it happened in, :data:`servedeck.vllm.startup_causes.PHASES`; ``progress``
      that phase's progress bar, ``"8/14 checkpoint shards"``; ``hint`` the fix) or ``None``;
      a killed process adds ``signal`` (``"SIGKILL"``), ``exit_code`` (-9), ``killed`` (the
      process name) and ``line`` (the log line that says so).
    - ``causes``: every start's candidate causes, ranked (``servedeck.vllm.startup_causes.
      rank_causes``), each an ``error``-shaped dict with its ``start`` (1-based) and ``rank``;
      ``root_cause`` is the first, the likeliest cause over the whole log.
    - ``phase_reached``: the last startup phase the latest start's log reached.
    - ``attention_block_size_tokens``: the KV block size the engine set itself ("Setting
      attention block size to N tokens ..."), with its ``attention_block_size_reason``; raised
      to fit a Mamba page on hybrid models (``hybrid_model``, ``mamba_page_padding_pct``).
    - ``spec_decoding``: one dict per ``SpecDecoding metrics`` line: ``ts``,
      ``mean_acceptance_length``, ``speculative_depth``, ``accepted_tok_s``, ``drafted_tok_s``,
      ``accepted_tokens``, ``drafted_tokens``, ``per_position_acceptance_rate`` (list of float),
      ``avg_draft_acceptance_rate_pct`` (``None`` for ``nan%``). Counts are per log window.
    """

    # documented keys (docs/run-record.md)
    vllm_version: str | None = None
    non_default_args: dict[str, Any] | None = None
    chunked_prefill_max_num_batched_tokens: int | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list)
    max_num_scheduled_tokens_warning: int | None = None
    model_loading_gib: float | None = None
    model_loading_s: float | None = None
    compile_ranges: list[dict[str, Any]] = field(default_factory=list)
    torch_compile_total_s: float | None = None
    compile_cache_hit: bool | None = None
    available_kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens_per_request: int | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    init_engine_s: float | None = None
    init_engine_compilation_s: float | None = None
    free_memory_gib: float | None = None
    total_memory_gib: float | None = None
    peak_activation_gib: float | None = None
    non_torch_gib: float | None = None
    server_address: str | None = None
    server_started: bool = False
    application_startup_complete: bool = False
    first_log_ts: str | None = None
    server_start_ts: str | None = None
    time_to_ready_s: float | None = None
    error: dict[str, Any] | None = None
    # extra keys (not yet in docs/run-record.md)
    model: str | None = None
    max_model_len: int | None = None
    engine_version: str | None = None
    weights_gib: float | None = None
    cudagraph_memory_gib: float | None = None
    peak_memory_gib: float | None = None
    consumed_memory_gib: float | None = None
    requested_memory_gib: float | None = None
    gpu_memory_utilization: float | None = None
    cpu_kv_cache_gib: float | None = None
    kv_cache_device: str | None = None
    encoder_cache_budget_tokens: int | None = None
    torch_compile_s_by_graph: dict[str, float] | None = None
    warmup_s: float | None = None
    aot_saved: list[dict[str, Any]] = field(default_factory=list)
    aot_loaded: list[dict[str, Any]] = field(default_factory=list)
    init_engine_compilation_parts_s: dict[str, float] | None = None
    spec_decoding: list[dict[str, Any]] = field(default_factory=list)
    # readiness, restarts and runtime errors (see the module docstring)
    ready: bool = False
    ready_signal: str | None = None
    ready_ts: str | None = None
    torch_compile_total_source: str | None = None
    runtime_errors: list[dict[str, Any]] = field(default_factory=list)
    restart_count: int = 0
    starts: list[dict[str, Any]] = field(default_factory=list)
    # what ended the start(s) and where (see servedeck.vllm.startup_causes)
    phase_reached: str | None = None
    root_cause: dict[str, Any] | None = None
    causes: list[dict[str, Any]] = field(default_factory=list)
    # hybrid (Mamba / Gated DeltaNet + attention) models and the KV block size
    hybrid_model: bool | None = None
    attention_block_size_tokens: int | None = None
    attention_block_size_reason: str | None = None
    mamba_page_padding_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict: the documented keys in order, then the extra keys."""
        out: dict[str, Any] = {}
        for name in DOCUMENTED_KEYS:
            out[name] = _jsonable(getattr(self, name))
        for f in fields(self):
            if f.name not in out:
                out[f.name] = _jsonable(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StartupFacts":
        """Rebuild facts from :meth:`to_dict` output (e.g. a run's ``startup.json``).

        Unknown keys are ignored so records written by other servedeck versions still load.
        """
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [_jsonable(v) for v in sorted(value, key=repr)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _coerce(facts: StartupFacts | dict[str, Any]) -> StartupFacts:
    return facts if isinstance(facts, StartupFacts) else StartupFacts.from_dict(facts)


def compile_range_signature(facts: StartupFacts | dict[str, Any]) -> list[str] | None:
    """Return the sorted distinct compiled graphs and ranges, e.g. ``["backbone (1, 8192)",
    "eagle_head (1, 8192)"]``, or ``None`` when the log has no compile lines.

    Two runs whose signatures differ compiled different ranges: the newer one paid (or will
    pay) a fresh compile and kernel JIT. Graphs without a name appear as the range alone.
    """
    f = _coerce(facts)
    if not f.compile_ranges:
        return None
    sig = {f"{r['graph']} {r['range']}" if r.get("graph") else str(r["range"]) for r in f.compile_ranges}
    return sorted(sig)


def _g(x: float | None) -> str:
    """Format a number with at most 2 decimals and no trailing zeros (``61.2``, ``61``)."""
    if x is None:
        return "?"
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def _tok(x: int | None) -> str:
    return "?" if x is None else f"{x:,}"


_SIGNAL_WORDS = {"server_address": "vLLM's server address line", "route_list": "vLLM's route list",
                 "uvicorn_running": "uvicorn's \"Uvicorn running on\" line",
                 "uvicorn_startup_complete": "uvicorn's \"Application startup complete.\"",
                 "request_served": "a request answered (uvicorn's access log; the start-up lines are not in the log)",
                 "engine_stats": "vLLM's engine stats line (the start-up lines are not in the log)"}


def _short(text: str, limit: int = 160) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, marked with ``...``."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[: limit - 3].rsplit(" ", 1)[0].rstrip(" ,;:") + "..."


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def start_history(facts: StartupFacts | dict[str, Any]) -> str:
    """One sentence on every start in the log, e.g. ``"3 starts (2 restarts): the 1st and 2nd
    failed with insufficient_free_memory (ValueError: Free memory on device ...); the 3rd
    (current) is ready"``. Starts that failed with the same error kind are grouped. Empty when
    the log holds no start. Accepts facts or a ``startup.json`` dict."""
    f = _coerce(facts)
    if not f.starts:
        return ""
    n = len(f.starts)
    head = f"{n} start{'s' if n != 1 else ''} ({f.restart_count} restart{'s' if f.restart_count != 1 else ''})"
    groups: dict[tuple[str, str], list[int]] = {}
    texts: dict[tuple[str, str], str] = {}
    for st in f.starts[:-1]:
        err = st.get("error")
        if st["outcome"] == "failed" and err:
            key = ("failed", str(err["kind"]))
            texts.setdefault(key, f"failed with {err['kind']} ({_short(err['text'])})")
        elif st["outcome"] == "ready" and st.get("runtime_errors"):
            first = st["runtime_errors"][0]
            key = ("crashed", _short(first["text"]))
            texts.setdefault(key, f"became ready, then failed at {first['ts']} ({key[1]})")
        elif st["outcome"] == "ready":
            key = ("ready", "")
            texts.setdefault(key, "became ready, then stopped")
        else:
            key = ("stopped", "")
            texts.setdefault(key, "stopped before it became ready, with no error in the log")
        groups.setdefault(key, []).append(st["index"])
    parts = [f"the {_join([_ordinal(i) for i in idx])} {texts[key]}" for key, idx in groups.items()]
    last = f.starts[-1]
    now = {"ready": "is ready", "failed": "failed", "starting": "is starting"}.get(last["outcome"], last["outcome"])
    if last["outcome"] == "failed" and last.get("error"):
        now += f" with {last['error']['kind']}"
    parts.append(f"the {_ordinal(last['index'])} (current) {now}")
    return head + ": " + "; ".join(parts)


def summarize(facts: StartupFacts | dict[str, Any]) -> list[tuple[str, str]]:
    """Return the "Startup" bullets of a run report as ``(label, text)`` pairs.

    Labels, in order, each present only when the log gave the facts: ``error`` (with the phase
    it happened in and the fix), ``root cause`` (when the likeliest cause over all starts is
    another than the latest start's error), ``restarts``, ``version``, ``non-default args``,
    ``chunked prefill``, ``warnings``, ``compile``, ``engine init``, ``model loading``, ``KV
    pool``, ``max concurrency``, ``memory``, ``weights``, ``free memory``, ``server``,
    ``runtime errors``, ``attention block``, ``spec decoding``. All but ``restarts`` and
    ``root cause`` describe the latest start. Accepts facts or a ``startup.json`` dict.
    """
    f = _coerce(facts)
    out: list[tuple[str, str]] = []
    if f.error:
        text = f"{f.error['kind']}: {clip(f.error['text'], 300)}"  # cut between words
        if f.error.get("suggested_value") is not None:
            text += f" (suggested value: {f.error['suggested_value']})"
        if f.error.get("phase"):
            where = f.error["phase"] + (f", {f.error['progress']}" if f.error.get("progress") else "")
            text += f"; during {where}"
        if f.error.get("hint"):
            text += f"; fix: {f.error['hint']}"
        out.append(("error", text))
    root = f.root_cause
    if root and f.error and (root.get("kind"), root.get("text")) != (f.error.get("kind"), f.error.get("text")):
        out.append(("root cause", f"start {root.get('start')}: {root['kind']}: {_short(root['text'], 200)}"
                                  + (f"; fix: {root['hint']}" if root.get("hint") else "")))
    if f.restart_count:
        out.append(("restarts", start_history(f)))
    if f.vllm_version or f.engine_version:
        out.append(("version", f"vLLM {f.vllm_version or f.engine_version}"))
    if f.non_default_args is not None:
        out.append(("non-default args", ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                                                  for k, v in f.non_default_args.items()) or "none"))
    if f.chunked_prefill_max_num_batched_tokens is not None:
        out.append(("chunked prefill", f"on at {f.chunked_prefill_max_num_batched_tokens}"))
    named = [w for w in f.warnings if w["id"] != "other"]
    others = len(f.warnings) - len(named)
    if f.warnings:
        texts = [clip(w["text"], 160) for w in named]
        if others:
            texts.append(f"{others} other warning/error line(s)")
        out.append(("warnings", "; ".join(texts)))
    else:
        out.append(("warnings", "none"))
    if f.compile_ranges:
        groups: dict[str, list[str]] = {}
        for r in f.compile_ranges:
            name = r.get("graph") or "graph"
            how = "from cache" if r.get("cache_hit") else ""
            groups.setdefault(str(r["range"]), []).append(
                f"{name} {_g(r.get('compile_s'))} s" + (f" {how}" if how else ""))
        text = "; ".join(f"range {rng}: {' + '.join(items)}" for rng, items in groups.items())
        if f.torch_compile_total_s is not None:
            text += f"; torch.compile total {_g(f.torch_compile_total_s)} s"
        if f.compile_cache_hit is not None:
            text += " (cache hit)" if f.compile_cache_hit else " (fresh compile)"
        out.append(("compile", text))
    elif f.torch_compile_total_s is not None or f.aot_saved or f.aot_loaded:
        parts = []
        if f.torch_compile_total_s is not None:
            how = " (from log time stamps)" if f.torch_compile_total_source == "log_timestamps" else ""
            parts.append(f"torch.compile total {_g(f.torch_compile_total_s)} s{how}")
        if f.aot_saved:
            parts.append("AOT compiled and saved: " + ", ".join(a["graph"] or "model" for a in f.aot_saved))
        if f.aot_loaded:
            parts.append("AOT loaded from cache: " + ", ".join(a["graph"] or "model" for a in f.aot_loaded))
        out.append(("compile", "; ".join(parts)))
    if f.init_engine_s is not None:
        text = f"{_g(f.init_engine_s)} s"
        if f.init_engine_compilation_s is not None:
            text += f" (compile {_g(f.init_engine_compilation_s)} s)"
        if f.graph_capture_s is not None:
            text += f"; graph capture {_g(f.graph_capture_s)} s, {_g(f.graph_capture_gib)} GiB"
        out.append(("engine init", text))
    if f.model_loading_s is not None:
        out.append(("model loading", f"{_g(f.model_loading_gib)} GiB in {_g(f.model_loading_s)} s"))
    if f.available_kv_cache_gib is not None or f.kv_cache_tokens is not None:
        out.append(("KV pool", f"available {_g(f.available_kv_cache_gib)} GiB -> {_tok(f.kv_cache_tokens)} tokens"))
    if f.max_concurrency is not None:
        out.append(("max concurrency", f"{f.max_concurrency:.2f}x at "
                                       f"{_tok(f.max_concurrency_tokens_per_request)} tokens/request"))
    mem = [(label, value) for label, value in (
        ("peak activation", f.peak_activation_gib), ("peak memory", f.peak_memory_gib),
        ("non-torch", f.non_torch_gib), ("weights + non-torch", f.consumed_memory_gib),
        ("CUDAGraph", f.cudagraph_memory_gib)) if value is not None]
    if mem:
        out.append(("memory", ", ".join(f"{label} {_g(value)} GiB" for label, value in mem)))
    weights = f.weights_gib if f.weights_gib is not None else f.model_loading_gib
    if weights is not None:
        out.append(("weights", f"{_g(weights)} GiB"))
    if f.free_memory_gib is not None:
        out.append(("free memory", f"{_g(f.free_memory_gib)}/{_g(f.total_memory_gib)} GiB at startup"))
    if f.server_started or f.application_startup_complete or f.ready:
        text = f"{f.server_address or '?'} at {f.server_start_ts or f.ready_ts or '?'}"
        if f.first_log_ts:
            text += f" (first log line {f.first_log_ts})"
        if f.application_startup_complete:
            text += ", application startup complete"
        elif f.ready:
            text += f", serving (ready by {_SIGNAL_WORDS.get(f.ready_signal or '', f.ready_signal)})"
            level = (f.non_default_args or {}).get("uvicorn_log_level")
            if isinstance(level, str) and level.lower() not in ("info", "debug", "trace"):
                text += (f"; uvicorn_log_level={level}: uvicorn's INFO line "
                         "\"Application startup complete.\" is never printed")
        else:
            text += ", not yet ready"
        out.append(("server", text))
    if f.runtime_errors:
        items = [f"{e['ts'] or '?'} {_short(e['text'], 200)}" for e in f.runtime_errors[:3]]
        if len(f.runtime_errors) > 3:
            items.append(f"{len(f.runtime_errors) - 3} more")
        out.append(("runtime errors", "after the server became ready: " + "; ".join(items)))
    if f.attention_block_size_tokens is not None:
        text = f"{f.attention_block_size_tokens} tokens per KV block, set by the engine"
        if f.attention_block_size_reason:
            text += f" {f.attention_block_size_reason}"
        if f.mamba_page_padding_pct is not None:
            text += f"; Mamba page padded by {_g(f.mamba_page_padding_pct)}%"
        out.append(("attention block", text))
    if f.spec_decoding:
        lens = [s["mean_acceptance_length"] for s in f.spec_decoding if s["mean_acceptance_length"] is not None]
        acc = sum(s["accepted_tokens"] for s in f.spec_decoding)
        dr = sum(s["drafted_tokens"] for s in f.spec_decoding)
        text = f"{len(f.spec_decoding)} window(s), mean acceptance length {', '.join(f'{x:.2f}' for x in lens)}"
        if dr:
            text += f"; accepted {acc}/{dr} drafted ({100.0 * acc / dr:.1f}%)"
        out.append(("spec decoding", text))
    return out


def prefix_caching_reach(facts: StartupFacts | dict[str, Any], context_tokens: int | None,
                         prefix_caching: bool | None = None) -> str | None:
    """A warning when the KV block size the engine set defeats prefix caching for a context of
    ``context_tokens`` (a profile's ``max_model_len``, or the prompts it is benchmarked with);
    None when it does not, when the log names no block size, or when prefix caching is off.

    vLLM's prefix cache reuses whole KV blocks only (``vllm/v1/core/kv_cache_utils.py`` hashes
    full blocks; for hybrid models the Mamba state is kept at block boundaries): a shared prefix
    shorter than one block never hits, and a prompt of L tokens reuses at most
    ``floor(L / block) * block`` of them. The warning is given when that is less than half of
    the context: the engine raised the block so far (784 tokens for a hybrid model's Mamba page,
    ``attention_block_size_tokens``) that most of a repeated prompt is computed again."""
    f = _coerce(facts)
    block = f.attention_block_size_tokens
    if prefix_caching is False or not block or not context_tokens or context_tokens <= 0:
        return None
    reusable = (context_tokens // block) * block
    if 2 * reusable >= context_tokens:
        return None
    why = f" {f.attention_block_size_reason}" if f.attention_block_size_reason else ""
    if reusable == 0:
        reach = f"a context of {context_tokens:,} tokens never fills one block, so prefix caching cannot hit"
    else:
        reach = (f"a {context_tokens:,}-token prompt reuses at most {reusable:,} tokens "
                 f"({100 * reusable // context_tokens}%) of a shared prefix")
    return (f"the engine set the KV block size to {block:,} tokens{why}: prefix caching reuses whole "
            f"blocks only, and {reach}")


def format_summary(facts: StartupFacts | dict[str, Any]) -> str:
    """Render :func:`summarize` as text bullets, one ``• label: text`` line each."""
    return "\n".join(f"\u2022 {label}: {text}" for label, text in summarize(facts))
