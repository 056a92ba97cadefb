"""What ended a vLLM start: the kinds of cause a startup log shows, ranked so the cause wins
over the wrappers that report it, the startup phase each happened in, and a fix hint per kind.

:mod:`servedeck.vllm.startup_log` collects candidates while it reads a start (each error line,
each exception ending a traceback, each process that died by a signal) and the start's
``error`` is the highest ranked one; :func:`rank_causes` ranks them over every start in a log.

Ranks, highest first (:data:`RANKS`):

1. vLLM's own errors about a setting (``kv_cache_too_small``, ``mamba_cache_blocks_too_few``,
   ``invalid_tool_call_parser``, ...): their numbers are the fix.
2. ``out_of_memory`` (the device's: ``torch.OutOfMemoryError``, Level Zero / Unified Runtime
   ``OUT_OF_DEVICE_MEMORY``) and ``host_out_of_memory`` (``MemoryError``, ``std::bad_alloc``,
   ``Cannot allocate memory``, Ray's ``OutOfMemoryError`` of a node low on memory).
3. Native libraries: ``ccl_error`` (oneCCL), ``level_zero_error`` (Level Zero ``ZE_RESULT_*``,
   Unified Runtime ``UR_RESULT_*``, SYCL ``PI_ERROR_*``), ``nccl_error``, ``cuda_error``,
   ``native_abort`` (C++ ``terminate called ...`` / ``what():``, ``Fatal Python error``).
4. ``killed_by_signal``: a process whose exit code is ``-N`` (Python multiprocessing: killed by
   signal N) or that the shell reports killed; with no Python error of its own it is the cause
   (``-9`` SIGKILL: the kernel's OOM killer or a memory limit).
5. ``exception``: any other exception ending a traceback.
6. Wrappers that point elsewhere: ``engine_core_init_failed`` ("Engine core initialization
   failed. See root cause above"), ``worker_failed`` (its quoted error is classified first),
   ``process_died`` ("Engine core proc EngineCore_DP0 died unexpectedly", "Worker proc ... died
   unexpectedly": a process killed without a word, vllm-project/vllm PR #21443).

Phases (:data:`PHASES`), in startup order: ``config``, ``engine init``, ``weights``,
``compile``, ``profiling``, ``kv cache``, ``graph capture``, ``sampler warm-up``,
``api server``. Sources: vLLM 0.10.2 to 0.33.0 (``vllm/v1/worker/gpu_model_runner.py``,
``gpu_worker.py``, ``vllm/v1/engine/core.py``, ``vllm/v1/engine/utils.py``,
``vllm/v1/executor/multiproc_executor.py``, ``vllm/config/compilation.py``), oneCCL's and the
Level Zero loader's messages, CPython's ``multiprocessing`` exit codes.
"""

from __future__ import annotations

import ast
import re
import signal as _signal
from typing import Any

PHASES = ("config", "engine init", "weights", "compile", "profiling", "kv cache", "graph capture",
          "sampler warm-up", "api server")

#: (message text, the phase that line shows the start in), first match wins; vLLM 0.10.2-0.33.0
PHASE_MARKERS: tuple[tuple[str, str], ...] = (
    ("non-default args", "config"),
    ("Initializing a V1 LLM engine", "engine init"),
    ("Starting to load model", "weights"),
    ("Loading safetensors checkpoint shards", "weights"),
    ("Loading pt checkpoint shards", "weights"),
    ("Loading weights took", "weights"),
    ("Loading model from", "weights"),
    ("Model loading took", "profiling"),     # next: the profiling run (it compiles first)
    ("Starting torch.compile", "compile"),
    ("Dynamo bytecode transform", "compile"),
    ("Compiling a graph for", "compile"),
    ("Directly load the compiled graph", "compile"),
    ("Warming up model for the compilation", "compile"),
    ("torch.compile took", "profiling"),
    ("torch.compile takes", "profiling"),
    ("Initial profiling/warmup run took", "profiling"),
    ("memory profiling run", "profiling"),
    ("Free memory on device", "kv cache"),
    ("Available KV cache memory", "kv cache"),
    ("GiB for KV cache", "kv cache"),
    ("KV cache size:", "kv cache"),
    ("Capturing CUDA graphs", "graph capture"),
    ("Capturing XPU graphs", "graph capture"),
    ("Capturing graphs", "graph capture"),
    ("Graph capturing finished", "sampler warm-up"),   # next: the sampler's warm-up run
    ("init engine (", "api server"),
    ("Starting vLLM ", "api server"),
)

