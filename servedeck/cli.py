"""servedeck's command line: parse options, call servedeck, print, exit code.

The tasks are invoke tasks in one :class:`invoke.Collection` (:data:`ns`); the ``servedeck``
console script (``[project.scripts]`` in ``pyproject.toml``) runs them with invoke's own
:class:`invoke.Program`, and the repository's ``tasks.py`` re-exports the same collection for
``invoke TASK``, adding only development tasks. ``servedeck --list`` lists the tasks,
``servedeck --help TASK`` shows one task's options.

A global ``--project DIR`` (or ``$SERVEDECK_PROJECT``) selects the user's profiles repository;
without it the project is found from the current directory
(:meth:`servedeck.model.project.Project.find`), else the embedded default project is used.

A :class:`servedeck.errors.ServedeckError` is printed as one paragraph (no traceback) and exits
with its ``exit_code``; anything else is a bug and keeps its traceback.

Start-up cost matters (``servedeck check`` runs as a pre-commit hook): this module imports
only invoke and the standard library at import time; each task imports what it uses.
"""

from __future__ import annotations

import atexit
import functools
import gc
import json
import os
import re
import sys
from pathlib import Path
from typing import Literal

Justify = Literal["default", "left", "center", "right", "full"]
"""How a table column is aligned (rich's ``JustifyMethod``)."""


def _import_invoke_without_mock():
    """Import invoke without the ``unittest.mock`` it imports for ``MockContext``.

    ``invoke/context.py`` (invoke 2.x/3.x) does ``from unittest.mock import Mock`` at import
    time, for a test helper servedeck never uses; that import pulls in ``unittest`` and
    ``asyncio`` (with ``ssl``), about 45 ms of every ``servedeck`` command's start-up. While
    invoke is imported, ``unittest.mock`` is a placeholder whose ``Mock`` imports the real one
    on first call; the placeholder is removed straight after, so any later ``import
    unittest.mock`` gets the real module. Nothing is done when invoke or unittest.mock is
    already imported (the ``invoke`` program, a test run).
    """
    if "invoke" in sys.modules or "unittest.mock" in sys.modules:
        return
    import types

    def mock(*args, **kwargs):
        from unittest.mock import Mock
        return Mock(*args, **kwargs)

    placeholder = types.ModuleType("unittest.mock", "placeholder while invoke is imported (servedeck.cli)")
    placeholder.Mock = mock
    sys.modules["unittest.mock"] = placeholder
    try:
        import invoke  # noqa: F401
    finally:
        if sys.modules.get("unittest.mock") is placeholder:
            del sys.modules["unittest.mock"]


# The interpreter's last act is a full garbage collection over every object still alive; after
# the imports of a command (pydantic's schemas, jinja2, the docker SDK) that collection costs a
# command 0.1-0.2 s of its exit (measured here: benchmarks/check_speed.py, deploy_overhead.py)
# and frees nothing the operating system would not. Freezing the surviving objects (CPython's
# gc.freeze) as the last exit handler leaves them out of it; files are closed by their owners
# (servedeck writes through atomic_write and with-blocks), and every other exit handler has
# run by then. Registered first, so it runs last.
atexit.register(gc.freeze)

# On the way there, a command's start-up (pydantic's schemas, jinja2, the check's rules and
# tables) allocates a few hundred thousand objects that live as long as the command, and
# CPython 3.11's default thresholds (700, 10, 10) walk them in a dozen full collections: 15-30 ms
# of a deploy's or a check's critical path on the test machines. A first threshold of 100,000
# leaves that start-up to run without a full collection; a long command (bench, sweep) still
# collects its cycles, every 100,000 allocations.
gc.set_threshold(100_000, 10, 10)

_import_invoke_without_mock()
from invoke import Argument, Collection, Exit, Program, task  # noqa: E402

from servedeck import __version__  # noqa: E402
from servedeck.errors import ServedeckError  # noqa: E402
from servedeck.model.project import PROJECT_ENV, Project  # noqa: E402

# servedeck's models use no pydantic plugins; pydantic's plugin discovery (a scan of every
# installed distribution's entry points, pydantic/plugin/_loader.py) would cost each command
# about 20 ms. Only the CLI process is affected, and an explicit setting wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


PROGRAM = "invoke"
"""The command the user typed: ``invoke`` (tasks run by invoke from a checkout's ``tasks.py``)
unless :func:`main` (the ``servedeck`` console script, ``python -m servedeck``) runs them."""


def as_typed(text: str) -> str:
    """``text`` with the task commands it suggests (``invoke status --host b70``, ``servedeck
    check ...``) spelled the way the user runs servedeck (:data:`PROGRAM`). Only servedeck's own
    tasks are respelled: development tasks (``invoke image-build``, ``invoke demo``) exist in
    a checkout's ``invoke`` only."""
    other = "invoke" if PROGRAM == "servedeck" else "servedeck"
    names = "|".join(sorted((re.escape(n) for n in ns.task_names), key=len, reverse=True))
    return re.sub(rf"\b{other} (?=(?:{names})\b(?!-))", PROGRAM + " ", text)


def _print_err(line: str) -> None:
    """One progress line to stderr, its control characters written as escapes."""
    from servedeck.safetext import printable
    print(printable(line), file=sys.stderr)


