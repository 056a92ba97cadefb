"""The load benchmark (:mod:`servedeck.bench.loadclient` writes these; :mod:`servedeck.bench.quantiles`,
``slo``, ``load``, ``loadresult``, ``capacity`` and ``interop`` compute them): ``load.jsonl``, ``load.json``,
``capacity.json``, ``curve-STEM.json``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, ConfigDict, Field, field_validator, model_validator

from servedeck.runs.records.base import Record
from servedeck.runs.records.bench import ServerDelta

__all__ = ["Percentile", "Proportion", "SLO_METRICS", "SloState", "Slo", "LevelSlo", "LoadKind", "LoadLevel",
           "RequestRecord", "ServerSample", "LevelServer", "LevelResult", "LoadSummary", "SearchStep", "KvCheck",
           "CapacityResult", "ExternalLevel", "ExternalCurve", "CurveSummary"]


class Percentile(Record):
    """A percentile of per-request samples with its distribution-free interval
    (:func:`servedeck.bench.quantiles.percentile`); value and interval are None below the
    samples the interval needs."""

    q: float = Field(description="the quantile as a fraction (0.9 for p90)")
    value: float | None = Field(description="the point estimate (linear interpolation of order statistics)")
    low: float | None = Field(description="the interval's low end: an order statistic")
    high: float | None = Field(description="the interval's high end: an order statistic")
    n: int = Field(description="samples it was computed from")
    needed: int = Field(description="samples an interval at `confidence` needs")
    confidence: float = Field(0.95, description="the interval's confidence level")

    @property
    def reported(self) -> bool:
        """True when there were enough samples for the interval (the value is given)."""
        return self.value is not None


class Proportion(Record):
    """A share of requests (``k`` of ``n``) with its exact Clopper–Pearson interval."""

    k: int = Field(description="requests counted")
    n: int = Field(description="requests in all")
    value: float | None = Field(description="k / n (None when n is 0)")
    low: float | None = Field(description="the interval's low end")
    high: float | None = Field(description="the interval's high end")
    confidence: float = Field(0.95, description="the interval's confidence level")


#: Per-request metrics an SLO can limit (seconds).
SLO_METRICS = ("ttft_s", "tpot_s", "e2e_s")
SloState = Literal["met", "violated", "undecided", "no requests"]


class Slo(Record):
    """Per-request limits (seconds; None = not limited) and the share of requests, as a
    percentile, that must meet all of them (:mod:`servedeck.bench.slo`)."""

    ttft_s: float | None = Field(None, gt=0, allow_inf_nan=False, description="time to first token, s")
    tpot_s: float | None = Field(None, gt=0, allow_inf_nan=False,
                                 description="time per output token after the first, s")
    e2e_s: float | None = Field(None, gt=0, allow_inf_nan=False, description="end-to-end request latency, s")
    percentile: float = Field(90.0, gt=0, lt=100, validation_alias=AliasChoices("percentile", "p"),
                              description="share of requests (%) that must meet every limit "
                                          "(``p`` is read as the same field)")

    @field_validator("percentile")
    @classmethod
    def _a_percentile(cls, value: float) -> float:
        if value <= 1:  # 0.9 meant as 90 % would judge a level met when 1 % of its requests meet the limits
            if 1 < value * 100 < 100:
                raise ValueError(f"the percentile is in percent: {value:g} would mean {value:g} % of requests; "
                                 f"write {value * 100:g} for {value * 100:g} %")
            raise ValueError(f"the percentile is in percent, above 1 (90: 90 % of requests), got {value:g}")
        return value

    @model_validator(mode="after")
    def _some_limit(self) -> "Slo":
        if all(getattr(self, m) is None for m in SLO_METRICS):
            raise ValueError(f"an SLO needs at least one limit ({', '.join(SLO_METRICS)})")
        return self

    @property
    def q(self) -> float:
        """The percentile as a fraction (0.9)."""
        return self.percentile / 100.0

    def limits(self) -> dict[str, float]:
        """``{metric: limit}`` of the limited metrics."""
        return {m: getattr(self, m) for m in SLO_METRICS if getattr(self, m) is not None}

    def describe(self) -> str:
        """``p90: ttft_s ≤ 2, tpot_s ≤ 0.05``."""
        return f"p{self.percentile:g}: " + ", ".join(f"{m} \u2264 {v:g}" for m, v in self.limits().items())


class LevelSlo(Record):
    """The SLO judged over one load level's requests (:func:`servedeck.bench.slo.judge`)."""

    slo: Slo = Field(description="the objective")
    good: int = Field(description="requests that succeeded and met every limit")
    total: int = Field(description="requests sent")
    attainment: Proportion = Field(description="good / total with its Clopper–Pearson interval")
    state: SloState = Field(description="`met` (interval at or above the share), `violated` (below), `undecided`")
    goodput_rps: float | None = Field(description="good requests per second of the level's duration")
    percentiles: dict[str, Percentile] = Field(
        description="per limited metric, its percentile at the SLO's share over the successful requests")


