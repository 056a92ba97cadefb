"""What a load benchmark recorded: one record per request, a summary per load level.

Pure data (pydantic) and arithmetic; the client that fills it is
:mod:`servedeck.bench.loadclient`. Stored in a run through the run store
(:func:`servedeck.runs.store.write_load_files`): ``load.jsonl`` (one :class:`RequestRecord` per
line, every request of every level in send order, warm-up included) and ``load.json``
(:class:`LoadSummary`). A capacity search adds ``capacity.json``
(:class:`servedeck.bench.capacity.CapacityResult`).

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
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field

from servedeck.bench.client import ServerDelta
from servedeck.bench.load import LoadLevel
from servedeck.bench.quantiles import CONFIDENCE, Percentile, percentile
from servedeck.bench.slo import LevelSlo, Slo, judge

#: Latency metrics summarised per level (seconds).
LATENCY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
#: Percentiles reported per metric (each only from the samples its interval needs).
REPORTED_QUANTILES = (0.5, 0.9, 0.99)


class RequestRecord(BaseModel):
    """One request of a load level (a line of ``load.jsonl``); times in seconds.

    ``level`` is the level's index (-1: warm-up); ``sent_s`` the send time from the level's
    start and ``scheduled_s`` when an open-loop profile wanted it sent (``queued_s`` = the
    difference, the wait for a free slot under ``max_concurrency``). ``sent_unix_s`` is the
    wall-clock send time (to line up with server logs). ``ttft_s``: send to the first chunk that
    carried output; ``tpot_s``: ``(last − first output chunk) / (output_tokens −
    first_chunk_tokens)`` (None with a single output chunk); ``itl_s``: the gaps between
    consecutive output chunks; ``e2e_s``: send to the end of the stream.
    """

    model_config = ConfigDict(extra="forbid")
    level: int
    index: int
    tag: str
    prefix_group: int | None = None
    prompt_tokens_requested: int
    max_tokens: int
    scheduled_s: float | None = None
    sent_s: float
    queued_s: float = 0.0
    sent_unix_s: float
    success: bool
    error: str | None = None
    http_status: int | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    last_token_s: float | None = None
    itl_s: list[float] = Field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int = 0
    first_chunk_tokens: int = 0
    chunks: int = 0
    finish_reason: str | None = None


class ServerSample(BaseModel):
    """One sample of the server's gauges (``t_s`` from the level's start)."""

    model_config = ConfigDict(extra="forbid")
    t_s: float
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    preemptions_total: float | None = None


class LevelServer(BaseModel):
    """What the server's ``/metrics`` said over one level.

    ``delta``: counters over the level (:func:`servedeck.bench.client.metrics_delta`, scraped
    before the first and after the last request, once ``vllm:request_success_total`` counted
    them); ``preemptions``: Δ``vllm:num_preemptions_total``; ``samples``: the gauges every
    ``interval_s`` while the level ran; ``running_max``/``waiting_max`` and the time-weighted
    ``running_mean``/``waiting_mean`` of those samples; ``kv_cache_usage_max`` (fraction).
    """

    model_config = ConfigDict(extra="forbid")
    delta: ServerDelta | None = None
    preemptions: int | None = None
    interval_s: float
    samples: list[ServerSample] = Field(default_factory=list)
    running_max: float | None = None
    running_mean: float | None = None
    waiting_max: float | None = None
    waiting_mean: float | None = None
    kv_cache_usage_max: float | None = None


class LevelResult(BaseModel):
    """One load level's summary (an entry of ``load.json`` ``levels``).

    Throughput is over ``duration_s`` (first send to last end): ``request_rps`` (successful
    requests/s), ``output_tok_s`` (output tokens of successful requests/s) and ``total_tok_s``
    (prompt + output). ``percentiles[metric][pNN]``: :class:`~servedeck.bench.quantiles.Percentile`
    over the successful requests (``itl_s`` over every gap of every request);
    ``medians``/``means``: plain point figures; ``slo``: the judgement when an SLO was given;
    ``saturation``: reasons the level looks saturated (set by
    :func:`servedeck.bench.capacity.saturation_flags`).
    """

    model_config = ConfigDict(extra="forbid")
    index: int
    level: LoadLevel
    started_at: str
    duration_s: float
    requests: int
    completed: int
    failed: int
    errors: list[dict[str, Any]] = Field(default_factory=list)
    request_rps: float
    output_tok_s: float
    total_tok_s: float
    prompt_tokens: int
    output_tokens: int
    concurrency_mean: float | None = Field(None, description="mean requests in flight on the client side")
    percentiles: dict[str, dict[str, Percentile]]
    medians: dict[str, float | None]
    means: dict[str, float | None]
    server: LevelServer | None = None
    slo: LevelSlo | None = None
    saturation: list[str] = Field(default_factory=list)

    @property
    def x(self) -> float:
        """The level's load value (concurrency or requests/s) for curves."""
        return self.level.value


class LoadSummary(BaseModel):
    """``load.json``: the workload, the load profile and every level's summary."""

    model_config = ConfigDict(extra="forbid")
    workload: dict[str, Any]
    load: str
    slo: Slo | None = None
    served_model: str
    base_url: str
    nonce: str = Field(description="part of every prompt's tag: no prompt of this run is in another run's cache")
    started_at: str
    finished_at: str
    max_model_len: int | None = None
    confidence: float = CONFIDENCE
    levels: list[LevelResult]


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
