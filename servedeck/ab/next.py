"""``invoke next``: rank candidate single-variable experiments for a profile on a host.

For every knob of the knowledge base (:mod:`servedeck.ab.knowledge`) that the profile can
change, the candidates are its neighbouring values (one step up and one down the knob's
ladder from the profile's current value). Each candidate gets:

* **expected gain** (relative, on one metric ``phase name``), from the first that applies:
  1. this host's history (:mod:`servedeck.ab.history`): the ratio an earlier experiment of the
     same knob measured. The same change again expects that ratio; the next step further in
     the same direction expects half of it (returns diminish), the opposite direction its
     inverse; a change already decided against (``revert``/``no change``) is not proposed
     again. With no ``metric`` asked for, a metric on which the history decided this very
     change (or its undo) is used, :data:`HEADLINE_METRIC` first, then the knob's own, then the
     clearest (candidates rank on one scale: ``max_num_batched_tokens`` has a prefill prior, and
     a prefill verdict of a few per cent beside another knob's decode gain would compare two
     different things); else the knob's own metric (a further step, the opposite direction);
  2. the baseline run's own evidence: speculative depth from the per-position acceptance the
     server reported (tokens per step ``1 + Σ rate_i``; one draft position costs
     :data:`DRAFT_STEP_COST` of a target step, a modelling assumption stated in the reasons);
  3. the knowledge base's ``prior_gain`` for the direction that helps (sourced);
  bounded by the baseline's roofline headroom on that metric when it was measured
  (:mod:`servedeck.ab.signals`: a phase at 80 % of its roof can get 25 % faster, no more);
  a load-dependent knob on a single-stream benchmark expects nothing measurable there, unless
  a load benchmark of the baseline found what bounds its capacity
  (:func:`servedeck.ab.signals.capacity_signals`): then a change that relieves that bound (the
  knowledge base's ``relieves``) expects at most its ``capacity_gain`` on the metric
  ``capacity``, and one that does not relieve it expects nothing; the power cap's reasons
  say whether the card throttled at its power limit (:func:`servedeck.ab.signals.energy_signals`);
* **samples** its verdict would need per arm at this host's noise (the A/A noise floor of the
  host and image when measured, else the spread of the baseline's own samples): the fixed-n
  formula of :func:`servedeck.ab.stats.samples_needed`;
* **cost** in seconds: time to ready (the host's recorded deploys), plus the cold compile the
  baseline paid when the knob moves the compile range, plus bench time for those samples;
* **clears the noise floor**: the expected gain is beyond the margin and the samples needed fit
  the sample budget.

Candidates are ranked by expected gain (those that clear the noise floor first; the gain per
hour of cost breaks ties); ``next`` says plainly when none is expected to clear it.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from servedeck.ab.draft import single_stream
from servedeck.ab.history import ExperimentRecord, bench_seconds, load_experiments
from servedeck.ab.knowledge import KnowledgeBase, Knob, load_knowledge, order
from servedeck.ab.sequential import DEFAULT_MAX_REQUESTS
from servedeck.ab.signals import BOUNDS, Signal, bound_of, power_limited, read_signals
from servedeck.ab.stats import (
    ALPHA, BENCH_METRICS, BENCH_PHASES, DECIDED_VERDICTS, DEFAULT_MARGIN, pooled_log_sd, samples_needed,
)
from servedeck.runs import store

if TYPE_CHECKING:
    from servedeck.runs.records import FactsRecord

DRAFT_STEP_COST = 0.1
"""The cost of one speculative draft position relative to one target-model step (an MTP head
is one layer of the model): a modelling assumption of the speculative-depth estimate."""

DECIDED_ACTIONS = ("revert", "no change")
"""A change measured with one of these verdicts is not proposed again (a kept one is: adopt it)."""
FAMILY = len(BENCH_METRICS) * len(BENCH_PHASES)
"""The Holm family a bench report judges: its samples-needed figures assume it."""


class Candidate(BaseModel):
    """One proposed single-variable experiment (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    knob: str
    title: str
    category: str
    profile_path: str
    current: Any = None
    proposed: Any = None
    metric: str | None = None
    expected_gain: float | None = None
    gain_source: str | None = None
    samples_needed: int | None = None
    cost_s: float | None = None
    compile_s: float | None = None
    clears_noise: bool = False
    favours_quality: bool = False
    expect: str | None = None
    watch: str | None = None
    score: float = 0.0
    why: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)

    def change(self) -> str:
        """``engine.max_num_batched_tokens 4096 → 2048``."""
        from servedeck.ab.compare import fmt_value
        return f"{self.profile_path} {fmt_value(self.current)} \u2192 {fmt_value(self.proposed)}"