#: phase → what its progress bar counts
PROGRESS_UNITS = {"weights": "checkpoint shards", "graph capture": "graphs", "compile": "graphs"}
PROGRESS_RE = re.compile(r"\|\s*(?P<done>\d+)/(?P<total>\d+)\s*\[")

#: traceback frames (function names, or parts of the file path) → the phase they run in
_FRAME_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(?:_?dummy_sampler_run)$"), "sampler warm-up"),
    (re.compile(r"^(?:capture_model|_capture_cudagraphs|capture_graphs?|_capture_graphs?)$"), "graph capture"),
    (re.compile(r"cuda_graph\.py$|xpu_graph\.py$"), "graph capture"),
    (re.compile(r"^(?:initialize_kv_cache\w*|_initialize_kv_caches|_allocate_kv_cache_tensors|"
                r"_reshape_kv_cache_tensors|get_kv_cache_configs?|check_enough_kv_cache_memory|"
                r"resolve_cudagraph_mode_and_sizes|determine_available_memory|"
                r"initialize_from_config)$"), "kv cache"),
    (re.compile(r"torch/_(?:dynamo|inductor)/|vllm/compilation/(?!cuda_graph)"), "compile"),
    (re.compile(r"^(?:profile_run|_dummy_run|profile)$"), "profiling"),
    (re.compile(r"^(?:load_model|load_weights|_load_weights|get_model|initialize_model|"
                r"download_model|load_checkpoint)$|model_loader/"), "weights"),
)

#: the ranks (higher wins; the first in the log wins a tie)
RANK_SPECIFIC, RANK_OOM, RANK_NATIVE, RANK_SIGNAL, RANK_EXCEPTION, RANK_WRAPPER = 100, 90, 80, 70, 50, 10
RANKS = {"out_of_memory": RANK_OOM, "host_out_of_memory": RANK_OOM, "ccl_error": RANK_NATIVE,
         "level_zero_error": RANK_NATIVE, "nccl_error": RANK_NATIVE, "cuda_error": RANK_NATIVE,
         "native_abort": RANK_NATIVE, "killed_by_signal": RANK_SIGNAL, "exception": RANK_EXCEPTION,
         "engine_core_init_failed": RANK_WRAPPER, "worker_failed": RANK_WRAPPER, "process_died": RANK_WRAPPER}

_DEVICE_OOM_RE = re.compile(r"(?i)\b(?:CUDA|XPU|HIP|MPS|NPU|device) out of memory|OutOfMemoryError|"
                            r"OUT_OF_DEVICE_MEMORY|UR_RESULT_ERROR_OUT_OF_RESOURCES|PI_ERROR_OUT_OF_RESOURCES|"
                            r"out of memory occurred when warming up sampler")
_HOST_OOM_RE = re.compile(r"\bMemoryError\b|std::bad_alloc|Cannot allocate memory|OUT_OF_HOST_MEMORY")
# Ray's memory monitor kills a task when the node (the container's limit) runs low on RAM
_RAY_OOM_RE = re.compile(r"ray\.exceptions\.OutOfMemoryError|node running low on memory")
_CCL_RE = re.compile(r"oneCCL:|\|CCL_(?:ERROR|FATAL)\||\bccl::|CCL_ERROR")
_ZE_RE = re.compile(r"\b(?:ZE_RESULT_ERROR_\w+|UR_RESULT_ERROR_\w+|PI_ERROR_\w+)|level_zero backend failed|"
                    r"(?i:level[ _]zero)\b.*\b(?:error|failed)")
_NCCL_RE = re.compile(r"\bNCCL error\b|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|"
                      r"ncclInvalidUsage|ncclRemoteError|DistBackendError")
_CUDA_RE = re.compile(r"\bCUDA error: |CUDA driver initialization failed|cudaErrorNoKernelImageForDevice|"
                      r"no kernel image is available|\bCUBLAS_STATUS_\w+")
_ABORT_RE = re.compile(r"terminate called (?:after throwing an instance of '[^']+'|without an active exception)|"
                       r"^\s*what\(\):\s+\S|Fatal Python error: \w+")
_WRAPPER_RE = re.compile(r"Engine core initialization failed|WorkerProc initialization failed|"
                         r"Engine process failed to start|EngineDeadError|died unexpectedly")
