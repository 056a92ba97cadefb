"""The A/B run report (markdown from ``templates/report.md.j2``) and its chart (PNG).

Structure follows the user's own A/B report (``shared/seeds/``): title with both runs and the
changed variable, config diff, hypothesis, startup and benchmark stats, generated findings
with numbers and noise verdicts, a verdict left for the user, and both deployed compose files
verbatim as appendices.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import jinja2

from servedeck.ab.compare import ArmDiff, Comparison, MetricComparison, Variable, WarningChange, fmt_value
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.model.project import shipped_root

COARSE_BELOW_N = 5
"""Below this many samples per arm a bootstrap interval is noted as coarse in the findings."""

TEMPLATES_DIR = shipped_root() / "templates"
REPORT_TEMPLATE = "report.md.j2"

#: Human names of warning ids for findings sentences.
WARNING_KINDS = {"max_num_scheduled_tokens": "scheduler warning",
                 "spec_method_deprecated": "speculative-method warning"}

#: Startup facts shown as plain "A → B" findings when they changed (besides the KV pool line).
_STARTUP_FINDING_FACTS = ("torch_compile_total_s", "init_engine_s", "time_to_ready_s",
                          "peak_activation_gib", "model_loading_gib")


# --------------------------------------------------------------------------------------------
# Number formatting
# --------------------------------------------------------------------------------------------

def fmt_num(x: float | int | None) -> str:
    """Format a measured value: integers with thousands separators (``264,846``), other values
    with up to 3 decimals below 10, 2 below 1000 and 1 above, trailing zeros dropped
    (``2.548``, ``56.6``, ``170.98``, ``6,438.6``)."""
    if x is None:
        return "–"
    if isinstance(x, float) and x.is_integer() and abs(x) >= 100:
        x = int(x)
    if isinstance(x, int):
        return f"{x:,}"
    decimals = 3 if abs(x) < 10 else 2 if abs(x) < 1000 else 1
    text = f"{x:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0")
        if text.endswith("."):
            text += "0"
    return text


def fmt_signed(x: float | None) -> str:
    """A difference with its sign; the minus is U+2212 (``−28,376``)."""
    if x is None:
        return "–"
    text = fmt_num(abs(x))
    if x > 0:
        return f"+{text}"
    if x < 0:
        return f"\u2212{text}"
    return text


def fmt_ratio(x: float | None) -> str:
    """Ratio B/A with 3 decimals."""
    return "–" if x is None else f"{x:.3f}"


# --------------------------------------------------------------------------------------------
# Findings sentences
# --------------------------------------------------------------------------------------------

def bench_sentence(m: MetricComparison) -> str:
    """``warm decode_tok_s 56.6 vs 57.0 (ratio 0.993, 95% CI 0.981–1.005): within noise``
    (B first, then A; single-sample metrics say so and are not judged)."""
    if m.verdict == "missing":
        have = "A" if m.a is not None else "B"
        return f"{m.key}: measured in {have} only ({fmt_num(m.a if m.a is not None else m.b)})"
    base = f"{m.key} {fmt_num(m.b)} vs {fmt_num(m.a)}"
    if not m.judged:
        return (f"{base} (ratio {fmt_ratio(m.ratio)}; n={len(m.samples_b)} vs {len(m.samples_a)}): "
                f"single sample, not judged")
    n = min(len(m.samples_a), len(m.samples_b))
    coarse = f"; only {n} samples per arm: a coarse interval" if n < COARSE_BELOW_N else ""
    return (f"{base} (ratio {fmt_ratio(m.ratio)}, 95% CI {m.ci_low:.3f}\u2013{m.ci_high:.3f}{coarse}): "
            f"{m.verdict}")


def kv_sentence(c: Comparison) -> str | None:
    """``KV pool −28,376 tokens (264,846 → 236,470); max concurrency 2.02× → 1.80×`` (+ GiB)."""
    kv = c.metric("kv_cache_tokens")
    if kv is None or kv.a is None or kv.b is None:
        return None
    text = (f"KV pool unchanged at {fmt_num(kv.a)} tokens" if kv.difference == 0 else
            f"KV pool {fmt_signed(kv.difference)} tokens ({fmt_num(kv.a)} \u2192 {fmt_num(kv.b)})")
    gib = c.metric("available_kv_cache_gib")
    if gib and gib.a is not None and gib.b is not None:
        text += f", available KV cache {fmt_num(gib.a)} \u2192 {fmt_num(gib.b)} GiB"
    conc = c.metric("max_concurrency")
    if conc and conc.a is not None and conc.b is not None:
        per = c.startup_b.get("max_concurrency_tokens_per_request") or \
            c.startup_a.get("max_concurrency_tokens_per_request")
        at = f" at {fmt_num(per)} tokens/request" if per else ""
        text += f"; max concurrency{at} {conc.a:.2f}\u00d7 \u2192 {conc.b:.2f}\u00d7"
    return text


def warning_sentence(w: WarningChange) -> str:
    """``scheduler warning `max_num_scheduled_tokens is set to 4096` present in A, absent in B``."""
    kind = WARNING_KINDS.get(w.id, f"warning {w.id}")
    return f"{kind} {code(w.short)} {w.status}"


def startup_sentence(m: MetricComparison) -> str:
    """``init_engine_s 162.41 → 170.98 (+8.57, higher; single sample)``."""
    return (f"{m.name} {fmt_num(m.a)} \u2192 {fmt_num(m.b)} ({fmt_signed(m.difference)}, "
            f"{m.verdict}; single sample)")


def findings(comparison: Comparison) -> list[str]:
    """Generated findings, in the order of the seed report: bench verdicts, the KV cost,
    warnings that appeared or disappeared, then other changed startup facts."""
    out = [bench_sentence(m) for m in comparison.bench]
    kv = kv_sentence(comparison)
    if kv:
        out.append(kv)
    out += [warning_sentence(w) for w in comparison.warnings if w.status != "present in both"]
    for name in _STARTUP_FINDING_FACTS:
        m = comparison.metric(name)
        if m and m.verdict in ("higher", "lower"):
            out.append(startup_sentence(m))
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def code(text: str) -> str:
    """Inline markdown code that survives backticks inside ``text`` (CommonMark code spans)."""
    longest = max((len(r) for r in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fence(text: str) -> str:
    """A backtick fence longer than any backtick run inside ``text``."""
    longest = max((len(r) for r in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ServedeckError("run record file is missing", file=str(path)) from exc


def _read_json_or_empty(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _evidence(v: Variable) -> str:
    return ", ".join(f"{d.view}:{d.path}" for d in v.evidence)


def _verification(run_dir: Path, names: set[str]) -> list[dict]:
    rows = _read_json_or_empty(run_dir / "args_verification.json")
    return [r for r in rows or [] if isinstance(r, dict) and r.get("setting") in names]


def title_change(diff: ArmDiff) -> str:
    """``max_num_batched_tokens 4096 → 8192``, ``MULTI-VARIABLE (2: a, b)`` or ``no change``."""
    v = diff.single_variable
    if v is not None:
        a = fmt_value(v.a) if v.present_a else "(absent)"
        b = fmt_value(v.b) if v.present_b else "(absent)"
        return f"{v.name} {a} \u2192 {b}"
    if not diff.differences:
        return "no change"
    return f"MULTI-VARIABLE ({len(diff.differences)}: {', '.join(v.name for v in diff.differences)})"


def render_report(diff: ArmDiff, comparison: Comparison, run_a: Path, run_b: Path,
                  hypothesis: str | None, verdict: str | None, chart_path: Path | None,
                  *, templates_dir: Path | None = None) -> str:
    """Render the A/B report as markdown.

    Args:
        diff: from :func:`servedeck.ab.compare.compare_arms` (already passed :func:`servedeck.ab.compare.guard`).
        comparison: from :func:`servedeck.ab.compare.compare_metrics`.
        run_a, run_b: the run directories (baseline, variant); their ``docker-compose.yml`` is
            appended verbatim, ``run.json``/``args_verification.json`` add context when present.
        hypothesis, verdict: user text; None leaves a placeholder (``_Verdict: to be written_``).
        chart_path: the chart image, linked relative to the report's directory by file name.
        templates_dir: where ``report.md.j2`` lives (default: the project's ``templates/``).

    Raises:
        ServedeckError: a compose file is missing or the template is not found.
    """
    run_a, run_b = Path(run_a), Path(run_b)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir or TEMPLATES_DIR)),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(code=code, num=fmt_num, signed=fmt_signed, ratio=fmt_ratio, value=fmt_value)
    try:
        template = env.get_template(REPORT_TEMPLATE)
    except jinja2.TemplateNotFound as exc:
        raise ServedeckError("report template not found",
                             file=str((templates_dir or TEMPLATES_DIR) / REPORT_TEMPLATE)) from exc
    compose_a = _read_text(run_a / "docker-compose.yml")
    compose_b = _read_text(run_b / "docker-compose.yml")
    meta_a = _read_json_or_empty(run_a / "run.json")
    meta_b = _read_json_or_empty(run_b / "run.json")
    names = {v.name for v in diff.differences}
    single = diff.single_variable
    text = template.render(
        diff=diff, comparison=comparison, single=single,
        multi=len(diff.differences) > 1, title_change=title_change(diff),
        run_a=run_a.name, run_b=run_b.name, meta_a=meta_a, meta_b=meta_b,
        model=meta_b.get("served_model_name") or meta_a.get("served_model_name"),
        variables=[{"name": v.name,
                    "a": fmt_value(v.a) if v.present_a else "(absent)",
                    "b": fmt_value(v.b) if v.present_b else "(absent)",
                    "evidence": _evidence(v)} for v in diff.differences],
        verification_b=_verification(run_b, names),
        hypothesis=hypothesis, verdict=verdict,
        findings=findings(comparison),
        chart=Path(chart_path).name if chart_path else None,
        compose_a=compose_a.rstrip("\n"), compose_b=compose_b.rstrip("\n"),
        fence_a=_fence(compose_a), fence_b=_fence(compose_b),
    )
    return text


# --------------------------------------------------------------------------------------------
# Chart
# --------------------------------------------------------------------------------------------

def chart_png(comparison: Comparison) -> bytes:
    """Render the chart to PNG bytes: one panel per bench metric and phase (every sample of
    both arms as points, min–max as a vertical bar, median as a line) plus the KV pool (one value per arm).

    Raises:
        ServedeckError: there is nothing to plot (no bench metrics and no KV pool in either arm).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[MetricComparison] = [m for m in comparison.bench if m.samples_a or m.samples_b]
    kv = comparison.metric("kv_cache_tokens")
    if kv and (kv.samples_a or kv.samples_b):
        panels.append(kv)
    if not panels:
        raise ServedeckError("nothing to chart: neither run has benchmark samples or a KV pool size")
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.8 * nrows), squeeze=False)
    colors = ("#4c72b0", "#dd8452")
    for ax, m in zip(axes.flat, panels):
        for i, (label, samples, median) in enumerate(((comparison.arm_a, m.samples_a, m.a),
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
        if values:
            lo, hi = min(values), max(values)
            pad = (hi - lo) * 0.3 or abs(hi) * 0.05 or 1.0
            ax.set_ylim(max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"A = {comparison.arm_a}   B = {comparison.arm_b}   (points: samples, line: median, bar: min–max)",
                 fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def render_chart(comparison: Comparison, path: Path) -> Path:
    """Write the comparison chart (PNG, see :func:`chart_png`) atomically to ``path``.

    Raises:
        ServedeckError: nothing to plot.
    """
    return atomic_write(path, chart_png(comparison))


def write_report(out_path: Path, diff: ArmDiff, comparison: Comparison, run_a: Path, run_b: Path,
                 hypothesis: str | None = None, verdict: str | None = None) -> tuple[Path, Path | None]:
    """Write the report to ``out_path`` and its chart beside it (``<stem>.png``), both atomically.

    The chart is written first so the report never links a missing image; when there is
    nothing to plot the report is written without a chart.

    Returns:
        ``(report_path, chart_path or None)``.
    """
    out_path = Path(out_path)
    chart_path: Path | None = out_path.with_suffix(".png")
    try:
        render_chart(comparison, chart_path)
    except ServedeckError:
        chart_path = None
    text = render_report(diff, comparison, run_a, run_b, hypothesis, verdict, chart_path)
    atomic_write(out_path, text)
    return out_path, chart_path
