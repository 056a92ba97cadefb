"""Capacity: the highest load that meets an SLO, where the server saturates, and the knee.

Pure code over :class:`servedeck.runs.records.LevelResult` lists; the client drives it
(:func:`servedeck.bench.loadclient.run_capacity`).

**Search** (:class:`CapacitySearch`), over one load kind (concurrency, or a constant/Poisson
rate): start at the given level; *grow* by ``growth`` (default ×4) while levels meet the SLO
(shrink by it while they do not, down to concurrency 1, or to a rate at which requests seldom
overlap: rate × mean end-to-end latency below 0.1), then *bisect* the bracket
``[lo, hi)`` between the highest level that met it and the lowest that did not, at the
geometric midpoint (rounded for concurrency), until the answer is as precise as asked: the
geometric midpoint of the bracket is within ``±precision`` of every value in it
(``hi / lo ≤ (1 + precision)²``; for concurrency the bracket is ``[lo, hi − 1]`` and a bracket of
one integer is exact), or ``max_levels`` levels have run. A level *meets* the SLO for steering
when its share of good requests is at least the SLO's percentile (the point estimate); the
record keeps each level's interval and state (met / violated / undecided,
:mod:`servedeck.bench.slo`), and the answer says which ends of the bracket the samples carry.
A level delivered late (below: its latencies are the host's front end's, which on a busy host
comes and goes between runs) steers nothing the first time: it runs once more, and that run
steers, late or not; the answer names such levels.

**Saturation** (:func:`saturation_flags`), per level: ``queue`` (the server's
``vllm:num_requests_waiting`` averaged over the level ≥ 0.5), ``preemption``
(``vllm:num_preemptions_total`` grew), ``throughput flat`` (load × r over the next lower level,
output throughput up by less than 10 % of that while the median end-to-end latency rose by more
than 25 %), ``behind`` (an open-loop level completed fewer than 90 % of the requests/s it
offered), ``late delivery`` (the level's streams reached the client well after the server
handled their first tokens, :func:`servedeck.bench.loadresult.late_delivery`: the host's front end,
not the engine, set its latencies). The saturation point is the lowest level with a flag.

**Knee** (:func:`knee`): the point of maximum curvature of output throughput against load,
by Kneedle (Satopää, Albrecht, Irwin, Raghavan, "Finding a 'Kneedle' in a Haystack", ICDCS
workshops 2011): both axes scaled to [0, 1], the knee is the measured level farthest above the
line from the first to the last point (none when no point is more than 0.05 above it: no bend).

**KV check** (:func:`kv_check`): the plan's KV prediction (a run's ``kv.json``,
:func:`servedeck.vllm.kv.compare_with_measured`) says how many requests of the workload's size
the pool holds at once, ``floor(pool_tokens / (⌈tokens/block⌉ × block))``; the levels say at
which concurrency the server began to queue or preempt. They agree when every level at or below
the predicted count ran without preemption or queue, and the first level above it queued or
preempted.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from servedeck.bench.loadresult import late_delivery
from servedeck.errors import ServedeckError
from servedeck.runs.records import CapacityResult, KvCheck, LevelResult, LoadLevel, SearchStep, Slo

DEFAULT_PRECISION = 0.1
DEFAULT_MAX_LEVELS = 8
DEFAULT_GROWTH = 4.0
QUEUE_WAITING_MEAN = 0.5
FLAT_THROUGHPUT_SHARE = 0.1
CLIMBING_LATENCY = 0.25
BEHIND_SHARE = 0.9
SEQUENTIAL_IN_FLIGHT = 0.1
"""A rate search stops shrinking below a level whose rate × mean end-to-end latency (requests
in flight on average) was under this: its requests already ran one at a time."""
KNEE_MIN_DISTANCE = 0.05


def level_passes(result: LevelResult) -> bool:
    """Whether a level meets its SLO for steering the search: the share of good requests is at
    least the SLO's percentile (the point estimate).

    Raises:
        ServedeckError: the level was run without an SLO.
    """
    if result.slo is None:
        raise ServedeckError("a capacity search needs an SLO", field="--slo",
                             hint="e.g. --slo ttft_s=2,tpot_s=0.1,p=90")
    share = result.slo.attainment.value
    return share is not None and share >= result.slo.slo.q


class CapacitySearch:
    """The grow-then-bisect search as a state machine: ask :meth:`next_level`, run it, hand the
    result to :meth:`record`; :meth:`next_level` returns None once the answer is precise or the
    level budget is spent. Deterministic given the pass/fail answers (unit-testable without a
    server)."""

    def __init__(self, start: LoadLevel, *, precision: float = DEFAULT_PRECISION,
                 max_levels: int = DEFAULT_MAX_LEVELS, growth: float = DEFAULT_GROWTH) -> None:
        if start.kind not in ("concurrency", "constant", "poisson"):
            raise ServedeckError(f"a capacity search varies concurrency or a constant/Poisson rate, not {start.kind}",
                                 field="--load", hint="e.g. --load concurrency:1 or --load poisson:2")
        if not 0 < precision < 1:  # NaN fails this too
            raise ServedeckError(f"precision must be between 0 and 1 (relative), got {precision}", field="--precision")
        if max_levels < 2:
            raise ServedeckError(f"a capacity search needs at least 2 levels, got {max_levels}", field="--max-levels")
        if not 1 < growth < math.inf:
            raise ServedeckError(f"growth must be a finite number above 1, got {growth}", field="growth")
        self.start, self.precision, self.max_levels, self.growth = start, precision, max_levels, growth
        self.integer = start.kind == "concurrency"
        self.lo: float | None = None   # highest value that met the SLO
        self.hi: float | None = None   # lowest value that did not
        self.steps: list[SearchStep] = []
        self.results: dict[float, LevelResult] = {}
        self._next: float | None = start.value
        self._phase: str = "start"
        self._ran_again: set[float] = set()  # levels run once more after a late delivery

    # ---- the bracket
    def precise(self) -> bool:
        """The bracket is as narrow as asked (module docstring)."""
        if self.lo is None or self.hi is None:
            return False
        top = self.hi - 1 if self.integer else self.hi
        if self.integer and top <= self.lo:
            return True
        return top / self.lo <= (1 + self.precision) ** 2

    def sequential(self, value: float) -> bool:
        """Whether the rate level run at ``value`` was, in effect, one request at a time: the
        rate times its mean end-to-end latency (the requests in flight on average, Little's law)
        below :data:`SEQUENTIAL_IN_FLIGHT`. Never for a concurrency search."""
        if self.integer or value not in self.results:
            return False
        e2e = self.results[value].means.get("e2e_s")
        return e2e is not None and value * e2e < SEQUENTIAL_IN_FLIGHT

    def answer(self) -> float | None:
        """The geometric midpoint of the bracket (``lo`` when it is one integer)."""
        if self.lo is None or self.hi is None:
            return None
        top = self.hi - 1 if self.integer else self.hi
        return self.lo if top <= self.lo else math.sqrt(self.lo * top)

    def _midpoint(self) -> float | None:
        assert self.lo is not None and self.hi is not None
        mid = math.sqrt(self.lo * self.hi)
        if self.integer:
            mid = float(round(mid))
            if mid <= self.lo:
                mid = self.lo + 1
            if mid >= self.hi:
                return None
        return mid

    def next_level(self) -> LoadLevel | None:
        """The next level to run, or None when done."""
        if len(self.steps) >= self.max_levels or self._next is None:
            return None
        return self.start.with_value(self._next)

    def record(self, result: LevelResult) -> None:
        """Take the result of the level :meth:`next_level` gave. A level delivered late
        (:func:`~servedeck.bench.loadresult.late_delivery`: its latencies are the host's front
        end's, which on a busy host comes and goes between runs) does not steer the search the
        first time: the same level runs again, and that run steers, late or not."""
        value = result.level.value
        passed = level_passes(result)
        st = result.slo
        late = late_delivery(result)
        self.results[value] = result
        self.steps.append(SearchStep(value=value, passed=passed, state=st.state if st else "no SLO",
                                     attainment=st.attainment.value if st else None,
                                     attainment_low=st.attainment.low if st else None,
                                     attainment_high=st.attainment.high if st else None,
                                     phase=self._phase, late=late))
        if late and value not in self._ran_again:
            self._ran_again.add(value)
            self._next, self._phase = value, "again"
            return
        if passed:
            self.lo = value if self.lo is None else max(self.lo, value)
        else:
            self.hi = value if self.hi is None else min(self.hi, value)
        self._next = self._plan()

    def _plan(self) -> float | None:
        if self.lo is None:  # nothing met the SLO yet: shrink
            assert self.hi is not None
            self._phase = "shrink"
            nxt = self.hi / self.growth
            if self.integer:
                if self.hi <= 1:
                    return None  # even one request at a time misses the SLO
                nxt = float(max(1, math.floor(nxt)))
            elif self.sequential(self.hi):
                return None  # its requests seldom overlapped: a lower rate only waits longer between them
            return nxt
        if self.hi is None:  # everything met it so far: grow
            self._phase = "grow"
            nxt = self.lo * self.growth
            return float(math.ceil(nxt)) if self.integer else nxt
        if self.precise():
            return None
        self._phase = "bisect"
        return self._midpoint()

    def result(self, slo: Slo, kv: KvCheck | None = None) -> CapacityResult:
        """The :class:`CapacityResult` of the levels run (saturation and knee over all of them)."""
        levels = sorted(self.results.values(), key=lambda r: r.level.value)
        saturation_flags(levels)
        sat = next((lv for lv in levels if lv.saturation), None)
        cap = self.answer()
        lo_state = self.results[self.lo].slo.state if self.lo is not None else None  # type: ignore[union-attr]
        hi_state = self.results[self.hi].slo.state if self.hi is not None else None  # type: ignore[union-attr]
        unit = self.start.unit
        precise = self.precise()
        if self.lo is None:
            reading = (f"no level met the SLO ({slo.describe()}); the lowest run, {self.hi:g} {unit}, "
                       f"missed it" if self.hi is not None else "no level ran")
            if self.hi is not None and self.sequential(self.hi):
                reading += (", with its requests seldom in flight together: a lower rate would not "
                            "change the latencies")
        elif self.hi is None:
            reading = (f"every level met the SLO up to {self.lo:g} {unit}: the capacity is higher "
                       f"than the search reached in {len(self.steps)} levels")
        else:
            top = self.hi - 1 if self.integer else self.hi
            bracket = f"{self.lo:g}" if top <= self.lo else f"{self.lo:g}\u2013{top:g}"
            reading = (f"capacity under {slo.describe()}: {cap:.3g} {unit} (between {bracket}; "
                       f"{self.lo:g} {lo_state}, {self.hi:g} {hi_state})")
            if not precise:
                reading += f"; not yet within ±{self.precision:.0%} after {len(self.steps)} levels"
        late = sorted({step.value for step in self.steps if step.late})
        if late:
            steered = [v for v in late if [s.late for s in self.steps if s.value == v][-1]]
            reading += (f"; delivered late (the host's front end, not the engine, set the latencies), so run "
                        f"again: {', '.join(f'{v:g}' for v in late)} {unit}")
            if steered:
                reading += (f"; late again, and steering as measured: {', '.join(f'{v:g}' for v in steered)} "
                            f"{unit}")
        return CapacityResult(
            kind=self.start.kind, unit=unit, slo=slo, capacity=cap, lo=self.lo, hi=self.hi,
            lo_state=lo_state, hi_state=hi_state, precise=precise, precision=self.precision,
            levels_run=len(self.steps), max_levels=self.max_levels, steps=self.steps,
            saturation=sat.level.value if sat else None, saturation_flags=sat.saturation if sat else [],
            knee=knee([(lv.level.value, lv.output_tok_s) for lv in levels]), kv=kv, reading=reading)


def saturation_flags(levels: Sequence[LevelResult]) -> None:
    """Set each level's ``saturation`` flags (module docstring); ``levels`` in any order, the
    comparison uses the next lower load of the same kind."""
    ordered = sorted(levels, key=lambda r: r.level.value)
    prev: LevelResult | None = None
    for lv in ordered:
        flags: list[str] = []
        srv = lv.server
        if srv is not None:
            if srv.waiting_mean is not None and srv.waiting_mean >= QUEUE_WAITING_MEAN:
                flags.append("queue")
            if srv.preemptions:
                flags.append("preemption")
        if prev is not None and prev.level.value > 0 and prev.output_tok_s > 0:
            r = lv.level.value / prev.level.value
            thr = lv.output_tok_s / prev.output_tok_s
            e_now, e_prev = lv.medians.get("e2e_s"), prev.medians.get("e2e_s")
            if r > 1 and thr < 1 + FLAT_THROUGHPUT_SHARE * (r - 1) and e_now and e_prev \
                    and e_now / e_prev > 1 + CLIMBING_LATENCY:
                flags.append("throughput flat")
        if lv.level.kind in ("constant", "poisson") and lv.duration_s > 0:
            offered = lv.level.value
            if lv.request_rps < BEHIND_SHARE * offered and lv.requests >= 4:
                flags.append("behind")
        if late_delivery(lv):
            flags.append("late delivery")
        lv.saturation = flags
        prev = lv


def knee(points: Sequence[tuple[float, float]]) -> float | None:
    """The Kneedle knee of an increasing, concave curve ``[(load, throughput), ...]``
    (module docstring); None with fewer than 3 points or no bend."""
    pts = sorted((float(x), float(y)) for x, y in points)
    if len(pts) < 3:
        return None
    x0, xn = pts[0][0], pts[-1][0]
    ys = [y for _, y in pts]
    y0, yn = min(ys), max(ys)
    if xn <= x0 or yn <= y0:
        return None
    best, where = KNEE_MIN_DISTANCE, None
    for x, y in pts:
        d = (y - y0) / (yn - y0) - (x - x0) / (xn - x0)
        if d > best:
            best, where = d, x
    return where


def kv_check(levels: Sequence[LevelResult], prediction: dict[str, Any] | None,
             request_tokens: int) -> KvCheck | None:
    """Compare the KV prediction with the concurrency at which queueing or preemption began
    (module docstring); None without a prediction or concurrency levels.

    Args:
        levels: concurrency levels of one workload whose requests all take ``request_tokens``.
        prediction: the ``prediction`` of a run's ``kv.json`` (``pool_tokens``, its interval and
            ``block_size``).
        request_tokens: prompt + output tokens of one request.
    """
    conc = sorted((lv for lv in levels if lv.level.kind == "concurrency"), key=lambda r: r.level.value)
    if not prediction or not conc or not prediction.get("pool_tokens"):
        return None
    block = int(prediction.get("block_size") or 16)
    per = math.ceil(request_tokens / block) * block

    def holds(pool: Any) -> int | None:
        return None if pool is None else int(pool) // per
    predicted = holds(prediction["pool_tokens"])
    assert predicted is not None

    def pressed(lv: LevelResult) -> bool:
        srv = lv.server
        return srv is not None and bool(srv.preemptions or (srv.waiting_max or 0) >= 1)
    onset = next((lv.level.value for lv in conc if pressed(lv)), None)
    clean = max((lv.level.value for lv in conc if not pressed(lv)), default=None)
    below = [lv for lv in conc if lv.level.value <= predicted]
    above = [lv for lv in conc if lv.level.value > predicted]
    agrees: bool | None
    if not above and not below:
        agrees = None
    else:
        agrees = all(not pressed(lv) for lv in below) and (not above or pressed(above[0]))
    if agrees is None:
        reading = "no level ran near the predicted concurrency"
    elif agrees:
        first = f"; {above[0].level.value:g} queued or preempted" if above else ""
        reading = (f"the pool holds {predicted} requests of {request_tokens} tokens as predicted: "
                   f"levels up to {predicted} ran without queue or preemption{first}")
    else:
        reading = (f"predicted {predicted} requests of {request_tokens} tokens at once, but the server "
                   f"began to queue or preempt at {onset:g}" if onset is not None else
                   f"predicted {predicted} requests of {request_tokens} tokens at once, but "
                   f"{above[0].level.value:g} ran without queue or preemption")
    return KvCheck(request_tokens=request_tokens, block_size=block, pool_tokens=int(prediction["pool_tokens"]),
                   predicted_concurrency=predicted, predicted_concurrency_low=holds(prediction.get("pool_tokens_low")),
                   predicted_concurrency_high=holds(prediction.get("pool_tokens_high")),
                   observed_onset=onset, highest_clean=clean, agrees=agrees, reading=reading)
