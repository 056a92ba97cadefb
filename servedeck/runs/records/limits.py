"""The physical limits (:mod:`servedeck.bench.energy` and :mod:`servedeck.bench.roofline` write
these): ``telemetry.json``, ``load_telemetry.json``, ``roofline.json``, and a host's measured
ceilings ``runs/ceilings/<host>.json``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from servedeck.runs.records.base import Record

__all__ = ["WindowFigures", "PhaseFigures", "TelemetryRecord", "Ceilings", "ModelCost", "RequestRoofline",
           "PhaseRoofline", "Roofline", "MeasuredCeilings"]


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
