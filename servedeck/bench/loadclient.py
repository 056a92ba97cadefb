"""The load client: many streamed requests at once against a vLLM OpenAI-compatible server.

One ``asyncio`` event loop and one ``aiohttp.ClientSession`` (one connection pool, keep-alive;
the HTTP client ``vllm bench serve`` uses too) send a level's requests as its load profile says
(:mod:`servedeck.bench.load`): ``c`` workers for a concurrency level, or a dispatcher that sends
each request at its arrival time for a rate level. Per request:

* the send time is ``time.perf_counter()`` right before the request is written; every chunk of
  the response body is timed when ``aiohttp`` hands it over (``StreamReader.iter_any``: as soon
  as the bytes arrived), and the SSE ``data:`` events it completes are accounted at that time
  (:class:`servedeck.bench.client.StreamState`, the single-stream benchmark's reading of vLLM's
  chunks);
* a failure (HTTP status, timeout, a connection error, an ``error`` event, a stream without
  output) is recorded in the request's record and the level goes on (vLLM's
  ``RequestFuncOutput`` pattern).

Before a level its prompts are made and sized exactly with the server's ``POST /tokenize``
(:func:`servedeck.bench.client.build_prompt`, the workload's corpus, untimed). Around a level
the server's ``/metrics`` are scraped (counters: :func:`servedeck.bench.client.metrics_delta`,
after waiting until ``vllm:request_success_total`` counted the level's successes), and while it
runs its gauges are sampled every ``metrics_interval_s`` (``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, ``vllm:num_preemptions_total``;
names from ``vllm/v1/metrics/loggers.py``, 0.10.2-0.33).

The event loop is uvloop's (libuv, the loop vLLM's own server runs on) when it is installed,
else asyncio's own (:func:`run_loop`): the same client code, 2-24 % less CPU per request on
uvloop in ``benchmarks/load_client_cost.py``'s runs (benchmarks/README.md).

Entry points: :func:`run_load` (a load profile's levels in order) and :func:`run_capacity`
(a capacity search, :mod:`servedeck.bench.capacity`); both return a :class:`LoadRun` whose
``write(run_dir)`` stores it through the run store.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from servedeck.bench.client import (StreamState, _Tokenizer, _scrape, _url, _utcnow, _wait_metrics,
                                    build_prompt, check_server_identity, metrics_delta, request_body)
from servedeck.bench.load import LoadLevel, LoadProfile, arrivals
from servedeck.bench.sizing import FIT_HINT
from servedeck.bench.loadresult import (LevelResult, LevelServer, LoadSummary, RequestRecord, ServerSample,
                                        server_gauges, summarise_level)
from servedeck.runs.records import CapacityResult
from servedeck.bench.slo import Slo
from servedeck.bench.workload import RequestWorkload, corpus_words
from servedeck.errors import ServedeckError

DEFAULT_METRICS_INTERVAL_S = 0.5
#: ``/metrics`` gauge and counter lines the sampler keeps (summed over engines).
_GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
           "vllm:kv_cache_usage_perc": "kv_cache_usage", "vllm:num_preemptions_total": "preemptions_total"}

ProgressCallback = Callable[[int, int, str], None]
T = TypeVar("T")


@dataclass
class Prepared:
    """One request ready to send: its tag, sizes and encoded JSON body."""

    index: int
    tag: str
    prompt_tokens: int
    max_tokens: int
    prefix_group: int | None
    body: bytes


@dataclass
class LoadRun:
    """A load benchmark's outcome: ``summary`` (``load.json``), ``records`` (``load.jsonl``, in
    send order per level, warm-up first) and, for a capacity search, ``capacity``."""

    summary: LoadSummary
    records: list[RequestRecord]
    capacity: CapacityResult | None = None

    def write(self, run_dir: str | Path) -> dict[str, Path]:
        """Store the run's files atomically in ``run_dir`` (:func:`servedeck.runs.store.write_load_files`).

        Raises:
            OSError: the directory is not writable.
        """
        from servedeck.runs.store import write_load_files
        return write_load_files(run_dir, self.summary, self.records, self.capacity)


def parse_gauges(text: str, model_name: str | None) -> dict[str, float]:
    """The sampled gauges of one ``/metrics`` text (:data:`_GAUGES`, by short name), filtered by
    the ``model_name`` label and summed over engines. Only the wanted lines are handed to
    ``prometheus_client``'s parser, so a sample costs little however long the exposition is."""
    from prometheus_client.parser import text_string_to_metric_families

    lines = [ln for ln in text.splitlines()
             if ln.startswith(tuple(f"{name}{{" for name in _GAUGES)) or ln.split(" ", 1)[0] in _GAUGES]
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in fam.samples:
            short = _GAUGES.get(s.name)
            if short is None or (model_name is not None and s.labels.get("model_name", model_name) != model_name):
                continue
            out[short] = out.get(short, 0.0) + s.value
    return out


