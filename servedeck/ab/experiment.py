"""A/B entry points for the CLI and the demo: the stages (diff and guard, statistics, report,
chart) put together for two recorded runs (A/B or A/A) and for an interleaved experiment."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from servedeck.ab.compare import ArmDiff, compare_arms, guard
from servedeck.ab.noise import NoiseFloor, load_noise_floor, noise_floor, save_noise_floor
from servedeck.ab.stats import ALPHA, DEFAULT_MARGIN, Comparison, compare_metrics
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


def _host_and_image(run_dir: Path) -> tuple[str | None, str | None]:
    meta = store.read_meta(run_dir)
    return meta.host, meta.image.digest if meta.image else None


def compare_runs(runs_dir: Path, runs_a: Sequence[Path], runs_b: Sequence[Path], *, aa: bool = False,
                 allow_multi: bool = False, alpha: float = ALPHA, margin: float = DEFAULT_MARGIN,
                 out: Path | None = None, hypothesis: str | None = None, verdict: str | None = None,
                 interleaving=None, slo=None, quality=None) -> Outcome:
    """Guard, compare and (with ``out``) report two arms of recorded runs.

    An A/A comparison (``aa``) needs identical configurations, on one host and image, and
    stores its noise floor (:mod:`servedeck.ab.noise`); an A/B comparison cites the stored
    noise floor of its runs' host and image when both arms share them. ``slo``
    (:class:`servedeck.runs.records.Slo`) judges runs with a load benchmark against another SLO than the
    one they recorded. ``quality``: the quality gate's settings
    (:class:`servedeck.ab.quality.QualityGateSettings`, default when None).

    Raises:
        ServedeckError: the guard refuses the arms, an A/A spans two hosts or images, or a run
            record is unreadable.
        ValueError: alpha or margin out of range.
    """
    from servedeck.errors import ServedeckError
    runs_a, runs_b = [Path(r) for r in runs_a], [Path(r) for r in runs_b]
    a, b = runs_a[0], runs_b[0]
    diff = guard(compare_arms(a, b), allow_multi=allow_multi, aa=aa)
    comparison = compare_metrics(runs_a, runs_b, alpha=alpha, margin=margin, quality=quality)
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
    if out is not None:
        from servedeck.ab.report import write_report
        result.report, result.chart = write_report(Path(out), diff, comparison, a, b, hypothesis=hypothesis,
                                                   verdict=verdict, noise=result.noise, interleaving=interleaving)
    return result


def default_report_path(runs_dir: Path, run_a: Path, run_b: Path) -> Path:
    """``runs/reports/<A>_vs_<B>/report.md``."""
    return Path(runs_dir) / store.REPORTS_DIR / f"{Path(run_a).name}_vs_{Path(run_b).name}" / "report.md"
