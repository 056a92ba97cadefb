"""Energy, power, clocks and throttling of the bench windows, from the host's telemetry samples.

Pure code: :mod:`servedeck.host.telemetry` gathers the samples on the host (a sampler started
in servedeck's SSH session, read back once per bench); :mod:`servedeck.bench.record` times the
bench windows (one per request: from sending it to the end of its stream) and calls
:func:`measure_windows`. Nothing here touches a host or a file.

Energy counters (microjoules) are read as cumulative energy:

* **wrap-around**: a reading below the previous one is a wrap when the counter's range is known
  (RAPL ``max_energy_range_uj``: the difference gains that range) or can be inferred (a 32- or
  64-bit counter: the next power of two above the previous reading); the inferred wrap is kept
  only if the power it implies over that sample interval is plausible (at most
  :data:`MAX_PLAUSIBLE_W`), else the reading is a **reset** (driver reload) and that interval's
  energy is lost; every wrap and reset is counted and said;
* **missing or unreadable readings** (an empty field) leave a gap that is bridged by the
  neighbouring readings and counted;
* a window's energy is the cumulative energy interpolated linearly at its two edges. The counter
  is monotonic, so the true energy lies between the readings just inside the window and the
  readings just outside it: ``energy_error_j`` is the larger distance of the estimate to those
  two bounds (the **sampling error**), plus the edges' clock uncertainty times the window's
  mean power.

NVIDIA cards are sampled by ``nvidia-smi`` (``power.draw``, W): their energy is the trapezoid
integral of power over time, bounded the same way (``power.draw`` is itself an average over the
driver's window; see its documentation). Time throttled is the time a throttle status (xe
``throttle/status``, NVIDIA ``clocks_throttle_reasons.active`` without the idle and
application-clock bits) read 1 between readings, from each reading to the next.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from servedeck.runs.records import PhaseFigures, TelemetryRecord, WindowFigures

__all__ = ["MAX_PLAUSIBLE_W", "EnergySeries", "Window", "WindowFigures", "PhaseFigures", "TelemetryRecord",
           "unwrap_counter", "series_from_power", "measure_windows", "summarize", "telemetry_record",
           "NVIDIA_REASONS"]

#: Power above which an inferred wrap-around is not believed (W): no single card or socket
#: draws this much, so a counter that "wrapped" at this rate was reset instead.
MAX_PLAUSIBLE_W = 5000.0

#: ``clocks_throttle_reasons.active`` bits (NVML ``nvmlClocksThrottleReasons``, nvml.h); the idle
#: and application-clock bits are not throttling.
NVIDIA_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
                  0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
NVIDIA_NOT_THROTTLE = 0x1 | 0x2


@dataclass
class EnergySeries:
    """Cumulative energy of one source over time.

    Attributes:
        source: what was read (``xe card1 card``, ``rapl package-0``, ``nvidia power.draw``).
        t: reading times (s, host clock), increasing.
        joules: cumulative energy at each reading (J, from the first reading).
        lost_after: indices ``i`` whose interval ``t[i]..t[i+1]`` lost its energy (a reset).
        wraps / resets / gaps: how many wrap-arounds, resets and unreadable readings were seen.
    """

    source: str
    t: list[float] = field(default_factory=list)
    joules: list[float] = field(default_factory=list)
    lost_after: set[int] = field(default_factory=set)
    wraps: int = 0
    resets: int = 0
    gaps: int = 0

    def at(self, x: float) -> float | None:
        """Cumulative energy at time ``x`` (linear between readings); None outside them."""
        if not self.t or x < self.t[0] or x > self.t[-1]:
            return None
        i = bisect.bisect_right(self.t, x) - 1
        if i >= len(self.t) - 1:
            return self.joules[-1]
        t0, t1 = self.t[i], self.t[i + 1]
        f = (x - t0) / (t1 - t0) if t1 > t0 else 0.0
        return self.joules[i] + f * (self.joules[i + 1] - self.joules[i])

    def between(self, a: float, b: float, slack: float = 0.0) -> tuple[float, float, bool] | None:
        """``(estimate, error bound, complete)`` of the energy between ``a`` and ``b`` (J);
        None when the window is not inside the readings. An end outside them by at most
        ``slack`` (s: the uncertainty of the clock offset that placed the window on the host's
        clock, which the caller adds to the error bound) is taken at the nearest reading.
        ``complete`` is False when a reset inside the window lost part of its energy."""
        if self.t:
            if self.t[0] - slack <= a < self.t[0]:
                a = self.t[0]
            if self.t[-1] < b <= self.t[-1] + slack:
                b = self.t[-1]
        ea, eb = self.at(a), self.at(b)
        if ea is None or eb is None or b < a:
            return None
        est = eb - ea
        ia = bisect.bisect_left(self.t, a)           # first reading at or after a
        ib = bisect.bisect_right(self.t, b) - 1      # last reading at or before b
        outer_a = max(0, bisect.bisect_right(self.t, a) - 1)
        outer_b = min(len(self.t) - 1, bisect.bisect_left(self.t, b))
        inner = self.joules[ib] - self.joules[ia] if ib >= ia else 0.0
        outer = self.joules[outer_b] - self.joules[outer_a]
        err = max(outer - est, est - inner, 0.0)
        complete = not any(outer_a <= i < outer_b for i in self.lost_after)
        return est, err, complete


def _cumulate(source: str, t: Sequence[float], values: Sequence[float | None], increment) -> EnergySeries:
    """Cumulative energy over readings: ``increment(series, (t0, v0), (t1, v1))`` gives the
    joules between two readable readings; an unreadable one (None) is a gap."""
    out = EnergySeries(source)
    acc = 0.0
    prev: tuple[float, float] | None = None
    for ti, v in zip(t, values):
        if v is None:
            out.gaps += 1
            continue
        if prev is not None:
            acc += increment(out, prev, (ti, v))
        out.t.append(ti)
        out.joules.append(acc)
        prev = (ti, v)
    return out


def unwrap_counter(source: str, t: Sequence[float], raw_uj: Sequence[int | None], *,
                   range_uj: int | None = None) -> EnergySeries:
    """Turn counter readings (µJ, None where unreadable) into an :class:`EnergySeries`.

    Args:
        t: reading times (s), increasing.
        raw_uj: the counter's readings.
        range_uj: the counter's range when the host states it (RAPL ``max_energy_range_uj``);
            None: inferred from the readings (see the module docstring).
    """
    def joules(out: EnergySeries, a: tuple[float, float], b: tuple[float, float]) -> float:
        d = b[1] - a[1]
        if d >= 0:
            return d / 1e6
        modulus = range_uj if range_uj else (1 << 32 if a[1] < (1 << 32) else 1 << 64)
        dt = b[0] - a[0]
        if dt > 0 and (d + modulus) / 1e6 / dt <= MAX_PLAUSIBLE_W:
            out.wraps += 1
            return (d + modulus) / 1e6
        out.resets += 1
        out.lost_after.add(len(out.t) - 1)
        return 0.0
    return _cumulate(source, t, raw_uj, joules)


def series_from_power(source: str, t: Sequence[float], watts: Sequence[float | None]) -> EnergySeries:
    """Cumulative energy from power readings (W): the trapezoid integral (NVIDIA ``power.draw``)."""
    return _cumulate(source, t, watts, lambda out, a, b: (b[0] - a[0]) * (a[1] + b[1]) / 2)


@dataclass(frozen=True)
class Window:
    """One bench window on the host's clock: ``label`` (``cold 2``), ``phase``, ``index`` (the
    request's position in ``bench.jsonl``), ``t0``/``t1`` (s) and the output tokens it produced."""

    label: str
    phase: str
    index: int | None
    t0: float
    t1: float
    output_tokens: int


