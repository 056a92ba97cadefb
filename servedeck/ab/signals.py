"""Headroom and gate signals for decisions: capacity, roofline, energy, quality.

The load, quality and energy stages measure what a single-stream benchmark cannot: how many
concurrent requests a configuration holds within its SLO and what bounds it (capacity), how far
a phase runs below the card's memory-bandwidth or matrix roof (roofline), what a token costs in
energy and whether the card throttled (energy), whether the output still passes the quality
gate. The drafted verdict (:mod:`servedeck.ab.draft`), ``invoke next`` (:mod:`servedeck.ab.next`)
and ``invoke tune`` (through both) read them here, as :class:`Signal` objects, and nowhere else:

* **of a run** (:func:`read_signals`): every registered reader (:func:`register_reader`) reads
  its stage's typed run files. Shipped readers: :func:`capacity_signals` (``capacity.json``,
  ``load.json``), :func:`roofline_signals` (``roofline.json``), :func:`energy_signals`
  (``telemetry.json``);
* **of a comparison** (:func:`comparison_signals`): what the A/B comparison decided beside its
  judged metrics: the quality gate (:mod:`servedeck.ab.quality`) and the capacity verdict under
  the SLO (:mod:`servedeck.ab.load`).

How each is used:

* ``capacity``: a verdict on a load-dependent knob no longer ends in "unless a multi-request
  workload shows otherwise" once the arms were compared under load; the capacity verdict
  (``higher``/``lower``) is a gain or a loss of the verdict. Of a run, the **bound** at the
  saturation point (:data:`BOUNDS`) tells ``next`` which load-dependent knob can raise the
  capacity (the knowledge base's ``relieves``) and which cannot;
* ``roofline``: ``headroom`` = ``1/share − 1``, the most a phase's rate can still grow before its
  roof (a decode at 80 % of its memory-bandwidth roof can get 25 % faster, no more), bounds the
  expected gain on ``metric`` (``warm decode_tok_s``);
* ``energy``: J/token, mean power and the share of time throttled, per phase: a card throttled by
  its power limit makes the power cap the lever (``next``'s reasons);
* ``quality``: a gate that blocks (``passed`` False) makes the verdict ``revert`` whatever the speed.

A reader that fails is skipped: a signal is context, never a reason to fail a decision.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from servedeck.ab.stats import BENCH_PHASES
from servedeck.errors import ServedeckError
from servedeck.runs import store

SignalKind = Literal["capacity", "roofline", "energy", "quality"]

BOUNDS = {
    "kv_bound": "the KV pool (requests preempted, or the cache full while requests waited)",
    "queue_bound": "the scheduler's admission (requests waited while the KV cache had room)",
    "compute_bound": "the step rate (throughput flat, no queue or preemption)",
}
"""What bounds a capacity at its saturation point: the signal name and its words."""
KV_FULL = 0.9
"""KV-cache usage (a fraction) at or above which a queue counts as the KV pool's bound."""
THROTTLED = 0.1
"""A phase throttled for at least this share of its time is called throttled."""


class Signal(BaseModel):
    """One signal of one run or one comparison.

    Attributes:
        kind: ``capacity`` | ``roofline`` | ``energy`` | ``quality``.
        name: what it measures: ``capacity`` (requests in flight or requests/s under the SLO),
            one of :data:`BOUNDS`, ``decode_share``/``prefill_share`` (a fraction of the roof),
            ``j_per_token`` (J), ``throttled``/``power_throttled`` (a fraction of the time), ``gate``.
        phase: the bench phase or load level it belongs to, when any.
        metric: the judged metric it bounds (``warm decode_tok_s``), when any.
        value: the figure (its unit in ``name``), or None.
        headroom: the relative gain left before the roof (0.25 = 25 % more at most), or None.
        passed: a gate's outcome, or None.
        verdict: a comparison's decision (``higher``, ``lower``, ``same bracket``, ``no verdict``,
            ``pass``, ``gated``), or None.
        text: one clause for reports (``warm decode at 80 % of the memory-bandwidth roof``).
    """

    model_config = ConfigDict(extra="forbid")
    kind: SignalKind
    name: str
    phase: str | None = None
    metric: str | None = None
    value: float | None = None
    headroom: float | None = None
    passed: bool | None = None
    verdict: str | None = None
    text: str


