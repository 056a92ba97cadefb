"""``invoke tune``: propose, deploy, bench, judge, keep or revert, until a budget or the noise
floor stops it; resumable.

**The loop.** The baseline is the base profile with each tuned variable at its first value (or
at the profile's own value when the ladder holds it). It is deployed and benchmarked once
(:data:`BASELINE_REQUESTS` requests per phase); then, while the budget allows:

1. *propose*: ``invoke next``'s ranking (:func:`servedeck.ab.next.propose`) restricted to the
   tuned variables, each a step up or down its ladder from the current best. A step not yet
   measured on this host is expected to gain :data:`EXPLORE_FACTOR` × the margin and is always
   worth its one experiment (this is how a variable gets its first measurement); a measured one
   expects what the host's history says (the same change: its measured ratio; one step further
   the same way: half of the last step's gain; the way back: the inverse);
2. *stop* when no candidate is expected to clear the noise floor (every step measured, and none
   expected beyond the margin within the sample budget at the host's noise: the A/A noise floor
   when measured, else the baseline's own spread), or when the experiment or time budget is
   spent;
3. *deploy* the best profile with that one change (a profile written as ``invoke sweep``
   writes its arms, ``<base>-sw<hash>``); *bench* it against the best's run until every metric
   is decided (:func:`servedeck.ab.sequential.bench_against`), or, with ``interleave`` N,
   deploy the best and the variant alternately (``A B B A …``, N deployments each, looks after
   each pair: ``invoke ab --interleave --sequential``, :mod:`servedeck.ab.interleave`) so that
   a host drifting during the experiment (heat, other load) spreads over both arms and its
   trend is reported; *judge* it with a normal report
   (``runs/tune/<name>/reports/NN-<A>_vs_<B>/report.md`` + ``experiment.json``);
4. *keep* it as the new best when the objective metric (default ``warm decode_tok_s``) is
   measured faster and the drafted verdict is ``keep`` or ``trade-off`` (no measured speed loss,
   no failed quality gate; a capacity cost is reported, not blocking); else *revert* (the best
   stays). Proposals and verdicts read what the load, quality and energy stages measured
   through :mod:`servedeck.ab.signals` (in ``next``'s ranking and the drafted verdict): a step
   the quality gate blocks is reverted and, decided, not proposed again; a roofline bounds what
   a step may expect.

At the end the host serves what the user chose: ``restore`` (default) puts back the deployment
it served before tuning (``invoke rollback --to`` that revision), ``keep-winner`` deploys the
best profile (unless it serves already).

**Resume.** ``runs/tune/<name>/state.json`` is written after every phase; running the same
command again continues where it stopped (a step interrupted before its verdict is deployed
again as a new run; a benchmarked one is only judged), and a finished tune only reports.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servedeck.ab.knowledge import KnowledgeBase, Knob, load_knowledge
from servedeck.ab.next import HEADLINE_METRIC, dotted_get
from servedeck.ab.stats import ALPHA, DEFAULT_MARGIN
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.jsonio import read_json_file
from servedeck.runs import store

TUNE_DIR = "tune"
STATE_FILE = "state.json"
BASELINE_REQUESTS = 8
EXPLORE_FACTOR = 2.0
"""An unmeasured step is expected to gain this many margins (module docstring)."""
DEFAULT_METRIC = HEADLINE_METRIC

Finally = Literal["restore", "keep-winner"]
BUDGET_FIELDS = ("max_experiments", "max_seconds", "finally_")
"""What a resumed, unfinished tune takes from the command that resumes it."""


class TuneSpec(BaseModel):
    """What to tune and within which budget.

    Attributes:
        name: the tune's name (its directory under ``runs/tune/``; the same name resumes).
        base: the base profile; host: the inventory host.
        variables: profile path → its ladder of values, in order.
        metric: the objective (``phase name`` of a bench metric).
        max_experiments, max_seconds: the budget.
        finally_: ``restore`` the host's original deployment or ``keep-winner``.
        margin, alpha: the verdicts' margin and family-wise level.
        prompt_tokens, max_tokens: the bench workload (None: sized to the server).
        baseline_requests, max_requests, batch: requests per phase of a baseline, the sample
            budget of a variant, and the requests added per look.
        interleave: deployments per arm of each experiment in ``A B B A`` order (0: the variant
            is benchmarked once, against the best's recorded run); the sample budget is then
            spread over them.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str
    base: str
    host: str
    variables: dict[str, list[Any]]
    metric: str = DEFAULT_METRIC
    max_experiments: int = Field(8, ge=1)
    max_seconds: float | None = Field(None, gt=0)
    finally_: Finally = Field("restore", alias="finally")
    margin: float = Field(DEFAULT_MARGIN, ge=0, lt=1)
    alpha: float = Field(ALPHA, gt=0, lt=1)
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    baseline_requests: int = Field(BASELINE_REQUESTS, ge=2)
    max_requests: int = Field(24, ge=2)
    batch: int = Field(2, ge=1)
    interleave: int = Field(0, ge=0, le=8)


class TuneStep(BaseModel):
    """One experiment of the tune (or the baseline, ``variable`` None)."""

    model_config = ConfigDict(extra="forbid")
    n: int
    variable: str | None = None
    a: Any = None
    b: Any = None
    profile: str
    overrides: dict[str, Any]
    run_a: str | None = None
    run_b: str | None = None
    runs_a: list[str] = Field(default_factory=list)
    runs_b: list[str] = Field(default_factory=list)
    """An interleaved experiment's runs of each arm, in order (``run_a``/``run_b``: the first
    of A, the last of B)."""
    interleaving: dict[str, Any] | None = None
    status: Literal["planned", "deployed", "benched", "judged"] = "planned"
    expected_gain: float | None = None
    measured_gain: float | None = None
    action: str | None = None
    kept: bool | None = None
    report: str | None = None


class TuneState(BaseModel):
    """``runs/tune/<name>/state.json``."""

    model_config = ConfigDict(extra="forbid")
    spec: TuneSpec
    best: dict[str, Any]
    best_profile: str
    best_run: str | None = None
    original: dict[str, Any] | None = None
    steps: list[TuneStep] = Field(default_factory=list)
    stopped: str | None = None
    finished: bool = False
    started_at: str
    updated_at: str | None = None
    elapsed_s: float = 0.0

    @property
    def experiments(self) -> list[TuneStep]:
        """The steps that are experiments (not the baseline)."""
        return [s for s in self.steps if s.variable is not None]


def tune_dir(runs_dir: Path, name: str) -> Path:
    """``runs/tune/<name>/``."""
    return Path(runs_dir) / TUNE_DIR / name


def default_name(base: str, host: str, variables: dict[str, list[Any]]) -> str:
    """A stable name for the same base, host and ladders: the same command resumes."""
    digest = hashlib.sha256(json.dumps([base, host, variables], sort_keys=True).encode()).hexdigest()
    return f"{base}-{host}-{digest[:8]}"


def load_state(runs_dir: Path, name: str) -> TuneState | None:
    """The saved state of tune ``name``, or None.

    Raises:
        ServedeckError: the state file is not a valid state (file and field named).
    """
    path = tune_dir(runs_dir, name) / STATE_FILE
    if not path.exists():
        return None
    try:
        return TuneState.model_validate(read_json_file(path))
    except (ValueError, ValidationError) as exc:
        loc = ".".join(str(p) for p in exc.errors()[0]["loc"]) if isinstance(exc, ValidationError) else None
        raise ServedeckError(f"invalid tune state: {exc}", file=str(path), field=loc,
                             hint="remove the directory to start the tune afresh") from None


def save_state(runs_dir: Path, state: TuneState) -> Path:
    """Write the state atomically."""
    state.updated_at = store.utcnow()
    return atomic_write(tune_dir(runs_dir, state.spec.name) / STATE_FILE,
                        state.model_dump_json(indent=2, by_alias=True) + "\n", mode=store.RUN_FILE_MODE)


# --------------------------------------------------------------------------------------------
# Proposals
# --------------------------------------------------------------------------------------------

def tune_knowledge(spec: TuneSpec, kb: KnowledgeBase | None = None) -> KnowledgeBase:
    """The knowledge base restricted to the tuned variables, their ladders the tune's own (a
    variable the knowledge base does not know becomes a plain knob)."""
    kb = kb or load_knowledge()
    knobs = []
    for path, ladder in spec.variables.items():
        known = next((k for k in kb.knobs if k.profile_path == path), None)
        if known is not None:
            knobs.append(known.model_copy(update={"values": list(ladder)}))
        else:
            knobs.append(Knob.model_validate({
                "id": path, "title": path, "profile_path": path, "variables": [path.rsplit(".", 1)[-1], path],
                "category": "speed", "trades": "not in the knowledge base",
                "raise": {"expect": "a change of the objective", "watch": "every metric"},
                "lower": {"expect": "a change of the objective", "watch": "every metric"},
                "values": list(ladder), "sources": ["invoke tune --vary"]}))
    return KnowledgeBase(knobs=knobs)


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------

@dataclass
class TuneOps:
    """What the loop does to the outside world (the CLI binds the real stages; tests pass
    stand-ins).

    Attributes:
        write_profile: ``(base, overrides, tune name) -> profile name`` (writes it when needed).
        deploy: ``profile name -> run directory`` (ready).
        bench: ``(run_dir, against: run_dir | None) -> None``: the baseline (``against`` None)
            with the spec's fixed requests, a variant sequentially against the best's run.
        serving: ``-> {"revision", "compose_sha256", "run_id"}`` of what the host serves, or None.
        restore: ``original -> None``: put back the original deployment.
        profile_doc: ``profile name -> {"profile", "effective"}`` (resolved profile and
            effective settings) for the proposals.
        clock: seconds, monotonic.
        say: progress lines.
        interleaved: ``(profile A, profile B, deployments per arm) -> (runs of A, runs of B,
            Interleaving)``: an interleaved, sequentially sampled experiment (``interleave``).
    """

    write_profile: Callable[[str, dict[str, Any], str], str]
    deploy: Callable[[str], Path]
    bench: Callable[[Path, Path | None], None]
    serving: Callable[[], dict[str, Any] | None]
    restore: Callable[[dict[str, Any]], None]
    profile_doc: Callable[[str], dict[str, Any]]
    clock: Callable[[], float] = time.monotonic
    say: Callable[[str], None] = lambda line: None
    reuse: Callable[[str], Path | None] = lambda profile: None
    """``profile name -> run directory``: a benchmarked run of this host that deployed exactly
    that configuration (the baseline then needs no deploy), or None."""
    interleaved: Callable[[str, str, int], tuple[list[Path], list[Path], Any]] | None = None


def start(runs_dir: Path, spec: TuneSpec, base_profile: dict, ops: TuneOps) -> TuneState:
    """The saved state of ``spec.name`` (resumed), or a new one (the baseline's overrides: each
    variable at the profile's value when its ladder holds it, else the ladder's first value).

    Raises:
        ServedeckError: a saved tune of that name tuned something else.
    """
    state = load_state(runs_dir, spec.name)
    if state is not None:
        if (state.spec.base, state.spec.host, state.spec.variables) != (spec.base, spec.host, spec.variables):
            raise ServedeckError(f"tune {spec.name!r} exists with other settings (base {state.spec.base}, host "
                                 f"{state.spec.host}, variables {list(state.spec.variables)})",
                                 file=str(tune_dir(runs_dir, spec.name) / STATE_FILE),
                                 hint="give another --name, or the same base, host and --vary to resume it")
        if not state.finished:  # a resumed tune takes the budget it is given now
            state.spec = state.spec.model_copy(update={k: getattr(spec, k) for k in BUDGET_FIELDS})
        return state
    best = {}
    for path, ladder in spec.variables.items():
        current = dotted_get(base_profile, path)
        best[path] = current if current in ladder else ladder[0]
    profile = ops.write_profile(spec.base, best, spec.name)
    state = TuneState(spec=spec, best=best, best_profile=profile, original=ops.serving(), started_at=store.utcnow())
    save_state(runs_dir, state)
    return state


def run_tune(runs_dir: Path, state: TuneState, ops: TuneOps, *, judge: Callable[..., Any] | None = None,
             propose_fn: Callable[..., Any] | None = None) -> TuneState:
    """Run (or resume) the loop of the module docstring until it stops, then leave the host as
    the spec says. The state is saved after every phase (an interrupt loses at most the phase
    it interrupted).

    Args:
        judge: ``(runs_dir, runs_a, runs_b, out, interleaving) -> Outcome`` (default
            :func:`servedeck.ab.experiment.compare_runs`).
        propose_fn: default :func:`servedeck.ab.next.propose`.

    Returns:
        the final state (``stopped`` says why, ``finished`` that the host was left as chosen).

    Raises:
        ServedeckError: a deploy, bench or comparison failed (the state says where; run again
            to resume).
    """
    from servedeck.ab.experiment import compare_runs
    from servedeck.ab.next import propose
    judge = judge or (lambda rd, a, b, out, ilv: compare_runs(rd, a, b, out=out, interleaving=ilv))
    propose_fn = propose_fn or propose
    spec = state.spec
    began = ops.clock() - state.elapsed_s
    kb = tune_knowledge(spec)

    def save() -> None:
        state.elapsed_s = ops.clock() - began
        save_state(runs_dir, state)

    if state.finished:
        return state
    # the baseline
    if state.best_run is None:
        step = next((s for s in state.steps if s.variable is None), None)  # an interrupted baseline resumes
        if step is None:
            step = _open_step(state, None, None, None, state.best_profile, dict(state.best))
        reused = ops.reuse(state.best_profile) if step.status == "planned" else None
        if reused is not None:
            ops.say(f"baseline {state.best_profile}: reusing run {Path(reused).name} (the same configuration, "
                    "benchmarked on this host)")
            step.run_b, step.status = Path(reused).name, "judged"
        else:
            _do_step(runs_dir, state, step, ops, save, judge)
        state.best_run = step.run_b
        save()
    while state.stopped is None:
        open_step = next((s for s in state.experiments if s.status != "judged"), None)
        if open_step is None:
            if len(state.experiments) >= spec.max_experiments:
                state.stopped = f"experiment budget ({spec.max_experiments}) spent"
                break
            if spec.max_seconds is not None and ops.clock() - began >= spec.max_seconds:
                state.stopped = f"time budget ({spec.max_seconds:.0f} s) spent"
                break
            cand = _next_candidate(runs_dir, state, ops, kb, propose_fn)
            if cand is None:
                state.stopped = ("noise floor: no step of the tuned variables is expected to clear it "
                                 f"(±{spec.margin * 100:g} % within {spec.max_requests} requests per arm)")
                break
            overrides = {**state.best, cand.profile_path: cand.proposed}
            profile = ops.write_profile(spec.base, overrides, spec.name)
            open_step = _open_step(state, cand.profile_path, cand.current, cand.proposed, profile, overrides,
                                   expected=cand.expected_gain)
            ops.say(f"experiment {open_step.n}: {cand.change()} (expected {_pct(cand.expected_gain)} on "
                    f"{cand.metric}, {cand.gain_source})")
            save()
        _do_step(runs_dir, state, open_step, ops, save, judge)
        if open_step.kept:
            state.best, state.best_profile = dict(open_step.overrides), open_step.profile
            state.best_run = open_step.run_b
        ops.say(f"experiment {open_step.n}: {open_step.action}, {'kept' if open_step.kept else 'reverted'} "
                f"(measured {_pct(open_step.measured_gain)} on {spec.metric})")
        save()
    save()
    _leave_host(state, ops)
    state.finished = True
    save()
    return state


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:+.1f} %"


