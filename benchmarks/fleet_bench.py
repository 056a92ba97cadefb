#!/usr/bin/env python3
"""Fleet speed on the loopback fleet: a one-batch rollout vs one host's deploy (with where the
time goes), and a sweep's estimate vs its measured duration.

The loopback fleet (``scripts/test-services up``; ``deploy/test-fleet/hosts.yaml``): three SSH
hosts that are all this machine, each with its own working directory, container and port on
the one Docker engine. The served image is the vLLM stand-in (``devtools.imagebuild.
build_standin_image``: replays a real vLLM 0.32 startup log paced to ``--startup-s`` seconds,
then answers the OpenAI API with paced stand-in completions). Everything runs through
servedeck's command line, as a user would, in a scratch project.

1. **Rollout ratio.** ``--repeats`` times, alternating two profiles (so each deploy changes
   the host): ``invoke deploy --host fleet-1`` (one host) and ``invoke deploy --hosts lab``
   (three hosts, one batch), wall time of each command. Printed: the medians, the ratio
   rollout / single deploy (target: at most 1.3), and the phases of both from the run records
   (``timings_s``) and Ansible's per-host task times (ansible-runner's job events):

   * ``ansible start``: command start to the host's deploy task start (servedeck's rollout
     command, ansible-runner, ansible-playbook, the play); 0 for one host;
   * ``command around deploy``: the per-host servedeck command's own start and exit (for one
     host: interpreter, imports, exit; in a rollout also Ansible's task dispatch);
   * ``before switch``: deploy start to ``docker compose up`` (preflight round trip, render
     and check, KV prediction, image check);
   * ``switch``: ``docker compose up`` until the container started;
   * ``server start``: container start to ready (the stand-in's paced start);
   * ``ansible end``: the last host's task end to the command's exit (results, summary).

   For the rollout the phases are those of the host that finished last, so they add up to the
   wall time. Also printed: controller CPU-seconds per command (``getrusage`` of the children:
   servedeck, Ansible, ssh clients) and the CPU-seconds each stand-in container used to start
   (Docker's container stats): whether the server start competes for the 2 cores.
2. **Sweep estimate.** One tiny bench per host (history, as a user's hosts have), then twice
   (two sweeps of one variable, ``--sweep-reps`` experiments per host): ``invoke sweep
   --plan`` on the hosts of ``pair`` (estimate from the hosts' run records; for the second
   sweep also from the first one's Ansible task times), then the same sweep run (deploy,
   wait, bench, record per arm; A/B report), wall time measured. Printed: estimate,
   measured, the error (target: within 20 %), and the estimate's inputs beside the measured
   step times.

Usage::

    bash scripts/test-services up
    flock /tmp/servedeck-it.lock python benchmarks/fleet_bench.py [--repeats 3] [--startup-s 44]

Deployments on the fleet hosts are brought down at the end; the scratch project is removed
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools import imagebuild  # noqa: E402
from servedeck.fleet.command import servedeck_command  # noqa: E402
from servedeck.fleet.inventory import load_fleet  # noqa: E402
from servedeck.fleet.rollout import DEPLOY_TASK  # noqa: E402
from servedeck.host.remote import RemoteHost  # noqa: E402
from servedeck.fleet.sweep import ANSIBLE_OVERHEAD_S  # noqa: E402
from servedeck.runs import store  # noqa: E402

INVENTORY = ROOT / "deploy" / "test-fleet" / "hosts.yaml"
ENV = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
       "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub"}
TINY_BENCH = ["--prompt-tokens", "64", "--max-tokens", "16", "--repetitions", "2"]
PHASES = ["ansible start", "command around deploy", "before switch", "switch", "server start",
          "ansible end"]


def profile(project: Path, name: str, startup_s: float) -> str:
    env = {**ENV, "STANDIN_STARTUP_S": str(startup_s)}
    lines = ["extends: batch-8192", "engine:", "  max_model_len: 2048", "model:",
             f"  served_model_name: {name}", "container:", "  environment:"]
    lines += [f'    {k}: "{v}"' for k, v in env.items()]
    (project / "profiles" / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return name


class Timed:
    """One CLI command's wall time (start/end epoch seconds) and controller CPU-seconds."""

    def __init__(self, project: Path, *args: str) -> None:
        env = {**os.environ, "SERVEDECK_PROJECT": str(project)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.start = time.time()
        self.proc = subprocess.run(servedeck_command(*args), env=env, capture_output=True, text=True)
        self.end = time.time()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if self.proc.returncode != 0:
            sys.exit(f"`{' '.join(args)}` failed (exit {self.proc.returncode}):\n"
                     f"{self.proc.stdout}\n{self.proc.stderr}")

    @property
    def wall_s(self) -> float:
        return self.end - self.start


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run_timings(project: Path, run_id: str) -> dict[str, float]:
    t = store.read_meta(project / "runs" / run_id).timings_s
    return {"deploy": t["deploy_total_s"], "before switch": t["deploy_total_s"] - t["up_to_ready_s"],
            "switch": t["up_to_ready_s"] - t["container_start_to_ready_s"],
            "server start": t["container_start_to_ready_s"]}


def newest_run(project: Path, host: str) -> str:
    return max((p for _, p in store.run_dirs(project / "runs") if p.name.endswith(f"-{host}")),
               key=lambda p: p.name).name


def task_times(artifacts: Path, task_prefix: str) -> list[dict]:
    """Ansible's per-host task results (ansible-runner job events): host, task, start, end
    (epoch seconds)."""
    out = []
    for path in artifacts.glob("*/job_events/*.json"):
        ev = json.loads(path.read_text())
        data = ev.get("event_data") or {}
        if ev.get("event") in ("runner_on_ok", "runner_on_failed") and \
                str(data.get("task", "")).startswith(task_prefix) and data.get("start"):
            out.append({"host": data["host"], "task": data["task"], "start": _epoch(data["start"]),
                        "end": _epoch(data["end"])})
    return out


def single_phases(project: Path, cmd: Timed, host: str) -> dict[str, float]:
    t = run_timings(project, newest_run(project, host))
    return {"ansible start": 0.0, "command around deploy": cmd.wall_s - t["deploy"],
            "before switch": t["before switch"], "switch": t["switch"],
            "server start": t["server start"], "ansible end": 0.0}


def rollout_phases(project: Path, cmd: Timed) -> dict[str, float]:
    state = max((project / "runs" / "rollouts").iterdir(), key=lambda p: p.name)
    summary = json.loads((state / "summary.json").read_text())
    tasks = {t["host"]: t for t in task_times(state / "ansible" / "artifacts", DEPLOY_TASK)}
    last = max(tasks.values(), key=lambda t: t["end"])
    run_id = next(h["run_id"] for h in summary["hosts"] if h["host"] == last["host"])
    t = run_timings(project, run_id)
    return {"ansible start": last["start"] - cmd.start,
            "command around deploy": (last["end"] - last["start"]) - t["deploy"],
            "before switch": t["before switch"], "switch": t["switch"],
            "server start": t["server start"], "ansible end": cmd.end - last["end"]}


def standin_cpu_s() -> dict[str, float]:
    """CPU-seconds each fleet container used since it started (Docker's container stats)."""
    import docker
    client = docker.from_env()
    out = {}
    for name, e in load_fleet(INVENTORY).hosts.items():
        try:
            stats = client.containers.get(e.container_name).stats(stream=False)
        except docker.errors.NotFound:
            continue
        out[name] = stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9
    client.close()
    return out


def bring_down() -> None:
    fleet = load_fleet(INVENTORY)
    for name, e in fleet.hosts.items():
        RemoteHost(name, e.ssh, e.workdir).run_script(
            'cd "$1" || exit 0; [ -e docker-compose.yml ] && docker compose down --remove-orphans -t 1; '
            'rm -f docker-compose.yml*; true', [e.workdir], check=False)


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rollout_section(project: Path, names: list[str], inv: list[str], repeats: int,
                    startup_s: float) -> None:
    print(f"== rollout: one host vs three hosts in one batch (stand-in start {startup_s:g} s, "
          f"{repeats} repeats; {load()})")
    Timed(project, "deploy", "--hosts", "lab", "--profile", names[1], *inv)  # warm: image on hosts
    single, fleet, p1, p3, cpu1, cpu3, standin1, standin3 = [], [], [], [], [], [], [], []
    for i in range(repeats):
        one = Timed(project, "deploy", "--host", "fleet-1", "--profile", names[i % 2], *inv)
        p1.append(single_phases(project, one, "fleet-1"))
        standin1.append(standin_cpu_s().get("fleet-1", float("nan")))
        three = Timed(project, "deploy", "--hosts", "lab", "--profile", names[(i + 1) % 2], *inv)
        p3.append(rollout_phases(project, three))
        standin3 += list(standin_cpu_s().values())
        single.append(one.wall_s)
        fleet.append(three.wall_s)
        cpu1.append(one.cpu_s)
        cpu3.append(three.cpu_s)
        print(f"repeat {i + 1}: one host {one.wall_s:.1f} s, three hosts in one batch "
              f"{three.wall_s:.1f} s (ratio {three.wall_s / one.wall_s:.2f}; {load()})")
    s, f = med(single), med(fleet)
    ratio = f / s
    print(f"\n{'phase (median s)':<24} {'one host':>9} {'3 hosts':>9} {'extra':>7}")
    for phase in PHASES:
        a, b = med([p[phase] for p in p1]), med([p[phase] for p in p3])
        print(f"{phase:<24} {a:9.2f} {b:9.2f} {b - a:+7.2f}")
    print(f"{'wall':<24} {s:9.2f} {f:9.2f} {f - s:+7.2f}")
    print(f"controller CPU-s per command (servedeck, Ansible, ssh): one host {med(cpu1):.1f}, "
          f"three hosts {med(cpu3):.1f}")
    print(f"stand-in CPU-s used by its start (paced to {startup_s:g} s, then idle until read): "
          f"alone {med(standin1):.2f}, three at once {med(standin3):.2f} each")
    print(f"rollout: one host's deploy median {s:.1f} s, 3-host one-batch rollout median {f:.1f} s, "
          f"ratio {ratio:.2f} (target <= 1.3: {'pass' if ratio <= 1.3 else 'miss'}; {load()})")


def sweep_section(project: Path, base: str, inv: list[str], reps: int, vary: str, label: str) -> None:
    print(f"\n== sweep {label}: --plan estimate vs measured ({load()})")
    sweep = ["sweep", "--base", base, "--hosts", "pair", *TINY_BENCH, "--reps", str(reps),
             "--vary", vary, *inv]
    Timed(project, *sweep, "--plan")
    plan_dir = max((project / "runs" / "sweeps").glob("*/plan.json"), key=lambda p: p.stat().st_mtime).parent
    plan = json.loads((plan_dir / "plan.json").read_text())
    estimate = plan["estimate_s"]
    measured = Timed(project, *sweep)
    err = (estimate - measured.wall_s) / measured.wall_s
    results = [json.loads(p.read_text()) for p in (plan_dir / "results").glob("*.json")]
    per_exp = [r["finished_at"] - r["started_at"] for r in results]
    steps: dict[str, list[float]] = {}
    for t in task_times(next(plan_dir.glob("ansible/*")) / "artifacts", "e0"):
        step = t["task"].split(": ", 1)[-1].split(" (")[0]
        steps.setdefault(step, []).append(t["end"] - t["start"])
    for host, est in plan["estimates"].items():
        print(f"  {host} estimate inputs ({est['source']}): deploy {est['ready_s']:.1f} + "
              f"{est['command_s']:.1f} s, bench {est['bench_s']:.1f} + {est['bench_command_s']:.1f} s, "
              f"ab {est['ab_s']:.1f} s, Ansible steps {est['experiment_overhead_s']:.1f} s -> "
              f"{plan['experiment_s'][host]:.1f} s per experiment, "
              f"{len(plan['assignments'][host])} experiment(s)")
    print("  measured steps (median s): " + ", ".join(f"{k} {med(v):.1f}" for k, v in sorted(steps.items())))
    print(f"  per experiment measured (median): {med(per_exp):.1f} s; Ansible and the sweep command "
          f"around them: {measured.wall_s - max(per_exp):.1f} s (estimate {ANSIBLE_OVERHEAD_S:.1f} s)")
    print(f"sweep {label}: {len(plan['experiments'])} experiments on {len(plan['hosts'])} hosts, "
          f"estimate {estimate:.1f} s, measured {measured.wall_s:.1f} s, ratio "
          f"{estimate / measured.wall_s:.2f}, error {100 * err:+.1f} % "
          f"(target within 20 %: {'pass' if abs(err) <= 0.2 else 'miss'}; {load()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--startup-s", type=float, default=44.0,
                    help="stand-in server start time (default: the real vLLM CPU server's start as "
                         "recorded in tests/fixtures/vllm-0.32-cpu, the log the stand-in replays; "
                         "the tests use 8 s, where the fixed ~4 s of a 3-host batch weighs more)")
    ap.add_argument("--sweep-reps", type=int, default=2, help="experiments per host in the sweep")
    ap.add_argument("--no-sweep", action="store_true", help="only the rollout ratio")
    ap.add_argument("--keep", action="store_true", help="keep the scratch project")
    args = ap.parse_args()
    image = imagebuild.build_standin_image(progress=False)
    project = Path(tempfile.mkdtemp(prefix="servedeck-fleet-bench-"))
    for name in ("profiles", "templates", "schema"):
        shutil.copytree(ROOT / name, project / name)
    (project / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "images.yaml", project / "deploy" / "images.yaml")
    names = [profile(project, f"bench-{x}", args.startup_s) for x in ("a", "b")]
    inv = ["--inventory", str(INVENTORY), "--image", image]
    try:
        rollout_section(project, names, inv, args.repeats, args.startup_s)
        if not args.no_sweep:
            for host in ("fleet-1", "fleet-2"):  # bench history on the hosts, as a user's hosts have
                Timed(project, "deploy", "--host", host, "--profile", names[0], *inv)
                Timed(project, "bench", "--host", host, *TINY_BENCH, *inv[:2])
            sweep_section(project, names[0], inv, args.sweep_reps,
                          "engine.max_num_batched_tokens=4096,8192", "1 (no earlier sweep: default step costs)")
            sweep_section(project, names[0], inv, args.sweep_reps,
                          "engine.gpu_memory_utilization=0.90,0.94", "2 (step costs from sweep 1)")
    finally:
        bring_down()
        if args.keep:
            print(f"project kept: {project}")
        else:
            shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
