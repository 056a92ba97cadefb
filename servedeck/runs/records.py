"""What every run file holds: one pydantic model per file (``extra="forbid"``).

The run store (:mod:`servedeck.runs.store`) names each file and the model of its content
(:class:`servedeck.runs.store.RunFile`); it validates every write against that model and returns
every read as that model, so a writer that passes an unknown field or a wrong type gets an error
at once instead of a record that drifts from ``docs/run-record.md`` (generated from these models
by :mod:`servedeck.runs.doc`). Listings that need a few fields of many runs (``runs``, the
check's measured start-ups) read the listing cache and never import this module.

Adding a run file: its model here, its :class:`~servedeck.runs.store.RunFile` line in the store
(and in ``RUN_FILES``), its writer calling ``RunRecord.write``; ``show`` displays it and the
document lists it without more code. Adding a field: the field here (with a ``description``)
and its writer. A field of ``facts.json`` that an A/B comparison must see is marked
``compared("name")``: :func:`compared_paths` is what :mod:`servedeck.ab.compare` compares.

Models of files that other stages produce live here too (the benchmark's workload, samples and
summary; an imported external result), because the record is the lower layer: the benchmark
imports its models from here, never the other way round. ``startup.json`` and
``args_verification.json`` hold results of :mod:`servedeck.vllm` (:class:`StartupFacts`,
:class:`ArgCheck`), which sits below the run store.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, RootModel, field_validator,
                      model_validator)

from servedeck import __version__
from servedeck.vllm.startup_facts import StartupFacts
from servedeck.vllm.verify import ArgCheck

__all__ = ["Record", "RunMeta", "RecordedImage", "RollbackResult", "ArgsVerificationSummary", "Outcome",
           "FailurePhase", "ProfileSnapshot", "EffectiveSettings", "ArgvRecord", "ProfileChange", "ProfileDiff",
           "FactsRecord", "HostFactsRecord", "GpuDevice", "ImageFactsRecord", "StartupFacts", "ArgCheck",
           "ArgsVerification", "KvRecord", "KvMeasured", "KvError", "Workload", "ServerDelta", "Sample",
           "MetricStats", "PhaseServer", "BenchSummary", "RequestCounts", "BenchEntry", "ExternalBench",
           "ExternalSummary",
           "compared", "compared_paths", "CHAT_ENDPOINT", "COMPLETIONS_ENDPOINT", "SequentialDesign", "Look",
           "SequentialRecord", "TagPrefix",
           "Percentile", "Proportion", "SLO_METRICS", "SloState", "Slo", "LevelSlo", "LoadKind", "LoadLevel",
           "RequestRecord", "ServerSample", "LevelServer", "LevelResult", "LoadSummary", "SearchStep", "KvCheck",
           "CapacityResult", "ExternalLevel", "ExternalCurve", "CurveSummary", "QualitySettings", "LikelihoodItem",
           "Likelihood", "GenerationItem", "FeatureCheck", "NeedleItem", "QualityResult", "LmEvalSettings",
           "TaskMetric", "LmEvalResult", "WindowFigures", "PhaseFigures", "TelemetryRecord", "Ceilings", "ModelCost",
           "RequestRoofline", "PhaseRoofline", "Roofline", "MeasuredCeilings"]


class Record(BaseModel):
    """Base of the run-file models: unknown fields are refused; the validation schema is built
    on first use (a command that reads one file does not pay for the others)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


# --------------------------------------------------------------------------------------------
# run.json
# --------------------------------------------------------------------------------------------

Outcome = Literal["started", "ready", "failed", "rolled-back", "interrupted", "abandoned"]
"""``started`` while the deploy runs; every ending writes one of the others. ``abandoned``: the
deploying client died (found by a later deploy, rollback or status of the same host)."""

FailurePhase = Literal["render", "check", "preflight", "lock", "pull", "upload", "start",
                       "readiness", "timeout", "crash", "interrupt", "rollback", "internal"]


class RecordedImage(Record):
    """The image a run deployed."""

    reference: str | None = Field(None, description="the digest-pinned reference as deployed (None for a "
                                                    "rollback run: the host history keeps the digest only)")
    digest: str | None = Field(None, description="`sha256:…` of the reference")


class RollbackResult(Record):
    """What the automatic rollback after a failed deploy achieved."""

    revision: int | None = Field(None, description="the host history revision restored (a known-good one)")
    ready: bool = Field(description="the previous deployment serves again")
    reason: str | None = Field(None, description="why it did not, when it did not")


class ArgsVerificationSummary(Record):
    """Summary of ``args_verification.json``."""

    confirmed: list[str] = Field(default_factory=list, description="settings the server confirmed")
    differs: list[str] = Field(default_factory=list, description="`setting: differs (expected X, got Y)`")


