"""Drafted hypothesis, findings, verdict and recommendations of an A/B report.

Every sentence cites the numbers it rests on and claims nothing the statistics do not carry:

* **speed** (``ttft_s``, ``prefill_tok_s``, ``decode_tok_s``): "measurable speedup" / "slowdown"
  only for metrics whose verdict is ``faster`` / ``slower`` (:mod:`servedeck.ab.stats`); "no
  measurable speedup" when none is ``faster``; each cited metric says what its verdict is:
  ``equivalent within ±3 %``, or ``no difference shown`` with its sample sizes (never "the same");
* **costs and gains of capacity** come from the startup facts (one value per arm, described,
  never judged): the KV pool, max concurrency (and the whole number of full-length requests it
  holds), peak activation memory; compile timings only when the arms' compile caches were in the
  same state, else the finding says why they are not compared;
* **mechanisms**: a startup warning the changed variable answers (the knowledge base's
  ``addresses_warnings``) that disappeared in B, with whether that bought any measured speed;
  the speculative acceptance length with its verdict; a new compile range and its cold compile;
* **signals** (:mod:`servedeck.ab.signals`): the comparison's quality gate and capacity verdict
  under the SLO (:func:`~servedeck.ab.signals.comparison_signals`), B's roofline, energy and
  capacity bound (:func:`~servedeck.ab.signals.read_signals`) are findings; energy per token
  (judged per request) and the capacity verdict count as gains or losses beside speed;
* **verdict**, by rule: a quality-gate failure → ``revert`` whatever the gains; a measured loss
  (speed, energy per token, capacity under load) with no gain → ``revert``; no gain but a
  capacity cost → ``revert``; gains without losses or costs → ``keep``; gains with losses or
  costs → ``trade-off`` (both named); no change shown anywhere → ``no change`` (keep the
  baseline, nothing to gain); metrics still undecided and nothing measured either way →
  ``undecided`` with the samples that would decide. A revert of a load-dependent knob (the
  knowledge base's ``load_dependent``) measured one request at a time, without the arms compared
  under load, says "unless a multi-request workload shows otherwise";
* **hypothesis**: the knowledge base's expectation for the direction of the change, A's startup
  warnings that the knob answers, A's KV headroom, what bounds A's capacity under load (whether
  the change relieves it), and this host's earlier verdicts on the knob;
* **recommendations**, split as the user splits them: the speed variant starts with the verdict's
  action and continues with ``invoke next``'s candidates that clear the noise floor (or says
  none does); the quality variant lists the candidates that move a quality knob the way that
  favours output quality, "carried" because this variable did not touch them.

The user's own ``--hypothesis`` and ``--verdict`` always replace the drafted ones.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servedeck.ab.compare import ArmDiff, fmt_value
from servedeck.ab.knowledge import KnowledgeBase, Knob, load_knowledge
from servedeck.ab.noise import NoiseFloor
from servedeck.ab.signals import Signal
from servedeck.ab.stats import Comparison, MetricComparison, short_warning
from servedeck.numfmt import fmt_num, fmt_signed, unit
from servedeck.runs import store

SPEED_METRICS = ("decode_tok_s", "ttft_s", "prefill_tok_s")
"""Speed metrics, in the order findings cite them."""
MECHANISM_METRICS = ("spec_accept_len",)
KV_COST_FRACTION = 0.01
"""A KV pool change smaller than this share is not called a cost or a gain."""

Action = Literal["keep", "revert", "trade-off", "no change", "undecided", "none"]


class Claim(BaseModel):
    """One drafted sentence and what it rests on (``phase name`` keys and startup fact names)."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    text: str
    cites: list[str] = Field(default_factory=list)


class DraftVerdict(BaseModel):
    """The drafted verdict: its action, its sentence and the facts it rests on."""

    model_config = ConfigDict(extra="forbid")
    action: Action
    text: str
    cites: list[str] = Field(default_factory=list)
    caveat: str | None = None
    short: str | None = None
    """The action in one line, for the speed recommendations."""


