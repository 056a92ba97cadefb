"""Sequential sampling: sample until every judged metric is decided, with error rates that hold
despite the repeated looks.

``invoke bench --against RUN`` adds requests to the deployed run in batches and
``invoke ab --interleave`` adds deployments in AB/BA pairs; after each batch (a *look*) the
metrics are judged, and sampling stops once every judged metric is decided (``faster``,
``slower``, ``higher``, ``lower``, ``within margin``, ``equivalent``), or when the budget of
requests (deployments) or time runs out.

**The design.** Each look runs the same exact tests as a fixed-n report
(:func:`servedeck.ab.stats.judge_bench`: Mann–Whitney U with its exact permutation
distribution, the bootstrap interval and TOST against the margin, Holm across the report's
metrics), but at the level an alpha-spending function allots that look instead of the full
``alpha``:

* information fraction ``t = I(n_a, n_b) / I(N_a, N_b)`` with ``I(n_a, n_b) = n_a·n_b/(n_a+n_b)``
  (the precision of a two-sample comparison; N: the budget);
* cumulative spending ``α(t)``, Lan–DeMets Pocock type ``α·ln(1 + (e−1)·t)`` (default: it
  spends early, so clear differences stop early) or O'Brien–Fleming type
  ``2 − 2·Φ(z_{1−α/2}/√t)`` (spends late);
* look k is held to ``L_k = α(t_k) − S_{k−1}``, where ``S`` sums the levels of earlier looks
  that could reject anything: a look whose sample sizes cannot reach ``L_k/m`` with any exact
  p (``2/C(n_a+n_b, n_a)``; ``1/C`` for a one-sided equivalence test) rejects nothing, so it
  spends nothing and its share is carried forward; the last look (budget reached) takes what
  is left;
* difference claims and equivalence claims have a budget of ``alpha`` each (the fixed-n rule,
  :mod:`servedeck.ab.stats`);
* a metric's verdict is the one of the first look that decided it, with that look's samples,
  p and interval (later samples, taken for the metrics still open, do not change it).

**Why it holds.** A false claim in the report is a false rejection at some look; at look k
Holm keeps the chance of any false rejection among the report's metrics at or below ``L_k``
(whatever the dependence between metrics), and ``Σ_k L_k ≤ α``, so the chance of any false
claim over all looks is at most ``α`` whatever the dependence between looks (Bonferroni
across looks, on the shares an alpha-spending function gives them: Lan & DeMets 1983,
Biometrika 70:659-663). Each look's test stays exact at any sample size, which the usual
group-sequential boundaries (normal, independent increments) are not at 3–10 requests per arm,
and which an e-value test (always valid, but needing a betting strategy or a parametric
alternative, and conservative at these sizes) would not improve on. The price is
conservatism: consecutive looks are strongly correlated, so the actual error rate is below
``alpha``. ``tests/unit/test_sequential.py`` measures both error rates and the power by
simulation.

The looks of an experiment are recorded (``sequential.json`` in its runs: the design, which
runs form each arm, how many requests per phase each look saw, why sampling stopped), so a
report replays exactly the looks that were taken (:func:`judge_looks`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Literal, Sequence

from servedeck.ab.stats import (
    ALPHA, BENCH_PHASES, DEFAULT_MARGIN, MetricComparison, MetricSamples, bench_metrics, judge_bench,
    ratio_interval, smallest_p,
)
from servedeck.errors import ServedeckError
from servedeck.runs import store
from servedeck.runs.records import Look, Sample, SequentialDesign, SequentialRecord

__all__ = ["Look", "Looker", "Monitor", "SequentialDesign", "SequentialRecord", "all_decided", "bench_against",
           "describe_stop", "interleave_monitor", "judge_looks", "load_record", "pooled_samples",
           "replay", "requests_per_phase", "save_record", "spent_alpha"]

Spending = Literal["pocock", "obrien-fleming"]

SEQUENTIAL = store.SEQUENTIAL
"""The run file holding the sequential record of the experiment the run belongs to (its model,
:class:`~servedeck.runs.records.SequentialRecord`, and :class:`~servedeck.runs.records.SequentialDesign`
and :class:`~servedeck.runs.records.Look`, live with the other run-file models)."""

DEFAULT_BATCH = 2
"""Requests per phase added between two looks of ``invoke bench --against``."""
DEFAULT_MAX_REQUESTS = 24
"""Requests per phase ``invoke bench --against`` may take at most (the sample budget)."""

Stopped = Literal["decided", "sample budget", "time budget", "interrupted"]


def spent_alpha(alpha: float, fraction: float, spending: Spending = "pocock") -> float:
    """Cumulative alpha spent by information fraction ``fraction`` (0..1).

    ``pocock``: ``alpha·ln(1 + (e−1)·t)``; ``obrien-fleming``: ``2 − 2·Φ(z_{1−α/2}/√t)``
    (Lan & DeMets 1983). Both are 0 at t=0 and ``alpha`` at t=1.

    Raises:
        ValueError: an unknown spending function.
    """
    t = min(1.0, max(0.0, fraction))
    if t <= 0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log1p((math.e - 1.0) * t)
    if spending == "obrien-fleming":
        from scipy.stats import norm
        return float(2.0 - 2.0 * norm.cdf(norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t)))
    raise ValueError(f"unknown spending function {spending!r} (pocock or obrien-fleming)")


# --------------------------------------------------------------------------------------------
# Looks
# --------------------------------------------------------------------------------------------

def _family_floor(results: Sequence[MetricComparison], level: float, one_sided: bool) -> bool:
    """True when some judged metric's sample sizes can reach ``level / family`` at all."""
    judged = [m for m in results if m.judged]
    if not judged or level <= 0:
        return False
    first_step = level / len(judged)
    for m in judged:
        floor = smallest_p(len(m.samples_a), len(m.samples_b))
        if (floor / 2 if one_sided else floor) <= first_step:
            return True
    return False


