"""A/B stage 2, statistics: metric comparison and verdicts the samples can carry.

Startup facts are one value per arm: they are described (``higher``/``lower``/``same``), never
judged. Bench metrics (per phase ``cold``/``warm``) are judged from their per-request samples:

* **Test** (named in every verdict): the Mann–Whitney U rank test, two-sided, with its exact
  permutation distribution (``scipy.stats.mannwhitneyu(method="exact")``; with tied samples
  an exact or 9,999-resample seeded permutation test of U, ``scipy.stats.PermutationMethod``).
  At 3 samples per arm its smallest possible p is 0.1: no verdict can be reached, and the
  report says so instead of calling a difference.
* **Error rate across the report**: the p values of all judged metrics of one report are
  Holm-adjusted (family-wise error rate ≤ ``alpha``, any dependence between metrics).
* **Practical-equivalence margin** ``margin`` (relative, default 3 %): ``faster``/``slower``
  needs the adjusted p ≤ ``alpha``, the 95 % bootstrap interval of the ratio of medians B/A
  (``scipy.stats.bootstrap``) excluding 1 and the ratio itself beyond ±margin; a detected
  difference inside the margin is ``within margin``. ``equivalent`` needs two one-sided rank
  tests against the margin's edges (TOST, shifted on the log scale) to reject, Holm-adjusted
  over the report as well.
* **Samples needed**: per arm, for the verdict in reach at the observed noise (pooled standard
  deviation of log samples ≈ coefficient of variation): to detect the observed ratio when it is
  beyond the margin, else to show equivalence, with 80 % power at the Bonferroni level
  ``alpha / metrics`` (Holm's first step), normal approximation scaled by the rank test's
  asymptotic relative efficiency 3/π, and never below the smallest n whose exact test can reach
  that level.

Anything else is ``no verdict`` with its reason. The simulation test over identical arms
(``tests/unit/test_ab.py``) checks the family-wise false-positive rate.

**Sequential sampling** (:mod:`servedeck.ab.sequential`) judges the same metrics at several
looks; each look runs these tests at the level its alpha-spending function allots it
(``levels`` of :func:`judge_bench`) instead of the full ``alpha``.

**Startup timings and the compile cache**: ``torch_compile_total_s``, ``init_engine_s`` and
``time_to_ready_s`` depend on what the compile caches held when the server started. When the
two arms' compile-cache states differ (:func:`compile_cache_state`), those facts are ``not
comparable`` instead of ``higher``/``lower``.
"""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path
from typing import Any, Collection, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from servedeck.bench.limits import LIMIT_METRICS
from servedeck.errors import ServedeckError
from servedeck.runs import store

#: Startup facts compared, with "lower is better" flags (None: neither).
STARTUP_FACTS: dict[str, bool | None] = {
    "kv_cache_tokens": False,
    "available_kv_cache_gib": False,
    "max_concurrency": False,
    "torch_compile_total_s": True,
    "init_engine_s": True,
    "time_to_ready_s": True,
    "peak_activation_gib": None,
    "model_loading_gib": None,
}

#: Bench metrics compared per phase: name -> lower is better.
BENCH_METRICS: dict[str, bool] = {
    "ttft_s": True,
    "prefill_tok_s": False,
    "decode_tok_s": False,
    "spec_accept_len": False,
    **LIMIT_METRICS,  # the physical limits: roofline share and energy per token, per request where measured
}

#: Directions of every judged metric (lower is better; None: no preferred direction): the bench
#: metrics' and those other measurements add (the load benchmark's per-level latencies,
#: :mod:`servedeck.ab.load`; others through :func:`register_metric`).
METRIC_DIRECTIONS: dict[str, bool | None] = {**BENCH_METRICS, "tpot_s": True, "e2e_s": True}

BENCH_PHASES = ("cold", "warm")
MIN_SAMPLES = 2
"""Below this many samples in either arm a metric is described, not judged."""
ALPHA = 0.05
DEFAULT_MARGIN = 0.03
POWER = 0.8
CONFIDENCE_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 9999
PERMUTATION_RESAMPLES = 9999
EXACT_PERMUTATION_LIMIT = 20000
"""Tied samples: enumerate every split when there are at most this many, else resample."""
SEED = 20261017
MAX_SAMPLES_NEEDED = 10000

