#!/usr/bin/env python3
"""What does a deploy cost beyond the server's own start-up, and how late is readiness noticed?

Deploys (in-process, ``servedeck.deploy.apply.deploy`` over real SSH + Docker to the loopback card
host of ``scripts/test-services``) the vLLM **stand-in** image (``build_standin_image()``), which
replays a real vLLM 0.32 startup log paced to ``STANDIN_STARTUP_S`` seconds, then binds its port
and logs ``Application startup complete.``. Its start-up length is therefore known and servedeck's
own share can be told apart from it.

Set-up (all removed at the end, also on Ctrl-C):

* a temporary copy of the project (profiles, templates, schema, image catalog) with a variant
  ``bench-overhead`` of ``batch-8192``: ``container.port`` / ``host_port`` 9950, its own
  ``container_name`` (``sd-bench-overhead``, so it never collides with another deployment of
  ``b70`` on this engine), ``restart: "no"`` and ``STANDIN_STARTUP_S``;
* a host working directory ``/srv/servedeck-test/bench-<random>`` (weights dir with a
  ``config.json``, ``cache/``) and an inventory entry on port 9950.

The profile is deployed ``-n`` times in a row onto the same working directory (the first onto an
empty one; later ones replace the running deployment, which includes stopping it, as a real
A/B redeploy does; ``--fresh`` brings it down between deploys, outside the timing, instead).
Printed per deploy:

* ``total``: ``deploy()`` wall time from the call to readiness noticed (``deploy_total_s``),
* ``server``: container start (docker's ``State.StartedAt``) to readiness noticed
  (``container_start_to_ready_s``),
* ``overhead``: servedeck's own time, ``deploy_total_s - pull_s - container_start_to_ready_s``
  (``overhead_s``),
* ``listen``: container start to the stand-in's ``Application startup complete.`` line (its
  docker log timestamp, written right after the port was bound); compare with
  ``STANDIN_STARTUP_S``,
* ``late``: readiness noticed minus that log timestamp: how long the server was serving
  before servedeck saw it (the same machine's clock for both),
* the phase breakdown from the deploy's reporter (render+check, preflight, pull + image facts,
  upload, stop, start, wait, after-ready recording).

Targets (printed with pass/miss, nothing asserted): overhead under 2 s, readiness noticed within
0.5 s of the server serving.

Usage::

    bash scripts/test-services up
    python benchmarks/deploy_overhead.py [-n 3] [--startup-s 5] [--port 9950] [--fresh]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools import imagebuild  # noqa: E402
from servedeck.deploy.apply import DeployOptions, Reporter, deploy  # noqa: E402
from servedeck.model.inventory import HostEntry  # noqa: E402
from servedeck.model.profile import ProfileStore  # noqa: E402
from servedeck.model.project import Project  # noqa: E402
from servedeck.host.remote import RemoteHost, SshTarget  # noqa: E402

SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
WEIGHTS = "models/qwen3.8-27b-exl3-4.00bpw"
READY_LINE = "Application startup complete."
CONTAINER_NAME = "sd-bench-overhead"
TARGET_OVERHEAD_S = 2.0
TARGET_LATE_S = 0.5


class TimingReporter(Reporter):
    """Records (perf time, phase name) of each phase; prints nothing."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, str]] = []
        self.lines: list[str] = []

    def phase(self, name: str, text: str) -> None:
        self.marks.append((time.time(), name))
        self.lines.append(f"[{name}] {text}")

    def info(self, text: str) -> None:
        self.lines.append(text)

    def warn(self, text: str) -> None:
        self.lines.append(f"warning: {text}")

    def durations(self, t0: float, t_end: float) -> list[tuple[str, float]]:
        """Seconds from each phase mark to the next (the first from ``t0``, as "setup")."""
        out = []
        marks = [(t0, "setup"), *self.marks, (t_end, "end")]
        for (ta, name), (tb, _) in zip(marks, marks[1:]):
            out.append((name, tb - ta))
        return out


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


def make_project(tmp: Path, port: int, startup_s: float) -> Project:
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
    return Project(tmp)