class Looker:
    """Judges the looks of one experiment one at a time (what :func:`judge_looks` does for a
    list): it carries the alpha spent and the metrics decided from look to look."""

    def __init__(self, design: SequentialDesign) -> None:
        self.design = design
        self.spent_d = self.spent_e = 0.0
        self.decided: dict[str, MetricComparison] = {}
        self.looks: list[Look] = []
        self.last: list[MetricComparison] = []

    def look(self, metrics: Sequence[MetricSamples], fraction: float, final: bool = False) -> Look:
        """Judge the next look (module docstring) and return its levels and decisions."""
        d = self.design
        target = d.alpha if final else spent_alpha(d.alpha, fraction, d.spending)
        level_d = min(d.alpha, max(0.0, target - self.spent_d))
        level_e = min(d.alpha, max(0.0, target - self.spent_e))
        results = judge_bench(metrics, alpha=d.alpha, margin=d.margin, intervals=False,
                              levels=(level_d, level_e), settled=self.decided.keys())
        used_d = level_d if _family_floor(results, level_d, one_sided=False) else 0.0
        used_e = level_e if d.margin > 0 and _family_floor(results, level_e, one_sided=True) else 0.0
        self.spent_d, self.spent_e = self.spent_d + used_d, self.spent_e + used_e
        k = len(self.looks) + 1
        new = {}
        for m in results:
            m.look = k
            if m.decided and m.key not in self.decided:
                self.decided[m.key] = m
                new[m.key] = m.verdict
        out = Look(requests_a=0, requests_b=0, final=final, fraction=round(fraction, 6),
                   level_difference=level_d, level_equivalence=level_e, spent_difference=used_d,
                   spent_equivalence=used_e, decided=new)
        self.looks.append(out)
        self.last = results
        return out

    def all_decided(self) -> bool:
        """True when the last look left every judged metric decided."""
        judged = [m for m in self.last if m.judged]
        return bool(judged) and all(m.key in self.decided for m in judged)

    def verdicts(self, intervals: bool = True) -> list[MetricComparison]:
        """One :class:`MetricComparison` per metric of the last look: a decided metric as its
        deciding look judged it, the others as the last look did; ``look``/``looks`` set."""
        out = []
        for m in self.last:
            chosen = self.decided.get(m.key, m).model_copy(deep=True)
            chosen.looks = len(self.looks)
            if not chosen.decided and chosen.judged:
                budget = "the sample budget" if self.looks[-1].final else "the looks taken so far"
                chosen.reason = f"not decided within {budget} ({len(self.looks)} looks): {chosen.reason}"
            if intervals and chosen.judged and chosen.ci_low is None:
                chosen.ci_low, chosen.ci_high = ratio_interval(chosen.samples_a, chosen.samples_b)
            out.append(chosen)
        return out


