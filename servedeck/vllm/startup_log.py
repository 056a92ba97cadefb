"""Parse a vLLM server's startup log into :class:`StartupFacts`.

Source of the formats: vLLM (github.com/vllm-project/vllm), versions 0.10.2 to 0.33.0, CUDA,
XPU and CPU builds (envelope: ``vllm/logger.py``; startup lines: ``vllm/config/scheduler.py``,
``vllm/config/vllm.py``, ``vllm/v1/worker/gpu_model_runner.py``, ``vllm/v1/worker/gpu_worker.py``,
``vllm/v1/worker/xpu_worker.py``, ``vllm/compilation/backends.py``,
``vllm/compilation/monitor.py``, ``vllm/compilation/decorators.py``,
``vllm/v1/core/kv_cache_utils.py``, ``vllm/v1/engine/core.py``,
``vllm/v1/spec_decode/metrics.py``, ``vllm/v1/worker/cpu_model_runner.py``;
readiness: ``vllm/entrypoints/launchers/launcher.py``; uvicorn's own ``INFO:     ...`` lines) and the real vLLM
0.32.0 CPU logs in ``tests/fixtures/vllm-0.32-cpu/`` (copies of the project's shared fixtures).

The parser makes one pass over the lines. Each line is stripped of ANSI colour codes, then
split into the log envelope (optional ``(Name pid=N) ``, level, ``MM-DD HH:MM:SS``,
``[file.py:N]``) and its message; any text before the envelope (``docker logs -t`` time stamps,
``compose`` service prefixes) is skipped. Rules match the message text only, never the
``[file.py:N]`` part. Lines that match no rule are ignored. A fact the log does not state is
``None``: nothing is estimated.

Several starts in one log. ``docker logs`` of a container with a restart policy holds one
start after another. A new start begins at a start marker (the version banner or logo line,
the ``non-default args`` line, argparse's ``usage:`` line) when the current start already
printed a marker of that kind or already ended (became ready or failed). Every documented key
describes the **latest** start, the container's current state; the history is kept in:

- ``starts``: one dict per start, oldest first: ``index`` (1-based), ``outcome``
  (``"ready"``: reached serving; ``"failed"``: an error and no readiness; ``"starting"``: the
  latest start, neither yet; ``"stopped"``: an earlier start that ended with neither, e.g.
  killed), ``first_log_ts``, ``last_log_ts``, ``ready_ts``, ``ready_signal``, ``error``,
  ``runtime_errors`` and that start's ``vllm_version``, ``non_default_args``,
  ``kv_cache_tokens``, ``max_concurrency``, ``free_memory_gib``, ``torch_compile_total_s``,
  ``init_engine_s``. Empty for an empty log.
- ``restart_count``: ``len(starts) - 1`` (0 for one start or none).

Readiness. ``ready`` is True once the latest start printed any line :func:`serving_signal`
recognises: vLLM's own ``Starting vLLM server on ADDRESS`` and route list, or uvicorn's
``Uvicorn running on`` / ``Application startup complete.`` (uvicorn INFO lines, absent when
uvicorn logs at warning level); in a log tail that has lost the start-up lines, a request
answered (an access-log line) or vLLM's periodic engine stats line. ``ready_signal`` names the first such line,
``ready_ts`` its time stamp (for uvicorn lines, which carry none, the last vLLM time stamp before it).
``application_startup_complete`` still says whether uvicorn's line itself was printed.

Runtime errors. An error after readiness is not a failed start: ``error`` stays ``None`` and
``runtime_errors`` lists ``{"ts", "process", "kind", "text", "context"}``: ``kind`` is
``"exception"`` (``text`` = the exception line ending a traceback, ``context`` = the ERROR line
just before that traceback, or ``None``), ``"out_of_memory"`` (such an exception naming an
out-of-memory condition) or ``"error"`` (an ERROR/CRITICAL line with no traceback after it);
``ts`` is the log time stamp ("MM-DD HH:MM:SS"), ``process`` the ``(Name pid=N)`` name.

Compile time. ``torch_compile_total_s`` is the sum of vLLM's ``torch.compile took X s in
total`` lines (``torch_compile_total_source`` = ``"logged"``). CPU builds print none: there it
is the span from ``Warming up model for the compilation...`` to the last ``saved AOT compiled
function`` line, from the log's one-second time stamps (``"log_timestamps"``); ``None`` (and
the source ``None``) when the log shows no compilation, e.g. an AOT cache load.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from servedeck.vllm.startup_causes import (PHASE_MARKERS, PROGRESS_RE as _PROGRESS_RE,
                                           PROGRESS_UNITS as _PROGRESS_UNITS, RANK_SPECIFIC, classify,
                                           frame_phase, hint_for, rank_causes, top_cause)
from servedeck.vllm.startup_facts import (DOCUMENTED_KEYS, StartupFacts, _jsonable, compile_range_signature,
                                          format_summary, start_history, summarize)

__all__ = [
    "StartupFacts",
    "parse_startup_log",
    "parse_startup_log_file",
    "summarize",
    "format_summary",
    "compile_range_signature",
    "serving_signal",
    "start_history",
    "record_facts",
    "DOCUMENTED_KEYS",
]

# --------------------------------------------------------------------------------------------
# Envelope
# --------------------------------------------------------------------------------------------

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
# vLLM logger envelope (all versions, after ANSI strip); searched, so a foreign prefix such as
# "2026-05-01 21:36:34.461 | " or "svc  | " in front of it is skipped.
_ENVELOPE_RE = re.compile(
    r"(?:\((?P<proc>[\w.-]+) pid=(?P<pid>\d+)\) )?"
    r"(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[(?P<src>[^\]]+):(?P<ln>\d+)\] ?(?P<msg>.*)$"
)
# uvicorn's "%(levelprefix)s %(message)s" (prefixed with "(APIServer pid=N) " up to 0.24).
_UVICORN_RE = re.compile(r"(?:^|\) |\| )(?P<lvl>INFO|WARNING|ERROR|CRITICAL):\s+(?P<msg>.*)$")
# What `docker logs -t` ("2026-11-12T08:15:12.123456789Z ") and `docker compose logs`
# ("llm-1  | ") put in front of a line, in either order; removed from lines that carry no vLLM
# envelope (uvicorn, tracebacks, argparse), which are matched from their start.
_FOREIGN_PREFIX_RE = re.compile(r"^(?:\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) |[\w.-]+ +\| )+")
# "[backbone] " / "[eagle_head] " graph tag in front of compile messages (0.33 style).
_TAG_RE = re.compile(r"^\[(?P<tag>[\w.-]+)\] ")
# "(Name pid=N) " on raw stdout/stderr lines (tracebacks, tqdm) in 0.10.2-0.24.
_PROC_PREFIX_RE = re.compile(r"^\((?P<proc>[\w.-]+) pid=\d+\) ")

_NUM = r"-?\d+(?:\.\d+)?"


def _f(text: str | None) -> float | None:
    return None if text is None else float(text)


def _i(text: str | None) -> int | None:
    return None if text is None else int(text.replace(",", ""))


def _mb_to_gib(text: str) -> float:
    return round(float(text) / 1024.0, 4)


# --------------------------------------------------------------------------------------------
# Python-literal parsing for "non-default args: {...}"
# --------------------------------------------------------------------------------------------

_ANGLE_RE = re.compile(r"<[^<>]*>")


def _literal(node: ast.AST) -> Any:
    """Convert an expression tree to Python data; unknown nodes become their source text."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {(_literal(k) if k is not None else "**"): _literal(v)
                for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal(node.operand)
        if isinstance(inner, (int, float)):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return float(node.id)
    return ast.unparse(node)