class RunMeta(Record):
    """``run.json``: what one run is. Written by ``RunRecord.save_meta`` only.

    Every field is optional except the identity fields set by ``create_run``; fields are filled
    in as the deploy proceeds (``compose_sha256`` after the pull, ``ready_at`` when it serves,
    ``benched_at`` after a benchmark). Fields that were never set are left out of the file.
    """

    run_id: str = Field(description="the directory name, `<sequence>-<profile>-<host>`")
    sequence: int = Field(description="counter over the runs directory, from 1")
    kind: Literal["deploy", "rollback"] = Field(
        "deploy", description="`rollback`: the run restores an earlier deployment (`restores`)")
    profile: str = Field(description="profile name")
    parent_profile: str | None = Field(None, description="the profile's `extends`")
    host: str = Field(description="inventory host name")
    started_at: str = Field(description="UTC, ISO 8601 with `Z`")
    ready_at: str | None = Field(None, description="when the server answered /health and /v1/models")
    ended_at: str | None = Field(None, description="when a run that did not become ready ended")
    outcome: Outcome = Field("started", description="how the run ended; `started` while the deploy runs")
    failure: str | None = Field(None, description="why the run did not become ready (one sentence)")
    failure_phase: FailurePhase | None = Field(
        None, description="the deploy phase that failed")
    rollback: RollbackResult | None = Field(None, description="the automatic rollback after a failure")
    restores: str | None = Field(None, description="rollback runs: the run id whose deployment was restored "
                                                   "(None when the restored compose file matches no recorded run)")
    rollback_to: int | None = Field(None, description="rollback runs: the host history revision restored")
    revision: int | None = Field(None, description="this deployment's revision in the host's history")
    diagnosis: str | None = Field(
        None, description="readiness diagnosis of a failure: `unreachable` (host), `gone`, `exited`, "
                          "`restarting`, `not-ready`, `api-key` (the server wants a key)")
    wait_s: float | None = Field(None, description="seconds the readiness wait took")
    host_state_written: bool | None = Field(
        None, description="False when the final history line could not be written on the host "
                          "(the next command of that host completes it)")
    power: dict[str, Any] | None = Field(
        None, description="the card power limit this deploy set: `{\"interface\", \"device\", "
                          "\"previous_w\", \"new_w\", ...}` (servedeck.host.power)")
    power_restored: dict[str, Any] | None = Field(
        None, description="the limit put back by a rollback of this run (same shape as `power`)")
    redacted: list[str] = Field(default_factory=list,
                                description="names of the secrets replaced by `***` in this record's files")
    servedeck_version: str = Field(__version__, description="servedeck that wrote the record")
    profiles_git_commit: str | None = Field(
        None, description="git commit of profiles/ (`+dirty` when it had uncommitted changes)")
    compose_sha256: str | None = Field(None, description="sha256 of the compose bytes deployed")
    compose_redacted: bool | None = Field(None, description="the stored compose file had a secret removed")
    image: RecordedImage | None = Field(None, description="`{\"reference\", \"digest\"}`")
    image_override: str | None = Field(None, description="`--image` given at deploy (replaces the profile's)")
    image_source: str | None = Field(
        None, description="where the image reference came from when not the profile file "
                          "(`local-images` for a locally built image alias)")
    served_model_name: str | None = Field(None, description="the name requests use")
    port: int | None = Field(None, description="published API port on the host")
    timings_s: dict[str, float | None] = Field(
        default_factory=dict,
        description="seconds: `pull_s`, `container_start_to_ready_s`, `up_to_ready_s`, "
                    "`deploy_total_s`, `overhead_s`")
    args_verification: ArgsVerificationSummary | None = Field(None, description="summary of args_verification.json")
    benched_at: str | None = Field(None, description="when `invoke bench` finished (the run holds bench.jsonl)")
    load_benched_at: str | None = Field(None, description="when `invoke bench --load/--capacity` finished "
                                                          "(the run holds load.json)")
    experiment: str | None = Field(None, description="interleaved A/B: the experiment id this run belongs to")

    @property
    def served(self) -> bool:
        """True when the run's server became ready."""
        return self.outcome == "ready"


# --------------------------------------------------------------------------------------------
# What the deploy plan computed
# --------------------------------------------------------------------------------------------

class ProfileSnapshot(RootModel[dict[str, Any]]):
    """``profile.resolved.json``: the resolved profile as deployed
    (``servedeck.model.profile.Profile.model_dump(mode="json")``). Kept as the mapping it was
    written as, so that a record stays readable when the profile schema moves on."""

    model_config = ConfigDict(defer_build=True)


class EffectiveSettings(RootModel[dict[str, Any]]):
    """``effective.json``: the settings vLLM runs with, image defaults plus the profile's
    overrides, keyed by vLLM dest names (``max_num_batched_tokens``, ``speculative_config``,
    ...; the rendered service's effective settings as its launcher reads the command,
    ``servedeck.compose.service.Service.settings``)."""

    model_config = ConfigDict(defer_build=True)


class ArgvRecord(Record):
    """``argv.json``: the server's command as the container starts it."""

    command: list[str] = Field(description="the container command, token by token (the launcher's argv)")
    entrypoint: list[str] = Field(default_factory=list, description="the image's entrypoint, token by token")


class ProfileChange(Record):
    """One field the profile changes against its parent."""

    path: str = Field(description="dotted profile path, `engine.max_num_batched_tokens`")
    parent: Any = Field(None, description="the parent's value")
    value: Any = Field(None, description="this profile's value")


class ProfileDiff(RootModel[list[ProfileChange]]):
    """``profile.diff.json``: the fields the profile changes against its parent, in profile order
    (empty when it has no parent)."""

    model_config = ConfigDict(defer_build=True)


def compared(name: str) -> dict[str, Any]:
    """``json_schema_extra`` of a field that the A/B comparison compares under ``name``."""
    return {"compared": name}


class GpuDevice(Record):
    """A GPU device node on the host."""

    path: str = Field(description="`/dev/dri/renderD128`")
    gid: int | str | None = Field(None, description="its group id")


class HostFactsRecord(Record):
    """The host as the preflight found it."""

    name: str | None = Field(None, description="inventory host name", json_schema_extra=compared("host.name"))
    hostname: str | None = Field(None, description="the host's own name (`hostname`)")
    kernel: str | None = Field(None, description="`uname -r`", json_schema_extra=compared("host.kernel"))
    docker_version: str | None = Field(None, description="Docker Engine version",
                                       json_schema_extra=compared("host.docker_version"))
    compose_version: str | None = Field(None, description="Docker Compose version",
                                        json_schema_extra=compared("host.compose_version"))
    gpu_devices: list[GpuDevice] = Field(default_factory=list, description="`/dev/dri` nodes")
    gpu_power_cap_w: float | None = Field(
        None, description="the xe card's sustained limit `power1_max` in W, as preflight found it: before "
                          "this deploy's own cap", json_schema_extra=compared("host.gpu_power_cap_w"))
    disk_free_gib: float | None = Field(None, description="free space under the host's workdir")


