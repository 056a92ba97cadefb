#!/usr/bin/env python3
"""The load client's own cost and timing error at 100 requests/s against the vLLM stand-in.

The stand-in (``benchmarks/standin.py``: the stand-in image's program as a local process) runs
with ``STANDIN_SEND_TIMES=1`` (every streamed chunk carries the wall-clock time the stand-in
wrote it) and ``STANDIN_KEEPALIVE=1`` (HTTP/1.1 keep-alive and chunked streams, as uvicorn
serves vLLM, so connections are reused as they are against a real server). Two clients send
the same ``-n`` requests at a constant ``--rate`` (default 100/s; 64
prompt tokens, 16 output tokens, the chat endpoint), alternately ``--rounds`` times:

* **servedeck**: :class:`servedeck.bench.loadclient.LoadRunner` as ``invoke bench --load`` runs it
  (SSE parsing, per-request records, the ``/metrics`` gauge sampler every 0.5 s);
* **floor** (the peer): a bare ``aiohttp`` client on the same schedule and bodies that only reads
  the bytes and timestamps the first chunk: what any aiohttp-based client pays.

Both run on the event loop the client runs on (:func:`servedeck.bench.loadclient.run_loop`:
uvloop's when installed, as with servedeck's dependencies; the line ``event loop:`` says which).
A third client, **asyncio**, is servedeck's on asyncio's own loop (``asyncio.run``): what the
loop saves.

Printed per client (median over rounds): CPU seconds of the client process while it sent (user +
system, ``resource.getrusage``) as a share of one core over the sending time, CPU per request,
and the **timing error**: the client's arrival time of each request's first output chunk
(``time.perf_counter`` when the bytes arrived, turned into wall-clock time with one offset taken
at the start) minus the stand-in's own ``standin_sent_unix_s`` of that chunk (median, p90, max
in ms). Also the stand-in's CPU. Targets (printed pass/MISS, nothing asserted): servedeck's CPU ≤
10 % of one core, its median timing error ≤ 1 ms.

Usage: ``python benchmarks/load_client_cost.py [--rate 100] [-n 1000] [--rounds 3]``; run it
under the services lock on a shared machine (``flock /tmp/servedeck-services.lock ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import servedeck.bench.loadclient as loadclient  # noqa: E402
from servedeck.bench.client import StreamState  # noqa: E402
from servedeck.bench.load import LoadLevel, arrivals  # noqa: E402
from servedeck.bench.workload import ChatWorkload, Lengths  # noqa: E402
from standin import MODEL, Standin  # noqa: E402

TARGET_CPU_SHARE = 0.10
TARGET_ERROR_MS = 1.0
CLIENTS = ("servedeck", "asyncio", "floor")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Timed(StreamState):
    """The client's stream accounting, also keeping the stand-in's send time of the first output chunk."""

    seen: list[tuple[float, float]] = []  # (client arrival perf_counter, stand-in sent unix s)

    def feed(self, obj, t):
        first = self.t_first is None
        super().feed(obj, t)
        if first and self.t_first is not None and "standin_sent_unix_s" in obj:
            Timed.seen.append((t, obj["standin_sent_unix_s"]))


async def servedeck_round(s: Standin, w: ChatWorkload, level: LoadLevel, offset: float,
                          name: str = "servedeck") -> dict:
    Timed.seen = []
    async with loadclient.LoadRunner(s.url, w, served_model=MODEL) as runner:
        reqs = runner.prepare(0, w.requests)
        stop = asyncio.Event()
        samples: list = []
        t0 = time.perf_counter()
        sampler = asyncio.create_task(runner._sample_gauges(t0, samples, stop))
        c0, w0, s0 = _cpu(), time.perf_counter(), s.cpu_s()
        records = await runner.send_all(level, 0, reqs)
        cpu, wall, server = _cpu() - c0, time.perf_counter() - w0, s.cpu_s() - s0
        stop.set()
        await sampler
    return _figures(name, cpu, wall, [r.success for r in records], Timed.seen, offset, server)


async def floor_round(s: Standin, w: ChatWorkload, level: LoadLevel, bodies: list[bytes], offset: float) -> dict:
    import aiohttp
    seen: list[tuple[float, float]] = []
    oks: list[bool] = []
    times = arrivals(level, len(bodies), 0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     headers={"content-type": "application/json"}) as session:
        async def one(body: bytes) -> None:
            first = None
            async with session.post(f"{s.url}{w.endpoint}", data=body) as resp:
                async for chunk in resp.content.iter_any():
                    if first is None:
                        first = (time.perf_counter(), chunk)
            line = first[1].split(b"\n", 1)[0][5:]
            seen.append((first[0], json.loads(line)["standin_sent_unix_s"]))
            oks.append(resp.status == 200)
        c0, w0, s0 = _cpu(), time.perf_counter(), s.cpu_s()
        tasks = []
        for body, at in zip(bodies, times):
            delay = w0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(body)))
        await asyncio.gather(*tasks)
        cpu, wall, server = _cpu() - c0, time.perf_counter() - w0, s.cpu_s() - s0
    return _figures("floor", cpu, wall, oks, seen, offset, server)


def _figures(name: str, cpu: float, wall: float, oks: list[bool], seen, offset: float, server_cpu: float) -> dict:
    errors = sorted((t + offset - sent) * 1000 for t, sent in seen)
    return {"client": name, "cpu_s": cpu, "wall_s": wall, "cpu_share": cpu / wall, "requests": len(oks),
            "standin_cpu_share": server_cpu / wall,
            "ok": sum(oks), "cpu_ms_per_request": cpu / max(1, len(oks)) * 1000,
            "error_ms_median": statistics.median(errors), "error_ms_p90": errors[int(0.9 * (len(errors) - 1))],
            "error_ms_max": errors[-1], "n_errors": len(errors)}


async def _say_loop() -> None:
    loop = asyncio.get_running_loop()
    print(f"event loop: {type(loop).__module__}.{type(loop).__name__}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--output-tokens", type=int, default=16)
    args = ap.parse_args()
    loadclient.StreamState = Timed  # the client module's name for its stream accounting
    w = ChatWorkload(name="cost", requests=args.n, warmup_requests=0, prompt_tokens=Lengths(value=64),
                     output_tokens=Lengths(value=args.output_tokens))
    level = LoadLevel(kind="constant", value=args.rate)
    rows = []
    loadclient.run_loop(_say_loop())
    with Standin(STANDIN_SEND_TIMES="1", STANDIN_KEEPALIVE="1", STANDIN_DECODE_S_PER_TOKEN="0.001") as s:
        async def prepared() -> list[bytes]:
            async with loadclient.LoadRunner(s.url, w, served_model=MODEL) as runner:
                return [p.body for p in runner.prepare(0, w.requests)]
        bodies = loadclient.run_loop(prepared())
        for r in range(args.rounds):
            for name in (CLIENTS if r % 2 == 0 else CLIENTS[::-1]):
                offset = time.time() - time.perf_counter()
                if name == "servedeck":
                    row = loadclient.run_loop(servedeck_round(s, w, level, offset))
                elif name == "asyncio":
                    row = asyncio.run(servedeck_round(s, w, level, offset, name))
                else:
                    row = loadclient.run_loop(floor_round(s, w, level, bodies, offset))
                row["round"] = r
                rows.append(row)
                print(f"round {r} {name:9s}: {row['ok']}/{row['requests']} ok in {row['wall_s']:.2f} s; client CPU "
                      f"{row['cpu_share']:.1%} of a core ({row['cpu_ms_per_request']:.3f} ms/request); timing error "
                      f"median {row['error_ms_median']:.3f} ms, p90 {row['error_ms_p90']:.3f}, max "
                      f"{row['error_ms_max']:.2f}; stand-in CPU {row['standin_cpu_share']:.0%}", flush=True)
    print(f"\nat {args.rate:g} requests/s, {args.n} requests x {args.rounds} rounds, "
          f"64 prompt + {args.output_tokens} output tokens (medians over rounds):")
    med = {}
    for name in CLIENTS:
        mine = [r for r in rows if r["client"] == name]
        med[name] = {k: statistics.median(r[k] for r in mine)
                     for k in ("cpu_share", "cpu_ms_per_request", "error_ms_median", "error_ms_p90")}
        m = med[name]
        print(f"  {name:9s}: CPU {m['cpu_share']:.1%} of one core, {m['cpu_ms_per_request']:.3f} ms/request; "
              f"timing error median {m['error_ms_median']:.3f} ms, p90 {m['error_ms_p90']:.3f} ms")
    sd, fl = med["servedeck"], med["floor"]
    print(f"  servedeck / asyncio's loop: CPU {sd['cpu_share'] / med['asyncio']['cpu_share']:.2f}x")
    print(f"  servedeck / floor: CPU {sd['cpu_share'] / fl['cpu_share']:.2f}x, "
          f"timing error {sd['error_ms_median'] - fl['error_ms_median']:+.3f} ms")
    print(f"target client CPU <= {TARGET_CPU_SHARE:.0%} of one core: {sd['cpu_share']:.1%}  "
          f"{'pass' if sd['cpu_share'] <= TARGET_CPU_SHARE else 'MISS'}")
    print(f"target median timing error <= {TARGET_ERROR_MS:g} ms: {sd['error_ms_median']:.3f} ms  "
          f"{'pass' if sd['error_ms_median'] <= TARGET_ERROR_MS else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
