"""The startup-log reader finds the cause (issue 30, item 4): field cases 50, 52 and 54
(tests/fixtures/cases/field-3, copies of the handed cases) and variants of their kinds.

- a process killed by a signal: the exit code in vLLM's wrapper (``Failed core proc(s):
  {'EngineCore_DP0': -9}``), the shell's words, each signal's meaning and fix;
- native library errors (oneCCL, Level Zero / Unified Runtime, NCCL, CUDA, C++ terminate) above
  the Python wrappers that report them;
- out of memory with the startup phase it happened in (frames, progress bars, the last line);
- hybrid models: max_num_seqs above the Mamba cache blocks (the number that fits), the
  attention block size the engine set, and where it defeats prefix caching;
- ranking over every start in a log.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servedeck.vllm.startup_facts import prefix_caching_reach, summarize
from servedeck.vllm.startup_log import parse_startup_log, parse_startup_log_file

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "field-3"
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _meta(name: str) -> dict[str, str]:
    out = {}
    for line in (CASES / name).read_text().splitlines():
        m = re.match(r"#\s*([a-z-]+):\s*(.*)", line)
        if m and m[1] not in out:
            out[m[1]] = m[2].strip()
    return out


def _words(error: dict) -> str:
    return f"{error['kind']} {error['text']} {error.get('hint') or ''} {error.get('phase') or ''}".lower()


# ----------------------------------------------------------------------------- the handed cases

@pytest.mark.parametrize("log,kind,value,suggested,phase,progress", [
    ("50-engine-sigkill-no-traceback.log", "killed_by_signal", -9, None, "weights", "8/14 checkpoint shards"),
    ("52-mamba-cache-blocks-below-max-num-seqs.log", "mamba_cache_blocks_too_few", 256, 173, "kv cache", None),
    ("54-oom-during-cuda-graph-capture.log", "out_of_memory", None, None, "graph capture", "37/67 graphs"),
])
def test_each_case_gives_its_cause_phase_and_fix(log, kind, value, suggested, phase, progress):
    f = parse_startup_log_file(CASES / log)
    meta = _meta(log.replace(".log", ".meta.yml"))
    assert not f.ready and f.error is not None
    e = f.error
    assert (e["kind"], e["value"], e["suggested_value"], e["phase"], e["progress"]) == \
        (kind, value, suggested, phase, progress)
    for word in meta["must-mention"].split(","):
        assert word.strip().lower() in _words(e), (word, e)
    assert e["hint"] and f.root_cause["kind"] == kind
    text = dict(summarize(f))["error"]
    assert text.startswith(kind) and f"during {phase}" in text and "fix: " in text


def test_case_50_names_the_killed_process_and_the_signal():
    e = parse_startup_log_file(CASES / "50-engine-sigkill-no-traceback.log").error
    assert (e["killed"], e["signal"], e["exit_code"]) == ("EngineCore_DP0", "SIGKILL", -9)
    assert "EngineCore_DP0" in e["text"] and "-9" in e["text"] and "SIGKILL" in e["text"]
    assert "mem_limit" in e["hint"] and "deploy.resources.limits.memory" in e["hint"]


def test_case_54_keeps_the_kv_facts_and_the_graph_capture_fixes():
    f = parse_startup_log_file(CASES / "54-oom-during-cuda-graph-capture.log")
    assert f.kv_cache_tokens == 42272
    assert "--max-num-seqs" in f.error["hint"] and "--enforce-eager" in f.error["hint"]
    assert "quantized" not in f.error["hint"]  # the weights-phase fixes do not apply here


def test_case_52_reads_the_hybrid_block_facts():
    f = parse_startup_log_file(CASES / "52-mamba-cache-blocks-below-max-num-seqs.log")
    assert (f.attention_block_size_tokens, f.mamba_page_padding_pct, f.hybrid_model) == (784, 0.13, True)
    assert "mamba page size" in f.attention_block_size_reason
    assert "784 tokens per KV block" in dict(summarize(f))["attention block"]


# ----------------------------------------------------------------------------- signals

def _engine_log(tail: str, before: str = "") -> str:
    return ("(APIServer pid=1) INFO 11-27 14:02:11 [startup.py:88] vLLM server version 0.33.0, serving model /m\n"
            "(EngineCore pid=96) INFO 11-27 14:02:29 [gpu_model_runner.py:4701] Starting to load model /m...\n"
            + before + tail + "\n")


WRAPPER = ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
           "Failed core proc(s): {{'EngineCore_DP0': {code}}}")


@pytest.mark.parametrize("code,signal,words", [
    (-9, "SIGKILL", ["oom killer", "memory limit"]),
    (-6, "SIGABRT", ["native library"]),
    (-11, "SIGSEGV", ["segmentation fault"]),
    (-7, "SIGBUS", ["/dev/shm"]),
    (-15, "SIGTERM", ["stop"]),
])
def test_each_signal_gets_its_meaning_and_fix(code, signal, words):
    e = parse_startup_log(_engine_log(WRAPPER.format(code=code))).error
    assert (e["kind"], e["signal"], e["exit_code"]) == ("killed_by_signal", signal, code)
    for w in words:
        assert w in _words(e), (w, e)


def test_a_positive_exit_code_points_at_the_python_error_above():
    log = _engine_log(WRAPPER.format(code=1), before=(
        "(EngineCore pid=96) ERROR 11-27 14:02:40 [core.py:1136] Traceback (most recent call last):\n"
        '(EngineCore pid=96) ERROR 11-27 14:02:40 [core.py:1136]   File "/x/vllm/v1/engine/core.py", line 1, in run\n'
        "(EngineCore pid=96) ERROR 11-27 14:02:40 [core.py:1136] KeyError: 'model.layers.0.mlp.gate'\n"))
    e = parse_startup_log(log).error
    assert e["kind"] == "exception" and "KeyError" in e["text"] and e["phase"] == "weights"


@pytest.mark.parametrize("line,code", [
    ("Killed", -9),
    ("/entrypoint.sh: line 12:    27 Killed                  python3 -m vllm.entrypoints.openai.api_server", -9),
    ("Bus error (core dumped)", -7),
    ("Segmentation fault (core dumped)", -11),
])
def test_the_shells_words_for_a_killed_server(line, code):
    e = parse_startup_log(_engine_log(line)).error
    assert (e["kind"], e["exit_code"]) == ("killed_by_signal", code)


def test_the_existing_killed_fixture_is_a_kill_not_the_wrapper():
    e = parse_startup_log_file(LOGS / "fail-0.33-engine-killed.log").error
    assert (e["kind"], e["killed"], e["phase"]) == ("killed_by_signal", "EngineCore", "profiling")


@pytest.mark.parametrize("line", [
    "(APIServer pid=1) ERROR 11-27 14:03:00 [core_client.py:600] Engine core proc EngineCore_DP0 died "
    "unexpectedly, shutting down client.",
    "(EngineCore_DP0 pid=96) ERROR 11-27 14:03:00 [multiproc_executor.py:150] Worker proc VllmWorker-1 died "
    "unexpectedly, shutting down executor.",
])
def test_a_process_that_died_without_a_word_points_at_a_kill(line):
    """vLLM's words for a process gone without an error of its own (an EngineCore killed with
    kill -9 sends no ENGINE_CORE_DEAD message: vllm-project/vllm PR #21443)."""
    e = parse_startup_log(_engine_log(line)).error
    assert e["kind"] == "process_died" and "OOM killer" in e["hint"] and "mem_limit" in e["hint"]
    oom = parse_startup_log(_engine_log(line, before=_traceback([], OOM) + "\n")).error
    assert oom["kind"] == "out_of_memory"   # an error of its own above wins