class ImageFactsRecord(Record):
    """The image as the host has it."""

    reference: str | None = Field(None, description="the digest-pinned reference")
    digest: str | None = Field(None, description="`sha256:…`", json_schema_extra=compared("image"))
    created: str | None = Field(None, description="the image's creation time")
    entrypoint: list[str] = Field(default_factory=list, description="the image's entrypoint")
    vllm_version: str | None = Field(None, description="vLLM in the image",
                                     json_schema_extra=compared("vllm_version"))
    labels: dict[str, str] = Field(default_factory=dict, description="the image's labels")


class FactsRecord(Record):
    """``facts.json``: host and image facts gathered during the preflight. Fields marked
    *compared* are what an A/B comparison sees of them (``servedeck.ab.compare``)."""

    host: HostFactsRecord = Field(default_factory=HostFactsRecord, description="the host")
    image: ImageFactsRecord = Field(default_factory=ImageFactsRecord, description="the image")


def compared_paths(model: type[BaseModel] = FactsRecord, prefix: tuple[str, ...] = ()
                   ) -> dict[tuple[str, ...], str]:
    """``{field path: comparison name}`` of the fields marked :func:`compared` in ``model`` and
    the models of its fields (``{("host", "kernel"): "host.kernel", ("image", "digest"):
    "image", ...}`` for :class:`FactsRecord`)."""
    out: dict[tuple[str, ...], str] = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if "compared" in extra:
            out[(*prefix, name)] = str(extra["compared"])
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and not issubclass(sub, RootModel):
            out.update(compared_paths(sub, (*prefix, name)))
    return out


# --------------------------------------------------------------------------------------------
# What the server said
# --------------------------------------------------------------------------------------------

class ArgsVerification(RootModel[list[ArgCheck]]):
    """``args_verification.json``: one ``servedeck.vllm.verify.ArgCheck`` per setting the profile
    or the image fixes: ``{"setting", "expected", "reported", "status", "source"}``, status
    `confirmed` | `differs` | `default` | `not reported`."""

    model_config = ConfigDict(defer_build=True)


class KvMeasured(Record):
    """What the server logged of its KV pool (``startup.json``)."""

    kv_cache_tokens: int | None = Field(None, description="the pool in tokens")
    max_concurrency: float | None = Field(None, description="requests of max_model_len tokens the pool holds")
    available_kv_cache_gib: float | None = Field(None, description="memory of the pool, GiB")


class KvError(Record):
    """Prediction against measurement, percent."""

    kv_cache_tokens: float | None = Field(None, description="(predicted / logged - 1) x 100")
    max_concurrency: float | None = Field(None, description="(predicted / logged - 1) x 100")


class KvRecord(Record):
    """``kv.json``: the KV-capacity prediction made before the deploy beside what the server
    logged (``servedeck.vllm.kv.compare_with_measured``)."""

    prediction: dict[str, Any] | None = Field(
        None, description="`servedeck.vllm.kv.KvPrediction.to_dict()`: `pool_tokens` (`_low`, `_high`), "
                          "`max_concurrency` (`_low`, `_high`), `available_kv_gib`, `max_model_len`, ...; "
                          "null when nothing could be predicted")
    measured: KvMeasured = Field(default_factory=KvMeasured, description="what the server logged")
    error_pct: KvError = Field(default_factory=KvError, description="the prediction's error")
    within_interval: bool | None = Field(None, description="the logged pool lies in the predicted interval")


# --------------------------------------------------------------------------------------------
# The benchmark (servedeck.bench.client writes these)
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Imported results of other tools (servedeck.bench.external maps them)
# --------------------------------------------------------------------------------------------

class RequestCounts(Record):
    """How many requests an external benchmark sent and how they ended (``None``: the file
    does not say). ``total`` = ``completed`` + ``failed`` (+ ``incomplete``)."""

    total: int | None = Field(None, description="requests sent")
    completed: int | None = Field(None, description="requests that succeeded")
    failed: int | None = Field(None, description="requests that failed")
    incomplete: int | None = Field(None, description="requests cut off (guidellm)")


class BenchEntry(Record):
    """One benchmark of a result file (a guidellm report's ``benchmarks[i]``, a line of a
    ``vllm bench serve --append-result`` file), :func:`servedeck.bench.external.list_benchmarks`."""

    index: int = Field(description="1-based position in the file")
    label: str = Field(description="guidellm's own name (`synchronous`, `concurrent@4`, `throughput@512`, "
                                   "`constant@1.55`, `poisson@2.00`); for vLLM `concurrency@8`, `rate@2.00` "
                                   "(`rate@2.00,concurrency@8` with both), `rate@inf`")
    strategy: str = Field(description="the load's kind: guidellm's strategy type, or `concurrency` / `rate` / "
                                      "`burst` for vLLM")
    rate_rps: float | None = Field(None, description="requests per second asked for (None: unlimited)")
    concurrency: int | None = Field(None, description="concurrent requests asked for (streams, max_concurrency)")
    name: str | None = Field(None, description="the tool's own label for the run (`vllm bench serve --label`)")
    requests: int | None = Field(None, description="requests the benchmark sent")

    def describe(self) -> str:
        """``#3 constant@1.55 (1.55 req/s, 186 requests)``."""
        parts = []
        if self.rate_rps is not None:
            parts.append(f"{self.rate_rps:g} req/s")
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} concurrent")
        if self.requests is not None:
            parts.append(f"{self.requests} requests")
        return f"#{self.index} {self.label}" + (f" ({', '.join(parts)})" if parts else "")


