"""The bench flow's physical limits: telemetry around the bench windows and the roofline,
written into the run (``telemetry.json``, ``roofline.json``).

:func:`servedeck.bench.record.bench_deployed` uses these around the client's run without
changing the client: the client gets an ``httpx`` transport that times each completion request
(:class:`servedeck.bench.windows.RequestWindows`), the host's sampler runs from before the first
request to after the last (:mod:`servedeck.host.telemetry`), and afterwards each request window
gets its energy, power, clocks and throttling (:mod:`servedeck.bench.energy`) and its roofline
(:mod:`servedeck.bench.roofline`). A telemetry or roofline failure never fails the bench: the
record says what could not be measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from servedeck.bench.energy import TelemetryRecord, Window, telemetry_record
from servedeck.bench.roofline import Ceilings, Roofline, int8_prefill, model_cost, resolve_ceilings, roofline
from servedeck.errors import ServedeckError
from servedeck.runs import store

if TYPE_CHECKING:
    from servedeck.host.telemetry import RawTelemetry, TelemetryHandle

__all__ = ["BenchTelemetry", "record_roofline", "recompute_roofline", "read_telemetry", "read_roofline",
           "device_of", "format_roofline", "format_telemetry", "matrix_rate_text", "limit_samples", "limit_metrics",
           "limits_view", "LIMIT_METRICS"]


class BenchTelemetry:
    """Host telemetry around one bench: ``start()`` before the first request, ``stop()`` after
    the last (also on failure), ``record(run, samples, windows)`` once the samples are written.

    Args:
        host / entry: the host and its inventory entry (``sysfs_root``).
        gpu: the device index for ``nvidia-smi``.
        period_s: seconds between samples; enabled: False does nothing (``--no-telemetry``).
    """

    def __init__(self, host, entry, *, gpu: int = 0, period_s: float | None = None, enabled: bool = True):
        from servedeck.host.telemetry import DEFAULT_PERIOD_S
        self.host, self.entry, self.gpu = host, entry, gpu
        self.period_s = period_s or DEFAULT_PERIOD_S
        self.enabled = enabled
        self.handle: TelemetryHandle | None = None
        self.raw: RawTelemetry | None = None
        self.problem: str | None = None

    def start(self) -> None:
        if not self.enabled:
            return
        from servedeck.host.telemetry import start_telemetry
        try:
            self.handle = start_telemetry(self.host, sysfs_root=getattr(self.entry, "sysfs_root", "/sys"),
                                          gpu=self.gpu, period_s=self.period_s)
        except ServedeckError as exc:
            self.problem = f"telemetry could not start: {exc.message}"

    def stop(self) -> None:
        if self.handle is None or self.raw is not None:
            return
        from servedeck.host.telemetry import stop_telemetry
        try:
            self.raw = stop_telemetry(self.host, self.handle)
        except ServedeckError as exc:
            self.problem = f"telemetry could not be read back: {exc.message}"

    @property
    def gpu_name(self) -> str | None:
        return self.handle.gpu_name if self.handle is not None else None

    def record(self, run, samples: list[dict[str, Any]], windows: list[list[float | None]]) -> TelemetryRecord | None:
        """Write the run's ``telemetry.json`` (None and nothing written when disabled)."""
        if not self.enabled:
            return None
        raw = self._raw()
        problems = []
        if len(windows) != len(samples):
            problems.append(f"{len(windows)} completion requests were timed for {len(samples)} samples: "
                            "per-request figures are left out")
        return self._write(run, store.TELEMETRY, raw, bench_windows(samples, windows, raw.clock_offset_s), problems)

    def record_load(self, run, levels: list[Any], records: list[Any]) -> TelemetryRecord | None:
        """Write the run's ``load_telemetry.json``: one window per load level (its
        :class:`~servedeck.runs.records.LevelResult` and the level's request records, see
        :func:`level_windows`). None and nothing written when disabled."""
        if not self.enabled:
            return None
        raw = self._raw()
        return self._write(run, store.LOAD_TELEMETRY, raw, level_windows(levels, records, raw.clock_offset_s), [])

    def _raw(self):
        from servedeck.host.telemetry import RawTelemetry
        return self.raw or RawTelemetry(columns=[])

    def _write(self, run, file, raw, wins: list[Window], problems: list[str]) -> TelemetryRecord:
        from servedeck.host.telemetry import telemetry_document
        rec = telemetry_record(raw, wins, telemetry_document(raw))
        if self.problem:
            rec.problems.insert(0, self.problem)
        rec.problems += problems
        run.write(file, rec)
        return rec


