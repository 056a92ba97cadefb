"""A/B stage 4, chart: every sample of both arms per bench metric, as a PNG (matplotlib)."""

from __future__ import annotations

import io
from pathlib import Path

from servedeck.ab.stats import BENCH_PHASES, Comparison, MetricComparison
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write


def chart_png(comparison: Comparison) -> bytes:
    """Render the chart to PNG bytes: one panel per bench metric and phase (every sample of
    both arms as points, min–max as a vertical bar, median as a line) plus the KV pool (one value per arm).

    Raises:
        ServedeckError: there is nothing to plot (no bench metrics and no KV pool in either arm).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[MetricComparison] = [m for m in comparison.bench
                                      if (m.samples_a or m.samples_b) and m.phase in BENCH_PHASES
                                      and m.name not in LIMIT_PANELS]
    kv = comparison.metric("kv_cache_tokens")
    if kv and (kv.samples_a or kv.samples_b):
        panels.append(kv)
    limits = [name for name in LIMIT_PANELS
              if any(m.name == name and (m.samples_a or m.samples_b) for m in comparison.bench)]
    panels += limits  # type: ignore[arg-type]  # drawn by _limit_panel
    if not panels:
        raise ServedeckError("nothing to chart: neither run has benchmark samples or a KV pool size")
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.8 * nrows), squeeze=False)
    colors = ("#4c72b0", "#dd8452")
    for ax, m in zip(axes.flat, panels):
        if isinstance(m, str):
            _limit_panel(ax, comparison, m, colors)
            continue
        for i, (_arm, samples, median) in enumerate(((comparison.arm_a, m.samples_a, m.a),
                                                      (comparison.arm_b, m.samples_b, m.b))):
            if median is not None:
                ax.hlines(median, i - 0.3, i + 0.3, color=colors[i], linewidth=2.5, zorder=4)
            if samples:
                jitter = [i + (k - (len(samples) - 1) / 2) * 0.06 for k in range(len(samples))]
                ax.scatter(jitter, samples, color=colors[i], s=14, zorder=3)
                ax.vlines(i, min(samples), max(samples), color=colors[i], linewidth=1.2, zorder=2)
        ax.set_xticks([0, 1], ["A", "B"])
        title = m.key if m.phase != "startup" else f"{m.name} (single)"
        ax.set_title(f"{title}\n{m.verdict}", fontsize=8)
        ax.tick_params(labelsize=7)
        values = [*m.samples_a, *m.samples_b]
        if values:  # zero-based when every value is >= 0: the gap between the arms reads as a ratio
            lo, hi = min(values), max(values)
            pad = (hi - lo) * 0.3 or abs(hi) * 0.05 or 1.0
            ax.set_ylim(0.0 if lo >= 0 else lo - pad, hi + pad)
        _units(ax, m.name)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"A = {comparison.arm_a}   B = {comparison.arm_b}   (points: samples, line: median, bar: min–max)",
                 fontsize=9)
    return _png(fig)


def _png(fig) -> bytes:
    """``fig`` laid out and rendered as PNG bytes (110 dpi); the figure is closed."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _units(ax, name: str) -> None:
    """The unit of ``name`` on the y-axis (from its name: :func:`servedeck.numfmt.unit`), the
    arms on the x-axis, and plain tick labels (no ``1e6`` offset label above the axis)."""
    from servedeck.numfmt import unit
    ax.set_ylabel(unit(name).strip() or ("%" if name.endswith("_pct") else "value"), fontsize=7)
    ax.set_xlabel("arm", fontsize=7)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)


#: The physical-limit metrics, each drawn in one panel of its own (cold and warm side by side,
#: zero-based axis, unit on the axis) instead of the per-metric panels: title, axis label, and
#: the 100 % line for a share of the ceiling.
LIMIT_PANELS = {"decode_roofline_pct": ("decode vs memory-bandwidth ceiling", "share of ceiling (%)", 100.0),
                "energy_j_per_token": ("energy per output token", "energy (J / output token)", None)}


def _limit_panel(ax, comparison: Comparison, name: str, colors) -> None:
    """One limit metric, cold and warm phases, both arms: samples as points, medians as lines,
    y from 0 (a share of a ceiling and an energy are read as ratios to zero)."""
    title, ylabel, ceiling = LIMIT_PANELS[name]
    ticks, labels, top = [], [], 0.0
    for k, phase in enumerate(("cold", "warm")):
        m = comparison.metric(name, phase)
        if m is None:
            continue
        for i, (samples, median) in enumerate(((m.samples_a, m.a), (m.samples_b, m.b))):
            x = 2.5 * k + i
            if samples:
                jitter = [x + (j - (len(samples) - 1) / 2) * 0.06 for j in range(len(samples))]
                ax.scatter(jitter, samples, color=colors[i], s=14, zorder=3)
                top = max(top, *samples)
            if median is not None:
                ax.hlines(median, x - 0.3, x + 0.3, color=colors[i], linewidth=2.5, zorder=4)
            ticks.append(x)
            labels.append(f"{phase}\n{'AB'[i]}")
    if ceiling is not None:
        ax.axhline(ceiling, color="0.4", linestyle="--", linewidth=1)
        ax.text(ax.get_xlim()[0], ceiling, " ceiling", va="bottom", fontsize=6, color="0.3")
        top = max(top, ceiling)
    ax.set_ylim(0, top * 1.15 or 1.0)
    ax.set_xticks(ticks, labels)
    ax.set_ylabel(ylabel, fontsize=7)
    ax.set_title(title, fontsize=8)
    ax.tick_params(labelsize=7)