class NextPlan(BaseModel):
    """The ranked candidates and the context they were ranked in."""

    model_config = ConfigDict(extra="forbid")
    profile: str
    host: str
    baseline_run: str | None
    margin: float
    noise: dict[str, float] = Field(default_factory=dict)
    noise_source: str | None = None
    ready_s: float | None = None
    request_s: float | None = None
    signals: list[str] = Field(default_factory=list)
    """What the baseline's load, roofline and energy records said (:mod:`servedeck.ab.signals`)."""
    candidates: list[Candidate]
    statement: str


# --------------------------------------------------------------------------------------------
# Values and evidence
# --------------------------------------------------------------------------------------------

def dotted_get(doc: dict, path: str) -> Any:
    """The value at dotted ``path`` (``engine.speculative.num_speculative_tokens``) of a nested
    dict, or None when a part is missing."""
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _neighbours(knob: Knob, current: Any) -> list[Any]:
    """One step down and one step up the knob's ladder from ``current`` (the values around it
    when it is not on the ladder); for a two-valued knob, the other value."""
    values = knob.values
    if not values:
        return []
    if current in values:
        i = values.index(current)
        return [v for v in (values[i - 1] if i > 0 else None, values[i + 1] if i + 1 < len(values) else None)
                if v is not None] or [v for v in values if v != current][:1]
    numeric = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if isinstance(current, (int, float)) and numeric:
        below = [v for v in numeric if v < current]
        above = [v for v in numeric if v > current]
        return ([max(below)] if below else []) + ([min(above)] if above else [])
    return [v for v in values if v != current][:2]


def _current(knob: Knob, profile: dict, effective: dict, facts: dict) -> Any:
    """The knob's value in effect: the profile's field, else the effective setting, else the
    host fact (the power cap), else the knob's fixed default (vLLM's own), else None."""
    value = dotted_get(profile, knob.profile_path)
    if value is None:
        for var in knob.variables:
            value = dotted_get(effective, var) if "." in var else effective.get(var)
            if value is not None:
                break
    if value is None and knob.id == "power-cap":
        value = ((facts or {}).get("host") or {}).get("gpu_power_cap_w")
    return value if value is not None else knob.default


def _spec_depth_gain(per_position: list[float], current: int, proposed: int) -> float | None:
    """Relative single-stream decode change of speculative depth ``current`` → ``proposed``
    from the per-position acceptance rates (rates beyond the measured positions extrapolate the
    last ratio of consecutive rates)."""
    if not per_position or current < 1 or proposed < 0:
        return None
    rates = list(per_position)
    while len(rates) < max(current, proposed):
        decay = rates[-1] / rates[-2] if len(rates) > 1 and rates[-2] > 0 else 0.5
        rates.append(rates[-1] * min(1.0, decay))

    def speed(k: int) -> float:
        return (1.0 + sum(rates[:k])) / (1.0 + k * DRAFT_STEP_COST)
    return speed(proposed) / speed(current) - 1.0


def _per_position(run_dir: Path | None) -> list[float]:
    if run_dir is None:
        return []
    from servedeck.errors import ServedeckError
    try:
        summary = store.read(run_dir, store.BENCH_SUMMARY)
    except ServedeckError:  # evidence is context
        return []
    for phase in ("warm", "cold"):
        server = summary.server.get(phase) if summary is not None else None
        if server is not None and server.spec_per_position:
            return [float(r) for r in server.spec_per_position]
    return []