SignalReader = Callable[[Path], list[Signal]]
"""Reads one stage's signals from a run directory ([] when the run has none)."""

READERS: list[SignalReader] = []


def register_reader(reader: SignalReader) -> SignalReader:
    """Register a stage's signal reader (usable as a decorator); registering twice is a no-op."""
    if reader not in READERS:
        READERS.append(reader)
    return reader


def read_signals(run_dir: Path, kind: SignalKind | None = None) -> list[Signal]:
    """Every registered reader's signals of ``run_dir`` (of ``kind`` only, when given), in the
    readers' order. A reader that fails is skipped (module docstring)."""
    out: list[Signal] = []
    for reader in READERS:
        try:
            found = reader(Path(run_dir))
        except Exception:  # noqa: BLE001 - see docstring
            continue
        out += [s for s in found if kind is None or s.kind == kind]
    return out


def _read(run_dir: Path, run_file) -> Any:
    try:
        return store.read(run_dir, run_file)
    except ServedeckError:
        return None


# --------------------------------------------------------------------------------------------
# Readers of one run
# --------------------------------------------------------------------------------------------

@register_reader
def capacity_signals(run_dir: Path) -> list[Signal]:
    """The capacity under the SLO (``capacity.json``) and what bounds it at the saturation point
    (the lowest load level flagged in ``capacity.json`` or ``load.json``: preemption, or a queue
    with the KV cache at least :data:`KV_FULL` full → ``kv_bound``; a queue with room in the
    cache → ``queue_bound``; throughput flat alone → ``compute_bound``)."""
    out: list[Signal] = []
    cap = _read(run_dir, store.CAPACITY)
    if cap is not None:
        out.append(Signal(kind="capacity", name="capacity", value=cap.capacity,
                          text=cap.reading or f"capacity {cap.capacity} {cap.unit}"))
    summary = _read(run_dir, store.LOAD_SUMMARY)
    levels = sorted(summary.levels, key=lambda lv: lv.level.value) if summary is not None else []
    if levels and not any(lv.saturation for lv in levels):
        from servedeck.bench.capacity import saturation_flags
        saturation_flags(levels)  # a plain load benchmark records its levels unflagged
    sat = next((lv for lv in levels if lv.saturation), None)
    if sat is None:
        return out
    flags = list(sat.saturation)
    usage = sat.server.kv_cache_usage_max if sat.server is not None else None
    if "preemption" in flags or ("queue" in flags and usage is not None and usage >= KV_FULL):
        name = "kv_bound"
    elif "queue" in flags:
        name = "queue_bound"
    elif "throughput flat" in flags:
        name = "compute_bound"
    else:
        return out
    seen = f"{', '.join(flags)}" + (f"; KV cache at most {usage:.0%} full" if usage is not None else "")
    out.append(Signal(kind="capacity", name=name, phase=sat.level.label, value=sat.level.value,
                      text=f"at {sat.level.label} the load is bound by {BOUNDS[name]} ({seen})"))
    return out


@register_reader
def roofline_signals(run_dir: Path) -> list[Signal]:
    """Each phase's median decode share of the memory-bandwidth roof and prefill share of the
    matrix roof (``roofline.json``), with the headroom they leave (a share above 1 is a
    measurement problem: no headroom is claimed from it)."""
    roof = _read(run_dir, store.ROOFLINE)
    out: list[Signal] = []
    for phase, ph in (roof.phases.items() if roof is not None else []):
        if phase not in BENCH_PHASES:
            continue
        for name, metric, what in (("decode_share", "decode_tok_s", "memory-bandwidth"),
                                   ("prefill_share", "prefill_tok_s", "matrix")):
            share = getattr(ph, name)
            if share is None or share <= 0:
                continue
            head = 1 / share - 1 if share <= 1 else None
            out.append(Signal(kind="roofline", name=name, phase=phase, metric=f"{phase} {metric}", value=share,
                              headroom=head, text=f"{phase} {name.split('_')[0]} at {share:.0%} of the {what} roof"
                              + ("" if head is not None else " (above the roof: a measurement problem)")))
    return out


