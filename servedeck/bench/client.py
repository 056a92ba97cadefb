"""Single-stream long-context benchmark of a running vLLM OpenAI-compatible server.

What is measured (one request at a time, never concurrent):

* ``warmup``: ``Workload.warmup_requests`` throwaway requests right after boot (the first
  request pays JIT / graph / allocator warm-up). Recorded in ``bench.jsonl`` with phase
  ``warmup``, reported separately, excluded from the per-phase statistics.
* ``cold``: ``repetitions`` requests, each with a fresh prompt that starts with a unique tag
  (``[<tag_prefix> <uuid4 hex>] ...``), so nothing of it is in the prefix cache.
* ``warm``: ``repetitions`` requests, each sending again, byte for byte, the prompt of one
  cold request (prefix-cache hit). With ``warm_order="paired"`` (default) warm *i* is sent
  right after cold *i*, so its prefix is still cached even when long prompts would evict
  each other; with ``"after_cold"`` all cold requests come first, then the warm ones in the
  same order.

Prompt sizing is exact and done by the server itself (no local tokenizer): the prompt text
(tag + filler words) is tokenized with ``POST /tokenize`` using the same request shape the
benchmark sends -- for ``/v1/chat/completions`` the ``messages`` (one user message) with
``add_generation_prompt: true`` and the workload's ``chat_template_kwargs``; for
``/v1/completions`` the ``prompt`` text -- and adjusted until the server counts exactly
``prompt_tokens`` tokens. The response's ``usage.prompt_tokens`` is recorded per sample so
the sizing can be checked.

Per request (streamed; ``stream_options: {include_usage, continuous_usage_stats}``):

* ``ttft_s`` = arrival of the first chunk that carries output (content, reasoning, tool call
  text, or ``usage.completion_tokens`` > 0) - send time (``time.perf_counter()``).
* ``prefill_tok_s`` = prompt tokens / ``ttft_s``.
* ``decode_tok_s`` = (output tokens - tokens of the first output chunk) / (t_last - t_first),
  with token counts from ``usage.completion_tokens`` (speculative decoding puts several
  tokens in one chunk, so chunks are not tokens). ``decode_s`` = t_last - t_first.
* ``e2e_s`` = end of stream - send; ``output_tokens``; ``finish_reason``; ``chunks`` (chunks
  that carried output).
* ``server``: deltas of the server's ``/metrics`` around that one request (counters filtered
  by the ``model_name`` label, summed over ``engine``): ``ttft_s`` (Δsum/Δcount of
  ``vllm:time_to_first_token_seconds``), ``spec_accept_len`` (1 + Δaccepted/Δdrafts),
  ``spec_per_position`` (Δper_pos[i]/Δdrafts), ``spec_drafts``, ``prefix_cache_hits``
  (Δ``vllm:prefix_cache_hits_total``, tokens), ``prompt_tokens_cached`` (0.24+), and
  ``decode_tok_s`` = (Δ``vllm:generation_tokens_total`` - finished requests) /
  Δ``vllm:request_decode_time_seconds_sum`` (engine-side first-to-last token time).
  Metric names: vLLM ``vllm/v1/metrics/loggers.py`` and ``vllm/v1/spec_decode/metrics.py``
  (0.10.2-0.33). After each request the metrics are polled until
  ``vllm:request_success_total`` grew, so the last engine iteration is included.

Results: :class:`BenchResult` (``write(run_dir)`` -> ``workload.json``, ``bench.jsonl``,
``bench.json`` as described in ``docs/run-record.md``) and :func:`format_table`.
External results map onto the same metric names in :mod:`servedeck.bench.external`
(``vllm bench serve --save-result`` JSON, guidellm JSON report).
"""

from __future__ import annotations

import json
import math
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from servedeck.bench.sizing import FIT_HINT
from servedeck.bench.table import SUMMARY_METRICS
from servedeck.errors import ServedeckError
from servedeck.runs.records import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, Sample, ServerDelta, Workload

__all__ = ["BenchResult", "CHAT_ENDPOINT", "COMPLETIONS_ENDPOINT", "RichProgress", "Sample", "ServerDelta",
           "Workload", "run_bench"]