def _history_gain(knob: Knob, current: Any, proposed: Any, history: list[ExperimentRecord],
                  metric: str) -> tuple[float | None, str | None, str | None]:
    """(expected gain, why, decided action) of ``current`` → ``proposed`` from the host's earlier
    experiments of this knob (module docstring, rule 1)."""
    direction = order(current, proposed)
    best: tuple[float | None, str | None, str | None] = (None, None, None)
    for rec in reversed(history):  # newest first
        if rec.variable is None or rec.knob != knob.id:
            continue
        m = rec.metrics.get(metric)
        # only a decided measurement is evidence: an undecided ratio is mostly noise
        ratio = m.ratio if m is not None and m.verdict in DECIDED_VERDICTS else None
        lower_better = BENCH_METRICS.get(metric.split(" ", 1)[-1], False)
        gain = None if ratio is None else ((1 / ratio - 1) if lower_better else (ratio - 1))
        same = (rec.a, rec.b) == (current, proposed)
        undo = (rec.a, rec.b) == (proposed, current)
        run = rec.runs_b[0]
        if same and gain is None and rec.action not in DECIDED_ACTIONS:
            continue  # measured, undecided: no evidence either way (it may be run again)
        if same:
            return gain, f"measured {_pct(gain)} on {metric} by {run} ({rec.action})", rec.action
        if undo and gain is not None:
            return (1 / (1 + gain) - 1), f"the opposite change measured {_pct(gain)} on {metric} ({run})", None
        step = order(rec.a, rec.b)
        if gain is not None and step != 0 and best[0] is None:
            further = order(rec.b, proposed) == step and rec.b == current
            if further:
                best = (gain / 2, f"the previous step measured {_pct(gain)} on {metric} ({run}); half expected "
                                  "from the next", None)
            elif step == -direction and rec.a == current:
                best = (1 / (1 + gain) - 1 if gain > -1 else None,
                        f"the opposite direction measured {_pct(gain)} on {metric} ({run})", None)
    return best


HEADLINE_METRIC = "warm decode_tok_s"
"""The metric a history's evidence is read on first when none is asked for: the seed's headline
figure and ``invoke tune``'s default objective, so that candidates measured on it rank on one
scale (a TTFT "gain" beside a decode gain would compare two different things)."""


def _decided_metrics(knob: Knob, current: Any, proposed: Any, history: list[ExperimentRecord]) -> list[str]:
    """The metrics (``phase name``) on which this host's experiments of ``current`` →
    ``proposed`` (or its undo) reached a verdict: :data:`HEADLINE_METRIC` first, then the
    knob's own prior metrics, then the clearest (largest ``|log ratio|``)."""
    found: dict[str, float] = {}
    for rec in history:
        if rec.variable is None or rec.knob != knob.id or (rec.a, rec.b) not in ((current, proposed),
                                                                              (proposed, current)):
            continue
        for name, m in rec.metrics.items():
            if m.verdict in DECIDED_VERDICTS and m.ratio is not None and m.ratio > 0:
                found[name] = max(found.get(name, 0.0), abs(math.log(m.ratio)))
    return sorted(found, key=lambda name: (name != HEADLINE_METRIC, name not in knob.prior_gain, -found[name]))


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:+.1f} %"


# --------------------------------------------------------------------------------------------
# Noise and cost
# --------------------------------------------------------------------------------------------

def _noise(runs_dir: Path, host: str, digest: str | None, baseline: Path | None) -> tuple[dict[str, float], str | None]:
    """Per-request noise by ``phase metric``: the host and image's A/A floor, else the spread of
    the baseline's samples (pooled log sd of its two halves)."""
    from servedeck.ab.noise import load_noise_floor
    floor = load_noise_floor(runs_dir, host, digest)
    if floor is not None:
        return ({k: m.noise for k, m in floor.metrics.items() if m.noise is not None},
                f"A/A noise floor of host {host} ({' vs '.join(floor.runs)})")
    if baseline is None:
        return {}, None
    samples = store.read(baseline, store.BENCH_SAMPLES)
    out = {}
    for phase in BENCH_PHASES:
        for metric in BENCH_METRICS:
            values = [v for v in store.phase_samples(samples, phase, metric) if v > 0]
            if len(values) >= 4:
                half = len(values) // 2
                sd = pooled_log_sd(values[:half], values[half:])
                if sd is not None:
                    out[f"{phase} {metric}"] = sd
    return out, (f"spread of {baseline.name}'s own samples (no A/A noise floor measured)" if out else None)