def judge_looks(looks: Sequence[Sequence[MetricSamples]], fractions: Sequence[float],
                design: SequentialDesign, *, final: Sequence[bool] | None = None,
                intervals: bool = True, until_decided: bool = False) -> tuple[list[MetricComparison], list[Look]]:
    """Judge every look of a sequential experiment (module docstring) and return the verdicts.

    Args:
        looks: per look, the metrics as :func:`servedeck.ab.stats.judge_bench` takes them
            (``(name, phase, samples_a, samples_b)``, each arm's samples so far).
        fractions: per look, its information fraction (:meth:`SequentialDesign.fraction`).
        design: alpha, margin and spending.
        final: per look, whether it was the last one the budget allowed (default: none).
        intervals: compute the bootstrap interval of every metric in the result.
        until_decided: stop at the first look that leaves every judged metric decided (what a
            live experiment does; the looks after it are not taken).

    Returns:
        ``(metrics, looks)``: one :class:`MetricComparison` per metric of the last look (a
        decided metric as its deciding look judged it; ``look``/``looks`` set), and per look
        its levels and decisions (:class:`Look` without the request counts, which the caller
        knows).

    Raises:
        ValueError: ``looks`` and ``fractions`` differ in length, or no look is given.
    """
    if not looks or len(looks) != len(fractions):
        raise ValueError("judge_looks needs one fraction per look, and at least one look")
    final = list(final) if final is not None else [False] * len(looks)
    looker = Looker(design)
    for metrics, t, last in zip(looks, fractions, final):
        looker.look(metrics, t, last)
        if until_decided and looker.all_decided():
            break
    return looker.verdicts(intervals), looker.looks


def _phase_prefix(samples: list[Sample], n: int) -> list[Sample]:
    """The first ``n`` samples of every phase (``warmup`` excluded), in file order."""
    seen: dict[str, int] = {}
    out = []
    for s in samples:
        phase = s.phase
        if phase == "warmup":
            continue
        seen[phase] = seen.get(phase, 0) + 1
        if seen[phase] <= n:
            out.append(s)
    return out


def requests_per_phase(samples: Sequence[Sample]) -> int:
    """Requests per measured phase in a list of bench samples (the smallest phase count over
    the phases present; 0 when none)."""
    counts: dict[str, int] = {}
    for s in samples:
        if s.phase in BENCH_PHASES:
            counts[s.phase] = counts.get(s.phase, 0) + 1
    return min(counts.values()) if counts else 0


def replay(record: SequentialRecord, samples_a: list[Sample], samples_b: list[Sample], *,
           intervals: bool = True, extra: Sequence[MetricSamples] = ()) -> list[MetricComparison]:
    """Judge the bench metrics of two arms' pooled samples at the looks ``record`` took, and
    fill each look's levels and decisions into ``record.looks``. ``extra`` metrics (those other
    stages measure per run, :func:`servedeck.ab.stats.register_metric_source`) join the last
    look's family: they are judged once, at that look's level.

    Raises:
        ServedeckError: the record has no look, or a look needs more requests than the arms hold.
    """
    if not record.looks:
        raise ServedeckError("the sequential record has no look", hint="the experiment took no sample")
    have_a, have_b = requests_per_phase(samples_a), requests_per_phase(samples_b)
    looks, fractions = [], []
    for look in record.looks:
        if look.requests_a > have_a or look.requests_b > have_b:
            raise ServedeckError(f"a look of the sequential record needs {look.requests_a} vs {look.requests_b} "
                                 f"requests per phase, but the runs hold {have_a} vs {have_b}",
                                 hint="the runs' bench.jsonl files were changed after the experiment")
        looks.append(bench_metrics(_phase_prefix(samples_a, look.requests_a),
                                   _phase_prefix(samples_b, look.requests_b)))
        fractions.append(record.design.fraction(look.requests_a, look.requests_b))
    looks[-1] = [*looks[-1], *extra]
    metrics, judged = judge_looks(looks, fractions, record.design, final=[lk.final for lk in record.looks],
                                  intervals=intervals)
    for look, result in zip(record.looks, judged):
        look.fraction, look.final = result.fraction, result.final
        look.level_difference, look.level_equivalence = result.level_difference, result.level_equivalence
        look.spent_difference, look.spent_equivalence = result.spent_difference, result.spent_equivalence
        look.decided = result.decided
    return metrics