#: Startup facts that measure compile work: compared only when both arms started with the same
#: compile-cache state (:func:`compile_cache_state`).
COMPILE_TIMED_FACTS = ("torch_compile_total_s", "init_engine_s", "time_to_ready_s")

#: Final verdicts: a metric that reached one is decided (sequential sampling stops for it).
DECIDED_VERDICTS = frozenset({"faster", "slower", "higher", "lower", "within margin", "equivalent"})


def lower_is_better(name: str) -> bool | None:
    """The direction of a judged metric: True (lower is better, ``ttft_s``), False (higher is
    better, ``decode_tok_s``), None (no preferred direction or an unregistered metric).
    Register a new metric with :func:`register_metric`."""
    return METRIC_DIRECTIONS.get(name)


MetricSource = Any
"""``(runs_a, runs_b) -> list[MetricSamples]``: the metrics a stage measures per run (load,
quality, energy), read from its own run files."""

METRIC_SOURCES: list = []


def register_metric_source(source: MetricSource) -> MetricSource:
    """Register a stage's metric source (usable as a decorator): :func:`servedeck.ab.comparison.compare_metrics` judges
    its metrics with the bench metrics, in the same Holm family (a sequential comparison, at
    its last look). Register each metric's direction with :func:`register_metric`."""
    if source not in METRIC_SOURCES:
        METRIC_SOURCES.append(source)
    return source


def register_metric(name: str, lower_is_better: bool | None) -> None:
    """Register the direction of a metric judged through :func:`judge_bench` (load, quality and
    energy metrics of other stages): its verdicts then read ``faster``/``slower`` (a direction)
    or ``higher``/``lower`` (None)."""
    METRIC_DIRECTIONS[name] = lower_is_better

METHOD_EXACT = "Mann-Whitney U, exact"
METHOD_TIES = "Mann-Whitney U, permutation (ties)"


class MetricComparison(BaseModel):
    """One metric in both arms.

    Attributes:
        name: metric name (``kv_cache_tokens``, ``decode_tok_s``, ...).
        phase: ``startup`` or the bench phase (``cold``/``warm``).
        a, b: the arm values (median of the samples for bench metrics), None when absent.
        samples_a, samples_b: the per-request samples (startup facts: the one value).
        difference: ``b - a``; ratio: ``b / a`` (None when undefined).
        ci_low, ci_high: 95 % bootstrap interval of the ratio of medians (judged metrics).
        lower_is_better: direction (None: no preferred direction).
        verdict: bench: ``faster`` | ``slower`` | ``within margin`` | ``equivalent`` |
            ``no verdict`` | ``not judged`` (too few samples) | ``not comparable`` (the arms did not
            measure like with like: a load level delivered late) | ``missing``; startup:
            ``higher`` | ``lower`` | ``same`` | ``missing`` | ``not in either log``.
        judged: True when the rank test ran.
        method: the test (``Mann-Whitney U, exact``), None when not judged.
        p, p_adjusted: two-sided p of the difference, raw and Holm-adjusted over the report.
        p_equivalence, p_equivalence_adjusted: TOST p against ±margin, raw and Holm-adjusted.
        margin, alpha: the settings the verdict used.
        noise: pooled standard deviation of the log samples (≈ coefficient of variation).
        samples_needed: per arm, for the verdict in reach at that noise (module docstring).
        reason: why the verdict is what it is, one clause.
        level, level_equivalence: the family-wise level the difference and equivalence tests
            were held to (``alpha`` at fixed n; a look's share of it under sequential sampling).
        look, looks: sequential sampling: the look whose samples carry this verdict (its
            deciding look, else the last) and how many looks were taken; None at fixed n.
    """

    model_config = ConfigDict(extra="forbid")
    name: str
    phase: str
    a: float | None
    b: float | None
    samples_a: list[float]
    samples_b: list[float]
    difference: float | None
    ratio: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    lower_is_better: bool | None
    verdict: str
    judged: bool
    method: str | None = None
    p: float | None = None
    p_adjusted: float | None = None
    p_equivalence: float | None = None
    p_equivalence_adjusted: float | None = None
    margin: float | None = None
    alpha: float | None = None
    noise: float | None = None
    samples_needed: int | None = None
    reason: str | None = None
    level: float | None = None
    level_equivalence: float | None = None
    look: int | None = None
    looks: int | None = None

    @property
    def decided(self) -> bool:
        """True when the verdict is final (:data:`DECIDED_VERDICTS`)."""
        return self.verdict in DECIDED_VERDICTS

    @property
    def key(self) -> str:
        """``phase name`` as used in sentences (``warm decode_tok_s``)."""
        return self.name if self.phase == "startup" else f"{self.phase} {self.name}"


