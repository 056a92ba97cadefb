#!/usr/bin/env python3
"""How long does ``servedeck check --all`` take over 1,000 profiles?

Generates a temporary project: the repository's ``profiles/``, ``deploy/images.yaml`` and
``schema/``, plus ``-n`` variants (default 1,000) that extend ``base`` or ``speed`` (every other
one) and each change one or two engine settings (``max_num_batched_tokens``,
``gpu_memory_utilization``, ``max_num_seqs``, the MTP depth), so every rendered compose file is
different. Then runs ``servedeck check --all`` there as a whole process (``python -m
servedeck``, the console script's code), and, as the peer in the same run, ``servedeck check
--profile speed`` (one profile: the fixed cost of a process) in the same project.

Prints the wall times, the time per profile after the fixed cost, and the target (``check
--all`` over 1,000 profiles within 10 s) with pass/MISS; nothing is asserted.

Usage::

    python benchmarks/check_scale.py [-n 1000] [--keep]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import byte_compile  # noqa: E402  (benchmarks/common.py)

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 10.0


def make_project(directory: Path, n: int) -> int:
    """Copy the shipped profiles, catalog and schema into ``directory`` and add ``n`` variants;
    return the total number of profiles."""
    shutil.copytree(ROOT / "profiles", directory / "profiles")
    (directory / "deploy").mkdir()
    shutil.copy2(ROOT / "deploy" / "images.yaml", directory / "deploy" / "images.yaml")
    shutil.copytree(ROOT / "schema", directory / "schema")
    for i in range(n):
        parent = "base" if i % 2 == 0 else "speed"
        mnbt = 1024 * (1 + i % 16)
        gmu = 0.80 + (i % 15) / 100
        lines = [f"description: generated variant {i} of {parent}", f"extends: {parent}", "engine:",
                 f"  max_num_batched_tokens: {mnbt}", f"  gpu_memory_utilization: {gmu:.2f}",
                 f"  max_num_seqs: {1 + i % 8}"]
        if parent == "speed":
            lines += ["  speculative:", f"    num_speculative_tokens: {1 + i % 3}"]
        (directory / "profiles" / f"gen-{i:04d}.yaml").write_text("\n".join(lines) + "\n")
    return len(list((directory / "profiles").glob("*.yaml")))


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds of the process and its workers, the completed process)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("SERVEDECK_PROJECT", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    wall_s = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="generated profiles")
    ap.add_argument("--keep", action="store_true", help="keep the generated project")
    args = ap.parse_args()
    byte_compile()  # as pip install leaves the package
    tmp = Path(tempfile.mkdtemp(prefix="check-scale-"))
    try:
        total = make_project(tmp, args.n)
        servedeck = [sys.executable, "-m", "servedeck"]
        one_s, one_cpu, one = timed([*servedeck, "check", "--profile", "speed"], tmp)
        all_s, all_cpu, res = timed([*servedeck, "check", "--all"], tmp)
        if res.returncode not in (0, 1) or one.returncode not in (0, 1):
            print(res.stderr[-3000:] or one.stderr[-3000:], file=sys.stderr)
            return 2
        errors = res.stdout.count("error") if res.returncode else 0
        print(f"project {tmp} ({total} profiles: {args.n} generated variants of base and speed); "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
        print(f"  servedeck check --profile speed (1 profile)  {one_s:7.2f} s")
        print(f"  servedeck check --all ({total} profiles)      {all_s:7.2f} s  (exit {res.returncode}"
              f"{', error findings' if errors else ''})")
        per = (all_s - one_s) / max(total - 1, 1)
        print(f"  per profile after the fixed cost of one process: {per * 1000:.1f} ms")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        per_cpu = (all_cpu - one_cpu) / max(total - 1, 1)
        print(f"  CPU time (process + workers): one profile {one_cpu:.2f} s, --all {all_cpu:.2f} s, "
              f"{per_cpu * 1000:.1f} ms per profile; on {cores} idle cores --all would take about "
              f"{one_cpu + per_cpu * (total - 1) / cores:.1f} s (load-independent estimate)")
        scaled = all_s * 1000 / total
        print(f"target check --all over 1,000 profiles < {TARGET_S:g} s: {all_s:.2f} s for {total} "
              f"(~{scaled:.2f} s per 1,000)  {'pass' if scaled < TARGET_S else 'MISS'}")
        return 0
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