def _costs(runs_dir: Path, host: str, baseline: Path | None) -> tuple[float | None, float | None, float | None]:
    """(time to ready s, seconds per bench request, cold compile s) from the host's records."""
    from servedeck.runs.history import host_timings
    hist = host_timings(Path(runs_dir), [host])[0].get(host, {})
    ready = statistics.median(hist["ready_s"]) if hist.get("ready_s") else None
    request_s = compile_s = None
    if baseline is not None:
        took = bench_seconds(baseline)
        n = len([s for s in store.read(baseline, store.BENCH_SAMPLES) if s.phase in BENCH_PHASES])
        request_s = took / n if took and n else None
        from servedeck.errors import ServedeckError
        try:
            startup = store.read(baseline, store.STARTUP)
        except ServedeckError:
            startup = None
        if startup is not None:
            compile_s = startup.torch_compile_total_s or startup.init_engine_compilation_s
    return ready, request_s, compile_s


# --------------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------------

def propose(profile: dict, host: str, runs_dir: Path, *, effective: dict | None = None,
            facts: FactsRecord | dict | None = None,
            baseline: Path | None = None, knowledge: KnowledgeBase | None = None,
            margin: float = DEFAULT_MARGIN, alpha: float = ALPHA, max_requests: int = DEFAULT_MAX_REQUESTS,
            only: list[str] | None = None, signals: list[Signal] | None = None,
            history: list[ExperimentRecord] | None = None,
            alternatives: dict[str, list[Any]] | None = None, metric: str | None = None,
            explore: float | None = None) -> NextPlan:
    """Rank the candidate experiments (module docstring).

    Args:
        profile: the resolved profile (``Profile.model_dump(mode="json")``).
        host: the inventory host the experiments would run on.
        runs_dir: the project's runs directory (history, noise floors, costs).
        effective: the profile's effective settings (the knob values the image defaults set).
        facts: the baseline's ``facts.json`` (the power cap; the record or its JSON), if any.
        baseline: the benchmarked run of the profile on the host (its samples, acceptance and
            costs), if any.
        knowledge: the knowledge base (default: the shipped one).
        margin, alpha, max_requests: the verdicts' margin and level, and the sample budget.
        only: knob ids (or profile paths) to consider; default all.
        signals: the baseline's signals (default: :func:`read_signals` of ``baseline``).
        history: the host's experiment records (default: read from ``runs_dir``).
        alternatives: per knob id, values to try besides the knob's ladder (a project's
            profiles that set the knob's field otherwise: :func:`profile_alternatives`).
        metric: the objective every gain is estimated on (``phase name``); default each knob's
            own (its first ``prior_gain`` metric).
        explore: ``invoke tune``: the gain expected of a step nothing has measured yet (the
            user chose these knobs: the load-dependence rule does not zero it); such a step
            counts as clearing the noise floor (one experiment, at the sample budget, measures
            it), so every tuned variable is measured once in each direction from each best.

    Returns:
        a :class:`NextPlan`, candidates best first.
    """
    kb = knowledge or load_knowledge()
    runs_dir = Path(runs_dir)
    effective = effective or {}
    if facts is not None and hasattr(facts, "model_dump"):
        facts = facts.model_dump(mode="json")
    digest = ((facts or {}).get("image") or {}).get("digest")
    if digest is None and baseline is not None:
        meta = store.meta_or_none(baseline)
        digest = meta.image.digest if meta is not None and meta.image else None
    if history is None:
        history = load_experiments(runs_dir, host=host) if runs_dir.is_dir() else []
    noise, noise_source = _noise(runs_dir, host, digest, baseline)
    ready_s, request_s, compile_s = _costs(runs_dir, host, baseline) if runs_dir.is_dir() else (None, None, None)
    per_position = _per_position(baseline)
    single = single_stream(baseline) if baseline is not None else True
    if signals is None:
        signals = read_signals(baseline) if baseline is not None else []
    roof = {s.metric: s for s in signals if s.kind == "roofline" and s.metric and s.headroom is not None}
    bound = bound_of(signals)
    throttled: Signal | bool | None = power_limited(signals)
    if throttled is None and any(s.kind == "energy" for s in signals):
        throttled = False  # telemetry measured, and the card never throttled at its power limit
    wanted = {kb.by_id(k).id for k in only} if only else None
    out: list[Candidate] = []
    for knob in kb.knobs:
        if wanted is not None and knob.id not in wanted:
            continue
        current = _current(knob, profile, effective, facts or {})
        values = _neighbours(knob, current)
        if current is None and knob.quality_direction and knob.values:
            values = [knob.values[0] if knob.quality_direction == "lower" else knob.values[-1]]
        values += [v for v in (alternatives or {}).get(knob.id, []) if v != current and v not in values]
        if knob.id == "spec-method" and current is None:
            continue  # nothing to switch off
        for proposed in values:
            cand = _candidate(knob, current, proposed, history=history, per_position=per_position,
                              single=single, noise=noise, margin=margin, alpha=alpha, max_requests=max_requests,
                              ready_s=ready_s, request_s=request_s, compile_s=compile_s, roof=roof,
                              metric=metric, explore=explore, bound=bound, throttled=throttled)
            if cand is not None:
                out.append(cand)
    out.sort(key=lambda c: (not c.clears_noise, -(c.expected_gain or 0.0), -c.score))
    clearing = [c for c in out if c.clears_noise]
    statement = (f"{len(clearing)} candidate(s) expected to clear the noise floor; best: {clearing[0].title} "
                 f"({clearing[0].change()}, expected {_pct(clearing[0].expected_gain)} on {clearing[0].metric})"
                 if clearing else
                 "nothing left is expected to clear the noise floor: no candidate's expected gain is beyond "
                 f"the ±{margin * 100:g} % margin within {max_requests} requests per arm at this host's noise")
    return NextPlan(profile=str(profile.get("name")), host=host, baseline_run=baseline.name if baseline else None,
                    margin=margin, noise={k: round(v, 5) for k, v in noise.items()}, noise_source=noise_source,
                    ready_s=ready_s, request_s=request_s, signals=[sig.text for sig in signals],
                    candidates=out, statement=statement)