class WarningChange(BaseModel):
    """A startup warning and in which arms it appears."""

    model_config = ConfigDict(extra="forbid")
    id: str
    text_a: str | None
    text_b: str | None

    @property
    def status(self) -> str:
        """``present in A, absent in B`` / ``absent in A, present in B`` / ``present in both``."""
        if self.text_a is not None and self.text_b is None:
            return "present in A, absent in B"
        if self.text_a is None and self.text_b is not None:
            return "absent in A, present in B"
        return "present in both"

    @property
    def short(self) -> str:
        """The warning's first clause, e.g. ``max_num_scheduled_tokens is set to 4096``."""
        return short_warning(self.text_a if self.text_a is not None else self.text_b or self.id)


class CompileCacheState(BaseModel):
    """What a run's compile caches held when its server started.

    Attributes:
        state: ``loaded`` (the log shows compiled graphs loaded from vLLM's compile cache),
            ``compiled`` (the log shows every graph compiled afresh), ``after-start`` (the log
            does not say; an earlier start of the same image on the same host may have filled
            the caches it uses, e.g. torch inductor's, which vLLM does not log),
            ``first-start`` (the log does not say, and no earlier start of this image on this
            host is recorded).
        evidence: one clause saying why, for the report.
    """

    model_config = ConfigDict(extra="forbid")
    state: str
    evidence: str


class Comparison(BaseModel):
    """Metric comparison of two arms: startup facts, bench metrics per phase, warnings.

    ``runs_a``/``runs_b`` list every run pooled into each arm (one each, or several for an
    interleaved experiment); startup facts come from each arm's first run. ``quality``: the
    arms' quality probes and task scores compared, with the quality gate
    (:class:`servedeck.ab.quality.QualityComparison`), None when neither arm has any.
    """

    model_config = ConfigDict(extra="forbid")
    arm_a: str
    arm_b: str
    startup: list[MetricComparison]
    bench: list[MetricComparison]
    warnings: list[WarningChange]
    startup_a: dict
    startup_b: dict
    alpha: float = ALPHA
    margin: float = DEFAULT_MARGIN
    runs_a: list[str] = []
    runs_b: list[str] = []
    compile_cache_a: CompileCacheState | None = None
    compile_cache_b: CompileCacheState | None = None
    sequential: Any = None
    """The sequential record (:class:`servedeck.ab.sequential.SequentialRecord`) the bench
    verdicts were replayed under, None at fixed n."""
    load: Any = None
    """The arms under load (:class:`servedeck.ab.load.LoadComparison`), when both ran a load benchmark."""
    quality: Any = None  # a servedeck.ab.quality.QualityComparison (it imports this module)

    def metric(self, name: str, phase: str = "startup") -> MetricComparison | None:
        """The comparison of ``name`` in ``phase`` (``startup``, ``cold``, ``warm``), or None."""
        for m in [*self.startup, *self.bench]:
            if m.name == name and m.phase == phase:
                return m
        return None


def short_warning(text: str) -> str:
    """Shorten a vLLM warning to its first clause (before ``based on``, ``.``, ``;``)."""
    cut = text
    for marker in (" based on ", ". ", "; "):
        idx = cut.find(marker)
        if idx > 0:
            cut = cut[:idx]
    return cut.strip().rstrip(".")


# --------------------------------------------------------------------------------------------
# Tests and intervals
# --------------------------------------------------------------------------------------------

