"""A/B stage 3, report: markdown from ``templates/report.md.j2`` (chart: :mod:`servedeck.ab.chart`).

Structure follows the user's own A/B report: title with both runs and the changed variable,
config diff, hypothesis, startup and benchmark stats (each verdict with its test, p, interval,
margin and the samples a verdict would need), the host's A/A noise floor when one was measured,
the order of an interleaved experiment, generated findings, a verdict left for the user, and
both deployed compose files verbatim as appendices.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from servedeck.ab.chart import render_chart
from servedeck.ab.compare import ArmDiff, Variable, fmt_value
from servedeck.ab.load import bracket_text
from servedeck.ab.noise import NoiseFloor, noise_sentence
from servedeck.ab.stats import Comparison, MetricComparison, WarningChange
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.model.project import shipped_root
from servedeck.numfmt import fmt_load, fmt_num, fmt_pct, fmt_ratio, fmt_signed

from servedeck.runs import store
from servedeck.runs.records import ArgCheck, RunMeta

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
# Findings sentences
# --------------------------------------------------------------------------------------------

def bench_sentence(m: MetricComparison) -> str:
    """``cold decode_tok_s 58.1 vs 51.0 (ratio 1.139, 95% CI 0.99–2.2; Mann-Whitney U, exact,
    p=0.1, Holm p=0.8): no verdict: 3 vs 3 samples cannot reach …; about 140 samples per arm
    would decide at this noise`` (B first, then A)."""
    if m.verdict == "missing":
        have = "A" if m.a is not None else "B"
        return f"{m.key}: measured in {have} only ({fmt_num(m.a if m.a is not None else m.b)})"
    base = f"{m.key} {fmt_num(m.b)} vs {fmt_num(m.a)}"
    if not m.judged:
        return (f"{base} (ratio {fmt_ratio(m.ratio)}; n={len(m.samples_b)} vs {len(m.samples_a)}): "
                f"{m.verdict} ({m.reason})")
    ci = f", 95% CI {m.ci_low:.3f}\u2013{m.ci_high:.3f}" if m.ci_low is not None else ""
    test = f"{m.method}, p={m.p:.2g}, Holm p={m.p_adjusted:.2g}"
    if m.looks:
        test += f", look {m.look} of {m.looks} (n={len(m.samples_b)} vs {len(m.samples_a)})"
    text = f"{base} (ratio {fmt_ratio(m.ratio)}{ci}; {test}): {m.verdict}: {m.reason}"
    if m.verdict == "no verdict" and m.samples_needed:
        n = (f"more than {m.samples_needed - 1}" if m.samples_needed >= 10000
             else f"about {m.samples_needed}")
        text += f"; {n} samples per arm would decide at this noise ({fmt_pct(m.noise)} per request)"
    return text


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


def startup_sentence(m: MetricComparison, deployments: int = 1) -> str:
    """``init_engine_s 162.41 → 170.98 (+8.57, higher; single sample)``; an arm of several
    deployments (an interleaved experiment) compares its first ones: ``(…; first deployment of
    each arm, single sample)``."""
    which = "first deployment of each arm, single sample" if deployments > 1 else "single sample"
    return (f"{m.name} {fmt_num(m.a)} \u2192 {fmt_num(m.b)} ({fmt_signed(m.difference)}, "
            f"{m.verdict}; {which})")


def quality_findings(comparison: Comparison) -> list[str]:
    """The quality findings: the gate first (and, when it gates, which speed verdicts it
    overrules), then perplexity, agreement and standard-task sentences, then comparability notes."""
    q = comparison.quality
    if q is None:
        return []
    gate = q.gate
    out = [f"quality gate: {gate.summary()}"]
    if gate.blocks:
        favoured = [m.key for m in comparison.bench
                    if (m.verdict == "faster" and gate.arm == "B") or (m.verdict == "slower" and gate.arm == "A")]
        if favoured:
            out.append(f"{gate.arm} is faster in {', '.join(favoured)}, but cannot be called better: "
                       "its output quality fails the gate above")
    if q.likelihood is not None:
        out.append(perplexity_sentence(q.likelihood, q.texts))
    for agr in (q.next_token, q.generation):
        if agr is not None:
            out.append(agreement_sentence(agr, q.settings.reference, gate.arm))
    out += [bench_sentence(m) for m in q.tasks]
    out += [f"quality: {n}" for n in [*q.notes, *gate.notes]]
    return out


def perplexity_sentence(m: MetricComparison, texts: dict) -> str:
    """``perplexity 21.4 vs 21.37 (ratio 1.0012, 95% CI …; 12 texts, 1,432 tokens, paired
    sign-flip permutation test, exact, p=…, Holm p=…): within margin: …`` (B first)."""
    scope = f"{texts.get('items', len(m.samples_a))} texts, {texts.get('tokens', 0):,} tokens"
    ci = f", 95% CI {m.ci_low:.4f}\u2013{m.ci_high:.4f}" if m.ci_low is not None else ""
    test = f"; {m.method}, p={m.p:.2g}, Holm p={m.p_adjusted:.2g}" if m.p_adjusted is not None else ""
    return (f"perplexity {fmt_num(m.b)} vs {fmt_num(m.a)} (ratio {m.ratio:.4f}{ci}; {scope}{test}): "
            f"{m.verdict}: {m.reason}")


def agreement_sentence(agr, reference: str, candidate: str) -> str:
    """``next-token agreement of B with A 98.7 % (95% CI …; 10 of 12 texts identical); first
    divergence in 'bread' at token 41: …context → A ' x', B ' y'``."""
    what = "next-token agreement" if agr.kind == "next_token" else "greedy generation agreement"
    unit = "texts" if agr.kind == "next_token" else "prompts"
    text = (f"{what} of {candidate} with {reference} {agr.rate:.1%} (95% CI {agr.ci_low:.1%}\u2013{agr.ci_high:.1%}; "
            f"{agr.identical} of {len(agr.items)} {unit} identical; gate below {agr.threshold:.0%})")
    first = agr.first
    if first is not None:
        where = f"…{code(first.context)}" if first.context else "at the start"
        text += (f"; first divergence in '{first.item}' at token {first.position}: {where} \u2192 "
                 f"{reference} {code(first.reference)}, {candidate} {code(first.candidate)}")
    return text


def quality_rows(comparison: Comparison) -> list[tuple[str, str, str, str]]:
    """The Quality table: ``(check, A, B, B against the reference)`` per row."""
    q = comparison.quality
    ref = q.settings.reference
    rows = []
    m = q.likelihood
    if m is not None:
        ci = f", 95% CI {m.ci_low:.4f}\u2013{m.ci_high:.4f}" if m.ci_low is not None else ""
        rows.append((f"perplexity ({q.texts.get('items', 0)} texts, {q.texts.get('tokens', 0):,} tokens)",
                     fmt_num(m.a), fmt_num(m.b), f"ratio {m.ratio:.4f}{ci}: {m.verdict}"))
    for agr, name in ((q.next_token, "next-token agreement"), (q.generation, "greedy generation agreement")):
        if agr is None:
            continue
        cell = f"{agr.rate:.1%} ({agr.identical}/{len(agr.items)} identical)"
        verdict = "pass" if agr.rate >= agr.threshold else "below"
        rows.append((f"{name} with {ref}", "reference" if ref == "A" else cell, "reference" if ref == "B" else cell,
                     f"{verdict} (gate {agr.threshold:.0%})"))
    for check in q.checks:
        rows.append((check.name.replace("_", " "), check.a, check.b,
                     check.summary or ("same fault in both" if check.shared else "nothing new")))
    for t in q.tasks:
        rows.append((t.name, fmt_num(t.a), fmt_num(t.b), t.verdict))
    def escaped(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")
    return [(escaped(c), escaped(a), escaped(b), escaped(v)) for c, a, b, v in rows]


def findings(comparison: Comparison, noise: NoiseFloor | None = None) -> list[str]:
    """Generated findings, in the order of the seed report: bench verdicts, the quality gate and
    quality findings (when probed), the A/A noise floor of this host and image (when measured),
    the KV cost, warnings that appeared or disappeared, then other changed startup facts."""
    out = [bench_sentence(m) for m in comparison.bench]
    if comparison.load is not None:
        from servedeck.ab.load import capacity_sentence
        cap = capacity_sentence(comparison.load)
        if cap:
            out.append(cap)
    out += quality_findings(comparison)
    if noise is not None:
        out.append(noise_sentence(noise, comparison))
    kv = kv_sentence(comparison)
    if kv:
        out.append(kv)
    out += [warning_sentence(w) for w in comparison.warnings if w.status != "present in both"]
    for name in _STARTUP_FINDING_FACTS:
        m = comparison.metric(name)
        if m and m.verdict in ("higher", "lower"):
            out.append(startup_sentence(m, max(len(comparison.runs_a), len(comparison.runs_b))))
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


def _meta(run_dir: Path) -> RunMeta | None:
    """The run's ``run.json``, or None when it is missing or cannot be read (the report says
    less about that run)."""
    try:
        return store.read(run_dir, store.RUN_META)
    except ServedeckError:
        return None


def _evidence(v: Variable) -> str:
    return ", ".join(f"{d.view}:{d.path}" for d in v.evidence)


def _verification(run_dir: Path, names: set[str]) -> list[ArgCheck]:
    try:
        rows = store.read(run_dir, store.ARGS_VERIFICATION)
    except ServedeckError:
        return []
    return [r for r in rows.root if r.setting in names] if rows is not None else []


def _limits(run_a: Path, run_b: Path) -> dict | None:
    """Both arms' physical limits for the report's own section (None when neither arm has a
    roofline or telemetry): ``{"a": view, "b": view, "rows": [(label, a text, b text)]}``,
    the views of :func:`servedeck.bench.limits.limits_view`."""
    from servedeck.bench.limits import limits_view
    try:
        a, b = limits_view(run_a), limits_view(run_b)
    except ServedeckError:
        return None
    if a["card"] is None and a["energy_source"] is None and b["card"] is None and b["energy_source"] is None \
            and not a["decode_share"] and not b["decode_share"]:
        return None

    def pct(x):
        return "–" if x is None else f"{x * 100:.0f} %"
    rows = [("card", a["card"] or "–", b["card"] or "–"),
            ("power limit (W)", fmt_num(a["power_cap_w"]), fmt_num(b["power_cap_w"])),
            ("memory bandwidth (GB/s)", fmt_num(a["bandwidth_gb_s"]), fmt_num(b["bandwidth_gb_s"])),
            ("its source", a["bandwidth_source"] or "–", b["bandwidth_source"] or "–"),
            ("matrix rate", a["matrix"] or "–", b["matrix"] or "–"),
            ("bytes per decode step (GB, median)", fmt_num(a["bytes_per_step_gb"]), fmt_num(b["bytes_per_step_gb"]))]
    for phase in ("cold", "warm"):
        rows.append((f"{phase} decode, share of the bandwidth ceiling", pct(a["decode_share"].get(phase)),
                     pct(b["decode_share"].get(phase))))
    rows.append(("cold prefill, share of the matrix ceiling", pct(a["prefill_share"].get("cold")),
                 pct(b["prefill_share"].get("cold"))))
    rows.append(("energy source", a["energy_source"] or "not measured", b["energy_source"] or "not measured"))
    for phase in ("cold", "warm"):
        rows.append((f"{phase} energy per output token (J)", fmt_num(a["j_per_token"].get(phase)),
                     fmt_num(b["j_per_token"].get(phase))))
        rows.append((f"{phase} mean power (W)", fmt_num(a["mean_power_w"].get(phase)),
                     fmt_num(b["mean_power_w"].get(phase))))
        rows.append((f"{phase} time throttled", pct(a["throttled"].get(phase)), pct(b["throttled"].get(phase))))
        rows.append((f"{phase} GPU clock (MHz, mean)", fmt_num(a["freq_mhz"].get(phase)),
                     fmt_num(b["freq_mhz"].get(phase))))
    return {"a": a, "b": b, "rows": rows}


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


def _mean(values) -> float | None:
    """The mean of a list (None when empty): one figure from an arm's runs."""
    return sum(values) / len(values) if values else None