_WORKER_FAILED_RE = re.compile(r"Worker failed with error '(?P<inner>.*)', please check the stack trace")
_FAILED_PROCS_RE = re.compile(r"Failed core proc\(s\): (?P<procs>\{.*?\})")
_EXITCODE_RE = re.compile(r"(?P<proc>[\w.-]+)?\s*(?:exitcode|exit code|exited with code)[=: ]+(?P<code>-\d+)")
# bash's report of a child killed by a signal: "Killed", "/entrypoint.sh: line 12:    27 Killed   CMD"
_SHELL_SIGNAL_RE = re.compile(r"^(?:\S+: line \d+:\s+)?(?:\d+\s+)?(?P<what>Killed|Aborted|Segmentation fault|"
                              r"Bus error|Illegal instruction|Floating point exception)(?: \(core dumped\))?(?:\s|$)")
_SHELL_SIGNALS = {"Killed": 9, "Aborted": 6, "Segmentation fault": 11, "Bus error": 7,
                  "Illegal instruction": 4, "Floating point exception": 8}
_SIGNAL_MEANING = {
    9: "most likely the kernel's OOM killer (the container's memory limit or the host's RAM), or "
       "`docker kill` / a stop timeout",
    6: "a native library aborted (look for `terminate called` / `what():` above)",
    11: "a segmentation fault in native code: a driver, kernel or extension",
    7: "a bus error: most often /dev/shm too small for the workers' shared memory",
    15: "something stopped it (`docker stop`, the orchestrator, a health check)",
    4: "an illegal instruction: the build needs CPU instructions this host lacks",
    8: "an arithmetic fault in native code",
}


def frame_phase(path: str, func: str) -> str | None:
    """The phase a traceback frame runs in (file path and function name), or None."""
    for pattern, phase in _FRAME_PHASES:
        if pattern.search(func) or pattern.search(path):
            return phase
    return None


def _signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _failed_procs(text: str) -> list[tuple[str, int]]:
    """``Failed core proc(s): {'EngineCore_DP0': -9}`` (vLLM 0.11+ ``wait_for_engine_startup``)
    and ``... exitcode=-9`` → [(process, exit code)]."""
    m = _FAILED_PROCS_RE.search(text)
    out: list[tuple[str, int]] = []
    if m is not None:
        try:
            procs = ast.literal_eval(m.group("procs"))
        except (ValueError, SyntaxError):
            procs = {}
        if isinstance(procs, dict):
            out += [(str(k), v) for k, v in procs.items() if isinstance(v, int)]
    for e in _EXITCODE_RE.finditer(text):
        out.append((e.group("proc") or "a process", int(e.group("code"))))
    return out


def classify(text: str, *, exception: bool = False) -> dict[str, Any] | None:
    """The cause one log line (or, with ``exception``, the line ending a traceback) shows, as a
    candidate ``{"kind", "text", "rank", "value", "suggested_value", "valid_values"}`` plus
    ``signal``/``exit_code`` for a killed process; None for a line that shows none.

    A wrapper quoting another error (``Worker failed with error '...'``) is classified by what
    it quotes; an exception line that matches no kind is ``exception``."""
    line = text.strip()
    inner = _WORKER_FAILED_RE.search(line)
    if inner is not None:
        quoted = classify(inner.group("inner"), exception=True)
        if quoted is not None and quoted["kind"] != "exception":
            return {**quoted, "text": line}
    procs = [(p, c) for p, c in _failed_procs(line) if c < 0]
    if procs:
        proc, code = procs[0]
        meaning = _SIGNAL_MEANING.get(-code, "")
        return _cand("killed_by_signal", f"{proc} exited with code {code}: killed by signal {-code} "
                     f"({_signal_name(-code)}) and printed no error of its own" + (f"; {meaning}" if meaning else ""),
                     value=code, signal=_signal_name(-code), exit_code=code, killed=proc, line=line)
    shell = _SHELL_SIGNAL_RE.match(line) if not exception else None
    if shell is not None:
        number = _SHELL_SIGNALS[shell.group("what")]
        meaning = _SIGNAL_MEANING.get(number, "")
        return _cand("killed_by_signal", f"the server process was killed by signal {number} "
                     f"({_signal_name(number)})" + (f"; {meaning}" if meaning else ""),
                     value=-number, signal=_signal_name(number), exit_code=-number, line=line)
    if _RAY_OOM_RE.search(line):
        return _cand("host_out_of_memory", line)
    if _DEVICE_OOM_RE.search(line):
        return _cand("out_of_memory", line)
    if _HOST_OOM_RE.search(line):
        return _cand("host_out_of_memory", line)
    for kind, pattern in (("ccl_error", _CCL_RE), ("level_zero_error", _ZE_RE), ("nccl_error", _NCCL_RE),
                          ("cuda_error", _CUDA_RE), ("native_abort", _ABORT_RE)):
        if pattern.search(line):
            return _cand(kind, line)
    if _WRAPPER_RE.search(line):
        kind = ("engine_core_init_failed" if "Engine core initialization" in line
                or "Engine process failed to start" in line else
                "process_died" if "died unexpectedly" in line else "worker_failed")
        return _cand(kind, line)
    if exception:
        return _cand("exception", line)
    return None