_FILLER_WORDS = (
    "the river runs past an old stone bridge where people stop to watch boats carry grain "
    "and timber down toward the harbour while gulls circle above the market square and the "
    "tower bell counts the hours of a long summer afternoon in the quiet northern town"
).split()


# --------------------------------------------------------------------------- models
# The workload and the samples are run-file content: their models live with the run store
# (servedeck.runs.records: Workload, ServerDelta, Sample), imported here under their names.


@dataclass
class BenchResult:
    """Outcome of :func:`run_bench`.

    Attributes:
        workload: the workload that was run.
        served_model: the served model name the requests named.
        base_url: server base URL (``http://host:port``).
        samples: every request in send order (warm-up included, phase ``warmup``).
        started_at / finished_at: UTC ISO-8601 timestamps.
    """

    workload: Workload
    served_model: str
    base_url: str
    samples: list[Sample] = field(default_factory=list)
    started_at: str = ""
    finished_at: str = ""

    def phase_samples(self, phase: str) -> list[Sample]:
        """Samples of one phase (``warmup``, ``cold``, ``warm``) in send order."""
        return [s for s in self.samples if s.phase == phase]

    def summary(self) -> dict[str, Any]:
        """The ``bench.json`` document (see ``docs/run-record.md``).

        ``phases[phase][metric]`` = ``{median, min, max, n, samples}`` for the metrics in
        :data:`SUMMARY_METRICS` (None values skipped); ``warmup`` = the first warm-up sample
        (or None); ``server[phase]`` = phase-summed metric deltas (``spec_accept_len``,
        ``spec_per_position``, ``spec_drafts``, ``prefix_cache_hits``, ``ttft_s_server_mean``).
        """
        phases: dict[str, Any] = {}
        server: dict[str, Any] = {}
        for phase in ("cold", "warm"):
            samples = self.phase_samples(phase)
            if not samples:
                continue
            phases[phase] = {m: _stats([_metric(s, m) for s in samples]) for m in SUMMARY_METRICS}
            server[phase] = _phase_server(samples)
        warm = self.phase_samples("warmup")
        return {
            "workload": self.workload.model_dump(mode="json"),
            "served_model": self.served_model,
            "base_url": self.base_url,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "phases": phases,
            "warmup": warm[0].model_dump(mode="json") if warm else None,
            "warmup_samples": [s.model_dump(mode="json") for s in warm],
            "server": server,
        }

    def write(self, run_dir: str | Path) -> dict[str, Path]:
        """Write ``workload.json``, ``bench.jsonl`` and ``bench.json`` atomically into ``run_dir``
        (:func:`servedeck.runs.store.write_bench_files`).

        Returns the paths by file name. Raises OSError when the directory is not writable.
        """
        from servedeck.runs.store import write_bench_files
        return write_bench_files(run_dir, self.workload, self.samples, self.summary())


def _metric(s: Sample, name: str) -> float | None:
    if name == "server_ttft_s":
        return s.server.ttft_s
    if name == "server_decode_tok_s":
        return s.server.decode_tok_s
    if name == "ttft_client_minus_server_s":
        return None if s.server.ttft_s is None else s.ttft_s - s.server.ttft_s
    return getattr(s, name)


def _stats(values: Iterable[float | None]) -> dict[str, Any]:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "samples": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals),
            "samples": vals}


def _phase_server(samples: list[Sample]) -> dict[str, Any]:
    drafts = sum(s.server.spec_drafts for s in samples)
    accepted = sum(s.server.spec_accepted_tokens for s in samples)
    npos = max((len(s.server.spec_per_position) for s in samples), default=0)
    per_pos_counts = [0.0] * npos
    for s in samples:
        # per-sample rates * per-sample drafts recover the accepted counts per position
        for i, r in enumerate(s.server.spec_per_position):
            per_pos_counts[i] += r * s.server.spec_drafts
    ttfts = [s.server.ttft_s for s in samples if s.server.ttft_s is not None]
    cached = [s.server.prompt_tokens_cached for s in samples if s.server.prompt_tokens_cached is not None]
    return {
        "spec_accept_len": (1.0 + accepted / drafts) if drafts else None,
        "spec_per_position": [c / drafts for c in per_pos_counts] if drafts else [],
        "spec_drafts": drafts,
        "spec_accepted_tokens": accepted,
        "spec_draft_tokens": sum(s.server.spec_draft_tokens for s in samples),
        "prefix_cache_hits": sum(s.server.prefix_cache_hits for s in samples),
        "prompt_tokens_cached": sum(cached) if cached else None,
        "ttft_s_server_mean": statistics.fmean(ttfts) if ttfts else None,
    }