def _open_step(state: TuneState, variable, a, b, profile, overrides, expected=None) -> TuneStep:
    step = TuneStep(n=len(state.experiments) + (1 if variable is not None else 0), variable=variable, a=a, b=b,
                    profile=profile, overrides=overrides, run_a=state.best_run if variable is not None else None,
                    expected_gain=expected)
    state.steps.append(step)
    return step


def _do_step(runs_dir: Path, state: TuneState, step: TuneStep, ops: TuneOps, save, judge) -> None:
    """Deploy, bench and (for an experiment) judge one step, from where it stopped."""
    if step.variable is not None and state.spec.interleave and step.status in ("planned", "deployed"):
        _interleave_step(state, step, ops, save)
    if step.status == "planned" or (step.status == "deployed" and step.run_b is not None):
        ops.say(f"deploy {step.profile}")
        step.run_b = Path(ops.deploy(step.profile)).name
        step.status = "deployed"
        save()
        against = Path(runs_dir) / step.run_a if step.run_a else None
        ops.bench(Path(runs_dir) / step.run_b, against)
        step.status = "benched"
        save()
    if step.variable is None:
        step.status = "judged"
        return
    if step.status == "benched":
        assert step.run_a is not None and step.run_b is not None  # a benched step has both runs
        out_dir = tune_dir(runs_dir, state.spec.name) / store.REPORTS_DIR / f"{step.n:02d}-{step.run_a}_vs_{step.run_b}"
        from servedeck.ab.interleave import Interleaving
        outcome = judge(Path(runs_dir), [Path(runs_dir) / r for r in step.runs_a or [step.run_a]],
                        [Path(runs_dir) / r for r in step.runs_b or [step.run_b]], out_dir / "report.md",
                        Interleaving.model_validate(step.interleaving) if step.interleaving else None)
        m = outcome.comparison.metric(*reversed(state.spec.metric.split(" ", 1)))
        lower = m.lower_is_better if m is not None else False
        step.measured_gain = (None if m is None or not m.ratio else ((1 / m.ratio - 1) if lower else (m.ratio - 1)))
        step.action = outcome.draft.verdict.action if outcome.draft is not None else None
        step.kept = bool(m is not None and m.verdict == "faster" and step.action in ("keep", "trade-off"))
        step.report = str(outcome.report.relative_to(runs_dir)) if outcome.report else None
        step.status = "judged"


