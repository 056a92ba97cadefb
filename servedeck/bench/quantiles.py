"""Percentiles with distribution-free intervals, and proportions with exact intervals.

A percentile of per-request samples (``p90 TTFT``) is reported only with its confidence
interval, and only from enough samples for that interval to exist:

* **Interval** (order statistics, no assumption about the distribution): with ``n`` samples and
  ``B ~ Binomial(n, q)`` the number of samples below the true ``q``-quantile, the interval
  ``[X(r), X(s)]`` of the sorted samples covers it with probability ``P(r ≤ B ≤ s − 1)``
  (David & Nagaraja, *Order Statistics*, 3rd ed., §7.1). servedeck takes the equal-tailed
  choice: ``r`` the largest rank with ``P(B ≤ r − 1) ≤ α/2`` and ``s`` the smallest with
  ``P(B ≥ s) ≤ α/2``; the coverage is then at least ``1 − α`` (exactly, not asymptotically).
* **Samples needed**: such ranks exist within ``1..n`` only when ``q^n ≤ α/2`` and
  ``(1 − q)^n ≤ α/2``: ``n ≥ ln(α/2) / ln(max(q, 1 − q))``. At 95 %: the median needs 6
  samples, p90 36, p95 72, p99 368. Below that a percentile is not reported (a "p99" of 50
  samples is the maximum, not a p99).
* **Point estimate**: the sample quantile with linear interpolation between order statistics
  (``numpy.quantile``'s default, Hyndman & Fan type 7), inside the interval by construction.

Proportions (the share of requests meeting an SLO) carry the Clopper–Pearson interval
(``scipy.stats.binomtest(...).proportion_ci(method="exact")``), the dual of the order-statistic
interval above: ``q-quantile ≤ t`` exactly when ``P(X ≤ t) ≥ q``.

The coverage of both is checked by simulation in ``tests/unit/test_load_stats.py``.
"""

from __future__ import annotations

import math
from typing import Sequence

from servedeck.runs.records import Percentile, Proportion

CONFIDENCE = 0.95
"""Confidence of every interval servedeck reports."""

__all__ = ["CONFIDENCE", "Percentile", "Proportion", "samples_needed", "percentile", "order_ranks",
           "proportion", "percentile_label"]


def percentile_label(q: float) -> str:
    """``p90``, ``p99.9``, ``p50`` for a quantile given as a fraction."""
    pct = q * 100
    text = f"{pct:.6g}"
    return f"p{text}"


def samples_needed(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples for which the equal-tailed order-statistic interval of the
    ``q``-quantile at ``confidence`` exists (module docstring).

    Raises:
        ValueError: ``q`` not strictly between 0 and 1, or ``confidence`` not in (0, 1).
    """
    if not 0 < q < 1:
        raise ValueError(f"a quantile must be strictly between 0 and 1, got {q}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    tail = (1 - confidence) / 2
    n = math.ceil(math.log(tail) / math.log(max(q, 1 - q)) - 1e-12)
    # guard against rounding at the boundary: step until both tails fit
    while max(q, 1 - q) ** n > tail:
        n += 1
    return max(n, 1)


def order_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks ``(r, s)`` of the equal-tailed interval ``[X(r), X(s)]`` for the
    ``q``-quantile of ``n`` samples, or None when ``n`` is below :func:`samples_needed`."""
    from scipy.stats import binom

    tail = (1 - confidence) / 2
    if n < 1 or (1 - q) ** n > tail or q ** n > tail:
        return None
    cdf = binom.cdf(range(n + 1), n, q)  # cdf[j] = P(B <= j)
    r = max(j for j in range(1, n + 1) if cdf[j - 1] <= tail)
    s = min(j for j in range(1, n + 1) if 1.0 - cdf[j - 1] <= tail)
    return r, s


def percentile(values: Sequence[float], q: float, confidence: float = CONFIDENCE) -> Percentile:
    """The ``q``-quantile of ``values`` with its interval (module docstring); value and
    interval are None when there are fewer than :func:`samples_needed` values.

    Raises:
        ValueError: ``q`` or ``confidence`` out of range.
    """
    import numpy as np

    needed = samples_needed(q, confidence)
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    n = len(vals)
    ranks = order_ranks(n, q, confidence)
    if ranks is None:
        return Percentile(q=q, value=None, low=None, high=None, n=n, needed=needed, confidence=confidence)
    r, s = ranks
    return Percentile(q=q, value=float(np.quantile(vals, q)), low=vals[r - 1], high=vals[s - 1], n=n,
                      needed=needed, confidence=confidence)


def proportion(k: int, n: int, confidence: float = CONFIDENCE) -> Proportion:
    """``k / n`` with the Clopper–Pearson interval (None values when ``n`` is 0)."""
    if n <= 0:
        return Proportion(k=0, n=0, value=None, low=None, high=None, confidence=confidence)
    if not 0 <= k <= n:
        raise ValueError(f"k={k} must be between 0 and n={n}")
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return Proportion(k=k, n=n, value=k / n, low=float(ci.low), high=float(ci.high), confidence=confidence)