def cli_errors(fn):
    """Decorator for a task: turn ServedeckError into a clean message (its suggested commands
    spelled as the user runs servedeck, :func:`as_typed`) and its exit code, Ctrl-C into
    ``interrupted`` and exit code 130."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ServedeckError as exc:
            if kwargs.get("json_") and not getattr(exc, "json_printed", False):
                print(json.dumps(error_document(exc)))  # --json: JSON on stdout on every path
            from servedeck.safetext import printable
            print(f"error: {printable(as_typed(exc.render()))}", file=sys.stderr)
            raise Exit(code=exc.exit_code) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise Exit(code=130) from None
    return wrapper


_cli = cli_errors


def error_findings(exc: ServedeckError, rule: str = "error") -> list:
    """``exc`` as :class:`servedeck.findings.Finding` data (severity error), one per problem
    (:attr:`ServedeckError.problems`); ``rule`` names those without a rule of their own."""
    from servedeck.findings import Finding, Severity
    return [Finding(severity=Severity.error, rule=p.rule or rule, path=p.field or "", message=p.message,
                    hint=p.hint, line=p.line, file=p.file)
            for p in (exc.problems or [exc])]


def error_document(exc: ServedeckError) -> dict:
    """A ``--json`` command's output when it fails: ``{"error": {"rule", "file", "line",
    "field", "message", "hint"}, "errors": [one such object per problem]}`` (suggested
    commands spelled as the user runs servedeck)."""
    errors = [{"rule": f.rule, "file": f.file, "line": f.line, "field": f.path or None,
               "message": as_typed(f.message), "hint": as_typed(f.hint) if f.hint else None}
              for f in error_findings(exc)]
    return {"error": errors[0], "errors": errors}


@functools.lru_cache(maxsize=1)
def current_project() -> Project:
    """The project of this process (``--project`` / ``$SERVEDECK_PROJECT`` / cwd), found once."""
    return Project.find()


_project = current_project


@functools.lru_cache(maxsize=1)
def _store():
    """One profile store per process: ``check --all`` loads each shared parent once."""
    from servedeck.model.profile import ProfileStore
    return ProfileStore(_project().profiles_dir)


def _load(name: str):
    return _store().load(name)


@functools.lru_cache(maxsize=1)
def _catalog():
    return _project().catalog()


def _render(name: str):
    from servedeck.compose.render import render_profile
    return render_profile(_load(name), _catalog(), _project().templates_dirs)


def _write_out(path: str, text: str) -> None:
    from servedeck.fsutil import atomic_write
    atomic_write(path, text)
    print(f"wrote {path}", file=sys.stderr)


def print_table(title: str | None, columns: list[tuple[str, Justify]], rows: list[list[str]]) -> None:
    """Print a rich table to stdout: ``columns`` are ``(header, justify)`` pairs, ``rows`` cell
    texts. Not a terminal (a pipe, a test): no colour, no wrapping of cells, whatever the width."""
    from rich.console import Console
    from rich.table import Table
    table = Table(title=title, box=None, header_style="bold", pad_edge=False)
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    if sys.stdout.isatty():
        Console(highlight=False).print(table)
        return
    console = Console(width=10_000, no_color=True, highlight=False)
    with console.capture() as captured:
        console.print(table)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


# ----------------------------------------------------------------------------- profiles


@task(help={"profile": "profile name (profiles/NAME.yaml)",
            "out": "write the compose file here instead of printing it",
            "flags": "print the launcher argv, one token per line"})
@_cli
def render(c, profile, out=None, flags=False):
    """Render a profile to a verified docker-compose file (or its launcher argv with --flags)."""
    from servedeck.compose.check import check_rendered, format_findings
    from servedeck.compose.render import RenderRefused
    from servedeck.findings import Severity, has_errors
    try:
        rendered = _render(profile)
    except RenderRefused as exc:
        print(as_typed(format_findings([exc.finding])), file=sys.stderr)
        raise Exit("error: the rendered file does not pass the check; nothing was written", code=1) from None
    findings = check_rendered(rendered, _catalog())
    if has_errors(findings):
        from servedeck.compose.positions import profile_positions
        findings = profile_positions(findings, _load(profile), rendered)
        print(as_typed(format_findings([f for f in findings if f.severity is Severity.error])), file=sys.stderr)
        raise Exit("error: the rendered file does not pass the check; nothing was written", code=1)
    counts = {sev: sum(f.severity is sev for f in findings) for sev in Severity}
    print(f"checked: {counts[Severity.error]} errors, {counts[Severity.warning]} warnings, "
          f"{counts[Severity.info]} infos (details: {PROGRAM} check --profile {profile})", file=sys.stderr)
    text = "\n".join(rendered.command) + "\n" if flags else rendered.compose_text
    if out:
        _write_out(out, text)
    else:
        sys.stdout.write(text)


@task(help={"profile": "check this profile's rendered compose file",
            "compose": "check a hand-written compose file",
            "json": "print findings as JSON",
            "all": "check every profile",
            "in_image": "also ask the pinned image's own launcher and vLLM (needs Docker)"})
@_cli
def check(c, profile=None, compose=None, json_=False, all_=False, in_image=False):
    """Verify a compose file: schema, pinning, YAML 1.1 traps, argv, launcher contract, vLLM names."""
    from servedeck.compose.check import findings_to_json, format_findings
    from servedeck.findings import has_errors
    if sum(bool(x) for x in (profile, compose, all_)) != 1:
        raise ServedeckError("give exactly one of --profile NAME, --compose FILE or --all")
    findings = []
    if compose:
        path = Path(compose)
        if not path.exists():
            raise ServedeckError("file not found", file=compose)
        from servedeck.compose.check import check_compose_file
        text, findings = check_compose_file(path, file=compose, catalog=_catalog())
        if in_image:
            from servedeck.compose.check import check_in_image
            from servedeck.host.inimage import judge
            findings += check_in_image(text, file=compose, judge=judge(), catalog=_catalog())
    else:
        names = _store().names() if all_ else [profile]
        texts, findings = _check_profiles(names)
        if in_image:  # one throw-away container per image for all the profiles
            from servedeck.compose.check import check_in_image_each
            from servedeck.host.inimage import judge
            print(f"judging {sum(t is not None for t in texts)} profile(s) with vLLM inside their images "
                  "(one container per image; a first look at an image takes a while)…", file=sys.stderr)
            findings += check_in_image_each([(text, f"profile:{name}") for name, text in zip(names, texts)
                                             if text is not None], judge=judge(), catalog=_catalog())
    if json_:
        print(as_typed(findings_to_json(findings)))
    else:
        print(as_typed(format_findings(findings)) if findings else "no findings")
        if not compose:
            _print_catalog_sources(names)
    if any(f.rule in LOAD_RULES for f in findings):
        raise Exit(code=2)  # a profile did not load: bad input, as a load error elsewhere
    if has_errors(findings):
        raise Exit(code=1)


LOAD_RULES = ("profile/invalid", "profile/unknown-key", "profile/not-loaded", "yaml/syntax-profile")
"""Rules of a profile that does not load (``check`` reports them as findings and goes on)."""


def _print_catalog_sources(names: list[str]) -> None:
    """Which catalog the image facts of the checked profiles come from, one line per digest
    (stderr)."""
    seen = set()
    for name in names:
        try:
            digest = _load(name).profile.image_ref.digest
        except ServedeckError:
            continue
        if digest in seen:
            continue
        seen.add(digest)
        where = _catalog().describe_source(digest)
        if where:
            print(f"image facts of {digest[:19]}…: {where}", file=sys.stderr)


def _check_profile(name: str) -> tuple[str | None, list]:
    """Render and check one profile of this process's project (also run in worker processes):
    (the rendered compose text, its findings); a profile that does not load: (None, one finding
    per problem, :data:`LOAD_RULES`)."""
    from servedeck.compose.check import check_rendered
    from servedeck.compose.render import RenderRefused
    try:
        rendered = _render(name)
    except RenderRefused as exc:  # the check's parser refuses the file: its finding, as the check's
        return None, [exc.finding]
    except ServedeckError as exc:
        return None, _load_findings(exc)
    from servedeck.compose.positions import profile_positions
    return rendered.compose_text, profile_positions(check_rendered(
        rendered, _catalog(), startup_seconds=_measured_startup(name)), _load(name), rendered)


@functools.lru_cache(maxsize=1)
def _measured_startups() -> dict[str, float]:
    """:func:`servedeck.runs.history.startup_seconds_by_profile` of this process's project, read
    once per process (a project that never deployed has no ``runs/``: nothing is imported)."""
    runs_dir = _project().runs_dir
    if not runs_dir.is_dir():
        return {}
    from servedeck.runs.history import startup_seconds_by_profile
    return startup_seconds_by_profile(runs_dir)


def _measured_startup(profile: str) -> float | None:
    """See :func:`_measured_startups`; None when ``profile`` never became ready."""
    return _measured_startups().get(profile)


PARALLEL_MIN_PROFILES = 48
"""``check --all`` over at least this many profiles runs in one worker process per CPU."""


def _load_findings(exc: ServedeckError) -> list:
    """A profile's load error as findings; a YAML syntax error keeps its line but gets a rule of
    the profile (not the compose check's ``yaml/syntax``)."""
    findings = error_findings(exc, "profile/not-loaded")
    for f in findings:
        if f.rule == "yaml/syntax":
            f.rule = "yaml/syntax-profile"
        if f.line is not None and f.path == f"line {f.line}":
            f.path = ""
    return findings


def _check_profiles(names: list[str]) -> tuple[list[str | None], list]:
    """(rendered compose texts of ``names``, their findings), in order. Many profiles: the first
    is checked here (loading the catalog, the shared parents, the templates and the Compose
    schema validator once), then the rest in forked worker processes that inherit all of that;
    a profile that does not load has the text None and its problems as findings."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if len(names) < PARALLEL_MIN_PROFILES or cpus < 2 or sys.platform != "linux":
        results = [_check_profile(name) for name in names]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        rest = names[1:]
        workers = min(cpus, 8)
        results = [_check_profile(names[0])]
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        try:
            results += pool.map(_check_profile, rest, chunksize=max(1, len(rest) // (workers * 4)))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # after an error: no work for nothing
    findings, seen = [], set()
    for _, found in results:  # a bad parent is one problem, not one per variant
        for f in found:
            key = (f.rule, f.file, f.line, f.path, f.message) if f.rule in LOAD_RULES else id(f)
            if key not in seen:
                seen.add(key)
                findings.append(f)
    return [text for text, _ in results], findings


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
    store = _store()
    rows, bad = [], []
    for name in store.names():
        try:
            p = store.load(name).profile
        except ServedeckError as exc:
            bad.append(exc)
            rows.append([name, "", "(does not load: see below)"])
            continue
        rows.append([name, p.extends or "", p.description or ""])
    print_table(None, [("profile", "left"), ("extends", "left"), ("description", "left")], rows)
    for err in bad:
        print(f"error: {as_typed(err.render())}", file=sys.stderr)
    if bad:
        raise Exit(code=2)


@task(help={"check": "fail when schema/ is stale instead of writing it"})
@_cli
def schema(c, check=False):
    """Write JSON Schemas of the profile and host models into schema/ (or --check freshness)."""
    from servedeck.model.schema import stale_schemas, write_schemas
    if check:
        directory = _project().schema_dir
        stale = stale_schemas(directory)
        if stale:
            raise ServedeckError(f"stale schema file(s): {', '.join(stale)}", file=str(directory),
                                 hint="run `servedeck schema` and commit the result")
        print("schema/ is up to date")
        return
    for path in write_schemas(_project().own_schema_dir):
        print(f"wrote {path}")


@task(name="import", help={"compose": "existing docker-compose file", "name": "new profile name",
                           "service": "service to import when there are several",
                           "force": "overwrite an existing profile"})
@_cli
def import_(c, compose, name, service=None, force=False):
    """Write profiles/NAME.yaml from an existing compose file."""
    from servedeck.compose.importer import dump_profile_yaml, import_compose
    target = _project().own_profiles_dir / f"{name}.yaml"
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


def _host(name: str, inventory: str | None, *, session_soon: bool = False):
    """The inventory host ``name`` as (RemoteHost, HostEntry) (:func:`servedeck.host.connect.open_host`;
    ``session_soon``: its SSH session opens while the rest imports)."""
    from servedeck.host.connect import open_host
    return open_host(name, Path(inventory) if inventory else _project().inventory_path, session_soon=session_soon)


_INV = "inventory file (default deploy/hosts.yaml or $SERVEDECK_INVENTORY)"


@task(help={"host": "inventory host name", "profile": "profile name", "inventory": _INV,
            "no_rollback": "leave a failed deploy as it is", "force_unlock": "remove a stale lock first",
            "timeout": "readiness timeout in seconds (default: the host's)",
            "image": "override the profile's image (digest-pinned reference)",
            "hosts": "rolling deploy to a group / Ansible host pattern instead of one --host",
            "serial": "--hosts: hosts per batch, a count or a percentage (default: all at once)",
            "max_fail": "--hosts: percent of a batch that may fail before the rollout stops (default 0)",
            "on_failure": "--hosts: keep (default) or rollback the hosts already deployed when one fails",
            "in_image": "let vLLM in the pinned image judge the command before the switch "
                        "(default on; --no-in-image skips it)",
            "json": "print one JSON document on stdout (outcome, run_id, run_dir, timings_s, error; "
                    "also when the deploy fails) and the progress on stderr"})
@_cli
def deploy(c, host=None, profile=None, inventory=None, no_rollback=False, force_unlock=False, timeout=None,
           image=None, hosts=None, serial=None, max_fail=None, on_failure="keep", in_image=True, json_=False):
    """Render, check, preflight, pull, upload, restart and wait until the server serves; record the run."""
    if hosts:  # fleet: see the "fleet" block below
        return _fleet_deploy(hosts, profile, inventory, serial, max_fail, on_failure, image, timeout)
    if not host or not profile:
        raise ServedeckError("give --host NAME (or --hosts GROUP) and --profile NAME")
    remote, entry = _host(host, inventory, session_soon=True)  # the login shell runs while we import
    from servedeck.deploy.apply import deploy as run_deploy
    from servedeck.deploy.console import ConsoleReporter
    from servedeck.deploy.plan import DeployOptions
    reporter = ConsoleReporter(stderr=json_)
    try:
        result = run_deploy(_project(), remote, entry, _load(profile),
                            DeployOptions(no_rollback=no_rollback, force_unlock=force_unlock,
                                          timeout_s=float(timeout) if timeout else None, image=image,
                                          in_image=in_image),
                            reporter)
    except ServedeckError as exc:
        if json_:
            print(json.dumps(deploy_document(host, profile, reporter.run_dir, error=exc)))
            exc.json_printed = True
        raise
    differs = [ch.render() for ch in result.arg_checks if ch.status == "differs"]
    if json_:
        print(json.dumps(deploy_document(host, profile, result.run.path if result.run else None,
                                         outcome=result.outcome, timings_s=result.timings_s,
                                         revision=result.revision, differs=differs)))
    else:
        t = result.timings_s
        print(f"deployed {profile} to {host}: ready; pull {t.get('pull_s')} s, server start to ready "
              f"{t.get('container_start_to_ready_s')} s, servedeck overhead {t.get('overhead_s')} s")
        if result.run:
            print(f"run record: {result.run.path}")
    if differs:
        raise Exit("error: the server reports settings that differ from the profile (see above)", code=4)


def deploy_document(host: str, profile: str, run_dir: Path | None, *, outcome: str | None = None,
                    timings_s: dict | None = None, revision: int | None = None, differs: list | None = None,
                    error: ServedeckError | None = None) -> dict:
    """``deploy --json``'s document: ``{"host", "profile", "outcome", "run_id", "run_dir",
    "revision", "timings_s", "differs", "error"}``. ``outcome``: ``ready``, or for a failed
    deploy the run record's final state (``failed``, ``rolled-back``, ``interrupted``; None when
    it failed before a run was recorded); ``differs``: settings the server reports otherwise than
    the profile; ``error``: ``{"message", "hint"}`` of a failed deploy, else None."""
    if error is not None and run_dir is not None:
        from servedeck.runs.store import read_meta
        try:
            outcome = read_meta(run_dir).outcome
        except ServedeckError:
            outcome = None
    return {"host": host, "profile": profile, "outcome": outcome,
            "run_id": Path(run_dir).name if run_dir else None, "run_dir": str(run_dir) if run_dir else None,
            "revision": revision, "timings_s": timings_s or {}, "differs": differs or [],
            "error": {"message": error.message, "hint": error.hint} if error is not None else None}


@task(help={"host": "inventory host name", "inventory": _INV, "json": "print JSON"})
@_cli
def status(c, host, inventory=None, json_=False):
    """Show what runs on a host (state, uptime, digest, restarts) and drift from the compose file."""
    from servedeck.deploy.ops import format_status
    from servedeck.deploy.ops import status as host_status
    remote, entry = _host(host, inventory)
    st = host_status(remote, entry)
    from servedeck.safetext import printable
    print(json.dumps(st, indent=2) if json_ else printable(format_status(st)))


@task(help={"host": "inventory host name", "inventory": _INV, "follow": "stream until Ctrl-C",
            "tail": "lines from the end"})
@_cli
def logs(c, host, inventory=None, follow=False, tail=200):
    """Print the deployed server's log."""
    from servedeck.deploy.ops import stream_logs
    remote, _ = _host(host, inventory)
    stream_logs(remote, follow=follow, tail=int(tail))


