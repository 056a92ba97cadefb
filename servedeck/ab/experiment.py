"""A/B entry points for the CLI and the demo: the stages (diff and guard, statistics, report,
chart) put together for two recorded runs (A/B or A/A) and for an interleaved experiment."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from servedeck.ab.compare import ArmDiff, compare_arms, guard
from servedeck.ab.noise import NoiseFloor, load_noise_floor, noise_floor, save_noise_floor
from servedeck.ab.comparison import compare_metrics
from servedeck.ab.stats import ALPHA, DEFAULT_MARGIN, Comparison
from servedeck.runs import store


@dataclass
class Outcome:
    """What one comparison produced.

    Attributes:
        run_a, run_b: the (first) run directory of each arm.
        diff: the guarded difference; comparison: metrics and verdicts.
        noise: the noise floor cited (A/B) or measured (A/A), if any; noise_path: where an A/A
            stored it.
        report, chart: written files, when an output path was given.
        interleaving: the order and trends of an interleaved experiment.
    """

    run_a: Path
    run_b: Path
    diff: ArmDiff
    comparison: Comparison
    noise: NoiseFloor | None = None
    noise_path: Path | None = None
    report: Path | None = None
    chart: Path | None = None
    interleaving: object | None = None
    runs_a: list[Path] = field(default_factory=list)
    runs_b: list[Path] = field(default_factory=list)
    draft: object | None = None
    plan: object | None = None
    experiment: Path | None = None


def _host_and_image(run_dir: Path) -> tuple[str | None, str | None]:
    meta = store.read_meta(run_dir)
    return meta.host, meta.image.digest if meta.image else None


def compare_runs(runs_dir: Path, runs_a: Sequence[Path], runs_b: Sequence[Path], *, aa: bool = False,
                 allow_multi: bool = False, alpha: float = ALPHA, margin: float = DEFAULT_MARGIN,
                 out: Path | None = None, hypothesis: str | None = None, verdict: str | None = None,
                 interleaving=None, drafted: bool = True, project_profiles: list[dict] | None = None,
                 slo=None, quality=None) -> Outcome:
    """Guard, compare and (with ``out``) report two arms of recorded runs.

    An A/A comparison (``aa``) needs identical configurations, on one host and image, and
    stores its noise floor (:mod:`servedeck.ab.noise`); an A/B comparison cites the stored
    noise floor of its runs' host and image when both arms share them. Arms sampled
    sequentially (``sequential.json`` naming exactly these runs) are judged at the looks that
    were taken, under that design's alpha and margin (:mod:`servedeck.ab.sequential`).

    With ``drafted`` (default) the hypothesis, findings, verdict and recommendations are drafted
    (:mod:`servedeck.ab.draft`, the next candidates from :mod:`servedeck.ab.next` on the arm
    the verdict keeps; ``project_profiles``: the project's resolved profiles, see
    :func:`draft_outcome`), and a written report leaves ``experiment.json`` beside it
    (:mod:`servedeck.ab.history`).

    ``slo`` (:class:`servedeck.runs.records.Slo`) judges runs with a load benchmark against
    another SLO than the one they recorded.
    ``quality``: the quality gate's settings (:class:`servedeck.ab.quality.QualityGateSettings`,
    default when None).

    Raises:
        ServedeckError: the guard refuses the arms, an A/A spans two hosts or images, or a run
            record is unreadable.
        ValueError: alpha or margin out of range.
    """
    from servedeck.errors import ServedeckError
    runs_a, runs_b = [Path(r) for r in runs_a], [Path(r) for r in runs_b]
    a, b = runs_a[0], runs_b[0]
    diff = guard(compare_arms(a, b), allow_multi=allow_multi, aa=aa)
    from servedeck.ab.sequential import load_record
    comparison = compare_metrics(runs_a, runs_b, alpha=alpha, margin=margin,
                                 sequential=load_record(runs_a, runs_b), quality=quality)
    if slo is not None:  # re-judge the arms under load against another SLO than the one recorded
        from servedeck.ab.load import compare_load
        comparison.load = compare_load(runs_a, runs_b, slo=slo, alpha=alpha)
    ha, ia = _host_and_image(a)
    hb, ib = _host_and_image(b)
    result = Outcome(run_a=a, run_b=b, diff=diff, comparison=comparison, interleaving=interleaving,
                     runs_a=runs_a, runs_b=runs_b)
    if aa:
        if (ha, ia) != (hb, ib) or not ha or not ia:
            raise ServedeckError(f"an A/A noise floor needs both runs on one host and image: {a.name} ran "
                                 f"on {ha} with {ia}, {b.name} on {hb} with {ib}")
        result.noise = noise_floor(comparison, ha, ia)
        result.noise_path = save_noise_floor(runs_dir, result.noise)
    elif (ha, ia) == (hb, ib):
        result.noise = load_noise_floor(runs_dir, ha, ia)
    if drafted:
        result.draft, result.plan = draft_outcome(runs_dir, diff, comparison, runs_a, runs_b, result.noise, ha,
                                                  project_profiles)
    if out is not None:
        from servedeck.ab.report import write_report
        result.report, result.chart = write_report(Path(out), diff, comparison, a, b, hypothesis=hypothesis,
                                                   verdict=verdict, noise=result.noise, interleaving=interleaving,
                                                   draft=result.draft)
        if result.draft is not None:
            from servedeck.ab.history import save_experiment
            result.experiment = save_experiment(result.report.parent, experiment_record(
                runs_dir, result.report, diff, comparison, runs_a, runs_b, result.draft, verdict))
    return result


def draft_outcome(runs_dir: Path, diff: ArmDiff, comparison: Comparison, runs_a: list[Path], runs_b: list[Path],
                  noise: NoiseFloor | None, host: str | None, project_profiles: list[dict] | None = None):
    """The drafted report text and the next candidates (on the arm the verdict keeps, with this
    experiment already in the host's history; ``project_profiles``: the project's resolved
    profiles, whose values of knobs without a ladder are candidates too)."""
    from servedeck.ab.draft import draft, verdict as draft_verdict
    from servedeck.ab.history import load_experiments, r_ids
    from servedeck.ab.knowledge import load_knowledge
    from servedeck.ab.next import profile_alternatives, propose
    from servedeck.ab.signals import comparison_signals, read_signals
    kb = load_knowledge()
    signals = [*comparison_signals(comparison), *read_signals(runs_b[0])]
    v = draft_verdict(diff, comparison, runs_b[0], knowledge=kb, signals=signals)
    kept = runs_b[0] if v.action in ("keep", "trade-off") else runs_a[0]
    this = (*[r.name for r in runs_a], "|", *[r.name for r in runs_b])
    history = [h for h in load_experiments(runs_dir, host=host) if r_ids(h) != this] if host else []
    plan = None
    from servedeck.ab.compare import load_arm
    arm = load_arm(kept)
    profile = arm.profile
    if host and isinstance(profile, dict):
        from servedeck.ab.draft import Draft
        now = experiment_record(runs_dir, Path("-"), diff, comparison, runs_a, runs_b,
                                Draft(hypothesis="", findings=[], verdict=v, speed=[], quality=[]), None)
        plan = propose(profile, host, runs_dir, effective=arm.effective or {}, facts=arm.facts, baseline=kept,
                       knowledge=kb,
                       margin=comparison.margin, alpha=comparison.alpha, signals=read_signals(kept),
                       history=[*history, now],
                       alternatives=profile_alternatives(project_profiles or [], kb, like=profile))
    return draft(diff, comparison, runs_a[0], runs_b[0], noise=noise, knowledge=kb, history=history,
                 candidates=plan.candidates if plan else None, signals=signals), plan


def experiment_record(runs_dir: Path, report: Path, diff: ArmDiff, comparison: Comparison, runs_a: list[Path],
                      runs_b: list[Path], drafted, user_verdict: str | None):
    """The :class:`servedeck.ab.history.ExperimentRecord` of a written report."""
    from servedeck.ab.compare import fmt_value  # noqa: F401 (values stay typed)
    from servedeck.ab.history import ExperimentRecord, MetricRecord, bench_seconds
    from servedeck.ab.knowledge import load_knowledge
    var = diff.single_variable
    knob = load_knowledge().for_variable(var.name) if var is not None else None
    meta_a, meta_b = store.meta_or_none(runs_a[0]), store.meta_or_none(runs_b[0])
    startup_b = comparison.startup_b or {}
    try:
        rel = str(Path(report).relative_to(runs_dir))
    except ValueError:
        rel = str(report)
    return ExperimentRecord(
        report=rel, runs_a=[r.name for r in runs_a], runs_b=[r.name for r in runs_b],
        host=meta_b.host if meta_b else None, profile_a=meta_a.profile if meta_a else None,
        profile_b=meta_b.profile if meta_b else None,
        variable=var.name if var else None, a=var.a if var else None, b=var.b if var else None,
        variables=[v.name for v in diff.differences], knob=knob.id if knob else None,
        action=drafted.verdict.action, verdict=user_verdict or drafted.verdict.text, user_verdict=bool(user_verdict),
        metrics={m.key: MetricRecord(a=m.a, b=m.b, ratio=m.ratio, verdict=m.verdict, noise=m.noise,
                                     n_a=len(m.samples_a), n_b=len(m.samples_b))
                 for m in comparison.bench if m.judged},
        startup={m.name: {"a": m.a, "b": m.b} for m in comparison.startup if m.a is not None or m.b is not None},
        costs_s={"time_to_ready_s": startup_b.get("time_to_ready_s"),
                 "compile_s": startup_b.get("torch_compile_total_s") or startup_b.get("init_engine_compilation_s"),
                 "bench_s": sum(x for x in (bench_seconds(r) for r in runs_b) if x) or None,
                 "deploy_total_s": (meta_b.timings_s or {}).get("deploy_total_s") if meta_b else None},
        sequential=comparison.sequential.stopped if comparison.sequential is not None else None,
        written_at=store.utcnow())


def default_report_path(runs_dir: Path, run_a: Path, run_b: Path) -> Path:
    """``runs/reports/<A>_vs_<B>/report.md``."""
    return Path(runs_dir) / store.REPORTS_DIR / f"{Path(run_a).name}_vs_{Path(run_b).name}" / "report.md"