def bench_windows(samples: list[dict[str, Any]], windows: list[list[float | None]], offset_s: float
                  ) -> list[Window]:
    """One :class:`~servedeck.bench.energy.Window` per sample, on the host's clock (``offset_s``:
    host minus local); none when the timed requests do not pair up with the samples."""
    if len(windows) != len(samples):
        return []
    out = []
    for i, (s, (t0, t1)) in enumerate(zip(samples, windows)):
        if t0 is None or t1 is None:
            continue
        out.append(Window(f"{s.get('phase')} {int(s.get('rep') or 0) + 1}", str(s.get("phase")), i,
                          t0 + offset_s, t1 + offset_s, int(s.get("output_tokens") or 0)))
    return out


def level_windows(levels: list[Any], records: list[Any], offset_s: float) -> list[Window]:
    """One :class:`~servedeck.bench.energy.Window` per load level (phase ``load``), on the host's
    clock (``offset_s``: host minus local): from the level's first send (its records'
    ``sent_unix_s``) for its ``duration_s`` (first send to last end), with the output tokens of
    its successful requests. A level without records has no window.

    Args:
        levels: the :class:`~servedeck.runs.records.LevelResult` of ``load.json``.
        records: the :class:`~servedeck.runs.records.RequestRecord` of ``load.jsonl``.
    """
    first: dict[int, float] = {}
    for r in records:
        if r.level >= 0:
            first[r.level] = min(first.get(r.level, r.sent_unix_s), r.sent_unix_s)
    out = []
    for lv in levels:
        t0 = first.get(lv.index)
        if t0 is None:
            continue
        out.append(Window(f"level {lv.index + 1} ({lv.level.label})", "load", lv.index, t0 + offset_s,
                          t0 + lv.duration_s + offset_s, int(lv.output_tokens)))
    return out


def deployed_service(run_dir: Path, catalog=None):
    """The run's server as its deployed compose file runs it (the one
    :class:`servedeck.compose.service.Service` model: its launcher, environment, image facts),
    or None when the file cannot be read as a service.

    Args:
        catalog: the project's image catalog (:class:`servedeck.model.catalog.Catalog`), for the
            image's facts; None: facts inferred from the image name.
    """
    from servedeck.compose.service import read_services
    from servedeck.yamlio import load_data
    text = store.read(run_dir, store.COMPOSE)
    if not text:
        return None
    try:
        services = read_services(load_data(text), catalog=catalog)
    except (ValueError, ServedeckError):  # a record whose compose file no longer reads as a service
        return None
    return services[0] if services else None


def device_of(profile: dict[str, Any], service=None) -> str:
    """The device a run's server uses: its image's facts (the deployed service's), else ``xpu``
    when the profile maps ``/dev/dri``, ``cuda`` when it asks for NVIDIA GPUs, else ``cpu``."""
    if service is not None and service.device:
        return service.device
    container = profile.get("container") or {}
    devices = [str(d) for d in container.get("devices") or []]
    if any(d.startswith("/dev/dri") for d in devices):
        return "xpu"
    if any("nvidia" in d for d in devices) or container.get("gpus") or container.get("runtime") == "nvidia":
        return "cuda"
    return "cpu"


def _int8(service) -> bool:
    """The deployed server's prefill runs W8A8 (its environment, launcher defaults included)."""
    return int8_prefill(service.server_env() if service is not None else None)