@task(help={"host": "inventory host name", "inventory": _INV, "timeout": "readiness timeout (s)",
            "to": "history revision to restore (a known-good one; see `invoke status`)",
            "force_unlock": "take over a stale lock first"})
@_cli
def rollback(c, host, inventory=None, timeout=None, to=None, force_unlock=False):
    """Restore the last (or --to N) known-good deployment on a host and wait until it serves."""
    from servedeck.deploy.console import ConsoleReporter
    from servedeck.deploy.ops import rollback as host_rollback
    remote, entry = _host(host, inventory)
    host_rollback(remote, entry, to=int(to) if to else None,
                  timeout_s=float(timeout) if timeout else None, reporter=ConsoleReporter(),
                  project=_project(), force_unlock=force_unlock)


@task(help={"host": "inventory host name", "inventory": _INV,
            "force_unlock": "take over a stale lock first"})
@_cli
def down(c, host, inventory=None, force_unlock=False):
    """Stop and remove the deployment on a host (volumes are kept), under the deploy lock."""
    from servedeck.deploy.ops import down as host_down
    remote, _ = _host(host, inventory)
    print(host_down(remote, force_unlock=force_unlock) or "down")


# ----------------------------------------------------------------------------- runs


# ----------------------------------------------------------------------------- fleet
# (Ansible drives the per-host commands: servedeck/fleet/)


def _fleet(inventory: str | None):
    from servedeck.fleet.inventory import load_fleet
    return load_fleet(Path(inventory) if inventory else _project().inventory_path)


def _fleet_deploy(hosts, profile, inventory, serial, max_fail, on_failure, image, timeout):
    from servedeck.fleet.rollout import console_progress, rollout
    from servedeck.fleet.summary import render_table, rollout_table
    if not profile:
        raise ServedeckError("give --profile NAME")
    result = rollout(_project(), _fleet(inventory), hosts, profile, serial=serial, max_fail=max_fail,
                     policy=on_failure, image=image, timeout_s=float(timeout) if timeout else None,
                     progress=console_progress(_print_err))
    print(render_table(rollout_table(result)), end="")
    print(f"state: {result.state_dir} ({result.duration_s:.1f} s)")
    if not result.ok:
        bad = [h.host for h in result.hosts if h.outcome != "ready"]
        raise Exit(f"error: rollout of {profile} incomplete: {', '.join(bad)} not serving it "
                   "(see the table above)", code=1)


@task(help={"inventory": "servedeck hosts.yaml or an Ansible inventory (default: deploy/hosts.yaml)",
            "json": "print JSON"})
@_cli
def hosts(c, inventory=None, json_=False):
    """List the inventory's hosts and groups (servedeck hosts.yaml or an Ansible inventory)."""
    from servedeck.fleet.summary import hosts_table, render_table
    fleet = _fleet(inventory)
    if json_:
        print(json.dumps({"source": str(fleet.source), "kind": fleet.kind, "groups": fleet.groups,
                          "hosts": {h: e.model_dump(mode="json") for h, e in fleet.hosts.items()}},
                         indent=2))
        return
    print(render_table(hosts_table(fleet)), end="")
    for group, members in fleet.groups.items():
        print(f"{group}: {', '.join(members) or '-'}")
    from servedeck.model.inventory import shared_deployments
    for finding in shared_deployments(fleet.hosts):
        print(f"warning: {finding}", file=sys.stderr)


@task(help={"base": "the base profile", "vary": "KEY=V1,V2[,...] (profile path, e.g. "
            "engine.max_num_batched_tokens=4096,8192); repeat for more variables",
            "hosts": "group / Ansible host pattern to run on", "inventory": _INV,
            "reps": "repetitions of each experiment (default 1)",
            "plan": "print the schedule and its estimated duration, run nothing",
            "name": "sweep name (default: derived from base and --vary; the same command resumes)",
            "image": "override the profiles' image (digest-pinned reference)",
            "no_bench": "deploy and compare startup facts only (no benchmark)",
            "prompt_tokens": "bench prompt length", "max_tokens": "bench output tokens",
            "repetitions": "bench requests per phase",
            "workload": "bench this workload under load in every arm (invoke workloads); the summary "
                        "carries each arm's capacity under --slo",
            "load": "with --workload: the load schedule every arm runs", "slo": "with --workload: the SLO",
            "requests": "with --workload: requests per load level"}, iterable=["vary"])
@_cli
def sweep(c, base, hosts, vary=None, inventory=None, reps=1, plan=False, name=None, image=None,
          no_bench=False, prompt_tokens=None, max_tokens=None, repetitions=None, workload=None, load=None,
          slo=None, requests=None):
    """Plan single-variable A/B experiments from --vary lists and run them over a fleet (resumable)."""
    from servedeck.fleet.summary import render_table, sweep_plan_table, sweep_table
    from servedeck.fleet.sweep import plan_sweep, run_sweep
    from servedeck.fleet.rollout import console_progress
    bench_args = []
    for flag, value in (("--prompt-tokens", prompt_tokens), ("--max-tokens", max_tokens),
                        ("--repetitions", repetitions), ("--workload", workload), ("--load", load),
                        ("--slo", slo), ("--requests", requests)):
        if value is not None:
            bench_args += [flag, str(value)]
    sweep_plan = plan_sweep(_project(), _fleet(inventory), hosts, base, vary or [], reps=int(reps),
                            name=name, image=image, bench=not no_bench, bench_args=bench_args)
    print(render_table(sweep_plan_table(sweep_plan)), end="")
    if plan:
        return
    result = run_sweep(_project(), sweep_plan,
                       progress=console_progress(_print_err))
    print(render_table(sweep_table(result)), end="")
    for line in result.power_restored:
        print(line, file=sys.stderr)
    if result.chart:
        print(f"chart: {result.chart}")
    print(f"summary: {result.summary}")
    if result.interrupted:
        raise Exit(f"interrupted: {len(result.pending)} experiment(s) not finished; run the same "
                   "command again to resume (finished experiments are not run again)", code=130)
    if not result.ok:
        raise Exit(f"error: {len(result.pending)} experiment(s) not finished: "
                   f"{', '.join(result.pending)}; run the same command again to resume", code=1)


@task(name="image-facts", help={"image": "image reference (repository[:tag][@digest]) or id",
                                "json": "print the facts as JSON", "no_record": "do not write the catalog",
                                "table": "also write the shipped table servedeck/vllm/tables/vllm-VERSION.json"})
@_cli
def image_facts(c, image, json_=False, no_record=False, table=False):
    """Read an image's facts from the image itself (config, vLLM argument surface, registries,
    VLLM_* variables, helper binaries, launcher configs) and record them in the catalog."""
    from servedeck.host.inimage import extract_facts
    from servedeck.model.project import is_source_checkout
    if table and not is_source_checkout():
        raise ServedeckError("--table writes servedeck's own shipped tables (servedeck/vllm/tables/), "
                             "a development step in a checkout of servedeck; an installed servedeck "
                             "never writes inside its package",
                             hint=f"drop --table: `{PROGRAM} image-facts IMAGE` records the image's "
                                  "vLLM facts beside your project's catalog, and check reads them there")
    print(f"reading {image} (pulled when missing; its vLLM asked in one container)…", file=sys.stderr)
    digest, facts, vf = extract_facts(None, image)
    if not vf.serve_args:  # no vLLM imports in the image (a stand-in)
        print(f"warning: no vLLM imports in {image}: its config, launcher configs and helper binaries "
              "are recorded, no vLLM argument surface (checks use servedeck's shipped tables)", file=sys.stderr)
        if table:
            raise ServedeckError(f"{image} has no vLLM to read a table from", hint="drop --table")
    if not no_record:
        if vf.serve_args:
            _catalog().add_with_vllm_facts(digest, facts, vf)
        else:
            _catalog().add(digest, facts)
        print(f"recorded {digest} in {_catalog()._target(digest)}", file=sys.stderr)
    if table:
        from servedeck.vllm.facts import write_table
        print(f"wrote {write_table(vf)}", file=sys.stderr)
    if json_:
        print(json.dumps({"digest": digest, "image": facts.model_dump(mode="json"),
                          "vllm": vf.model_dump(mode="json", by_alias=True)}, indent=2))
        return
    print(f"{digest}  {facts.repository}  launcher={facts.launcher} device={facts.device} "
          f"vLLM {vf.vllm_version}")
    print(f"entrypoint {facts.entrypoint}  cmd {facts.cmd}  workdir {facts.workdir}")
    print(f"{len(vf.serve_args)} serve args, {len(vf.tool_call_parsers)} tool-call parsers, "
          f"{len(vf.reasoning_parsers)} reasoning parsers, {len(vf.speculative_methods)} speculative "
          f"methods, {len(vf.env_vars or [])} VLLM_* variables, binaries {facts.binaries}, "
          f"launcher configs {[d.config for d in facts.launcher_defaults]}")


@task(name="startup-facts", help={"log": "a vLLM startup log (docker logs output)", "json": "print JSON",
                                  "context_tokens": "the context the server is for (tokens, e.g. the profile's "
                                                    "max_model_len): warn when the KV block size defeats prefix "
                                                    "caching for it"})