def render_chart(comparison: Comparison, path: Path) -> Path:
    """Write the comparison chart (PNG, see :func:`chart_png`) atomically to ``path``.

    Raises:
        ServedeckError: nothing to plot.
    """
    return atomic_write(path, chart_png(comparison))


def load_chart_png(load) -> bytes:
    """Render both arms under load to PNG bytes (:class:`servedeck.ab.load.LoadComparison`):
    output throughput against median end-to-end latency, goodput (and request throughput,
    dashed) against load, the share of requests meeting the SLO against load with its 95 %
    interval and the SLO's share as a line, and the SLO percentile of TTFT against load with
    its interval. Axes start at zero and carry their units.

    Raises:
        ServedeckError: no level in common.
    """
    import statistics

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not load.levels:
        raise ServedeckError("nothing to chart: the arms ran no load level in common")
    colors = ("#4c72b0", "#dd8452")
    q = load.slo.q if load.slo else 0.9
    qlabel = f"p{q * 100:g}"
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
    xs = [lv.value for lv in load.levels]
    unit = load.unit
    for i, (arm, name) in enumerate((("a", "A"), ("b", "B"))):
        sides = [getattr(lv, arm) for lv in load.levels]
        color = colors[i]
        thr = [statistics.fmean(s.output_tok_s) for s in sides]
        med = [s.medians["e2e_s"].value if s.medians.get("e2e_s") else None for s in sides]
        pts = [(t, m) for t, m in zip(thr, med) if m is not None]
        if pts:
            axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=name)
        for lv, t, m in zip(load.levels, thr, med):
            if m is not None:
                axes[0].annotate(lv.label, (t, m), fontsize=6, xytext=(3, 3), textcoords="offset points")
        axes[1].plot(xs, [statistics.fmean(s.request_rps) for s in sides], "--", color=color, alpha=0.6,
                     label=f"{name} completed")
        if load.slo is not None:
            axes[1].plot(xs, [statistics.fmean(s.goodput_rps) if s.goodput_rps else 0.0 for s in sides], "o-",
                         color=color, label=f"{name} good")
            shares = [(x, s.attainment) for x, s in zip(xs, sides) if s.attainment and s.attainment.n]
            if shares:
                axes[2].errorbar([x for x, _ in shares], [a.value * 100 for _, a in shares],
                                 yerr=[[(a.value - a.low) * 100 for _, a in shares],
                                       [(a.high - a.value) * 100 for _, a in shares]],
                                 fmt="o-", color=color, capsize=3, label=name)
        ttft = [(x, s.percentiles.get("ttft_s")) for x, s in zip(xs, sides)]
        rep = [(x, p) for x, p in ttft if p is not None and p.value is not None]
        if rep:
            axes[3].errorbar([x for x, _ in rep], [p.value for _, p in rep],
                             yerr=[[p.value - p.low for _, p in rep], [p.high - p.value for _, p in rep]],
                             fmt="o-", color=color, capsize=3, label=name)
    axes[0].set_xlabel("output throughput (tokens/s)", fontsize=8)
    axes[0].set_ylabel("median end-to-end latency (s)", fontsize=8)
    axes[0].set_title("throughput vs latency", fontsize=9)
    axes[1].set_xlabel(f"load ({unit})", fontsize=8)
    axes[1].set_ylabel("requests/s", fontsize=8)
    axes[1].set_title("goodput vs load" if load.slo else "throughput vs load", fontsize=9)
    axes[2].set_xlabel(f"load ({unit})", fontsize=8)
    axes[2].set_ylabel("requests meeting the SLO (%)", fontsize=8)
    axes[2].set_title("SLO share (95 % interval)", fontsize=9)
    if load.slo is not None:
        axes[2].axhline(q * 100, color="grey", linestyle=":", linewidth=1)
        axes[2].set_ylim(0, 105)
    else:
        axes[2].text(0.5, 0.5, "no SLO", ha="center", va="center", transform=axes[2].transAxes)
    axes[3].set_xlabel(f"load ({unit})", fontsize=8)
    axes[3].set_ylabel(f"{qlabel} TTFT (s)", fontsize=8)
    axes[3].set_title(f"{qlabel} TTFT (95 % interval)", fontsize=9)
    if load.slo is not None and load.slo.ttft_s is not None:
        axes[3].axhline(load.slo.ttft_s, color="grey", linestyle=":", linewidth=1)
    for ax in axes:
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.tick_params(labelsize=7)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    slo = f"   SLO {load.slo.describe()}" if load.slo else ""
    fig.suptitle(f"under load: {load.workload}, {load.load}{slo}", fontsize=9)
    return _png(fig)


def render_load_chart(load, path: Path) -> Path:
    """Write :func:`load_chart_png` atomically to ``path``.

    Raises:
        ServedeckError: nothing to plot.
    """
    return atomic_write(path, load_chart_png(load))