def _ratio_of_medians(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.median(y, axis=axis) / np.median(x, axis=axis)


def ratio_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """95 % bootstrap interval of ``median(b) / median(a)`` (two independent samples).

    ``scipy.stats.bootstrap`` with ``paired=False``, percentile method, 9999 resamples and a
    fixed seed so reports are reproducible. When every resample gives the same ratio
    (identical samples) the interval collapses to that ratio.
    """
    from scipy.stats import bootstrap

    xa, xb = np.asarray(a, float), np.asarray(b, float)
    point = float(_ratio_of_medians(xa, xb))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap((xa, xb), _ratio_of_medians, paired=False, vectorized=True,
                        confidence_level=CONFIDENCE_LEVEL, n_resamples=BOOTSTRAP_RESAMPLES,
                        method="percentile", random_state=SEED)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = point
    return low, high


def rank_test(x: Sequence[float], y: Sequence[float], alternative: str = "two-sided") -> tuple[float, str]:
    """Mann–Whitney U test of ``y`` against ``x`` with its exact permutation distribution.

    ``alternative``: ``two-sided``, ``less`` (y tends to be smaller) or ``greater``.

    Returns:
        ``(p, method)``: method is :data:`METHOD_EXACT`, or :data:`METHOD_TIES` when samples
        tie (a permutation test of U: exact up to :data:`EXACT_PERMUTATION_LIMIT` splits,
        else 9,999 seeded resamples).
    """
    return rank_tests([(x, y)], alternative)[0]


def rank_tests(pairs: Sequence[tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray]],
               alternative: str = "two-sided") -> list[tuple[float, str]]:
    """:func:`rank_test` for many ``(x, y)`` pairs at once. Pairs without ties get the exact
    permutation distribution of U (:func:`_u_counts`, the distribution
    ``scipy.stats.mannwhitneyu(method="exact")`` uses; one array operation per sample-size pair,
    which the sequential looks call thousands of times); tied pairs go through scipy's
    permutation test."""
    from scipy.stats import PermutationMethod, mannwhitneyu

    out: list[tuple[float, str] | None] = [None] * len(pairs)
    groups: dict[tuple[int, int], list[int]] = {}
    arrays = [(np.asarray(x, float), np.asarray(y, float)) for x, y in pairs]
    for i, (xa, ya) in enumerate(arrays):
        if len(np.unique(np.concatenate([xa, ya]))) == len(xa) + len(ya):
            groups.setdefault((len(xa), len(ya)), []).append(i)
            continue
        splits = math.comb(len(xa) + len(ya), len(xa))
        method = PermutationMethod(n_resamples=np.inf if splits <= EXACT_PERMUTATION_LIMIT
                                   else PERMUTATION_RESAMPLES, random_state=SEED)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = float(mannwhitneyu(ya, xa, alternative=alternative, method=method).pvalue)
        out[i] = (min(1.0, p), METHOD_TIES)
    for (n_x, n_y), idx in groups.items():
        xs = np.stack([arrays[i][0] for i in idx])
        ys = np.stack([arrays[i][1] for i in idx])
        u_y = (ys[:, :, None] > xs[:, None, :]).sum(axis=(1, 2))  # U of y: pairs where y is larger
        if alternative == "greater":
            ps = _u_tail(u_y, n_y, n_x)
        elif alternative == "less":
            ps = _u_tail(n_x * n_y - u_y, n_y, n_x)
        else:
            ps = np.minimum(1.0, 2.0 * _u_tail(np.maximum(u_y, n_x * n_y - u_y), n_y, n_x))
        for i, p in zip(idx, ps):
            out[i] = (float(p), METHOD_EXACT)
    return out  # type: ignore[return-value]


@functools.lru_cache(maxsize=4096)
def _u_counts(m: int, n: int) -> np.ndarray:
    """How many of the ``C(m+n, m)`` equally likely splits of ``m + n`` distinct values give
    each U (0 … m·n) of the ``m`` sample: the exact null distribution of the Mann–Whitney U
    statistic without ties, by the recurrence ``c(u; m, n) = c(u − n; m − 1, n) + c(u; m, n − 1)``
    (the largest value belongs to the first sample or not; Mann & Whitney 1947, Ann. Math.
    Statist. 18:50-60). Floats: exact up to 2**53, relative error 1e-16 beyond."""
    if m == 0 or n == 0:
        return np.ones(1)
    out = np.zeros(m * n + 1)
    out[n:] += _u_counts(m - 1, n)          # the largest value is in the first sample: it beats all n
    out[: m * (n - 1) + 1] += _u_counts(m, n - 1)
    return out