def _run_inputs(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A run's resolved profile, effective settings and startup facts as plain dicts."""
    profile = store.read(run_dir, store.PROFILE_RESOLVED)
    effective = store.read(run_dir, store.EFFECTIVE)
    startup = store.read(run_dir, store.STARTUP)
    return (profile.root if profile is not None else {}, effective.root if effective is not None else {},
            startup.to_dict() if startup is not None else {})


def _samples(run_dir: Path) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json") for s in store.read(run_dir, store.BENCH_SAMPLES)]


def _measured(runs_dir: Path | None, host: str) -> dict[str, Any] | None:
    m = store.read_host_ceilings(runs_dir, host) if runs_dir is not None else None
    return m.model_dump(mode="json") if m is not None else None


def record_roofline(run, host, entry, *, catalog=None, runs_dir: Path | None = None,
                    gpu_name: str | None = None) -> Roofline:
    """Compute and write the run's ``roofline.json`` from its startup facts, samples and
    settings, the model's files on the host, and the host's ceilings (inventory, measured in
    ``runs_dir``, card table).

    Raises:
        ServedeckError: a run file does not match its model (a host that cannot be read is said
            in the record instead).
    """
    profile, effective, startup = _run_inputs(run.path)
    notes: list[str] = []
    config, weights_bytes = None, None
    weights_dir = (profile.get("model") or {}).get("weights_dir")
    if weights_dir and host is not None:
        from servedeck.host.ceilings import read_model_files
        try:
            config, weights_bytes, problems = read_model_files(host, weights_dir)
            notes += problems
        except ServedeckError as exc:
            notes.append(f"the model's files could not be read: {exc.message}")
    elif not weights_dir:
        notes.append("the model is not a directory on the host (model.weights_dir): config.json is not read")
    service = deployed_service(run.path, catalog)
    ceilings = resolve_ceilings(entry, host=run.meta.host, device=device_of(profile, service), nvidia_name=gpu_name,
                                total_memory_gib=startup.get("total_memory_gib"),
                                measured=_measured(runs_dir, run.meta.host), int8=_int8(service))
    cost = model_cost(config, startup=startup, weights_file_bytes=weights_bytes,
                      weights_files_source=f"weight files in {weights_dir} on the host",
                      kv_cache_dtype=effective.get("kv_cache_dtype"), engine_dtype=effective.get("dtype"))
    cost.notes = notes + cost.notes
    result = roofline(_samples(run.path), cost, ceilings)
    run.write(store.ROOFLINE, result)
    return result


def recompute_roofline(run_dir: Path, entry, *, runs_dir: Path | None = None, catalog=None) -> Roofline:
    """Recompute a benchmarked run's ``roofline.json`` with the ceilings that apply now (after
    setting the inventory's card or measuring the host), keeping the model costs it recorded.

    Raises:
        ServedeckError: the run has no roofline yet (bench it) or a file is invalid.
    """
    from servedeck.runs.store import open_run
    run = open_run(run_dir)
    old = store.read(run.path, store.ROOFLINE)
    if old is None:
        raise ServedeckError(f"run {run.run_id} has no roofline.json", hint="benchmark it (servedeck bench)")
    profile, _, startup = _run_inputs(run.path)
    tel = store.read(run.path, store.TELEMETRY)
    service = deployed_service(run.path, catalog)
    ceilings = resolve_ceilings(entry, host=run.meta.host, device=device_of(profile, service),
                                nvidia_name=tel.raw.get("gpu_name") if tel else None,
                                total_memory_gib=startup.get("total_memory_gib"),
                                measured=_measured(runs_dir, run.meta.host), int8=_int8(service))
    result = roofline(_samples(run.path), old.model, ceilings)
    run.write(store.ROOFLINE, result)
    return result


def read_roofline(run_dir: Path) -> Roofline | None:
    """A run's ``roofline.json`` (None when it has none).

    Raises:
        ServedeckError: the file does not match its model.
    """
    return store.read(run_dir, store.ROOFLINE)


def read_telemetry(run_dir: Path) -> TelemetryRecord | None:
    """A run's ``telemetry.json`` (None when it has none).

    Raises:
        ServedeckError: the file does not match its model.
    """
    return store.read(run_dir, store.TELEMETRY)


# --------------------------------------------------------------------------- words


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.0f} %" if x >= 0.1 else f"{x * 100:.2g} %"


def _gb(x: float | None) -> str:
    return "–" if x is None else f"{x / 1e9:.3g} GB"


def matrix_rate_text(c: Ceilings) -> str | None:
    """The prefill ceiling as a label, its unit and the dtype it is for (``"98.3 TFLOPS
    float16"``, ``"367 TOPS int8"``, ``"0.155 TFLOPS float32"`` measured on an AVX2 CPU), or None
    without a rate. A record older than ``matrix_dtype`` names its precision class instead."""
    from servedeck.numfmt import fmt_num
    if not c.matrix_tflops:
        return None
    unit = "TOPS" if c.matrix_precision == "int8" else "TFLOPS"
    return f"{fmt_num(c.matrix_tflops)} {unit} {c.matrix_dtype or c.matrix_precision.upper()}"


