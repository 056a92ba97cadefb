#!/usr/bin/env python3
"""What does host telemetry cost a benchmark? Wall time with and without it, and round trips.

``servedeck bench`` samples the card's energy counter, clocks and throttle files on the host
while it benchmarks (:mod:`servedeck.host.telemetry`: a sampler started on the host, read back
once) and computes each request's energy and roofline afterwards. This script measures the
whole bench flow (:func:`servedeck.bench.record.bench_deployed`: the guard, the benchmark,
writing the records, and with telemetry the start, the read-back and both records) over real
SSH to the loopback card host of ``scripts/test-services``:

* the server: the vLLM **stand-in** image (``--server standin``, default: paced stand-in
  inference, ``--decode-s-per-token``) or the real vLLM CPU server with the tiny model
  (``--server cpu``: the sampler then competes with vLLM for this machine's two cores);
* a STAND-IN xe card (``devtools/standin_card.py``) whose energy counter a small process on the
  host advances at 150 W, so the sampler has the files a B70 host has (energy, frequency,
  throttle status and reasons);
* one deployment; the same run is benchmarked ``2 × -n`` times, alternately with and without
  telemetry (ABBA), its bench files removed between rounds; the quality probes that ``invoke
  bench`` runs after the speed bench are left out unless ``--quality`` (they take the same time
  either way and would only dilute the ratio).

Printed: each bench's wall time, the medians with and without telemetry and their ratio
(target: at most 1.02), telemetry's own steps timed inside the same benches (the start and
read-back round trips, the record: the part of the difference that is telemetry's and not the
machine's noise), and the SSH round trips of one bench with telemetry and without, at two
request counts (target: the same extra round trips whatever the number of requests: none per
request). Nothing is asserted.

Usage (under the services lock: the machine and its ports are shared)::

    flock /tmp/servedeck-services.lock python benchmarks/telemetry_overhead.py [-n 4] [--server standin|cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import byte_compile, clear_bench, tear_down  # noqa: E402  (benchmarks/common.py)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
CONTAINER = "sd-bench-telemetry"


def make_project(tmp: Path, server: str, port: int, workdir: str, decode_s: float) -> tuple[object, str]:
    """A temporary project with one profile ``tel`` on port ``port`` and host ``bench``."""
    import shutil

    from servedeck.model.project import Project
    for part in ("profiles", "templates", "schema"):
        shutil.copytree(ROOT / part, tmp / part)
    (tmp / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "images.yaml", tmp / "deploy" / "images.yaml")
    (tmp / "deploy" / "hosts.yaml").write_text(
        f"hosts:\n  bench:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n    workdir: {workdir}\n"
        f"    render_gid: \"992\"\n    port: {port}\n    ready_timeout_s: 900\n    api_host: 127.0.0.1\n"
        f"    sysfs_root: {workdir}/sysfs\n")
    if server == "cpu":
        body = (f"extends: cpu-4096\ncontainer:\n  port: {port}\n  container_name: {CONTAINER}\n")
    else:
        env = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
               "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub", "STANDIN_STARTUP_S": "1",
               "STANDIN_DECODE_S_PER_TOKEN": str(decode_s)}
        body = ("extends: batch-8192\nengine:\n  max_model_len: 2048\ncontainer:\n"
                f"  port: {port}\n  container_name: {CONTAINER}\n  restart: \"no\"\n  environment:\n"
                + "".join(f"    {k}: \"{v}\"\n" for k, v in env.items()))
    (tmp / "profiles" / "tel.yaml").write_text(body)
    return Project(tmp), "tel"


def count_round_trips(host) -> list[int]:
    """Wrap the host's transport so every command it runs is counted (a one-item list)."""
    n = [0]
    run = host.transport.run

    def counted(*a, **k):
        n[0] += 1
        return run(*a, **k)
    host.transport.run = counted
    return n