def _interleave_step(state: TuneState, step: TuneStep, ops: TuneOps, save) -> None:
    """An experiment as an interleaved one (``interleave``): the best and the variant deployed
    alternately; an interrupted one is run again whole (its runs so far stay recorded)."""
    if ops.interleaved is None:
        raise ServedeckError("this tune interleaves its experiments, but no interleaving was given to run them",
                             field="interleave")
    ops.say(f"interleave {state.best_profile} and {step.profile}: up to {state.spec.interleave} deployments "
            "each, A B B A")
    step.status, step.runs_a, step.runs_b, step.run_b = "deployed", [], [], None
    save()
    runs_a, runs_b, interleaving = ops.interleaved(state.best_profile, step.profile, state.spec.interleave)
    step.runs_a, step.runs_b = [Path(r).name for r in runs_a], [Path(r).name for r in runs_b]
    step.run_a, step.run_b = step.runs_a[0], step.runs_b[-1]
    step.interleaving = interleaving.model_dump(mode="json") if interleaving is not None else None
    step.status = "benched"
    save()


def _next_candidate(runs_dir: Path, state: TuneState, ops: TuneOps, kb: KnowledgeBase, propose_fn):
    """The best candidate of the tuned variables that clears the noise floor, or None."""
    from servedeck.ab.history import load_experiments
    spec = state.spec
    doc = ops.profile_doc(state.best_profile)
    best_run = Path(runs_dir) / state.best_run if state.best_run else None
    history = load_experiments(runs_dir, host=spec.host)
    plan = propose_fn(doc["profile"], spec.host, runs_dir, effective=doc.get("effective") or {},
                      facts=store.read(best_run, store.FACTS) if best_run else None, baseline=best_run,
                      knowledge=kb, margin=spec.margin, alpha=spec.alpha, max_requests=spec.max_requests,
                      history=history, explore=EXPLORE_FACTOR * max(spec.margin, 0.01), metric=spec.metric)
    tried = {(s.variable, json.dumps(s.a), json.dumps(s.b), json.dumps(s.overrides, sort_keys=True))
             for s in state.experiments}
    for cand in plan.candidates:
        key = (cand.profile_path, json.dumps(cand.current), json.dumps(cand.proposed),
               json.dumps({**state.best, cand.profile_path: cand.proposed}, sort_keys=True))
        if cand.clears_noise and key not in tried:
            return cand
    return None