class ExternalBench(Record):
    """An external benchmark result mapped onto servedeck's metric names.

    ``metrics[name]`` = ``{"median", "mean", "min", "max", "n"}`` (missing statistics None;
    ``n`` = successful requests) for ``ttft_s``, ``decode_tok_s``, ``e2e_s``,
    ``prefill_tok_s``, ``output_tokens``, ``prompt_tokens`` where the source has them;
    ``server`` holds ``spec_accept_len``, ``spec_per_position``, ``spec_drafts`` when reported.
    ``requests``: :class:`RequestCounts`; ``partial``: some request did not succeed;
    ``failure_reasons``: ``[{"text", "count"}]``, the distinct error messages of failed requests
    (most frequent first) where the file keeps them; ``notes``: sentences for the user.
    """

    source: Literal["vllm-bench-serve", "guidellm"] = Field(description="the tool that wrote the file")
    path: str = Field(description="the file as given")
    metrics: dict[str, dict[str, float | int | None]] = Field(
        description="`metrics[name]`: `median`, `mean`, `min`, `max`, `n` over the successful requests")
    server: dict[str, Any] = Field(default_factory=dict,
                                   description="`spec_accept_len`, `spec_per_position`, `spec_drafts` when reported")
    raw_keys: list[str] = Field(default_factory=list, description="the file's own top-level keys")
    requests: RequestCounts = Field(default_factory=RequestCounts, description="how the requests ended")
    partial: bool = Field(False, description="some request did not succeed")
    failure_reasons: list[dict[str, Any]] = Field(
        default_factory=list, description="`[{\"text\", \"count\"}]`, most frequent first")
    notes: list[str] = Field(default_factory=list, description="sentences for the user")
    benchmark: BenchEntry | None = Field(None, description="which benchmark of the file this is (a file may "
                                                           "hold several: a guidellm sweep, an --append-result file)")
    benchmarks_in_file: int = Field(1, description="how many benchmarks the file holds")


class ExternalSummary(ExternalBench):
    """``external-STEM.json``: an imported external result's metrics
    (:class:`ExternalBench`) with the raw file's ``sha256``."""

    sha256: str = Field(description="sha256 of the raw file stored as `external/NAME`")



# --------------------------------------------------------------------------------------------
# sequential.json (servedeck.ab.sequential)
# --------------------------------------------------------------------------------------------

class SequentialDesign(Record):
    """How a sequentially sampled experiment samples and when it stops (the decision rules:
    ``servedeck.ab.sequential``)."""

    alpha: float = Field(0.05, gt=0, lt=1, description="family-wise error rate of difference claims over all "
                                                       "looks (and, separately, of equivalence claims)")
    margin: float = Field(0.03, ge=0, lt=1, description="practical-equivalence margin, relative")
    spending: Literal["pocock", "obrien-fleming"] = Field(
        "pocock", description="the Lan-DeMets alpha-spending function over the information fraction")
    max_requests_a: int = Field(ge=1, description="arm A's sample budget, requests per phase (a recorded "
                                                  "baseline: the requests it has)")
    max_requests_b: int = Field(ge=1, description="arm B's sample budget, requests per phase")
    max_seconds: float | None = Field(None, gt=0, description="the time budget, or null")

    def fraction(self, n_a: int, n_b: int) -> float:
        """The information fraction of a look with ``n_a``/``n_b`` requests per phase:
        ``I(n_a, n_b) / I(max_a, max_b)`` with ``I = n_a·n_b/(n_a+n_b)``, at most 1."""
        def info(x: int, y: int) -> float:
            return x * y / (x + y) if x > 0 and y > 0 else 0.0
        full = info(self.max_requests_a, self.max_requests_b)
        return min(1.0, info(n_a, n_b) / full) if full else 1.0


class Look(Record):
    """One look of a sequential experiment: how many requests per phase each arm had, the levels
    it was held to, and what it decided."""

    requests_a: int = Field(description="arm A's requests per phase at this look (the first ones, in run "
                                        "and file order)")
    requests_b: int = Field(description="arm B's requests per phase at this look")
    final: bool = Field(False, description="the last look the budget allowed (it takes the alpha left)")
    fraction: float | None = Field(None, description="information fraction")
    level_difference: float | None = Field(None, description="family-wise level of difference claims at this look")
    level_equivalence: float | None = Field(None, description="family-wise level of equivalence claims")
    spent_difference: float | None = Field(None, description="what this look counted against the difference "
                                                             "budget (0 when its sample sizes could reject nothing)")
    spent_equivalence: float | None = Field(None, description="the same for equivalence claims")
    decided: dict[str, str] = Field(default_factory=dict, description="`phase metric` -> the verdict this look "
                                                                      "reached")


class SequentialRecord(Record):
    """``sequential.json``: the design of a sequentially sampled experiment, the runs of each arm,
    the looks taken and why sampling stopped; written into every run of the experiment."""

    design: SequentialDesign = Field(description="alpha, margin, spending, budgets")
    runs_a: list[str] = Field(description="run ids of arm A, in order")
    runs_b: list[str] = Field(description="run ids of arm B, in order")
    looks: list[Look] = Field(default_factory=list, description="the looks taken, in order")
    stopped: Literal["decided", "sample budget", "time budget", "interrupted"] | None = Field(
        None, description="why sampling stopped (null: still sampling)")
    started_at: str | None = Field(None, description="UTC, ISO 8601")
    updated_at: str | None = Field(None, description="UTC, ISO 8601, the last look")
    experiment: str | None = Field(None, description="an interleaved experiment's id (run.json `experiment`)")

    def matches(self, runs_a: list[str], runs_b: list[str]) -> bool:
        """True when this record's arms are exactly ``runs_a`` and ``runs_b`` (run ids)."""
        return list(runs_a) == self.runs_a and list(runs_b) == self.runs_b


