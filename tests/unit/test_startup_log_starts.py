"""Several starts in one log, readiness without uvicorn's INFO lines, runtime errors after
readiness and compile time of CPU builds (servedeck.vllm.startup_log).

Field cases 36/36b are copied into tests/fixtures/cases/field-2/ with their .meta.yml (the
expected JSON facts are read from there); the variants are built from the real vLLM 0.32 CPU
logs (tests/fixtures/vllm-0.32-cpu/) and the per-version fixtures (tests/fixtures/logs/).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servedeck.vllm.startup_log import (
    StartupFacts,
    format_summary,
    parse_startup_log,
    serving_signal,
    start_history,
    summarize,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = FIXTURES / "cases" / "field-2"
LOGS = FIXTURES / "logs"
CPU = FIXTURES / "vllm-0.32-cpu"


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _expect_json(meta: Path) -> dict:
    for line in _text(meta).splitlines():
        if line.startswith("# expect-json:"):
            return json.loads(line.split(":", 1)[1])
    raise AssertionError(f"{meta} has no expect-json line")


def _without(text: str, *needles: str) -> str:
    return "\n".join(line for line in text.splitlines() if not any(n in line for n in needles)) + "\n"


UVICORN_INFO = ("INFO:     Started server process", "INFO:     Waiting for application startup",
                "INFO:     Application startup complete", "INFO:     Uvicorn running on")
ACCESS_LOG = '"GET /'


# ---- field cases 36 / 36b ---------------------------------------------------------------------

@pytest.mark.parametrize("stem", ["36-uvicorn-warning-no-ready-line", "36b-uvicorn-info-ready.clean"])
def test_field_case_expected_json(stem):
    facts = parse_startup_log(_text(CASES / f"{stem}.log")).to_dict()
    expected = _expect_json(CASES / f"{stem}.meta.yml")
    assert {k: facts[k] for k in expected} == expected
    assert facts["ready"] is True and facts["restart_count"] == 0
    # the engine crash hours later is a runtime error with its time, not a failed start
    first = facts["runtime_errors"][0]
    assert (first["ts"], first["process"], first["kind"]) == ("11-12 10:47:51", "EngineCore", "exception")
    assert first["text"] == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert first["context"] == "EngineCore encountered a fatal error."
    assert facts["runtime_errors"][1]["text"].startswith("vllm.v1.engine.exceptions.EngineDeadError")
    assert facts["starts"][0]["outcome"] == "ready"


def test_case_36_is_ready_by_vllm_lines_and_says_why_uvicorn_is_silent():
    facts = parse_startup_log(_text(CASES / "36-uvicorn-warning-no-ready-line.log"))
    assert facts.application_startup_complete is False
    assert (facts.ready_signal, facts.ready_ts) == ("server_address", "11-12 08:15:12")
    server = dict(summarize(facts))["server"]
    assert "uvicorn_log_level=warning" in server and "not yet ready" not in server
    assert "error" not in dict(summarize(facts))
    assert "11-12 10:47:51" in dict(summarize(facts))["runtime errors"]


def test_case_36b_uvicorn_line_recorded_but_vllm_line_came_first():
    facts = parse_startup_log(_text(CASES / "36b-uvicorn-info-ready.clean.log"))
    assert facts.application_startup_complete and facts.ready_signal == "server_address"
    assert "application startup complete" in dict(summarize(facts))["server"]


# ---- serving_signal ---------------------------------------------------------------------------

@pytest.mark.parametrize("line, signal", [
    ("(APIServer pid=1) INFO 11-12 08:15:12 [launcher.py:178] Starting vLLM server on http://0.0.0.0:8000",
     "server_address"),
    ("\x1b[1;36m(APIServer pid=7)\x1b[0;0m INFO 09-14 10:01:20 [api_server.py:1912] Starting vLLM API "
     "server 0 on http://0.0.0.0:8000", "server_address"),
    ("2026-11-12T08:15:12.000000001Z (APIServer pid=1) INFO 11-12 08:15:12 [launcher.py:186] "
     "Available routes are:", "route_list"),
    ("llm-1  | (APIServer pid=1) INFO 11-12 08:15:12 [launcher.py:194] Route: /health, Methods: GET",
     "route_list"),
    ("INFO:     Application startup complete.", "uvicorn_startup_complete"),
    ("(APIServer pid=41) INFO:     Application startup complete.", "uvicorn_startup_complete"),
    ("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)", "uvicorn_running"),
    ("2026-11-12T08:15:12.000000001Z INFO:     Application startup complete.", "uvicorn_startup_complete"),
    ("llm-1  | INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)", "uvicorn_running"),
    ("INFO:     Started server process [1]", None),
    ("INFO:     Waiting for application startup.", None),
    ('INFO:     127.0.0.1:51022 - "GET /health HTTP/1.1" 200 OK', "request_served"),  # it answered
    ("(EngineCore pid=97) INFO 11-12 08:14:15 [core.py:118] Initializing a V1 LLM engine (v0.33.0)", None),
    ("Starting vLLM server on http://0.0.0.0:8000", None),  # not a vLLM logger record
    ("", None),
    ("   ", None),
])
def test_serving_signal(line, signal):
    assert serving_signal(line) == signal


def test_serving_signal_fires_exactly_on_the_real_logs_ready_lines():
    for name in ("serve-4096.log", "serve-8192.log"):
        lines = _text(CPU / name).splitlines()
        first = next(i for i, line in enumerate(lines) if serving_signal(line))
        assert "Starting vLLM server on http://0.0.0.0:9932" in lines[first]
        # nothing before it says "serving"
        assert not any(serving_signal(line) for line in lines[:first])


# ---- uvicorn at warning level: the real CPU log without uvicorn's INFO lines -------------------

def test_real_log_without_uvicorn_info_lines_is_ready_with_the_same_facts():
    full = parse_startup_log(_text(CPU / "serve-8192.log")).to_dict()
    quiet = parse_startup_log(_without(_text(CPU / "serve-8192.log"), *UVICORN_INFO, ACCESS_LOG)).to_dict()
    assert quiet["ready"] and not quiet["application_startup_complete"]
    changed = {k for k in full if full[k] != quiet[k]}
    assert changed == {"application_startup_complete"}


def test_ready_by_route_list_alone_and_by_uvicorn_running_alone():
    text = _text(CPU / "serve-4096.log")
    routes_only = parse_startup_log(_without(text, "Starting vLLM server", *UVICORN_INFO))
    assert (routes_only.ready, routes_only.ready_signal, routes_only.server_started) == (True, "route_list", False)
    head = text.split("(APIServer pid=13555) INFO 11-30 06:56:35 [entry.py:140]", 1)[0]
    uvicorn_only = parse_startup_log(head + "INFO:     Uvicorn running on http://0.0.0.0:9932 (Press CTRL+C to quit)\n")
    assert (uvicorn_only.ready, uvicorn_only.ready_signal) == (True, "uvicorn_running")
    assert uvicorn_only.ready_ts == "11-30 06:56:35"  # the last vLLM time stamp before it
    not_yet = parse_startup_log(head)
    assert not not_yet.ready and not_yet.error is None and not_yet.starts[0]["outcome"] == "starting"
    assert "server" not in dict(summarize(not_yet))


# ---- runtime errors after readiness -------------------------------------------------------------

def test_runtime_oom_and_asgi_error_after_ready_in_a_quiet_uvicorn_log():
    text = _without(_text(CPU / "serve-8192.log"), *UVICORN_INFO, ACCESS_LOG) + (
        "ERROR:    Exception in ASGI application\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/uvicorn/protocols/http/httptools_impl.py", line 409\n'
        "    result = await app(\n"
        "ValueError: bad request body\n"
        "(EngineCore pid=15021) ERROR 11-30 09:12:04 [core.py:933] EngineCore encountered a fatal error.\n"
        "(EngineCore pid=15021) ERROR 11-30 09:12:04 [core.py:933] Traceback (most recent call last):\n"
        '(EngineCore pid=15021) ERROR 11-30 09:12:04 [core.py:933]   File "core.py", line 924, in run\n'
        "(EngineCore pid=15021) ERROR 11-30 09:12:04 [core.py:933] torch.OutOfMemoryError: CPU out of memory\n"
        "(APIServer pid=14998) CRITICAL 11-30 09:12:05 [launcher.py:101] Engine failed, terminating server\n"
        "(APIServer pid=14998) INFO 11-30 09:12:05 [launcher.py:102] Shutting down\n")
    f = parse_startup_log(text)
    assert f.error is None and f.ready
    assert [(e["ts"], e["kind"], e["text"], e["context"]) for e in f.runtime_errors] == [
        ("11-30 07:01:11", "exception", "ValueError: bad request body", "Exception in ASGI application"),
        ("11-30 09:12:04", "out_of_memory", "torch.OutOfMemoryError: CPU out of memory",
         "EngineCore encountered a fatal error."),
        ("11-30 09:12:05", "error", "Engine failed, terminating server", None),
    ]
    # runtime errors are not startup warnings either
    assert not any("fatal error" in w["text"] for w in f.warnings)


def test_no_runtime_errors_in_clean_real_logs():
    for name in ("serve-4096.log", "serve-8192.log"):
        assert parse_startup_log(_text(CPU / name)).runtime_errors == []


# ---- several starts in one log ---------------------------------------------------------------

def test_two_restarts_failing_for_free_memory_then_ready():
    fail = _text(LOGS / "fail-0.33-free-memory.log")
    f = parse_startup_log(fail + fail + _text(CASES / "36b-uvicorn-info-ready.clean.log"))
    assert f.restart_count == 2 and [s["outcome"] for s in f.starts] == ["failed", "failed", "ready"]
    # the current state is the latest start's
    assert f.error is None and f.ready and f.kv_cache_tokens == 205_776 and f.free_memory_gib == 46.91
    for st in f.starts[:2]:
        assert st["error"]["kind"] == "insufficient_free_memory"
        assert st["free_memory_gib"] == 30.12 and st["kv_cache_tokens"] is None
    assert f.starts[2]["runtime_errors"][0]["ts"] == "11-12 10:47:51"
    history = start_history(f)
    assert history.startswith("3 starts (2 restarts): the 1st and 2nd failed with insufficient_free_memory")
    assert history.endswith("the 3rd (current) is ready")
    assert dict(summarize(f))["restarts"] == history


def test_the_free_memory_error_suggests_a_utilization_that_fits():
    f = parse_startup_log(_text(LOGS / "fail-0.33-free-memory.log"))
    assert f.error["kind"] == "insufficient_free_memory"
    assert (f.error["value"], f.error["suggested_value"]) == (0.9, 0.63)  # 30.12 / 47.37 = 0.6358
    assert (f.free_memory_gib, f.total_memory_gib) == (30.12, 47.37)
    assert len(f.starts) == 1 and f.restart_count == 0 and f.starts[0]["error"] == f.error


def test_real_cpu_logs_back_to_back_are_two_starts_with_their_own_facts():
    f = parse_startup_log(_text(CPU / "serve-4096.log") + _text(CPU / "serve-8192.log"))
    assert f.restart_count == 1 and [s["outcome"] for s in f.starts] == ["ready", "ready"]
    assert f.starts[0]["non_default_args"]["max_num_batched_tokens"] == 4096
    assert f.non_default_args["max_num_batched_tokens"] == 8192
    assert [s["torch_compile_total_s"] for s in f.starts] == [22.0, 25.0]
    # the 4096 start's scheduler warning belongs to that start, not to the current one
    assert f.max_num_scheduled_tokens_warning is None
    assert f.first_log_ts == "11-30 07:00:01" and f.starts[0]["first_log_ts"] == "11-30 06:55:51"
    assert start_history(f) == "2 starts (1 restart): the 1st became ready, then stopped; the 2nd (current) is ready"
    alone = parse_startup_log(_text(CPU / "serve-8192.log")).to_dict()
    both = f.to_dict()
    assert {k for k in alone if alone[k] != both[k]} == {"starts", "restart_count"}


def test_docker_and_compose_prefixes_do_not_hide_starts_tracebacks_or_uvicorn():
    text = _text(LOGS / "fail-0.33-free-memory.log") + _text(CASES / "36b-uvicorn-info-ready.clean.log")
    for prefix in ("2026-11-12T08:15:12.000000001Z ", "llm-1  | ", "llm-1  | 2026-11-12T08:15:12.5+00:00 "):
        f = parse_startup_log("".join(prefix + line for line in text.splitlines(keepends=True)))
        assert [s["outcome"] for s in f.starts] == ["failed", "ready"], prefix
        assert f.starts[0]["error"]["kind"] == "insufficient_free_memory"
        assert f.application_startup_complete and len(f.runtime_errors) == 2
    lines = _text(LOGS / "fail-0.26-unrecognized.log").splitlines(keepends=True)
    usage = "".join("2026-11-12T08:15:12Z " + line for line in lines)
    assert parse_startup_log(usage * 2).restart_count == 1


def test_three_command_line_failures_are_three_starts():
    one = _text(LOGS / "fail-0.26-unrecognized.log")
    f = parse_startup_log(one * 3)
    assert f.restart_count == 2
    assert [s["error"]["kind"] for s in f.starts] == ["unrecognized_arguments"] * 3
    assert f.error["value"] == "--disable-log-requests"
    assert start_history(f) == ("3 starts (2 restarts): the 1st and 2nd failed with unrecognized_arguments "
                                "(vllm: error: unrecognized arguments: --disable-log-requests); "
                                "the 3rd (current) failed with unrecognized_arguments")


def test_crash_after_ready_then_a_restart_that_fails_and_one_still_starting():
    crashed = _text(CASES / "36-uvicorn-warning-no-ready-line.log")
    kv_small = _text(LOGS / "fail-0.33-kv-cache-too-small.log")
    starting = "".join(_text(LOGS / "fail-0.33-free-memory.log").splitlines(keepends=True)[:5])
    f = parse_startup_log(crashed + kv_small + starting)
    assert [s["outcome"] for s in f.starts] == ["ready", "failed", "starting"]
    assert f.error is None and not f.ready and f.runtime_errors == []
    assert f.starts[1]["error"]["kind"] == "kv_cache_too_small"
    history = start_history(f)
    assert "the 1st became ready, then failed at 11-12 10:47:51 (torch.AcceleratorError" in history
    assert "the 2nd failed with kv_cache_too_small" in history
    assert history.endswith("the 3rd (current) is starting")
    assert "restarts" in format_summary(f)


def test_a_start_killed_without_an_error_is_stopped():
    head = "".join(_text(CPU / "serve-4096.log").splitlines(keepends=True)[:40])
    f = parse_startup_log(head + _text(CPU / "serve-8192.log"))
    assert [s["outcome"] for s in f.starts] == ["stopped", "ready"]
    assert "stopped before it became ready, with no error in the log" in start_history(f)


def test_one_start_and_empty_log_keys():
    empty = parse_startup_log("").to_dict()
    assert (empty["starts"], empty["restart_count"], empty["ready"], empty["runtime_errors"]) == ([], 0, False, [])
    assert start_history(empty) == ""
    one = parse_startup_log(_text(LOGS / "vllm-0.10.2-cuda.log"))
    assert one.restart_count == 0 and len(one.starts) == 1 and one.ready_signal == "server_address"
    assert "restarts" not in dict(summarize(one))
    d = one.to_dict()
    assert StartupFacts.from_dict(json.loads(json.dumps(d))).to_dict() == d


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_fixture_log_is_one_start(name):
    f = parse_startup_log(_text(LOGS / name))
    assert f.restart_count == 0
    assert f.starts[0]["outcome"] == ("failed" if name.startswith("fail-") else "ready")


# ---- compile time ------------------------------------------------------------------------------

def test_cpu_compile_time_from_warmup_to_saved_aot():
    for name, seconds in (("serve-4096.log", 22.0), ("serve-8192.log", 25.0)):
        f = parse_startup_log(_text(CPU / name))
        assert (f.torch_compile_total_s, f.torch_compile_total_source) == (seconds, "log_timestamps")
        assert "torch.compile total" in dict(summarize(f))["compile"]


def test_logged_compile_totals_keep_their_source_and_cache_loads_have_no_compile_time():
    gpu = parse_startup_log(_text(LOGS / "vllm-0.33-xpu.log"))
    assert gpu.torch_compile_total_source == "logged" and gpu.torch_compile_total_s is not None
    loaded = parse_startup_log(
        "(Worker pid=40) INFO 11-30 08:31:28 [cpu_model_runner.py:87] Warming up model for the compilation...\n"
        "(Worker pid=40) INFO 11-30 08:31:29 [decorators.py:311] [backbone] Directly load AOT compilation "
        "from path /c/torch_aot_compile/ab/rank_0_0/model\n")
    assert loaded.torch_compile_total_s is None and loaded.torch_compile_total_source is None
    assert loaded.compile_cache_hit is True


def test_recorded_runs_are_refreshed_from_their_log_so_the_ab_report_has_compile_time():
    from servedeck.ab.comparison import compare_metrics
    from servedeck.vllm.startup_log import record_facts

    runs = FIXTURES / "runs-cpu"
    a, b = runs / "0001-cpu-4096-local", runs / "0002-cpu-8192-local"
    stored = json.loads((a / "startup.json").read_text())
    assert stored["torch_compile_total_s"] is None  # written by the earlier parser
    fresh = record_facts(stored, _text(a / "startup.log"))
    assert (fresh["torch_compile_total_s"], fresh["torch_compile_total_source"]) == (25.0, "log_timestamps")
    assert fresh["time_to_ready_s"] == stored["time_to_ready_s"] is not None  # the deployer's figure
    assert record_facts(stored, None) == stored and record_facts(None, None) == {}
    # what was recorded is never contradicted, only completed
    assert record_facts(dict(stored, kv_cache_tokens=7), _text(a / "startup.log"))["kv_cache_tokens"] == 7
    assert record_facts(None, _text(a / "startup.log"))["kv_cache_tokens"] == 1_048_576
    m = compare_metrics(a, b).metric("torch_compile_total_s")
    assert (m.a, m.b, m.verdict) == (25.0, 27.0, "higher")


@pytest.mark.parametrize("cut_at, signal", [
    ("Engine 000: Avg prompt throughput: 1204.6", "engine_stats"),
    ("EngineCore encountered a fatal error", None),
])
def test_a_log_tail_without_the_start_up_lines(cut_at, signal):
    """What ``docker logs --tail`` or a rotated json-file log leaves of case 36: the stats line of
    a serving server, then the 10:47 crash. Serving is shown by the stats line (or a request in
    the access log), so the crash is a runtime error, not a failed start; a tail holding only the
    crash shows no serving, and the crash is that start's error."""
    lines = (CASES / "36-uvicorn-warning-no-ready-line.log").read_text().splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if cut_at in ln)
    facts = parse_startup_log("".join(lines[start:]))
    assert facts.ready is (signal is not None) and facts.ready_signal == signal
    if signal:
        assert facts.error is None and facts.runtime_errors
    else:
        assert facts.error is not None


@pytest.mark.parametrize("line, signal", [
    ('INFO:     10.0.0.5:40112 - "POST /v1/chat/completions HTTP/1.1" 200 OK', "request_served"),
    ('(APIServer pid=1) INFO:     127.0.0.1:51022 - "GET /health HTTP/1.1" 503 Service Unavailable',
     "request_served"),
    ("(APIServer pid=1) INFO 11-12 09:02:40 [loggers.py:236] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
     "Avg generation throughput: 9.0 tokens/s, Running: 1 reqs", "engine_stats"),
    ('INFO:     Started server process [1]', None),
    ("(APIServer pid=1) INFO 11-12 09:02:40 [api_server.py:1] Avg prompt throughput is high", None),
])
def test_request_and_stats_lines_are_serving_signals(line, signal):
    assert serving_signal(line) == signal
