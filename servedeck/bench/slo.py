"""Service-level objectives and goodput.

An SLO names per-request limits and the share of requests that must meet all of them:
``ttft_s=2,tpot_s=0.05,e2e_s=30,p=90`` reads "90 % of requests get their first token within
2 s, then a token every 50 ms on average, and finish within 30 s". The per-request limits are
vLLM's goodput definition (``vllm bench serve --goodput ttft:MS tpot:MS e2el:MS``,
``vllm/benchmarks/serve.py``: a request is *good* when it meets every limit given); the share is
the percentile at which the user states the objective ("p90 TTFT ≤ 2 s"), which is the same
statement: the ``p``-th percentile of a metric is within its limit exactly when at least ``p`` %
of requests are.

Per request: ``ttft_s`` (first output token), ``tpot_s`` (time per output token after the first,
``(t_last − t_first) / (output_tokens − first_chunk_tokens)``, vLLM's TPOT; requests of one
output chunk have none and meet any TPOT limit), ``e2e_s`` (send to end of stream). A failed
request meets nothing.

The models (:class:`~servedeck.runs.records.Slo`, :class:`~servedeck.runs.records.LevelSlo`)
are run-file content and live in :mod:`servedeck.runs.records`. Judgement of one load level
(:func:`judge`): the share of good requests among all sent, with
its exact Clopper–Pearson interval (:func:`servedeck.bench.quantiles.proportion`); the level
*meets* the SLO when the interval lies at or above ``p`` %, *violates* it when the interval lies
below, and is *undecided* otherwise (the samples cannot tell; more requests would). ``goodput``
is good requests per second of the level's duration. Each limited metric's percentile is given
with its order-statistic interval and is left out below the samples it needs.
"""

from __future__ import annotations

from typing import Any, Sequence

from pydantic import ValidationError

from servedeck.bench.quantiles import CONFIDENCE, percentile, proportion
from servedeck.errors import ServedeckError
from servedeck.runs.records import SLO_METRICS, LevelSlo, Proportion, Slo, SloState

__all__ = ["SLO_METRICS", "Slo", "LevelSlo", "SloState", "parse_slo", "request_meets", "state_of", "judge"]


def parse_slo(text: str) -> Slo:
    """Read ``ttft_s=2,tpot_s=0.05,e2e_s=30,p=90`` (``p`` defaults to 90).

    Raises:
        ServedeckError: an unknown key, a key given twice, a value that is not a positive
            number, a percentile of 1 or below, or no limit.
    """
    fields: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep:
            raise ServedeckError(f"SLO item {part!r} is not KEY=VALUE", field="--slo",
                                 hint="e.g. --slo ttft_s=2,tpot_s=0.05,p=90")
        if key in ("p", "percentile"):
            key = "percentile"
        elif key not in SLO_METRICS:
            raise ServedeckError(f"unknown SLO key {key!r}", field="--slo",
                                 hint=f"keys: {', '.join(SLO_METRICS)}, p")
        if key in fields:
            raise ServedeckError(f"SLO {text!r} gives {key} twice", field="--slo",
                                 hint="give each limit once, e.g. --slo ttft_s=2,tpot_s=0.05,p=90")
        try:
            fields[key] = float(value)
        except ValueError:
            raise ServedeckError(f"SLO {key}={value!r} is not a number", field="--slo") from None
    try:
        return Slo(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "--slo"
        raise ServedeckError(f"invalid SLO {text!r}: {where}: {err['msg']}", field="--slo") from None


def request_meets(slo: Slo, record: Any) -> bool:
    """Whether one request (fields ``success``, ``ttft_s``, ``tpot_s``, ``e2e_s``) meets every limit."""
    if not record.success:
        return False
    for metric, limit in slo.limits().items():
        value = getattr(record, metric)
        if value is None:
            if metric == "tpot_s":
                continue  # one output chunk: no time per output token to limit
            return False
        if value > limit:
            return False
    return True


def state_of(attainment: Proportion, q: float) -> SloState:
    """``met`` when the interval of the share of good requests lies at or above ``q``,
    ``violated`` when it lies below, else ``undecided``."""
    if not attainment.n:
        return "no requests"
    if attainment.low >= q:  # type: ignore[operator]
        return "met"
    if attainment.high < q:  # type: ignore[operator]
        return "violated"
    return "undecided"


def judge(slo: Slo, records: Sequence[Any], duration_s: float | None,
          confidence: float = CONFIDENCE) -> LevelSlo:
    """Judge ``slo`` over one level's request records (module docstring)."""
    good = sum(1 for r in records if request_meets(slo, r))
    share = proportion(good, len(records), confidence)
    ok = [r for r in records if r.success]
    pcts = {m: percentile([getattr(r, m) for r in ok if getattr(r, m) is not None], slo.q, confidence)
            for m in slo.limits()}
    return LevelSlo(slo=slo, good=good, total=len(records), attainment=share, state=state_of(share, slo.q),
                    goodput_rps=(good / duration_s) if duration_s else None, percentiles=pcts)