def _parse_python_dict(text: str) -> dict[str, Any] | None:
    """Parse vLLM's ``%s`` of a dict (single quotes, True/None, maybe reprs of objects)."""
    for candidate in (text, _ANGLE_RE.sub(lambda m: repr(m.group(0)), text)):
        try:
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            try:
                value = _literal(ast.parse(candidate, mode="eval").body)
            except (SyntaxError, ValueError, RecursionError):
                continue
        if isinstance(value, dict):
            return _jsonable(value)
    return None


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------

_KNOWN_WARNINGS: list[tuple[str, str, re.Pattern[str]]] = [
    ("max_num_scheduled_tokens", "max_num_scheduled_tokens is set to",
     re.compile(r"max_num_scheduled_tokens is set to (-?\d+)")),
    ("spec_method_deprecated", "is deprecated and replaced with",
     re.compile(r"is deprecated and replaced with")),
    ("min_p_logit_bias_spec", "min_p and logit_bias",
     re.compile(r"min_p and logit_bias parameters won't work with speculative decoding")),
    ("padding_layers", "padding layers", re.compile(r"Add (\d+) padding layers")),
    ("async_scheduling_disabled", "sync scheduling",
     re.compile(r"(?i)async scheduling\b.*\bdisabl|disabl\w* async scheduling")),
    ("xpu_graph_unsupported", "XPU Graph is not supported",
     re.compile(r"XPU Graph is not supported")),
    # 0.32: a cached AOT artifact that cannot be loaded is compiled again (a cold start)
    ("compile_cache_load_failed", "Compiling model again due to a load failure",
     re.compile(r"Compiling model again due to a load failure")),
]

_SPEC_RE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+|nan), .*?"
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<dr>\d+) tokens, "
    r"Per-position acceptance rate: (?P<pp>.*?), Avg Draft acceptance rate: (?P<avg>[\d.]+|nan)%")
_SPEC_DEPTH_RE = re.compile(r"Current speculative depth: (\d+)")
_SPEC_TP_RE = re.compile(r"Accepted throughput: ([\d.]+) tokens/s, Drafted throughput: ([\d.]+) tokens/s")

_INIT_RE = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) (?:seconds|s)\b"
    r"(?: \(compilation: (?P<c>[\d.]+) s(?:\s*[\u2014\u2013-]+\s*(?P<parts>[^)]*))?\))?")
_PART_RE = re.compile(r"([\w.-]+): ([\d.]+) s")

_RANGE = r"(?:compile range (?P<r>\([^)]*\))|shape (?P<shape>\S+)|(?P<dyn>dynamic shape))"
_COMPILE_RE = re.compile(r"Compiling a graph for " + _RANGE + r" takes (?P<t>[\d.]+) s")
_CACHE_LOAD_RE = re.compile(
    r"Directly load the compiled graph\(s\) for " + _RANGE + r" from the cache, took (?P<t>[\d.]+) s")

_MEM_SUMMARY_PARTS = {
    "free_total": re.compile(r"Free memory on device(?: \S+)? \((?P<a>[\d.]+)/(?P<b>[\d.]+) GiB\) on startup"),
    "desired": re.compile(r"Desired GPU memory utilization is \((?P<a>[\d.]+), (?P<b>[\d.]+) GiB\)"),
    "weights": re.compile(r"(?P<a>[\d.]+) GiB for weight"),
    "consumed": re.compile(r"(?P<a>[\d.]+) GiB for consumed memory"),
    "peak": re.compile(r"(?P<a>[\d.]+) GiB for peak activation"),
    "non_torch": re.compile(r"(?P<a>[\d.]+) GiB for non-torch memory"),
    "cudagraph": re.compile(r"(?P<a>[\d.]+) GiB for CUDAGraph memory"),
}

# error rules: (kind, needle, regex); first match in the log wins among specific kinds.
_ARGPARSE_RE = re.compile(r"(?:^|\s)(?P<prog>[\w.\-/]+): error: (?P<rest>.*)$")
_INVALID_CHOICE_RE = re.compile(
    r"argument (?P<arg>-[\w-]+)(?:/[\w-]+)*: invalid choice: '?(?P<v>.*?)'? \(choose from (?P<names>.*)\)")
_INVALID_PARSER_RE = re.compile(
    r"invalid (?P<what>tool call|reasoning) parser: (?P<v>.+?) \(chose from \{(?P<names>.*?)\}\s*\)")
_MML_DERIVED_RE = re.compile(
    r"User-specified max_model_len \((?P<v>\d+)\) is greater than the derived max_model_len "
    r"\((?:[\w.]+=)?(?P<d>\d+)")
_KV_SMALL_RE = re.compile(r"To serve at least one request with the \w+'?s?'? max seq len \((?P<v>\d+)\)")
_KV_SMALL_EST_RE = re.compile(r"estimated maximum model length is (?P<n>\d+)")
_KV_SMALL_OLD_RE = re.compile(
    r"max seq len \((?P<v>\d+)\) is larger than the maximum number of tokens that can be stored "
    r"in KV cache \((?P<n>\d+)\)")
_MNBT_MML_RE = re.compile(r"max_num_batched_tokens \((?P<v>\d+)\) is smaller than max_model_len \((?P<n>\d+)\)")
_MNBT_SEQS_RE = re.compile(
    r"max_num_batched_tokens \((?P<v>\d+)\) must be greater than or equal to max_num_seqs \((?P<n>\d+)\)")
_SPEC_DIVISIBLE_RE = re.compile(r"num_speculative_tokens:(?P<v>\d+) must be divisible by n_predict=(?P<n>\d+)")
_FREE_MEM_RE = re.compile(
    r"Free memory on device(?: \S+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than "
    r"desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)")