LoadKind = Literal["concurrency", "constant", "poisson", "ramp"]


class LoadLevel(Record):
    """One load level: a concurrency (requests in flight) or a rate (requests/s); a ramp's
    ``value`` is its end rate (:mod:`servedeck.bench.load`)."""

    model_config = ConfigDict(extra="forbid", defer_build=True, frozen=True)
    kind: LoadKind = Field(description="`concurrency` (closed loop), `constant`, `poisson` or `ramp` (open loop)")
    value: float = Field(gt=0, allow_inf_nan=False, description="requests in flight, or requests/s")
    start_rps: float | None = Field(None, gt=0, allow_inf_nan=False, description="a ramp's start rate, requests/s")
    max_concurrency: int | None = Field(None, ge=1, description="cap on requests in flight of an open-loop level")

    @model_validator(mode="after")
    def _shape(self) -> "LoadLevel":
        if self.kind == "concurrency" and self.value != int(self.value):
            raise ValueError(f"a concurrency level is a whole number of requests, got {self.value:g}")
        if (self.kind == "ramp") != (self.start_rps is not None):
            raise ValueError("a ramp (and only a ramp) has start_rps")
        if self.kind == "concurrency" and self.max_concurrency is not None:
            raise ValueError("max_concurrency caps rate profiles; a concurrency level is its own cap")
        return self

    @property
    def unit(self) -> str:
        """``requests in flight`` or ``requests/s``."""
        return "requests in flight" if self.kind == "concurrency" else "requests/s"

    @property
    def label(self) -> str:
        """``c=4``, ``4 req/s``, ``poisson 4 req/s``, ``ramp 1→20 req/s`` (+ `` ≤16`` for a cap)."""
        cap = f" \u2264{self.max_concurrency}" if self.max_concurrency else ""
        if self.kind == "concurrency":
            return f"c={int(self.value)}"
        if self.kind == "constant":
            return f"{self.value:g} req/s{cap}"
        if self.kind == "poisson":
            return f"poisson {self.value:g} req/s{cap}"
        return f"ramp {self.start_rps:g}\u2192{self.value:g} req/s{cap}"

    def with_value(self, value: float) -> "LoadLevel":
        """The same kind at another value (a capacity search's next level)."""
        if self.kind == "concurrency":
            value = float(int(round(value)))
        return self.model_copy(update={"value": value})


class RequestRecord(Record):
    """``load.jsonl``: one request of a load level (vLLM's ``RequestFuncOutput`` pattern: a
    failure is recorded, not raised); times in seconds on the client's clock, taken when the
    bytes arrived."""

    level: int = Field(description="the level's index in `load.json` (-1: warm-up)")
    index: int = Field(description="the request's index within its level")
    tag: str = Field(description="the tag its prompt starts with")
    prefix_group: int | None = Field(None, description="shared-prefix workloads: the prefix it shares")
    prompt_tokens_requested: int = Field(description="the prompt length it was sized to (server count)")
    max_tokens: int = Field(description="output tokens asked for")
    scheduled_s: float | None = Field(None, description="open loop: when the profile wanted it sent, "
                                                        "from the level's start")
    sent_s: float = Field(description="when it was sent, from the level's start")
    queued_s: float = Field(0.0, description="wait in the client for a slot under `max_concurrency`")
    sent_unix_s: float = Field(description="wall-clock send time")
    success: bool = Field(description="a complete stream with output")
    error: str | None = Field(None, description="why not")
    http_status: int | None = Field(None, description="the answer's status")
    ttft_s: float | None = Field(None, description="send to the first chunk that carried output")
    tpot_s: float | None = Field(None, description="(last - first output chunk) / (output tokens - first "
                                                   "chunk's tokens); None with one output chunk")
    e2e_s: float | None = Field(None, description="send to the end of the stream")
    last_token_s: float | None = Field(None, description="send to the last output chunk (vLLM's `latency`)")
    itl_s: list[float] = Field(default_factory=list, description="gaps between consecutive output chunks")
    prompt_tokens: int | None = Field(None, description="`usage.prompt_tokens`")
    output_tokens: int = Field(0, description="`usage.completion_tokens`")
    first_chunk_tokens: int = Field(0, description="tokens of the first output chunk")
    chunks: int = Field(0, description="chunks that carried output")
    finish_reason: str | None = Field(None, description="the stream's finish reason")


