#!/usr/bin/env python3
"""What does refusing a hostile file cost? CPU seconds and memory per kind and case.

Every hostile file of ``devtools/hostile.py`` (alias bomb, recursive alias, 50,000 and 1,000
levels of nesting, a 200,000-item list / 1,500,000 JSON values, a byte that is not UTF-8, a 50 MB
file) is read in a forked child of this process (the reader's modules imported before the fork), as
servedeck reads that kind of file; the child reports its CPU time (user + system) and the growth
of its resident memory (peak RSS minus RSS at the fork). The peer, measured the same way in the
same run, is reading a real file of the same kind from this repository (a profile, the
inventory, a rendered compose file, the image catalog, a recorded run's files, an imported
``vllm bench serve`` result): the ratio says what a refusal costs next to an honest read.

Targets (pass/MISS, nothing is asserted): every hostile file refused with a ServedeckError
within 1 s of CPU and 100 MB of memory. ``tests/unit/test_hostile_input.py`` holds the same bound
under resource limits.

Usage::

    python benchmarks/hostile_input.py [-n 3]

Runs from the repository root; needs nothing but Python.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools import hostile  # noqa: E402
from servedeck.errors import ServedeckError  # noqa: E402

RUN = ROOT / "tests" / "fixtures" / "runs-cpu" / "0001-cpu-4096-local"
PEERS = {
    "profile": ROOT / "profiles" / "speed.yaml",
    "inventory": ROOT / "deploy" / "test-fleet" / "hosts.yaml",
    "compose": RUN / "docker-compose.yml",
    "catalog": ROOT / "deploy" / "images.yaml",
    "run.json": RUN / "run.json",
    "facts.json": RUN / "facts.json",
    "bench.jsonl": RUN / "bench.jsonl",
    "external-result": ROOT / "tests" / "fixtures" / "cases" / "field-2" / "42b-bench-import-all-ok.clean.json",
    "fleet-result": RUN / "bench.json",
}


def _rss_kb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def measure(kind: str, path: Path) -> dict:
    """Read ``path`` as a ``kind`` file in a forked child: CPU s, RSS growth MB, outcome."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            rss0 = _rss_kb()
            before = resource.getrusage(resource.RUSAGE_SELF)
            try:
                hostile.read_case(kind, path)
                outcome = "read"
            except ServedeckError:
                outcome = "refused"
            except BaseException as exc:  # noqa: BLE001 - reported
                outcome = f"{type(exc).__name__}"
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            grown = max(0, after.ru_maxrss - rss0) / 1024
            os.write(write_fd, json.dumps({"cpu_s": cpu, "rss_mb": grown, "outcome": outcome}).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data or b'{"cpu_s": null, "rss_mb": null, "outcome": "crashed"}')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=3, help="repetitions per case (median printed)")
    args = parser.parse_args()
    worst_cpu, worst_mb, misses = 0.0, 0.0, 0
    print(f"{'kind':16} {'case':16} {'outcome':9} {'CPU s':>7} {'RSS MB':>7} {'x peer CPU':>11}")
    for kind in hostile.KINDS:
        with tempfile.TemporaryDirectory() as tmp:
            peer_dir = Path(tmp) / "peer"
            hostile.setup_project(peer_dir, ROOT)
            peer = hostile.KINDS[kind][0](peer_dir)
            peer.parent.mkdir(parents=True, exist_ok=True)
            peer.write_bytes(PEERS[kind].read_bytes())
            hostile.read_case(kind, peer)  # the reader's imports, here, before every fork
            peer_runs = [measure(kind, peer) for _ in range(args.n)]
            peer_cpu = statistics.median(r["cpu_s"] for r in peer_runs)
            print(f"{kind:16} {'(peer: real)':16} {peer_runs[0]['outcome']:9} {peer_cpu:7.3f} "
                  f"{statistics.median(r['rss_mb'] for r in peer_runs):7.1f} {1.0:11.1f}")
            for case in [c for k, c in hostile.cases() if k == kind]:
                d = Path(tmp) / case
                hostile.setup_project(d, ROOT)
                path = hostile.write_case(d, kind, case)
                runs = [measure(kind, path) for _ in range(args.n)]
                if any(r["cpu_s"] is None for r in runs):
                    print(f"{kind:16} {case:16} {'CRASHED':9}")
                    misses += 1
                    continue
                cpu = statistics.median(r["cpu_s"] for r in runs)
                mb = statistics.median(r["rss_mb"] for r in runs)
                outcome = runs[0]["outcome"]
                ok = outcome == "refused" and cpu <= 1.0 and mb <= 100
                misses += not ok
                worst_cpu, worst_mb = max(worst_cpu, cpu), max(worst_mb, mb)
                print(f"{kind:16} {case:16} {outcome:9} {cpu:7.3f} {mb:7.1f} "
                      f"{cpu / peer_cpu if peer_cpu > 0 else float('inf'):11.1f}"
                      + ("" if ok else "  MISS"))
    print(f"\nworst refusal: {worst_cpu:.3f} s CPU, {worst_mb:.1f} MB  -> "
          f"{'pass' if misses == 0 else f'MISS ({misses})'} (target: refused within 1 s CPU and 100 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