_OOM_RE = re.compile(r"(?i)out of memory|OutOfMemoryError|OUT_OF_DEVICE_MEMORY|OUT_OF_RESOURCES")
# vllm/config/compilation.py (0.2x-0.33); also quoted by the executor's "Worker failed with error '...'"
_MAMBA_BLOCKS_RE = re.compile(r"max_num_seqs \((?P<v>\d+)\) exceeds (?:the )?(?:number of )?available "
                              r"[Mm]amba cache blocks \((?P<n>\d+)\)")
_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<func>\S+)')
_EXC_LINE_RE = re.compile(
    r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Warning))(?::\s?(?P<text>.*))?$")
_KNOWN_EXC_RE = re.compile(r"^(?:KeyError|StopIteration|AssertionError)(?::|$)")

_MAX_TEXT = 2000


@dataclass
class _State:
    facts: StartupFacts = field(default_factory=StartupFacts)
    current_graph: str | None = None
    compile_by_graph: dict[str, float] = field(default_factory=dict)
    warmup_by_graph: dict[str, float] = field(default_factory=dict)
    seen_warnings: set[tuple[str, str]] = field(default_factory=set)
    ready: bool = False
    # what may have ended this start, in log order (see _causes.Candidate): the error is the
    # highest ranked
    candidates: list[dict[str, Any]] = field(default_factory=list)
    in_traceback: bool = False
    # the startup phase reached (weights, compile, ...) and its progress ("8/14 shards")
    phase: str | None = None
    progress: str | None = None
    # the deepest phase the current traceback's frames name, and, on the line that ends a
    # traceback, the phase it names (for the errors read from that same line)
    frame_phase: str | None = None
    closing_phase: str | None = None
    # start markers seen in this start ("version", "args", "usage"); any line seen at all
    markers: set[str] = field(default_factory=set)
    seen_lines: bool = False
    last_ts: str | None = None
    last_log_ts: str | None = None
    # CPU builds: "Warming up model for the compilation..." time stamp, then AOT save time stamps
    compile_warmup_ts: str | None = None
    aot_saved_ts: str | None = None
    # after readiness: the last ERROR line (context for the traceback that usually follows)
    pending_runtime: dict[str, Any] | None = None


@dataclass
class _Line:
    """One log line split into its parts: ``msg`` is the text after the vLLM envelope, after a
    uvicorn level prefix, or after a ``(Name pid=N) `` prefix of a raw stdout/stderr line."""

    level: str | None
    ts: str | None
    proc: str | None
    msg: str
    enveloped: bool
    uvicorn: bool


def _read_line(raw: str) -> _Line | None:
    """Split one raw line (ANSI colour removed); ``None`` for a blank line."""
    line = _ANSI_RE.sub("", raw) if "\x1b" in raw else raw
    line = line.rstrip()
    if not line.strip():
        return None
    m = _ENVELOPE_RE.search(line) if "] " in line or line.endswith("]") else None
    if m is not None:
        return _Line(m.group("lvl"), m.group("ts"), m.group("proc"), m.group("msg"), True, False)
    line = _FOREIGN_PREFIX_RE.sub("", line, count=1)
    u = _UVICORN_RE.search(line) if ":" in line else None
    if u is not None:
        return _Line(u.group("lvl"), None, None, u.group("msg"), False, True)
    p = _PROC_PREFIX_RE.match(line)
    return _Line(None, None, p.group("proc") if p else None, line[p.end():] if p else line, False, False)


# Readiness: vLLM's own lines printed once the engine is built and uvicorn is about to serve
# (0.33 ``vllm/entrypoints/launchers/launcher.py`` ``serve_http``: "Starting vLLM server on
# ADDRESS", "Available routes are:", "Route: PATH, Methods: ..."; 0.10.2-0.24
# ``vllm/entrypoints/openai/api_server.py`` "Starting vLLM API server N on ADDRESS"), and
# uvicorn's INFO lines (``uvicorn/server.py``: "Uvicorn running on ...";
# ``uvicorn/lifespan/on.py``: "Application startup complete."), which an image running uvicorn
# at ``--uvicorn-log-level warning`` never prints.
_SERVER_START_RE = re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (\S+)")
_SERVING_SIGNALS = ("server_address", "route_list", "uvicorn_running", "uvicorn_startup_complete",
                    "request_served", "engine_stats")
# A request answered: uvicorn's access log (``uvicorn/protocols/http/h11_impl.py``:
# '%s - "%s %s HTTP/%s" %d'), e.g. ``127.0.0.1:51022 - "GET /health HTTP/1.1" 200 OK``; and
# vLLM's periodic stats line (``vllm/v1/metrics/loggers.py`` LoggingStatLogger, "Engine 000: Avg
# prompt throughput: ..."), logged by the API server's output handler, which runs once requests
# arrive. Either is what a log tail (``docker logs --tail``, a rotated json-file log) of a
# serving server holds when its start-up lines are gone.
_ACCESS_RE = re.compile(r'^\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}\b')
_ENGINE_STATS_RE = re.compile(r"^Engine \d+: Avg prompt throughput: ")


def _serving_signal(v: _Line) -> str | None:
    if v.uvicorn:
        if v.msg.startswith("Application startup complete"):
            return "uvicorn_startup_complete"
        if v.msg.startswith("Uvicorn running on "):
            return "uvicorn_running"
        if _ACCESS_RE.match(v.msg):
            return "request_served"
        return None
    if not v.enveloped:
        return None
    body = _TAG_RE.sub("", v.msg, count=1)
    if body.startswith("Starting vLLM ") and _SERVER_START_RE.search(body):
        return "server_address"
    if body.startswith(("Available routes are", "Route: ")):
        return "route_list"
    if _ENGINE_STATS_RE.match(body):
        return "engine_stats"
    return None


def serving_signal(line: str) -> str | None:
    """Say whether one line of a vLLM server's output shows that the server is serving.

    Args:
        line: one raw line of ``docker logs`` output (ANSI colour, ``docker logs -t`` time
            stamps and compose service prefixes are allowed).

    Returns:
        The signal's name, or ``None`` for any other line:
        ``"server_address"`` (vLLM's ``Starting vLLM server on http://HOST:PORT``, 0.10.2-0.24
        ``Starting vLLM API server N on ...``), ``"route_list"`` (``Available routes are:`` /
        ``Route: /health, Methods: GET``), ``"uvicorn_running"`` (``Uvicorn running on ...``),
        ``"uvicorn_startup_complete"`` (``Application startup complete.``), ``"request_served"``
        (a uvicorn access-log line: a request was answered), ``"engine_stats"`` (vLLM's periodic
        ``Engine 000: Avg prompt throughput`` line: requests are being served). The uvicorn
        lines are INFO records and are absent when uvicorn logs at warning level; the vLLM
        lines are printed by vLLM's own logger in every version from 0.10.2 to 0.33.0
        (``vllm/entrypoints/launchers/launcher.py``, ``vllm/entrypoints/openai/api_server.py``).

    Never raises. A restarted container prints these lines again for each start: callers that
    watch a log stream should only consider lines after the start they wait for.
    """
    v = _read_line(line)
    return None if v is None else _serving_signal(v)


