#!/usr/bin/env python3
"""How many load levels the capacity search needs for a ±10 % answer, against the stand-in's
load model with a known capacity.

The stand-in (``benchmarks/standin.py``) decodes a token every ``d`` = 20 ms times ``1 + k ×
(running − 1)`` with ``k`` = ``STANDIN_SLOWDOWN_PER_RUNNING`` = 0.1: a batch that grows slows
each of its requests, as on a GPU. Under the SLO ``tpot_s ≤ d × (1 + k × (C − 0.5)), p=90`` the
highest concurrency that meets it is exactly ``C`` (each request's TPOT at ``c`` in flight is
``d × (1 + k(c − 1))``; the limit sits halfway between ``C`` and ``C + 1``): the truth. For each
``C`` of ``--truths`` the search (:func:`servedeck.bench.loadclient.run_capacity`, chat
workload, 36 requests per level, 16 output tokens) starts at concurrency 1 as ``invoke bench
--capacity`` does, with ``--precision`` 0.1.

Printed per truth: the levels run, the answer and bracket, the answer's error against the truth,
and the peer in the same run: a doubling sweep (1, 2, 4, …, as ``vllm bench sweep`` and
GuideLLM sweeps step) in the same number of levels brackets the truth only between two powers
of two (±41 % around their geometric midpoint), and a step-by-one sweep needs ``C + 1`` levels
for an exact answer. Targets (pass/MISS): every answer within ±10 % of the truth in at most 8
levels.

Usage: ``python benchmarks/capacity_standin.py [--truths 3,8,20,40]``; under the services lock
on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from servedeck.bench.load import LoadLevel  # noqa: E402
from servedeck.bench.loadclient import run_capacity  # noqa: E402
from servedeck.bench.slo import Slo  # noqa: E402
from servedeck.bench.workload import ChatWorkload, Lengths  # noqa: E402
from standin import MODEL, Standin  # noqa: E402

DECODE_S = 0.02
SLOWDOWN = 0.1
TARGET_PRECISION = 0.10
TARGET_LEVELS = 8


def _g(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--truths", default="3,8,20,40", help="capacities to search for (concurrency)")
    ap.add_argument("--precision", type=float, default=TARGET_PRECISION)
    ap.add_argument("--requests", type=int, default=36)
    args = ap.parse_args()
    w = ChatWorkload(name="capacity", requests=args.requests, warmup_requests=1, prompt_tokens=Lengths(value=48),
                     output_tokens=Lengths(value=16), ignore_eos=True)
    ok = True
    with Standin(STANDIN_DECODE_S_PER_TOKEN=str(DECODE_S), STANDIN_SLOWDOWN_PER_RUNNING=str(SLOWDOWN),
                 STANDIN_KEEPALIVE="1") as s:
        for truth in (int(t) for t in args.truths.split(",")):
            slo = Slo(tpot_s=DECODE_S * (1 + SLOWDOWN * (truth - 0.5)), percentile=90)
            t0 = time.monotonic()
            run = run_capacity(s.url, w, LoadLevel(kind="concurrency", value=1), slo, served_model=MODEL,
                               precision=args.precision, max_levels=12, metrics_interval_s=0.5)
            cap = run.capacity
            err = (cap.capacity / truth - 1) if cap.capacity else math.inf
            good = abs(err) <= args.precision and cap.levels_run <= TARGET_LEVELS
            ok &= good
            doubling = math.floor(math.log2(truth)) + 2  # levels to bracket it: 1, 2, ..., 2^k > truth
            answer = "none" if cap.capacity is None else f"{cap.capacity:.3g}"
            print(f"truth {truth:3d}: {cap.levels_run} levels ({', '.join(f'{st.value:g}' for st in cap.steps)}) in "
                  f"{time.monotonic() - t0:.0f} s -> capacity {answer} (bracket [{_g(cap.lo)}, {_g(cap.hi)})), "
                  f"error {err:+.1%}  {'pass' if good else 'MISS'}; peers: a doubling sweep brackets it in "
                  f"{doubling} levels to ±41 %, a step-by-one sweep needs {truth + 1} levels", flush=True)
            if cap.knee is not None or cap.saturation is not None:
                print(f"           knee {cap.knee}, saturation {cap.saturation} {cap.saturation_flags}")
    print(f"target: every answer within ±{args.precision:.0%} in at most {TARGET_LEVELS} levels: "
          f"{'pass' if ok else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
