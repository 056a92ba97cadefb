"""The benchmark (:mod:`servedeck.bench.client` writes these): ``workload.json``, ``bench.jsonl``,
``bench.json``."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field

from servedeck.runs.records.base import Record

__all__ = ["CHAT_ENDPOINT", "COMPLETIONS_ENDPOINT", "TagPrefix", "Workload", "ServerDelta", "Sample", "MetricStats",
           "PhaseServer", "BenchSummary"]


CHAT_ENDPOINT: Final = "/v1/chat/completions"
COMPLETIONS_ENDPOINT: Final = "/v1/completions"


def _tag_prefix(v: str) -> str:
    if any(c in v for c in "[] \n"):
        raise ValueError("tag_prefix must not contain brackets, spaces or newlines")
    return v


#: The word every prompt's tag starts with (``[<tag_prefix> …]``): no brackets, spaces or newlines
#: (the single-stream and the load workloads).
TagPrefix = Annotated[str, Field(min_length=1), AfterValidator(_tag_prefix)]


class Workload(Record):
    """``workload.json``: the benchmark workload definition, saved with every benchmarked run.

    Fields carry their units in their names. ``prompt_tokens`` is the exact prompt length as
    the server counts it for the request that is sent (chat template included for the chat
    endpoint). Defaults fit the seed's long-context single-stream use on the B70 card; the
    CPU tests pass small values.
    """

    prompt_tokens: int = Field(32768, ge=16, description="exact prompt length in tokens (server count)")
    max_tokens: int = Field(256, ge=2, description="output tokens per request (exact with ignore_eos)")
    repetitions: int = Field(3, ge=1, description="requests per measured phase (cold and warm each)")
    warmup_requests: int = Field(1, ge=0, description="throwaway requests before the measured phases")
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature")
    seed: int = Field(0, description="sampling seed")
    endpoint: Literal["/v1/chat/completions", "/v1/completions"] = Field(CHAT_ENDPOINT,
                                                                         description="the API the requests use")
    ignore_eos: bool = Field(True, description="generate exactly max_tokens")
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict,
                                                 description="passed with chat requests (and their /tokenize)")
    tag_prefix: TagPrefix = Field("req", description="prompts start with '[<tag_prefix> <uuid4 hex>] '")
    warm_order: Literal["paired", "after_cold"] = Field(
        "paired", description="`paired`: warm i right after cold i; `after_cold`: all cold requests first")
    request_timeout_s: float = Field(1800.0, gt=0, description="timeout of one request")
    metrics_settle_timeout_s: float = Field(5.0, gt=0, description="wait for /metrics to count a finished request")


class ServerDelta(Record):
    """Server-side ``/metrics`` deltas around one request (or summed over a phase); counters
    filtered by the ``model_name`` label and summed over engines (vLLM
    ``vllm/v1/metrics/loggers.py``, ``vllm/v1/spec_decode/metrics.py``, 0.10.2-0.33)."""

    ttft_s: float | None = Field(None, description="Δsum/Δcount of `vllm:time_to_first_token_seconds`")
    ttft_count: int = Field(0, description="Δcount of `vllm:time_to_first_token_seconds`")
    spec_accept_len: float | None = Field(None, description="1 + Δaccepted / Δdrafts (speculative decoding)")
    spec_per_position: list[float] = Field(
        default_factory=list,
        description="Δ`vllm:spec_decode_num_accepted_tokens_per_pos_total` per position / Δdrafts")
    spec_drafts: int = Field(0, description="Δ`vllm:spec_decode_num_drafts_total`")
    spec_draft_tokens: int = Field(0, description="Δ`vllm:spec_decode_num_draft_tokens_total`")
    spec_accepted_tokens: int = Field(0, description="Δ`vllm:spec_decode_num_accepted_tokens_total`")
    prefix_cache_hits: int = Field(0, description="Δ`vllm:prefix_cache_hits_total`, tokens")
    prefix_cache_queries: int = Field(0, description="Δ`vllm:prefix_cache_queries_total`, tokens")
    prompt_tokens_cached: int | None = Field(None, description="Δ`vllm:prompt_tokens_cached_total` (vLLM 0.24+)")
    requests_finished: int = Field(0, description="Δ`vllm:request_success_total`")
    prompt_tokens: int = Field(0, description="Δ`vllm:prompt_tokens_total`")
    generation_tokens: int = Field(0, description="Δ`vllm:generation_tokens_total`")
    prefill_s: float | None = Field(
        None, description="Δ`vllm:request_prefill_time_seconds_sum` (null when no request finished)")
    decode_s: float | None = Field(
        None, description="Δ`vllm:request_decode_time_seconds_sum` (null when no request finished)")
    decode_tok_s: float | None = Field(
        None, description="(Δgeneration tokens - finished requests) / decode_s: engine-side decode rate")


class Sample(Record):
    """One request's measurements, a line of ``bench.jsonl``; times in seconds. ``flags`` holds
    ``"burst"`` when the whole decode reached the client in one burst (``decode_tok_s`` is then
    null)."""

    phase: Literal["warmup", "cold", "warm"] = Field(
        description="`warmup` (excluded from statistics), `cold` (a fresh prompt), `warm` (a cold prompt again)")
    rep: int = Field(description="repetition number within the phase, from 0")
    tag: str = Field(description="the prompt's unique start, `[<tag_prefix> <uuid4 hex>]`")
    prompt_tokens: int = Field(description="`usage.prompt_tokens` of the response")
    prompt_tokens_requested: int = Field(description="the workload's prompt length")
    output_tokens: int = Field(description="`usage.completion_tokens`")
    first_chunk_tokens: int = Field(description="output tokens of the first chunk that carried output")
    ttft_s: float = Field(description="first chunk with output - send time")
    prefill_tok_s: float = Field(description="prompt tokens / ttft_s")
    decode_tok_s: float | None = Field(
        description="(output tokens - first chunk's tokens) / (last - first chunk time); null for a burst")
    decode_s: float = Field(description="last - first chunk time")
    e2e_s: float = Field(description="end of stream - send time")
    finish_reason: str | None = Field(description="as the server gave it (`length` with ignore_eos)")
    chunks: int = Field(description="chunks that carried output")
    server: ServerDelta = Field(description="the server's `/metrics` around this one request")
    flags: list[str] = Field(default_factory=list, description="`burst`: the whole decode arrived at once")

    def value(self, metric: str) -> float | None:
        """``metric`` of this sample: a field of its own, else of ``server`` (``spec_accept_len``
        always from ``server``); None when neither has it."""
        own = None if metric == "spec_accept_len" else getattr(self, metric, None)
        if own is None:
            own = getattr(self.server, metric, None)
        return own if isinstance(own, (int, float)) and not isinstance(own, bool) else None


class MetricStats(Record):
    """One metric over one phase's samples (None values left out)."""

    median: float | None = Field(None, description="median of `samples`")
    min: float | None = Field(None, description="smallest sample")
    max: float | None = Field(None, description="largest sample")
    n: int = Field(0, description="number of samples")
    samples: list[float] = Field(default_factory=list, description="the values in send order")