@_cli
def startup_facts(c, log, json_=False, context_tokens=None):
    """Parse a vLLM startup log: args, warnings, compile, KV pool, concurrency, memory, errors
    (the cause over all starts, the phase it happened in, the fix)."""
    from servedeck.vllm.startup_facts import prefix_caching_reach
    from servedeck.vllm.startup_log import format_summary, parse_startup_log
    path = Path(log)
    if not path.exists():
        raise ServedeckError("file not found", file=log)
    facts = parse_startup_log(path.read_text(encoding="utf-8", errors="replace"))
    context = None
    if context_tokens is not None:
        try:
            context = int(context_tokens)
        except ValueError:
            raise ServedeckError(f"--context-tokens {context_tokens!r} is not a number of tokens",
                                 hint="e.g. --context-tokens 4096") from None
    reach = prefix_caching_reach(facts, context or facts.max_model_len)
    if json_:
        out = facts.to_dict()
        out["prefix_caching_warning"] = reach
        print(json.dumps(out, indent=2, default=str))
    else:
        print(format_summary(facts) + (f"\n\u2022 warning: {reach}" if reach else ""))


@task(help={"host": "inventory host name", "inventory": _INV,
            "run": "run id / sequence / latest[:PROFILE] / newest[:PROFILE] (default: the host's newest ready run)",
            "prompt_tokens": "prompt length in tokens (exact, sized with the server's /tokenize; "
                             "default: 32768, or what fits the deployed max_model_len)",
            "max_tokens": "output tokens per request (default: 256, or an eighth of a short max_model_len)",
            "repetitions": "requests per phase (cold, warm); with --against: of the first look",
            "import_file": "store results of `vllm bench serve --save-result` / guidellm beside the run",
            "workload": "a workload name (invoke workloads) or YAML file; chat, shared-prefix and full-context "
                        "workloads run under load",
            "load": "load profile: concurrency:1,2,4,8 | constant:R,... | poisson:R,...[@MAX] | ramp:R1-R2 "
                    "(default: the workload's)",
            "slo": "SLO judged per level: ttft_s=S,tpot_s=S,e2e_s=S,p=PCT (default: the workload's)",
            "capacity": "search the highest load meeting the SLO (grow, then bisect) from --load's first level",
            "precision": "capacity search: relative precision of the answer (default 0.1 = ±10 %)",
            "max_levels": "capacity search: most load levels to run (default 8)",
            "requests": "requests per load level (default: the workload's)",
            "export_vllm": "write the run's load results in `vllm bench serve` JSON shape to FILE (one object "
                           "per level, as --append-result writes them)",
            "import_curve": "store an external load curve beside --run: a `vllm bench sweep serve` directory, a "
                            "GuideLLM report with several benchmarks, or appended `vllm bench serve` results",
            "serve": "with --import-curve of a sweep over server settings: the SERVE- combination to take",
            "benchmark": "with --import-file: the benchmark of a file holding several (a guidellm sweep, an "
                         "--append-result file): its label as listed (constant@1.55), its position, or its strategy",
            "no_quality": "skip the quality probes (likelihood, agreement, degenerate output, features, needle)",
            "needle_tokens": "longest needle context in tokens, or `max` for the deployed max_model_len "
                             "(default 32768)",
            "lm_eval": "also run lm-evaluation-harness on these tasks (comma-separated; needs servedeck[lm-eval])",
            "lm_eval_include": "directory of your lm-eval task YAML files",
            "lm_eval_limit": "lm-eval documents per task",
            "lm_eval_backend": "local-chat-completions (default) or local-completions (log-likelihood tasks)",
            "no_telemetry": "do not sample energy, power, clocks and throttling on the host",
            "telemetry_period_s": "seconds between the host's telemetry samples (default 0.1)",
            "against": "sample until every metric is decided against this benchmarked run (arm A: a run "
                       "id, sequence or latest:PROFILE), with sequential looks whose error rates hold",
            "max_requests": "with --against: the sample budget, requests per phase (default 24)",
            "batch": "with --against: requests per phase added between looks (default 2)",
            "max_minutes": "with --against: the time budget in minutes",
            "margin": "with --against: practical-equivalence margin, relative (default 0.03)",
            "alpha": "with --against: family-wise error rate over all looks (default 0.05)"})
@_cli
def bench(c, host=None, inventory=None, run=None, prompt_tokens=None, max_tokens=None, repetitions=None,
          import_file=None, workload=None, load=None, slo=None, capacity=False, precision=None, max_levels=None,
          requests=None, export_vllm=None, import_curve=None, serve=None, no_quality=False, needle_tokens=None,
          lm_eval=None, lm_eval_include=None, lm_eval_limit=None, lm_eval_backend=None, no_telemetry=False,
          telemetry_period_s=None, against=None, max_requests=None, batch=None, max_minutes=None, margin=None,
          alpha=None, benchmark=None):
    """Benchmark the deployed server: one stream (cold/warm TTFT, decode tok/s, MTP) or a workload under load.

    With --workload/--load/--slo/--capacity a chat, shared-prefix or full-context workload runs at
    each load level (servedeck.bench.loadclient), or a capacity search finds the highest load
    meeting the SLO; the run records load.jsonl, load.json (and capacity.json). After either kind of
    benchmark the quality probes run (quality.json; --no-quality skips them), and with --lm-eval
    standard tasks are scored (lm_eval.json). Energy, power, clocks and throttling are sampled on the host
    during the benchmark (telemetry.json) and each request is set against the card's ceilings
    (roofline.json).
    With --against RUN the single stream samples until every metric is decided against that run
    (sequential looks).
    """
    from servedeck.runs.history import resolve_run
    from servedeck.bench.record import import_external, latest_ready_run
    runs_dir = _project().runs_dir
    if import_file:
        if not run:
            raise ServedeckError("--import-file needs --run RUN")
        mapped = import_external(resolve_run(runs_dir, run), Path(import_file), benchmark)
        print(json.dumps(mapped, indent=2))
        for note in mapped.get("notes") or []:
            print(f"warning: {note}", file=sys.stderr)
        return
    if benchmark:
        raise ServedeckError("--benchmark chooses a benchmark of an imported file", hint="give --import-file FILE")
    if import_curve:
        if not run:
            raise ServedeckError("--import-curve needs --run RUN")
        from servedeck.bench.record import import_external_curve
        mapped = import_external_curve(resolve_run(runs_dir, run), Path(import_curve), serve=serve)
        print(f"{mapped['source']}: {len(mapped['levels'])} levels "
              f"({', '.join(lv['label'] for lv in mapped['levels'])}) stored beside {run}")
        for note in mapped.get("notes") or []:
            print(f"warning: {note}", file=sys.stderr)
        return
    if export_vllm:
        if not run:
            raise ServedeckError("--export-vllm needs --run RUN")
        from servedeck.bench.interop import export_vllm_bench
        if Path(export_vllm).is_dir():
            raise ServedeckError(f"--export-vllm {export_vllm} is a directory", field="--export-vllm",
                                 hint="give the file to write, e.g. DIR/results.json")
        path = export_vllm_bench(resolve_run(runs_dir, run), Path(export_vllm))
        print(f"wrote {path}")
        return
    if not host:
        raise ServedeckError("give --host NAME")
    if against is None and any(v is not None for v in (max_requests, batch, max_minutes, margin, alpha)):
        raise ServedeckError("--max-requests, --batch, --max-minutes, --margin and --alpha need --against RUN",
                             hint="name the benchmarked run to decide against, e.g. --against latest:base")
    loaded = None
    if workload or load or slo or capacity:
        from servedeck.bench.workload import load_workload
        loaded = load_workload(workload or "chat", _project().root)
        if loaded.kind == "single-stream" and (load or slo or capacity):
            raise ServedeckError(f"workload {loaded.name!r} is a single stream: --load, --slo and --capacity "
                                 "need a chat, shared-prefix or full-context workload", field="--workload")
    under_load = None
    if loaded is not None and loaded.kind != "single-stream":  # settings checked before the host is asked
        under_load = _load_settings(loaded, load, slo, capacity, precision, max_levels, requests)
    quality, tasks = _quality_options(needle_tokens, lm_eval, lm_eval_include, lm_eval_limit, lm_eval_backend)
    if against is not None and under_load is not None:
        raise ServedeckError("--against samples the single-stream benchmark; under load give --interleave to "
                             "invoke ab, or compare two load-benchmarked runs with invoke ab --slo",
                             field="--against")
    remote, entry = _host(host, inventory)
    run_dir = resolve_run(runs_dir, run) if run else latest_ready_run(runs_dir, host)
    if under_load is not None:
        _bench_load(run_dir, remote, entry, *under_load, probes=not no_quality, quality=quality, tasks=tasks,
                    telemetry=not no_telemetry,
                    telemetry_period_s=float(telemetry_period_s) if telemetry_period_s else None)
        return
    from servedeck.bench.client import RichProgress, Workload
    from servedeck.bench.record import bench_deployed
    from servedeck.bench.table import format_table
    from servedeck.bench.sizing import max_model_len_of, size_workload
    base = loaded.to_bench_workload() if loaded is not None else Workload()
    # sizes a workload file changes are asked for explicitly; the defaults (the shipped
    # single-stream workload's) give way to a short context, as without --workload
    default = Workload()
    prompt, out = size_workload(
        max_model_len_of(run_dir),
        int(prompt_tokens) if prompt_tokens else (base.prompt_tokens if base.prompt_tokens != default.prompt_tokens
                                                  else None),
        int(max_tokens) if max_tokens else (base.max_tokens if base.max_tokens != default.max_tokens else None))
    workload_ = base.model_copy(update={"prompt_tokens": prompt, "max_tokens": out,
                                        "repetitions": int(repetitions) if repetitions else base.repetitions})
    more = monitor = None
    if against is not None:
        from servedeck.ab.sequential import DEFAULT_BATCH, DEFAULT_MAX_REQUESTS, bench_against
        from servedeck.ab.stats import ALPHA, DEFAULT_MARGIN
        try:
            more, monitor = bench_against(
                resolve_run(runs_dir, against), run_dir,
                max_requests=int(max_requests) if max_requests is not None else DEFAULT_MAX_REQUESTS,
                batch=int(batch) if batch is not None else DEFAULT_BATCH,
                alpha=float(alpha) if alpha is not None else ALPHA,
                margin=float(margin) if margin is not None else DEFAULT_MARGIN,
                max_seconds=float(max_minutes) * 60 if max_minutes is not None else None)
        except ValueError as exc:  # pydantic's range checks of the design
            raise ServedeckError(f"invalid sequential design: {exc}",
                                 hint="--alpha between 0 and 1, --margin between 0 and 1") from None
    from servedeck.bench.limits import format_roofline, format_telemetry, read_roofline, read_telemetry
    with RichProgress(f"bench {run_dir.name}") as progress:
        try:
            result = bench_deployed(run_dir, remote, entry, workload_, progress=progress, probes=not no_quality,
                                    quality_settings=quality, lm_eval=tasks, telemetry=not no_telemetry,
                                    telemetry_period_s=float(telemetry_period_s) if telemetry_period_s else None,
                                    catalog=_catalog(), runs_dir=runs_dir, more=more)
        except KeyboardInterrupt:
            if monitor is not None:
                monitor.interrupted()
            raise
    print(format_table(result))
    if monitor is not None:
        _print_sequential(monitor)
    for line in [*format_roofline(read_roofline(run_dir)), *format_telemetry(read_telemetry(run_dir))]:
        print(line)
    if not no_quality:
        from servedeck.ab.quality import read_quality
        from servedeck.bench.table import format_quality
        print(format_quality(read_quality(run_dir)))
    print(f"results in {run_dir}")