def _share_cell(arm) -> str:
    """``38/40 95% [83–99%] met`` for an arm's SLO share at a level (``–`` without an SLO)."""
    a = arm.attainment
    if a is None or not a.n:
        return "\u2013"
    return f"{a.k}/{a.n} {a.value:.0%} [{a.low:.0%}\u2013{a.high:.0%}] {arm.state}"


def _percentile_cell(p) -> str:
    """``0.123 [0.110–0.141]`` (a percentile with its interval), or ``n<36`` below the samples it needs."""
    if p is None or not p.n:
        return "\u2013"
    if p.value is None:
        return f"n<{p.needed} (n={p.n})"
    return f"{fmt_num(p.value)} [{fmt_num(p.low)}\u2013{fmt_num(p.high)}]"


def render_report(diff: ArmDiff, comparison: Comparison, run_a: Path, run_b: Path,
                  hypothesis: str | None, verdict: str | None, chart_path: Path | None,
                  *, templates_dir: Path | None = None, noise: NoiseFloor | None = None,
                  interleaving=None, draft=None, load_chart_path: Path | None = None) -> str:
    """Render the A/B report as markdown.

    Args:
        diff: from :func:`servedeck.ab.compare.compare_arms` (already passed :func:`servedeck.ab.compare.guard`).
        comparison: from :func:`servedeck.ab.comparison.compare_metrics`.
        run_a, run_b: the run directories (baseline, variant); their ``docker-compose.yml`` is
            appended verbatim, ``run.json``/``args_verification.json`` add context when present.
        hypothesis, verdict: user text; None leaves a placeholder (``_Verdict: to be written_``).
        chart_path: the chart image, linked relative to the report's directory by file name.
        templates_dir: where ``report.md.j2`` lives (default: the project's ``templates/``).
        noise: the A/A noise floor of the runs' host and image, cited when given.
        interleaving: a :class:`servedeck.ab.interleave.Interleaving` (order and trends of an
            interleaved experiment), shown when given; ``run_a``/``run_b`` are then each arm's first run.
        draft: the drafted hypothesis, findings, verdict and recommendations
            (:class:`servedeck.ab.draft.Draft`); the user's ``hypothesis``/``verdict`` replace
            the drafted ones. None: placeholders, and the generated findings only.
        load_chart_path: the curves of both arms under load (``comparison.load``), linked by file name.

    Raises:
        ServedeckError: a compose file is missing or the template is not found.
    """
    run_a, run_b = Path(run_a), Path(run_b)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir or TEMPLATES_DIR)),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(code=code, num=fmt_num, signed=fmt_signed, ratio=fmt_ratio, value=fmt_value, pct=fmt_pct,
                       mean=_mean, share=_share_cell, pctl=_percentile_cell, bracket=bracket_text,
                       load_value=fmt_load)
    try:
        template = env.get_template(REPORT_TEMPLATE)
    except jinja2.TemplateNotFound as exc:
        raise ServedeckError("report template not found",
                             file=str((templates_dir or TEMPLATES_DIR) / REPORT_TEMPLATE)) from exc
    compose_a = store.read(run_a, store.COMPOSE, required=True)
    compose_b = store.read(run_b, store.COMPOSE, required=True)
    meta_a, meta_b = _meta(run_a), _meta(run_b)
    names = {v.name for v in diff.differences}
    single = diff.single_variable
    text = template.render(
        diff=diff, comparison=comparison, single=single,
        multi=len(diff.differences) > 1, title_change=title_change(diff),
        run_a=run_a.name, run_b=run_b.name, meta_a=meta_a, meta_b=meta_b,
        model=(meta_b and meta_b.served_model_name) or (meta_a and meta_a.served_model_name),
        variables=[{"name": v.name,
                    "a": fmt_value(v.a) if v.present_a else "(absent)",
                    "b": fmt_value(v.b) if v.present_b else "(absent)",
                    "evidence": _evidence(v)} for v in diff.differences],
        verification_b=_verification(run_b, names),
        hypothesis=hypothesis, verdict=verdict,
        findings=findings(comparison, noise), noise=noise, interleaving=interleaving, draft=draft,
        quality=comparison.quality, quality_rows=quality_rows(comparison) if comparison.quality else [],
        sequential=comparison.sequential,
        stop=_describe_stop(comparison.sequential),
        pct=fmt_pct(comparison.margin), alpha=comparison.alpha,
        chart=Path(chart_path).name if chart_path else None,
        load=comparison.load, load_chart=Path(load_chart_path).name if load_chart_path else None,
        load_q=(f"p{comparison.load.slo.percentile:g}" if comparison.load is not None and comparison.load.slo
                else "p90"),
        limits=_limits(run_a, run_b),
        compose_a=compose_a.rstrip("\n"), compose_b=compose_b.rstrip("\n"),
        fence_a=_fence(compose_a), fence_b=_fence(compose_b),
    )
    return text