# --------------------------------------------------------------------------------------------
# The load benchmark (servedeck.bench.loadclient writes these; servedeck.bench.quantiles,
# slo, load, loadresult, capacity and interop compute them)
# --------------------------------------------------------------------------------------------

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
# --------------------------------------------------------------------------------------------
# quality.json: the quality probes (servedeck.bench.probes runs them, servedeck.bench.quality
# judges outputs, servedeck.ab.quality compares two arms)
# --------------------------------------------------------------------------------------------

DIRECT_ANSWER_KWARGS: dict[str, Any] = {"enable_thinking": False}
"""The chat template switch for a direct answer (no thinking) used by the probes that want an
answer, not a reasoning trace: Qwen3's (and DeepSeek-R1 distills') ``enable_thinking``."""


class QualitySettings(Record):
    """What the quality probes send. Token counts are the server's; the defaults cost a small
    share of a benchmark run (``benchmarks/quality_overhead.py``) and are capped by the deployed
    ``max_model_len`` when the probes run."""

    likelihood_texts: int = Field(8, ge=0, description="shipped texts scored for likelihood (0: the probe is skipped)")
    generation_prompts: int = Field(3, ge=0, description="shipped prompts generated from, greedy (0: skipped)")
    generation_max_tokens: int = Field(16, ge=1, description="output tokens per greedy generation")
    feature_max_tokens: int = Field(40, ge=8, description="output tokens of the tool-call and structured-output "
                                                          "requests")
    reasoning_max_tokens: int = Field(32, ge=8, description="output tokens of the reasoning request")
    needle_depths: list[float] = Field(default_factory=lambda: [0.1, 0.5, 0.9],
                                       description="where the needle's fact is placed, fractions of the context")
    needle_max_tokens: int | None = Field(32768, ge=64, description="the needle context at most (null: up to the "
                                                                     "deployed max_model_len less the answer)")
    needle_answer_tokens: int = Field(8, ge=2, description="output tokens of a needle answer")
    features: bool = Field(True, description="run the tool-call, reasoning and structured-output checks")
    answer_template_kwargs: dict[str, Any] = Field(
        default_factory=lambda: dict(DIRECT_ANSWER_KWARGS),
        description="`chat_template_kwargs` of the requests that want a direct answer")
    request_timeout_s: float = Field(600.0, gt=0, description="per request")

    @field_validator("needle_depths")
    @classmethod
    def _depths(cls, v: list[float]) -> list[float]:
        for d in v:
            if not 0.0 <= d <= 1.0:
                raise ValueError(f"needle depth {d} is not a fraction between 0 and 1")
        return v


class LikelihoodItem(Record):
    """One shipped text scored by the server's prompt log-probabilities."""

    id: str = Field(description="the text's id in `servedeck/bench/quality_texts.json`")
    tokens: int = Field(description="scored tokens (the prompt's tokens after the first)")
    sum_logprob: float = Field(description="their summed log-likelihood, natural log (nats)")
    token_ids_sha256: str = Field(description="sha256 of the prompt token ids (JSON list): the tokenizer's identity")
    truncated: bool = Field(False, description="the text was cut to fit max_model_len")
    logprobs: list[float] = Field(description="each scored token's log-likelihood (nats)")
    top1_ids: list[int] = Field(description="the most likely token id at each scored position")
    token_text: list[str] = Field(description="each prompt token as the server decoded it (index 0: the first)")
    top1_text: list[str] = Field(description="the most likely token at each scored position, decoded")

    @property
    def mean_logprob(self) -> float:
        """Mean log-likelihood per token (nats)."""
        return self.sum_logprob / self.tokens if self.tokens else float("nan")


class Likelihood(Record):
    """The likelihood probe: its items, or why it could not run."""

    items: list[LikelihoodItem] = Field(default_factory=list, description="one per text")
    error: str | None = Field(None, description="why the probe failed (then no items)")

    @property
    def tokens(self) -> int:
        return sum(i.tokens for i in self.items)

    @property
    def mean_logprob(self) -> float | None:
        """Token-weighted mean log-likelihood (nats per token), None without items."""
        n = self.tokens
        return sum(i.sum_logprob for i in self.items) / n if n else None

    @property
    def perplexity(self) -> float | None:
        """``exp(-mean log-likelihood)`` over all scored tokens."""
        import math
        m = self.mean_logprob
        return math.exp(-m) if m is not None else None


class GenerationItem(Record):
    """One greedy generation from a shipped prompt."""

    id: str = Field(description="the prompt's id in `servedeck/bench/quality_texts.json`")
    token_ids: list[int] | None = Field(None, description="output token ids, reasoning and answer (null: not returned)")
    tokens: list[str] | None = Field(None, description="output tokens as text (from `logprobs`; null: not returned)")
    content: str | None = Field(None, description="the answer")
    reasoning: str | None = Field(None, description="the reasoning field of the message")
    finish_reason: str | None = Field(None, description="`stop`, `length`, ...")
    degenerate: list[str] = Field(default_factory=list, description="`empty`, `reasoning_only`, `repeated_char`, "
                                                                    "`repetition_loop` (servedeck.bench.quality)")
    error: str | None = Field(None, description="why the request failed")