def _print_sequential(monitor) -> None:
    """How sequential sampling went and each judged metric's verdict (``bench --against``)."""
    from servedeck.ab.sequential import describe_stop
    print(describe_stop(monitor.record))
    for m in monitor.metrics:
        if m.judged:
            print(f"  {m.key}: {m.verdict} ({len(m.samples_b)} vs {len(m.samples_a)} requests; {m.reason})")


def _load_settings(workload, load, slo, capacity, precision, max_levels, requests):
    """The workload (``--requests`` applied), load profile, SLO and capacity settings of
    ``invoke bench``/``invoke ab`` under load."""
    from servedeck.bench.load import SEARCHABLE, LoadProfile
    from servedeck.bench.slo import parse_slo
    if requests is not None:
        workload = workload.with_requests(_whole_number("--requests", requests))
    profile = LoadProfile.parse(load or workload.default_load())
    slo_ = parse_slo(slo) if slo else workload.slo
    search = None
    if capacity:
        if slo_ is None:
            raise ServedeckError("--capacity needs an SLO", field="--slo",
                                 hint="give --slo ttft_s=2,tpot_s=0.1,p=90 or put slo: in the workload file")
        if profile.kind not in SEARCHABLE:
            raise ServedeckError(f"--capacity varies {', '.join(SEARCHABLE)} levels, not {profile.kind}",
                                 field="--load")
        if load and len(profile.levels) > 1:  # the search would start at the first and ignore the rest
            raise ServedeckError(f"--capacity starts from one level and chooses the next ones itself; --load "
                                 f"{load} gives {len(profile.levels)}", field="--load",
                                 hint=f"give the first: --load {profile.kind}:{profile.levels[0].value:g}")
        from servedeck.bench.capacity import CapacitySearch
        search = {"start": profile.levels[0],
                  "precision": _number("--precision", precision) if precision is not None else None,
                  "max_levels": _whole_number("--max-levels", max_levels) if max_levels is not None else None}
        CapacitySearch(**{k: v for k, v in search.items() if v is not None})  # its settings judged before the host
    return workload, profile, slo_, search


def _number(option: str, text) -> float:
    """A command-line number. Raises ServedeckError naming ``option`` when ``text`` is not one."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ServedeckError(f"{option} {text!r} is not a number", field=option) from None


def _whole_number(option: str, text) -> int:
    """A command-line whole number. Raises ServedeckError naming ``option`` when ``text`` is not one."""
    try:
        return int(str(text).strip())
    except ValueError:
        raise ServedeckError(f"{option} {text!r} is not a whole number", field=option) from None


def _bench_load(run_dir, remote, entry, workload, profile, slo_, search, *, probes=True, quality=None,
                tasks=None, telemetry=True, telemetry_period_s=None) -> None:
    """``invoke bench`` under load (servedeck.bench.record.load_deployed, settings from
    ``_load_settings``; then the quality probes and lm-eval): print the level table, each level's
    energy and the probes."""
    from servedeck.bench.client import RichProgress
    from servedeck.bench.limits import format_telemetry
    from servedeck.bench.record import load_deployed
    from servedeck.bench.table import format_load_table
    with RichProgress(f"load {run_dir.name}") as progress:
        result = load_deployed(run_dir, remote, entry, workload, profile=profile, slo=slo_, capacity=search,
                               progress=progress, probes=probes, quality_settings=quality, lm_eval=tasks,
                               telemetry=telemetry, telemetry_period_s=telemetry_period_s)
    print(format_load_table(result.summary.model_dump(mode="json"),
                            result.capacity.model_dump(mode="json") if result.capacity is not None else None))
    from servedeck.runs import store
    for line in format_telemetry(store.read(run_dir, store.LOAD_TELEMETRY)):
        print(line)
    if probes:
        from servedeck.ab.quality import read_quality
        from servedeck.bench.table import format_quality
        print(format_quality(read_quality(run_dir)))
    print(f"results in {run_dir}")


@task(help={"json": "print JSON"})
@_cli
def workloads(c, json_=False):
    """List the benchmark workloads: shipped ones and the project's own (workloads/NAME.yaml)."""
    from servedeck.bench.workload import available_workloads, describe, load_workload
    root = _project().root
    found = available_workloads(root)
    docs, invalid = {}, {}
    for name in found:  # one invalid file is named in its row; the others are still listed
        try:
            docs[name] = load_workload(name, root)
        except ServedeckError as exc:
            invalid[name] = exc.message + (f" ({exc.field})" if exc.field else "")
    if json_:
        print(json.dumps({n: {"path": str(found[n]), **(docs[n].model_dump(mode="json") if n in docs
                                                        else {"invalid": invalid[n]})} for n in found}, indent=2))
    else:
        print_table(None, [("workload", "left"), ("kind", "left"), ("what", "left")],
                    [[n, docs[n].kind, describe(docs[n]).split(": ", 1)[-1]] if n in docs
                     else [n, "invalid", f"{found[n]}: {invalid[n]}"] for n in found])
    if invalid:
        raise Exit(code=1)


