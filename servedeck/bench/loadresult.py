"""What a load benchmark recorded: one record per request, a summary per load level.

The models (:class:`~servedeck.runs.records.RequestRecord`, ``LevelResult``, ``LoadSummary``, …)
are run-file content and live in :mod:`servedeck.runs.records`; this module computes them. The
client that fills them is :mod:`servedeck.bench.loadclient`. Stored in a run through the run
store (:func:`servedeck.runs.store.write_load_files`): ``load.jsonl`` (one ``RequestRecord`` per
line, every request of every level in send order, warm-up included) and ``load.json``
(``LoadSummary``). A capacity search adds ``capacity.json`` (``CapacityResult``).

Per request (vLLM's ``RequestFuncOutput`` pattern, ``vllm/benchmarks/lib/endpoint_request_func.py``:
failures are recorded, never raised): ``success``/``error``, and for a success ``ttft_s``,
``tpot_s``, ``e2e_s`` and the gaps between output chunks (``itl_s``), all taken on the
client's ``time.perf_counter()`` when the bytes arrived (see the client).

Per level (:class:`LevelResult`): the requests sent and how they ended, throughput over the
level's duration (first send to last end), percentiles of each latency metric with their
order-statistic intervals (:mod:`servedeck.bench.quantiles`; none from fewer samples than an
interval needs), the SLO judgement and goodput (:mod:`servedeck.bench.slo`), and what the
server's ``/metrics`` said meanwhile (:class:`LevelServer`): its request, token and
preemption counters over the level, and its queue (``vllm:num_requests_waiting``) and batch
(``vllm:num_requests_running``) sampled while the level ran.

**Delivery** (``LevelResult.delivery_lag_s``, :func:`late_delivery`): vLLM stamps a request's first token
when its API server's output processor handles it (``vllm:time_to_first_token_seconds``,
``vllm/v1/metrics/stats.py`` ``IterationStats``, vLLM 0.32), before the stream's bytes are
written. The level's mean client TTFT minus that histogram's mean over the same level is the time
first tokens spent between the server's output processing and the client. A level delivered
late (lag above :data:`LATE_DELIVERY_MIN_S` and above :data:`LATE_DELIVERY_SHARE` of the mean
end-to-end latency) measured the host's delivery, not the engine: on a host whose cores are all
taken by the engine (vLLM's CPU server on 2 cores: the worker and the engine core's busy loop),
whole streams reach the client at once, and the gauges the API server publishes are as late.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from servedeck.bench.quantiles import CONFIDENCE, percentile
from servedeck.bench.slo import judge
from servedeck.runs.records import (LevelResult, LevelServer, LoadLevel, LoadSummary, Percentile, RequestRecord,
                                    ServerSample, Slo)

__all__ = ["LATENCY_METRICS", "REPORTED_QUANTILES", "RequestRecord", "ServerSample", "LevelServer", "LevelResult",
           "LoadSummary", "summarise_level", "server_gauges", "late_delivery"]

#: Latency metrics summarised per level (seconds).
LATENCY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
#: Percentiles reported per metric (each only from the samples its interval needs).
REPORTED_QUANTILES = (0.5, 0.9, 0.99)
#: Late delivery (module docstring): a lag of at least this many seconds …
LATE_DELIVERY_MIN_S = 0.05
#: … that is also at least this share of the level's mean end-to-end latency (a network's constant
#: round trip on a long request is not late delivery; a stream held back for most of its life is).
LATE_DELIVERY_SHARE = 0.25


def late_delivery(level: LevelResult) -> bool:
    """True when ``level``'s streams reached the client late (module docstring)."""
    lag, e2e = level.delivery_lag_s, level.means.get("e2e_s")
    return lag is not None and e2e is not None and lag >= max(LATE_DELIVERY_MIN_S, LATE_DELIVERY_SHARE * e2e)


def _values(records: Sequence[RequestRecord], metric: str) -> list[float]:
    if metric == "itl_s":
        return [g for r in records for g in r.itl_s]
    return [v for r in records if (v := getattr(r, metric)) is not None]


def summarise_level(index: int, level: LoadLevel, records: Sequence[RequestRecord], *, started_at: str,
                    server: LevelServer | None, slo: Slo | None,
                    confidence: float = CONFIDENCE) -> LevelResult:
    """Summarise one level's records (module docstring).

    ``duration_s`` runs from the first send to the last end (``sent_s + e2e_s``; a failed
    request without an end counts its send).
    """
    from collections import Counter

    ok = [r for r in records if r.success]
    start = min((r.sent_s for r in records), default=0.0)
    end = max((r.sent_s + (r.e2e_s or 0.0) for r in records), default=0.0)
    duration = max(end - start, 1e-9)
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens or r.prompt_tokens_requested for r in ok)
    pcts: dict[str, dict[str, Percentile]] = {}
    medians: dict[str, float | None] = {}
    means: dict[str, float | None] = {}
    for metric in LATENCY_METRICS:
        vals = _values(ok, metric)
        pcts[metric] = {f"p{round(q * 100)}": percentile(vals, q, confidence) for q in REPORTED_QUANTILES}
        medians[metric] = statistics.median(vals) if vals else None
        means[metric] = statistics.fmean(vals) if vals else None
    busy = sum(r.e2e_s or 0.0 for r in records)
    failures = Counter(r.error or "" for r in records if not r.success)
    errors = [{"text": t, "count": c} for t, c in failures.most_common()]
    return LevelResult(
        index=index, level=level, started_at=started_at, duration_s=duration, requests=len(records),
        completed=len(ok), failed=len(records) - len(ok), errors=errors,
        request_rps=len(ok) / duration, output_tok_s=out_tok / duration, total_tok_s=(out_tok + in_tok) / duration,
        prompt_tokens=in_tok, output_tokens=out_tok, concurrency_mean=busy / duration,
        percentiles=pcts, medians=medians, means=means, server=server,
        slo=judge(slo, records, duration, confidence) if slo is not None else None)


def server_gauges(samples: Sequence[ServerSample]) -> dict[str, float | None]:
    """Time-weighted means and maxima of the sampled gauges (each sample holds until the next)."""
    out: dict[str, float | None] = {}
    for name in ("running", "waiting"):
        pts = [(s.t_s, getattr(s, name)) for s in samples if getattr(s, name) is not None]
        out[f"{name}_max"] = max((v for _, v in pts), default=None)
        if len(pts) >= 2:
            span = pts[-1][0] - pts[0][0]
            area = sum(v * (t2 - t1) for (t1, v), (t2, _) in zip(pts, pts[1:]))
            out[f"{name}_mean"] = area / span if span > 0 else pts[0][1]
        else:
            out[f"{name}_mean"] = pts[0][1] if pts else None
    kv = [s.kv_cache_usage for s in samples if s.kv_cache_usage is not None]
    out["kv_cache_usage_max"] = max(kv) if kv else None
    return out