class FeatureCheck(Record):
    """One check of a feature the profile enables."""

    name: Literal["tool_call", "reasoning", "structured_output"] = Field(description="the feature")
    setting: str = Field(description="what enables it (`tool_call_parser=qwen3_xml`, ...)")
    status: str = Field(description="tool_call: `parsed` | `malformed` | `unparsed` | `no_call`; reasoning: "
                                    "`separated` | `leaked` | `unfinished` | `no_answer` | `no_reasoning` | `empty`; "
                                    "structured_output: `valid` | `invalid` | `truncated` | `unsupported`; "
                                    "any: `error`")
    broken: bool = Field(description="the output shows the feature not working")
    detail: str = Field("", description="what was seen, one clause")
    excerpt: str = Field("", description="the start of the output")


class NeedleItem(Record):
    """A fact placed at ``depth`` of a long context, asked for."""

    depth: float = Field(description="where the fact is, a fraction of the context")
    context_tokens: int = Field(description="the request's prompt tokens (the server's count)")
    retrieved: bool = Field(description="the answer (or the reasoning) holds the fact's value")
    answer: str = Field("", description="the start of the answer")
    error: str | None = Field(None, description="why the request failed")


class QualityResult(Record):
    """``quality.json``: the quality probes run after the benchmark (servedeck.bench.probes)."""

    texts_version: int = Field(description="version of `servedeck/bench/quality_texts.json`")
    settings: QualitySettings = Field(description="what was sent")
    served_model: str = Field(description="the model name the requests named")
    base_url: str = Field(description="`http://host:port` of the server")
    max_model_len: int | None = Field(None, description="the context length the probes were sized to")
    started_at: str = Field("", description="UTC, ISO 8601")
    finished_at: str = Field("", description="UTC, ISO 8601")
    duration_s: float | None = Field(None, description="wall time of the probes")
    durations_s: dict[str, float] = Field(default_factory=dict,
                                          description="per phase: `likelihood`, `generation`, `checks`")
    likelihood: Likelihood | None = Field(None, description="null: the probe did not run")
    generation: list[GenerationItem] = Field(default_factory=list, description="one per prompt")
    features: list[FeatureCheck] = Field(default_factory=list, description="the checks that ran")
    needle: list[NeedleItem] = Field(default_factory=list, description="one per depth")
    skipped: dict[str, str] = Field(default_factory=dict, description="`{probe: why it did not run}`")

    def feature(self, name: str) -> FeatureCheck | None:
        """The check ``name`` (``tool_call``, ...), or None when it did not run."""
        return next((f for f in self.features if f.name == name), None)


# --------------------------------------------------------------------------------------------
# lm_eval.json: lm-evaluation-harness on the user's tasks (servedeck.bench.lmeval)
# --------------------------------------------------------------------------------------------

class LmEvalSettings(Record):
    """What lm-evaluation-harness evaluated (``invoke bench --lm-eval TASKS``)."""

    tasks: list[str] = Field(min_length=1, description="lm-eval task (or group) names")
    include_path: str | None = Field(None, description="a directory of the user's task YAML files")
    limit: int | None = Field(None, ge=1, description="documents per task (null: all)")
    num_fewshot: int | None = Field(None, ge=0, description="few-shot examples (null: the task's default)")
    backend: Literal["local-chat-completions", "local-completions"] = Field(
        "local-chat-completions", description="lm-eval's OpenAI-compatible backend")
    tokenizer_backend: Literal["none", "remote", "huggingface"] | None = Field(
        None, description="null: `none` for chat, `remote` (the server's /tokenize) for completions")
    tokenizer: str | None = Field(None, description="a local tokenizer directory for `huggingface`")
    max_gen_toks: int = Field(256, ge=1, description="output tokens per generation at most")
    timeout_s: int = Field(600, ge=1, description="per request")


class TaskMetric(Record):
    """One task metric over the documents, and each document's score."""

    task: str = Field(description="lm-eval's task name")
    metric: str = Field(description="lm-eval's metric name (`exact_match`, `acc`, ...)")
    filter: str = Field("none", description="lm-eval's filter name")
    value: float | None = Field(description="the task's aggregate")
    stderr: float | None = Field(None, description="lm-eval's standard error")
    higher_is_better: bool = Field(True, description="the metric's direction")
    per_doc: dict[str, float] = Field(default_factory=dict, description="`{doc_id: score}`")

    @property
    def key(self) -> str:
        """``task/metric`` (``task/metric [filter]`` for a filter other than ``none``)."""
        return f"{self.task}/{self.metric}" + ("" if self.filter == "none" else f" [{self.filter}]")


class LmEvalResult(Record):
    """``lm_eval.json``: lm-evaluation-harness scores on the user's tasks."""

    lm_eval_version: str = Field(description="the lm-eval release that ran")
    settings: LmEvalSettings = Field(description="what was evaluated")
    served_model: str = Field(description="the model name the requests named")
    base_url: str = Field(description="`http://host:port` of the server")
    started_at: str = Field(description="UTC, ISO 8601")
    finished_at: str = Field(description="UTC, ISO 8601")
    duration_s: float = Field(description="wall time")
    task_metrics: list[TaskMetric] = Field(description="one per task, metric and filter")

    def metrics(self) -> dict[str, TaskMetric]:
        """The metrics by :attr:`TaskMetric.key`."""
        return {m.key: m for m in self.task_metrics}
# --------------------------------------------------------------------------------------------
# The physical limits (servedeck.bench.energy and servedeck.bench.roofline write these)
# --------------------------------------------------------------------------------------------