def _quality_options(needle_tokens, lm_eval, include, limit, backend):
    """(QualitySettings, LmEvalSettings | None) from `invoke bench`'s options.

    Raises:
        ServedeckError: a value is not a count (the option named).
    """
    from pydantic import ValidationError

    from servedeck.bench.quality import QualitySettings
    quality = QualitySettings()
    if needle_tokens is not None:
        text = str(needle_tokens).strip().lower()
        if text != "max" and not text.isdigit():
            raise ServedeckError(f"--needle-tokens {needle_tokens!r} is neither a token count nor `max`",
                                 field="--needle-tokens")
        quality = QualitySettings(needle_max_tokens=None if text == "max" else int(text))
    if not lm_eval:
        if include or limit or backend:
            raise ServedeckError("--lm-eval-include/--lm-eval-limit/--lm-eval-backend need --lm-eval TASKS")
        return quality, None
    from servedeck.bench.lmeval import LmEvalSettings
    try:
        tasks = LmEvalSettings(tasks=[t.strip() for t in str(lm_eval).split(",") if t.strip()],
                               include_path=str(Path(include).resolve()) if include else None,
                               limit=int(limit) if limit else None,
                               **({"backend": backend} if backend else {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        option = {"backend": "--lm-eval-backend", "limit": "--lm-eval-limit", "tasks": "--lm-eval"}.get(
            str(err["loc"][0]), "--lm-eval")
        raise ServedeckError(f"bad lm-eval option: {err['msg']}", field=option) from None
    except ValueError:
        raise ServedeckError(f"bad lm-eval option: {limit!r} is not a count",
                             field="--lm-eval-limit") from None
    return quality, tasks


@task(help={"profile": "only runs of this profile", "limit": "show the newest N runs (default 50; 0 = all)"})
@_cli
def runs(c, profile=None, limit=50):
    """List the newest runs (oldest first): sequence, time, host, profile, outcome, headline numbers.

    ``--limit N`` (default 50; 0 = all) keeps the listing readable and fast on a long history; a
    note on stderr says how many older runs were left out.
    """
    from servedeck.runs.history import list_runs
    rows = list_runs(_project().runs_dir, profile=profile)
    if not rows:
        print("no runs")
        return
    limit = int(limit)
    if limit < 0:
        raise ServedeckError(f"--limit {limit} is negative", field="--limit", hint="give a count, or 0 for all runs")
    if limit and len(rows) > limit:
        print(f"{len(rows) - limit:,} older runs not shown ({len(rows):,} in all; --limit 0 lists all)",
              file=sys.stderr)
        rows = rows[-limit:]

    def cell(v, fmt="{:.3g}"):
        return "-" if v is None else fmt.format(v) if isinstance(v, (int, float)) else str(v)
    print_table(None, [("run", "left"), ("started", "left"), ("host", "left"), ("profile", "left"),
                       ("outcome", "left"), ("benched", "left"), ("kv_tokens", "right"), ("warm_dec_tok_s", "right"),
                       ("cold_ttft_s", "right")],
                [[r.run_id, cell(r.started_at), cell(r.host), cell(r.profile), cell(r.outcome),
                  "yes" if r.benchmarked else "no", cell(r.kv_cache_tokens, "{:,.0f}"), cell(r.warm_decode_tok_s),
                  cell(r.cold_ttft_s)]
                 for r in rows])


@task(help={"run": "run id / sequence / latest[:PROFILE] (served and benchmarked) / newest[:PROFILE]",
            "json": "print JSON"})
@_cli
def show(c, run, json_=False):
    """Show one run: its run.json, changes, facts, startup, args verification, KV, benchmark and every other record."""
    from servedeck.runs.history import resolve_run, run_document
    path = resolve_run(_project().runs_dir, run)
    if json_:
        print(json.dumps(run_document(path), indent=2))
        return
    for line in show_lines(path):
        print(line)


#: run.json fields the first lines of ``show`` give; the others follow them as ``field: value``.
_SHOW_HEADLINE = ("run_id", "profile", "host", "outcome", "started_at", "ready_at", "failure", "failure_phase",
                  "image.reference", "compose_sha256", "args_verification.confirmed", "args_verification.differs")


def show_lines(path: Path) -> list[str]:
    """What ``show`` prints for the run directory ``path``: the headline of its run.json and
    every other field it holds (null and empty ones left out), then each run file the store marks as shown
    (:attr:`servedeck.runs.store.RunFile.shown`), in record order: in the words of its own
    formatter where it has one (startup facts, args verification, KV, bench table), else as
    ``field: value`` lines of its model. A field or file added to the record shows here with no
    further code.

    Raises:
        ServedeckError: a file is not valid JSON or does not match its model.
    """
    from servedeck.runs import store
    from servedeck.dotted import flatten
    meta = store.read_meta(path)
    lines = [f"{path.name}: {meta.profile} on {meta.host}, {meta.outcome} "
             f"(started {meta.started_at}, ready {meta.ready_at})"]
    if meta.failure:
        lines.append(f"  failure ({meta.failure_phase or 'unknown phase'}): {meta.failure}")
    lines.append(f"  image {meta.image.reference if meta.image else None}")
    lines.append(f"  compose sha256 {meta.compose_sha256}")
    lines += [f"  {key}: {_shown(value)}" for key, value in flatten(store.encode(store.RUN_META, meta)).items()
              if key not in _SHOW_HEADLINE and value not in (None, [], {})]
    for file in store.present_files(path):
        if file == store.RUN_META or not file.shown:
            continue
        value = store.read(path, file)
        own = _show_formatters().get(str(file))
        lines += own(value) if own else [f"{file}:", *(f"  {key}: {_shown(leaf)}" for key, leaf in
                                                       flatten(store.encode(file, value)).items()
                                                       if leaf not in (None, [], {}))]
    return lines


def _shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _show_formatters() -> dict:
    """``show``'s own words for some run files (by file name): each takes the file's model and
    returns lines (each imports its formatter when a run holds its file)."""
    from servedeck.runs import store

    def startup(facts) -> list[str]:
        from servedeck.vllm.startup_facts import format_summary
        return ["startup:", *("  " + line for line in format_summary(facts).splitlines())]

    def args(rows) -> list[str]:
        return [f"  arg {chk.setting}: {chk.status} (expected {chk.expected!r}, reported {chk.reported!r})"
                for chk in rows.root if chk.source == "profile" or chk.status == "differs"]

    def kv(doc) -> list[str]:
        from servedeck.runs.kv_history import format_kv
        return [f"  KV: {line}" for line in [format_kv(doc)] if line]

    def bench(summary) -> list[str]:
        from servedeck.bench.table import format_table
        return ["bench:", format_table(store.encode(store.BENCH_SUMMARY, summary))]

    def load(summary) -> list[str]:
        from servedeck.bench.table import format_load_table
        return ["load:", format_load_table(store.encode(store.LOAD_SUMMARY, summary))]

    def capacity(result) -> list[str]:
        from servedeck.bench.table import format_capacity
        return ["capacity:", *("  " + line for line in format_capacity(store.encode(store.CAPACITY, result)))]

    def quality(result) -> list[str]:
        from servedeck.bench.table import format_quality
        return format_quality(result).splitlines()

    def lm_eval(result) -> list[str]:
        return [f"lm-eval {result.lm_eval_version}: " + ", ".join(
            f"{m.key} {m.value:.4g} (n={len(m.per_doc)})" for m in result.task_metrics if m.value is not None)]

    def roofline_(record) -> list[str]:
        from servedeck.bench.limits import format_roofline
        return format_roofline(record)

    def telemetry(record) -> list[str]:
        from servedeck.bench.limits import format_telemetry
        return format_telemetry(record)
    return {store.PROFILE_DIFF: lambda diff: [f"  changed vs parent: {ch.path}: {ch.parent} -> {ch.value}"
                                              for ch in diff.root],
            store.STARTUP: startup, store.ARGS_VERIFICATION: args, store.KV: kv, store.BENCH_SUMMARY: bench,
            store.LOAD_SUMMARY: load, store.CAPACITY: capacity, store.QUALITY: quality, store.LM_EVAL: lm_eval,
            store.ROOFLINE: roofline_, store.TELEMETRY: telemetry, store.LOAD_TELEMETRY: telemetry}


@task(help={"host": "inventory host name (default: list the shipped card table)", "inventory": _INV,
            "measure": "measure the device's read bandwidth and matrix rate in the host's running server "
                       "container and keep them (runs/ceilings/HOST.json)",
            "buffer_mib": "with --measure: the bandwidth buffer in MiB (default 256)",
            "repeats": "with --measure: timed passes of each kind, the best counts (default 5)",
            "json": "print JSON"})
@_cli
def ceilings(c, host=None, inventory=None, measure=False, buffer_mib=256, repeats=5, json_=False):
    """The limits a host's runs are measured against: card table, inventory overrides, measured figures."""
    from servedeck.bench.roofline import resolve_ceilings
    from servedeck.model.cards import CARDS
    from servedeck.numfmt import fmt_num
    from servedeck.runs import store
    if not host:
        if json_:
            print(json.dumps([c_.to_dict() for c_ in CARDS], indent=2))
            return
        print_table(None, [("card", "left"), ("name", "left"), ("GB/s", "right"), ("GiB", "right"), ("W", "right"),
                           ("FP16 TFLOPS", "right"), ("INT8 TOPS", "right")],
                    [[c_.id, c_.name, fmt_num(c_.memory_bandwidth_gb_s), fmt_num(c_.memory_gib),
                      fmt_num(c_.board_power_w), fmt_num(c_.matrix_fp16_tflops), fmt_num(c_.matrix_int8_tops)]
                     for c_ in CARDS])
        print("sources:")
        for c_ in CARDS:
            print(f"  {c_.id}: {'; '.join(c_.sources)}" + (f" ({c_.notes})" if c_.notes else ""))
        return
    runs_dir = _project().runs_dir
    remote, entry = _host(host, inventory)
    measured = store.read_host_ceilings(runs_dir, host)
    if measure:
        from servedeck.deploy.ops import status
        from servedeck.host.ceilings import measure_ceilings
        from servedeck.runs.records import MeasuredCeilings
        running = status(remote, entry).get("container") or {}
        if not running.get("running"):
            raise ServedeckError(f"nothing is running on host {host}: the measurement runs in the server's container",
                                 hint=f"servedeck deploy --host {host} --profile NAME")
        doc = measure_ceilings(remote, running["name"], buffer_mib=int(buffer_mib), repeats=int(repeats))
        measured = MeasuredCeilings(**doc, host=host, container=running["name"], measured_at=store.utcnow())
        path = store.write_host_ceilings(runs_dir, measured)
        rates = ", ".join(f"{d} {fmt_num(r)}" for d, r in (measured.matrix_tflops_by_dtype or {}).items())
        print(f"measured on {host} ({measured.device}): read {fmt_num(measured.memory_bandwidth_gb_s)} GB/s, "
              f"matmul {rates or '–'} TFLOPS (the ceiling: {measured.matrix_dtype or '–'}); kept in {path}",
              file=sys.stderr)
    from servedeck.bench.limits import deployed_service, device_of, matrix_rate_text
    from servedeck.runs.history import newest_served
    try:
        newest = newest_served(runs_dir, host)
        profile, startup = store.read(newest, store.PROFILE_RESOLVED), store.read(newest, store.STARTUP)
        device = device_of(profile.root if profile is not None else {}, deployed_service(newest, _catalog()))
        total = startup.total_memory_gib if startup is not None else None
    except ServedeckError:  # no run of this host yet: the inventory and the measurement decide
        device, total = None, None
    ceil = resolve_ceilings(entry, host=host, device=device, total_memory_gib=total,
                            measured=measured.model_dump(mode="json") if measured else None)
    if json_:
        print(json.dumps({"ceilings": ceil.model_dump(mode="json"),
                          "measured": measured.model_dump(mode="json") if measured else None}, indent=2))
        return
    print(f"{host}: card {ceil.card_name or '–'} ({ceil.card_source or 'unknown'})")
    print(f"  memory bandwidth {fmt_num(ceil.memory_bandwidth_gb_s)} GB/s ({ceil.bandwidth_source or '–'})")
    print(f"  matrix rate {matrix_rate_text(ceil) or '–'} ({ceil.matrix_source or '–'})")
    for note in ceil.notes:
        print(f"  note: {note}")


@task(help={"run": "run id / sequence / latest[:PROFILE] / newest[:PROFILE]", "inventory": _INV})
@_cli
def roofline(c, run, inventory=None):
    """Recompute a benchmarked run's roofline with the ceilings that apply now (card set, host measured)."""
    from servedeck.bench.limits import format_roofline, recompute_roofline
    from servedeck.model.inventory import get_host, load_inventory
    from servedeck.runs.history import resolve_run
    from servedeck.runs.store import read_meta
    runs_dir = _project().runs_dir
    path = resolve_run(runs_dir, run)
    meta = read_meta(path)
    inv_path = Path(inventory) if inventory else _project().inventory_path
    entry = get_host(load_inventory(inv_path), meta.host, inv_path)
    print("\n".join(format_roofline(recompute_roofline(path, entry, runs_dir=runs_dir, catalog=_catalog()))))


@task(help={"hypothesis": "hypothesis text, or @FILE", "verdict": "your verdict text, or @FILE",
            "allow_multi": "compare although more than one variable changed",
            "aa": "A/A: compare two runs of the same configuration and store the noise floor",
            "margin": "practical-equivalence margin, relative (default 0.03 = ±3 %)",
            "alpha": "family-wise error rate over the report's metrics (default 0.05)",
            "interleave": "RUN_A/RUN_B are profiles: deploy them alternately on --host and benchmark each",
            "host": "with --interleave: inventory host", "inventory": _INV,
            "repetitions": "with --interleave: deployments per arm (default 2; with sequential looks, the "
                           "most: default 4)",
            "sequential": "with --interleave: stop once every metric is decided (looks after each pair of "
                          "deployments; --no-sequential deploys every repetition; under --workload every "
                          "repetition runs)",
            "max_minutes": "with --interleave: the time budget in minutes",
            "order": "with --interleave: abba (default) or random",
            "requests": "with --interleave: requests per phase and deployment (default 3), or per load level "
                        "with --workload (default: the workload's)",
            "workload": "with --interleave: run this workload under load at every deployment (invoke workloads)",
            "load": "with --interleave --workload: the load schedule every deployment runs (default: the workload's)",
            "slo": "judge the levels and capacity against this SLO: ttft_s=S,tpot_s=S,e2e_s=S,p=PCT "
                   "(default: the workload's, or what the runs recorded)",
            "out": "write the Markdown report (and its chart beside it)",
            "ppl_margin": "quality: perplexity rise tolerated, relative (default 0.01 = +1 %)",
            "min_agreement": "quality: next-token agreement with the reference below this gates (default 0.95)",
            "min_generation_agreement": "quality: greedy generation agreement below this gates (default 0.5)",
            "task_margin": "quality: lm-eval score margin, absolute (default 0.01)",
            "quality_reference": "quality: the reference arm, A (default) or B; the other arm is gated"})
@_cli
def ab(c, run_a, run_b, allow_multi=False, out=None, hypothesis=None, verdict=None, aa=False,
       margin=None, alpha=None, interleave=False, host=None, inventory=None, repetitions=None,
       order="abba", requests=None, sequential=True, max_minutes=None, workload=None, load=None, slo=None,
       ppl_margin=None, min_agreement=None, min_generation_agreement=None, task_margin=None,
       quality_reference=None):
    """Compare two runs (A/B or --aa) with verdicts the samples can carry, or --interleave two profiles."""
    from servedeck.ab.experiment import compare_runs, default_report_path
    from servedeck.ab.report import findings
    from servedeck.ab.stats import ALPHA, DEFAULT_MARGIN
    from servedeck.runs.history import resolve_run
    runs_dir = _project().runs_dir
    settings = dict(alpha=float(alpha) if alpha is not None else ALPHA,
                    margin=float(margin) if margin is not None else DEFAULT_MARGIN)
    settings["quality"] = _gate_settings(ppl_margin, min_agreement, min_generation_agreement, task_margin,
                                         quality_reference, settings["alpha"])

    def text(v):
        return Path(v[1:]).read_text() if v and v.startswith("@") else v
    interleaving = None
    under_load = None
    if workload or load:
        if not interleave:
            raise ServedeckError("--workload and --load run new deployments: give --interleave (to compare "
                                 "recorded runs under load, name the runs; --slo re-judges them)")
        from servedeck.bench.workload import load_workload
        loaded = load_workload(workload or "chat", _project().root)
        if loaded.kind == "single-stream":
            raise ServedeckError(f"workload {loaded.name!r} is a single stream; drop --workload for it",
                                 field="--workload")
        under_load = _load_settings(loaded, load, slo, False, None, None, requests)
    if interleave:
        # sequential looks judge the single-stream benchmark; under load every repetition runs
        sequential_ = sequential and under_load is None
        reps = int(repetitions) if repetitions is not None else (4 if sequential_ else 2)
        runs_a, runs_b, interleaving = _interleave(run_a, run_b, host, inventory, reps, order,
                                                   int(requests) if requests and not under_load else 3,
                                                   {k: settings[k] for k in ("alpha", "margin")}
                                                   if sequential_ else None,
                                                   float(max_minutes) * 60 if max_minutes else None,
                                                   under_load)
    else:
        runs_a, runs_b = [resolve_run(runs_dir, run_a)], [resolve_run(runs_dir, run_b)]
    if slo:
        from servedeck.bench.slo import parse_slo
        settings["slo"] = parse_slo(slo)
    try:
        result = compare_runs(runs_dir, runs_a, runs_b, aa=aa, allow_multi=allow_multi,
                              out=Path(out) if out else (default_report_path(runs_dir, runs_a[0], runs_b[0])
                                                         if interleave else None),
                              hypothesis=text(hypothesis), verdict=text(verdict),
                              interleaving=interleaving, project_profiles=_project_profiles(), **settings)
    except ValueError as exc:
        raise ServedeckError(str(exc), hint="--alpha between 0 and 1, --margin between 0 and 1") from None
    print(f"A = {', '.join(r.name for r in result.runs_a)}\nB = {', '.join(r.name for r in result.runs_b)}")
    if aa:
        print("A/A: same configuration (noise floor)")
    for var in result.diff.differences:
        print(f"  changed: {var.describe()}")
    for sentence in findings(result.comparison, result.noise):
        print(f"  - {sentence}")
    _ab_kv([*result.runs_a, *result.runs_b])
    if result.comparison.load is not None and result.comparison.load.capacity is not None:
        cap = result.comparison.load.capacity
        print(f"  capacity: {cap.verdict}: {cap.reason}")
    if interleaving is not None:
        print("  order: " + " ".join(f"{p.arm}:{p.run_id}" for p in interleaving.positions))
        for t in interleaving.trends:
            print(f"  trend {t.metric}: {t.reading}")
    if result.comparison.sequential is not None:
        from servedeck.ab.sequential import describe_stop
        print(f"  {describe_stop(result.comparison.sequential)}")
    if result.draft is not None and not verdict:
        print(f"verdict (drafted): {result.draft.verdict.text}")
    if result.noise_path:
        print(f"noise floor stored: {result.noise_path}")
    if result.report:
        print(f"report: {result.report}" + (f" (chart {result.chart})" if result.chart else ""))
    if result.experiment:
        print(f"experiment record: {result.experiment}")


def _gate_settings(ppl_margin, min_agreement, min_generation_agreement, task_margin, reference, alpha):
    """The quality gate's settings from `invoke ab`'s options.

    Raises:
        ServedeckError: a value out of range (the option named, with its range).
    """
    from pydantic import ValidationError

    from servedeck.ab.quality import QualityGateSettings
    given = {"ppl_margin": ppl_margin, "min_agreement": min_agreement,
             "min_generation_agreement": min_generation_agreement, "task_margin": task_margin}
    values = {}
    for name, value in given.items():
        if value is None:
            continue
        try:
            values[name] = float(value)
        except ValueError:
            raise ServedeckError(f"--{name.replace('_', '-')} {value!r} is not a number",
                                 field=f"--{name.replace('_', '-')}") from None
    if reference is not None:
        values["reference"] = str(reference).strip().upper()
    try:
        return QualityGateSettings(alpha=alpha, **values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0])
        raise ServedeckError(f"--{name.replace('_', '-')}: {err['msg']}", field=f"--{name.replace('_', '-')}",
                             hint="margins and agreements are fractions (0.01 = 1 %); "
                                  "--quality-reference is A or B") from None


def _project_profiles() -> list[dict]:
    """The project's resolved profiles (for the drafted recommendations); [] when one does not
    load (the comparison does not depend on them)."""
    try:
        store = _store()
        return [store.load(n).profile.model_dump(mode="json") for n in store.names()]
    except ServedeckError:
        return []


def _interleave(profile_a, profile_b, host, inventory, repetitions, order, requests, sequential=None,
                max_seconds=None, under_load=None, sizes=(None, None)):
    """Deploy and benchmark two profiles alternately on one host (servedeck.ab.interleave);
    ``sequential`` (``{"alpha", "margin"}``): stop once every metric is decided; with
    ``under_load`` (``_load_settings``) every deployment runs that workload's load schedule;
    ``sizes``: the bench's (prompt tokens, output tokens), None: sized to the server."""
    from servedeck.ab.interleave import run_interleaved
    from servedeck.bench.client import Workload
    from servedeck.bench.record import bench_deployed
    from servedeck.deploy.apply import deploy as run_deploy
    from servedeck.deploy.console import ConsoleReporter
    from servedeck.deploy.plan import DeployOptions
    if not host:
        raise ServedeckError("--interleave needs --host NAME")
    remote, entry = _host(host, inventory)
    reporter = ConsoleReporter()

    def deploy_fn(name):
        res = run_deploy(_project(), remote, entry, _load(name), DeployOptions(), reporter)
        return res.run.path

    def bench_fn(run_dir):
        if under_load is not None:
            from servedeck.bench.record import load_deployed
            w, profile, slo_, _ = under_load
            load_deployed(run_dir, remote, entry, w, profile=profile, slo=slo_)
            return
        from servedeck.bench.sizing import max_model_len_of, size_workload
        prompt, out = size_workload(max_model_len_of(run_dir), *sizes)
        bench_deployed(run_dir, remote, entry, Workload(prompt_tokens=prompt, max_tokens=out,
                                                        repetitions=requests), runs_dir=_project().runs_dir)
    go_on = monitor = None
    if sequential is not None:
        from servedeck.ab.sequential import SequentialDesign, interleave_monitor
        go_on, monitor = interleave_monitor(SequentialDesign(
            **sequential, max_requests_a=repetitions * requests, max_requests_b=repetitions * requests,
            max_seconds=max_seconds))
    from servedeck.deploy.power_series import power_series, varies_power_cap
    capped = varies_power_cap([_load(profile_a).profile, _load(profile_b).profile])
    try:
        with power_series([(remote, entry)], series=f"ab --interleave {profile_a} {profile_b}", enabled=capped,
                          report=lambda line: print(line, file=sys.stderr)):
            out = run_interleaved({"A": profile_a, "B": profile_b}, order, repetitions, deploy_fn=deploy_fn,
                                  bench_fn=bench_fn, host=host, go_on=go_on,
                                  on_step=lambda i, arm, name: reporter.phase("interleave", f"#{i} arm {arm}: {name}"))
    except KeyboardInterrupt:
        if monitor is not None:
            monitor.interrupted()
        raise
    if monitor is not None:
        from servedeck.ab.sequential import describe_stop
        reporter.info(describe_stop(monitor.record))
    return out


@task(help={"profile": "the profile you would deploy (arm B)", "against": "the recorded run (arm A)",
            "kv_threshold": "warn when max concurrency changes by more than this many percent (default 10)"})
@_cli
def plan(c, profile, against, kv_threshold=10.0):
    """Before deploying: would PROFILE against RUN be a single-variable experiment? And its KV pool."""
    from servedeck.ab.compare import guard, plan_against
    from servedeck.runs.history import resolve_run
    rendered = _render(profile)
    views = {"profile": rendered.profile.model_dump(mode="json"),
             "effective": rendered.service.settings(),
             "compose_text": rendered.compose_text, "workload": None, "facts": None}
    against_dir = resolve_run(_project().runs_dir, against)
    diff = guard(plan_against(views, against_dir))
    print(f"single variable: {diff.single_variable.describe()}")
    _plan_kv(rendered, against_dir, float(kv_threshold))


def _plan_kv(rendered, against_dir: Path, threshold: float) -> None:
    """KV prediction lines of `invoke plan` (servedeck.runs.kv_history.plan_kv); an error exits 2."""
    from servedeck.findings import has_errors
    from servedeck.runs.kv_history import plan_kv
    _, findings = plan_kv(rendered.profile, rendered.service, _project().runs_dir, against_dir,
                          change_threshold_pct=threshold)
    for f in findings:
        print(f.render())
    if has_errors(findings):
        raise ServedeckError("the KV prediction says vLLM would refuse to start this profile",
                             field="engine.max_model_len")


def _ab_kv(run_dirs) -> None:
    """`invoke ab`: the KV prediction made before each deploy beside what the server logged."""
    from servedeck.runs.kv_history import format_kv, read_kv
    for d in run_dirs:
        line = format_kv(read_kv(d))
        if line:
            print(f"  KV {d.name}: {line}")


@task(name="next", help={"profile": "the profile to improve (the baseline of the experiments)",
                         "host": "inventory host the experiments would run on", "inventory": _INV,
                         "only": "consider only these knobs (id or profile path; repeat)",
                         "margin": "practical-equivalence margin, relative (default 0.03)",
                         "max_requests": "the sample budget per arm (default 24)",
                         "json": "print JSON"}, iterable=["only"])
@_cli
def next_(c, profile, host, inventory=None, only=None, margin=None, max_requests=None, json_=False):
    """Rank the single-variable experiments worth running next on a host, with expected gain, cost and why."""
    plan = _next_plan(profile, host, inventory, only or None, margin, max_requests)
    if json_:
        print(plan.model_dump_json(indent=2))
        return
    from servedeck.ab.next import format_plan
    print(format_plan(plan))


def _next_plan(profile, host, inventory, only, margin, max_requests):
    """servedeck.ab.next.propose for a profile of the project on an inventory host."""
    from servedeck.ab.next import profile_alternatives, propose
    from servedeck.ab.sequential import DEFAULT_MAX_REQUESTS
    from servedeck.ab.stats import DEFAULT_MARGIN
    from servedeck.runs import store as run_store
    from servedeck.runs.history import list_runs
    _host(host, inventory)  # the host must exist
    rendered = _render(profile)
    runs_dir = _project().runs_dir
    baseline = None
    if runs_dir.is_dir():
        rows = [r for r in list_runs(runs_dir, profile=profile) if r.host == host and r.comparable]
        baseline = rows[-1].path if rows else None
    return propose(rendered.profile.model_dump(mode="json"), host, runs_dir,
                   effective=rendered.service.settings(),
                   facts=run_store.read(baseline, run_store.FACTS) if baseline else None, baseline=baseline,
                   margin=float(margin) if margin is not None else DEFAULT_MARGIN,
                   max_requests=int(max_requests) if max_requests is not None else DEFAULT_MAX_REQUESTS,
                   only=list(only) if only else None,
                   alternatives=profile_alternatives(_project_profiles(),
                                                     like=rendered.profile.model_dump(mode="json")))


@task(help={"base": "the profile to start from", "host": "inventory host to tune on", "inventory": _INV,
            "vary": "KEY=V1,V2[,...]: a profile path and its ladder of values, in order (repeat per variable)",
            "name": "tune name (default: derived from base, host and --vary; the same command resumes)",
            "max_experiments": "the experiment budget (default 8)",
            "max_minutes": "the time budget in minutes",
            "keep_winner": "leave the best setting serving (default: restore what the host served before)",
            "metric": "the objective, 'phase metric' (default 'warm decode_tok_s')",
            "margin": "practical-equivalence margin, relative (default 0.03)",
            "prompt_tokens": "bench prompt length", "max_tokens": "bench output tokens",
            "max_requests": "a variant's sample budget, requests per phase (default 24)",
            "interleave": "N: deploy the best and each variant alternately, A B B A, up to N times each (the "
                          "sample budget spread over them; stops once decided): drift spreads over both arms"},
      iterable=["vary"], auto_shortflags=False)
@_cli
def tune(c, base, host, vary=None, inventory=None, name=None, max_experiments=8, max_minutes=None,
         keep_winner=False, metric=None, margin=None, prompt_tokens=None, max_tokens=None, max_requests=None,
         interleave=0):
    """Tune a profile on a host: propose, deploy, bench, judge, keep or revert, until a budget or the noise floor stops it (resumable)."""  # noqa: E501 - invoke lists the first line
    from servedeck.ab.tune import DEFAULT_METRIC, TuneSpec, default_name, run_tune, start, summary
    from servedeck.fleet.sweep import parse_vary
    variables = parse_vary(vary or [])
    spec = TuneSpec(name=name or default_name(base, host, variables), base=base, host=host, variables=variables,
                    metric=metric or DEFAULT_METRIC, max_experiments=int(max_experiments),
                    max_seconds=float(max_minutes) * 60 if max_minutes else None,
                    **{"finally": "keep-winner" if keep_winner else "restore"},
                    **({"margin": float(margin)} if margin is not None else {}),
                    prompt_tokens=int(prompt_tokens) if prompt_tokens else None,
                    max_tokens=int(max_tokens) if max_tokens else None,
                    **({"max_requests": int(max_requests)} if max_requests is not None else {}),
                    interleave=int(interleave or 0))
    ops = _tune_ops(spec, inventory)
    runs_dir = _project().runs_dir
    state = start(runs_dir, spec, ops.profile_doc(base)["profile"], ops)
    try:
        state = run_tune(runs_dir, state, ops)
    except KeyboardInterrupt:
        print(f"interrupted: tune {spec.name} stopped; run the same command again to resume", file=sys.stderr)
        raise Exit(code=130) from None
    print(summary(state))


def _tune_ops(spec, inventory):
    """servedeck.ab.tune.TuneOps bound to this project's stages and the inventory host."""
    from servedeck.ab.compare import plan_against
    from servedeck.ab.sequential import bench_against, requests_per_phase
    from servedeck.ab.tune import TuneOps
    from servedeck.bench.client import Workload
    from servedeck.bench.record import bench_deployed
    from servedeck.bench.sizing import max_model_len_of, size_workload
    from servedeck.deploy.apply import deploy as run_deploy
    from servedeck.deploy.console import ConsoleReporter
    from servedeck.deploy.ops import rollback, status
    from servedeck.deploy.plan import DeployOptions, render
    from servedeck.fleet.sweep import write_arm_profile
    from servedeck.model.profile import ProfileStore
    from servedeck.runs import store as run_store
    from servedeck.runs.history import list_runs
    project = _project()
    remote, entry = _host(spec.host, inventory)
    reporter = ConsoleReporter()

    def rendered(name):  # as the deploy renders it: placed on the host (its container_name, host_port)
        return render(entry.place(ProfileStore(project.profiles_dir).load(name).profile), _catalog(), project,
                      entry.workdir)

    def profile_doc(name):
        r = rendered(name)
        return {"profile": r.profile.model_dump(mode="json"), "effective": r.service.settings(),
                "compose_text": r.compose_text}

    def deploy(name):
        return run_deploy(project, remote, entry, ProfileStore(project.profiles_dir).load(name), DeployOptions(),
                          reporter).run.path

    def bench(run_dir, against):
        prompt, out = size_workload(max_model_len_of(run_dir), spec.prompt_tokens, spec.max_tokens)
        if against is None:
            bench_deployed(run_dir, remote, entry, Workload(prompt_tokens=prompt, max_tokens=out,
                                                            repetitions=spec.baseline_requests))
            return
        more, monitor = bench_against(against, run_dir, max_requests=spec.max_requests, batch=spec.batch,
                                      alpha=spec.alpha, margin=spec.margin)
        bench_deployed(run_dir, remote, entry, Workload(prompt_tokens=prompt, max_tokens=out,
                                                        repetitions=min(3, spec.max_requests)), more=more)

    def serving():
        st = status(remote, entry)
        last = st.get("last_deploy") or {}
        if not st.get("serving"):
            return None
        return {"revision": last.get("revision"), "compose_sha256": st.get("compose_sha256"),
                "run_id": last.get("run_id")}

    def restore(original):
        rollback(remote, entry, to=original.get("revision"), project=project, reporter=reporter)

    def reuse(name):
        doc = profile_doc(name)
        views = {"profile": doc["profile"], "effective": doc["effective"], "compose_text": doc["compose_text"],
                 "workload": None, "facts": None}
        if not project.runs_dir.is_dir():
            return None
        for row in reversed([r for r in list_runs(project.runs_dir) if r.host == spec.host and r.comparable][-20:]):
            try:
                same = plan_against(views, row.path).is_identical
            except ServedeckError:
                continue
            if same and requests_per_phase(run_store.read(row.path, run_store.BENCH_SAMPLES)) >= spec.baseline_requests:
                return row.path
        return None

    def interleaved(profile_a, profile_b, deployments):
        per_deployment = max(spec.batch, -(-spec.max_requests // deployments))  # the sample budget, spread
        return _interleave(profile_a, profile_b, spec.host, inventory, deployments, "abba", per_deployment,
                           sequential={"alpha": spec.alpha, "margin": spec.margin},
                           sizes=(spec.prompt_tokens, spec.max_tokens))

    return TuneOps(write_profile=lambda b, o, n: write_arm_profile(project, b, o, f"tune {n}"), deploy=deploy,
                   bench=bench, serving=serving, restore=restore, profile_doc=profile_doc, reuse=reuse,
                   say=lambda line: print(f"[tune] {line}", file=sys.stderr), interleaved=interleaved)


@task(help={"profile": "the profile whose series to show (its parents and variants come along)",
            "host": "only runs on this host", "out": "write the markdown here instead of printing it",
            "mlflow": "also export the series to this MLflow tracking URI (the mlflow extra)",
            "experiment": "the MLflow experiment name (default 'servedeck PROFILE')"})
@_cli
def series(c, profile, host=None, out=None, mlflow=None, experiment=None):
    """A profile's runs and experiments in order (run #1 ... #N), each with its variable, verdict and cost."""
    from servedeck.ab.series import build_series, export_mlflow, render_series
    runs_dir = _project().runs_dir
    doc = build_series(runs_dir, profile, host=host)
    text = render_series(doc)
    if out:
        _write_out(out, text)
    else:
        sys.stdout.write(text)
    if mlflow:
        exported = export_mlflow(doc, runs_dir, mlflow, experiment=experiment)
        print(f"exported {len(exported)} MLflow runs to {mlflow}", file=sys.stderr)


# ----------------------------------------------------------------------------- program

USER_TASKS = (render, check, diff, profiles, schema, import_, validate, deploy, status, logs,
              rollback, down, hosts, sweep, startup_facts, image_facts, bench, workloads, runs, show, ab, plan,
              ceilings, roofline, next_, tune, series)


def namespace() -> Collection:
    """A new collection of the user-facing tasks (``tasks.py`` adds development tasks to it)."""
    return Collection(*USER_TASKS)


ns = namespace()


class ServedeckProgram(Program):
    """invoke's :class:`~invoke.Program` with servedeck's tasks and a global ``--project DIR``.

    ``--project`` is exported as ``$SERVEDECK_PROJECT``, so that it reaches every task (and
    subprocesses) through the one way :meth:`Project.find` knows.
    """

    def core_args(self) -> list[Argument]:
        return [*super().core_args(),
                Argument(names=("project",),
                         help="the profiles repository (profiles/, deploy/, runs/); default: "
                              "$SERVEDECK_PROJECT, else found from the current directory, "
                              "else servedeck's embedded default project")]

    #: invoke's core options that mean something for servedeck; the others (shell-command
    #: settings such as --pty, --echo, --hide, --dry, sudo, config files) still parse but are
    #: left out of ``servedeck --help``
    SHOWN_CORE_OPTIONS = ("--complete", "--print-completion-script", "--project", "--debug", "--help",
                          "--list", "--list-format", "--version")

    def print_help(self) -> None:
        """invoke's core help (usage, core options, tasks) with only :attr:`SHOWN_CORE_OPTIONS`."""
        print(f"Usage: {self.binary} [--core-opts] <subcommand> [--subcommand-opts] ...\n")
        print("Core options:\n")
        shown = [(flags, text) for flags, text in self.initial_context.help_tuples()
                 if set(re.findall(r"--[a-z-]+", flags)) & set(self.SHOWN_CORE_OPTIONS)]
        self.print_columns(shown)
        self.list_tasks()

    def parse_core(self, argv: list[str] | None) -> None:
        super().parse_core(argv)
        project = self.args.project.value
        if project:
            if not Path(project).is_dir():
                raise Exit(f"error: --project {project}: not a directory", code=2)
            os.environ[PROJECT_ENV] = str(Path(project).resolve())
            current_project.cache_clear()


program = ServedeckProgram(namespace=ns, version=__version__, name="servedeck", binary="servedeck")


def main() -> None:
    """Entry point of the ``servedeck`` console script."""
    global PROGRAM
    PROGRAM = "servedeck"
    program.run()


if __name__ == "__main__":
    main()