class ServerSample(Record):
    """One sample of the server's gauges while a level ran (``t_s`` from its start)."""

    t_s: float = Field(description="seconds from the level's start")
    running: float | None = Field(None, description="`vllm:num_requests_running`")
    waiting: float | None = Field(None, description="`vllm:num_requests_waiting`")
    kv_cache_usage: float | None = Field(None, description="`vllm:kv_cache_usage_perc` (a fraction)")
    preemptions_total: float | None = Field(None, description="`vllm:num_preemptions_total`")


class LevelServer(Record):
    """What the server's ``/metrics`` said over one level."""

    delta: ServerDelta | None = Field(None, description="counters over the level (scraped before the first "
                                                        "request and after the last one was counted)")
    preemptions: int | None = Field(None, description="Δ`vllm:num_preemptions_total`")
    interval_s: float = Field(description="gauge sampling period")
    samples: list[ServerSample] = Field(default_factory=list, description="the gauges while the level ran")
    running_max: float | None = Field(None, description="most requests running")
    running_mean: float | None = Field(None, description="time-weighted mean of requests running")
    waiting_max: float | None = Field(None, description="most requests waiting")
    waiting_mean: float | None = Field(None, description="time-weighted mean of requests waiting")
    kv_cache_usage_max: float | None = Field(None, description="highest KV-cache usage (fraction)")


class LevelResult(Record):
    """One load level's summary (:func:`servedeck.bench.loadresult.summarise_level`)."""

    index: int = Field(description="the level's index (its records' `level`)")
    level: LoadLevel = Field(description="the load")
    started_at: str = Field(description="UTC, ISO 8601")
    duration_s: float = Field(description="first send to last end")
    requests: int = Field(description="requests sent")
    completed: int = Field(description="requests that succeeded")
    failed: int = Field(description="requests that did not")
    errors: list[dict[str, Any]] = Field(default_factory=list, description="`[{\"text\", \"count\"}]` of failures")
    request_rps: float = Field(description="successful requests per second")
    output_tok_s: float = Field(description="output tokens of successful requests per second")
    total_tok_s: float = Field(description="prompt + output tokens of successful requests per second")
    prompt_tokens: int = Field(description="prompt tokens of successful requests")
    output_tokens: int = Field(description="output tokens of successful requests")
    concurrency_mean: float | None = Field(None, description="mean requests in flight on the client side")
    percentiles: dict[str, dict[str, Percentile]] = Field(
        description="`[metric][pNN]` over the successful requests (`itl_s`: every gap), with intervals")
    medians: dict[str, float | None] = Field(description="plain medians per metric")
    means: dict[str, float | None] = Field(description="plain means per metric")
    server: LevelServer | None = Field(None, description="what the server's /metrics said")
    slo: LevelSlo | None = Field(None, description="the SLO judged, when one was given")
    saturation: list[str] = Field(default_factory=list, description="`queue`, `preemption`, `throughput flat`, "
                                                                    "`behind`, `late delivery`")
    delivery_lag_s: float | None = Field(
        None, description="mean client TTFT minus the server's own mean TTFT over the level "
                          "(`vllm:time_to_first_token_seconds`, stamped when vLLM's output processor handled the "
                          "first token): how long first tokens took from the server's output processing to the "
                          "client; null without the server's count. Filled from `means` and `server` when a "
                          "record lacks it (records written before the field)")

    @model_validator(mode="after")
    def _delivery_lag(self) -> "LevelResult":
        delta = self.server.delta if self.server is not None else None
        client = self.means.get("ttft_s")
        if self.delivery_lag_s is None and client is not None and delta is not None \
                and delta.ttft_s is not None and delta.ttft_count:
            self.delivery_lag_s = client - delta.ttft_s
        return self

    @property
    def x(self) -> float:
        """The level's load value (concurrency or requests/s) for curves."""
        return self.level.value


class LoadSummary(Record):
    """``load.json``: a load benchmark's workload, load profile, SLO and every level's summary."""

    workload: dict[str, Any] = Field(description="the workload (`servedeck.bench.workload`), as run")
    load: str = Field(description="the load profile's text form (`concurrency:1,2,4,8`)")
    slo: Slo | None = Field(None, description="the SLO judged per level")
    served_model: str = Field(description="the model name requests carried")
    base_url: str = Field(description="the server")
    nonce: str = Field(description="part of every prompt's tag: no prompt of this run is in another run's cache")
    started_at: str = Field(description="UTC, ISO 8601")
    finished_at: str = Field(description="UTC, ISO 8601")
    max_model_len: int | None = Field(None, description="the server's, from /v1/models")
    confidence: float = Field(0.95, description="of every interval")
    levels: list[LevelResult] = Field(description="in the order run")


