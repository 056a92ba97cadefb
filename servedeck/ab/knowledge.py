"""The shipped knowledge base of serving knobs (``servedeck/ab/knobs.yaml``): what each knob is
known to trade, where that is known from, and the values worth trying.

Read by the drafted hypothesis and verdict (:mod:`servedeck.ab.draft`), by ``invoke next``
(:mod:`servedeck.ab.next`) and ``invoke tune`` (:mod:`servedeck.ab.tune`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servedeck.errors import ServedeckError

KNOBS_FILE = Path(__file__).with_name("knobs.yaml")

Category = Literal["speed", "quality", "capacity", "energy"]


class Direction(BaseModel):
    """What moving a knob one way is expected to do (``expect``) and what to watch."""

    model_config = ConfigDict(extra="forbid")
    expect: str
    watch: str


class Knob(BaseModel):
    """One knob (field meanings: the header of ``knobs.yaml``)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    title: str
    profile_path: str
    variables: list[str]
    category: Category
    trades: str
    raise_: Direction = Field(alias="raise")
    lower: Direction
    load_dependent: bool = False
    load_note: str | None = None
    moves_compile_range: bool = False
    addresses_warnings: list[str] = Field(default_factory=list)
    values: list[Any] = Field(default_factory=list)
    prior_gain: dict[str, float] = Field(default_factory=dict)
    quality_direction: Literal["raise", "lower"] | None = None
    default: Any = None
    relieves: dict[Literal["raise", "lower"], Literal["kv_bound", "queue_bound"]] = Field(default_factory=dict)
    capacity_gain: Literal["ratio"] | float | None = None
    sources: list[str] = Field(min_length=1)

    def relieved(self, a: Any, b: Any) -> str | None:
        """The capacity bound (``kv_bound``, ``queue_bound``; :data:`servedeck.ab.signals.BOUNDS`)
        that ``a`` → ``b`` relieves, or None."""
        s = self.step(a, b)
        return self.relieves.get("raise" if s > 0 else "lower") if s else None

    def capacity_gain_of(self, a: Any, b: Any) -> float | None:
        """The most ``a`` → ``b`` can raise a capacity held by the bound it relieves (relative):
        ``ratio``: ``b / a − 1`` (an admission limit); a number: that gain (sourced); None: unknown."""
        if self.capacity_gain == "ratio":
            ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (a, b))
            return b / a - 1 if ok else None
        return self.capacity_gain

    def step(self, a: Any, b: Any) -> int:
        """+1 when ``a`` → ``b`` goes up this knob's ladder (a larger number, a switch turned on,
        a later ladder value), -1 down, 0 when the two do not order."""
        return order(a, b, self.values)

    def direction(self, a: Any, b: Any) -> Direction | None:
        """What ``a`` → ``b`` is expected to do: ``raise`` going up (:meth:`step`), ``lower``
        going down, None when the values do not order."""
        s = self.step(a, b)
        return self.raise_ if s > 0 else self.lower if s < 0 else None

    def favours_quality(self, a: Any, b: Any) -> bool:
        """True when ``a`` → ``b`` moves a quality knob the way that favours output quality."""
        s = self.step(a, b)
        return bool(self.quality_direction and s and (s > 0) == (self.quality_direction == "raise"))


OFF_VALUES = (None, False, 0, "0", "false", "off", "auto", "none")


def _bpw(value: Any) -> float | None:
    """Bits per weight named in a weights directory (``qwen3.8-27b-exl3-4.00bpw`` → 4.0), or None."""
    import re
    m = re.search(r"(\d+(?:\.\d+)?)\s*bpw", value) if isinstance(value, str) else None
    return float(m.group(1)) if m else None


def order(a: Any, b: Any, ladder: list[Any] | None = None) -> int:
    """+1 when ``b`` is above ``a``, -1 below, 0 when they do not order: numbers by value, both on
    the ladder by position, else a switch (off: None, False, 0, ``"0"``, ``"auto"``) turned on or off."""
    numeric = (int, float)
    if isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool) and not isinstance(b, bool):
        return (b > a) - (b < a)
    bits = [_bpw(v) for v in (a, b)]
    if bits[0] is not None and bits[1] is not None:
        return (bits[1] > bits[0]) - (bits[1] < bits[0])
    switch = any(isinstance(v, bool) or v is None for v in (a, b))
    if not switch and ladder and a in ladder and b in ladder:
        return (ladder.index(b) > ladder.index(a)) - (ladder.index(b) < ladder.index(a))
    on_a = (a.lower() if isinstance(a, str) else a) not in OFF_VALUES
    on_b = (b.lower() if isinstance(b, str) else b) not in OFF_VALUES
    return (on_b > on_a) - (on_b < on_a)


class KnowledgeBase(BaseModel):
    """``knobs.yaml``."""

    model_config = ConfigDict(extra="forbid")
    knobs: list[Knob]

    def for_variable(self, name: str) -> Knob | None:
        """The knob an A/B variable (``max_num_batched_tokens``, ``env.EXL3_INT8_PREFILL``) belongs
        to, or None."""
        for knob in self.knobs:
            if name in knob.variables or name == knob.profile_path or name == f"profile.{knob.profile_path}":
                return knob
        return None

    def by_id(self, knob_id: str) -> Knob:
        """The knob ``knob_id``.

        Raises:
            ServedeckError: no such knob (the message lists them).
        """
        for knob in self.knobs:
            if knob.id == knob_id or knob.profile_path == knob_id:
                return knob
        raise ServedeckError(f"unknown knob {knob_id!r}", field="knob",
                             hint=f"known: {', '.join(k.id for k in self.knobs)}")


@functools.lru_cache(maxsize=4)
def load_knowledge(path: Path = KNOBS_FILE) -> KnowledgeBase:
    """The knowledge base (read once per process).

    Raises:
        ServedeckError: the file is missing or does not match :class:`KnowledgeBase` (file and
            field named).
    """
    from servedeck.yamlio import load_data
    try:
        data = load_data(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ServedeckError(f"cannot read the knowledge base: {exc.strerror}", file=str(path)) from None
    try:
        return KnowledgeBase.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ServedeckError(f"invalid knowledge base: {first['msg']}", file=str(path),
                             field=".".join(str(p) for p in first["loc"]) or None) from None