def all_decided(metrics: Sequence[MetricComparison]) -> bool:
    """True when every judged metric is decided (and at least one is judged)."""
    judged = [m for m in metrics if m.judged]
    return bool(judged) and all(m.decided for m in judged)


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

def save_record(run_dirs: Sequence[Path], record: SequentialRecord) -> None:
    """Write ``record`` as ``sequential.json`` into every run of the experiment, through the run
    store (validated, atomic)."""
    record.updated_at = store.utcnow()
    for run_dir in run_dirs:
        store.open_run(Path(run_dir)).write(SEQUENTIAL, record)


def load_record(runs_a: Sequence[Path], runs_b: Sequence[Path]) -> SequentialRecord | None:
    """The sequential record whose arms are exactly these runs (read from the first run of B,
    then of A), or None (a fixed-n comparison, or runs compared otherwise than sampled).

    Raises:
        ServedeckError: ``sequential.json`` exists but is not a valid record (file and field).
    """
    ids_a, ids_b = [Path(r).name for r in runs_a], [Path(r).name for r in runs_b]
    for run_dir in (*runs_b[:1], *runs_a[:1]):
        record = store.read(Path(run_dir), SEQUENTIAL)
        if record is not None and record.matches(ids_a, ids_b):
            return record
    return None


# --------------------------------------------------------------------------------------------
# Stop rule (the drivers: servedeck.bench.record.bench_deployed's ``more``, interleave's ``until``)
# --------------------------------------------------------------------------------------------