def _start_marker(v: _Line) -> str | None:
    """The kind of line that opens a vLLM process's output: the version banner or logo line,
    the ``non-default args`` line (both from the API server process, 0.10.2-0.33.0
    ``vllm/entrypoints/utils.py`` / ``vllm/entrypoints/openai/api_server.py``) or argparse's
    ``usage:`` line (printed before a command-line error)."""
    if v.uvicorn:
        return None
    if v.enveloped:
        if "non-default args: " in v.msg:
            return "args"
        if "version" in v.msg and (_Parser._BANNER_RE.search(v.msg) or _Parser._LOGO_VERSION_RE.search(v.msg)):
            return "version"
        return None
    return "usage" if v.msg.startswith("usage: ") else None


_TS_FORMAT = "%Y-%m-%d %H:%M:%S"


def _seconds_between(a: str | None, b: str | None) -> float | None:
    """Seconds from log time stamp ``a`` to ``b`` ("MM-DD HH:MM:SS", same year assumed; a
    leap year so that 02-29 parses); ``None`` when either is missing or ``b`` is earlier."""
    if not a or not b:
        return None
    try:
        ta = datetime.strptime(f"2000-{a}", _TS_FORMAT)
        tb = datetime.strptime(f"2000-{b}", _TS_FORMAT)
    except ValueError:
        return None
    delta = (tb - ta).total_seconds()
    return delta if delta >= 0 else None


def _error(kind: str, text: str, suggested: Any = None, value: Any = None,
           valid: list[str] | None = None) -> dict[str, Any]:
    return {"kind": kind, "text": text.strip()[:_MAX_TEXT], "suggested_value": suggested,
            "value": value, "valid_values": valid}


def _closest(value: str, names: list[str]) -> str | None:
    match = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
    return match[0] if match else None