class LoadRunner:
    """Sends load levels to one server from one event loop and one connection pool.

    Use inside a running loop: ``async with LoadRunner(...) as r: await r.run_level(...)``.

    Args:
        base_url: ``http://host:port``.
        workload: a :class:`servedeck.bench.workload.RequestWorkload` (chat, shared-prefix,
            full-context).
        served_model: the model name requests carry and ``/metrics`` are filtered by.
        headers: extra request headers (``Authorization`` for a server with an API key).
        metrics_interval_s: gauge sampling period while a level runs (0 = no sampling).
        progress: ``progress(done, total, label)`` after every finished request.
    """

    def __init__(self, base_url: str, workload: RequestWorkload, *, served_model: str,
                 headers: dict[str, str] | None = None, metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S,
                 progress: ProgressCallback | None = None, settle_timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.w = workload
        self.model = served_model
        self.headers = dict(headers or {})
        self.metrics_interval_s = metrics_interval_s
        self.progress = progress
        self.settle_timeout_s = settle_timeout_s
        self.nonce = uuid.uuid4().hex[:10]
        self.max_model_len: int | None = None
        self.started_at = _utcnow()
        self._words = corpus_words(workload.corpus)
        self._tokens_per_word: float | None = None
        self._http: httpx.Client | None = None
        self._session: Any = None

    async def __aenter__(self) -> "LoadRunner":
        import aiohttp
        self._http = httpx.Client(timeout=httpx.Timeout(60.0, connect=30.0), headers=self.headers)
        entry = check_server_identity(self.base_url, self.model, client=self._http)
        self.max_model_len = int(entry["max_model_len"]) if entry.get("max_model_len") else None
        longest = self.w.longest_request(self.max_model_len)
        if self.max_model_len and longest and longest > self.max_model_len:
            raise ServedeckError(f"workload {self.w.name or self.w.kind!r} can send {longest} tokens (prompt + "
                                 f"output) but the server's max_model_len is {self.max_model_len}",
                                 field="workload", hint=FIT_HINT)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, force_close=False)
        self._session = aiohttp.ClientSession(
            connector=connector, headers={"content-type": "application/json", **self.headers},
            timeout=aiohttp.ClientTimeout(total=self.w.request_timeout_s, sock_connect=30.0),
            read_bufsize=2 ** 16)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._http is not None:
            self._http.close()

    # ------------------------------------------------------------------ prompts

    def prepare(self, level_index: int, n: int) -> list[Prepared]:
        """Make and size ``n`` requests for level ``level_index`` (-1: warm-up); see the
        workload module for lengths, prefixes and tags.

        Raises:
            ServedeckError: a prompt cannot be sized, or a request would not fit the context.
        """
        import numpy as np

        w = self.w
        rng = np.random.default_rng(w.seed)  # the same length mix at every level
        lengths = w.lengths(rng, n, self.max_model_len)
        starts = [int(s) for s in rng.integers(0, len(self._words), size=n)]
        tok = _Tokenizer(self._http, self.base_url, self.model, w)  # type: ignore[arg-type]
        prefixes: dict[int, str] = {}
        out = []
        for i, ((prompt, output, shared), start) in enumerate(zip(lengths, starts)):
            if self.max_model_len and prompt + output > self.max_model_len:
                raise ServedeckError(f"request {i} would take {prompt} prompt + {output} output tokens, beyond the "
                                     f"server's max_model_len {self.max_model_len}", field="workload", hint=FIT_HINT)
            tag = f"[{w.tag_prefix} {self.nonce}-{level_index}-{i}]"
            group = w.prefix_group(i)
            head = tag
            if group is not None:
                if group not in prefixes:
                    ptag = f"[prefix {self.nonce}-{level_index}-{group}]"
                    prefixes[group] = self._size(tok.count, shared, ptag, start=group * 997)
                head = f"{prefixes[group]} {tag}"
            text = self._size(tok.count, prompt, head, start=start)
            body = request_body(w, self.model, text, max_tokens=output)
            out.append(Prepared(index=i, tag=tag, prompt_tokens=prompt, max_tokens=output, prefix_group=group,
                                body=json.dumps(body).encode()))
        return out

    def _size(self, count: Callable[[str], int], n_tokens: int, head: str, *, start: int) -> str:
        text = build_prompt(count, n_tokens, head, words=self._words, start=start,
                            tokens_per_word=self._tokens_per_word)
        words = len(text.split())
        if words:
            self._tokens_per_word = n_tokens / words
        return text

    # ------------------------------------------------------------------ sending

    async def _send(self, req: Prepared, level: int, t0: float, scheduled: float | None,
                    queued: float) -> RequestRecord:
        clock = time.perf_counter
        loads = json.loads
        url = _url(self.base_url, self.w.endpoint)
        unix = time.time()
        st = StreamState(t_send=clock())
        status: int | None = None
        error: str | None = None
        try:
            async with self._session.post(url, data=req.body) as resp:
                status = resp.status
                if status != 200:
                    error = f"HTTP {status}: {(await resp.text())[:300]}"
                else:
                    buf = b""
                    done = False
                    async for chunk in resp.content.iter_any():
                        t = clock()
                        buf += chunk
                        if b"\n" not in chunk:
                            continue
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            if line[:5] != b"data:":
                                continue
                            data = line[5:].strip()
                            if data == b"[DONE]":
                                done = True
                                break
                            st.feed(loads(data), t)
                        if done or st.error is not None:
                            break
                    st.t_end = clock()
                    if st.error is not None:
                        error = f"error event in the stream: {st.error}"
                    elif st.t_first is None:
                        error = "the stream carried no output tokens"
        except asyncio.TimeoutError:
            error = f"no complete answer within request_timeout_s={self.w.request_timeout_s:g}"
        except ValueError as exc:  # a data: line that is not JSON
            error = f"invalid stream chunk: {exc}"
        except Exception as exc:  # aiohttp.ClientError, OSError: recorded, not raised
            error = f"{type(exc).__name__}: {exc}"
        ok = error is None
        ttft = (st.t_first - st.t_send) if ok and st.t_first is not None else None
        tpot = None
        if ok and st.tokens > st.first_tokens and st.t_last is not None and st.t_first is not None:
            tpot = (st.t_last - st.t_first) / (st.tokens - st.first_tokens)
        return RequestRecord(
            level=level, index=req.index, tag=req.tag, prefix_group=req.prefix_group,
            prompt_tokens_requested=req.prompt_tokens, max_tokens=req.max_tokens, scheduled_s=scheduled,
            sent_s=st.t_send - t0, queued_s=queued, sent_unix_s=unix, success=ok, error=error, http_status=status,
            ttft_s=ttft, tpot_s=tpot, e2e_s=(st.t_end - st.t_send) if ok else None,
            last_token_s=(st.t_last - st.t_send) if ok and st.t_last is not None else None,
            itl_s=st.gaps_s if ok else [], prompt_tokens=st.prompt_tokens, output_tokens=st.tokens if ok else 0,
            first_chunk_tokens=st.first_tokens, chunks=st.chunks, finish_reason=st.finish_reason)

    async def _sample_gauges(self, t0: float, out: list[ServerSample], stop: asyncio.Event) -> None:
        url = _url(self.base_url, "/metrics")
        while not stop.is_set():
            t = time.perf_counter() - t0
            try:
                async with self._session.get(url) as resp:
                    text = await resp.text()
                g = parse_gauges(text, self.model)
                out.append(ServerSample(t_s=t, running=g.get("running"), waiting=g.get("waiting"),
                                        kv_cache_usage=g.get("kv_cache_usage"),
                                        preemptions_total=g.get("preemptions_total")))
            except Exception:  # a missed sample is a gap in a time series, not a failed level
                pass
            try:
                await asyncio.wait_for(stop.wait(), self.metrics_interval_s)
            except asyncio.TimeoutError:
                pass

    async def send_all(self, level: LoadLevel, index: int, reqs: list[Prepared], label: str = ""
                       ) -> list[RequestRecord]:
        """Send ``reqs`` under ``level`` and return their records in request order."""
        records: list[RequestRecord] = []
        total = len(reqs)
        t0 = time.perf_counter()

        def done(rec: RequestRecord) -> None:
            records.append(rec)
            if self.progress:
                self.progress(len(records), total, label)

        if level.kind == "concurrency":
            it = iter(reqs)

            async def worker() -> None:
                for req in it:
                    done(await self._send(req, index, t0, None, 0.0))
            await asyncio.gather(*(worker() for _ in range(int(level.value))))
        else:
            times = arrivals(level, total, self.w.seed)
            sem = asyncio.Semaphore(level.max_concurrency) if level.max_concurrency else None

            async def one(req: Prepared, at: float) -> None:
                queued = 0.0
                if sem is not None:
                    await sem.acquire()
                    queued = max(0.0, time.perf_counter() - t0 - at)
                try:
                    done(await self._send(req, index, t0, at, queued))
                finally:
                    if sem is not None:
                        sem.release()
            tasks = []
            for req, at in zip(reqs, times or []):
                delay = t0 + at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(req, at)))
            await asyncio.gather(*tasks)
        return sorted(records, key=lambda r: r.index)

    async def warmup(self) -> list[RequestRecord]:
        """The workload's ``warmup_requests``, one at a time (level -1, excluded from levels)."""
        n = self.w.warmup_requests
        if not n:
            return []
        reqs = self.prepare(-1, n)
        return await self.send_all(LoadLevel(kind="concurrency", value=1), -1, reqs, "warm-up")

    async def run_level(self, index: int, level: LoadLevel, slo: Slo | None = None,
                        requests: int | None = None) -> tuple[LevelResult, list[RequestRecord]]:
        """Prepare, send and summarise one level (module docstring). A concurrency level sends
        at least one request per slot (``max(requests, c)``): fewer would never put ``c`` in
        flight, and a capacity search would read a level it did not run as met."""
        n = requests or getattr(self.w, "per_level", None) or self.w.requests
        if level.kind == "concurrency":
            n = max(n, int(level.value))
        reqs = self.prepare(index, n)
        started = _utcnow()
        before = _scrape(self._http, self.base_url, self.model)  # type: ignore[arg-type]
        samples: list[ServerSample] = []
        stop = asyncio.Event()
        t0 = time.perf_counter()
        sampler = (asyncio.create_task(self._sample_gauges(t0, samples, stop))
                   if self.metrics_interval_s > 0 else None)
        try:
            records = await self.send_all(level, index, reqs, level.label)
        finally:
            stop.set()
            if sampler is not None:
                await sampler
        ok = sum(1 for r in records if r.success)
        after = _wait_metrics(self._http, self.base_url, self.model, before, ok,  # type: ignore[arg-type]
                              self.settle_timeout_s)
        delta = metrics_delta(before, after)
        pre = after.values.get("vllm:num_preemptions_total")
        server = LevelServer(delta=delta, interval_s=self.metrics_interval_s, samples=samples,
                             preemptions=None if pre is None else
                             int(round(pre - before.values.get("vllm:num_preemptions_total", 0.0))),
                             **server_gauges(samples))
        result = summarise_level(index, level, records, started_at=started, server=server, slo=slo)
        return result, records

    def summary(self, load: str, slo: Slo | None, levels: list[LevelResult]) -> LoadSummary:
        """The ``load.json`` document of the levels run so far."""
        return LoadSummary(workload=self.w.model_dump(mode="json"), load=load, slo=slo, served_model=self.model,
                           base_url=self.base_url, nonce=self.nonce, started_at=self.started_at,
                           finished_at=_utcnow(), max_model_len=self.max_model_len, levels=levels)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop: uvloop's when it is importable (module
    docstring), else asyncio's default; as :func:`asyncio.run` (the loop is closed after)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def run_load(base_url: str, workload: RequestWorkload, profile: LoadProfile, *, served_model: str,
             slo: Slo | None = None, headers: dict[str, str] | None = None,
             progress: ProgressCallback | None = None,
             metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S) -> LoadRun:
    """Run ``profile``'s levels in order against the server at ``base_url``.

    Returns:
        a :class:`LoadRun`: per-level summaries (saturation flagged by
        :func:`servedeck.bench.capacity.saturation_flags`) and every request's record.

    Raises:
        ServedeckError: the server does not serve ``served_model``, a request cannot fit its
            context, or a prompt cannot be sized. Failed requests are recorded, not raised.
    """
    from servedeck.bench.capacity import saturation_flags

    async def main() -> LoadRun:
        async with LoadRunner(base_url, workload, served_model=served_model, headers=headers,
                              metrics_interval_s=metrics_interval_s, progress=progress) as runner:
            records = await runner.warmup()
            levels: list[LevelResult] = []
            for i, level in enumerate(profile.levels):
                result, recs = await runner.run_level(i, level, slo)
                levels.append(result)
                records += recs
            saturation_flags(levels)
            return LoadRun(summary=runner.summary(profile.text, slo, levels), records=records)

    return run_loop(main())


