"""Headroom and gate signals of a run, for decisions: capacity, roofline, quality.

The load, quality and energy stages measure what a single-stream benchmark cannot: how many
concurrent requests a configuration holds within its latency targets (capacity), how far a
phase runs below the card's memory-bandwidth or compute roof (roofline), whether the output
still passes the quality gate. Each stage registers a reader of its own typed run files
(:func:`register_reader`); the drafted verdict (:mod:`servedeck.ab.draft`), ``invoke next``
(:mod:`servedeck.ab.next`) and ``invoke tune`` read every registered signal of a run through
:func:`read_signals` and use it where the knowledge base alone would guess:

* ``capacity``: a verdict on a load-dependent knob (``batch-budget``, ``max-seqs``) no longer
  ends in "unless a multi-request workload shows otherwise": the capacity figures decide it;
* ``roofline``: ``headroom`` (the share of the roof left, 0.3 = 30 %) bounds the expected
  gain of a speed knob on that phase (a phase at its roof cannot get faster by scheduling);
* ``quality``: a failed gate (``passed`` False) makes the verdict ``revert`` whatever the speed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

SignalKind = Literal["capacity", "roofline", "quality"]


class Signal(BaseModel):
    """One signal of one run.

    Attributes:
        kind: ``capacity`` | ``roofline`` | ``quality``.
        name: what it measures (``max_concurrency_at_slo``, ``decode_bandwidth``, ``gate``).
        phase: the bench phase or load level it belongs to, when any.
        value: the figure (its unit in ``name``), or None.
        headroom: the relative room left below the roof or capacity limit (0..1), or None.
        passed: a gate's outcome, or None.
        text: one clause for reports (``decode at 71 % of the memory-bandwidth roof``).
    """

    model_config = ConfigDict(extra="forbid")
    kind: SignalKind
    name: str
    phase: str | None = None
    value: float | None = None
    headroom: float | None = None
    passed: bool | None = None
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
    """Every registered reader's signals of ``run_dir`` (of ``kind`` only, when given). A reader
    that fails is skipped: a signal is context, never a reason to fail a decision."""
    out: list[Signal] = []
    for reader in READERS:
        try:
            found = reader(Path(run_dir))
        except Exception:  # noqa: BLE001 - see docstring
            continue
        out += [s for s in found if kind is None or s.kind == kind]
    return out
