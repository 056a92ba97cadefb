#!/usr/bin/env python3
"""How fast are ``invoke runs`` and ``invoke show latest`` over 10,000 run records?

Generates N run directories (default 10,000) in a temporary runs directory, each with the files a
benchmarked deploy leaves (run.json, startup.json, bench.jsonl, docker-compose.yml, copied from
``tests/fixtures/runs-cpu/0001-cpu-4096-local`` with their identity fields rewritten), then measures,
alternating the commands so that machine load hits all alike, on the interpreter of a plain
virtualenv holding the wheel built from this checkout (as a user installs servedeck;
``--python current``: the development interpreter, its editable-install finder and the base
interpreter's ``.pth`` start-up hooks included):

* ``invoke runs`` as a whole process, the first time (no ``runs/.index.json`` yet: every run is
  read and the index written) and warm (index present),
* ``invoke show latest`` as a whole process,
* peer: ``python -c "import servedeck.runs.history"`` as a whole process (interpreter start-up
  plus the imports every one of those commands needs), so the command's own share is visible,
* in-process: ``list_runs`` warm, ``resolve_run(latest)``, and the pre-index way of listing
  (read run.json, startup.json and bench.jsonl of every run) as the in-process peer,
* in-process: the KV calibration a deploy reads before it changes anything (``kv_history`` of
  the runs' host and image), warm (``runs/.kv-index.json`` present) against its first reading
  (no cache yet: every run's run.json, startup.json and effective.json read and validated).

Printed figures are medians of ``-n`` runs (min and max beside them). Targets (pass/MISS; nothing
is asserted): ``invoke runs`` ≤ 1 s and ``invoke show latest`` ≤ 0.3 s (issue 10).

Usage::

    python benchmarks/runs_scale.py [--runs 10000] [-n 5] [--keep DIR] [--python wheel|current]

Runs from the repository root (where ``tasks.py`` is); needs nothing but Python.
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

from common import byte_compile  # noqa: E402  (benchmarks/common.py)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servedeck.runs import history, kv_history, store  # noqa: E402

SOURCE = ROOT / "tests" / "fixtures" / "runs-cpu" / "0001-cpu-4096-local"


def generate(runs_dir: Path, count: int) -> None:
    """Write ``count`` benchmarked run directories (plain writes: this is test data)."""
    meta = json.loads((SOURCE / store.RUN_META).read_text())
    startup = (SOURCE / store.STARTUP).read_bytes()
    samples = (SOURCE / store.BENCH_SAMPLES).read_bytes()
    compose = (SOURCE / store.COMPOSE).read_bytes()
    profiles = ("cpu-4096", "cpu-8192", "speed", "base")
    for seq in range(1, count + 1):
        profile = profiles[seq % len(profiles)]
        d = runs_dir / f"{seq:05d}-{profile}-local"
        d.mkdir()
        (d / store.RUN_META).write_text(json.dumps({**meta, "run_id": d.name, "sequence": seq,
                                                    "profile": profile}, indent=2))
        (d / store.STARTUP).write_bytes(startup)
        (d / store.BENCH_SAMPLES).write_bytes(samples)
        (d / store.COMPOSE).write_bytes(compose)
        old = time.time() - 3600
        os.utime(d, (old, old))


def timed(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    return elapsed


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f})"


def old_listing(runs_dir: Path) -> int:
    """The pre-index listing: three files read per run."""
    n = 0
    for _, d in store.run_dirs(runs_dir):
        json.loads((d / store.RUN_META).read_text())
        json.loads((d / store.STARTUP).read_text())
        [json.loads(line) for line in (d / store.BENCH_SAMPLES).read_text().splitlines() if line.strip()]
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--keep", help="generate into this directory and keep it")
    ap.add_argument("--python", choices=("wheel", "current"), default="wheel",
                    help="the commands' interpreter: a plain virtualenv holding the wheel built from this "
                         "checkout, as a user installs servedeck (default; the checkout's byte-compiled "
                         "sources run, as invoke -r puts them first), or the development one")
    args = ap.parse_args()
    byte_compile()  # as pip install leaves the package
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sd-runs-scale-"))
    runs_dir = tmp / "runs"
    python = sys.executable
    venv_dir = None
    try:
        if args.python == "wheel":
            from devtools.wheelenv import wheel_venv
            venv_dir = Path(tempfile.mkdtemp(prefix="sd-runs-scale-venv-"))
            python = str(wheel_venv(ROOT, venv_dir, compile_bytecode=True) / "python")
        if not runs_dir.exists():
            runs_dir.mkdir(parents=True)
            t = time.perf_counter()
            generate(runs_dir, args.runs)
            print(f"generated {args.runs} run records in {runs_dir} ({time.perf_counter() - t:.1f} s)")
        (runs_dir / store.INDEX).unlink(missing_ok=True)
        env = {**os.environ, "SERVEDECK_RUNS_DIR": str(runs_dir), "PYTHONPATH": str(ROOT)}
        invoke = [python, "-m", "invoke", "-r", str(ROOT)]
        first = timed([*invoke, "runs"], env)
        rows = {"invoke runs": [], "invoke show latest": [], "peer: python -c 'import servedeck.runs.history'": []}
        for _ in range(args.n):
            rows["invoke runs"].append(timed([*invoke, "runs"], env))
            rows["invoke show latest"].append(timed([*invoke, "show", "latest"], env))
            rows["peer: python -c 'import servedeck.runs.history'"].append(
                timed([python, "-c", "import servedeck.runs.history"], env))
        inproc = {"list_runs (warm index)": [], "resolve_run('latest')": [], "peer: read 3 files per run": []}
        for _ in range(args.n):
            t = time.perf_counter()
            assert len(history.list_runs(runs_dir)) == args.runs
            inproc["list_runs (warm index)"].append(time.perf_counter() - t)
            t = time.perf_counter()
            history.resolve_run(runs_dir, "latest")
            inproc["resolve_run('latest')"].append(time.perf_counter() - t)
            t = time.perf_counter()
            old_listing(runs_dir)
            inproc["peer: read 3 files per run"].append(time.perf_counter() - t)
        meta = json.loads((SOURCE / store.RUN_META).read_text())
        which = {"host": meta["host"], "image_digest": meta["image"]["digest"]}
        (runs_dir / store.KV_INDEX).unlink(missing_ok=True)
        t = time.perf_counter()
        points = len(kv_history.kv_history(runs_dir, **which))
        kv_first = time.perf_counter() - t
        kv_warm = []
        for _ in range(args.n):
            t = time.perf_counter()
            kv_history.kv_history(runs_dir, **which)
            kv_warm.append(time.perf_counter() - t)
        inproc[f"kv_history ({points} calibration points, warm cache)"] = kv_warm
        print(f"\n{args.runs} runs, medians of {args.n}\n\nwhole processes:")
        print(f"  {'invoke runs (first: no index yet)':52} {first:.3f} s")
        for name, values in rows.items():
            print(f"  {name:52} {fmt(values)}")
        print("in-process:")
        for name, values in inproc.items():
            print(f"  {name:52} {fmt(values)}")
        print(f"  {'kv_history, first (no cache yet: every run read)':52} {kv_first:.3f} s = "
              f"{kv_first / statistics.median(kv_warm):.0f}x the warm one")
        peer = statistics.median(rows["peer: python -c 'import servedeck.runs.history'"])
        runs_s = statistics.median(rows["invoke runs"])
        show_s = statistics.median(rows["invoke show latest"])
        print(f"\ninvoke runs: {runs_s:.3f} s = {runs_s / peer:.1f}x the import peer; target 1 s: "
              f"{'pass' if runs_s <= 1.0 else 'MISS'}")
        print(f"invoke show latest: {show_s:.3f} s = {show_s / peer:.1f}x the import peer; target 0.3 s: "
              f"{'pass' if show_s <= 0.3 else 'MISS'}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        if venv_dir is not None:
            shutil.rmtree(venv_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