@functools.lru_cache(maxsize=4096)
def _u_sf(m: int, n: int) -> np.ndarray:
    """``P(U ≥ u)`` for u = 0 … m·n under the null (:func:`_u_counts`)."""
    counts = _u_counts(m, n)
    return np.cumsum(counts[::-1])[::-1] / counts.sum()


def _u_tail(u: np.ndarray, m: int, n: int) -> np.ndarray:
    """Exact one-sided p ``P(U ≥ u)`` of the U of an ``m`` sample against an ``n`` sample."""
    return _u_sf(m, n)[np.asarray(u, dtype=int)]


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p an exact rank test can give with these sample sizes
    (``2 / C(n_a + n_b, n_a)``, capped at 1)."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error rate, any dependence): the i-th smallest
    p is multiplied by ``m - i`` and the adjusted values are made monotone, capped at 1
    (Holm 1979, Scand. J. Statist. 6:65-70)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def pooled_log_sd(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Pooled sample standard deviation of ``log(a)`` and ``log(b)`` (≈ the coefficient of
    variation of each arm); None when a value is not positive or there are too few samples."""
    if min(len(a), len(b)) < 2 or min(*a, *b) <= 0:
        return None
    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    var = ((len(la) - 1) * la.var(ddof=1) + (len(lb) - 1) * lb.var(ddof=1)) / (len(la) + len(lb) - 2)
    return float(math.sqrt(var))


def samples_needed(noise: float | None, log_ratio: float, margin: float, alpha: float, family: int) -> int:
    """Samples per arm for the verdict in reach (module docstring), capped at
    :data:`MAX_SAMPLES_NEEDED`.

    Args:
        noise: :func:`pooled_log_sd` (None or 0: only the exact test's floor counts).
        log_ratio: ``log(median(b) / median(a))``.
        margin: practical-equivalence margin (relative).
        alpha, family: the report's level and number of judged metrics.
    """
    from statistics import NormalDist

    level = alpha / max(1, family)
    floor = 2
    while smallest_p(floor, floor) > level and floor < MAX_SAMPLES_NEEDED:
        floor += 1
    edge = math.log1p(margin)
    effect = abs(log_ratio)
    delta = effect if effect >= edge else edge - effect
    if not noise:
        return floor
    if delta <= 1e-12:
        return MAX_SAMPLES_NEEDED
    z = NormalDist().inv_cdf(1 - level / 2) + NormalDist().inv_cdf(POWER)
    n = 2 * (z * noise / delta) ** 2 / (3 / math.pi)
    return int(min(MAX_SAMPLES_NEEDED, max(floor, math.ceil(n))))


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------

def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _diff_ratio(a: float | None, b: float | None) -> tuple[float | None, float | None]:
    if a is None or b is None:
        return None, None
    return b - a, (b / a if a != 0 else None)


def _describe_bench(name: str, phase: str, a: list[float], b: list[float]) -> MetricComparison:
    ma, mb = _median(a), _median(b)
    diff, ratio = _diff_ratio(ma, mb)
    common = dict(name=name, phase=phase, a=ma, b=mb, samples_a=list(a), samples_b=list(b),
                  difference=diff, ratio=ratio, lower_is_better=lower_is_better(name))
    if ma is None or mb is None:
        return MetricComparison(**common, verdict="missing", judged=False)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES or not ratio or ratio <= 0 or min(*a, *b) <= 0:
        return MetricComparison(**common, verdict="not judged", judged=False,
                                reason=f"needs at least {MIN_SAMPLES} positive samples per arm")
    return MetricComparison(**common, verdict="no verdict", judged=True)


def not_comparable_bench(name: str, phase: str, a: Sequence[float], b: Sequence[float], *,
                         reason: str) -> MetricComparison:
    """A bench metric whose two arms did not measure like with like (``reason``, one clause):
    described (medians and ratio), not judged, outside the report's Holm family; verdict ``not
    comparable`` (``missing`` when an arm has no sample)."""
    m = _describe_bench(name, phase, list(a), list(b))
    if m.verdict != "missing":
        m.verdict, m.judged, m.reason = "not comparable", False, reason
    return m


MetricSamples = tuple[str, str, Sequence[float], Sequence[float]]
"""``(name, phase, samples_a, samples_b)``: one metric of a report, what :func:`judge_bench` takes."""


def judge_bench(metrics: Sequence[MetricSamples], *,
                alpha: float = ALPHA, margin: float = DEFAULT_MARGIN,
                intervals: bool = True, levels: tuple[float, float] | None = None,
                settled: Collection[str] = ()) -> list[MetricComparison]:
    """Compare and judge the bench metrics of one report together.

    Args:
        metrics: ``(name, phase, samples_a, samples_b)`` per metric; every metric with at least
            :data:`MIN_SAMPLES` positive samples per arm joins the report's Holm family.
            Directions come from :func:`lower_is_better` (register new metrics there).
        alpha: family-wise error rate of the report (0 < alpha < 1).
        margin: practical-equivalence margin, relative (0.03 = ±3 %).
        intervals: compute the bootstrap interval for every judged metric (False: only where a
            verdict needs it, as the simulation test does).
        levels: ``(difference, equivalence)``: the family-wise levels this judgement is held
            to, each at most ``alpha`` (one look of a sequential design,
            :mod:`servedeck.ab.sequential`); default ``(alpha, alpha)``.
        settled: metrics (``phase name``) decided at an earlier look: tested (their p values
            stay in the Holm family) but not decided again (verdict ``no verdict``, reason
            ``decided at an earlier look``).

    Returns:
        one :class:`MetricComparison` per input, in input order.

    Raises:
        ValueError: alpha, margin or a level out of range.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be at least 0 and below 1, got {margin}")
    level_d, level_e = levels if levels is not None else (alpha, alpha)
    if not (0 <= level_d <= alpha and 0 <= level_e <= alpha):
        raise ValueError(f"levels must lie between 0 and alpha={alpha}, got {levels}")
    out = [_describe_bench(name, phase, list(a), list(b)) for name, phase, a, b in metrics]
    judged = [m for m in out if m.judged]
    edge = math.log1p(margin)
    logs = [(np.log(m.samples_a), np.log(m.samples_b)) for m in judged]
    two_sided = rank_tests(logs)
    if margin > 0:
        upper = rank_tests([(la + edge, lb) for la, lb in logs], "less")      # H0: B/A >= 1 + margin
        lower = rank_tests([(la - edge, lb) for la, lb in logs], "greater")   # H0: B/A <= 1 / (1 + margin)
    for i, m in enumerate(judged):
        m.p, m.method = two_sided[i]
        m.p_equivalence = max(upper[i][0], lower[i][0]) if margin > 0 else 1.0
        m.noise = pooled_log_sd(m.samples_a, m.samples_b)
        assert m.ratio is not None  # judged: positive samples, so a positive ratio (_describe_bench)
        m.samples_needed = samples_needed(m.noise, math.log(m.ratio), margin, alpha, len(judged))
        m.margin, m.alpha = margin, alpha
        m.level, m.level_equivalence = level_d, level_e
        if intervals:
            m.ci_low, m.ci_high = ratio_interval(m.samples_a, m.samples_b)
    ps = [m.p for m in judged if m.p is not None]
    qs = [m.p_equivalence for m in judged if m.p_equivalence is not None]
    assert len(ps) == len(qs) == len(judged)  # both tests ran for each judged metric (above)
    for m, p_adj, q_adj in zip(judged, holm(ps), holm(qs)):
        m.p_adjusted, m.p_equivalence_adjusted = p_adj, q_adj
        if m.key in settled:
            m.reason = "decided at an earlier look"
            continue
        _decide(m, len(judged))
    return out


def _decide(m: MetricComparison, family: int) -> None:
    alpha, margin, ratio, p_adj, q_adj = m.alpha, m.margin, m.ratio, m.p_adjusted, m.p_equivalence_adjusted
    assert alpha is not None and margin is not None and ratio is not None  # a judged metric (judge_bench)
    assert p_adj is not None and q_adj is not None
    level_d = m.level if m.level is not None else alpha
    level_e = m.level_equivalence if m.level_equivalence is not None else alpha
    first_step = level_d / family
    n_a, n_b = len(m.samples_a), len(m.samples_b)
    pct = f"{margin * 100:g} %"
    at = "" if level_d == alpha else f" ≤ {level_d:.2g}"
    if p_adj <= level_d:
        if m.ci_low is None or m.ci_high is None:
            m.ci_low, m.ci_high = ratio_interval(m.samples_a, m.samples_b)
        lo, hi = m.ci_low, m.ci_high
        beyond = abs(math.log(ratio)) >= math.log1p(margin)
        if (lo > 1.0 or hi < 1.0) and beyond:
            higher = ratio > 1.0
            if m.lower_is_better is None:
                m.verdict = "higher" if higher else "lower"
            else:
                m.verdict = "slower" if higher == m.lower_is_better else "faster"
            m.reason = f"p={p_adj:.2g} (Holm){at} and the ratio is beyond ±{pct}"
        elif lo > 1.0 or hi < 1.0:
            m.verdict = "within margin"
            m.reason = (f"a difference is detected (p={p_adj:.2g}, Holm{at}) but it is smaller "
                        f"than ±{pct}")
        else:
            m.verdict = "no verdict"
            m.reason = f"the rank test (p={p_adj:.2g}, Holm{at}) and the bootstrap interval disagree"
    elif q_adj <= level_e:
        m.verdict = "equivalent"
        at_e = "" if level_e == alpha else f" ≤ {level_e:.2g}"
        m.reason = f"within ±{pct} (equivalence p={q_adj:.2g}, Holm{at_e})"
    else:
        m.verdict = "no verdict"
        floor = smallest_p(n_a, n_b)
        if level_d <= 0:
            m.reason = f"p={p_adj:.2g} (Holm), and this look has no alpha left to spend"
        elif floor > first_step:
            of = f"{alpha:g}" if level_d == alpha else f"this look's {level_d:.2g}"
            m.reason = (f"{n_a} vs {n_b} samples cannot reach p ≤ {first_step:.2g} ({of} over {family} "
                        f"metrics): the smallest exact p is {floor:.2g}")
        else:
            m.reason = f"p={p_adj:.2g} (Holm{at}), and equivalence within ±{pct} is not shown"


def compile_cache_state(run_dir: Path, startup: dict | None = None) -> CompileCacheState:
    """The compile-cache state of a run (:class:`CompileCacheState`).

    Reads the run's startup facts (``compile_cache_hit``, ``compile_ranges``: vLLM's own
    "Directly load the compiled graph" / "Compiling a graph for" lines, parsed by
    :mod:`servedeck.vllm.startup_log`); when they say nothing, the run history of its runs
    directory (``run.json`` of the runs before it: same host and image digest, container
    started). Never raises: an unreadable record reads as saying nothing.
    """
    run_dir = Path(run_dir)
    if startup is None:
        try:
            startup = startup_facts(run_dir)
        except ServedeckError:  # a state is context, never a reason to fail
            startup = {}
    hit = startup.get("compile_cache_hit")
    ranges = ", ".join(f"{r.get('graph') or 'graph'} "
                       f"{tuple(r['range']) if isinstance(r.get('range'), list) else r.get('range')}"
                       for r in startup.get("compile_ranges") or [] if isinstance(r, dict))
    if hit is True:
        return CompileCacheState(state="loaded", evidence="its log shows compiled graphs loaded from vLLM's compile "
                                                          "cache" + (f" ({ranges})" if ranges else ""))
    if hit is False:
        return CompileCacheState(state="compiled", evidence="its log shows a fresh compile"
                                                            + (f" of {ranges}" if ranges else ""))
    meta = store.meta_or_none(run_dir)
    if meta is not None:
        digest = meta.image.digest if meta.image else None
        for other_seq, other in reversed(store.run_dirs(run_dir.parent)):
            if other_seq >= meta.sequence:
                continue
            om = store.meta_or_none(other)
            if om is not None and om.host == meta.host and (om.image.digest if om.image else None) == digest and (
                    om.served or om.ready_at):
                return CompileCacheState(
                    state="after-start",
                    evidence=f"its log does not say; it started after run {other.name} of the same image "
                             f"on host {meta.host}, whose compile caches it may have reused")
        return CompileCacheState(state="first-start",
                                 evidence=f"its log does not say; no earlier start of this image on host "
                                          f"{meta.host} is recorded")
    return CompileCacheState(state="unknown", evidence="neither its log nor its record says")


def compile_cache_comparable(a: CompileCacheState, b: CompileCacheState) -> str | None:
    """None when startup timings of two runs with these states compare like with like, else
    the reason they do not (both states with their evidence)."""
    if a.state == b.state and a.state != "unknown":
        return None
    return f"compile caches differed at start: A {a.evidence}; B {b.evidence}"


def compare_startup_fact(name: str, a: Any, b: Any, *, not_comparable: str | None = None) -> MetricComparison:
    """Compare one startup fact (always one sample per arm: described, never judged).

    ``not_comparable``: the reason the two values do not compare like with like (compile
    caches in different states): the verdict is then ``not comparable`` with that reason."""
    fa = float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None
    fb = float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else None
    diff, ratio = _diff_ratio(fa, fb)
    if fa is None and fb is None:
        verdict = "not in either log"
    elif fa is None or fb is None:
        verdict = "missing"
    elif fb > fa:
        verdict = "higher"
    elif fb < fa:
        verdict = "lower"
    else:
        verdict = "same"
    reason = None
    if not_comparable and fa is not None and fb is not None:
        verdict, reason = "not comparable", not_comparable
    return MetricComparison(name=name, phase="startup", a=fa, b=fb,
                            samples_a=[fa] if fa is not None else [],
                            samples_b=[fb] if fb is not None else [],
                            difference=diff, ratio=ratio, lower_is_better=STARTUP_FACTS.get(name),
                            verdict=verdict, judged=False, reason=reason)


def compare_warnings(startup_a: dict, startup_b: dict) -> list[WarningChange]:
    """Startup warnings by id, in first-seen order (A then B)."""
    def by_id(startup: dict) -> dict[str, str]:
        out: dict[str, str] = {}
        for w in startup.get("warnings") or []:
            out.setdefault(str(w.get("id") or w.get("text")), str(w.get("text") or w.get("id")))
        return out

    wa, wb = by_id(startup_a), by_id(startup_b)
    return [WarningChange(id=i, text_a=wa.get(i), text_b=wb.get(i)) for i in dict.fromkeys([*wa, *wb])]


def as_runs(runs: Path | Sequence[Path]) -> list[Path]:
    """One run directory or several, as a list."""
    return [Path(runs)] if isinstance(runs, (str, Path)) else [Path(r) for r in runs]


def startup_facts(run_dir: Path) -> dict:
    """``startup.json``, with the facts it lacks filled from ``startup.log`` by the current
    parser when the run keeps its log (records written by an earlier parser miss some)."""
    from servedeck.vllm.startup_log import record_facts
    stored = store.read(run_dir, store.STARTUP)
    return record_facts(stored.to_dict() if stored is not None else None, store.read(run_dir, store.STARTUP_LOG))


def bench_metrics(samples_a: list, samples_b: list) -> list[MetricSamples]:
    """The bench metrics of two arms' samples (``bench.jsonl`` rows,
    :class:`servedeck.runs.records.Sample`), as :func:`judge_bench`
    takes them: every metric of :data:`BENCH_METRICS` per phase of :data:`BENCH_PHASES` that
    either arm measured (``warmup`` samples excluded)."""
    wanted: list[MetricSamples] = []
    for phase in BENCH_PHASES:
        for metric in BENCH_METRICS:
            if metric in LIMIT_METRICS:
                continue
            a = store.phase_samples(samples_a, phase, metric)
            b = store.phase_samples(samples_b, phase, metric)
            if a or b:
                wanted.append((metric, phase, a, b))
    return wanted