class Monitor:
    """Looks after each batch and says whether to go on.

    Args:
        record: the experiment's record (its design and arms); looks are appended to it.
        run_dirs: where ``sequential.json`` is written after each look (the experiment's runs
            so far); updated by the driver as runs are added.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, record: SequentialRecord, run_dirs: Sequence[Path] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.record = record
        self.run_dirs = list(run_dirs)
        self.clock = clock
        self.started = clock()
        self.metrics: list[MetricComparison] = []
        self.looker = Looker(record.design)
        if record.started_at is None:
            record.started_at = store.utcnow()

    def time_up(self) -> bool:
        """True when the time budget is spent."""
        limit = self.record.design.max_seconds
        return limit is not None and self.clock() - self.started >= limit

    def look(self, samples_a: list[Sample], samples_b: list[Sample]) -> bool:
        """Record a look at the arms' samples so far; True to go on sampling.

        The look is final (takes the alpha left) when either arm reached its budget or the
        time budget is spent; sampling stops when every judged metric is decided or the look
        was final (``record.stopped`` says which).
        """
        d = self.record.design
        n_a, n_b = requests_per_phase(samples_a), requests_per_phase(samples_b)
        budget = n_a >= d.max_requests_a and n_b >= d.max_requests_b
        final = budget or self.time_up()
        if len(self.looker.looks) != len(self.record.looks):  # a record with earlier looks: catch up
            self.looker = Looker(d)
            for lk in self.record.looks:
                self.looker.look(bench_metrics(_phase_prefix(samples_a, lk.requests_a),
                                               _phase_prefix(samples_b, lk.requests_b)),
                                 d.fraction(lk.requests_a, lk.requests_b), lk.final)
        judged = self.looker.look(bench_metrics(_phase_prefix(samples_a, n_a), _phase_prefix(samples_b, n_b)),
                                  d.fraction(n_a, n_b), final)
        self.record.looks.append(judged.model_copy(update={"requests_a": n_a, "requests_b": n_b}))
        self.metrics = self.looker.verdicts(intervals=False)
        if all_decided(self.metrics):
            self.record.stopped = "decided"
        elif final:
            self.record.stopped = "sample budget" if budget else "time budget"
        save_record(self.run_dirs, self.record)
        return self.record.stopped is None

    def interrupted(self) -> None:
        """Mark the record interrupted (Ctrl-C between looks) and save it."""
        if self.record.stopped is None:
            self.record.stopped = "interrupted"
            save_record(self.run_dirs, self.record)

    def open_metrics(self) -> list[str]:
        """The judged metrics not decided at the last look (``phase name``)."""
        return [m.key for m in self.metrics if m.judged and not m.decided]


def pooled_samples(runs: Sequence[Path]) -> list[Sample]:
    """Every bench sample of ``runs``, in run order then file order."""
    return [s for r in runs for s in store.read(Path(r), store.BENCH_SAMPLES)]


def describe_stop(record: SequentialRecord) -> str:
    """One sentence on how sampling went: ``sampled sequentially: 4 looks, up to 9 vs 8
    requests per phase (budget 24), stopped: every judged metric decided``."""
    last = record.looks[-1] if record.looks else None
    d = record.design
    reach = (f", up to {last.requests_a} vs {last.requests_b} requests per phase "
             f"(budget {d.max_requests_a} vs {d.max_requests_b})") if last else ""
    why = {"decided": "every judged metric decided", "sample budget": "the sample budget was reached",
           "time budget": "the time budget was reached", "interrupted": "interrupted",
           None: "still sampling"}[record.stopped]
    return (f"sampled sequentially ({d.spending} alpha spending, alpha {d.alpha:g} over all looks): "
            f"{len(record.looks)} looks{reach}; stopped: {why}")


def bench_against(baseline: Path, run_dir: Path, *, max_requests: int = DEFAULT_MAX_REQUESTS,
                  batch: int = DEFAULT_BATCH, alpha: float = ALPHA, margin: float = DEFAULT_MARGIN,
                  spending: Spending = "pocock", max_seconds: float | None = None,
                  clock: Callable[[], float] = time.monotonic):
    """The ``more`` callback of :func:`servedeck.bench.record.bench_deployed` that benchmarks
    ``run_dir`` (arm B) against the recorded run ``baseline`` (arm A, its requests fixed) until
    every judged metric is decided or the budget is spent; and its :class:`Monitor`.

    Returns:
        ``(more, monitor)``; ``monitor.record`` is saved as ``sequential.json`` into
        ``run_dir`` after each look.

    Raises:
        ServedeckError: the baseline holds no bench samples, or ``batch``/``max_requests`` is
            below 1.
    """
    if batch < 1 or max_requests < 1:
        raise ServedeckError(f"--batch {batch} and --max-requests {max_requests} must be at least 1",
                             field="--batch" if batch < 1 else "--max-requests")
    baseline = Path(baseline)
    samples_a = store.read(baseline, store.BENCH_SAMPLES)
    n_a = requests_per_phase(samples_a)
    if not n_a:
        raise ServedeckError(f"run {baseline.name} holds no bench samples to compare against",
                             hint="benchmark it first, or pick a benchmarked run (latest:PROFILE)")
    design = SequentialDesign(alpha=alpha, margin=margin, spending=spending, max_requests_a=n_a,
                              max_requests_b=max_requests, max_seconds=max_seconds)
    monitor = Monitor(SequentialRecord(design=design, runs_a=[baseline.name], runs_b=[Path(run_dir).name]),
                      [Path(run_dir)], clock=clock)

    def more(result):
        samples_b = list(result.samples)
        if not monitor.look(samples_a, samples_b):
            return None
        left = max_requests - requests_per_phase(samples_b)
        return result.workload.model_copy(update={"repetitions": max(1, min(batch, left)),
                                                  "warmup_requests": 0})
    return more, monitor


def interleave_monitor(design: SequentialDesign, clock: Callable[[], float] = time.monotonic):
    """The ``go_on`` callback of :func:`servedeck.ab.interleave.run_interleaved` that stops the
    experiment once every judged metric is decided (looks after each pair of deployments), and
    its :class:`Monitor` (its record is saved into every run of the experiment)."""
    monitor = Monitor(SequentialRecord(design=design, runs_a=[], runs_b=[]), clock=clock)

    def go_on(runs_a: list[Path], runs_b: list[Path], experiment: str) -> bool:
        monitor.record.runs_a = [Path(r).name for r in runs_a]
        monitor.record.runs_b = [Path(r).name for r in runs_b]
        monitor.record.experiment = experiment
        monitor.run_dirs = [*runs_a, *runs_b]
        return monitor.look(pooled_samples(runs_a), pooled_samples(runs_b))
    return go_on, monitor