def run_capacity(base_url: str, workload: RequestWorkload, start: LoadLevel, slo: Slo, *, served_model: str,
                 precision: float | None = None, max_levels: int | None = None, growth: float | None = None,
                 kv_prediction: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
                 progress: ProgressCallback | None = None,
                 metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S) -> LoadRun:
    """Search the highest load of ``start``'s kind that meets ``slo`` (grow, then bisect; see
    :mod:`servedeck.bench.capacity`), each level under the same workload.

    Args:
        start: the first level (its kind is the one varied: concurrency, constant or Poisson rate).
        precision, max_levels, growth: see :class:`servedeck.bench.capacity.CapacitySearch`.
        kv_prediction: the run's KV prediction (``kv.json`` ``prediction``) to check against
            the concurrency at which the server began to queue or preempt (fixed-size
            workloads only: every request the same prompt + output length).

    Returns:
        a :class:`LoadRun` with ``capacity`` set.

    Raises:
        ServedeckError: as :func:`run_load`, and for invalid search settings.
    """
    from servedeck.bench.capacity import (DEFAULT_GROWTH, DEFAULT_MAX_LEVELS, DEFAULT_PRECISION, CapacitySearch,
                                          kv_check)

    search = CapacitySearch(start, precision=DEFAULT_PRECISION if precision is None else precision,
                            max_levels=DEFAULT_MAX_LEVELS if max_levels is None else max_levels,
                            growth=DEFAULT_GROWTH if growth is None else growth)

    async def main() -> LoadRun:
        async with LoadRunner(base_url, workload, served_model=served_model, headers=headers,
                              metrics_interval_s=metrics_interval_s, progress=progress) as runner:
            records = await runner.warmup()
            levels: list[LevelResult] = []
            while (level := search.next_level()) is not None:
                result, recs = await runner.run_level(len(levels), level, slo)
                levels.append(result)
                records += recs
                search.record(result)
            kv = None
            sizes = {(r.prompt_tokens_requested, r.max_tokens) for r in records if r.level >= 0}
            if kv_prediction and len(sizes) == 1:
                prompt, output = sizes.pop()
                kv = kv_check(levels, kv_prediction, prompt + output)
            capacity = search.result(slo, kv)
            ran = LoadProfile(kind=start.kind, levels=[lv.level for lv in levels])
            return LoadRun(summary=runner.summary(ran.text, slo, levels), records=records, capacity=capacity)

    return run_loop(main())
