"""The benchmark's end-of-run table, and the per-phase metrics it summarises.

Kept apart from :mod:`servedeck.bench.client` (which imports an HTTP client and the Prometheus
parser) so that reading a run back (``show``) stays light. The ``bench.json`` layout is
described in ``docs/run-record.md``.
"""

from __future__ import annotations

from typing import Any

#: Per-sample metrics summarised per phase in ``bench.json`` (client side, then server side).
SUMMARY_METRICS = (
    "ttft_s", "prefill_tok_s", "decode_tok_s", "decode_s", "e2e_s", "prompt_tokens",
    "output_tokens", "server_ttft_s", "ttft_client_minus_server_s", "server_decode_tok_s",
)


def format_table(result: Any) -> str:
    """Render the end-of-run table (plain text, fixed-width) from a ``bench.json`` dict or a
    :class:`servedeck.bench.client.BenchResult`.

    Rows: metrics; columns: median [min-max] per phase; then server-side spec decode and
    prefix cache figures per phase, and the warm-up sample on its own line.
    """
    summ = result if isinstance(result, dict) else result.summary()
    phases = [p for p in ("cold", "warm") if p in summ.get("phases", {})]
    rows = [("metric", *phases)]

    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    for m in SUMMARY_METRICS:
        cells = []
        for p in phases:
            st = summ["phases"][p].get(m) or {"n": 0}  # a metric an older bench.json did not have: not measured
            cells.append("-" if not st["n"] else f"{fmt(st['median'])} [{fmt(st['min'])}-{fmt(st['max'])}] n={st['n']}")
        rows.append((m, *cells))
    for key in ("spec_accept_len", "spec_per_position", "spec_drafts", "prefix_cache_hits", "ttft_s_server_mean"):
        cells = []
        for p in phases:
            v = (summ.get("server") or {}).get(p, {}).get(key)
            cells.append(", ".join(f"{x:.3f}" for x in v) if isinstance(v, list) and v else fmt(v if v != [] else None))
        rows.append((f"server.{key}", *cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    wu = summ.get("warmup")
    if wu:
        lines.append(f"warmup (excluded): ttft_s={fmt(wu['ttft_s'])} prefill_tok_s={fmt(wu['prefill_tok_s'])} "
                     f"decode_tok_s={fmt(wu['decode_tok_s'])} e2e_s={fmt(wu['e2e_s'])}")
    return "\n".join(lines)


def _cell(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _pct(p: dict | None, scale: float = 1000.0) -> str:
    """``12.3 [11.9–13.0]`` (ms) from a stored percentile, or ``n<36`` when it had too few samples."""
    if not p:
        return "-"
    if p.get("value") is None:
        return f"n<{p['needed']}" if p.get("n") else "-"
    return f"{p['value'] * scale:.3g} [{p['low'] * scale:.3g}\u2013{p['high'] * scale:.3g}]"


def format_load_table(summary: dict, capacity: dict | None = None) -> str:
    """Render a load benchmark (a ``load.json`` dict, and ``capacity.json`` when a search ran) as
    a fixed-width table: one row per level with requests (ok/failed), throughput, goodput and
    the SLO's state, TTFT/TPOT/E2E percentiles in ms with their 95 % intervals (``n<36``: too
    few samples for that percentile), the server's mean queue and preemptions, and saturation
    flags; then the capacity search's reading."""
    slo = summary.get("slo")
    head = ["level", "ok/failed", "req/s", "out tok/s", "goodput/s", "SLO", "ttft p50 ms", "ttft p90 ms",
            "tpot p50 ms", "e2e p90 ms", "queue", "preempt", "saturation"]
    rows = [head]
    for lv in summary.get("levels") or []:
        srv = lv.get("server") or {}
        judged = lv.get("slo") or {}
        att = (judged.get("attainment") or {}).get("value")
        state = f"{judged.get('state')} {att:.0%}" if judged and att is not None else "-"
        p = lv.get("percentiles") or {}
        rows.append([_level_label(lv["level"]), f"{lv['completed']}/{lv['failed']}", _cell(lv["request_rps"]),
                     _cell(lv["output_tok_s"], "{:.4g}"), _cell(judged.get("goodput_rps")), state,
                     _pct((p.get("ttft_s") or {}).get("p50")), _pct((p.get("ttft_s") or {}).get("p90")),
                     _pct((p.get("tpot_s") or {}).get("p50")), _pct((p.get("e2e_s") or {}).get("p90")),
                     _cell(srv.get("waiting_mean"), "{:.2g}"), _cell(srv.get("preemptions"), "{}"),
                     ", ".join(lv.get("saturation") or []) or "-"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    top = [f"workload {summary['workload'].get('name') or summary['workload'].get('kind')} "
           f"({summary['workload'].get('kind')}), load {summary['load']}"]
    if slo:
        limits = ", ".join(f"{k} \u2264 {v:g}" for k, v in slo.items() if k != "percentile" and v is not None)
        top.append(f"SLO p{slo['percentile']:g}: {limits} (state: the share of good requests and its 95 % "
                   f"interval against p{slo['percentile']:g})")
    return "\n".join(top + lines + (format_capacity(capacity) if capacity else []))


def format_capacity(capacity: dict) -> list[str]:
    """A capacity search (a ``capacity.json`` dict) in lines: its reading, where the server
    saturated, the knee of its throughput, and the KV check."""
    lines = [capacity.get("reading", "")]
    if capacity.get("saturation") is not None:
        lines.append(f"saturation from {capacity['saturation']:g} {capacity['unit']} "
                     f"({', '.join(capacity.get('saturation_flags') or [])})")
    if capacity.get("knee") is not None:
        lines.append(f"knee of throughput at {capacity['knee']:g} {capacity['unit']}")
    if capacity.get("kv"):
        lines.append(f"KV check: {capacity['kv']['reading']}")
    return lines


def _level_label(level: dict) -> str:
    """``c=4`` / ``2 req/s`` / ``poisson 2 req/s`` / ``ramp 1→20 req/s`` from a stored level."""
    from servedeck.bench.load import LoadLevel
    return LoadLevel.model_validate(level).label
def format_quality(quality: Any) -> str:
    """The quality probes' summary lines under the benchmark table, from a
    :class:`servedeck.bench.quality.QualityResult` (``""`` for None)."""
    if quality is None:
        return ""
    lines = [f"quality probes ({quality.duration_s:.1f} s):" if quality.duration_s is not None else "quality probes:"]
    lik = quality.likelihood
    if lik is not None:
        lines.append(f"  likelihood: {lik.error}" if lik.error else
                     f"  perplexity {lik.perplexity:.4g} over {len(lik.items)} texts ({lik.tokens:,} tokens, "
                     f"{lik.mean_logprob:.4f} nats/token)")
    if quality.generation:
        bad = [g for g in quality.generation if g.degenerate or g.error]
        kinds = sorted({k for g in bad for k in g.degenerate} | ({"error"} if any(g.error for g in bad) else set()))
        lines.append(f"  generation: {len(quality.generation)} prompts, {len(bad)} degenerate"
                     + (f" ({', '.join(kinds)})" if kinds else ""))
    for f in quality.features:
        lines.append(f"  {f.name} ({f.setting}): {f.status}" + (" BROKEN" if f.broken else "") + f" - {f.detail}")
    if quality.needle:
        tokens = max(n.context_tokens for n in quality.needle)
        lines.append(f"  needle: {sum(n.retrieved for n in quality.needle)}/{len(quality.needle)} retrieved at "
                     f"{tokens:,} tokens (depths {', '.join(f'{n.depth:.0%}' for n in quality.needle)})")
    for probe, why in quality.skipped.items():
        lines.append(f"  {probe}: skipped ({why})")
    return "\n".join(lines)