def _describe_stop(record) -> str | None:
    if record is None:
        return None
    from servedeck.ab.sequential import describe_stop
    return describe_stop(record)


def write_report(out_path: Path, diff: ArmDiff, comparison: Comparison, run_a: Path, run_b: Path,
                 hypothesis: str | None = None, verdict: str | None = None, *,
                 noise: NoiseFloor | None = None, interleaving=None, draft=None) -> tuple[Path, Path | None]:
    """Write the report to ``out_path`` and its chart beside it (``<stem>.png``; under load also
    ``<stem>-load.png``), all atomically.

    The chart is written first so the report never links a missing image; when there is
    nothing to plot the report is written without a chart.

    Returns:
        ``(report_path, chart_path or None)``.
    """
    out_path = Path(out_path)
    chart_path: Path | None = out_path.with_suffix(".png")
    try:
        render_chart(comparison, out_path.with_suffix(".png"))
    except ServedeckError:
        chart_path = None
    load_chart: Path | None = None
    if comparison.load is not None:
        from servedeck.ab.chart import render_load_chart
        load_chart = out_path.with_name(out_path.stem + "-load.png")
        try:
            render_load_chart(comparison.load, load_chart)
        except ServedeckError:
            load_chart = None
    text = render_report(diff, comparison, run_a, run_b, hypothesis, verdict, chart_path,
                         noise=noise, interleaving=interleaving, draft=draft, load_chart_path=load_chart)
    atomic_write(out_path, text)
    return out_path, chart_path