def format_roofline(r: Roofline | None) -> list[str]:
    """``show``'s roofline lines (empty when the run has none)."""
    from servedeck.numfmt import fmt_num
    if r is None:
        return []
    c, m = r.ceilings, r.model
    card = c.card_name or "no card"
    bw = f"{fmt_num(c.memory_bandwidth_gb_s)} GB/s" if c.memory_bandwidth_gb_s else "no bandwidth"
    unit = "TOPS" if c.matrix_precision == "int8" else "TFLOPS"
    mx = matrix_rate_text(c) or "no matrix rate"
    out = [f"roofline: {card}; {bw} ({c.bandwidth_source or 'unknown'}); {mx}"
           + (f" ({c.matrix_source})" if c.matrix_source else "")]
    if c.spec_memory_bandwidth_gb_s:
        out.append(f"  the card's own figure is {fmt_num(c.spec_memory_bandwidth_gb_s)} GB/s")
    parts = [f"weights {_gb(m.weights_bytes)} ({m.weights_source})" if m.weights_bytes else "weights unknown"]
    if m.kv_bytes_per_token is not None:
        parts.append(f"KV {fmt_num(m.kv_bytes_per_token)} B/token ({m.kv_source})")
    if m.state_bytes_per_step:
        parts.append(f"recurrent state {_gb(m.state_bytes_per_step)} per step")
    out.append("  bytes per step: " + "; ".join(parts))
    for phase in ("cold", "warm"):
        p = r.phases.get(phase)
        if p is None:
            continue
        if p.decode_share is not None:
            out.append(f"  {phase} decode {fmt_num(p.decode_tok_s)} tok/s = {_pct(p.decode_share)} of the "
                       f"{fmt_num(p.decode_ceiling_tok_s)} tok/s ceiling ({fmt_num(p.decode_gb_s)} GB/s read at "
                       f"accepted length {fmt_num(p.accept_len)}, context {fmt_num(p.context_tokens)} tokens)")
        if p.prefill_share is not None:
            out.append(f"  {phase} prefill {fmt_num(p.prefill_tflops)} {unit} = {_pct(p.prefill_share)} of the "
                       "matrix ceiling")
    out += [f"  PROBLEM: {t}" for t in r.problems]
    out += [f"  note: {t}" for t in r.notes]
    return out


def _energy_figures(p, throttled_fraction: float | None) -> str:
    """One phase's or window's figures in words (``format_telemetry``)."""
    from servedeck.numfmt import fmt_num
    bits = []
    if p.j_per_token is not None:
        err = (p.energy_error_j or 0) / p.output_tokens if p.output_tokens else None
        bits.append(f"{fmt_num(p.j_per_token)} J/token" + (f" ±{err:.2g}" if err else ""))
    if p.mean_power_w is not None:
        bits.append(f"{fmt_num(p.mean_power_w)} W mean")
    if throttled_fraction is not None:
        bits.append(f"throttled {_pct(throttled_fraction)} of {fmt_num(p.duration_s)} s"
                    + (f" ({', '.join(f'{k} {v:.2g} s' for k, v in p.throttle_reasons_s.items())})"
                       if p.throttle_reasons_s else ""))
    if p.freq_mhz_mean is not None:
        bits.append(f"{fmt_num(p.freq_mhz_mean)} MHz")
    return ", ".join(bits) if bits else "nothing measured"


def format_telemetry(t: TelemetryRecord | None) -> list[str]:
    """``show``'s energy lines (empty when the run has none)."""
    from servedeck.numfmt import fmt_num
    if t is None:
        return []
    period = t.raw.get("period_s")
    out = [f"energy: {t.energy_source or 'not measured'}"
           + (f" ({', '.join(t.energy_columns)}; sampled every {period:g} s on the host)" if period else "")]
    for phase in ("warmup", "cold", "warm"):
        p = t.phases.get(phase)
        if p is None:
            continue
        out.append(f"  {phase}: {_energy_figures(p, p.throttled_fraction)}"
                   f" ({p.windows} requests, {p.output_tokens:,} output tokens)")
    for w in t.windows:  # a load benchmark's levels (load_telemetry.json)
        if w.phase == "load":
            thr = w.throttled_s / w.duration_s if w.throttled_s is not None and w.duration_s > 0 else None
            out.append(f"  {w.label}: {_energy_figures(w, thr)} ({w.output_tokens:,} output tokens)")
    if t.span is not None and t.span.mean_power_w is not None:
        out.append(f"  whole bench (idle gaps included): {fmt_num(t.span.mean_power_w)} W mean over "
                   f"{fmt_num(t.span.duration_s)} s")
    out += [f"  note: {p}" for p in t.problems]
    return out