class Draft(BaseModel):
    """Everything drafted for one report."""

    model_config = ConfigDict(extra="forbid")
    hypothesis: str
    findings: list[Claim]
    verdict: DraftVerdict
    speed: list[str]
    quality: list[str]


# --------------------------------------------------------------------------------------------
# Sentence parts
# --------------------------------------------------------------------------------------------

def cite(m: MetricComparison) -> str:
    """``warm decode_tok_s 56.6 vs 57.0 tok/s (equivalent within ±3 %)``: B then A, and what its
    verdict carries."""
    head = f"{m.key} {fmt_num(m.b)} vs {fmt_num(m.a)}{unit(m.name)}"
    pct = f"±{m.margin * 100:g} %" if m.margin is not None else "the margin"
    if m.verdict in ("faster", "slower", "higher", "lower"):
        change = (m.ratio - 1) * 100 if m.ratio else 0.0
        ci = (f", 95 % CI of the ratio {m.ci_low:.3f}\u2013{m.ci_high:.3f}" if m.ci_low is not None else "")
        return f"{head} ({change:+.1f} %, {m.verdict}; Holm p={m.p_adjusted:.2g}{ci})"
    if m.verdict == "equivalent":
        return f"{head} (equivalent within {pct})"
    if m.verdict == "within margin":
        return f"{head} (a difference smaller than {pct})"
    if m.judged:
        return f"{head} (no difference shown at {len(m.samples_b)} vs {len(m.samples_a)} requests)"
    return f"{head} (not judged: {m.reason or m.verdict})"


def _speed(c: Comparison) -> list[MetricComparison]:
    order = {name: i for i, name in enumerate(SPEED_METRICS)}
    ms = [m for m in c.bench if m.name in order and m.verdict != "missing"]
    return sorted(ms, key=lambda m: (order[m.name], m.phase != "warm"))


ENERGY_METRICS = ("energy_j_per_token",)
"""Energy metrics (judged per request where telemetry measured them, :mod:`servedeck.bench.limits`)."""


def _energy(c: Comparison) -> list[MetricComparison]:
    return [m for m in c.bench if m.name in ENERGY_METRICS and m.verdict in ("faster", "slower")]


def cite_energy(m: MetricComparison) -> str:
    """``warm energy_j_per_token 0.41 vs 0.52 J (-21.2 %, less energy; Holm p=0.002)``."""
    change = (m.ratio - 1) * 100 if m.ratio else 0.0
    word = "less energy" if m.verdict == "faster" else "more energy"
    return f"{m.key} {fmt_num(m.b)} vs {fmt_num(m.a)} J ({change:+.1f} %, {word}; Holm p={m.p_adjusted:.2g})"


def _fact(c: Comparison, name: str) -> MetricComparison | None:
    m = c.metric(name)
    return m if m is not None and m.a is not None and m.b is not None else None


def _tokens_per_request(c: Comparison) -> float | None:
    per = c.startup_b.get("max_concurrency_tokens_per_request") or c.startup_a.get("max_concurrency_tokens_per_request")
    return float(per) if isinstance(per, (int, float)) else None