def _candidate(knob: Knob, current: Any, proposed: Any, *, history, per_position, single, noise, margin, alpha,
               max_requests, ready_s, request_s, compile_s, roof, metric=None, explore=None, bound=None,
               throttled=None) -> Candidate | None:
    why: list[str] = []
    direction = knob.direction(current, proposed)
    asked = metric
    gain: float | None = None
    source = None
    decided = None
    reason = None
    if asked is None:  # a verdict of this very change, on one scale for all candidates: the headline first
        for other in _decided_metrics(knob, current, proposed, history):
            gain, reason, decided = _history_gain(knob, current, proposed, history, other)
            if reason is not None:
                metric = other
                break
    metric = metric or next(iter(knob.prior_gain), None)
    if reason is None and metric is not None:
        gain, reason, decided = _history_gain(knob, current, proposed, history, metric)
    if reason:
        why.append(reason)
        source = "history"
    if decided in DECIDED_ACTIONS:
        return None  # measured on this host, and not worth it
    if gain is None and knob.id == "spec-depth" and isinstance(current, int) and isinstance(proposed, int) and (
            metric is None or metric.endswith("decode_tok_s")):
        est = _spec_depth_gain(per_position, current, proposed)
        if est is not None:
            gain, source = est, "evidence"
            metric = metric or "warm decode_tok_s"
            why.append(f"per-position acceptance {', '.join(f'{r:.2f}' for r in per_position)}: "
                       f"{1 + sum(per_position[:current]):.2f} tokens per step at depth {current}; a draft "
                       f"position assumed to cost {DRAFT_STEP_COST:g} of a target step")
    unknown = current is None and knob.id != "spec-method"
    if unknown:
        why.append("the value in effect is not known (an image default servedeck has no record of)")
    elif gain is None and metric is not None and direction is not None and metric in knob.prior_gain:
        prior = knob.prior_gain[metric]
        up = knob.step(current, proposed) > 0
        gain, source = (prior if up else -prior / 2), "knowledge base"
        why.append(f"{'raising' if up else 'lowering'}: {direction.expect} ({knob.sources[0].split(':', 1)[0]}"
                   f"{' and others' if len(knob.sources) > 1 else ''})")
    quality = knob.favours_quality(current, proposed) or bool(
        unknown and knob.quality_direction and knob.values
        and proposed == (knob.values[0] if knob.quality_direction == "lower" else knob.values[-1]))
    if quality and direction is None:
        direction = knob.lower if knob.quality_direction == "lower" else knob.raise_
    if gain is None and explore is not None and not unknown:
        gain, source = explore, "unmeasured"
        why.append(f"not measured on this host yet: one experiment will tell (expected {_pct(explore)} to be worth it)")
    on_capacity = False
    if (knob.load_dependent and single and source not in ("history", "unmeasured") and not unknown
            and bound is not None):
        relieved = knob.relieved(current, proposed)
        metric, on_capacity = "capacity", True
        offered = bound.value if (bound.phase or "").startswith("c=") else None
        below = (knob.capacity_gain == "ratio" and offered is not None and isinstance(current, (int, float))
                 and offered <= current)
        if relieved == bound.name and below:
            gain, source = 0.0, "capacity"
            why.append(f"the baseline's load benchmark: {bound.text}; but only {offered:g} requests were in flight "
                       f"there, not above {knob.profile_path.rsplit('.', 1)[-1]} {current}: it is not this limit")
        elif relieved == bound.name:
            gain, source = knob.capacity_gain_of(current, proposed), "capacity"
            why.append(f"the baseline's load benchmark: {bound.text}; this change relieves that bound"
                       + (f", by at most {_pct(gain)} (another limit may bind first)" if gain is not None
                          else " by an amount nothing here predicts: measure it under the same load"))
        else:
            gain, source = 0.0, "capacity"
            why.append(f"the baseline's load benchmark: {bound.text}; this change does not relieve "
                       f"{BOUNDS[bound.name].split(' (')[0]}")
    elif knob.load_dependent and single and source not in ("history", "unmeasured") and not unknown:
        why.append(f"load-dependent: {knob.load_note or 'its effect needs concurrent requests'}; a single-stream "
                   "benchmark would not see it")
        gain = 0.0 if gain is None or gain > 0 else gain
        source = source or "knowledge base"
    if knob.id == "power-cap" and throttled:
        why.append(f"the baseline's telemetry: {throttled.text}")
    elif (knob.id == "power-cap" and throttled is False and knob.step(current, proposed) > 0
          and source not in ("history", "unmeasured")):
        why.append("the baseline's telemetry: the card never throttled at its power limit, so a higher cap has "
                   "nothing to lift")
        gain = 0.0
    if gain is not None and metric is not None and gain > 0:
        roof_signal = roof.get(metric)
        if roof_signal is not None and gain > roof_signal.headroom:
            why.append(f"bounded by the roofline: {roof_signal.text}, so at most {_pct(roof_signal.headroom)}")
            gain = roof_signal.headroom
    sd = noise.get(metric) if metric else None
    needed = None
    if gain is not None and metric is not None and gain != 0 and not on_capacity:
        needed = samples_needed(sd, math.log1p(abs(gain)) if gain > -1 else 5.0, margin, alpha, FAMILY)
    clears = bool(gain is not None and gain > 0 and abs(math.log1p(gain)) >= math.log1p(margin)
                  and (on_capacity or (needed is not None and needed <= max_requests)))
    if on_capacity and clears:
        why.append("judged by a capacity search or an A/B under the same load (invoke ab --interleave --workload)")
    if source == "unmeasured":  # tune: a step nobody measured is worth the one experiment that measures it
        clears, needed = True, max_requests
    if clears and sd is None and source not in ("unmeasured", "capacity"):
        why.append("this host's noise is not known (no A/A noise floor, and no baseline with 4 or more requests "
                   "per phase): the samples needed assume none")
    if gain is not None and gain > 0 and not clears:
        if abs(math.log1p(gain)) < math.log1p(margin):
            why.append(f"expected {_pct(gain)} is inside the ±{margin * 100:g} % margin")
        elif needed is not None:
            why.append(f"needs about {needed} requests per arm at this noise, more than the budget of {max_requests}")
    cmp_s = compile_s if knob.moves_compile_range else None
    if cmp_s:
        why.append(f"moves the compile range: pays a cold compile (~{cmp_s:.0f} s measured)")
    cost = None
    if ready_s is not None or request_s is not None:
        cost = (ready_s or 0.0) + (cmp_s or 0.0) + (request_s or 0.0) * 2 * (needed or max_requests)
    score = (gain or 0.0) / (cost / 3600.0) if cost and gain and gain > 0 else (gain or 0.0)
    return Candidate(knob=knob.id, title=knob.title, category=knob.category, profile_path=knob.profile_path,
                     current=current, proposed=proposed, metric=metric, expected_gain=gain, gain_source=source,
                     favours_quality=quality, expect=direction.expect if direction else None,
                     watch=direction.watch if direction else None,
                     samples_needed=needed, cost_s=round(cost, 1) if cost is not None else None,
                     compile_s=cmp_s, clears_noise=clears, score=score, why=why, sources=list(knob.sources))




