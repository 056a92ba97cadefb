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
            st = summ["phases"][p][m]
            cells.append("-" if not st["n"] else f"{fmt(st['median'])} [{fmt(st['min'])}-{fmt(st['max'])}] n={st['n']}")
        rows.append((m, *cells))
    for key in ("spec_accept_len", "spec_per_position", "spec_drafts", "prefix_cache_hits", "ttft_s_server_mean"):
        cells = []
        for p in phases:
            v = summ["server"][p].get(key)
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