def capacity_claim(c: Comparison) -> Claim | None:
    """The KV pool and concurrency change as a cost (smaller) or a gain (larger), with the whole
    number of full-length requests each arm holds when that changed; None when neither changed."""
    kv, conc = _fact(c, "kv_cache_tokens"), _fact(c, "max_concurrency")
    if kv is None or not kv.a or kv.b is None or abs(kv.b / kv.a - 1) < KV_COST_FRACTION:
        return None
    cost = kv.b < kv.a
    text = (f"{'Real cost paid' if cost else 'Capacity gained'}: KV pool {fmt_signed(kv.difference)} tokens "
            f"({fmt_num(kv.a)} \u2192 {fmt_num(kv.b)})")
    cites = ["kv_cache_tokens"]
    if conc is not None and conc.a is not None and conc.b is not None:
        per = _tokens_per_request(c)
        at = f" at {fmt_num(per)} tokens/request" if per else ""
        text += f", max concurrency{at} {conc.a:.2f}\u00d7 \u2192 {conc.b:.2f}\u00d7"
        cites.append("max_concurrency")
        whole_a, whole_b = math.floor(conc.a + 1e-9), math.floor(conc.b + 1e-9)
        if whole_a != whole_b and per:
            n = max(whole_a, whole_b)
            text += (f": this configuration can {'no longer' if cost else 'now'} hold {_count(n)} concurrent "
                     f"full-context requests ({fmt_num(per)} tokens each)")
    peak = _fact(c, "peak_activation_gib")
    if peak is not None and peak.a is not None and peak.b is not None and peak.b != peak.a \
            and cost == (peak.b > peak.a):
        text += f"; peak activation {fmt_num(peak.a)} \u2192 {fmt_num(peak.b)} GiB"
        cites.append("peak_activation_gib")
    return Claim(kind="cost" if cost else "gain", text=text + ".", cites=cites)


def capacity_short(c: Comparison) -> str | None:
    """``KV pool −28,376 tokens, max concurrency 2.02× → 1.80×`` (None when unchanged)."""
    kv, conc = _fact(c, "kv_cache_tokens"), _fact(c, "max_concurrency")
    if kv is None or not kv.a or kv.b is None or abs(kv.b / kv.a - 1) < KV_COST_FRACTION:
        return None
    text = f"KV pool {fmt_signed(kv.difference)} tokens"
    if conc is not None and conc.a is not None and conc.b is not None:
        per = _tokens_per_request(c)
        text += (f", max concurrency {conc.a:.2f}\u00d7 \u2192 {conc.b:.2f}\u00d7"
                 + (f" at {fmt_num(per)} tokens" if per else ""))
    return text


def _count(n: int) -> str:
    return {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}.get(n, str(n))


def _warning_claims(c: Comparison, knob: Knob | None, gained: bool) -> list[Claim]:
    out = []
    for w in c.warnings:
        if w.status != "present in A, absent in B":
            continue
        answered = knob is not None and w.id in knob.addresses_warnings
        if not answered:
            continue
        effect = ("and B measured faster" if gained else
                  "but removing it bought no measurable speed on this workload")
        out.append(Claim(kind="warning", text=f"A's warning `{w.short}` is gone in B, {effect}.", cites=[w.id]))
    return out


def _compile_claim(c: Comparison) -> Claim | None:
    """B compiled another range (and what that cost), or why startup timings are not compared."""
    from servedeck.vllm.startup_facts import compile_range_signature
    init = c.metric("init_engine_s")
    if init is not None and init.verdict == "not comparable":
        return Claim(kind="startup", text=f"Startup timings are not compared: {init.reason}.",
                     cites=["init_engine_s", "time_to_ready_s", "torch_compile_total_s"])
    sig_a, sig_b = compile_range_signature(c.startup_a), compile_range_signature(c.startup_b)
    sig_a = [x.replace("[", "(").replace("]", ")") for x in sig_a or []]
    sig_b = [x.replace("[", "(").replace("]", ")") for x in sig_b or []]
    if not sig_a or not sig_b or sig_a == sig_b:
        return None
    took = _fact(c, "torch_compile_total_s")
    cost = f" in {fmt_num(took.b)} s (A: {fmt_num(took.a)} s for {', '.join(sig_a)})" if took else ""
    return Claim(kind="compile",
                 text=(f"B compiled a new range ({', '.join(sig_b)}){cost}: a change that moves the compile "
                       "range pays a fresh compile once, on every host whose caches have not seen it."),
                 cites=["torch_compile_total_s", "compile_ranges"])


# --------------------------------------------------------------------------------------------
# Findings and verdict
# --------------------------------------------------------------------------------------------