#: Profile fields that must match for another profile's value to be a candidate: the same
#: launcher config, served model and image (a tiny CPU model's weights are no candidate for a 27B).
ALTERNATIVE_MATCH = ("launcher.config", "model.served_model_name", "image")


def profile_alternatives(profiles: list[dict], knowledge: KnowledgeBase | None = None, *,
                         like: dict | None = None) -> dict[str, list[Any]]:
    """Per knob id, the values a project's profiles give the knob's field (``model.weights_dir``
    of a quality profile): candidates the ladder does not hold. With ``like``, only profiles
    that match it in :data:`ALTERNATIVE_MATCH`."""
    kb = knowledge or load_knowledge()
    if like is not None:
        profiles = [p for p in profiles if all(dotted_get(p, f) == dotted_get(like, f) for f in ALTERNATIVE_MATCH)]
    out: dict[str, list[Any]] = {}
    for knob in kb.knobs:
        if knob.values:
            continue
        for prof in profiles:
            value = dotted_get(prof, knob.profile_path)
            if value is not None and value not in out.setdefault(knob.id, []):
                out[knob.id].append(value)
    return {k: v for k, v in out.items() if v}


def format_plan(plan: NextPlan) -> str:
    """The plan as text: one line per candidate (rank, knob, change, expected gain and where it
    comes from, samples, cost, whether it clears the noise floor) with its reasons, then the
    statement."""
    lines = [f"next experiments for profile {plan.profile} on host {plan.host}"
             + (f" (baseline {plan.baseline_run})" if plan.baseline_run else " (no benchmarked baseline yet)"),
             f"noise: {plan.noise_source or 'unknown (no A/A noise floor, no baseline samples)'}"]
    lines += [f"measured: {text}" for text in plan.signals]
    for i, c in enumerate(plan.candidates, 1):
        gain = f"{_pct(c.expected_gain)} on {c.metric}" if c.expected_gain is not None and c.metric else "unknown"
        cost = f"~{c.cost_s / 60:.1f} min" if c.cost_s else "cost unknown"
        mark = ("clears the noise floor" if c.clears_noise
                else "quality variant" if c.favours_quality else "below the noise floor")
        lines.append(f"{i:2d}. [{c.category}] {c.title}: {c.change()}: expected {gain} "
                     f"({c.gain_source or 'no source'}); "
                     f"{c.samples_needed or '?'} requests per arm; {cost}; {mark}")
        lines += [f"      - {w}" for w in c.why]
    lines.append(plan.statement)
    return "\n".join(lines)