def _leave_host(state: TuneState, ops: TuneOps) -> None:
    """Restore the original deployment, or deploy the winner, as the spec says."""
    now = ops.serving() or {}
    if state.spec.finally_ == "restore":
        original = state.original or {}
        if original.get("compose_sha256") and now.get("compose_sha256") != original.get("compose_sha256"):
            ops.say(f"restore the original deployment (revision {original.get('revision')})")
            ops.restore(original)
        return
    best_run = state.best_run
    if best_run and now.get("run_id") != best_run:
        ops.say(f"deploy the winner {state.best_profile}")
        ops.deploy(state.best_profile)


def summary(state: TuneState) -> str:
    """The tune as text: its experiments in order, the best setting and why it stopped."""
    lines = [f"tune {state.spec.name}: {state.spec.base} on {state.spec.host}, objective {state.spec.metric}"]
    for s in state.steps:
        if s.variable is None:
            lines.append(f"  baseline {s.profile}: run {s.run_b or '-'}")
            continue
        lines.append(f"  #{s.n} {s.variable} {json.dumps(s.a)} -> {json.dumps(s.b)}: expected {_pct(s.expected_gain)}, "
                     f"measured {_pct(s.measured_gain)}, {s.action or s.status}, "
                     f"{'kept' if s.kept else 'reverted' if s.kept is False else 'open'} ({s.run_b or '-'})")
    lines.append(f"  best: {json.dumps(state.best, sort_keys=True)} ({state.best_profile}, run {state.best_run})")
    lines.append(f"  stopped: {state.stopped or 'not yet'}"
                 + (f"; host left {'as it was' if state.spec.finally_ == 'restore' else 'serving the winner'}"
                    if state.finished else ""))
    return "\n".join(lines)