def single_stream(run_dir: Path) -> bool:
    """True when the run's benchmark sent one request at a time (servedeck's client does; a
    workload that records a ``concurrency`` or ``max_concurrency`` above 1 did not)."""
    from servedeck.errors import ServedeckError
    try:
        workload = store.read(Path(run_dir), store.WORKLOAD)
    except ServedeckError:
        return True
    level = getattr(workload, "concurrency", None) or getattr(workload, "max_concurrency", None) or 1
    return int(level) <= 1


def findings(diff: ArmDiff, c: Comparison, run_b: Path, *, knowledge: KnowledgeBase | None = None,
             noise: NoiseFloor | None = None, signals: list[Signal] | None = None) -> list[Claim]:
    """The drafted findings (module docstring), in the order of the user's report."""
    kb = knowledge or load_knowledge()
    var = diff.single_variable
    knob = kb.for_variable(var.name) if var is not None else None
    speed = _speed(c)
    gains = [m for m in speed if m.verdict == "faster"]
    losses = [m for m in speed if m.verdict == "slower"]
    out: list[Claim] = []
    if gains:
        out.append(Claim(kind="speed", text="Measurable speedup: " + "; ".join(cite(m) for m in gains) + ".",
                         cites=[m.key for m in gains]))
    if losses:
        out.append(Claim(kind="speed", text="Measurable slowdown: " + "; ".join(cite(m) for m in losses) + ".",
                         cites=[m.key for m in losses]))
    rest = [m for m in speed if m.verdict not in ("faster", "slower")]
    if not gains and speed:
        shown = [m for m in rest if m.name != "prefill_tok_s" or m.verdict in ("equivalent", "within margin")]
        text = "No measurable speedup: " + "; ".join(cite(m) for m in shown[:4])
        open_ = [m for m in rest if m.judged and not m.decided]
        if open_:
            text += (f". {len(open_)} of {len(speed)} speed metrics are undecided: their samples show no "
                     "difference either way, which is not the same as none")
        out.append(Claim(kind="speed", text=text + ".", cites=[m.key for m in shown[:4]]))
    prefill = [m for m in rest if m.name == "prefill_tok_s" and m.key not in {k for cl in out for k in cl.cites}]
    if prefill:
        out.append(Claim(kind="speed", text="Prefill: " + "; ".join(cite(m) for m in prefill) + ".",
                         cites=[m.key for m in prefill]))
    out += _warning_claims(c, knob, bool(gains))
    cap = capacity_claim(c)
    if cap:
        out.append(cap)
    comp = _compile_claim(c)
    if comp:
        out.append(comp)
    mech = [m for m in c.bench if m.name in MECHANISM_METRICS and m.verdict != "missing"]
    if mech:
        out.append(Claim(kind="mechanism",
                         text="Speculative acceptance length: " + "; ".join(cite(m) for m in mech) + ".",
                         cites=[m.key for m in mech]))
    energy = _energy(c)
    if energy:
        out.append(Claim(kind="energy", text="Energy per token: " + "; ".join(cite_energy(m) for m in energy) + ".",
                         cites=[m.key for m in energy]))
    for s in signals or []:
        text = s.text[0].upper() + s.text[1:]
        if s.kind == "roofline" or s.name in ("j_per_token",):
            text = f"B: {s.text}"  # one arm's figure, described, not judged
        out.append(Claim(kind=s.kind, text=text.rstrip(".") + ".", cites=[s.name]))
    if noise is not None:
        from servedeck.ab.noise import noise_sentence
        out.append(Claim(kind="noise", text=noise_sentence(noise, c)[0].upper() + noise_sentence(noise, c)[1:] + ".",
                         cites=list(noise.metrics)))
    if c.sequential is not None:
        from servedeck.ab.sequential import describe_stop
        out.append(Claim(kind="sampling", text=describe_stop(c.sequential).capitalize() + ".", cites=[]))
    return out