class WindowFigures(Record):
    """What the host's telemetry says about one bench window (one request, or the whole
    bench): None where not measured, ``problems`` says why."""

    label: str = Field(description="`cold 2`, `warm 1`, `span`")
    phase: str = Field(description="`warmup`, `cold`, `warm` (`span`: the whole bench)")
    index: int | None = Field(None, description="the request's line in bench.jsonl, from 0")
    duration_s: float = Field(description="from sending the request to the end of its stream")
    output_tokens: int = Field(description="the request's output tokens")
    energy_j: float | None = Field(None, description="the card's energy over the window, J")
    energy_error_j: float | None = Field(
        None, description="bound of the sampling error (readings inside vs outside the window) plus the "
                          "clock uncertainty at both edges times the mean power, J")
    mean_power_w: float | None = Field(None, description="energy / duration, W")
    j_per_token: float | None = Field(None, description="energy / output tokens, J")
    throttled_s: float | None = Field(None, description="time the throttle status read 1")
    throttle_reasons_s: dict[str, float] = Field(default_factory=dict,
                                                 description="seconds per throttle reason that read 1 (`pl1`, ...)")
    freq_mhz_mean: float | None = Field(None, description="time-weighted mean GPU frequency, MHz")
    freq_mhz_min: float | None = Field(None, description="lowest GPU frequency read, MHz")
    freq_mhz_max: float | None = Field(None, description="highest GPU frequency read, MHz")
    problems: list[str] = Field(default_factory=list, description="why a figure is missing")


class PhaseFigures(Record):
    """The windows of one phase together: energy and tokens summed, means weighted by time."""

    windows: int = Field(description="requests in the phase")
    duration_s: float = Field(description="their summed durations")
    output_tokens: int = Field(description="their summed output tokens")
    energy_j: float | None = Field(None, description="summed energy (only when every window has it), J")
    energy_error_j: float | None = Field(None, description="summed error bounds, J")
    mean_power_w: float | None = Field(None, description="energy / duration, W")
    j_per_token: float | None = Field(None, description="energy / output tokens, J")
    throttled_s: float | None = Field(None, description="summed time throttled")
    throttled_fraction: float | None = Field(None, description="time throttled / duration")
    throttle_reasons_s: dict[str, float] = Field(default_factory=dict, description="seconds per reason")
    freq_mhz_mean: float | None = Field(None, description="time-weighted mean GPU frequency, MHz")


class TelemetryRecord(Record):
    """``telemetry.json``: energy, power, clocks and throttling of each bench window, computed
    from the host's counters sampled during the bench (``servedeck.host.telemetry``,
    ``servedeck.bench.energy``), with the raw samples."""

    energy_source: str | None = Field(None, description="`xe card`, `nvidia power.draw`, `rapl`; null: no "
                                                        "energy counter was readable")
    energy_columns: list[str] = Field(default_factory=list, description="the counters summed into it")
    problems: list[str] = Field(default_factory=list, description="what could not be read or computed, in words")
    wraps: int = Field(0, description="energy-counter wrap-arounds added back")
    resets: int = Field(0, description="energy-counter resets (their sample intervals' energy is lost)")
    gaps: int = Field(0, description="unreadable energy readings bridged by their neighbours")
    windows: list[WindowFigures] = Field(default_factory=list, description="one per request, in bench.jsonl order")
    phases: dict[str, PhaseFigures] = Field(default_factory=dict, description="the windows of each phase together")
    span: WindowFigures | None = Field(None, description="first window's start to last window's end, idle gaps "
                                                         "included")
    raw: dict[str, Any] = Field(default_factory=dict,
                                description="the samples: `columns` (kind, source, path, range_uj), `t0` (epoch "
                                            "s, host clock), `t` (s after t0), `values` (one list per column), "
                                            "`nvidia`, `period_s`, `sampler`, `clock_offset_s`, "
                                            "`clock_uncertainty_s`, `gpu_name`")

    def per_request(self, name: str) -> dict[int, float]:
        """``{bench.jsonl index: value}`` of a window figure (``j_per_token``, ``mean_power_w``)."""
        return {w.index: getattr(w, name) for w in self.windows
                if w.index is not None and getattr(w, name) is not None}


class Ceilings(Record):
    """The limits a run is measured against, each with its source (``servedeck.model.cards``,
    the inventory, a measurement on the host)."""

    card: str | None = Field(None, description="the card table's id (`arc-pro-b70`); null: none applies")
    card_name: str | None = Field(None, description="the card's product name")
    card_source: str | None = Field(None, description="how the card was found (inventory, nvidia-smi, memory)")
    memory_bandwidth_gb_s: float | None = Field(None, description="the decode ceiling's bandwidth, GB/s")
    bandwidth_source: str | None = Field(None, description="inventory, measured on the host, or the card table")
    matrix_tflops: float | None = Field(None, description="the prefill ceiling: dense TFLOPS (TOPS for int8)")
    matrix_precision: Literal["fp16", "int8"] = Field("fp16", description="`int8` when the prefill runs W8A8")
    matrix_dtype: str | None = Field(None, description="the dtype the matrix rate is for: `float16` or `int8` "
                                                       "(card table, inventory), or the one measured (on a "
                                                       "CPU `bfloat16` or `float32`); null in older records")
    matrix_source: str | None = Field(None, description="where the matrix rate comes from")
    spec_memory_bandwidth_gb_s: float | None = Field(None, description="the card table's figure when another "
                                                                       "one is used")
    board_power_w: float | None = Field(None, description="the card's board power, W")
    notes: list[str] = Field(default_factory=list, description="why a figure is missing, ambiguities")


