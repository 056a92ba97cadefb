#!/usr/bin/env python3
"""What does a deploy cost the user beyond the server's own start-up, and how late is readiness
noticed?

Runs ``invoke deploy`` as the user does, as a whole process (Python start-up, imports, render,
check, SSH, Docker, the wait, and the run record written after ready), over real SSH + Docker
to the loopback card host of ``scripts/test-services``, with the vLLM **stand-in** image
(``build_standin_image()``): it replays a real vLLM 0.32 startup log paced to
``STANDIN_STARTUP_S`` seconds, then binds its port and logs ``Application startup
complete.``, so its start-up length is known and servedeck's own share can be told apart.

Set-up (all removed at the end, also on Ctrl-C):

* a temporary copy of the project (profiles, templates, schema, image catalog) with a variant
  ``bench-overhead`` of ``batch-8192``: ``container.port`` / ``host_port`` 9950, its own
  ``container_name`` (``sd-bench-overhead``), ``restart: "no"`` and ``STANDIN_STARTUP_S``;
* a host working directory ``/srv/servedeck-test/bench-<random>`` (weights dir with a
  ``config.json``, ``cache/``) and an inventory file with host ``bench`` on port 9950.

The first deploy (onto an empty working directory, and adding the stand-in's digest to the
catalog) is a warm-up and not counted; the second, traced by ``benchmarks/calltrace``, records the
modules the deploy has imported when its switch starts (its import set) and is not counted either;
the next ``-n`` deploys each replace the running deployment (stopping it, as a real A/B redeploy
does). Printed per deploy:

* ``wall``: wall time of the whole ``invoke deploy`` process,
* ``server``: container start (docker's ``State.StartedAt``) to readiness noticed (the run
  record's ``container_start_to_ready_s``),
* ``overhead``: ``wall - server``: what the user waits for beyond the server itself,
* ``listen``: container start to the stand-in's ``Application startup complete.`` line (its
  docker log timestamp, written right after the port was bound),
* ``late``: readiness noticed minus that log timestamp.

Peers measured in the same run, printed beside the overhead: ``invoke --list`` in the same
project (the CLI's own start-up); one SSH session to the host (``true`` in a session of its
own, :meth:`~servedeck.host.ssh.SshTransport.run_alone`: what the host's login shell costs a
new session; a deploy opens one while it imports and runs its commands in it) beside one
command in that session; and ``docker compose up -d --force-recreate`` of the deployed file
run over SSH, Compose started the way a deploy's switch starts it
(:data:`~servedeck.host.facts.COMPOSE_SH`: compose replacing the running container by itself).
servedeck's own share is the overhead minus the medians of two peers (the CLI start-up and
compose's replace), the part that servedeck's code decides. The floor (:data:`FLOOR_PY`) is a
process that does only what a deploy cannot leave out (the CLI's start-up, an SSH session, one
round trip, compose's replace, one round trip) and none of servedeck's work, timed twice: with
its session opened at the process start, and once invoke has loaded its tasks. The import set
(:data:`IMPORTS_PY`): the CLI's start-up as a process with and without the deploy's import set
imported after it (none of its code run), in 7 pairs; the median difference is what the import
set alone costs, and the overhead beyond the floor and it is what servedeck's work costs
(render, check, calibration, the run record, the work after ready). A timeline gives the median time
from the process start to the first output line of each phase and to the exit.

The package is byte-compiled first, as ``pip install`` leaves it. By default (``--python
wheel``) the processes run on the interpreter of a plain virtualenv holding the wheel built from
this checkout and its dependencies (:func:`devtools.wheelenv.wheel_venv`), as a user installs
servedeck: no ``.pth`` start-up hooks of the base interpreter's site-packages (this machine's has
two: an editable-install finder and a CA-bundle hook, ~50 ms of every start) and ``invoke -r``
imports the checkout's byte-compiled sources as before. ``--python current`` runs them on this
process's interpreter (the development environment).

Targets (printed with pass/miss, nothing asserted): overhead at most 1.0 s, readiness noticed
within 0.5 s of the server serving.

Usage::

    bash scripts/test-services up
    python benchmarks/deploy_overhead.py [-n 5] [--startup-s 3] [--port 9950]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import byte_compile  # noqa: E402  (benchmarks/common.py)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools import imagebuild  # noqa: E402
from servedeck.host.remote import RemoteHost, SshTarget  # noqa: E402
from servedeck.host.facts import COMPOSE_SH  # noqa: E402

SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
READY_LINE = "Application startup complete."
CONTAINER_NAME = "sd-bench-overhead"
TARGET_OVERHEAD_S = 1.0
TARGET_LATE_S = 0.5
PYTHON = sys.executable
"""The interpreter of the measured processes (``--python``)."""


def docker_time(value: str) -> float:
    """Epoch seconds of an RFC 3339 timestamp with up to nanoseconds (docker's format)."""
    head, _, frac = value.rstrip("Z").partition(".")
    base = dt.datetime.fromisoformat(head).replace(tzinfo=dt.timezone.utc).timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def listen_time(container_id: str) -> float | None:
    """Docker's receive time of the stand-in's ``Application startup complete.`` line."""
    out = subprocess.run(["docker", "logs", "-t", container_id], capture_output=True, text=True)
    for line in (out.stdout + out.stderr).splitlines():
        if READY_LINE in line:
            return docker_time(line.split(" ", 1)[0])
    return None


def make_project(tmp: Path, port: int, startup_s: float) -> None:
    for name in ("profiles", "templates", "schema"):
        shutil.copytree(ROOT / name, tmp / name)
    (tmp / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "images.yaml", tmp / "deploy" / "images.yaml")
    (tmp / "profiles" / "bench-overhead.yaml").write_text(
        "extends: batch-8192\n"
        "container:\n"
        f"  container_name: {CONTAINER_NAME}\n"
        "  restart: \"no\"\n"
        f"  port: {port}\n"
        f"  host_port: {port}\n"
        "  environment:\n"
        "    ZE_FLAT_DEVICE_HIERARCHY: COMPOSITE\n"
        "    HF_HOME: /root/.cache/huggingface\n"
        "    HUGGINGFACE_HUB_CACHE: /root/.cache/huggingface/hub\n"
        f"    STANDIN_STARTUP_S: \"{startup_s:g}\"\n")


PHASES = ("preflight", "render", "pull", "switch", "wait", "ready")
"""Phase lines of a deploy's output (servedeck.deploy.console), timed as they arrive."""


def invoke(project: Path, *args: str, cprofile: Path | None = None, trace: Path | None = None
           ) -> tuple[float, subprocess.CompletedProcess, dict[str, float]]:
    """Run ``python -m invoke -r ROOT <args>`` in ``project`` (under cProfile, writing
    ``cprofile``, when given; with its call timeline written to ``trace`` by
    ``benchmarks/calltrace``, when given); return (wall seconds, process, seconds from the
    process start to the first output line of each phase in :data:`PHASES`)."""
    import os
    import threading
    env = {**os.environ, "SERVEDECK_PROJECT": str(project)}
    if trace:
        env["SD_CALLTRACE"] = str(trace)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent / "calltrace"),
                                                          env.get("PYTHONPATH")]))
    prof = ["-m", "cProfile", "-o", str(cprofile)] if cprofile else []
    t = time.perf_counter()
    proc = subprocess.Popen([PYTHON, *prof, "-m", "invoke", "-r", str(ROOT), *args], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    out, phases = [], {}
    for line in proc.stdout:
        words = line.split()
        if words and words[0] in PHASES:
            phases.setdefault(words[0], time.perf_counter() - t)
        out.append(line)
    proc.wait()
    wall = time.perf_counter() - t
    reader.join()
    return wall, subprocess.CompletedProcess(proc.args, proc.returncode, "".join(out), "".join(err)), phases


FLOOR_PY = r"""
import subprocess, sys
when, root, script, ssh = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
if when == "start":
    session = subprocess.Popen(ssh, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

def call(command):
    session.stdin.write(command.encode() + b"; echo sd-floor-done\n")
    session.stdin.flush()
    while (line := session.stdout.readline()) != b"sd-floor-done\n":
        if not line:
            sys.exit("the session ended early")

import contextlib, io
from invoke.main import program  # the CLI's start-up beside the login shell, as a deploy has it
with contextlib.redirect_stdout(io.StringIO()):
    program.run(["invoke", "-r", root, "--list"], exit=False)
if when == "tasks":
    session = subprocess.Popen(ssh, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
call(script)                                   # the login, then one round trip: the preflight
call("(sd_compose up -d --force-recreate --pull never --no-build) </dev/null >/dev/null 2>&1")  # the switch
call("true")                                   # one round trip: the finish
session.stdin.close()
session.wait()
"""
"""The least a deploy can do, as a process of its own (``floor`` peer): the CLI's start-up
(``invoke --list``) and an SSH session, one round trip once its login shell has run (where a
deploy runs its preflight), compose's replace in that session (the switch), one more round trip
(the finish). No servedeck code runs, nothing is rendered, checked or recorded, and the server's
start-up is not waited for: its wall time is what a deploy that did nothing of its own would
still cost beyond the server's start. First argument ``start``: the session is opened at the
process start, beside the CLI's start-up; ``tasks``: once invoke has loaded its tasks, the
earliest point at which ``invoke deploy`` runs any of servedeck's code."""


IMPORTS_PY = r"""
import contextlib, importlib, io, sys
from invoke.main import program
with contextlib.redirect_stdout(io.StringIO()):
    program.run(["invoke", "-r", sys.argv[1], "--list"], exit=False)
names = open(sys.argv[2]).read().split() if len(sys.argv) > 2 else []
for name in names:
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except Exception:  # a name only the traced process had (a C module's alias)
            pass
"""
"""The CLI's start-up (``invoke --list``) as a process, then, with a second argument, the modules
named in that file (one per line, in that order: a deploy's import set) with none of their code
run. Timed with and without the file, in pairs: the difference is what the import set alone costs
a deploy's process (``import set`` peer)."""


HOST_COMMANDS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")
"""The loopback host's processes by name (beside its sshd, found by its configuration directory)."""


def host_processes() -> list[int]:
    """The PIDs of the loopback card host of ``scripts/test-services`` on this machine: the Docker
    engine (``dockerd``, ``containerd``, the shims and the containers under them) and the sshd
    whose configuration lives in ``/var/lib/servedeck-test/sshd`` with its sessions, each with all
    of its descendants."""
    parent, roots = {}, set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        pid = int(entry.name)
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        parent[pid] = int(rest[1])
        if comm in HOST_COMMANDS or "/var/lib/servedeck-test/sshd/" in cmdline:
            roots.add(pid)
    found = set(roots)
    for pid in parent:
        chain, p = [], pid
        while p in parent and p not in found and p > 1:
            chain.append(p)
            p = parent[p]
        if p in found:
            found.update(chain)
    return sorted(found)


def pin(pids: list[int], cpus: set[int]) -> dict[int, set[int]]:
    """Every thread of ``pids`` onto ``cpus``; returns the masks they had (by thread id), for
    :func:`unpin`. A process or thread gone meanwhile is skipped."""
    before = {}
    for pid in pids:
        try:
            tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            try:
                before[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
    return before


def unpin(before: dict[int, set[int]]) -> None:
    for tid, cpus in before.items():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass


def latest_run(project: Path) -> dict:
    import json
    runs = sorted(p for p in (project / "runs").iterdir() if (p / "run.json").exists())
    return json.loads((runs[-1] / "run.json").read_text())


def container_info(name: str) -> tuple[str, float] | None:
    out = subprocess.run(["docker", "inspect", "--format", "{{.Id}} {{.State.StartedAt}}", name],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    cid, started = out.stdout.split()
    return cid, docker_time(started)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5, help="counted deploys (after one warm-up)")
    ap.add_argument("--startup-s", type=float, default=3.0, help="STANDIN_STARTUP_S")
    ap.add_argument("--port", type=int, default=9950)
    ap.add_argument("--verbose", action="store_true", help="print each deploy's output")
    ap.add_argument("--trace", action="store_true",
                    help="print the call timeline of the last counted deploy (benchmarks/calltrace: "
                         "milliseconds from its process start to each phase's calls)")
    ap.add_argument("--cprofile", type=Path, help="write each counted deploy's cProfile stats into this "
                                                  "directory (deploy-N.prof; the profiler inflates the figures)")
    ap.add_argument("--python", choices=("wheel", "current"), default="wheel",
                    help="run the deploys on a plain virtualenv with the wheel installed (default), or "
                         "on this interpreter")
    ap.add_argument("--host-cpus", help="CPUs (e.g. 1, or 2-3) for the loopback card host alone, the rest for the "
                                         "client: its Docker engine, containers and sshd sessions are pinned there "
                                         "and this process and its children (the deploys, every peer) elsewhere, as "
                                         "a card host and the machine that deploys to it are two machines; the "
                                         "masks are restored at the end. Default: all share every CPU")
    args = ap.parse_args()
    global PYTHON
    if args.host_cpus:
        host_cpus = {c for part in args.host_cpus.split(",") for lo, _, hi in [part.partition("-")]
                     for c in range(int(lo), int(hi or lo) + 1)}
        client_cpus = os.sched_getaffinity(0) - host_cpus
        if not host_cpus or not client_cpus:
            ap.error(f"--host-cpus {args.host_cpus}: leave at least one of {sorted(os.sched_getaffinity(0))} "
                     "to the client")
        before = pin(host_processes(), host_cpus)
        os.sched_setaffinity(0, client_cpus)
        try:
            return _main(args)
        finally:
            unpin(before)
    return _main(args)


def _main(args: argparse.Namespace) -> int:
    global PYTHON

    subprocess.run(["bash", str(ROOT / "scripts" / "test-services"), "up"], check=True,
                   capture_output=True)
    byte_compile()  # as pip install leaves the package
    standin = imagebuild.build_standin_image(progress=False)
    workdir = f"/srv/servedeck-test/bench-{uuid.uuid4().hex[:8]}"
    host = RemoteHost("bench", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    rows, trace_text = [], ""
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        project = Path(tmp)
        if args.python == "wheel":
            from devtools.wheelenv import wheel_venv
            venv = Path(tempfile.mkdtemp(prefix="venv-", dir=tmp))
            PYTHON = str(wheel_venv(ROOT, venv, compile_bytecode=True) / "python")
        make_project(project, args.port, args.startup_s)
        inventory = project / "deploy" / "bench-hosts.yaml"
        inventory.write_text(
            f"hosts:\n  bench:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n"
            f"    workdir: {workdir}\n    render_gid: \"992\"\n    port: {args.port}\n"
            f"    ready_timeout_s: 120\n    api_host: 127.0.0.1\n")
        host.run_script('mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" "$1/cache" && '
                        'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [workdir])
        deploy_args = ["deploy", "--host", "bench", "--profile", "bench-overhead",
                       "--inventory", str(inventory), "--image", standin]
        try:
            peer_s = [invoke(project, "--list")[0] for _ in range(3)]
            timelines = []
            probe = project / "probe.trace"
            for i in range(-1, args.n + 1):  # -1: the warm-up, 0: the probe of the import set, then counted
                prof = args.cprofile / f"deploy-{i}.prof" if args.cprofile and i > 0 else None
                if prof:
                    prof.parent.mkdir(parents=True, exist_ok=True)
                trace = (probe if i == 0 else project / f"deploy-{i}.trace" if args.trace and i == args.n
                         else None)
                wall, proc, phases = invoke(project, *deploy_args, cprofile=prof, trace=trace)
                if trace and i > 0:
                    trace_text = trace.read_text()
                if args.verbose:
                    print(proc.stdout + proc.stderr)
                if proc.returncode not in (0, 4):  # 4: ready, but a setting differs (printed)
                    print(proc.stdout + proc.stderr, file=sys.stderr)
                    return 1
                if i <= 0:
                    continue  # the warm-up (empty workdir, unknown digest) and the probe are not counted
                timelines.append({**phases, "exit": wall})
                meta = latest_run(project)
                server = (meta.get("timings_s") or {}).get("container_start_to_ready_s")
                info = container_info(CONTAINER_NAME)
                t_listen = listen_time(info[0]) if info else None
                ready_at = info[1] + server if info and server is not None else None
                rows.append({"wall": wall, "server": server,
                             "overhead": wall - server if server is not None else None,
                             "listen": t_listen - info[1] if t_listen and info else None,
                             "late": ready_at - t_listen if ready_at and t_listen else None,
                             "outcome": meta.get("outcome")})
            # peers on the same host: one SSH round trip over the shared connection (the host's
            # login shell included), and compose's own replace of the running container
            imports = Path(str(probe) + ".imports")  # the probe deploy's import set before its switch
            import_set = imports.read_text().split() if imports.exists() else []
            imports_s: list[tuple[float, float]] = []  # (without, with) the import set, in pairs
            for _ in range(7 if import_set else 0):
                pair = []
                for extra in ([], [str(imports)]):
                    t = time.perf_counter()
                    subprocess.run([PYTHON, "-c", IMPORTS_PY, str(ROOT), *extra], cwd=project, check=True)
                    pair.append(time.perf_counter() - t)
                imports_s.append((pair[0], pair[1]))
            ssh_s, session_s, up_s, floor_s, floor_tasks_s = [], [], [], [], []
            for _ in range(3):
                for when, into in (("start", floor_s), ("tasks", floor_tasks_s)):
                    t = time.perf_counter()
                    subprocess.run([PYTHON, "-c", FLOOR_PY, when, str(ROOT), COMPOSE_SH + f"cd {workdir}",
                                    *host.transport.argv("sh")], cwd=project, check=True)
                    into.append(time.perf_counter() - t)
                t = time.perf_counter()
                host.transport.run_alone(["true"])
                ssh_s.append(time.perf_counter() - t)
                t = time.perf_counter()
                host.run("true")
                session_s.append(time.perf_counter() - t)
                t = time.perf_counter()
                host.run_script(COMPOSE_SH + 'cd "$1" && sd_compose up -d --force-recreate --pull never --no-build',
                                [workdir])
                up_s.append(time.perf_counter() - t)
        finally:
            host.run(f"cd {workdir} 2>/dev/null && docker compose down --remove-orphans -t 1; true",
                     check=False)
            host.run(["rm", "-rf", "--", workdir], check=False)
            host.close()

    print(f"stand-in {standin.split('@')[1][:19]}, STANDIN_STARTUP_S={args.startup_s:g}, port "
          f"{args.port}, replace mode, whole `invoke deploy` processes on "
          f"{'a virtualenv with the wheel' if args.python == 'wheel' else sys.executable}; "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
    f = lambda v: "     -" if v is None else f"{v:6.3f}"  # noqa: E731
    print(f"{'#':>2} {'outcome':<8} {'wall':>6} {'server':>6} {'overhead':>8} {'listen':>6} "
          f"{'late':>6}   (seconds)")
    for i, row in enumerate(rows, 1):
        print(f"{i:>2} {row['outcome']:<8} {f(row['wall'])} {f(row['server'])} "
              f"{f(row['overhead']):>8} {f(row['listen'])} {f(row['late'])}")
    peer = statistics.median(peer_s)
    print(f"peer: `invoke --list` (CLI start-up alone) median {peer:.3f} s")
    print(f"peer: one SSH session to the host (`true` over the shared connection; the host's login "
          f"shell runs its rc files) median {statistics.median(ssh_s):.3f} s; a deploy opens one, while "
          f"it imports, and runs its commands in it (one command there: median "
          f"{statistics.median(session_s):.3f} s)")
    print(f"peer: `docker compose up -d --force-recreate` of the deployed file over SSH, Compose run as "
          f"a deploy runs it (`sd_compose`: compose's own replace of the running container) median "
          f"{statistics.median(up_s):.3f} s")
    print(f"peer: the floor (`invoke --list` beside a session opened at the process start, one round "
          f"trip, compose's replace in the session, one round trip; no servedeck code, no wait) median "
          f"{statistics.median(floor_s):.3f} s; with the session opened once invoke has loaded its tasks "
          f"(where `invoke deploy` first runs servedeck's code) median {statistics.median(floor_tasks_s):.3f} s")
    import_cost = statistics.median(b - a for a, b in imports_s) if imports_s else None
    if import_cost is not None:
        own = sum(m.split(".")[0] == "servedeck" for m in import_set)
        print(f"peer: the CLI's start-up with a deploy's import set (the {len(import_set)} modules, {own} of "
              f"them servedeck's, that a deploy has imported when its switch starts, recorded by a traced "
              f"deploy; none of their code run) median {statistics.median(b for _, b in imports_s):.3f} s, "
              f"without it {statistics.median(a for a, _ in imports_s):.3f} s: the import set alone costs "
              f"{import_cost:.3f} s (median of {len(imports_s)} paired differences, "
              f"{min(b - a for a, b in imports_s):.3f}-{max(b - a for a, b in imports_s):.3f})")
    if timelines:
        names = [n for n in (*PHASES, "exit") if all(n in tl for tl in timelines)]
        print("timeline of a deploy, median seconds from the process start to each phase's first line: "
              + ", ".join(f"{n} {statistics.median(tl[n] for tl in timelines):.3f}" for n in names))
    if trace_text:
        print("call timeline of the last deploy (ms from its process start, thread, event):")
        for line in trace_text.splitlines():
            _pid, ms, thread, event = line.split(" ", 3)
            print(f"  {int(ms):6d}  {thread[:18]:<18} {event}")
    over = [r["overhead"] for r in rows if r["overhead"] is not None]
    late = [r["late"] for r in rows if r["late"] is not None]
    if over:
        med = statistics.median(over)
        print(f"deploy overhead as the user sees it (wall - server): median {med:.3f} s, max "
              f"{max(over):.3f} s, {med / peer:.1f}x the CLI start-up; target <= "
              f"{TARGET_OVERHEAD_S:g} s: {'pass' if med <= TARGET_OVERHEAD_S else 'MISS'}")
        two_peers = peer + statistics.median(up_s)
        print(f"servedeck's own share (overhead - CLI start-up - compose's replace, medians): "
              f"{med - two_peers:.3f} s; the two peers alone: {two_peers:.3f} s; overhead - the floor: "
              f"{med - statistics.median(floor_s):.3f} s")
        if import_cost is not None:
            print(f"overhead - the floor - the import set (what servedeck's work costs beyond importing "
                  f"its code: render, check, calibration, the run record, the work after ready): "
                  f"{med - statistics.median(floor_s) - import_cost:.3f} s")
    if late:
        print(f"readiness noticed after the server serves: median {statistics.median(late):.3f} s, "
              f"max {max(late):.3f} s; target <= {TARGET_LATE_S:g} s: "
              f"{'pass' if max(late) <= TARGET_LATE_S else 'MISS'}")
    return 0 if all(r["outcome"] == "ready" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