def verdict(diff: ArmDiff, c: Comparison, run_b: Path, *, knowledge: KnowledgeBase | None = None,
            signals: list[Signal] | None = None) -> DraftVerdict:
    """The drafted verdict (module docstring's rules)."""
    kb = knowledge or load_knowledge()
    if diff.is_identical:
        return DraftVerdict(action="none", text="No verdict: this is an A/A comparison of one configuration "
                                                "(every difference above is noise).")
    var = diff.single_variable
    if var is None:
        return DraftVerdict(action="undecided", text=(
            f"No verdict: {len(diff.differences)} variables changed at once "
            f"({', '.join(v.name for v in diff.differences)}), so no effect can be attributed to one of them."))
    knob = kb.for_variable(var.name)
    a_text = fmt_value(var.a) if var.present_a else "(unset)"
    b_text = fmt_value(var.b) if var.present_b else "(unset)"
    back, keep = f"{var.name} to {a_text}", f"{var.name} = {b_text}"
    speed = _speed(c)
    gains = [m for m in speed if m.verdict == "faster"]
    losses = [m for m in speed if m.verdict == "slower"]
    cap = capacity_claim(c)
    costs = [cap] if cap is not None and cap.kind == "cost" else []
    cost_short = capacity_short(c) if costs else None
    gate = [s for s in signals or [] if s.kind == "quality" and s.name == "gate" and s.passed is False]
    under_load = next((s for s in signals or [] if s.kind == "capacity" and s.verdict is not None), None)
    # gains and losses beside speed: energy per token (judged) and capacity under the SLO (decided)
    energy = _energy(c)
    better = [cite_energy(m) for m in energy if m.verdict == "faster"]
    worse = [cite_energy(m) for m in energy if m.verdict == "slower"]
    if under_load is not None and under_load.verdict in ("higher", "lower"):
        (better if under_load.verdict == "higher" else worse).append(under_load.text)
    reasons_cost = [cl.text.split(": ", 1)[-1].rstrip(".") for cl in costs] + worse
    cites = ([m.key for m in gains + losses + energy] + [k for cl in costs for k in cl.cites]
             + (["capacity"] if under_load is not None and under_load.verdict in ("higher", "lower") else []))
    gained = [cite(m) for m in gains] + better
    caveat = None
    if knob is not None and knob.load_dependent and single_stream(run_b) and under_load is None:
        caveat = "unless a multi-request workload shows otherwise"
        why = (f"The benchmark sent one request at a time, and {var.name} is load-dependent "
               f"({knob.load_note or 'its effect needs concurrent requests'}).")
    if gate:
        text = f"Revert {back}: B fails the quality gate ({'; '.join(s.text for s in gate)})"
        if gained:
            text += f", whatever its speed ({'; '.join(gained)})"
        return DraftVerdict(action="revert", text=text + ".", cites=cites + [s.name for s in gate],
                            short=f"Revert {back}: quality gate failed")
    if (losses or worse) and not gained:
        if losses:
            text = f"Revert {back}: B is measurably slower ({'; '.join(cite(m) for m in losses)})"
            if reasons_cost:
                text += f", and it costs {'; '.join(reasons_cost)}"
        else:
            text = f"Revert {back}: no measured gain, and B measurably costs {'; '.join(reasons_cost)}"
        lost = ("slower" if losses else
                "less capacity under load" if under_load is not None and under_load.verdict == "lower" else
                "more energy per token")
        return DraftVerdict(action="revert", text=text + ".", cites=cites,
                            short=f"Revert {back}: {lost} at {b_text}" + (f", cost {cost_short}" if cost_short else ""))
    if not gained and costs:
        text = (f"Revert {back}{', ' + caveat if caveat else ''}. No measurable speedup at {b_text} "
                f"({'; '.join(cite(m) for m in speed[:2])}), and B costs {'; '.join(reasons_cost)}."
                + (f" {why}" if caveat else ""))
        return DraftVerdict(action="revert", text=text, cites=cites + [m.key for m in speed[:2]], caveat=caveat,
                            short=f"Revert {back}: no speed gain at {b_text}, cost {cost_short}"
                                  + (f" ({caveat})" if caveat else ""))
    if gained and not losses and not costs and not worse:
        return DraftVerdict(action="keep", text=(f"Keep {keep}: {'; '.join(gained)}, with no "
                                                 "measured loss and no capacity cost."), cites=cites,
                            short=f"Keep {keep}: " + ", ".join(
                                [f"{m.key} {((m.ratio or 1.0) - 1) * 100:+.1f} %" for m in gains + energy]
                                + (["capacity under load higher"] if under_load is not None
                                   and under_load.verdict == "higher" else [])))
    if gained:
        against = [cite(m) for m in losses] + reasons_cost
        return DraftVerdict(action="trade-off", text=(
            f"Trade-off: keep {keep} only if {'; '.join(gained)} matters more than "
            f"{'; '.join(against)}."), cites=cites, short=f"Trade-off at {keep}: gains and costs both measured")
    judged = [m for m in speed if m.judged]
    open_ = [m for m in judged if not m.decided]
    if judged and not open_:
        text = (f"No change: {var.name} {a_text} \u2192 {b_text} changed no speed metric beyond "
                f"\u00b1{c.margin * 100:g} % ({'; '.join(cite(m) for m in speed[:3])}) and no capacity figure; "
                f"keep the baseline ({back})" + (f", {caveat}. {why}" if caveat else "."))
        return DraftVerdict(action="no change", text=text, cites=[m.key for m in speed[:3]], caveat=caveat,
                            short=f"Keep {back}: {b_text} changed nothing measurable")
    need = max((m.samples_needed or 0 for m in open_), default=0)
    more = f"; about {need} requests per arm would decide the most uncertain" if need else ""
    return DraftVerdict(action="undecided", text=(
        f"Undecided: the samples cannot yet tell {var.name} {a_text} \u2192 {b_text} apart "
        f"({'; '.join(cite(m) for m in open_[:3])}){more}."), cites=[m.key for m in open_],
        short=f"Undecided on {var.name} {a_text} \u2192 {b_text}{more}")