def test_rays_memory_monitor_is_host_memory():
    line = ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory. "
            "Memory on the node was 30.12GB / 31.00GB (0.97)")
    assert parse_startup_log(_engine_log(line)).error["kind"] == "host_out_of_memory"


def test_every_error_kind_has_a_fix_hint():
    """Every kind the reader gives (the ranked causes and vLLM's own errors about a setting, as
    startup_log.py names them in its ``_error(...)`` calls) has a fix hint."""
    import re
    from pathlib import Path
    from servedeck.vllm import startup_log
    from servedeck.vllm.startup_causes import RANKS, hint_for
    own = set(re.findall(r'_error\(\s*"([a-z_]+)"', Path(startup_log.__file__).read_text()))
    assert {"kv_cache_too_small", "mamba_cache_blocks_too_few"} <= own
    for kind in sorted(set(RANKS) | own):
        assert hint_for({"kind": kind, "exit_code": -9, "phase": "weights"}), kind


# ----------------------------------------------------------------------------- native libraries

@pytest.mark.parametrize("line,kind,hint_word", [
    ("(EngineCore pid=96) 2026:11:27-14:02:50:(96) |CCL_ERROR| ze_fd_manager.cpp:144 init_device_fds: "
     "condition dir failed", "ccl_error", "/dev/dri/by-path"),
    ("oneCCL: ze_fd_manager.cpp:144 init_device_fds: EXCEPTION: opendir failed: could not open device "
     "directory", "ccl_error", "/dev/dri/by-path"),
    ("terminate called after throwing an instance of 'sycl::_V1::exception'", "native_abort", "what()"),
    ("(EngineCore pid=96) RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)",
     "level_zero_error", "dmesg"),
    ("(EngineCore pid=96) torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, "
     "unhandled cuda error", "nccl_error", "NCCL_P2P_DISABLE"),
    ("(EngineCore pid=96) RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "cuda_error", "architecture"),
])
def test_a_native_error_ranks_above_the_wrapper_that_reports_it(line, kind, hint_word):
    f = parse_startup_log(_engine_log(WRAPPER.format(code=1), before=line + "\n"))
    assert f.error["kind"] == kind and hint_word in f.error["hint"], f.error
    assert [c["kind"] for c in f.causes][-1] == "engine_core_init_failed"   # the wrapper, ranked last


def test_a_native_warning_of_the_engine_does_not_count():
    log = _engine_log(WRAPPER.format(code=1), before=(
        "(EngineCore pid=96) WARNING 11-27 14:02:31 [xpu.py:1] oneCCL: falling back to sockets\n"))
    assert parse_startup_log(log).error["kind"] == "engine_core_init_failed"


# ----------------------------------------------------------------------------- out of memory, by phase

def _traceback(frames: list[str], exc: str) -> str:
    head = "(EngineCore pid=96) ERROR 11-24 20:12:41 [core.py:1136] "
    lines = [head + "Traceback (most recent call last):"]
    lines += [f'{head}  File "/usr/lib/python3.12/{path}", line 1, in {func}' for path, func in frames]
    return "\n".join([*lines, head + exc])


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


@pytest.mark.parametrize("frames,exc,phase,fix", [
    ([("vllm/v1/worker/gpu_worker.py", "load_model"), ("vllm/model_executor/models/qwen3.py", "load_weights")],
     OOM, "weights", "quantized"),
    ([("vllm/v1/worker/gpu_worker.py", "determine_available_memory"),
      ("vllm/v1/worker/gpu_model_runner.py", "profile_run")], OOM, "profiling", "--max-num-batched-tokens"),
    ([("vllm/v1/worker/gpu_model_runner.py", "initialize_kv_cache"),
      ("vllm/v1/worker/gpu_model_runner.py", "_allocate_kv_cache_tensors")], OOM, "kv cache",
     "--gpu-memory-utilization"),
    ([("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model"),
      ("vllm/v1/worker/gpu_model_runner.py", "_dummy_sampler_run")],
     "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests.",
     "sampler warm-up", "--max-num-seqs"),
    ([("vllm/v1/worker/xpu_worker.py", "compile_or_warm_up_model")],
     "RuntimeError: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", "profiling", "--max-num-batched-tokens"),
])
def test_out_of_memory_is_tagged_with_the_phase_its_frames_name(frames, exc, phase, fix):
    log = ("(EngineCore pid=96) INFO 11-24 20:12:06 [gpu_model_runner.py:4790] Model loading took 15.24 GiB "
           "memory and 12.3 seconds\n" + _traceback(frames, exc))
    e = parse_startup_log(log).error
    assert (e["kind"], e["phase"]) == ("out_of_memory", phase) and fix in e["hint"], e


def test_without_frames_the_last_phase_the_log_reached_is_the_phase():
    log = ("(EngineCore pid=96) INFO 11-24 20:12:37 [kv_cache_utils.py:1402] GPU KV cache size: 42,272 tokens\n"
           "(EngineCore pid=96) Capturing CUDA graphs (decode, FULL):  10%|#  | 5/51 [00:01<00:09,  4.9it/s]\n"
           "(EngineCore pid=96) RuntimeError: XPU out of memory. Tried to allocate 20.00 MiB")
    e = parse_startup_log(log).error
    assert (e["kind"], e["phase"], e["progress"]) == ("out_of_memory", "graph capture", "5/51 graphs")


@pytest.mark.parametrize("exc", ["MemoryError", "RuntimeError: [enforce fail at alloc_cpu.cpp:117] "
                                 "DefaultCPUAllocator: Cannot allocate memory", "  what():  std::bad_alloc"])
def test_host_memory_is_not_device_memory(exc):
    e = parse_startup_log(_engine_log(exc)).error
    assert e["kind"] == "host_out_of_memory" and "memory limit" in e["hint"]


# ----------------------------------------------------------------------------- hybrid models

@pytest.mark.parametrize("line,value,fits", [
    ("(EngineCore pid=9) RuntimeError: Worker failed with error 'max_num_seqs (1024) exceeds available Mamba "
     "cache blocks (600). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot "
     "proceed. Please lower max_num_seqs to at most 600 or increase gpu_memory_utilization.', please check the "
     "stack trace above for the root cause", 1024, 600),
    ("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (969).", 1024, 969),
])
def test_every_spelling_of_too_few_mamba_blocks_gives_the_number_that_fits(line, value, fits):
    e = parse_startup_log(_engine_log(line)).error
    assert (e["kind"], e["value"], e["suggested_value"]) == ("mamba_cache_blocks_too_few", value, fits)
    assert f"--max-num-seqs to at most {fits}" in e["hint"]


@pytest.mark.parametrize("line,size", [
    ("(EngineCore pid=9) INFO 11-25 16:18:52 [interface.py:911] Setting attention block size to 1568 tokens "
     "to ensure that attention page size is >= mamba page size.", 1568),
    ("(EngineCore pid=9) INFO 11-25 16:18:52 [xpu.py:519] [XPU]Setting attention block size to 1024 tokens "
     "to ensure multiple of 64.", 1024),
])
def test_the_attention_block_size_is_a_fact(line, size):
    assert parse_startup_log(line).attention_block_size_tokens == size


@pytest.mark.parametrize("context,prefix_caching,warns", [
    (700, None, True),          # shorter than one 784-token block: no hit ever
    (783, True, True),
    (1200, True, False),        # one 784-token block of a 1200-token prompt is reusable (65%)
    (131072, None, False),      # the case's own context: blocks are small beside it
    (700, False, False),        # prefix caching off: nothing to defeat
    (None, None, False),
])
def test_a_block_size_that_defeats_prefix_caching_for_the_context_is_warned(context, prefix_caching, warns):
    f = parse_startup_log_file(CASES / "52-mamba-cache-blocks-below-max-num-seqs.log")
    got = prefix_caching_reach(f, context, prefix_caching)
    assert (got is not None) == warns
    if got:
        assert "784" in got and "prefix caching" in got


def test_no_block_size_line_no_warning():
    assert prefix_caching_reach(parse_startup_log_file(LOGS / "vllm-0.33-xpu.log"), 16) is None


# ----------------------------------------------------------------------------- over all starts

def test_the_root_cause_is_ranked_over_every_start():
    """A restart loop: the first start was killed while loading weights, the second failed on
    something else; the latest start's error is its own, the root cause is the kill."""
    first = _engine_log(WRAPPER.format(code=-9))
    second = _engine_log("(EngineCore pid=96) ERROR 11-27 14:05:02 [core.py:1] Traceback (most recent call last):\n"
                         "(EngineCore pid=96) ERROR 11-27 14:05:02 [core.py:1] RuntimeError: cache file truncated")
    f = parse_startup_log(first + second)
    assert f.restart_count == 1 and f.error["kind"] == "exception"
    assert (f.root_cause["kind"], f.root_cause["start"]) == ("killed_by_signal", 1)
    assert [c["start"] for c in f.causes] == [1, 2]
    assert "start 1: killed_by_signal" in dict(summarize(f))["root cause"]


@pytest.mark.parametrize("name", ["vllm-0.10.2-cuda.log", "vllm-0.24-cuda.log", "vllm-0.33-xpu.log",
                                  "vllm-0.14-xpu.log"])
def test_clean_starts_have_no_cause(name):
    f = parse_startup_log_file(LOGS / name)
    assert f.ready and f.error is None and f.causes == [] and f.root_cause is None