def _flagged_time(t: Sequence[float], flags: Sequence[bool | None], a: float, b: float) -> float | None:
    """Seconds of ``[a, b]`` during which the flag read at the last reading before was true."""
    if not t:
        return None
    total = 0.0
    known = False
    for i, (ti, f) in enumerate(zip(t, flags)):
        nxt = t[i + 1] if i + 1 < len(t) else ti
        lo, hi = max(a, ti), min(b, nxt)
        if hi <= lo or f is None:
            continue
        known = True
        if f:
            total += hi - lo
    if not known and not any(ti <= b for ti in t):
        return None
    return total


def _mean_in(t: Sequence[float], values: Sequence[float | None], a: float, b: float
             ) -> tuple[float | None, float | None, float | None]:
    """Time-weighted mean, min and max of a step signal over ``[a, b]``."""
    acc = dur = 0.0
    seen: list[float] = []
    for i, (ti, v) in enumerate(zip(t, values)):
        if v is None:
            continue
        nxt = t[i + 1] if i + 1 < len(t) else ti
        lo, hi = max(a, ti), min(b, nxt)
        if hi > lo:
            acc += v * (hi - lo)
            dur += hi - lo
            seen.append(v)
    if dur <= 0:
        return None, None, None
    return acc / dur, min(seen), max(seen)