class _Parser:
    """One-pass line parser; rules are (needle, handler) pairs tried on the message text."""

    def __init__(self) -> None:
        self.s = _State()
        self.rules: list[tuple[str, Callable[[str, str | None, str | None], None]]] = [
            ("version", self._version),
            ("non-default args: ", self._non_default_args),
            ("Initializing a V1 LLM engine", self._engine_version),
            ("Using max model len", self._max_model_len),
            ("Chunked prefill is enabled", self._chunked_prefill),
            ("Model loading took", self._model_loading),
            ("Using cache directory:", self._cache_dir),
            ("Compiling a graph for", self._compile),
            ("Directly load the compiled graph", self._cache_load),
            ("Warming up model for the compilation", self._compile_warmup),
            ("saved AOT compiled function", self._aot_saved),
            ("Directly load AOT compilation", self._aot_loaded),
            ("torch.compile ", self._compile_total),
            ("Initial profiling/warmup run took", self._warmup),
            ("Available KV cache memory:", self._available_kv),
            ("memory profiling run", self._xpu_memory),
            ("on startup", self._memory_summary),
            ("GiB for KV cache", self._cpu_kv),
            ("KV cache size:", self._kv_size),
            ("Maximum concurrency for", self._concurrency),
            ("Graph capturing finished", self._graph_capture),
            ("init engine (", self._init_engine),
            ("Starting vLLM ", self._server_start),
            ("Encoder cache will be initialized", self._encoder_cache),
            ("SpecDecoding metrics", self._spec_decoding),
            ("attention block size to", self._block_size),
            ("Padding mamba page size by", self._mamba_padding),
        ]

    # ---- driver -----------------------------------------------------------------------------

    def starts_anew(self, marker: str) -> bool:
        """True when a start marker opens a new start: this start already printed a marker of
        the same kind, or it already ended (ready, or failed with an error)."""
        s = self.s
        return marker in s.markers or s.ready or bool(s.candidates)

    def causes(self) -> list[dict[str, Any]]:
        """What may have ended this start (none when it became ready)."""
        return [] if self.s.ready else self.s.candidates

    def feed(self, v: _Line, marker: str | None = None) -> None:
        s, f = self.s, self.s.facts
        s.seen_lines = True
        if marker is not None:
            s.markers.add(marker)
        if v.ts is not None:
            s.last_ts = v.ts
            if f.first_log_ts is None:
                f.first_log_ts = v.ts
            s.last_log_ts = v.ts
        signal = _serving_signal(v)
        if signal is not None and not s.ready:
            self._flush_runtime()
            s.ready = True
            f.ready, f.ready_signal, f.ready_ts = True, signal, v.ts or s.last_ts
        msg = v.msg
        if v.uvicorn:
            if signal == "uvicorn_startup_complete":
                f.application_startup_complete = True
            elif not s.ready:
                self._errors(msg, v)
            else:
                self._runtime_line(v)
            return
        if not s.ready:
            self._phase(msg)
        s.closing_phase = None
        in_traceback = self._traceback(msg, v)
        # skip traceback frame/source lines: `raise ValueError("...")` is not the error itself
        if not s.ready and not (s.in_traceback and msg[:1] in " \t"):
            self._errors(msg, v)
        if not v.enveloped:
            return
        if s.ready and not in_traceback:
            self._runtime_line(v)
        tag_m = _TAG_RE.match(msg)
        tag = tag_m.group("tag") if tag_m else None
        body = msg[tag_m.end():] if tag_m else msg
        for needle, handler in self.rules:
            if needle in body:
                handler(body, tag, v.ts)
        if not s.ready and not (s.in_traceback and (msg[:1] in " \t" or msg.startswith("Traceback"))):
            self._warning(body, msg, v.level)

    def finish(self) -> StartupFacts:
        s, f = self.s, self.s.facts
        self._flush_runtime()
        if s.compile_by_graph:
            f.torch_compile_s_by_graph = dict(s.compile_by_graph)
            f.torch_compile_total_s = round(sum(s.compile_by_graph.values()), 2)
            f.torch_compile_total_source = "logged"
        elif f.aot_saved:
            span = _seconds_between(s.compile_warmup_ts, s.aot_saved_ts)
            if span is not None:
                f.torch_compile_total_s = span
                f.torch_compile_total_source = "log_timestamps"
        if s.warmup_by_graph:
            f.warmup_s = round(sum(s.warmup_by_graph.values()), 2)
        if f.compile_ranges or f.aot_saved or f.aot_loaded:
            hits = [r["cache_hit"] for r in f.compile_ranges]
            fresh = any(not h for h in hits) or bool(f.aot_saved)
            f.compile_cache_hit = not fresh
        if f.available_kv_cache_gib is None and f.cpu_kv_cache_gib is not None:
            f.available_kv_cache_gib = f.cpu_kv_cache_gib
        f.phase_reached = s.phase
        if s.candidates and not s.ready:
            f.error = dict(top_cause(s.candidates))
            f.error.pop("rank", None)
        return f

    def outcome(self, *, latest: bool) -> str:
        """``ready`` (reached serving, whatever was logged before), ``failed`` (an error and
        no readiness), else ``starting`` for the latest start and ``stopped`` for an earlier
        one."""
        f = self.s.facts
        if f.ready:
            return "ready"
        if f.error is not None:
            return "failed"
        return "starting" if latest else "stopped"

    # ---- errors and tracebacks ----------------------------------------------------------------

    def _traceback(self, msg: str, v: _Line) -> bool:
        """Track traceback blocks; return True when the line belongs to one."""
        s = self.s
        if msg.startswith("Traceback (most recent call last)"):
            s.in_traceback = True
            s.frame_phase = None
            return True
        if not s.in_traceback:
            return False
        if not msg or msg[0] in " \t" or msg.startswith(("During handling", "The above exception")):
            frame = _FRAME_RE.match(msg)
            if frame is not None:
                s.frame_phase = frame_phase(frame.group("file"), frame.group("func")) or s.frame_phase
            return True
        if _EXC_LINE_RE.match(msg) or _KNOWN_EXC_RE.match(msg):
            s.in_traceback = False
            text = msg.strip()[:_MAX_TEXT]
            if not s.ready:
                s.closing_phase = s.frame_phase
                self._candidate(classify(text, exception=True), v)
            else:
                context = s.pending_runtime["text"] if s.pending_runtime else None
                s.pending_runtime = None
                s.facts.runtime_errors.append({
                    "ts": v.ts or s.last_ts, "process": v.proc,
                    "kind": "out_of_memory" if _OOM_RE.search(msg) else "exception",
                    "text": text, "context": context})
            return True
        # an unrelated line inside a traceback block (interleaved output): keep waiting; an
        # enveloped line (a logger record) ends the block
        return not v.enveloped

    def _runtime_line(self, v: _Line) -> None:
        """After readiness: an ERROR/CRITICAL line outside a traceback is a runtime error; it is
        held as the context of the traceback that usually follows it."""
        if v.level not in ("ERROR", "CRITICAL"):
            self._flush_runtime()
            return
        self._flush_runtime()
        self.s.pending_runtime = {"ts": v.ts or self.s.last_ts, "process": v.proc, "kind": "error",
                                  "text": v.msg.strip()[:_MAX_TEXT], "context": None}

    def _flush_runtime(self) -> None:
        s = self.s
        if s.pending_runtime is not None and not s.in_traceback:
            s.facts.runtime_errors.append(s.pending_runtime)
            s.pending_runtime = None

    def _candidate(self, found: dict[str, Any] | None, v: _Line | None, phase: str | None = None) -> None:
        """Add what may have ended this start, stamped with the phase it happened in (the
        traceback's frames, else the last phase the log reached) and where the log was."""
        if found is None:
            return
        s = self.s
        if any(c["kind"] == found["kind"] and c["text"] == found["text"] for c in s.candidates):
            return
        found = dict(found)
        found["phase"] = phase or s.closing_phase or s.phase
        found["progress"] = s.progress if found["phase"] == s.phase else None
        found.setdefault("process", v.proc if v is not None else None)
        found.setdefault("ts", (v.ts if v is not None else None) or s.last_ts)
        found["hint"] = hint_for(found)
        s.candidates.append(found)

    def _errors(self, msg: str, v: _Line | None = None) -> None:
        s = self.s
        if v is None or v.level not in ("DEBUG", "INFO", "WARNING"):
            self._candidate(classify(msg), v)  # a native library's message, a killed process
        if any(c["rank"] >= RANK_SPECIFIC for c in s.candidates):
            return  # a specific error stands: the first wins
        err: dict[str, Any] | None = None
        if "max_model_len" in msg and "User-specified max_model_len" in msg:
            m = _MML_DERIVED_RE.search(msg)
            if m:
                err = _error("max_model_len_exceeds_derived", msg, int(m.group("d")), int(m.group("v")))
        elif "max seq len" in msg:
            m = _KV_SMALL_RE.search(msg)
            if m:
                est = _KV_SMALL_EST_RE.search(msg)
                err = _error("kv_cache_too_small", msg, int(est.group("n")) if est else None,
                             int(m.group("v")))
            else:
                m = _KV_SMALL_OLD_RE.search(msg)
                if m:
                    err = _error("kv_cache_too_small", msg, int(m.group("n")), int(m.group("v")))
        elif "is less than desired GPU memory utilization" in msg:
            m = _FREE_MEM_RE.search(msg)
            if m:
                free, total = float(m.group("free")), float(m.group("total"))
                suggested = math.floor(100.0 * free / total) / 100.0 if total > 0 else None
                err = _error("insufficient_free_memory", msg, suggested, float(m.group("util")))
        elif "address already in use" in msg.lower():
            err = _error("address_in_use", msg)
        elif "No available memory for the cache blocks" in msg:
            err = _error("no_kv_cache_memory", msg)
        elif "parser: " in msg and "chose from" in msg:
            m = _INVALID_PARSER_RE.search(msg)
            if m:
                names = [n.strip().strip("'\"") for n in m.group("names").split(",") if n.strip()]
                value = m.group("v").strip().strip("'\"")
                kind = "invalid_tool_call_parser" if m.group("what") == "tool call" else "invalid_reasoning_parser"
                err = _error(kind, msg, _closest(value, names), value, names)
        elif "requires --tool-call-parser" in msg:
            err = _error("auto_tool_choice_requires_parser", msg, None, "--enable-auto-tool-choice")
        elif "max_num_batched_tokens (" in msg:
            m = _MNBT_MML_RE.search(msg)
            if m:
                err = _error("max_num_batched_tokens_smaller_than_max_model_len", msg,
                             int(m.group("n")), int(m.group("v")))
            else:
                m = _MNBT_SEQS_RE.search(msg)
                if m:
                    err = _error("max_num_batched_tokens_smaller_than_max_num_seqs", msg,
                                 int(m.group("n")), int(m.group("v")))
        elif "does not allow any tokens to be scheduled" in msg:
            m = re.search(r"max_num_scheduled_tokens is set to (-?\d+)", msg)
            err = _error("max_num_scheduled_tokens_nonpositive", msg, None,
                         int(m.group(1)) if m else None)
        elif "must be divisible by n_predict" in msg:
            m = _SPEC_DIVISIBLE_RE.search(msg)
            if m:
                err = _error("num_speculative_tokens_not_divisible", msg, int(m.group("n")),
                             int(m.group("v")))
        elif "Mamba cache blocks" in msg or "mamba cache blocks" in msg:
            m = _MAMBA_BLOCKS_RE.search(msg)
            if m:
                err = _error("mamba_cache_blocks_too_few", msg, int(m.group("n")), int(m.group("v")))
        elif ": error: " in msg:
            m = _ARGPARSE_RE.search(msg)
            if m:
                rest = m.group("rest")
                if rest.startswith("unrecognized arguments: "):
                    err = _error("unrecognized_arguments", msg, None,
                                 rest[len("unrecognized arguments: "):].strip())
                else:
                    c = _INVALID_CHOICE_RE.search(rest)
                    if c:
                        raw_names = c.group("names")
                        names = re.findall(r"'([^']*)'", raw_names) or [
                            n.strip() for n in raw_names.split(",") if n.strip()]
                        arg, value = c.group("arg"), c.group("v")
                        kind = {"--tool-call-parser": "invalid_tool_call_parser",
                                "--reasoning-parser": "invalid_reasoning_parser"}.get(arg, "invalid_choice")
                        err = _error(kind, msg, _closest(value, names), value, names)
                    else:
                        err = _error("invalid_argument", msg)
        if err is not None:
            err["rank"] = RANK_SPECIFIC
            self._candidate(err, v)

    # ---- startup phases -----------------------------------------------------------------------

    def _phase(self, msg: str) -> None:
        """Follow the startup phase the log has reached (:data:`PHASE_MARKERS`) and the
        progress bars' counts (``8/14`` checkpoint shards, ``37/67`` graphs)."""
        s = self.s
        body = _TAG_RE.sub("", msg, count=1)
        for needle, phase in PHASE_MARKERS:
            if needle in body:
                if phase != s.phase:
                    s.progress = None
                s.phase = phase
                break
        m = _PROGRESS_RE.search(body)
        if m is not None and s.phase in _PROGRESS_UNITS:
            s.progress = f"{m.group('done')}/{m.group('total')} {_PROGRESS_UNITS[s.phase]}"

    # ---- warnings -----------------------------------------------------------------------------

    def _warning(self, body: str, msg: str, level: str | None) -> None:
        s = self.s
        wid: str | None = None
        for known_id, needle, regex in _KNOWN_WARNINGS:
            if needle in body:
                m = regex.search(body)
                if m:
                    wid = known_id
                    if known_id == "max_num_scheduled_tokens" and s.facts.max_num_scheduled_tokens_warning is None:
                        s.facts.max_num_scheduled_tokens_warning = int(m.group(1))
                    break
        if wid is None:
            if level not in ("WARNING", "ERROR", "CRITICAL"):
                return
            wid = "other"
        text = msg.strip()[:_MAX_TEXT]
        key = (wid, text)
        if key in s.seen_warnings:
            return
        s.seen_warnings.add(key)
        s.facts.warnings.append({"id": wid, "text": text, "level": level})

    # ---- startup facts ------------------------------------------------------------------------

    _LOGO_VERSION_RE = re.compile(r"[\u2580-\u259f].*\bversion\s+(?P<v>\d+\.\d+\S*)")
    _LOGO_MODEL_RE = re.compile(r"[\u2580-\u259f].*\bmodel\s+(?P<m>\S+)\s*$")
    _BANNER_RE = re.compile(r"vLLM (?:API )?server version (?P<v>[^\s,]+)(?:, serving model (?P<m>\S+))?")

    def _version(self, body: str, tag: str | None, ts: str | None) -> None:
        f = self.s.facts
        m = self._BANNER_RE.search(body)
        if m and f.vllm_version is None:
            f.vllm_version = m.group("v")
            if m.group("m") and f.model is None:
                f.model = m.group("m")
            return
        m = self._LOGO_VERSION_RE.search(body)
        if m and f.vllm_version is None:
            f.vllm_version = m.group("v")

    def _non_default_args(self, body: str, tag: str | None, ts: str | None) -> None:
        f = self.s.facts
        text = body.split("non-default args: ", 1)[1].strip()
        parsed = _parse_python_dict(text)
        if parsed is not None and f.non_default_args is None:
            f.non_default_args = parsed
            if f.model is None:
                model = parsed.get("model_tag") or parsed.get("model")
                if isinstance(model, str):
                    f.model = model

    _ENGINE_RE = re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[^)\s]+)\)")

    def _engine_version(self, body: str, tag: str | None, ts: str | None) -> None:
        m = self._ENGINE_RE.search(body)
        if m and self.s.facts.engine_version is None:
            self.s.facts.engine_version = m.group("v")

    def _max_model_len(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Using max model len (\d+)", body)
        if m and self.s.facts.max_model_len is None:
            self.s.facts.max_model_len = int(m.group(1))

    def _chunked_prefill(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)", body)
        if m and self.s.facts.chunked_prefill_max_num_batched_tokens is None:
            self.s.facts.chunked_prefill_max_num_batched_tokens = int(m.group(1))

    _LOAD_RE = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB(?: memory)? and (?P<s>[\d.]+) seconds")

    def _model_loading(self, body: str, tag: str | None, ts: str | None) -> None:
        m = self._LOAD_RE.search(body)
        f = self.s.facts
        if m and f.model_loading_gib is None:
            f.model_loading_gib = float(m.group("gib"))
            f.model_loading_s = float(m.group("s"))

    def _cache_dir(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Using cache directory: (\S+) for vLLM's torch\.compile", body)
        if m:
            name = m.group(1).rstrip("/").rsplit("/", 1)[-1]
            self.s.current_graph = None if re.fullmatch(r"rank_\d+(?:_\d+)*", name) else name

    def _range_of(self, m: re.Match[str]) -> str:
        if m.group("r"):
            return m.group("r")
        if m.group("shape"):
            return f"shape {m.group('shape')}"
        return "dynamic shape"

    def _compile(self, body: str, tag: str | None, ts: str | None) -> None:
        m = _COMPILE_RE.search(body)
        if m:
            self.s.facts.compile_ranges.append({
                "graph": tag or self.s.current_graph, "range": self._range_of(m),
                "compile_s": float(m.group("t")), "cache_hit": False})

    def _cache_load(self, body: str, tag: str | None, ts: str | None) -> None:
        m = _CACHE_LOAD_RE.search(body)
        if m:
            self.s.facts.compile_ranges.append({
                "graph": tag or self.s.current_graph, "range": self._range_of(m),
                "compile_s": float(m.group("t")), "cache_hit": True})

    def _aot_saved(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"saved AOT compiled function to (\S+)", body)
        if m:
            self.s.aot_saved_ts = ts
            self.s.facts.aot_saved.append({"graph": tag or self.s.current_graph, "path": m.group(1)})

    def _compile_warmup(self, body: str, tag: str | None, ts: str | None) -> None:
        # CPU builds (0.32 ``vllm/v1/worker/cpu_model_runner.py``) print no torch.compile times:
        # the compile runs between this line and "saved AOT compiled function" (decorators.py)
        if self.s.compile_warmup_ts is None:
            self.s.compile_warmup_ts = ts

    def _aot_loaded(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Directly load AOT compilation from path (\S+)", body)
        if m:
            self.s.facts.aot_loaded.append({"graph": tag or self.s.current_graph, "path": m.group(1)})

    _TOTAL_RE = re.compile(
        r"torch\.compile (?:(?:takes|took)|and initial profiling/warmup run together took) "
        r"(?P<t>[\d.]+) s in total")

    def _compile_total(self, body: str, tag: str | None, ts: str | None) -> None:
        m = self._TOTAL_RE.search(body)
        if m:
            self.s.compile_by_graph[tag or self.s.current_graph or "model"] = float(m.group("t"))

    def _warmup(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Initial profiling/warmup run took ([\d.]+) s", body)
        if m:
            self.s.warmup_by_graph[tag or self.s.current_graph or "model"] = float(m.group(1))

    def _available_kv(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Available KV cache memory: (" + _NUM + r") GiB", body)
        if m and self.s.facts.available_kv_cache_gib is None:
            self.s.facts.available_kv_cache_gib = float(m.group(1))

    _XPU_BEFORE_RE = re.compile(
        r"Before memory profiling run, total GPU memory: (?P<total>[\d.]+) MB, model load takes "
        r"(?P<load>[\d.]+) MB, free gpu memory is (?P<free>[\d.]+) MB")
    _XPU_AFTER_RE = re.compile(
        r"After memory profiling run, peak memory usage is (?P<peak>[\d.]+) MB, ?torch mem is "
        r"(?P<torch>[\d.]+) MB, non-torch mem is (?P<nt>[\d.]+) MB, free gpu memory is (?P<free>[\d.]+) MB")

    def _xpu_memory(self, body: str, tag: str | None, ts: str | None) -> None:
        f = self.s.facts
        m = self._XPU_BEFORE_RE.search(body)
        if m:
            f.total_memory_gib = _mb_to_gib(m.group("total"))
            f.free_memory_gib = _mb_to_gib(m.group("free"))
            f.weights_gib = _mb_to_gib(m.group("load"))
            return
        m = self._XPU_AFTER_RE.search(body)
        if m:
            f.peak_memory_gib = _mb_to_gib(m.group("peak"))
            f.non_torch_gib = _mb_to_gib(m.group("nt"))

    def _memory_summary(self, body: str, tag: str | None, ts: str | None) -> None:
        f = self.s.facts
        parts = {k: r.search(body) for k, r in _MEM_SUMMARY_PARTS.items()}
        if parts["free_total"] is None:
            return
        f.free_memory_gib = float(parts["free_total"].group("a"))
        f.total_memory_gib = float(parts["free_total"].group("b"))
        if parts["desired"]:
            f.gpu_memory_utilization = float(parts["desired"].group("a"))
            f.requested_memory_gib = float(parts["desired"].group("b"))
        for key, attr in (("weights", "weights_gib"), ("consumed", "consumed_memory_gib"),
                          ("peak", "peak_activation_gib"), ("non_torch", "non_torch_gib"),
                          ("cudagraph", "cudagraph_memory_gib")):
            if (m := parts[key]) is not None:
                setattr(f, attr, float(m.group("a")))

    def _cpu_kv(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Explicitly set \((?P<kv>[\d.]+)/(?P<avail>[\d.]+)\) GiB for KV cache", body)
        if m and self.s.facts.cpu_kv_cache_gib is None:
            self.s.facts.cpu_kv_cache_gib = float(m.group("kv"))

    _KV_SIZE_RE = re.compile(r"(?:(?P<dev>[A-Za-z]\w*)(?: \+ host)? )?KV cache size: (?P<tok>[\d,]+) tokens")
    _CONC_RE = re.compile(r"Maximum concurrency for (?P<per>[\d,]+) tokens per request: (?P<x>[\d.]+)x")

    def _kv_size(self, body: str, tag: str | None, ts: str | None) -> None:
        m = self._KV_SIZE_RE.search(body)
        f = self.s.facts
        if m and f.kv_cache_tokens is None:
            f.kv_cache_tokens = _i(m.group("tok"))
            f.kv_cache_device = m.group("dev")

    def _concurrency(self, body: str, tag: str | None, ts: str | None) -> None:
        m = self._CONC_RE.search(body)
        f = self.s.facts
        if m and f.max_concurrency is None:
            f.max_concurrency = float(m.group("x"))
            f.max_concurrency_tokens_per_request = _i(m.group("per"))

    def _graph_capture(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Graph capturing finished in (" + _NUM + r") secs?, took (" + _NUM + r") GiB", body)
        f = self.s.facts
        if m and f.graph_capture_s is None:
            f.graph_capture_s = float(m.group(1))
            f.graph_capture_gib = float(m.group(2))

    def _init_engine(self, body: str, tag: str | None, ts: str | None) -> None:
        m = _INIT_RE.search(body)
        f = self.s.facts
        if m and f.init_engine_s is None:
            f.init_engine_s = float(m.group("s"))
            f.init_engine_compilation_s = _f(m.group("c"))
            if m.group("parts"):
                f.init_engine_compilation_parts_s = {
                    k: float(v) for k, v in _PART_RE.findall(m.group("parts"))} or None

    def _server_start(self, body: str, tag: str | None, ts: str | None) -> None:
        m = _SERVER_START_RE.search(body)
        f = self.s.facts
        if m and not f.server_started:
            f.server_started = True
            f.server_address = m.group(1)
            f.server_start_ts = ts

    _BLOCK_RE = re.compile(r"Setting attention block size to (?P<n>\d+) tokens(?: (?P<why>.*?))?\.?$")

    def _block_size(self, body: str, tag: str | None, ts: str | None) -> None:
        # vllm/platforms/interface.py (hybrid models: "to ensure that attention page size is >=
        # mamba page size"; a quantized primary KV page) and vllm/platforms/xpu.py ("[XPU]...
        # to ensure multiple of N"): the engine raised the KV block size; the last line wins
        m = self._BLOCK_RE.search(body)
        if m:
            f = self.s.facts
            f.attention_block_size_tokens = int(m.group("n"))
            why = (m.group("why") or "").strip()
            f.attention_block_size_reason = why or None
            if "mamba" in why:
                f.hybrid_model = True

    def _mamba_padding(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Padding mamba page size by ([\d.]+)%", body)
        if m:
            self.s.facts.mamba_page_padding_pct = float(m.group(1))
            self.s.facts.hybrid_model = True

    def _encoder_cache(self, body: str, tag: str | None, ts: str | None) -> None:
        m = re.search(r"Encoder cache will be initialized with a budget of ([\d,]+) tokens", body)
        if m and self.s.facts.encoder_cache_budget_tokens is None:
            self.s.facts.encoder_cache_budget_tokens = _i(m.group(1))

    def _spec_decoding(self, body: str, tag: str | None, ts: str | None) -> None:
        m = _SPEC_RE.search(body)
        if not m:
            return
        depth = _SPEC_DEPTH_RE.search(body)
        tp = _SPEC_TP_RE.search(body)
        per_pos: list[float] = []
        for item in m.group("pp").split(","):
            item = item.strip()
            try:
                per_pos.append(float(item))
            except ValueError:
                continue
        mal, avg = m.group("mal"), m.group("avg")
        self.s.facts.spec_decoding.append({
            "ts": ts,
            "mean_acceptance_length": None if mal == "nan" else float(mal),
            "speculative_depth": int(depth.group(1)) if depth else None,
            "accepted_tok_s": float(tp.group(1)) if tp else None,
            "drafted_tok_s": float(tp.group(2)) if tp else None,
            "accepted_tokens": int(m.group("acc")),
            "drafted_tokens": int(m.group("dr")),
            "per_position_acceptance_rate": per_pos,
            "avg_draft_acceptance_rate_pct": None if avg == "nan" else float(avg),
        })


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

def parse_startup_log(text: str) -> StartupFacts:
    """Parse the text of a vLLM server log (container output, possibly several starts).

    Args:
        text: the whole log; ``\\r`` (tqdm) and ``\\n`` both end a line; ANSI colour is ignored.

    Returns:
        :class:`StartupFacts` of the latest start (the container's current state), with
        ``starts`` / ``restart_count`` describing every start (see the module docstring).
        ``error`` is set for a failed start (only from lines before the server became ready,
        see :func:`serving_signal`): ``kind`` is one of
        ``max_model_len_exceeds_derived`` (suggested_value = derived max), ``kv_cache_too_small``
        (suggested_value = the estimated maximum model length), ``no_kv_cache_memory``,
        ``insufficient_free_memory`` (value = the gpu_memory_utilization asked for,
        suggested_value = the free fraction of device memory, rounded down to 0.01),
        ``invalid_tool_call_parser`` / ``invalid_reasoning_parser`` (value = the bad name,
        valid_values = the names vLLM offered, suggested_value = the closest of them),
        ``invalid_choice``, ``invalid_argument``, ``unrecognized_arguments`` (value = the
        arguments), ``auto_tool_choice_requires_parser``,
        ``max_num_batched_tokens_smaller_than_max_model_len`` /
        ``..._smaller_than_max_num_seqs`` (suggested_value = the lower bound),
        ``max_num_scheduled_tokens_nonpositive``, ``num_speculative_tokens_not_divisible``,
        ``address_in_use``, ``out_of_memory``, ``exception`` (text = the exception line ending the first traceback
        that is not the engine-core wrapper) or ``engine_core_init_failed``. Errors after
        readiness go to ``runtime_errors`` instead.

    Never raises on malformed input: unknown lines are ignored. Runs in one linear pass.
    """
    parsers = [_Parser()]
    for raw in text.splitlines():
        v = _read_line(raw)
        if v is None:
            continue
        marker = _start_marker(v)
        if marker is not None and parsers[-1].s.seen_lines and parsers[-1].starts_anew(marker):
            parsers.append(_Parser())
        parsers[-1].feed(v, marker)
    all_facts = [p.finish() for p in parsers]
    current = all_facts[-1]
    current.causes = _jsonable(rank_causes([p.causes() for p in parsers]))
    current.root_cause = current.causes[0] if current.causes else None
    if parsers[-1].s.seen_lines:
        current.starts = [_start_record(i, p, latest=i == len(parsers))
                          for i, p in enumerate(parsers, start=1)]
        current.restart_count = len(parsers) - 1
    return current


_START_FACTS = ("vllm_version", "non_default_args", "kv_cache_tokens", "max_concurrency",
                "free_memory_gib", "torch_compile_total_s", "init_engine_s")


def _start_record(index: int, parser: "_Parser", *, latest: bool) -> dict[str, Any]:
    f = parser.s.facts
    record: dict[str, Any] = {
        "index": index, "outcome": parser.outcome(latest=latest), "first_log_ts": f.first_log_ts,
        "last_log_ts": parser.s.last_log_ts, "ready_ts": f.ready_ts, "ready_signal": f.ready_signal,
        "error": f.error, "runtime_errors": list(f.runtime_errors)}
    for name in _START_FACTS:
        record[name] = _jsonable(getattr(f, name))
    return record


def parse_startup_log_file(path: str | Path) -> StartupFacts:
    """Read ``path`` (UTF-8, undecodable bytes replaced) and :func:`parse_startup_log` it.

    Raises:
        OSError: when the file cannot be read.
    """
    return parse_startup_log(Path(path).read_text(encoding="utf-8", errors="replace"))


def record_facts(stored: dict[str, Any] | None, log_text: str | None) -> dict[str, Any]:
    """The startup facts of a recorded run: what was recorded, completed from the log.

    Args:
        stored: the run's ``startup.json`` (``None`` when it has none).
        log_text: the run's ``startup.log`` (``None`` when it has none).

    Returns:
        ``stored``, with every key it lacks or left empty (``None``, ``[]``, ``{}``) filled
        from this version of the parser's reading of the log, so a record written by an
        earlier version gains the facts that version missed (e.g. the CPU compile time) while
        nothing recorded is contradicted. Without a log, ``stored`` (or ``{}``). Never raises.
    """
    out = dict(stored or {})
    if log_text is None:
        return out
    for key, value in parse_startup_log(log_text).to_dict().items():
        if out.get(key) in (None, [], {}):
            out[key] = value
    return out