def _cand(kind: str, text: str, **extra: Any) -> dict[str, Any]:
    out = {"kind": kind, "text": text[:2000], "rank": RANKS[kind], "suggested_value": None, "value": None,
           "valid_values": None}
    out.update(extra)
    return out


def top_cause(candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """The highest ranked candidate; the first in the log among equals."""
    best = max(c.get("rank", RANK_SPECIFIC) for c in candidates)
    return next(c for c in candidates if c.get("rank", RANK_SPECIFIC) == best)


def rank_causes(starts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every start's candidates ranked together: highest rank first, then the earlier start,
    then log order; each with its 1-based ``start``. A later start's failure is often a
    consequence of an earlier one (a port still held, a half-written cache), so among equal
    ranks the first start's cause leads."""
    flat = [{**c, "start": i} for i, cands in enumerate(starts, start=1) for c in cands]
    order = {id(c): n for n, c in enumerate(flat)}
    return sorted(flat, key=lambda c: (-c.get("rank", RANK_SPECIFIC), c["start"], order[id(c)]))


_OOM_HINTS = {
    "weights": "the weights alone do not fit the device: more GPUs (--tensor-parallel-size), a "
               "quantized checkpoint or a smaller model; --gpu-memory-utilization cannot help",
    "compile": "the compile's warm-up batch did not fit: lower --max-num-batched-tokens, or skip "
               "the compile with --enforce-eager (slower decode)",
    "profiling": "the profiling run's batch did not fit beside the weights: lower "
                 "--max-num-batched-tokens (and --max-num-seqs), or free the device of other processes",
    "kv cache": "the KV cache allocation did not fit: lower --gpu-memory-utilization (or "
                "--kv-cache-memory-bytes) so the pool leaves room, or free the device of other processes",
    "graph capture": "capturing graphs needs memory the profiler did not set aside: lower --max-num-seqs "
                     "or compilation_config.max_cudagraph_capture_size (fewer, smaller graphs), leave "
                     "headroom with a lower --gpu-memory-utilization, or --enforce-eager (no graphs)",
    "sampler warm-up": "the sampler's warm-up with max_num_seqs dummy requests did not fit: lower "
                       "--max-num-seqs or --gpu-memory-utilization",
}

_HINTS = {
    "max_model_len_exceeds_derived": "set --max-model-len to at most {suggested_value} (the model's own limit)",
    "kv_cache_too_small": "set --max-model-len to at most {suggested_value}, or raise "
                          "--gpu-memory-utilization / lower other memory use so the KV pool holds {value} tokens",
    "mamba_cache_blocks_too_few": "set --max-num-seqs to at most {suggested_value} (each decoding sequence "
                                  "of a hybrid model holds one Mamba cache block), or lower --max-model-len / "
                                  "raise --gpu-memory-utilization so more blocks fit",
    "no_kv_cache_memory": "nothing is left for the KV cache after weights and activations: raise "
                          "--gpu-memory-utilization, lower --max-num-batched-tokens, or use more GPUs",
    "insufficient_free_memory": "other processes hold device memory: free it, or set "
                                "--gpu-memory-utilization to at most {suggested_value}",
    "invalid_tool_call_parser": "use one of the release's tool-call parsers (closest: {suggested_value})",
    "invalid_reasoning_parser": "use one of the release's reasoning parsers (closest: {suggested_value})",
    "invalid_choice": "use one of the choices vLLM lists (closest: {suggested_value})",
    "invalid_argument": "fix the argument vLLM's parser names",
    "unrecognized_arguments": "drop or rename {value}: this vLLM release does not know it (servedeck check "
                              "names the release's spelling)",
    "auto_tool_choice_requires_parser": "add --tool-call-parser NAME beside --enable-auto-tool-choice",
    "max_num_batched_tokens_smaller_than_max_model_len": "raise --max-num-batched-tokens to at least "
                                                         "{suggested_value}, or enable chunked prefill",
    "max_num_batched_tokens_smaller_than_max_num_seqs": "raise --max-num-batched-tokens to at least "
                                                        "{suggested_value}, or lower --max-num-seqs",
    "max_num_scheduled_tokens_nonpositive": "set max_num_scheduled_tokens to a positive number, or leave it unset",
    "num_speculative_tokens_not_divisible": "make num_speculative_tokens a multiple of {suggested_value}",
    "address_in_use": "another process holds the port: stop it (an earlier container?) or change --port and "
                      "the published port",
    "host_out_of_memory": "the container or host ran out of RAM: raise the container's memory limit "
                          "(mem_limit / deploy.resources.limits.memory) or lower host RAM use "
                          "(--swap-space, --cpu-offload-gb, fewer loading workers)",
    "ccl_error": "oneCCL failed to set up the device exchange between workers: in a container, mount "
                 "/dev/dri/by-path (-v /dev/dri/by-path:/dev/dri/by-path) beside the /dev/dri devices, keep "
                 "ipc: host, and check the CCL_* variables",
    "level_zero_error": "the Level Zero / Unified Runtime call failed: DEVICE_LOST means a GPU reset (check "
                        "dmesg and the driver), UNSUPPORTED_* a driver older than the image expects",
    "nccl_error": "NCCL failed between GPUs: ipc: host (or a large shm_size), every GPU visible to the "
                  "container, NCCL_P2P_DISABLE=1 on GPUs without P2P; NCCL_DEBUG=INFO tells more",
    "cuda_error": "a CUDA error: 'no kernel image' means the build lacks this GPU's architecture; check the "
                  "driver against the image's CUDA; CUDA_LAUNCH_BLOCKING=1 locates it",
    "native_abort": "a native library aborted: the what() text names it; check the driver and the image's "
                    "runtime versions",
    "exception": "vLLM's own exception: its text is the cause",
    "engine_core_init_failed": "the engine process failed and the log shows no cause of its own: read "
                               "the lines before, or start again with VLLM_LOGGING_LEVEL=DEBUG",
    "worker_failed": "a worker process failed: its own error is above in the log",
    "process_died": "the process died without an error of its own: unless an error stands above, it was "
                    "killed, most likely by the kernel's OOM killer (a container memory limit or host RAM): "
                    "`docker inspect` shows OOMKilled, dmesg names it; raise mem_limit / "
                    "deploy.resources.limits.memory",
}

_SIGNAL_HINTS = {
    9: "raise the container's memory limit (mem_limit / deploy.resources.limits.memory) or free host "
       "memory; `docker inspect` shows OOMKilled and the kernel log (dmesg) names the killed process",
    6: "read the native error above it (terminate called / what()); check driver and runtime versions",
    11: "check the driver and kernel versions the image expects; a core dump locates it",
    7: "give the container a larger /dev/shm (shm_size) or ipc: host",
    15: "find what stopped the container (docker events, the orchestrator's health checks)",
    4: "use an image built for this CPU (or a host with the instructions it needs)",
}


def hint_for(error: dict[str, Any]) -> str:
    """The fix hint for an error (``kind``, ``phase``, ``value``, ``suggested_value``)."""
    kind = error.get("kind")
    if kind == "out_of_memory":
        return _OOM_HINTS.get(error.get("phase") or "", "the device ran out of memory: lower "
                              "--gpu-memory-utilization, --max-num-seqs or --max-model-len")
    if kind == "killed_by_signal":
        code = error.get("exit_code")
        return _SIGNAL_HINTS.get(-code if isinstance(code, int) else 0, "find what sent the signal")
    text = _HINTS.get(str(kind), "")
    try:
        return text.format(**{k: ("?" if v is None else v) for k, v in error.items()})
    except (KeyError, IndexError):
        return text


__all__ = ["PHASES", "PHASE_MARKERS", "PROGRESS_RE", "PROGRESS_UNITS", "RANKS", "RANK_SPECIFIC", "classify",
           "frame_phase", "hint_for", "rank_causes", "top_cause"]