# --------------------------------------------------------------------------- /metrics


@dataclass
class MetricsSnapshot:
    """Counter values from one ``/metrics`` scrape, filtered by ``model_name``, summed over engines.

    ``values`` maps sample names (``vllm:prefix_cache_hits_total``,
    ``vllm:time_to_first_token_seconds_sum``, ...) to floats; ``per_pos`` maps draft position
    -> ``vllm:spec_decode_num_accepted_tokens_per_pos_total``.
    """

    values: dict[str, float]
    per_pos: dict[int, float]


_WANTED = {
    "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
    "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total", "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total", "vllm:prompt_tokens_cached_total",
    "vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:request_decode_time_seconds_sum", "vllm:request_prefill_time_seconds_sum",
    "vllm:num_preemptions_total",
}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def parse_metrics(text: str, model_name: str | None) -> MetricsSnapshot:
    """Parse Prometheus text exposition (vLLM ``/metrics``) into a :class:`MetricsSnapshot`.

    Samples whose ``model_name`` label differs from ``model_name`` are ignored (all kept when
    ``model_name`` is None). Parsed with ``prometheus_client.parser.text_string_to_metric_families``.
    """
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        for s in fam.samples:
            if model_name is not None and s.labels.get("model_name", model_name) != model_name:
                continue
            if s.name == _PER_POS:
                pos = int(s.labels.get("position", "0"))
                per_pos[pos] = per_pos.get(pos, 0.0) + s.value
            elif s.name in _WANTED:
                values[s.name] = values.get(s.name, 0.0) + s.value
    return MetricsSnapshot(values, per_pos)


def metrics_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> ServerDelta:
    """Server-side figures for the interval between two scrapes (see module docstring)."""

    def d(name: str) -> float:
        return after.values.get(name, 0.0) - before.values.get(name, 0.0)

    ttft_n = int(round(d("vllm:time_to_first_token_seconds_count")))
    drafts = int(round(d("vllm:spec_decode_num_drafts_total")))
    accepted = int(round(d("vllm:spec_decode_num_accepted_tokens_total")))
    positions = sorted(set(before.per_pos) | set(after.per_pos))
    per_pos = [(after.per_pos.get(p, 0.0) - before.per_pos.get(p, 0.0)) / drafts for p in positions] if drafts else []
    has_cached = "vllm:prompt_tokens_cached_total" in after.values
    finished = int(round(d("vllm:request_success_total")))
    gen = int(round(d("vllm:generation_tokens_total")))
    prefill_s = d("vllm:request_prefill_time_seconds_sum")
    decode_s = d("vllm:request_decode_time_seconds_sum")
    return ServerDelta(
        ttft_s=(d("vllm:time_to_first_token_seconds_sum") / ttft_n) if ttft_n else None,
        ttft_count=ttft_n,
        spec_accept_len=(1.0 + accepted / drafts) if drafts else None,
        spec_per_position=per_pos,
        spec_drafts=drafts,
        spec_draft_tokens=int(round(d("vllm:spec_decode_num_draft_tokens_total"))),
        spec_accepted_tokens=accepted,
        prefix_cache_hits=int(round(d("vllm:prefix_cache_hits_total"))),
        prefix_cache_queries=int(round(d("vllm:prefix_cache_queries_total"))),
        prompt_tokens_cached=int(round(d("vllm:prompt_tokens_cached_total"))) if has_cached else None,
        requests_finished=int(round(d("vllm:request_success_total"))),
        prompt_tokens=int(round(d("vllm:prompt_tokens_total"))),
        generation_tokens=gen,
        prefill_s=prefill_s if finished else None,
        decode_s=decode_s if finished else None,
        decode_tok_s=((gen - finished) / decode_s) if finished and decode_s > 0 and gen > finished else None,
    )


