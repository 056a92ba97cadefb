"""Experiment sweeps over a fleet (``invoke sweep``): plan, schedule, run, resume.

**Plan.** ``--vary KEY=V1,V2,...`` (KEY a profile path such as
``engine.max_num_batched_tokens``; values are YAML scalars) for one or more variables. The
sweep is planned as single-variable experiments against a baseline: the baseline arm is the
base profile with every variable at its first value; for each variable and each further value
one experiment compares the baseline (arm A) with the baseline changed in that one variable
(arm B). ``--reps N`` repeats each experiment N times (independent A/B pairs). Each arm is a
real profile written to ``profiles/`` (``<base>-sw<hash>``, ``extends: <base>``), so a winner
can be deployed as is.

**Schedule.** Both arms of an experiment run on the same host (two boxes are never one
experiment). Experiments are assigned to hosts longest-first onto the host that would finish
earliest (LPT list scheduling), from each host's estimated experiment time: 2 x (time to ready +
bench time) from that host's run records (medians of its last ready runs), plus the cost of
each servedeck command around its own work, measured by the host's rollouts (Ansible's task
time minus the run's ``deploy_total_s``). Hosts then work through their queues in parallel (Ansible
``strategy: free``; ``sweep.yml``).

**Run and resume.** Each experiment is deploy A, bench A, deploy B, bench B, ``ab`` report,
then its result file ``runs/sweeps/<name>/results/<id>.json`` -- the only "done" mark. Running
the same sweep again (same name: derived from base, variables and values) skips experiments
that have a result file; failed or interrupted ones run again.

Files under ``runs/sweeps/<name>/``: ``plan.json``, ``results/<id>.json`` (and
``<id>.json.failed``), ``reports/<id>.md`` (+ chart), ``summary.md``, ``summary.png``.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from servedeck.errors import ServedeckError
from servedeck.fleet.inventory import Fleet
from servedeck.fleet.runner import ProgressFn, run_playbook
from servedeck.fsutil import atomic_write
from servedeck.jsonio import read_json_file
from servedeck.model.project import Project
from servedeck.runs.history import TIMING_RUNS, host_timings
from servedeck.yamlio import YAMLError, load_data

#: seconds a deploy command needs around its own work (Ansible's task dispatch, interpreter
#: and imports, exit) when no rollout of the host has measured it. Loopback fleet
#: (benchmarks/fleet_bench.py, 2 cores): 0.8 s for one command alone, 1.5 s each with three
#: hosts' commands at once (raw dispatch); the busier figure is the default
CLI_OVERHEAD_S = 1.5
#: seconds ansible-playbook and the sweep command need around the experiments (start, the
#: summary and chart at the end); loopback fleet, benchmarks/fleet_bench.py: 4.2 to 5.4 s
ANSIBLE_OVERHEAD_S = 5.0
#: seconds of Ansible's own steps per experiment besides the servedeck commands (the start
#: fact, writing the result file with ansible.builtin.copy), when no earlier sweep measured them.
#: The three defaults below: loopback fleet, two hosts at once, 2 shared cores
#: (benchmarks/fleet_bench.py; they about double between load 1.2 and load 3 there)
EXPERIMENT_OVERHEAD_S = 1.5
#: seconds a ``bench`` command costs besides the benchmark it records (interpreter and imports,
#: the served-model check, sizing the prompt with /tokenize, metrics scrapes, writing the
#: records), when no earlier sweep measured it (measured 2.2 s at load 1.2, 5 s at load 3)
BENCH_COMMAND_S = 3.0
#: seconds of one ``ab`` command (imports with scipy and matplotlib, statistics, report and
#: chart), when no earlier sweep measured it (measured 3.0 to 4.8 s at load 1.2 to 1.8, 7 s
#: at load 3)
AB_COMMAND_S = 4.5
#: step names of ``ansible/roles/servedeck/tasks/experiment.yml`` (after ``"<id>: "``) whose
#: Ansible task times earlier sweeps left in their job events
_STEPS = {"bench arm": "bench_step_s", "A/B report": "ab_s", "start": "start_s", "done": "done_s"}
#: time to ready / bench time assumed for a host without any recorded run
DEFAULT_READY_S = 60.0
DEFAULT_BENCH_S = 30.0
HISTORY_RUNS = TIMING_RUNS
VARY_RE = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)=(?P<values>.+)$")
SWEEP_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass
class Experiment:
    """One single-variable A/B experiment.

    Attributes:
        id: ``e01-max_num_batched_tokens-8192-r1``; variable: the profile path varied;
        value_a / value_b: its value in arm A (baseline) / arm B; profile_a / profile_b: the
        arms' profile names; rep: repetition number (1-based).
    """

    id: str
    variable: str
    value_a: Any
    value_b: Any
    profile_a: str
    profile_b: str
    rep: int = 1


@dataclass
class HostEstimate:
    """Estimate inputs of one host (seconds).

    Attributes:
        ready_s: deploy start to ready (run records' ``deploy_total_s``).
        bench_s: one benchmark (run records' bench ``finished_at - started_at``).
        source: ``runs`` (its own records), ``fleet`` (other hosts'), ``default``.
        command_s: a deploy command's cost around its own work, from the host's rollouts
            (Ansible's task time minus the run's ``deploy_total_s``).
        bench_command_s: a bench command's cost besides ``bench_s``; ab_s: one ``ab``
            command; experiment_overhead_s: Ansible's own steps per experiment -- from earlier
            sweeps' Ansible task times when there are any, else :data:`BENCH_COMMAND_S`,
            :data:`AB_COMMAND_S`, :data:`EXPERIMENT_OVERHEAD_S`.
    """

    ready_s: float
    bench_s: float
    source: str
    command_s: float = CLI_OVERHEAD_S
    bench_command_s: float = BENCH_COMMAND_S
    ab_s: float = AB_COMMAND_S
    experiment_overhead_s: float = EXPERIMENT_OVERHEAD_S

    def experiment_s(self, bench: bool) -> float:
        """Estimated seconds of one experiment: per arm a deploy (+ its command cost) and a
        bench (+ its command cost), then the ``ab`` report and Ansible's own steps."""
        arm = self.ready_s + self.command_s + ((self.bench_s + self.bench_command_s) if bench else 0.0)
        return 2 * arm + self.ab_s + self.experiment_overhead_s


@dataclass
class SweepPlan:
    """A planned (possibly partly finished) sweep.

    Attributes:
        name, base, variables (path -> values), reps, pattern, hosts: what was asked.
        experiments: all experiments; done: ids with a result file; assignments: host ->
        ids still to run, in order; estimates: host -> :class:`HostEstimate`;
        estimate_s: estimated wall time of the remaining work (slowest host + Ansible).
        directory: ``runs/sweeps/<name>``; servedeck_inventory: ``--inventory`` of the
        per-host commands.
    """

    name: str
    base: str
    variables: dict[str, list[Any]]
    reps: int
    pattern: str
    hosts: list[str]
    experiments: list[Experiment]
    done: list[str]
    assignments: dict[str, list[str]]
    estimates: dict[str, HostEstimate]
    estimate_s: float
    directory: Path
    fleet: Fleet
    image: str | None = None
    bench: bool = True
    bench_args: list[str] = field(default_factory=list)

    def host_estimate_s(self, host: str) -> float:
        return len(self.assignments.get(host, [])) * self.estimates[host].experiment_s(self.bench)

    def experiment(self, exp_id: str) -> Experiment:
        return next(e for e in self.experiments if e.id == exp_id)

    def result_path(self, exp_id: str) -> Path:
        return self.directory / "results" / f"{exp_id}.json"

    def report_path(self, exp_id: str) -> Path:
        return self.directory / "reports" / f"{exp_id}.md"


@dataclass
class SweepResult:
    """After a run: ``rows`` (one per experiment, see :func:`summary_rows`), ``pending`` (ids
    without a result), ``duration_s`` (this run's wall time), ``summary``/``chart`` paths."""

    plan: SweepPlan
    rows: list[dict[str, Any]]
    pending: list[str]
    duration_s: float
    summary: Path
    chart: Path | None
    interrupted: bool = False
    power_restored: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.pending and not self.interrupted


# ------------------------------------------------------------------------------ planning


def parse_vary(specs: list[str]) -> dict[str, list[Any]]:
    """``["engine.max_num_batched_tokens=4096,8192", ...]`` -> ``{path: [values]}``.

    Values are YAML 1.2 scalars (``0.90`` a float, ``8192`` an int, ``null``, ``true``).

    Raises:
        ServedeckError: malformed spec, fewer than two values, a duplicate key or value.
    """
    if not specs:
        raise ServedeckError("give at least one --vary KEY=V1,V2", field="vary",
                             hint="e.g. --vary engine.max_num_batched_tokens=4096,8192")
    out: dict[str, list[Any]] = {}
    for spec in specs:
        m = VARY_RE.match(spec.strip())
        if not m:
            raise ServedeckError(f"--vary {spec!r} is not KEY=V1,V2[,...]", field="vary",
                                 hint="KEY is a profile path such as engine.gpu_memory_utilization")
        key = m["key"]
        if key in out:
            raise ServedeckError(f"--vary {key} is given twice", field="vary")
        values = []
        for text in m["values"].split(","):
            try:
                values.append(load_data(text.strip()))
            except YAMLError as exc:
                raise ServedeckError(f"--vary {key}: value {text!r} is not a YAML scalar: {exc}",
                                     field="vary") from None
        if len(values) < 2:
            raise ServedeckError(f"--vary {key} needs at least two values", field="vary")
        if len({json.dumps(v) for v in values}) != len(values):
            raise ServedeckError(f"--vary {key} repeats a value", field="vary")
        out[key] = values
    return out


def _slug(value: Any) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", json.dumps(value).strip('"').lower()).strip("-") or "x"


def sweep_name(base: str, variables: dict[str, list[Any]], reps: int) -> str:
    """The default sweep name: stable for the same base, variables, values and reps."""
    digest = hashlib.sha256(json.dumps([base, variables, reps], sort_keys=True).encode()).hexdigest()
    return f"{base}-{digest[:8]}"


def arm_name(base: str, overrides: dict[str, Any]) -> str:
    """Profile name of a sweep arm: ``<base>-sw<hash of the overrides>``."""
    digest = hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()
    return f"{base}-sw{digest[:8]}"


def _nested(overrides: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for path, value in overrides.items():
        node = doc
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return doc


def write_arm_profile(project: Project, base: str, overrides: dict[str, Any], sweep: str) -> str:
    """Write (atomically, only when changed) the arm profile and check it loads.

    Returns:
        the profile name.

    Raises:
        ServedeckError: the overrides do not make a valid profile (the file is removed again
            when this call created it), naming the variable.
    """
    from servedeck.compose.importer import dump_profile_yaml
    from servedeck.model.profile import ProfileStore
    name = arm_name(base, overrides)
    path = project.profiles_dir / f"{name}.yaml"
    desc = ", ".join(f"{k}={json.dumps(v)}" for k, v in overrides.items())
    text = dump_profile_yaml({"extends": base, "description": f"sweep arm of {base}: {desc}",
                              **_nested(overrides)},
                             header=f"written by `invoke sweep` ({sweep}): {base} with {desc}")
    created = not path.exists()
    if created or path.read_text(encoding="utf-8") != text:
        atomic_write(path, text)
    try:
        ProfileStore(project.profiles_dir).load(name)
    except ServedeckError as exc:
        if created:
            path.unlink(missing_ok=True)
        raise ServedeckError(f"--vary {desc} does not make a valid profile from {base}: "
                             f"{exc.render()}", field="vary") from None
    return name


def plan_experiments(project: Project, base: str, variables: dict[str, list[Any]], reps: int,
                     sweep: str) -> list[Experiment]:
    """The experiments of a sweep (module docstring), writing the arms' profiles."""
    baseline = {k: v[0] for k, v in variables.items()}
    profile_a = write_arm_profile(project, base, baseline, sweep)
    experiments = []
    n = 0
    for key, values in variables.items():
        for value in values[1:]:
            profile_b = write_arm_profile(project, base, {**baseline, key: value}, sweep)
            n += 1
            for rep in range(1, reps + 1):
                exp_id = f"e{n:02d}-{key.rsplit('.', 1)[-1]}-{_slug(value)}-r{rep}"
                experiments.append(Experiment(exp_id, key, values[0], value, profile_a, profile_b, rep))
    return experiments


def host_history(runs_dir: Path, hosts: list[str]) -> dict[str, dict[str, list[float]]]:
    """Per host, the last :data:`HISTORY_RUNS` measured times to ready (run.json
    ``timings_s.deploy_total_s``) and bench durations (bench.json ``finished_at - started_at``),
    read from the run records (layout ``docs/run-record.md``)."""
    timings, ready_by_run = host_timings(runs_dir, hosts, HISTORY_RUNS)
    out: dict[str, dict[str, list[float]]] = {
        h: {**timings[h], "command_s": [], **{k: [] for k in _STEPS.values()}} for h in hosts}
    if not runs_dir.exists():
        return out
    # rollouts (servedeck/fleet/rollout.py summary.json): the command's wall time per host
    for summary in sorted((runs_dir / "rollouts").glob("*/summary.json"), reverse=True):
        try:
            doc = read_json_file(summary)
        except (OSError, ServedeckError):
            continue
        for row in doc.get("hosts") or []:
            host, run_id, took = row.get("host"), row.get("run_id"), row.get("duration_s")
            if (host in out and row.get("outcome") == "ready" and run_id in ready_by_run
                    and took is not None and len(out[host]["command_s"]) < HISTORY_RUNS):
                out[host]["command_s"].append(max(0.0, float(took) - ready_by_run[run_id]))
    for host, steps in sweep_step_history(runs_dir, hosts).items():
        out[host].update(steps)
    return out


def sweep_step_history(runs_dir: Path, hosts: list[str]) -> dict[str, dict[str, list[float]]]:
    """Per host, the Ansible task times of the steps of earlier sweeps (newest first, at most
    4 x :data:`HISTORY_RUNS` each): ``bench_step_s`` (a whole bench command), ``ab_s``,
    ``start_s`` and ``done_s`` (Ansible's own steps). Read from ansible-runner's job events
    (``runs/sweeps/<name>/ansible/<stamp>/artifacts/<ident>/job_events/*.json``, events
    ``runner_on_ok`` with ``event_data.host``/``task``/``duration``)."""
    out: dict[str, dict[str, list[float]]] = {h: {k: [] for k in _STEPS.values()} for h in hosts}
    runs = sorted((runs_dir / "sweeps").glob("*/ansible/*"), key=lambda p: p.name, reverse=True)
    for run in runs:
        for path in run.glob("artifacts/*/job_events/*.json"):
            try:
                event = read_json_file(path)
            except (OSError, ServedeckError):
                continue
            data = event.get("event_data") or {}
            name = str(data.get("task", "")).split(": ", 1)[-1].split(" (")[0]
            step = _STEPS.get(re.sub(r" [AB]$", "", name))  # "bench arm A" -> "bench arm"
            host, took = data.get("host"), data.get("duration")
            if (event.get("event") == "runner_on_ok" and step and host in out and took is not None
                    and len(out[host][step]) < 4 * HISTORY_RUNS):
                out[host][step].append(float(took))
    return out


def estimate_hosts(runs_dir: Path, hosts: list[str]) -> dict[str, HostEstimate]:
    """Each host's :class:`HostEstimate`: its own medians, else the fleet's, else defaults."""
    hist = host_history(runs_dir, hosts)
    fleet_ready = [v for h in hist.values() for v in h["ready_s"]]
    fleet_bench = [v for h in hist.values() for v in h["bench_s"]]
    fleet_cmd = [v for h in hist.values() for v in h["command_s"]]

    def median(key: str, host: str) -> float | None:
        values = hist[host][key] or [v for h in hist.values() for v in h[key]]
        return statistics.median(values) if values else None

    out = {}
    for host in hosts:
        ready, bench = hist[host]["ready_s"], hist[host]["bench_s"]
        if ready:
            source = "runs"
        elif fleet_ready:
            source, ready = "fleet", fleet_ready
        else:
            source, ready = "default", [DEFAULT_READY_S]
        bench_s = statistics.median(bench or fleet_bench or [DEFAULT_BENCH_S])
        command = hist[host]["command_s"] or fleet_cmd or [CLI_OVERHEAD_S]
        bench_step, ab, start, done = (median(k, host) for k in ("bench_step_s", "ab_s", "start_s", "done_s"))
        out[host] = HostEstimate(
            round(statistics.median(ready), 3), round(bench_s, 3), source,
            round(statistics.median(command), 3),
            round(max(0.0, bench_step - bench_s), 3) if bench_step is not None else BENCH_COMMAND_S,
            round(ab, 3) if ab is not None else AB_COMMAND_S,
            round((start or 0.0) + done, 3) if done is not None else EXPERIMENT_OVERHEAD_S)
    return out


def schedule(experiments: list[str], estimates: dict[str, float]) -> dict[str, list[str]]:
    """LPT list scheduling of equal-or-not jobs: each experiment goes to the host whose queue
    would finish first with it (``estimates``: host -> seconds per experiment on that host).

    Returns:
        host -> experiment ids, in run order (every host present, maybe with an empty list).
    """
    load = {h: 0.0 for h in estimates}
    out: dict[str, list[str]] = {h: [] for h in estimates}
    for exp in experiments:
        host = min(load, key=lambda h: (load[h] + estimates[h], list(load).index(h)))
        out[host].append(exp)
        load[host] += estimates[host]
    return out


def plan_sweep(project: Project, fleet: Fleet, pattern: str, base: str, vary: list[str], *,
               reps: int = 1, name: str | None = None, image: str | None = None,
               bench: bool = True, bench_args: list[str] | None = None) -> SweepPlan:
    """Plan (or re-plan, for a resume) a sweep; writes the arm profiles and ``plan.json``.

    Raises:
        ServedeckError: bad ``--vary``, bad name, unknown base profile or hosts, or an
            existing sweep of that name with other variables.
    """
    from servedeck.model.profile import ProfileStore
    if reps < 1:
        raise ServedeckError("--reps must be at least 1", field="reps")
    ProfileStore(project.profiles_dir).load(base)
    variables = parse_vary(vary)
    name = name or sweep_name(base, variables, reps)
    if not SWEEP_NAME_RE.match(name):
        raise ServedeckError(f"sweep name {name!r} must match {SWEEP_NAME_RE.pattern}", field="name")
    directory = project.runs_dir / "sweeps" / name
    plan_file = directory / "plan.json"
    if plan_file.exists():
        old = read_json_file(plan_file)
        if old.get("base") != base or old.get("variables") != variables or old.get("reps") != reps:
            raise ServedeckError(f"a sweep named {name!r} exists with another base, variables or reps",
                                 file=str(plan_file), hint="pick another --name")
    hosts = fleet.select(pattern)
    experiments = plan_experiments(project, base, variables, reps, name)
    done = [e.id for e in experiments if (directory / "results" / f"{e.id}.json").exists()]
    estimates = estimate_hosts(project.runs_dir, hosts)
    per_exp = {h: estimates[h].experiment_s(bench) for h in hosts}
    todo = [e.id for e in experiments if e.id not in done]
    assignments = schedule(todo, per_exp)
    makespan = max((len(ids) * per_exp[h] for h, ids in assignments.items()), default=0.0)
    plan = SweepPlan(name=name, base=base, variables=variables, reps=reps, pattern=pattern,
                     hosts=hosts, experiments=experiments, done=done, assignments=assignments,
                     estimates=estimates,
                     estimate_s=round(makespan + (ANSIBLE_OVERHEAD_S if todo else 0.0), 1),
                     directory=directory, fleet=fleet, image=image, bench=bench,
                     bench_args=list(bench_args or []))
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(plan_file, json.dumps(plan_to_dict(plan), indent=2) + "\n")
    return plan


def plan_to_dict(plan: SweepPlan) -> dict[str, Any]:
    """``plan.json``: the plan without the fleet object."""
    return {"name": plan.name, "base": plan.base, "variables": plan.variables, "reps": plan.reps,
            "pattern": plan.pattern, "hosts": plan.hosts,
            "experiments": [asdict(e) for e in plan.experiments], "done": plan.done,
            "assignments": plan.assignments,
            "estimates": {h: asdict(e) for h, e in plan.estimates.items()},
            "experiment_s": {h: round(e.experiment_s(plan.bench), 1) for h, e in plan.estimates.items()},
            "estimate_s": plan.estimate_s, "bench": plan.bench, "image": plan.image}


# ------------------------------------------------------------------------------ running


def run_sweep(project: Project, plan: SweepPlan, *, progress: ProgressFn | None = None) -> SweepResult:
    """Run the experiments of ``plan`` not done yet, then write the summary and chart.

    Returns:
        :class:`SweepResult` (``ok`` when every experiment has a result).

    Raises:
        ServedeckError: Ansible could not run.
    """
    from servedeck.fleet.rollout import role_vars
    (plan.directory / "results").mkdir(parents=True, exist_ok=True)
    (plan.directory / "reports").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    todo = {h: ids for h, ids in plan.assignments.items() if ids}
    interrupted = False
    restored: list[str] = []
    if todo:
        for exp_ids in todo.values():
            for exp_id in exp_ids:
                plan.result_path(exp_id).with_suffix(".json.failed").unlink(missing_ok=True)
        ansible_inv = plan.fleet.write_ansible_inventory(plan.directory)
        servedeck_inv = plan.fleet.write_servedeck_inventory(plan.directory)
        assignments = {h: [{"id": i, "profile_a": plan.experiment(i).profile_a,
                            "profile_b": plan.experiment(i).profile_b,
                            "report": str(plan.report_path(i)), "result": str(plan.result_path(i))}
                           for i in ids] for h, ids in todo.items()}
        extravars = {**role_vars(project, servedeck_inv, image=plan.image),
                     "servedeck_hosts": ",".join(todo), "servedeck_assignments": assignments,
                     "servedeck_bench": plan.bench, "servedeck_bench_args": plan.bench_args}
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        with _power_series(project, plan, list(todo), restored):
            played = run_playbook("sweep", inventory=ansible_inv, extravars=extravars,
                                  private_dir=plan.directory / "ansible" / stamp, forks=len(todo),
                                  progress=progress)
        interrupted = played.interrupted
    duration = round(time.monotonic() - t0, 3)
    rows = summary_rows(project, plan)
    pending = [r["id"] for r in rows if r["status"] != "done"]
    summary, chart = write_summary(plan, rows)
    return SweepResult(plan=plan, rows=rows, pending=pending, duration_s=duration,
                       summary=summary, chart=chart, interrupted=interrupted, power_restored=restored)


@contextmanager
def _power_series(project: Project, plan: SweepPlan, hosts: list[str], restored: list[str]) -> Iterator[None]:
    """The card's original power cap kept around a sweep whose arms set one
    (:func:`servedeck.deploy.power_series.power_series`): read on each host before the
    experiments, written back after them, after a failure and after an interrupt."""
    from servedeck.deploy.power_series import power_series, varies_power_cap
    from servedeck.host.remote import RemoteHost
    from servedeck.model.profile import ProfileStore
    store_ = ProfileStore(project.profiles_dir)
    names = {n for e in plan.experiments for n in (e.profile_a, e.profile_b)}
    profiles = [store_.load(n).profile for n in sorted(names)]
    capped = varies_power_cap(profiles)
    pairs = [(RemoteHost(h, plan.fleet.hosts[h].ssh, plan.fleet.hosts[h].workdir), plan.fleet.hosts[h])
             for h in hosts] if capped else []
    gpu = next((p.launcher.gpu for p in profiles if p.launcher.gpu is not None), 0)
    try:
        with power_series(pairs, series=f"sweep {plan.name}", enabled=capped, gpu=gpu or 0, report=restored.append):
            yield
    finally:
        for host, _ in pairs:
            host.close()


def summary_rows(project: Project, plan: SweepPlan) -> list[dict[str, Any]]:
    """One row per experiment: id, variable, value_a, value_b, host, status (``done``,
    ``failed``, ``pending``), run_a, run_b, report, seconds, and the headline metrics (B vs A):
    ``kv_cache_tokens`` a/b, the warm ``decode_tok_s`` median ratio when benchmarked, under
    load (``--workload``/``--load``/``--slo``) each arm's capacity under the SLO and the
    capacity verdict (:mod:`servedeck.ab.load`), and the quality gate on arm B (``gate``:
    ``pass``, ``gated: RULES``, ``not checked``; None without probes)."""
    from servedeck.ab.comparison import compare_metrics
    from servedeck.runs import store
    rows = []
    for exp in plan.experiments:
        row: dict[str, Any] = {"id": exp.id, "variable": exp.variable, "value_a": exp.value_a,
                               "value_b": exp.value_b, "status": "pending", "host": None,
                               "run_a": None, "run_b": None, "report": None, "seconds": None,
                               "kv_a": None, "kv_b": None, "decode_ratio": None, "gate": None, "note": "",
                               "capacity_a": None, "capacity_b": None, "capacity_verdict": None}
        result_file = plan.result_path(exp.id)
        failed_file = result_file.with_suffix(".json.failed")
        if result_file.exists():
            res = read_json_file(result_file)  # written on a fleet host: its run ids are checked
            row.update(status="done", host=res["host"], run_a=res["run_a"], run_b=res["run_b"],
                       report=res["report"],
                       seconds=round(float(res["finished_at"]) - float(res["started_at"]), 1))
            cmp = compare_metrics(store.run_path(project.runs_dir, res["run_a"]),
                                  store.run_path(project.runs_dir, res["run_b"]))
            kv = next((m for m in cmp.startup if m.name == "kv_cache_tokens"), None)
            if kv:
                row.update(kv_a=kv.a, kv_b=kv.b)
            dec = next((m for m in cmp.bench if m.name == "decode_tok_s" and m.phase == "warm"), None)
            if dec and dec.ratio is not None:
                row["decode_ratio"] = round(dec.ratio, 3)
                row["note"] = dec.verdict
            cap = cmp.load.capacity if cmp.load is not None else None
            if cap is not None:
                row.update(capacity_a=cap.capacity_a, capacity_b=cap.capacity_b, capacity_verdict=cap.verdict)
                row["note"] = f"{row['note']}; capacity {cap.verdict}".lstrip("; ")
            if cmp.quality is not None:
                gate = cmp.quality.gate
                row["gate"] = (f"gated: {', '.join(dict.fromkeys(r.rule for r in gate.reasons))}"
                               if gate.blocks else gate.status)
                if gate.blocks:
                    row["note"] = f"{row['note']}; B cannot be called better (quality)".lstrip("; ")
        elif failed_file.exists():
            res = read_json_file(failed_file)
            lines = [ln for ln in str(res.get("stderr", "")).splitlines() if ln.strip()]
            errors = [ln.removeprefix("error:").strip() for ln in lines if ln.startswith("error:")]
            step = str(res.get("task", "")).split(": ", 1)[-1]
            row.update(status="failed", host=res.get("host"),
                       note=f"{step}: {(errors or lines or [''])[-1]}"[:160])
        rows.append(row)
    return rows


POWER_CAP = "host.power_cap_w"


def _power_caps(plan: SweepPlan, rows: list[dict[str, Any]]) -> list[str]:
    """The summary's power-cap section (:mod:`servedeck.ab.power_caps`) when the sweep varies
    ``host.power_cap_w``: tokens/s and J/token per cap, and the knee."""
    if POWER_CAP not in plan.variables:
        return []
    from servedeck.ab.power_caps import cap_rows, caps_markdown
    by_cap: dict[float, list[str]] = {}
    for r in rows:
        if r["status"] != "done" or r["variable"] != POWER_CAP:
            continue
        by_cap.setdefault(float(r["value_a"]), []).append(r["run_a"])
        by_cap.setdefault(float(r["value_b"]), []).append(r["run_b"])
    if not by_cap:
        return []
    runs_dir = plan.directory.parent.parent
    return ["## Power caps", "", *caps_markdown(cap_rows(runs_dir, by_cap)), ""]


def write_summary(plan: SweepPlan, rows: list[dict[str, Any]]) -> tuple[Path, Path | None]:
    """``summary.md`` (the table) and ``summary.png`` (the chart, when any experiment is done)."""
    from servedeck.fleet.summary import render_table, sweep_chart_png, sweep_table_from_rows
    chart = None
    png = sweep_chart_png(plan, rows)
    if png is not None:
        chart = plan.directory / "summary.png"
        atomic_write(chart, png)
    lines = [f"# Sweep {plan.name}", "",
             f"Base profile `{plan.base}`; variables: "
             + "; ".join(f"`{k}` = {', '.join(json.dumps(v) for v in vals)}" for k, vals in plan.variables.items())
             + f"; hosts {', '.join(plan.hosts)}; reps {plan.reps}.", "", "```",
             render_table(sweep_table_from_rows(plan, rows)).rstrip(), "```", ""]
    lines += _power_caps(plan, rows)
    for r in rows:
        if r["report"]:
            lines.append(f"- {r['id']}: [{Path(r['report']).name}](reports/{Path(r['report']).name})")
    if chart:
        lines += ["", "![sweep](summary.png)"]
    summary = plan.directory / "summary.md"
    atomic_write(summary, "\n".join(lines) + "\n")
    return summary, chart