def down(host: RemoteHost, workdir: str) -> None:
    host.run(f"cd {workdir} 2>/dev/null && for f in docker-compose.yml docker-compose.yml.prev; do "
             f"[ -e $f ] && docker compose -f $f --project-directory {workdir} down "
             f"--remove-orphans -t 1; done; true", check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=3, help="deploys")
    ap.add_argument("--startup-s", type=float, default=5.0, help="STANDIN_STARTUP_S")
    ap.add_argument("--port", type=int, default=9950)
    ap.add_argument("--fresh", action="store_true",
                    help="bring the deployment down between deploys (outside the timing)")
    ap.add_argument("--verbose", action="store_true", help="print the deploy's phase lines")
    args = ap.parse_args()

    subprocess.run(["bash", str(ROOT / "scripts" / "test-services"), "up"], check=True,
                   capture_output=True)
    standin = imagebuild.build_standin_image(progress=False)
    workdir = f"/srv/servedeck-test/bench-{uuid.uuid4().hex[:8]}"
    host = RemoteHost("bench", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    entry = HostEntry(ssh=host.ssh_target, workdir=workdir, render_gid="992", port=args.port,
                      ready_timeout_s=120, api_host="127.0.0.1")
    ssh_calls: list[tuple[str, float]] = []
    _run = host.run

    def timed_run(cmd, **kw):  # count SSH round trips (RemoteHost.run; not paramiko's)
        t = time.time()
        try:
            return _run(cmd, **kw)
        finally:
            argv = cmd.split() if isinstance(cmd, str) else list(cmd)
            if argv[:2] == ["sh", "-c"]:  # run_script: name it by its first script line
                argv = ["sh:" + argv[2].strip().splitlines()[0][:30]] if len(argv) > 2 else argv
            ssh_calls.append((" ".join(argv[:3])[:50], time.time() - t))

    host.run = timed_run
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        project = make_project(Path(tmp), args.port, args.startup_s)
        host.run_script('mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" "$1/cache" && '
                        'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [workdir])
        try:
            for i in range(args.n):
                if args.fresh and i:
                    down(host, workdir)
                loaded = ProfileStore(project.profiles_dir).load("bench-overhead")
                rep = TimingReporter()
                ssh_calls.clear()
                t0 = time.time()
                result = deploy(project, host, entry, loaded, DeployOptions(image=standin), rep)
                t_end = time.time()
                if args.verbose:
                    print("\n".join(rep.lines))
                r = result.readiness
                t_listen = listen_time(r.container_id) if r and r.container_id else None
                tm = result.timings_s
                rows.append({
                    "outcome": result.outcome, "total": tm.get("deploy_total_s"),
                    "server": tm.get("container_start_to_ready_s"), "overhead": tm.get("overhead_s"),
                    "pull": tm.get("pull_s"),
                    "listen": (t_listen - r.container_started_at) if t_listen and r.container_started_at else None,
                    "late": (r.ready_at - t_listen) if t_listen and r.ready_at else None,
                    "after_ready": t_end - r.ready_at if r and r.ready_at else None,
                    "phases": rep.durations(t0, t_end),
                    "replaced": i > 0 and not args.fresh,
                    "ssh_n": len(ssh_calls), "ssh_s": sum(d for _, d in ssh_calls),
                    "ssh_calls": list(ssh_calls),
                })
        finally:
            down(host, workdir)
            host.run(["rm", "-rf", "--", workdir], check=False)

    print(f"stand-in {standin.split('@')[1][:19]}, STANDIN_STARTUP_S={args.startup_s:g}, port "
          f"{args.port}, {'fresh' if args.fresh else 'replace'} mode; "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
    f = lambda v: "     -" if v is None else f"{v:6.3f}"  # noqa: E731
    print(f"{'#':>2} {'outcome':<8} {'total':>6} {'server':>6} {'overhead':>8} {'pull':>6} "
          f"{'listen':>6} {'late':>6}   (seconds)")
    for i, row in enumerate(rows, 1):
        print(f"{i:>2} {row['outcome']:<8} {f(row['total'])} {f(row['server'])} {f(row['overhead']):>8} "
              f"{f(row['pull'])} {f(row['listen'])} {f(row['late'])}"
              + ("   (replaced the running deployment)" if row["replaced"] else ""))
    for i, row in enumerate(rows, 1):
        parts = "  ".join(f"{name} {secs:.3f}" for name, secs in row["phases"] if name != "end")
        print(f"   phases of #{i}: {parts}   (after ready: recording {f(row['after_ready']).strip()})")
        print(f"   SSH round trips of #{i} (OpenSSH, RemoteHost.run): {row['ssh_n']}, "
              f"{row['ssh_s']:.3f} s in all"
              + ("\n      " + "\n      ".join(f"{d:6.3f} s  {w}" for w, d in row["ssh_calls"])
                 if args.verbose else ""))
    over = [r["overhead"] for r in rows if r["overhead"] is not None]
    late = [r["late"] for r in rows if r["late"] is not None]
    if over:
        med = statistics.median(over)
        print(f"target overhead < {TARGET_OVERHEAD_S:g} s: median {med:.3f} s, max {max(over):.3f} s  "
              f"{'pass' if max(over) < TARGET_OVERHEAD_S else 'MISS'}")
    if late:
        print(f"target readiness noticed within {TARGET_LATE_S:g} s: median {statistics.median(late):.3f} s, "
              f"max {max(late):.3f} s  {'pass' if max(late) < TARGET_LATE_S else 'MISS'}")
    if any(r["outcome"] != "ready" for r in rows):
        print("some deploys did not become ready (see --verbose)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