@dataclass
class Signals:
    """Step signals sampled on the host (times in s, host clock).

    ``freq``: one frequency signal (MHz); ``throttle``: the overall throttle status;
    ``reasons``: reason name -> its status signal.
    """

    t: list[float] = field(default_factory=list)
    freq: list[float | None] = field(default_factory=list)
    throttle: list[bool | None] = field(default_factory=list)
    reasons: dict[str, list[bool | None]] = field(default_factory=dict)


def measure_windows(windows: Iterable[Window], energy: Sequence[EnergySeries], signals: Signals | None,
                    *, clock_uncertainty_s: float = 0.0) -> list[WindowFigures]:
    """Energy, power, throttling and clocks of each window.

    ``energy``: the series of one domain (several are summed: two xe cards, RAPL package and
    DRAM). A window outside the readings, or one a reset cut into, gets no energy and says so.
    """
    out = []
    for w in windows:
        dur = max(w.t1 - w.t0, 0.0)
        fig = WindowFigures(label=w.label, phase=w.phase, index=w.index, duration_s=round(dur, 6),
                            output_tokens=w.output_tokens)
        if energy:
            between = [s.between(w.t0, w.t1, clock_uncertainty_s) for s in energy]
            parts = [p for p in between if p is not None]
            if len(parts) < len(between):
                fig.problems.append("the window is not inside the telemetry readings")
            elif not all(p[2] for p in parts):
                fig.problems.append("an energy counter was reset inside the window: energy not measured")
            else:
                est = sum(p[0] for p in parts)
                err = sum(p[1] for p in parts)
                power = est / dur if dur > 0 else None
                if power is not None:
                    err += 2 * clock_uncertainty_s * power
                fig.energy_j, fig.energy_error_j = est, err
                fig.mean_power_w = power
                if w.output_tokens > 0:
                    fig.j_per_token = est / w.output_tokens
        if signals is not None and signals.t:
            fig.throttled_s = _flagged_time(signals.t, signals.throttle, w.t0, w.t1) \
                if any(f is not None for f in signals.throttle) else None
            for name, flags in signals.reasons.items():
                s = _flagged_time(signals.t, flags, w.t0, w.t1)
                if s:
                    fig.throttle_reasons_s[name] = round(s, 6)
            if any(f is not None for f in signals.freq):
                fig.freq_mhz_mean, fig.freq_mhz_min, fig.freq_mhz_max = _mean_in(
                    signals.t, signals.freq, w.t0, w.t1)
        out.append(fig)
    return out


def summarize(figures: Sequence[WindowFigures]) -> PhaseFigures:
    """Windows together: sums, and means weighted by time; energy only when every window has it."""
    dur = sum(f.duration_s for f in figures)
    tokens = sum(f.output_tokens for f in figures)
    out = PhaseFigures(windows=len(figures), duration_s=round(dur, 6), output_tokens=tokens)
    if figures and all(f.energy_j is not None for f in figures):
        out.energy_j = sum(f.energy_j for f in figures)  # type: ignore[misc]
        out.energy_error_j = sum(f.energy_error_j or 0.0 for f in figures)
        out.mean_power_w = out.energy_j / dur if dur > 0 else None
        out.j_per_token = out.energy_j / tokens if tokens else None
    if figures and all(f.throttled_s is not None for f in figures):
        out.throttled_s = sum(f.throttled_s for f in figures)  # type: ignore[misc]
        out.throttled_fraction = out.throttled_s / dur if dur > 0 else None
    for f in figures:
        for name, s in f.throttle_reasons_s.items():
            out.throttle_reasons_s[name] = out.throttle_reasons_s.get(name, 0.0) + s
    weighted = [(f.freq_mhz_mean, f.duration_s) for f in figures if f.freq_mhz_mean is not None]
    if weighted and sum(d for _, d in weighted) > 0:
        out.freq_mhz_mean = sum(v * d for v, d in weighted) / sum(d for _, d in weighted)
    return out


