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
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

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
}

#: Direction of every judged metric (lower is better), the bench metrics' and those other
#: measurements add (the load benchmark's per-level latencies, :mod:`servedeck.ab.load`).
METRIC_DIRECTIONS: dict[str, bool] = {**BENCH_METRICS, "tpot_s": True, "e2e_s": True}

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
            ``no verdict`` | ``not judged`` (too few samples) | ``missing``; startup:
            ``higher`` | ``lower`` | ``same`` | ``missing`` | ``not in either log``.
        judged: True when the rank test ran.
        method: the test (``Mann-Whitney U, exact``), None when not judged.
        p, p_adjusted: two-sided p of the difference, raw and Holm-adjusted over the report.
        p_equivalence, p_equivalence_adjusted: TOST p against ±margin, raw and Holm-adjusted.
        margin, alpha: the settings the verdict used.
        noise: pooled standard deviation of the log samples (≈ coefficient of variation).
        samples_needed: per arm, for the verdict in reach at that noise (module docstring).
        reason: why the verdict is what it is, one clause.
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


def rank_tests(pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
               alternative: str = "two-sided") -> list[tuple[float, str]]:
    """:func:`rank_test` for many ``(x, y)`` pairs at once: pairs without ties that share their
    sample sizes go through one vectorised ``scipy.stats.mannwhitneyu`` call."""
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
    for idx in groups.values():
        xs = np.stack([arrays[i][0] for i in idx])
        ys = np.stack([arrays[i][1] for i in idx])
        ps = np.atleast_1d(mannwhitneyu(ys, xs, alternative=alternative, method="exact", axis=1).pvalue)
        for i, p in zip(idx, ps):
            out[i] = (float(p), METHOD_EXACT)
    return out  # type: ignore[return-value]


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
    from scipy.stats import norm

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
    z = norm.ppf(1 - level / 2) + norm.ppf(POWER)
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
                  difference=diff, ratio=ratio, lower_is_better=METRIC_DIRECTIONS.get(name))
    if ma is None or mb is None:
        return MetricComparison(**common, verdict="missing", judged=False)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES or not ratio or ratio <= 0 or min(*a, *b) <= 0:
        return MetricComparison(**common, verdict="not judged", judged=False,
                                reason=f"needs at least {MIN_SAMPLES} positive samples per arm")
    return MetricComparison(**common, verdict="no verdict", judged=True)


