"""Load profiles: when a load level sends its requests.

Kinds (the names ``vllm bench serve`` and GuideLLM use for the same ideas):

* ``concurrency`` (closed loop): ``c`` requests in flight at all times; each finished request
  is followed at once by the next (``vllm bench serve --max-concurrency c --request-rate inf``,
  GuideLLM's ``concurrent``). Levels are integers ≥ 1.
* ``constant``: requests sent at fixed intervals of ``1 / rate`` s (GuideLLM ``constant``).
* ``poisson``: exponential intervals of mean ``1 / rate`` s, drawn from the workload's seed
  and the level's index (``vllm bench serve --request-rate r`` with burstiness 1, GuideLLM
  ``poisson``).
* ``ramp``: one level whose rate rises linearly from ``start`` to ``end`` requests/s over its
  requests (``vllm bench serve --ramp-up-strategy linear``).

Open-loop kinds (``constant``, ``poisson``, ``ramp``) may cap the requests in flight
(``max_concurrency``): a request due while the cap is reached waits in the client, and that
wait is recorded (``queued_s``), as ``vllm bench serve`` records its client queue time.

The text form (command line, workload files): ``concurrency:1,2,4,8``, ``constant:2,4``,
``poisson:0.5,1,2``, ``ramp:1-20``; ``@N`` after a rate profile caps the concurrency
(``poisson:4,8@16``).

A level (:class:`~servedeck.runs.records.LoadLevel`) is run-file content (``load.json``), so its
model lives in :mod:`servedeck.runs.records`; its arrival times are :func:`arrivals`.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servedeck.errors import ServedeckError
from servedeck.runs.records import LoadKind, LoadLevel

__all__ = ["KINDS", "SEARCHABLE", "LoadKind", "LoadLevel", "LoadProfile", "arrivals"]

KINDS: tuple[str, ...] = ("concurrency", "constant", "poisson", "ramp")
SEARCHABLE = ("concurrency", "constant", "poisson")
"""Kinds a capacity search can vary (one number per level)."""


def arrivals(level: LoadLevel, n: int, seed: int) -> list[float] | None:
    """Send offsets (s from the level's start) of ``n`` requests; None for a closed loop
    (``concurrency``: each request follows the previous one of its slot).

    ``poisson`` draws exponential intervals from ``numpy.random.default_rng([seed, round(value × 1000)])``,
    so a level's arrivals depend only on the seed and the rate.
    """
    if level.kind == "concurrency":
        return None
    if level.kind == "constant":
        return [i / level.value for i in range(n)]
    if level.kind == "poisson":
        import numpy as np
        rng = np.random.default_rng([seed, int(round(level.value * 1000))])
        gaps = rng.exponential(1.0 / level.value, size=n)
        gaps[0] = 0.0
        return [float(t) for t in np.cumsum(gaps)]
    # ramp: request i is sent 1/r_i after request i-1, r_i rising linearly start -> end
    out, t = [], 0.0
    for i in range(n):
        if i:
            rate = level.start_rps + (level.value - level.start_rps) * i / max(1, n - 1)  # type: ignore[operator]
            t += 1.0 / rate
        out.append(t)
    return out


class LoadProfile(BaseModel):
    """A list of load levels of one kind, run in order (lowest first)."""

    model_config = ConfigDict(extra="forbid")
    kind: LoadKind
    levels: list[LoadLevel] = Field(min_length=1)

    @property
    def text(self) -> str:
        """The text form (module docstring)."""
        first = self.levels[0]
        cap = f"@{first.max_concurrency}" if first.max_concurrency else ""
        if self.kind == "ramp":
            return f"ramp:{first.start_rps:g}-{first.value:g}{cap}"
        return f"{self.kind}:" + ",".join(f"{lv.value:g}" for lv in self.levels) + cap

    @classmethod
    def parse(cls, text: str) -> "LoadProfile":
        """Read the text form (module docstring).

        Raises:
            ServedeckError: unknown kind, a value that is not a positive number, a fractional
                concurrency, or a ramp that is not ``START-END``.
        """
        hint = "e.g. concurrency:1,2,4,8 / constant:2,4 / poisson:1,2@16 / ramp:1-20"
        kind, sep, rest = text.strip().partition(":")
        kind = kind.strip()
        if not sep or kind not in KINDS:
            raise ServedeckError(f"unknown load profile {text!r}", field="--load", hint=hint)
        cap = None
        if "@" in rest:
            rest, _, cap_text = rest.partition("@")
            if not re.fullmatch(r"\s*\d+\s*", cap_text) or int(cap_text) < 1:
                raise ServedeckError(f"max concurrency {cap_text!r} in {text!r} is not a whole number ≥ 1",
                                     field="--load", hint=hint)
            if kind == "concurrency":
                raise ServedeckError(f"{text!r}: @N caps rate profiles, not concurrency levels",
                                     field="--load", hint=hint)
            cap = int(cap_text)
        try:
            if kind == "ramp":
                parts = re.split(r"(?<![eE])-", rest, maxsplit=1)  # not the sign of an exponent (1e-5-20)
                if len(parts) != 2:
                    raise ValueError("a ramp is START-END requests/s")
                start, end = parts
                levels = [LoadLevel(kind="ramp", start_rps=float(start), value=float(end), max_concurrency=cap)]
            else:
                values = [float(v) for v in rest.split(",") if v.strip()]
                if not values:
                    raise ValueError("no levels given")
                if any(not math.isfinite(v) for v in values):
                    raise ValueError("levels must be finite numbers")
                levels = [LoadLevel(kind=kind, value=v, max_concurrency=cap) for v in values]
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"]
            raise ServedeckError(f"invalid load profile {text!r}: {msg}", field="--load", hint=hint) from None
        except ValueError as exc:
            msg = str(exc)
            raise ServedeckError(f"invalid load profile {text!r}: {msg}", field="--load", hint=hint) from None
        return cls(kind=kind, levels=levels)