def hypothesis(diff: ArmDiff, c: Comparison, run_a: Path, *, knowledge: KnowledgeBase | None = None,
               history: list | None = None) -> str:
    """The drafted hypothesis (module docstring)."""
    kb = knowledge or load_knowledge()
    var = diff.single_variable
    if diff.is_identical:
        return ("A/A: the same configuration twice; any difference is noise, and its spread becomes this host's "
                "noise floor.")
    if var is None:
        return f"Several variables changed ({', '.join(v.name for v in diff.differences)}); no single hypothesis."
    knob = kb.for_variable(var.name)
    run_no = store.sequence_of(run_a)
    name = f"Run #{run_no}" if run_no else run_a.name
    parts = []
    warned = [w for w in c.warnings if w.text_a is not None and knob is not None and w.id in knob.addresses_warnings]
    for w in warned:
        text = w.text_a or ""  # not None: warned keeps the warnings A logged
        parts.append(f"{name}'s startup log warned: {short_warning(text)} ({text[:160].rstrip()}"
                     f"{'…' if len(text) > 160 else ''}).")
    change = (f"{var.name} {fmt_value(var.a) if var.present_a else '(unset)'} \u2192 "
              f"{fmt_value(var.b) if var.present_b else '(unset)'}")
    if knob is not None:
        d = knob.direction(var.a, var.b) or knob.raise_
        parts.append(f"Changing {change} should give {d.expect}; watch {d.watch}.")
        if knob.load_dependent:
            parts.append(f"Its effect is load-dependent: {knob.load_note}.")
            from servedeck.ab.signals import bound_of, read_signals
            bound = bound_of(read_signals(run_a, "capacity"))
            if bound is not None:
                relieves = knob.relieved(var.a, var.b) == bound.name
                parts.append(f"{name}'s load benchmark: {bound.text}; this change "
                             f"{'relieves' if relieves else 'does not relieve'} that bound.")
    else:
        parts.append(f"Changing {change}: the knowledge base has no entry for it, so no direction is expected.")
    kv, conc = _fact(c, "kv_cache_tokens"), _fact(c, "max_concurrency")
    if kv is not None:
        head = f"{name}'s KV pool: {fmt_num(kv.a)} tokens"
        if conc is not None:
            per = _tokens_per_request(c)
            head += f", max concurrency {conc.a:.2f}\u00d7" + (f" at {fmt_num(per)} tokens/request" if per else "")
        parts.append(head + ".")
    for rec in history or []:
        if knob is not None and rec.knob == knob.id:
            parts.append(f"Earlier on host {rec.host}: {rec.variable} {fmt_value(rec.a)} \u2192 {fmt_value(rec.b)} "
                         f"was {rec.action} ({rec.runs_b[0]}).")
    return " ".join(parts)