def judge_bench(metrics: Sequence[tuple[str, str, Sequence[float], Sequence[float]]], *,
                alpha: float = ALPHA, margin: float = DEFAULT_MARGIN,
                intervals: bool = True) -> list[MetricComparison]:
    """Compare and judge the bench metrics of one report together.

    Args:
        metrics: ``(name, phase, samples_a, samples_b)`` per metric; every metric with at least
            :data:`MIN_SAMPLES` positive samples per arm joins the report's Holm family.
        alpha: family-wise error rate of the report (0 < alpha < 1).
        margin: practical-equivalence margin, relative (0.03 = ±3 %).
        intervals: compute the bootstrap interval for every judged metric (False: only where a
            verdict needs it, as the simulation test does).

    Returns:
        one :class:`MetricComparison` per input, in input order.

    Raises:
        ValueError: alpha or margin out of range.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be at least 0 and below 1, got {margin}")
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
        m.samples_needed = samples_needed(m.noise, math.log(m.ratio), margin, alpha, len(judged))
        m.margin, m.alpha = margin, alpha
        if intervals:
            m.ci_low, m.ci_high = ratio_interval(m.samples_a, m.samples_b)
    for m, p_adj, q_adj in zip(judged, holm([m.p for m in judged]),
                               holm([m.p_equivalence for m in judged])):
        m.p_adjusted, m.p_equivalence_adjusted = p_adj, q_adj
        _decide(m, len(judged))
    return out


def _decide(m: MetricComparison, family: int) -> None:
    level = m.alpha / family
    n_a, n_b = len(m.samples_a), len(m.samples_b)
    pct = f"{m.margin * 100:g} %"
    if m.p_adjusted <= m.alpha:
        if m.ci_low is None:
            m.ci_low, m.ci_high = ratio_interval(m.samples_a, m.samples_b)
        beyond = abs(math.log(m.ratio)) >= math.log1p(m.margin)
        if (m.ci_low > 1.0 or m.ci_high < 1.0) and beyond:
            higher = m.ratio > 1.0
            if m.lower_is_better is None:
                m.verdict = "higher" if higher else "lower"
            else:
                m.verdict = "slower" if higher == m.lower_is_better else "faster"
            m.reason = f"p={m.p_adjusted:.2g} (Holm) and the ratio is beyond ±{pct}"
        elif m.ci_low > 1.0 or m.ci_high < 1.0:
            m.verdict = "within margin"
            m.reason = f"a difference is detected (p={m.p_adjusted:.2g}, Holm) but it is smaller than ±{pct}"
        else:
            m.verdict = "no verdict"
            m.reason = f"the rank test (p={m.p_adjusted:.2g}, Holm) and the bootstrap interval disagree"
    elif m.p_equivalence_adjusted <= m.alpha:
        m.verdict = "equivalent"
        m.reason = f"within ±{pct} (equivalence p={m.p_equivalence_adjusted:.2g}, Holm)"
    else:
        m.verdict = "no verdict"
        floor = smallest_p(n_a, n_b)
        if floor > level:
            m.reason = (f"{n_a} vs {n_b} samples cannot reach p ≤ {level:.2g} ({m.alpha:g} over {family} "
                        f"metrics): the smallest exact p is {floor:.2g}")
        else:
            m.reason = f"p={m.p_adjusted:.2g} (Holm), and equivalence within ±{pct} is not shown"


def compare_startup_fact(name: str, a: Any, b: Any) -> MetricComparison:
    """Compare one startup fact (always one sample per arm: described, never judged)."""
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
    return MetricComparison(name=name, phase="startup", a=fa, b=fb,
                            samples_a=[fa] if fa is not None else [],
                            samples_b=[fb] if fb is not None else [],
                            difference=diff, ratio=ratio, lower_is_better=STARTUP_FACTS.get(name),
                            verdict=verdict, judged=False)


def compare_warnings(startup_a: dict, startup_b: dict) -> list[WarningChange]:
    """Startup warnings by id, in first-seen order (A then B)."""
    def by_id(startup: dict) -> dict[str, str]:
        out: dict[str, str] = {}
        for w in startup.get("warnings") or []:
            out.setdefault(str(w.get("id") or w.get("text")), str(w.get("text") or w.get("id")))
        return out

    wa, wb = by_id(startup_a), by_id(startup_b)
    return [WarningChange(id=i, text_a=wa.get(i), text_b=wb.get(i)) for i in dict.fromkeys([*wa, *wb])]


def _as_list(runs: Path | Sequence[Path]) -> list[Path]:
    return [Path(runs)] if isinstance(runs, (str, Path)) else [Path(r) for r in runs]


def _startup_facts(run_dir: Path) -> dict:
    """``startup.json``, with the facts it lacks filled from ``startup.log`` by the current
    parser when the run keeps its log (records written by an earlier parser miss some)."""
    from servedeck.vllm.startup_log import record_facts
    stored = store.read(run_dir, store.STARTUP)
    return record_facts(stored.to_dict() if stored is not None else None, store.read(run_dir, store.STARTUP_LOG))


def compare_metrics(runs_a: Path | Sequence[Path], runs_b: Path | Sequence[Path], *,
                    alpha: float = ALPHA, margin: float = DEFAULT_MARGIN,
                    quality: Any = None) -> Comparison:
    """Compare startup facts, bench metrics and warnings of two arms.

    Args:
        runs_a, runs_b: one run directory per arm, or several (an interleaved experiment: their
            samples are pooled per arm; startup facts come from each arm's first run).
        alpha, margin: see :func:`judge_bench`.
        quality: the quality gate's margins and reference arm
            (:class:`servedeck.ab.quality.QualityGateSettings`; default when None).

    Reads ``startup.json`` (gaps filled from ``startup.log`` when the run keeps it) and
    ``bench.jsonl`` through :mod:`servedeck.runs.store`; a missing
    file gives ``missing`` verdicts rather than an error. Bench metrics are compared for the
    ``cold`` and ``warm`` phases (``warmup`` samples are excluded) whenever either arm has
    samples. When both arms ran a load benchmark (``load.jsonl``), each level's per-request
    ``ttft_s``/``tpot_s``/``e2e_s`` join the judged metrics (phase = the level, ``c=4``) and
    ``load`` holds the curves and the capacity verdict (:func:`servedeck.ab.load.compare_load`).

    Raises:
        ServedeckError: a JSON file is invalid.
        ValueError: alpha or margin out of range.
    """
    from servedeck.ab.quality import compare_quality
    la, lb = _as_list(runs_a), _as_list(runs_b)
    sa, sb = _startup_facts(la[0]), _startup_facts(lb[0])
    startup = [compare_startup_fact(n, sa.get(n), sb.get(n)) for n in STARTUP_FACTS]
    samples_a = [s for r in la for s in store.read(r, store.BENCH_SAMPLES)]
    samples_b = [s for r in lb for s in store.read(r, store.BENCH_SAMPLES)]
    wanted = []
    for phase in BENCH_PHASES:
        for metric in BENCH_METRICS:
            a = store.phase_samples(samples_a, phase, metric)
            b = store.phase_samples(samples_b, phase, metric)
            if a or b:
                wanted.append((metric, phase, a, b))
    from servedeck.ab.load import compare_load, load_metrics
    wanted += load_metrics(la, lb)
    bench = judge_bench(wanted, alpha=alpha, margin=margin)

    def label(runs: list[Path]) -> str:
        return runs[0].name if len(runs) == 1 else f"{runs[0].name} (+{len(runs) - 1})"
    return Comparison(arm_a=label(la), arm_b=label(lb), startup=startup, bench=bench,
                      warnings=compare_warnings(sa, sb), startup_a=sa, startup_b=sb,
                      alpha=alpha, margin=margin, runs_a=[r.name for r in la], runs_b=[r.name for r in lb],
                      load=compare_load(la, lb, alpha=alpha), quality=compare_quality(la, lb, quality))