def time_telemetry_parts() -> dict[str, list[float]]:
    """Time each of telemetry's own steps in the bench flow (``BenchTelemetry.start`` / ``stop``
    / ``record``: the start round trip, the read-back round trip, the record's arithmetic and
    write), one list of seconds per step."""
    from servedeck.bench.limits import BenchTelemetry
    parts: dict[str, list[float]] = {"start": [], "stop": [], "record": []}
    for name in parts:
        orig = getattr(BenchTelemetry, name)

        def timed(self, *a, _orig=orig, _name=name, **k):
            t0 = time.perf_counter()
            try:
                return _orig(self, *a, **k)
            finally:
                if self.enabled:
                    parts[_name].append(time.perf_counter() - t0)
        setattr(BenchTelemetry, name, timed)
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=4, help="bench pairs (ABBA order)")
    ap.add_argument("--server", choices=("standin", "cpu"), default="standin")
    ap.add_argument("--port", type=int, default=9952)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repetitions", type=int, default=4, help="requests per phase")
    ap.add_argument("--decode-s-per-token", type=float, default=0.01, help="the stand-in's decode pace")
    ap.add_argument("--quality", action="store_true",
                    help="run the quality probes after each bench too (invoke bench's default; they are the "
                         "same with and without telemetry, so they dilute the ratio: off by default)")
    args = ap.parse_args()
    byte_compile()
    from devtools import imagebuild
    from devtools.standin_card import make_card, start_load, stop_load
    from servedeck.bench.client import Workload
    from servedeck.bench.record import bench_deployed
    from servedeck.deploy.apply import DeployOptions, QuietReporter, deploy
    from servedeck.host.remote import RemoteHost, SshTarget
    from servedeck.model.inventory import get_host, load_inventory
    from servedeck.model.profile import ProfileStore

    workdir = f"/srv/servedeck-test/bench-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="sd-telemetry-bench-"))
    host = RemoteHost("bench", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    pid = None
    try:
        project, profile = make_project(tmp, args.server, args.port, workdir, args.decode_s_per_token)
        entry = get_host(load_inventory(project.inventory_path), "bench", project.inventory_path)
        host.run_script('mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" "$1/cache" && '
                        'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [workdir])
        opts = DeployOptions()
        if args.server == "cpu":
            from devtools.demo import export_model, upload_dir
            ref = imagebuild.build_cpu_vllm_image(progress=False)
            project.local_images.record(ref)
            upload_dir(host, export_model(ref), "models/qwen3-tiny")
        else:
            opts = DeployOptions(image=imagebuild.build_standin_image(progress=False))
        make_card(host, f"{workdir}/sysfs")
        pid = start_load(host, f"{workdir}/sysfs", 150.0)
        res = deploy(project, host, entry, ProfileStore(project.profiles_dir).load(profile), opts, QuietReporter())
        if res.outcome != "ready":
            print(f"deploy failed: {res.outcome}", file=sys.stderr)
            return 1
        run_dir = res.run.path
        workload = Workload(prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                            repetitions=args.repetitions)
        trips = count_round_trips(host)
        parts = time_telemetry_parts()

        def one(telemetry: bool, wl=workload) -> tuple[float, int]:
            clear_bench(run_dir)
            before = trips[0]
            t0 = time.perf_counter()
            bench_deployed(run_dir, host, entry, wl, telemetry=telemetry, runs_dir=project.runs_dir,
                           probes=args.quality)
            return time.perf_counter() - t0, trips[0] - before

        one(True)  # warm-up: imports, the first sizing of prompts
        walls: dict[bool, list[float]] = {True: [], False: []}
        order = [x for _ in range(args.n) for x in (True, False, False, True)][: 2 * args.n]
        for i, tel in enumerate(order):
            wall, n_trips = one(tel)
            walls[tel].append(wall)
            print(f"bench {i + 1:2d} telemetry={'on ' if tel else 'off'}  wall {wall:7.3f} s  round trips {n_trips}")
        on, off = statistics.median(walls[True]), statistics.median(walls[False])
        ratio = on / off
        added = on - off
        print(f"\nmedian wall: with telemetry {on:.3f} s (min {min(walls[True]):.3f}), without {off:.3f} s "
              f"(min {min(walls[False]):.3f}); ratio {ratio:.4f} (+{(ratio - 1) * 100:.2f} %)  "
              f"target <= 1.02: {'pass' if ratio <= 1.02 else 'MISS'}")
        print(f"telemetry adds {added * 1e3:.0f} ms per bench (median difference); a bench of "
              f"{max(added, 0) / 0.02:.1f} s or longer stays within 2 % (the seed's default bench, 7 requests "
              "of a 32k prompt and 256 tokens at ~57 tok/s, takes ~40 s)")
        own = {k: statistics.median(v) for k, v in parts.items() if v}
        print("telemetry's own steps per bench (median ms): " + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in own.items())
              + f"; together {sum(own.values()) * 1e3:.0f} ms = {sum(own.values()) / off * 100:.2f} % of the bench "
              f"without telemetry  target <= 2 %: {'pass' if sum(own.values()) / off <= 0.02 else 'MISS'}")
        small = Workload(prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens, repetitions=1)
        counts = {(tel, wl.repetitions): one(tel, wl)[1] for wl in (small, workload) for tel in (True, False)}
        extra_small = counts[(True, 1)] - counts[(False, 1)]
        extra_big = counts[(True, workload.repetitions)] - counts[(False, workload.repetitions)]
        print(f"round trips: {1 + 2 * 1} requests: {counts[(True, 1)]} with telemetry, {counts[(False, 1)]} without; "
              f"{1 + 2 * workload.repetitions} requests: {counts[(True, workload.repetitions)]} with, "
              f"{counts[(False, workload.repetitions)]} without; extra round trips {extra_small} and {extra_big}  "
              f"target (none per request): {'pass' if extra_small == extra_big else 'MISS'}")
        return 0
    finally:
        if pid is not None:
            stop_load(host, pid)
        tear_down(host, workdir, tmp)


if __name__ == "__main__":
    sys.exit(main())