# --------------------------------------------------------------------------- per-request metrics

#: Per-request figures added to a run's samples for comparison (name -> lower is better):
#: ``decode_roofline_pct`` (decode as a percentage of its memory-bandwidth ceiling) and
#: ``energy_j_per_token`` (the request's energy per output token).
LIMIT_METRICS: dict[str, bool] = {"decode_roofline_pct": False, "energy_j_per_token": True}


def limit_samples(run_dirs: list[Path], phase: str, metric: str) -> list[float]:
    """Per-request values of a :data:`LIMIT_METRICS` metric over ``run_dirs`` for one phase, in
    bench.jsonl order: ``decode_roofline_pct`` from ``roofline.json`` (share × 100),
    ``energy_j_per_token`` from ``telemetry.json``; empty where a run has no such record.

    Raises:
        ServedeckError: a record does not match its model.
    """
    out: list[float] = []
    for d in run_dirs:
        if metric == "decode_roofline_pct":
            roof = read_roofline(d)
            out += [r.decode_share * 100 for r in (roof.requests if roof else [])
                    if r.phase == phase and r.decode_share is not None]
        elif metric == "energy_j_per_token":
            tel = read_telemetry(d)
            out += [w.j_per_token for w in (tel.windows if tel else [])
                    if w.phase == phase and w.index is not None and w.j_per_token is not None]
        else:
            raise ValueError(f"{metric} is not a limit metric")
    return out


def limit_metrics(runs_a: list[Path], runs_b: list[Path]) -> list[tuple[str, str, list[float], list[float]]]:
    """The :data:`LIMIT_METRICS` of two arms as ``(name, phase, samples_a, samples_b)`` for the
    comparison's judged metrics (``cold`` and ``warm``; a metric neither arm measured is left
    out)."""
    out = []
    for phase in ("cold", "warm"):
        for metric in LIMIT_METRICS:
            a, b = limit_samples(runs_a, phase, metric), limit_samples(runs_b, phase, metric)
            if a or b:
                out.append((metric, phase, a, b))
    return out


def limits_view(run_dir: Path) -> dict[str, Any]:
    """What the A/B report shows of one arm's limits: ``{"run", "card", "bandwidth_gb_s",
    "bandwidth_source", "matrix", "bytes_per_step_gb", "decode_share" {phase}, "prefill_share"
    {phase}, "j_per_token" {phase}, "mean_power_w" {phase}, "throttled" {phase}, "freq_mhz"
    {phase}, "energy_source", "problems" [str], "power_cap_w" (the cap this run's deploy set, else the
    limit its preflight found)}`` (None values where not measured)."""
    roof, tel = read_roofline(run_dir), read_telemetry(run_dir)
    view: dict[str, Any] = {"run": Path(run_dir).name, "card": None, "bandwidth_gb_s": None, "bandwidth_source": None,
                            "matrix": None, "bytes_per_step_gb": None, "decode_share": {}, "prefill_share": {},
                            "j_per_token": {}, "mean_power_w": {}, "throttled": {}, "freq_mhz": {},
                            "energy_source": None, "problems": [], "power_cap_w": None}
    meta = store.read_meta(Path(run_dir))
    facts = store.read(Path(run_dir), store.FACTS)
    view["power_cap_w"] = ((meta.power or {}).get("new_w")
                           or (facts.host.gpu_power_cap_w if facts is not None else None))
    if roof is not None:
        c = roof.ceilings
        view.update(card=c.card_name, bandwidth_gb_s=c.memory_bandwidth_gb_s, bandwidth_source=c.bandwidth_source,
                    matrix=matrix_rate_text(c))
        steps = [r.bytes_per_step for r in roof.requests if r.bytes_per_step and r.phase != "warmup"]
        view["bytes_per_step_gb"] = (sorted(steps)[len(steps) // 2] / 1e9) if steps else None
        for phase, p in roof.phases.items():
            view["decode_share"][phase] = p.decode_share
            view["prefill_share"][phase] = p.prefill_share
        view["problems"] += roof.problems
    if tel is not None:
        view["energy_source"] = tel.energy_source
        for phase, fig in tel.phases.items():
            view["j_per_token"][phase] = fig.j_per_token
            view["mean_power_w"][phase] = fig.mean_power_w
            view["throttled"][phase] = fig.throttled_fraction
            view["freq_mhz"][phase] = fig.freq_mhz_mean
        view["problems"] += [p for p in tel.problems if "not measured" in p or "reset" in p]
    return view