class PhaseServer(Record):
    """``/metrics`` deltas summed over one phase."""

    spec_accept_len: float | None = Field(None, description="1 + accepted / drafts over the phase")
    spec_per_position: list[float] = Field(default_factory=list, description="accepted per position / drafts")
    spec_drafts: int | None = Field(None, description="drafts over the phase")
    spec_accepted_tokens: int | None = Field(None, description="accepted draft tokens")
    spec_draft_tokens: int | None = Field(None, description="draft tokens proposed")
    prefix_cache_hits: int | None = Field(None, description="prefix-cache hits, tokens")
    prompt_tokens_cached: int | None = Field(None, description="prompt tokens served from the cache")
    ttft_s_server_mean: float | None = Field(None, description="mean server-side TTFT of the phase's requests")


class BenchSummary(Record):
    """``bench.json``: the benchmark's summary per phase and metric
    (``servedeck.bench.client.BenchResult.summary()``)."""

    workload: Workload = Field(description="the workload that was run")
    served_model: str | None = Field(None, description="the model name the requests named")
    base_url: str | None = Field(None, description="`http://host:port` of the server")
    started_at: str | None = Field(None, description="UTC, ISO 8601")
    finished_at: str | None = Field(None, description="UTC, ISO 8601")
    phases: dict[Literal["cold", "warm"], dict[str, MetricStats]] = Field(
        default_factory=dict, description="`phases[phase][metric]`: median, min, max, n, samples")
    warmup: Sample | None = Field(None, description="the first warm-up sample")
    warmup_samples: list[Sample] = Field(default_factory=list, description="every warm-up sample")
    server: dict[Literal["cold", "warm"], PhaseServer] = Field(
        default_factory=dict, description="`/metrics` deltas summed per phase")