def recommendations(diff: ArmDiff, c: Comparison, v: DraftVerdict,
                    candidates: list | None) -> tuple[list[str], list[str]]:
    """(speed variant, quality variant) lines (module docstring)."""
    speed: list[str] = []
    var = diff.single_variable
    if v.short and var is not None:
        speed.append(v.short + ".")
    quality: list[str] = []
    tested = var.name if var is not None else None
    seen: set[str] = set()
    for cand in candidates or []:
        if cand.favours_quality:
            if cand.knob in seen or cand.knob == (knob_of(tested) if tested else None):
                continue
            seen.add(cand.knob)
            quality.append(f"{cand.title}: {cand.change()} A/B, for {cand.expect}; watch {cand.watch}. Carried: "
                           f"unchanged by this variable ({tested}).")
            continue
        if cand.clears_noise and (cand.expected_gain or 0) > 0:
            speed.append(f"{cand.title}: {cand.change()}, expected {cand.expected_gain * 100:+.1f} % on "
                         f"{cand.metric} ({cand.gain_source}; about {cand.samples_needed} requests per arm"
                         f"{', ~%.0f s' % cand.cost_s if cand.cost_s else ''}): {'; '.join(cand.why)}.")
    if candidates is not None and not any(c2.clears_noise for c2 in candidates):
        speed.append("Nothing left in the knowledge base is expected to clear this host's noise floor on this "
                     "workload (`invoke next` lists each candidate and why).")
    under_load = list(dict.fromkeys(c2.title for c2 in candidates or []
                                    if any(w.startswith("load-dependent") for w in c2.why)
                                    and c2.category != "quality" and c2.knob != (knob_of(tested) if tested else None)))
    if under_load:
        speed.append("Needs a multi-request workload to be judged (one request at a time cannot show it): "
                     + "; ".join(under_load[:4]) + ".")
    return speed, quality


def knob_of(variable: str) -> str | None:
    """The knowledge base's knob id of an A/B variable, or None."""
    knob = load_knowledge().for_variable(variable)
    return knob.id if knob else None


def draft(diff: ArmDiff, c: Comparison, run_a: Path, run_b: Path, *, noise: NoiseFloor | None = None,
          knowledge: KnowledgeBase | None = None, history: list | None = None,
          candidates: list | None = None, signals: list[Signal] | None = None) -> Draft:
    """Draft everything at once (module docstring)."""
    kb = knowledge or load_knowledge()
    v = verdict(diff, c, run_b, knowledge=kb, signals=signals)
    speed, quality = recommendations(diff, c, v, candidates)
    return Draft(hypothesis=hypothesis(diff, c, run_a, knowledge=kb, history=history),
                 findings=findings(diff, c, run_b, knowledge=kb, noise=noise, signals=signals),
                 verdict=v, speed=speed, quality=quality)


def value_text(value: Any) -> str:
    """A value for sentences (:func:`servedeck.ab.compare.fmt_value`)."""
    return fmt_value(value)