# --------------------------------------------------------------------------- server helpers


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


def check_server_identity(base_url: str, expected_model: str, *, timeout_s: float = 10.0,
                          client: httpx.Client | None = None) -> dict[str, Any]:
    """Check that the server at ``base_url`` serves ``expected_model`` and return its entry.

    Reads ``GET /v1/models`` (vLLM OpenAI server: ``{"data": [{"id", "root",
    "max_model_len", ...}]}``) and returns the entry whose ``id`` equals ``expected_model``.

    Raises:
        ServedeckError: the server is unreachable, answers non-200 or non-JSON, or does not
            list ``expected_model`` (the message names the models it does list).
    """
    own = client is None
    c = client or httpx.Client(timeout=timeout_s)
    try:
        try:
            r = c.get(_url(base_url, "/v1/models"), timeout=timeout_s)
        except httpx.HTTPError as e:
            raise ServedeckError(f"cannot reach the vLLM server at {base_url}: {e}",
                                 hint="is the server running and ready (GET /health)?") from e
        if r.status_code != 200:
            raise ServedeckError(f"GET {base_url}/v1/models answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            data = r.json().get("data", [])
        except (ValueError, AttributeError) as e:
            raise ServedeckError(f"GET {base_url}/v1/models did not return the OpenAI model list") from e
        ids = [m.get("id") for m in data]
        for m in data:
            if m.get("id") == expected_model:
                return m
        raise ServedeckError(
            f"the server at {base_url} does not serve model {expected_model!r}; it lists {ids}",
            hint="another server may be running on that port, or --served-model-name differs")
    finally:
        if own:
            c.close()


class _Tokenizer:
    """Counts prompt tokens with the server's ``POST /tokenize`` exactly as the request is sent."""

    def __init__(self, client: httpx.Client, base_url: str, model: str, workload: Workload):
        self.client, self.url, self.model, self.w = client, _url(base_url, "/tokenize"), model, workload

    def count(self, text: str) -> int:
        if self.w.endpoint == CHAT_ENDPOINT:
            body: dict[str, Any] = {"model": self.model, "messages": _messages(text),
                                    "add_generation_prompt": True}
            if self.w.chat_template_kwargs:
                body["chat_template_kwargs"] = self.w.chat_template_kwargs
        else:
            body = {"model": self.model, "prompt": text}
        r = self.client.post(self.url, json=body)
        if r.status_code != 200:
            raise ServedeckError(f"POST /tokenize answered HTTP {r.status_code}: {r.text[:300]}",
                                 hint="the benchmark needs vLLM's /tokenize endpoint")
        return int(r.json()["count"])


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def build_prompt(count: Callable[[str], int], n_tokens: int, tag: str, *,
                 words: Sequence[str] = _FILLER_WORDS, start: int = 0,
                 tokens_per_word: float | None = None) -> str:
    """Return a text starting with ``tag`` for which ``count(text) == n_tokens``.

    ``count`` is the server's token count of the full request (template included). Filler
    words (``words`` taken cyclically from index ``start``; default: one fixed sentence) are
    added/removed proportionally to the difference, then single-token units are appended to
    close the last gap (the unit is chosen by measuring it on the server). ``tokens_per_word``,
    when known from an earlier prompt, makes the first guess close (fewer ``count`` calls).

    Raises:
        ServedeckError: the tag alone already exceeds ``n_tokens`` or no exact size was found.
    """
    base = tag + " "
    base_n = count(base)
    if base_n > n_tokens:
        raise ServedeckError(f"prompt_tokens={n_tokens} is smaller than the request overhead ({base_n} tokens)",
                             field="workload.prompt_tokens")

    def text_for(nw: int) -> str:
        return base + " ".join(words[(start + i) % len(words)] for i in range(nw))

    # secant steps on the measured tokens-per-word rate until at or just under the target
    nw = max(1, n_tokens - base_n if not tokens_per_word else round((n_tokens - base_n) / tokens_per_word))
    cur = count(text_for(nw))
    seen = {nw}
    for _ in range(30):
        if cur == n_tokens or (cur < n_tokens and n_tokens - cur <= 4):
            break
        rate = max((cur - base_n) / nw, 0.05) if nw else 1.0
        step = (n_tokens - cur) / rate
        # land a little under the target when growing, clearly under when shrinking
        nxt = max(0, nw + (max(1, int(step) - 1) if step > 0 else math.floor(step) - 1))
        if nxt in seen:  # oscillating around the target: finish with the walk + units below
            break       # (from nw, whose count cur is)
        nw = nxt
        seen.add(nw)
        cur = count(text_for(nw))
    while cur > n_tokens and nw > 0:
        nw -= 1
        cur = count(text_for(nw))
    body = text_for(nw)
    if cur == n_tokens:
        return body
    # close the remaining gap with units measured to add exactly one token each
    for unit in (" x", " .", ".", " the", "\n", " 1"):
        gap = n_tokens - cur
        cand = body + unit * gap
        if count(cand) == n_tokens:
            return cand
    raise ServedeckError(f"could not size a prompt to exactly {n_tokens} tokens (closest {cur})",
                         field="workload.prompt_tokens")


def _wait_metrics(client: httpx.Client, base_url: str, model: str, before: MetricsSnapshot,
                  finished: int, timeout_s: float) -> MetricsSnapshot:
    """Scrape ``/metrics`` until ``vllm:request_success_total`` grew by ``finished`` (or timeout)."""
    deadline = time.monotonic() + timeout_s
    want = before.values.get("vllm:request_success_total", 0.0) + finished
    while True:
        snap = _scrape(client, base_url, model)
        if snap.values.get("vllm:request_success_total", 0.0) >= want or time.monotonic() > deadline:
            return snap
        time.sleep(0.01)


def _scrape(client: httpx.Client, base_url: str, model: str) -> MetricsSnapshot:
    r = client.get(_url(base_url, "/metrics"))
    if r.status_code != 200:
        raise ServedeckError(f"GET /metrics answered HTTP {r.status_code}",
                             hint="the server must not run with --disable-log-stats")
    return parse_metrics(r.text, model)


# --------------------------------------------------------------------------- one request


@dataclass
class StreamState:
    """What a streamed completion carried so far, fed one SSE ``data:`` object at a time.

    The one reading of vLLM's stream chunks that the single-stream benchmark and the load
    client (:mod:`servedeck.bench.loadclient`) share: a chunk *carries output* when
    ``usage.completion_tokens`` grew (``stream_options.continuous_usage_stats``) or a choice
    has content, reasoning, tool-call text (chat) or text (completions); token counts come from
    ``usage`` (speculative decoding puts several tokens in one chunk, so chunks are not tokens).
    Chunk shapes: vLLM ``vllm/entrypoints/openai/protocol.py`` (0.10.2-0.33).

    Times are ``time.perf_counter()`` seconds: ``t_send`` when the request was sent,
    ``t_first``/``t_last`` at the first/last chunk that carried output, ``t_end`` at the end of
    the stream; ``gaps_s`` holds the time between consecutive output-carrying chunks.
    """

    t_send: float
    t_first: float | None = None
    t_last: float | None = None
    t_end: float = 0.0
    first_tokens: int = 0
    tokens: int = 0
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    chunks: int = 0
    error: str | None = None
    gaps_s: list[float] = field(default_factory=list)

    def feed(self, obj: dict[str, Any], t: float) -> None:
        """Account one decoded ``data:`` object that arrived at ``t``. An ``error`` object
        (vLLM's mid-stream error) is kept in :attr:`error`."""
        if "error" in obj and "choices" not in obj:
            self.error = str(obj["error"])
            return
        usage = obj.get("usage")
        ntok = self.tokens
        if usage:
            ntok = usage.get("completion_tokens") or 0
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = usage["prompt_tokens"]
        carries = ntok > self.tokens
        for ch in obj.get("choices") or ():
            if not carries:
                delta = ch.get("delta")
                if delta is not None:
                    carries = bool(delta.get("content") or delta.get("reasoning_content")
                                   or delta.get("reasoning") or delta.get("tool_calls"))
                else:
                    carries = bool(ch.get("text"))
            if ch.get("finish_reason"):
                self.finish_reason = ch["finish_reason"]
        if carries:
            if self.t_first is None:
                self.t_first = t
                self.first_tokens = max(ntok, 1) if usage else 1
            else:
                self.gaps_s.append(t - self.t_last)  # type: ignore[operator]
            self.t_last = t
            self.chunks += 1
        self.tokens = max(self.tokens, ntok)



def request_body(w: Any, model: str, text: str, max_tokens: int | None = None) -> dict[str, Any]:
    """The JSON body of one streamed request of workload ``w`` (fields ``endpoint``,
    ``max_tokens``, ``temperature``, ``seed``, ``ignore_eos``, ``chat_template_kwargs``):
    ``messages`` with one user message for the chat endpoint, ``prompt`` for completions;
    ``max_tokens`` overrides the workload's."""
    body: dict[str, Any] = {
        "model": model, "max_tokens": w.max_tokens if max_tokens is None else max_tokens,
        "temperature": w.temperature, "seed": w.seed,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": w.ignore_eos,
    }
    if w.endpoint == CHAT_ENDPOINT:
        body["messages"] = _messages(text)
        if w.chat_template_kwargs:
            body["chat_template_kwargs"] = w.chat_template_kwargs
    else:
        body["prompt"] = text
    return body



def stream_request(client: httpx.Client, base_url: str, workload: Workload, model: str,
                   text: str) -> StreamState:
    """Send one streamed request and time its chunks (``time.perf_counter()`` per SSE line).

    Raises:
        ServedeckError: non-200 answer, an ``error`` object in the stream, or no output.
    """
    body = request_body(workload, model, text)
    url = _url(base_url, workload.endpoint)
    payload = json.dumps(body).encode()
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    loads = json.loads
    clock = time.perf_counter
    st = StreamState(t_send=clock())
    with client.stream("POST", url, content=payload, headers=headers,
                       timeout=httpx.Timeout(workload.request_timeout_s, connect=30.0)) as resp:
        if resp.status_code != 200:
            resp.read()
            raise ServedeckError(f"POST {workload.endpoint} answered HTTP {resp.status_code}: {resp.text[:300]}")
        for line in resp.iter_lines():
            t = clock()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            st.feed(loads(data), t)
            if st.error is not None:
                raise ServedeckError(f"the server reported an error mid-stream: {st.error}")
        st.t_end = clock()
    if st.t_first is None:
        raise ServedeckError(f"the stream of POST {workload.endpoint} carried no output tokens")
    return st


# --------------------------------------------------------------------------- run


ProgressCallback = Callable[[int, int, str], None]


def run_bench(base_url: str, workload: Workload, *, served_model: str,
              progress: ProgressCallback | None = None,
              client: httpx.Client | None = None) -> BenchResult:
    """Run ``workload`` against the vLLM server at ``base_url`` and return a :class:`BenchResult`.

    Args:
        base_url: ``http://host:port`` of the OpenAI-compatible server.
        workload: what to send (see :class:`Workload`).
        served_model: the ``--served-model-name`` to put in requests; also the ``model_name``
            label the ``/metrics`` counters are filtered by (vLLM uses the first name).
        progress: called as ``progress(done, total, label)`` before each request and once at
            the end (``done == total``); None = silent. :class:`RichProgress` renders a bar.
        client: an ``httpx.Client`` to use (one with keep-alive is created otherwise).

    Raises:
        ServedeckError: the server does not serve ``served_model``, prompt + output exceed
            its ``max_model_len``, a prompt cannot be sized, or a request fails.
    """
    own = client is None
    c = client or httpx.Client(timeout=httpx.Timeout(60.0, connect=30.0))
    result = BenchResult(workload=workload, served_model=served_model, base_url=base_url,
                         started_at=_utcnow())
    try:
        entry = check_server_identity(base_url, served_model, client=c)
        max_len = entry.get("max_model_len")
        if max_len and workload.prompt_tokens + workload.max_tokens > int(max_len):
            raise ServedeckError(
                f"prompt_tokens + max_tokens = {workload.prompt_tokens + workload.max_tokens} exceeds the "
                f"server's max_model_len {max_len}", field="workload.prompt_tokens",
                hint=FIT_HINT)
        tok = _Tokenizer(c, base_url, served_model, workload)
        w = workload
        plan: list[tuple[str, int, int | None]] = []  # (phase, rep, index of cold prompt for warm)
        plan += [("warmup", i, None) for i in range(w.warmup_requests)]
        if w.warm_order == "paired":
            for i in range(w.repetitions):
                plan += [("cold", i, None), ("warm", i, i)]
        else:
            plan += [("cold", i, None) for i in range(w.repetitions)]
            plan += [("warm", i, i) for i in range(w.repetitions)]
        total = len(plan)
        cold_prompts: dict[int, tuple[str, str]] = {}
        for done, (phase, rep, src) in enumerate(plan):
            if progress:
                progress(done, total, f"{phase} {rep + 1}")
            if phase == "warm":
                tag, text = cold_prompts[src]  # type: ignore[index]
            else:
                tag = f"[{w.tag_prefix} {uuid.uuid4().hex}]"
                text = build_prompt(tok.count, w.prompt_tokens, tag)
                if phase == "cold":
                    cold_prompts[rep] = (tag, text)
            before = _scrape(c, base_url, served_model)
            st = stream_request(c, base_url, w, served_model, text)
            after = _wait_metrics(c, base_url, served_model, before, 1, w.metrics_settle_timeout_s)
            result.samples.append(_sample(phase, rep, tag, w, st, metrics_delta(before, after)))
        if progress:
            progress(total, total, "done")
    finally:
        if own:
            c.close()
    result.finished_at = _utcnow()
    return result


def _sample(phase: str, rep: int, tag: str, w: Workload, st: StreamState, server: ServerDelta) -> Sample:
    assert st.t_first is not None and st.t_last is not None
    ttft = st.t_first - st.t_send
    prompt_tokens = st.prompt_tokens if st.prompt_tokens is not None else w.prompt_tokens
    decode_s = st.t_last - st.t_first
    decode_tokens = st.tokens - st.first_tokens
    flags: list[str] = []
    # A stalled client or API process receives the whole decode in one burst: the client then
    # did not observe decoding, and tokens/(tiny span) would be a meaningless rate. Judge the
    # span against the server's own decode time for this request.
    if server.decode_s and decode_tokens > 0 and decode_s < 0.05 * server.decode_s:
        flags.append("burst")
    return Sample(
        phase=phase, rep=rep, tag=tag, prompt_tokens=prompt_tokens,
        prompt_tokens_requested=w.prompt_tokens, output_tokens=st.tokens,
        first_chunk_tokens=st.first_tokens, ttft_s=ttft,
        prefill_tok_s=prompt_tokens / ttft if ttft > 0 else float("inf"),
        decode_tok_s=((decode_tokens / decode_s) if decode_s > 0 and decode_tokens > 0
                      and "burst" not in flags else None),
        decode_s=decode_s, e2e_s=st.t_end - st.t_send, finish_reason=st.finish_reason,
        chunks=st.chunks, server=server, flags=flags,
    )


def _utcnow() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class RichProgress:
    """A rich progress bar usable as the ``progress`` callback of :func:`run_bench`.

    Use as a context manager: ``with RichProgress() as p: run_bench(..., progress=p)``.
    """

    def __init__(self, description: str = "bench") -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("{task.fields[label]}"), TimeElapsedColumn())
        self._desc = description
        self._task: Any = None

    def __enter__(self) -> "RichProgress":
        self._p.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._p.__exit__(*exc)

    def __call__(self, done: int, total: int, label: str) -> None:
        if self._task is None:
            self._task = self._p.add_task(self._desc, total=total, label=label)
        self._p.update(self._task, completed=done, total=total, label=label)


# --------------------------------------------------------------------------- output



# --------------------------------------------------------------------------- imports

# External result files (vllm bench serve, guidellm) are read in servedeck.bench.external;
# re-exported here for callers of the earlier location.
from servedeck.bench.external import ExternalBench, import_guidellm, import_vllm_bench  # noqa: E402,F401