class ModelCost(Record):
    """What one engine step reads and one prompt token costs, each with its source."""

    weights_bytes: float | None = Field(None, description="the weights streamed per decode step, bytes")
    weights_source: str | None = Field(None, description="the startup log's figure or the weight files")
    kv_bytes_per_token: float | None = Field(None, description="KV cache bytes per token of context")
    kv_source: str | None = Field(None, description="layers × KV heads × (K + V head size) × element size")
    state_bytes_per_step: float = Field(0.0, description="recurrent state read and written per step, bytes")
    state_source: str | None = Field(None, description="how the state was counted")
    linear_params: float | None = Field(None, description="active parameters of the non-embedding layers "
                                                          "(prefill FLOPs per token = 2 × this)")
    params_source: str | None = Field(None, description="how they were counted from config.json")
    attention_layers: int | None = Field(None, description="layers with a KV cache")
    attention_heads: int | None = Field(None, description="query heads per attention layer")
    head_size: int | None = Field(None, description="K head size")
    head_size_v: int | None = Field(None, description="V head size")
    notes: list[str] = Field(default_factory=list, description="what is not counted")


class RequestRoofline(Record):
    """One request against the ceilings (shares are fractions: 0.68 = 68 %)."""

    index: int = Field(description="the request's line in bench.jsonl, from 0")
    phase: str = Field(description="`warmup`, `cold`, `warm`")
    rep: int = Field(description="repetition within the phase")
    context_tokens: float = Field(description="prompt + half the output: the mean context over the decode")
    accept_len: float = Field(description="tokens per engine step (the server's accepted length; 1 without "
                                          "speculative decoding)")
    bytes_per_step: float | None = Field(None, description="weights + KV × context + state, bytes")
    decode_tok_s: float | None = Field(None, description="the sample's decode rate")
    decode_ceiling_tok_s: float | None = Field(None, description="bandwidth × accepted length / bytes per step")
    decode_share: float | None = Field(None, description="decode_tok_s / decode_ceiling_tok_s")
    decode_gb_s: float | None = Field(None, description="bytes the decode read per second, GB/s")
    prefill_tokens: int | None = Field(None, description="prompt tokens not served from the prefix cache")
    prefill_s: float | None = Field(None, description="the prefill's time")
    prefill_time_source: str | None = Field(None, description="`server prefill time` or `client TTFT`")
    prefill_tflops: float | None = Field(None, description="the prefill's FLOPs / its time, TFLOPS")
    prefill_share: float | None = Field(None, description="prefill_tflops / the matrix ceiling")
    flags: list[str] = Field(default_factory=list, description="measurement problems and notes of this request")


class PhaseRoofline(Record):
    """Medians of one phase's requests."""

    requests: int = Field(description="requests in the phase")
    decode_share: float | None = Field(None, description="median share of the decode ceiling")
    decode_tok_s: float | None = Field(None, description="median decode rate")
    decode_ceiling_tok_s: float | None = Field(None, description="median decode ceiling")
    decode_gb_s: float | None = Field(None, description="median bytes read per second, GB/s")
    accept_len: float | None = Field(None, description="median accepted length")
    context_tokens: float | None = Field(None, description="median mean context")
    prefill_share: float | None = Field(None, description="median share of the matrix ceiling")
    prefill_tflops: float | None = Field(None, description="median prefill rate, TFLOPS")


class Roofline(Record):
    """``roofline.json``: each request against the card's ceilings (decode against memory
    bandwidth, prefill against the matrix rate) with the model's costs and every figure's
    source (``servedeck.bench.roofline``)."""

    ceilings: Ceilings = Field(description="the limits used")
    model: ModelCost = Field(description="the model's bytes per step and FLOPs per token")
    requests: list[RequestRoofline] = Field(default_factory=list, description="one per line of bench.jsonl")
    phases: dict[str, PhaseRoofline] = Field(default_factory=dict, description="each phase's medians")
    problems: list[str] = Field(default_factory=list, description="shares flagged as measurement problems "
                                                                  "(above 100 %, implausibly low)")
    notes: list[str] = Field(default_factory=list, description="what the figures do not cover")

    def per_request(self, name: str) -> dict[int, float]:
        """``{bench.jsonl index: value}`` of a request figure (``decode_share``, ``prefill_share``)."""
        return {r.index: getattr(r, name) for r in self.requests if getattr(r, name) is not None}


class MeasuredCeilings(Record):
    """``runs/ceilings/<host>.json``: a host's read bandwidth and matrix rate measured in its
    server container (``servedeck.host.ceilings``; not a run file, kept beside the runs)."""

    host: str = Field(description="inventory host name")
    measured_at: str = Field(description="UTC, ISO 8601")
    container: str | None = Field(None, description="the server container measured in")
    device: str | None = Field(None, description="`xpu`, `cuda`, `cpu`: the device torch drove")
    memory_bandwidth_gb_s: float | None = Field(None, description="best read bandwidth, GB/s")
    matrix_tflops: float | None = Field(None, description="best square matmul rate, TFLOPS: the prefill ceiling")
    matrix_dtype: str | None = Field(None, description="the dtype of that rate (`float16`; on a CPU the better "
                                                       "of `bfloat16` and `float32`)")
    matrix_tflops_by_dtype: dict[str, float] | None = Field(None, description="each dtype's best matmul rate, "
                                                                              "TFLOPS")
    method: str | None = Field(None, description="how it was measured")
    buffer_mib: int | None = Field(None, description="the bandwidth buffer, MiB")
    repeats: int | None = Field(None, description="timed passes of each kind (the best counts)")
    matmul_n: int | None = Field(None, description="the matmul's size")
    torch: str | None = Field(None, description="torch version in the container")
    python: str | None = Field(None, description="python version in the container")
    threads: int | None = Field(None, description="CPU threads torch used")
    error: str | None = Field(None, description="what part of the measurement failed")
