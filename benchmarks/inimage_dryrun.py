#!/usr/bin/env python3
"""What does the in-image dry run cost, first and cached, against starting the image at all?

Measured on the CPU vLLM image (``devtools.imagebuild.build_cpu_vllm_image``), in one run:

* peer: ``docker run --rm IMAGE`` of ``python3 -c pass`` with the image's python (a container
  start with no vLLM import), median of ``-n``;
* first dry run of a command (launcher ``--print`` + vLLM parser/validation in the image), with
  an empty cache, for ``-n`` distinct commands (a fresh ``--max-model-len`` each);
* the same commands again in the same process (memory cache) and after clearing the memory
  cache (file cache, what a new ``invoke`` process sees).

Printed figures: medians (min..max) in seconds and the first/peer ratio. Nothing is asserted.

Usage::

    python benchmarks/inimage_dryrun.py [-n 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):8.3f} s  ({min(xs):.3f}..{max(xs):.3f}, n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=3)
    args = ap.parse_args()
    os.environ["SERVEDECK_CACHE_HOME"] = tempfile.mkdtemp(prefix="sd-dryrun-bench-")
    from devtools import imagebuild
    from servedeck.host import inimage

    ref = imagebuild.build_cpu_vllm_image(progress=False)
    client = inimage.local_client()
    peer, first, memo, filed = [], [], [], []
    cmds = [["models/qwen3-tiny", "--", "--max-model-len", str(1024 + i)] for i in range(args.n)]
    for cmd in cmds:
        t0 = time.perf_counter()
        subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", ref,
                        "-c", "pass"], check=True, capture_output=True)
        peer.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        res = inimage.dry_run(client, ref, cmd)
        first.append(time.perf_counter() - t0)
        assert res.ok and not res.cached, res
    for cmd in cmds:
        t0 = time.perf_counter()
        inimage.dry_run(client, ref, cmd)
        memo.append(time.perf_counter() - t0)
    inimage._MEMO.clear()
    for cmd in cmds:
        t0 = time.perf_counter()
        inimage.dry_run(client, ref, cmd)
        filed.append(time.perf_counter() - t0)
    print(f"image: {ref}")
    print(f"peer  docker run python3 -c pass   {_fmt(peer)}")
    ratio = statistics.median(first) / statistics.median(peer)
    print(f"first dry run (launcher + vLLM)    {_fmt(first)}   = {ratio:.1f}x peer")
    print(f"cached, same process (memory)      {_fmt(memo)}")
    print(f"cached, new process (file)         {_fmt(filed)}")


if __name__ == "__main__":
    main()