class SearchStep(Record):
    """One level a capacity search ran."""

    value: float = Field(description="the load")
    passed: bool = Field(description="its share of good requests reached the SLO's (point estimate)")
    state: str = Field(description="the SLO state its samples carry")
    attainment: float | None = Field(description="share of good requests")
    attainment_low: float | None = Field(description="its interval's low end")
    attainment_high: float | None = Field(description="its interval's high end")
    phase: Literal["start", "grow", "shrink", "bisect", "again"] = Field(
        description="why it ran (``again``: the level before it was delivered late)")
    late: bool = Field(False, description="its streams reached the client late "
                                          "(servedeck.bench.loadresult.late_delivery): a first such run of a "
                                          "level did not steer the search and the level ran again")


class KvCheck(Record):
    """The run's KV prediction against the concurrency at which the server queued or preempted."""

    request_tokens: int = Field(description="prompt + output tokens of one request")
    block_size: int = Field(description="tokens per KV block")
    pool_tokens: int = Field(description="the predicted pool")
    predicted_concurrency: int = Field(description="requests the predicted pool holds at once")
    predicted_concurrency_low: int | None = Field(None, description="at the prediction's low end")
    predicted_concurrency_high: int | None = Field(None, description="at its high end")
    observed_onset: float | None = Field(None, description="lowest concurrency level that queued or preempted")
    highest_clean: float | None = Field(None, description="highest concurrency level without queue or preemption")
    agrees: bool | None = Field(None, description="None when no level ran near the prediction")
    reading: str = Field(description="one sentence")


class CapacityResult(Record):
    """``capacity.json``: a capacity search's answer and what it measured
    (:mod:`servedeck.bench.capacity`)."""

    kind: str = Field(description="the load varied")
    unit: str = Field(description="`requests in flight` or `requests/s`")
    slo: Slo = Field(description="the objective")
    capacity: float | None = Field(description="the geometric midpoint of the final bracket")
    lo: float | None = Field(description="the highest level that met the SLO")
    hi: float | None = Field(description="the lowest level that did not")
    lo_state: str | None = Field(None, description="the SLO state of `lo` its samples carry")
    hi_state: str | None = Field(None, description="the SLO state of `hi`")
    precise: bool = Field(description="the bracket reached ±precision")
    precision: float = Field(description="as asked (relative)")
    levels_run: int = Field(description="levels run")
    max_levels: int = Field(description="the budget")
    steps: list[SearchStep] = Field(description="every level in the order run")
    saturation: float | None = Field(None, description="the lowest level flagged saturated")
    saturation_flags: list[str] = Field(default_factory=list, description="its flags")
    knee: float | None = Field(None, description="the Kneedle knee of output throughput against load")
    kv: KvCheck | None = Field(None, description="the KV check (fixed-size workloads with a prediction)")
    reading: str = Field("", description="one sentence")


class ExternalLevel(Record):
    """One benchmark of an external load curve on servedeck's names (seconds, requests/s)."""

    label: str = Field(description="`c=4`, `4 req/s`, ...")
    kind: str = Field(description="`concurrency`, `constant`, `poisson`, `throughput`, ...")
    value: float | None = Field(description="the concurrency or rate, when the tool says")
    requests: int | None = Field(None, description="requests sent")
    completed: int | None = Field(None, description="requests that succeeded")
    failed: int | None = Field(None, description="requests that failed")
    request_rps: float | None = Field(None, description="successful requests per second")
    output_tok_s: float | None = Field(None, description="output tokens per second")
    goodput_rps: float | None = Field(None, description="the tool's goodput, when it measured one")
    ttft_s: dict[str, float | None] = Field(default_factory=dict, description="`median`, `p99`")
    tpot_s: dict[str, float | None] = Field(default_factory=dict, description="`median`, `p99`")
    e2e_s: dict[str, float | None] = Field(default_factory=dict, description="`median`, `p99`")
    parameters: dict[str, Any] = Field(default_factory=dict, description="the tool's own settings of this benchmark")


class ExternalCurve(Record):
    """An external load curve: the levels another tool measured against one server
    (:func:`servedeck.bench.interop.import_curve`)."""

    source: Literal["vllm-bench-sweep", "vllm-bench-serve", "guidellm"] = Field(description="the tool")
    path: str = Field(description="the file or directory as given")
    server: dict[str, Any] = Field(default_factory=dict, description="a sweep's server settings of this curve")
    levels: list[ExternalLevel] = Field(description="by kind and load")
    notes: list[str] = Field(default_factory=list, description="sentences for the user")


class CurveSummary(ExternalCurve):
    """``curve-STEM.json``: an imported external load curve (:class:`ExternalCurve`) with the
    sha256 of every file read (stored under ``external/``)."""

    sha256: dict[str, str] = Field(description="`{path under external/: sha256}`")
