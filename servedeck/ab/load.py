"""A/B under load: both arms' curves, and their capacity under the SLO compared.

Both arms ran the same workload under the same load schedule (``invoke ab --interleave
--workload W --load P --slo S``: every deployment runs every level, in ABBA order), so each
level exists in both; an arm's runs are pooled per level.

* **Curves** (:class:`LevelPair`): per level, each arm's throughput (per run and pooled),
  goodput, the share of requests meeting the SLO with its Clopper–Pearson interval and state,
  and the TTFT/TPOT/E2E percentiles with their order-statistic intervals.
* **Per-request latency at each level** (``ttft_s``, ``tpot_s``, ``e2e_s``, phase = the level,
  e.g. ``c=4``): judged by the report's own rules, in the report's one Holm family
  (:func:`load_metrics` feeds them to :func:`servedeck.ab.comparison.compare_metrics`:
  Mann–Whitney U, Holm, bootstrap interval of the ratio of medians, the equivalence margin).
* **Capacity** (:func:`compare_capacity`): arm X holds more load than arm Y when at some
  level X meets the SLO and Y misses it, each shown by its samples: an intersection–union test
  (Berger 1982) whose p is the larger of two exact one-sided binomial tests against the SLO's
  share ``q`` — ``P(K ≥ k_X | n_X, q)`` (X's share is above q) and ``P(K ≤ k_Y | n_Y, q)``
  (Y's is below). Both directions at every level form one family, Holm-adjusted at the report's
  ``alpha``. ``higher``/``lower``: B holds more/less load than A at a level where the adjusted
  p ≤ alpha; ``same bracket``: at every level both arms are in the same decided state (both
  met, or both violated), so their capacities fall between the same two levels; ``no verdict``
  otherwise, with the reason. Each arm's capacity is the highest level at which its pooled
  share met the SLO (point estimate) and the bracket up to the next level.
* **Late delivery** (:func:`servedeck.bench.loadresult.late_delivery`): a level at which either
  arm's streams reached the client well after the server handled their first tokens measured
  the host's delivery, not the engine (on vLLM's CPU server with 2 cores, whole streams arrive at
  once, at random from one deployment to the next). Its latencies and its SLO shares are
  ``not comparable``: held out of the Holm family and of the capacity tests, with the reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field

from servedeck.bench.loadresult import late_delivery
from servedeck.bench.quantiles import percentile, proportion
from servedeck.bench.slo import request_meets, state_of
from servedeck.numfmt import fmt_load
from servedeck.runs import store
from servedeck.runs.records import LoadSummary, Percentile, Proportion, Slo, SloState

#: Per-request metrics judged at each level (seconds; lower is better).
LOAD_METRICS = ("ttft_s", "tpot_s", "e2e_s")


class ArmLevel(BaseModel):
    """One arm at one level, its runs pooled."""

    model_config = ConfigDict(extra="forbid")
    runs: int
    requests: int
    completed: int
    failed: int
    request_rps: list[float] = Field(description="per run")
    output_tok_s: list[float] = Field(description="per run")
    goodput_rps: list[float] = Field(default_factory=list, description="per run (with an SLO)")
    attainment: Proportion | None = None
    state: SloState | None = None
    percentiles: dict[str, Percentile] = Field(default_factory=dict, description="ttft_s/tpot_s/e2e_s at the SLO's "
                                                                                   "percentile (p90 without one)")
    medians: dict[str, Percentile] = Field(default_factory=dict, description="ttft_s/tpot_s/e2e_s medians")
    waiting_mean: float | None = None
    preemptions: int | None = None
    delivery_lag_s: float | None = Field(None, description="the largest of its runs' (LevelResult.delivery_lag_s)")
    late_delivery: bool = Field(False, description="a run of it delivered late")


class LevelPair(BaseModel):
    """One level in both arms."""

    model_config = ConfigDict(extra="forbid")
    label: str
    kind: str
    value: float
    unit: str
    a: ArmLevel
    b: ArmLevel
    p_b_holds_more: float | None = None
    p_a_holds_more: float | None = None
    not_comparable: str | None = Field(None, description="why this level is held out (late delivery)")


class CapacityVerdict(BaseModel):
    """The capacity comparison (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    verdict: str
    reason: str
    capacity_a: float | None
    capacity_b: float | None
    bracket_a: list[float | None]
    bracket_b: list[float | None]
    level: str | None = Field(None, description="the level that carries a higher/lower verdict")
    p_adjusted: float | None = None
    alpha: float
    method: str = "intersection-union of exact one-sided binomial tests, Holm over levels and directions"


class LoadComparison(BaseModel):
    """What the report shows of two arms under load."""

    model_config = ConfigDict(extra="forbid")
    workload: str
    load: str
    slo: Slo | None
    unit: str
    levels: list[LevelPair]
    only_a: list[str] = Field(default_factory=list, description="levels only arm A ran")
    only_b: list[str] = Field(default_factory=list)
    capacity: CapacityVerdict | None = None


def _arm_levels(runs: Sequence[Path]) -> tuple[LoadSummary | None, dict[str, dict[str, Any]]]:
    """Per level label: the stored level summaries and records of every run of one arm."""
    first: LoadSummary | None = None
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        summary, records = store.read_load(run)
        if summary is None:
            continue
        first = first or summary
        for lv in summary.levels:
            slot = out.setdefault(lv.level.label, {"level": lv.level, "summaries": [], "records": [], "per_run": []})
            mine = [r for r in records if r.level == lv.index]
            slot["summaries"].append(lv)
            slot["records"] += mine
            slot["per_run"].append((lv, mine))
    return first, out


def _arm(slot: dict[str, Any], slo: Slo | None) -> ArmLevel:
    recs = slot["records"]
    sums = slot["summaries"]
    ok = [r for r in recs if r.success]
    q = slo.q if slo else 0.9
    values = {m: [v for r in ok if (v := getattr(r, m)) is not None] for m in LOAD_METRICS}
    pcts = {m: percentile(v, q) for m, v in values.items()}
    medians = {m: percentile(v, 0.5) for m, v in values.items()}
    waits = [lv.server.waiting_mean for lv in sums if lv.server is not None]
    lags = [lv.delivery_lag_s for lv in sums if lv.delivery_lag_s is not None]
    pre = [lv.server.preemptions for lv in sums if lv.server is not None]
    arm = ArmLevel(runs=len(sums), requests=len(recs), completed=len(ok), failed=len(recs) - len(ok),
                   request_rps=[lv.request_rps for lv in sums], output_tok_s=[lv.output_tok_s for lv in sums],
                   percentiles=pcts, medians=medians,
                   waiting_mean=max((w for w in waits if w is not None), default=None),
                   preemptions=sum(p for p in pre if p is not None) if any(p is not None for p in pre) else None,
                   delivery_lag_s=max(lags, default=None), late_delivery=any(late_delivery(lv) for lv in sums))
    if slo is not None:
        good = sum(1 for r in recs if request_meets(slo, r))
        arm.attainment = proportion(good, len(recs))
        arm.state = state_of(arm.attainment, slo.q)
        arm.goodput_rps = [sum(1 for r in mine if request_meets(slo, r)) / lv.duration_s
                           for lv, mine in slot["per_run"]]
    return arm


def _slo_of(summary_a: LoadSummary | None, summary_b: LoadSummary | None, slo: Slo | None) -> Slo | None:
    if slo is not None:
        return slo
    return next((s.slo for s in (summary_a, summary_b) if s is not None and s.slo is not None), None)


LoadMetric = tuple[str, str, list[float], list[float]]
"""``(metric, level label, samples_a, samples_b)``."""


def load_metrics(runs_a: Sequence[Path], runs_b: Sequence[Path]
                 ) -> tuple[list[LoadMetric], list[tuple[LoadMetric, str]]]:
    """The per-request metrics of every level both arms ran, for the report's judged metrics
    (:func:`servedeck.ab.comparison.compare_metrics`): ``(judged, held_out)``, where ``held_out``
    pairs each metric of a level delivered late (module docstring) with the reason it is not
    comparable. Both empty when either arm has no load benchmark."""
    _, la = _arm_levels(runs_a)
    _, lb = _arm_levels(runs_b)
    judged: list[LoadMetric] = []
    held: list[tuple[LoadMetric, str]] = []
    for label in sorted(set(la) & set(lb), key=lambda k: la[k]["level"].value):
        why = late_reason(label, _arm(la[label], None), _arm(lb[label], None))
        for metric in LOAD_METRICS:
            a = [v for r in la[label]["records"] if r.success and (v := getattr(r, metric)) is not None]
            b = [v for r in lb[label]["records"] if r.success and (v := getattr(r, metric)) is not None]
            if a or b:
                if why is None:
                    judged.append((metric, label, a, b))
                else:
                    held.append(((metric, label, a, b), why))
    return judged, held


def late_reason(label: str, a: ArmLevel, b: ArmLevel) -> str | None:
    """Why ``label`` is not comparable (late delivery in either arm, module docstring), or None."""
    late = [name for name, arm in (("A", a), ("B", b)) if arm.late_delivery]
    if not late:
        return None
    lags = ", ".join(f"{name} {arm.delivery_lag_s * 1000:.0f} ms" for name, arm in (("A", a), ("B", b))
                     if arm.delivery_lag_s is not None)
    return (f"late delivery in {' and '.join(late)} at {label}: first tokens reached the client well after the "
            f"server handled them (client TTFT minus the server's own: {lags}): vLLM's API server fell "
            f"behind the engine, so this level measured its delivery, not the engine; give the API server "
            f"CPU, or stream fewer chunks (--stream-interval), and re-run it")


def _holds_more(x: ArmLevel, y: ArmLevel, q: float) -> float | None:
    """p of "x meets the SLO and y misses it" (module docstring), None without SLO judgements."""
    from scipy.stats import binom
    if x.attainment is None or y.attainment is None or not x.attainment.n or not y.attainment.n:
        return None
    p_x_meets = float(binom.sf(x.attainment.k - 1, x.attainment.n, q))   # P(K >= k_x | q)
    p_y_misses = float(binom.cdf(y.attainment.k, y.attainment.n, q))     # P(K <= k_y | q)
    return max(p_x_meets, p_y_misses)


def _capacity_of(pairs: list[LevelPair], arm: str, slo: Slo) -> tuple[float | None, list[float | None]]:
    met = [p for p in pairs if (a := getattr(p, arm)).attainment is not None and a.attainment.value is not None
           and a.attainment.value >= slo.q]
    if not met:
        return None, [None, pairs[0].value if pairs else None]
    best = max(met, key=lambda p: p.value)
    above = [p.value for p in pairs if p.value > best.value]
    return best.value, [best.value, min(above) if above else None]


def compare_capacity(pairs: list[LevelPair], slo: Slo, alpha: float) -> CapacityVerdict:
    """Compare the arms' capacity under ``slo`` over the common levels (module docstring)."""
    held = [p for p in pairs if p.not_comparable]
    pairs = [p for p in pairs if not p.not_comparable]
    cap_a, br_a = _capacity_of(pairs, "a", slo)
    cap_b, br_b = _capacity_of(pairs, "b", slo)
    tests: list[tuple[str, LevelPair, float]] = []
    for p in pairs:
        p.p_b_holds_more = _holds_more(p.b, p.a, slo.q)
        p.p_a_holds_more = _holds_more(p.a, p.b, slo.q)
        tests += [(d, p, v) for d, v in (("b", p.p_b_holds_more), ("a", p.p_a_holds_more)) if v is not None]
    common = dict(capacity_a=cap_a, capacity_b=cap_b, bracket_a=br_a, bracket_b=br_b, alpha=alpha)
    out = _compare_levels(pairs, tests, slo, alpha, common, br_a)
    if held:
        out.reason += f" ({', '.join(p.label for p in held)} held out: late delivery)"
    return out


def _compare_levels(pairs: list[LevelPair], tests: list[tuple[str, LevelPair, float]], slo: Slo, alpha: float,
                    common: dict[str, Any], br_a: list[float | None]) -> CapacityVerdict:
    from servedeck.ab.stats import holm
    if not tests:
        return CapacityVerdict(verdict="no verdict", reason="no level was judged against the SLO in both arms",
                               **common)
    adjusted = holm([v for _, _, v in tests])
    hits = [(d, p, adj) for (d, p, _), adj in zip(tests, adjusted) if adj <= alpha]
    directions = {d for d, _, _ in hits}
    if len(directions) == 2:
        return CapacityVerdict(verdict="no verdict", reason="each arm holds more load than the other at some "
                               "level: the curves cross", **common)
    if hits:
        d, p, adj = min(hits, key=lambda h: h[2])
        more, less = ("B", "A") if d == "b" else ("A", "B")
        x, y = (p.b, p.a) if d == "b" else (p.a, p.b)
        return CapacityVerdict(
            verdict="higher" if d == "b" else "lower", level=p.label, p_adjusted=adj,
            reason=(f"at {p.label} {more} meets the SLO ({_share(x)}) and {less} does not ({_share(y)}); "
                    f"p={adj:.2g} (Holm over {len(tests)} tests)"), **common)
    decided = all(p.a.state in ("met", "violated") and p.a.state == p.b.state for p in pairs)
    if decided:
        return CapacityVerdict(verdict="same bracket",
                               reason=(f"at every level both arms are in the same decided state: both capacities "
                                       f"lie in {bracket_text(br_a, pairs[0].unit)}"), **common)
    open_ = [p for p in pairs if p.a.state != p.b.state or p.a.state not in ("met", "violated")]
    undecided = [p.label for p in open_]
    need = max(_needed(x, slo) for p in open_ for x in (p.a, p.b) if x.state not in ("met", "violated"))
    return CapacityVerdict(verdict="no verdict",
                           reason=(f"the samples cannot tell at {', '.join(undecided)}; about {need} requests per "
                                   f"arm and level would decide the SLO share there"), **common)


def _share(x: ArmLevel) -> str:
    a = x.attainment
    return f"{a.k}/{a.n} good, {a.value:.0%} [{a.low:.0%}\u2013{a.high:.0%}]"  # type: ignore[union-attr]


def bracket_text(br: Sequence[float | None], unit: str = "") -> str:
    """A capacity bracket ``[lo, hi]`` in words: ``[2, 4) requests in flight``, ``below 1``,
    ``8 or more`` (``–`` when nothing is known)."""
    fmt_num = fmt_load
    lo, hi = br
    tail = f" {unit}" if unit else ""
    if lo is None:
        return f"below {fmt_num(hi)}{tail}" if hi is not None else "\u2013"
    return f"[{fmt_num(lo)}, {fmt_num(hi)}){tail}" if hi is not None else f"{fmt_num(lo)}{tail} or more"


def _needed(x: ArmLevel, slo: Slo) -> int:
    """Requests for the share's interval to clear the SLO's q at the observed share (normal
    approximation of the binomial: ``n ≥ z² p(1−p) / (p − q)²``), at least the all-good minimum."""
    from scipy.stats import norm
    from servedeck.bench.quantiles import samples_needed
    floor = samples_needed(slo.q)
    a = x.attainment
    if a is None or a.value is None or abs(a.value - slo.q) < 1e-9:
        return max(floor, 10 * floor)
    z = norm.ppf(0.975)
    p = min(max(a.value, 1e-3), 1 - 1e-3)
    return max(floor, math.ceil(z * z * p * (1 - p) / (p - slo.q) ** 2))


def compare_load(runs_a: Sequence[Path], runs_b: Sequence[Path], *, slo: Slo | None = None,
                 alpha: float = 0.05) -> LoadComparison | None:
    """Both arms' load benchmarks compared (module docstring); None when either arm has none.

    ``slo``: judge against this SLO instead of the one the runs recorded.
    """
    sa, la = _arm_levels(runs_a)
    sb, lb = _arm_levels(runs_b)
    if sa is None or sb is None:
        return None
    slo_ = _slo_of(sa, sb, slo)
    common = sorted(set(la) & set(lb), key=lambda k: la[k]["level"].value)
    pairs = []
    for label in common:
        level = la[label]["level"]
        a, b = _arm(la[label], slo_), _arm(lb[label], slo_)
        pairs.append(LevelPair(label=label, kind=level.kind, value=level.value, unit=level.unit, a=a, b=b,
                               not_comparable=late_reason(label, a, b)))
    unit = pairs[0].unit if pairs else ""
    out = LoadComparison(workload=sa.workload.get("name") or sa.workload.get("kind"), load=sa.load,
                         slo=slo_, unit=unit, levels=pairs,
                         only_a=sorted(set(la) - set(lb)), only_b=sorted(set(lb) - set(la)))
    if slo_ is not None and pairs:
        out.capacity = compare_capacity(pairs, slo_, alpha)
    return out


def capacity_sentence(c: LoadComparison) -> str | None:
    """One finding: ``capacity under p50: ttft_s ≤ 0.5: B higher: at c=4 B meets …``."""
    v = c.capacity
    if v is None or c.slo is None:
        return None
    def cap(x: float | None, br: list[float | None]) -> str:
        return fmt_load(x) if x is not None else bracket_text(br)
    return (f"capacity under {c.slo.describe()} ({c.workload}, {c.load}): A {cap(v.capacity_a, v.bracket_a)}, "
            f"B {cap(v.capacity_b, v.bracket_b)} {c.unit}: {v.verdict}: {v.reason}")