@register_reader
def energy_signals(run_dir: Path) -> list[Signal]:
    """Each phase's J/token and mean power, and the share of its time the card throttled with
    the reasons (``telemetry.json``)."""
    tel = _read(run_dir, store.TELEMETRY)
    out: list[Signal] = []
    for phase, ph in (tel.phases.items() if tel is not None else []):
        if phase not in BENCH_PHASES:
            continue
        if ph.j_per_token is not None:
            mean = f" at {ph.mean_power_w:.0f} W mean" if ph.mean_power_w is not None else ""
            out.append(Signal(kind="energy", name="j_per_token", phase=phase, metric=f"{phase} energy_j_per_token",
                              value=ph.j_per_token, text=f"{phase}: {ph.j_per_token:.3g} J/token{mean}"))
        if ph.throttled_fraction is not None and ph.throttled_fraction >= THROTTLED:
            reasons = sorted(ph.throttle_reasons_s, key=lambda r: -ph.throttle_reasons_s[r])
            power = any(_power_reason(r) for r in reasons)
            out.append(Signal(kind="energy", name="power_throttled" if power else "throttled", phase=phase,
                              value=ph.throttled_fraction,
                              text=f"{phase}: the card throttled {ph.throttled_fraction:.0%} of the time "
                                   f"({', '.join(reasons) or 'reason unknown'})"))
    return out


def _power_reason(reason: str) -> bool:
    """A throttle reason that is a power limit: the xe driver's ``pl1``/``pl2``/``pl4``
    (``throttle/reason_pl*``), NVML's ``sw_power_cap``/``hw_power_brake``."""
    r = reason.lower()
    return r.startswith("pl") or "power" in r


def power_limited(signals: list[Signal]) -> Signal | None:
    """The first ``power_throttled`` signal (the card throttled at a power limit), or None."""
    return next((s for s in signals if s.name == "power_throttled"), None)


def bound_of(signals: list[Signal]) -> Signal | None:
    """The capacity bound among ``signals`` (:data:`BOUNDS`), or None."""
    return next((s for s in signals if s.kind == "capacity" and s.name in BOUNDS), None)


# --------------------------------------------------------------------------------------------
# Signals of a comparison
# --------------------------------------------------------------------------------------------

def comparison_signals(c) -> list[Signal]:
    """What a comparison (:class:`servedeck.ab.stats.Comparison`) decided beside its judged
    metrics: the quality gate on the candidate arm (``gate`` when B is the candidate, ``gate A``
    with ``--quality-reference B``; ``passed`` False when it blocks; none when not checked) and
    the capacity verdict under the SLO (``verdict`` ``higher``/``lower``: B holds more/less load
    than A)."""
    out: list[Signal] = []
    quality = getattr(c, "quality", None)
    gate = getattr(quality, "gate", None)
    if gate is not None and gate.status != "not checked":
        out.append(Signal(kind="quality", name="gate" if gate.arm == "B" else f"gate {gate.arm}",
                          passed=not gate.blocks, verdict=gate.status, text=f"quality gate {gate.summary()}"))
    load = getattr(c, "load", None)
    if load is not None and load.capacity is not None:
        from servedeck.ab.load import capacity_sentence
        v = load.capacity
        out.append(Signal(kind="capacity", name="capacity", verdict=v.verdict, value=v.capacity_b,
                          text=capacity_sentence(load) or f"capacity {v.verdict}: {v.reason}"))
    return out
