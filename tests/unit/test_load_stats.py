"""Error rates of the load statistics, proven by simulation (servedeck.bench.quantiles,
servedeck.bench.slo): the order-statistic interval of a percentile covers the true percentile at
least 95 % of the time, whatever the distribution; no percentile is reported from fewer samples
than its interval needs; an SLO level exactly at its target is called ``met`` (or
``violated``) at most 2.5 % of the time each."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servedeck.bench.quantiles import order_ranks, percentile, proportion, samples_needed
from servedeck.bench.slo import Slo, judge, request_meets, state_of

TRIALS = 20000
# 3 standard errors below 0.95 at this many trials: the exact coverage is ≥ 0.95 by theory
FLOOR = 0.95 - 3 * math.sqrt(0.95 * 0.05 / TRIALS)


@pytest.mark.parametrize("q, n", [(0.5, 6), (0.9, 36), (0.95, 72), (0.99, 368)])
def test_samples_needed_is_the_smallest_n_with_an_interval(q, n):
    assert samples_needed(q) == n
    assert order_ranks(n, q) is not None and order_ranks(n - 1, q) is None


def test_too_few_samples_report_nothing():
    p = percentile(np.arange(35.0), 0.9)
    assert p.value is None and p.low is None and p.needed == 36 and p.n == 35 and not p.reported
    p = percentile(np.arange(36.0), 0.9)
    assert p.reported and p.low <= p.value <= p.high


@pytest.mark.parametrize("dist", ["exponential", "lognormal", "uniform"])
@pytest.mark.parametrize("q, n", [(0.5, 6), (0.5, 40), (0.9, 36), (0.9, 120), (0.99, 400)])
def test_percentile_interval_covers_the_true_percentile(dist, q, n):
    rng = np.random.default_rng([7, n, int(q * 100)])
    truth = {"exponential": -math.log(1 - q), "lognormal": math.exp(0.8 * _z(q)), "uniform": q}[dist]
    draw = {"exponential": lambda size: rng.exponential(1.0, size),
            "lognormal": lambda size: rng.lognormal(0.0, 0.8, size),
            "uniform": lambda size: rng.uniform(0.0, 1.0, size)}[dist]
    # the interval percentile() reports is [X(r), X(s)] of the sorted samples
    sample = draw(n)
    p = percentile(sample, q)
    r, s = order_ranks(n, q)
    assert (p.low, p.high) == (np.sort(sample)[r - 1], np.sort(sample)[s - 1])
    trials = np.sort(draw((TRIALS, n)), axis=1)  # every trial at once
    covered = np.mean((trials[:, r - 1] <= truth) & (truth <= trials[:, s - 1]))
    assert covered >= FLOOR, covered


def _z(q: float) -> float:
    from scipy.stats import norm
    return float(norm.ppf(q))


@pytest.mark.parametrize("n, true_share", [(36, 0.9), (100, 0.9), (60, 0.5), (400, 0.99)])
def test_slo_exactly_at_target_is_rarely_called(n, true_share):
    """A level whose requests meet the limits with probability exactly p: ``met`` and
    ``violated`` are each wrong, and each happens at most 2.5 % of the time."""
    rng = np.random.default_rng([11, n])
    states = [state_of(proportion(k, n), true_share) for k in range(n + 1)]  # the state of every count
    counts = rng.binomial(n, true_share, size=TRIALS)
    met = sum(states[k] == "met" for k in counts)
    violated = sum(states[k] == "violated" for k in counts)
    limit = 0.025 + 3 * math.sqrt(0.025 * 0.975 / TRIALS)
    assert met / TRIALS <= limit and violated / TRIALS <= limit, (met, violated)


class _R:
    def __init__(self, success=True, ttft_s=0.1, tpot_s=0.01, e2e_s=1.0):
        self.success, self.ttft_s, self.tpot_s, self.e2e_s = success, ttft_s, tpot_s, e2e_s


def test_request_meets_every_limit_and_failures_meet_none():
    slo = Slo(ttft_s=0.5, tpot_s=0.02, e2e_s=2.0)
    assert request_meets(slo, _R())
    assert not request_meets(slo, _R(ttft_s=0.6))
    assert not request_meets(slo, _R(tpot_s=0.03))
    assert not request_meets(slo, _R(e2e_s=2.5))
    assert not request_meets(slo, _R(success=False))
    assert request_meets(slo, _R(tpot_s=None))  # one output chunk: no TPOT to limit
    assert not request_meets(Slo(ttft_s=0.5), _R(ttft_s=None))


def test_judge_counts_failures_against_attainment_and_goodput():
    slo = Slo(ttft_s=0.5, percentile=90)
    recs = [_R() for _ in range(95)] + [_R(success=False) for _ in range(5)]
    lv = judge(slo, recs, duration_s=10.0)
    assert (lv.good, lv.total) == (95, 100)
    assert lv.goodput_rps == pytest.approx(9.5)
    assert lv.attainment.low < 0.95 < lv.attainment.high
    assert lv.percentiles["ttft_s"].n == 95 and lv.percentiles["ttft_s"].value == pytest.approx(0.1)
    assert judge(slo, [_R() for _ in range(36)], 1.0).state == "met"   # 36/36: lower bound 0.903
    assert judge(slo, [_R() for _ in range(35)], 1.0).state == "undecided"
    assert judge(slo, [_R(ttft_s=1.0) for _ in range(10)], 1.0).state == "violated"
