#!/usr/bin/env python3
"""Fleet speed on the loopback fleet: a one-batch rollout vs one host's deploy, and a sweep's
estimate vs its measured duration.

The loopback fleet (``scripts/test-services up``; ``deploy/test-fleet/hosts.yaml``): three SSH
hosts that are all this machine, each with its own working directory, container and port on
the one Docker engine. The served image is the vLLM stand-in (``devtools.imagebuild.
build_standin_image``: replays a real vLLM 0.32 startup log paced to ``--startup-s`` seconds).
Everything runs through servedeck's command line, as a user would, in a scratch project.

1. **Rollout ratio.** ``--repeats`` times, alternating two profiles (so each deploy changes
   the host): ``invoke deploy --host fleet-1`` (one host) and ``invoke deploy --hosts lab``
   (three hosts, one batch), wall time of each command. Printed: the medians and the ratio
   rollout / single deploy. Target: at most 1.3.
2. **Sweep estimate.** ``invoke sweep --plan`` on the hosts of ``pair`` (estimate from the
   hosts' run records made in step 1), then the same sweep run (``--no-bench``: the stand-in
   serves no inference), wall time measured. Printed: estimate, measured, the error.
   Target: within 20 %.

Usage::

    bash scripts/test-services up
    flock /tmp/servedeck-it.lock python benchmarks/fleet_bench.py [--repeats 3] [--startup-s 8]

Deployments on the fleet hosts are brought down at the end; the scratch project is removed
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools import imagebuild  # noqa: E402
from servedeck.fleet.command import servedeck_command  # noqa: E402
from servedeck.fleet.inventory import load_fleet  # noqa: E402
from servedeck.host.remote import RemoteHost  # noqa: E402

INVENTORY = ROOT / "deploy" / "test-fleet" / "hosts.yaml"
ENV = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
       "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub"}


def profile(project: Path, name: str, startup_s: float) -> str:
    env = {**ENV, "STANDIN_STARTUP_S": str(startup_s)}
    lines = ["extends: batch-8192", "engine:", "  max_model_len: 2048", "model:",
             f"  served_model_name: {name}", "container:", "  environment:"]
    lines += [f'    {k}: "{v}"' for k, v in env.items()]
    (project / "profiles" / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return name


def cli(project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "SERVEDECK_PROJECT": str(project)}
    t = time.monotonic()
    proc = subprocess.run(servedeck_command(*args), env=env, capture_output=True, text=True)
    took = time.monotonic() - t
    if proc.returncode != 0:
        sys.exit(f"`{' '.join(args)}` failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return took, proc


def latest_deploy_total_s(project: Path, host: str, name: str) -> float:
    """``timings_s.deploy_total_s`` of the newest run of ``name`` on ``host``."""
    runs = sorted((project / "runs").glob(f"[0-9]*-{name}-{host}"))
    return float(json.loads((runs[-1] / "run.json").read_text())["timings_s"]["deploy_total_s"])


def bring_down() -> None:
    fleet = load_fleet(INVENTORY)
    for name, e in fleet.hosts.items():
        RemoteHost(name, e.ssh, e.workdir).run_script(
            'cd "$1" || exit 0; [ -e docker-compose.yml ] && docker compose down --remove-orphans -t 1; '
            'rm -f docker-compose.yml*; true', [e.workdir], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--startup-s", type=float, default=8.0, help="stand-in server start time")
    ap.add_argument("--sweep-reps", type=int, default=2, help="experiments per host in the sweep")
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
        cli(project, "deploy", "--hosts", "lab", "--profile", names[1], *inv)  # warm: image on hosts
        single, fleet, overhead = [], [], []
        for i in range(args.repeats):
            t1, _ = cli(project, "deploy", "--host", "fleet-1", "--profile", names[i % 2], *inv)
            t3, _ = cli(project, "deploy", "--hosts", "lab", "--profile", names[(i + 1) % 2], *inv)
            single.append(t1)
            fleet.append(t3)
            inner = latest_deploy_total_s(project, "fleet-1", names[i % 2])
            overhead.append(t1 - inner)
            print(f"repeat {i + 1}: one host {t1:.1f} s (servedeck's deploy_total_s {inner:.1f} s), "
                  f"three hosts in one batch {t3:.1f} s")
        s, f = statistics.median(single), statistics.median(fleet)
        ratio = f / s
        print(f"CLI start-up and exit around one deploy (wall - deploy_total_s): median "
              f"{statistics.median(overhead):.1f} s")
        print(f"\nrollout: one host's deploy median {s:.1f} s, 3-host one-batch rollout median "
              f"{f:.1f} s, ratio {ratio:.2f} (target <= 1.3: {'pass' if ratio <= 1.3 else 'miss'})")

        sweep = ["sweep", "--base", names[0], "--hosts", "pair", "--no-bench", "--reps",
                 str(args.sweep_reps), "--vary", "engine.max_num_batched_tokens=4096,8192", *inv]
        cli(project, *sweep, "--plan")
        plan_file = next((project / "runs" / "sweeps").glob("*/plan.json"))
        plan = json.loads(plan_file.read_text())
        estimate = plan["estimate_s"]
        measured, _ = cli(project, *sweep)
        err = (estimate - measured) / measured
        print(f"sweep: {len(plan['experiments'])} experiments on {len(plan['hosts'])} hosts, "
              f"estimate {estimate:.1f} s, measured {measured:.1f} s, error {100 * err:+.1f} % "
              f"(target within 20 %: {'pass' if abs(err) <= 0.2 else 'miss'})")
        for host, est in plan["estimates"].items():
            print(f"  {host}: ready {est['ready_s']:.1f} s ({est['source']}), "
                  f"{len(plan['assignments'][host])} experiment(s)")
    finally:
        bring_down()
        if args.keep:
            print(f"project kept: {project}")
        else:
            shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