# --------------------------------------------------------------------------- the run's record


def _domains(raw) -> tuple[str | None, list[EnergySeries], list[str]]:
    """Pick the energy domain: the xe card(s), else NVIDIA's power, else RAPL."""
    xe = [(c, v) for c, v in raw.column_values("energy_uj") if c.source.startswith("xe ")]
    rapl = [(c, v) for c, v in raw.column_values("energy_uj") if c.source.startswith("rapl ")]
    if xe:
        return "xe card", [unwrap_counter(c.source, raw.t, v, range_uj=c.range_uj) for c, v in xe], \
            [c.source for c, _ in xe]
    if raw.nvidia:
        t = [x[0] for x in raw.nvidia]
        return "nvidia power.draw", [series_from_power("nvidia power.draw", t, [x[1] for x in raw.nvidia])], \
            ["nvidia power.draw"]
    if rapl:
        return "rapl", [unwrap_counter(c.source, raw.t, v, range_uj=c.range_uj) for c, v in rapl], \
            [c.source for c, _ in rapl]
    return None, [], []


def _signals(raw) -> Signals | None:
    if raw.nvidia:
        sig = Signals(t=[x[0] for x in raw.nvidia], freq=[x[2] for x in raw.nvidia])
        sig.throttle = [None if x[3] is None else bool(x[3] & ~NVIDIA_NOT_THROTTLE) for x in raw.nvidia]
        for bit, name in NVIDIA_REASONS.items():
            sig.reasons[name] = [None if x[3] is None else bool(x[3] & bit) for x in raw.nvidia]
        return sig
    freq = raw.column_values("freq_mhz")
    thr = raw.column_values("throttle")
    if not freq and not thr:
        return None
    sig = Signals(t=list(raw.t))
    sig.freq = list(freq[0][1]) if freq else [None] * len(raw.t)
    sig.throttle = [None if v is None else bool(v) for v in thr[0][1]] if thr else [None] * len(raw.t)
    for c, v in raw.column_values("reason"):
        sig.reasons[c.source] = [None if x is None else bool(x) for x in v]
    return sig


def telemetry_record(raw, windows: Sequence[Window], raw_document: dict[str, Any] | None = None
                     ) -> TelemetryRecord:
    """The run's :class:`TelemetryRecord` from a :class:`servedeck.host.telemetry.RawTelemetry`
    and the bench windows, already on the host's clock."""
    source, series, names = _domains(raw)
    rec = TelemetryRecord(energy_source=source, energy_columns=names, problems=list(raw.problems),
                          raw=raw_document or {})
    rec.wraps = sum(s.wraps for s in series)
    rec.resets = sum(s.resets for s in series)
    rec.gaps = sum(s.gaps for s in series)
    if source is None:
        rec.problems.append("no energy counter could be read on the host: energy per token is not measured")
    if rec.wraps:
        rec.problems.append(f"the energy counter wrapped around {rec.wraps} time(s); each wrap was added back")
    if rec.resets:
        rec.problems.append(f"the energy counter was reset {rec.resets} time(s); the energy of those sample "
                            "intervals is lost, and windows that span one have no energy")
    if rec.gaps:
        rec.problems.append(f"{rec.gaps} energy reading(s) were unreadable; the neighbouring readings bridge them")
    signals = _signals(raw)
    rec.windows = measure_windows(windows, series, signals, clock_uncertainty_s=raw.clock_uncertainty_s)
    for phase in dict.fromkeys(w.phase for w in rec.windows):
        rec.phases[phase] = summarize([w for w in rec.windows if w.phase == phase])
    if windows:
        span = Window("span", "span", None, min(w.t0 for w in windows), max(w.t1 for w in windows),
                      sum(w.output_tokens for w in windows))
        rec.span = measure_windows([span], series, signals, clock_uncertainty_s=raw.clock_uncertainty_s)[0]
    return rec
