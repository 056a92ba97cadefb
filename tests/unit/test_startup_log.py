"""Tests for servedeck.vllm.startup_log against real vLLM 0.32 CPU logs and per-version fixtures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servedeck.vllm.startup_log import (
    DOCUMENTED_KEYS,
    StartupFacts,
    compile_range_signature,
    format_summary,
    parse_startup_log,
    parse_startup_log_file,
    summarize,
)

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu"  # copied from shared/fixtures


def _real(name: str) -> Path:
    return REAL / name


@pytest.fixture(scope="module")
def f4096() -> StartupFacts:
    return parse_startup_log_file(_real("serve-4096.log"))


@pytest.fixture(scope="module")
def f8192() -> StartupFacts:
    return parse_startup_log_file(_real("serve-8192.log"))


def _ids(facts: StartupFacts) -> list[str]:
    return [w["id"] for w in facts.warnings]


# ---- acceptance: the two real vLLM 0.32.0 CPU logs ------------------------------------------

def test_real_8192_kv_and_concurrency(f8192):
    assert f8192.kv_cache_tokens == 1_048_576
    assert f8192.max_concurrency == 512.00
    assert f8192.max_concurrency_tokens_per_request == 2_048
    assert f8192.kv_cache_device == "CPU"


def test_real_scheduler_warning_only_in_4096(f4096, f8192):
    assert "max_num_scheduled_tokens" in _ids(f4096)
    assert f4096.max_num_scheduled_tokens_warning == 4096
    assert "max_num_scheduled_tokens" not in _ids(f8192)
    assert f8192.max_num_scheduled_tokens_warning is None
    # printed by APIServer and again by EngineCore: kept once
    assert _ids(f4096).count("max_num_scheduled_tokens") == 1


def test_real_non_default_args_and_init(f4096, f8192):
    assert f4096.non_default_args["max_num_batched_tokens"] == 4096
    assert f8192.non_default_args["max_num_batched_tokens"] == 8192
    assert f8192.non_default_args["speculative_config"] == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    assert f8192.non_default_args["served_model_name"] == ["Qwen3.8-27B"]
    assert f4096.init_engine_s == 24.61
    assert f8192.init_engine_s == 26.58
    assert f8192.init_engine_compilation_s is None
    assert f4096.chunked_prefill_max_num_batched_tokens == 4096
    assert f8192.chunked_prefill_max_num_batched_tokens == 8192


def test_real_other_facts(f8192):
    f = f8192
    assert f.vllm_version == "0.32.0"
    assert f.engine_version == "0.32.0"
    assert f.model == "/models/qwen3-tiny"
    assert f.max_model_len == 2048
    assert f.available_kv_cache_gib == 1.0  # CPU "Explicitly set (1.0/9.59) GiB for KV cache"
    assert f.server_address == "http://0.0.0.0:9932"
    assert f.server_started and f.application_startup_complete
    assert f.first_log_ts == "11-30 07:00:01"
    assert f.server_start_ts == "11-30 07:00:47"
    assert f.warmup_s == 0.16
    assert [a["graph"] for a in f.aot_saved] == ["backbone"]
    assert f.compile_cache_hit is False
    assert f.model_loading_gib is None and f.free_memory_gib is None  # not in a CPU log
    assert f.error is None
    assert {"async_scheduling_disabled", "min_p_logit_bias_spec", "other"} <= set(_ids(f))
    # warnings after "Application startup complete." (shutdown) are not startup warnings
    assert not any("[shutdown]" in w["text"] for w in f.warnings)
    assert f.spec_decoding == [{
        "ts": "11-30 07:00:58", "mean_acceptance_length": 2.62, "speculative_depth": None,
        "accepted_tok_s": 7.30, "drafted_tok_s": 12.07, "accepted_tokens": 78, "drafted_tokens": 129,
        "per_position_acceptance_rate": [0.625, 0.562, 0.438], "avg_draft_acceptance_rate_pct": 60.5}]


def test_real_summary_bullets(f4096, f8192):
    labels8 = dict(summarize(f8192))
    assert labels8["max concurrency"] == "512.00x at 2,048 tokens/request"
    assert labels8["KV pool"] == "available 1 GiB -> 1,048,576 tokens"
    assert labels8["engine init"] == "26.58 s"
    assert "max_num_batched_tokens=8192" in labels8["non-default args"]
    assert "max_num_scheduled_tokens is set to 4096" in dict(summarize(f4096))["warnings"]
    assert "max_num_scheduled_tokens" not in labels8["warnings"]
    text = format_summary(f8192)
    assert text.splitlines()[0].startswith("\u2022 version: vLLM 0.32.0")


# ---- to_dict / from_dict --------------------------------------------------------------------

def test_to_dict_has_documented_keys_json_ready(f8192):
    d = f8192.to_dict()
    assert list(d)[: len(DOCUMENTED_KEYS)] == list(DOCUMENTED_KEYS)
    assert json.loads(json.dumps(d)) == d
    again = StartupFacts.from_dict(json.loads(json.dumps(d)))
    assert again.to_dict() == d
    assert summarize(d) == summarize(f8192)


def test_documented_keys_match_run_record_doc():
    doc = ROOT / "docs" / "run-record.md"
    text = doc.read_text()
    section = text.split("## `startup.json`", 1)[1].split("\n## ", 1)[0]
    section = re.sub(r"\([^()]*\)", "", section)  # drop "(list of {...})" explanations
    keys = set(re.findall(r"`([a-z_]+)`", section)) - {"id", "text", "level"}  # warning item fields
    emitted = set(parse_startup_log("").to_dict())
    assert keys <= emitted, keys - emitted
    assert set(DOCUMENTED_KEYS) <= keys, set(DOCUMENTED_KEYS) - keys


def test_empty_and_unknown_lines_give_nones():
    f = parse_startup_log("hello\nnot a log line\n\x1b[31mred\x1b[0m\n  indented\n")
    d = f.to_dict()
    assert d["error"] is None and d["kv_cache_tokens"] is None and d["vllm_version"] is None
    assert d["warnings"] == [] and d["compile_ranges"] == [] and d["compile_cache_hit"] is None
    assert d["server_started"] is False and d["first_log_ts"] is None


# ---- per-version example logs ---------------------------------------------------------------

def test_vllm_0_10_2_ansi_prefix_and_old_wordings():
    raw = (LOGS / "vllm-0.10.2-cuda.log").read_text()
    assert "\x1b[1;36m(EngineCore_DP0 pid=112)\x1b[0;0m" in raw
    f = parse_startup_log(raw)
    assert f.vllm_version == "0.10.2"
    assert f.first_log_ts == "09-14 10:00:01"
    assert f.model_loading_gib == 45.1234 and f.model_loading_s == 23.456789
    assert f.compile_ranges == [
        {"graph": "backbone", "range": "dynamic shape", "compile_s": 12.34, "cache_hit": False},
        {"graph": "backbone", "range": "shape 512", "compile_s": 3.10, "cache_hit": False}]
    assert f.torch_compile_total_s == 20.56
    assert f.compile_cache_hit is False
    assert f.available_kv_cache_gib == 20.51
    assert (f.kv_cache_tokens, f.max_concurrency, f.max_concurrency_tokens_per_request) == (149_360, 4.56, 32_768)
    assert (f.graph_capture_s, f.graph_capture_gib) == (12.0, 0.85)
    assert f.init_engine_s == 38.77 and f.init_engine_compilation_s is None
    assert (f.free_memory_gib, f.total_memory_gib, f.weights_gib) == (78.6, 79.19, 45.12)
    assert (f.peak_activation_gib, f.non_torch_gib, f.cudagraph_memory_gib) == (4.23, 1.41, 0.85)
    assert f.gpu_memory_utilization == 0.9 and f.requested_memory_gib == 71.27
    assert f.server_address == "http://0.0.0.0:8000" and f.server_start_ts == "09-14 10:01:20"
    assert f.application_startup_complete is True
    # non-default args: redacted value and an enum repr survive
    assert f.non_default_args["api_key"] == "***"
    assert f.non_default_args["compilation_config"]["cudagraph_mode"] == "<CUDAGraphMode.PIECEWISE: 1>"
    assert f.non_default_args["served_model_name"] == ["q3", "default"]
    assert f.spec_decoding[0]["per_position_acceptance_rate"] == [0.912, 0.798]
    assert f.spec_decoding[0]["avg_draft_acceptance_rate_pct"] == 85.4
    assert [w["text"] for w in f.warnings] == [
        "For gpt-oss, we ignore --enable-auto-tool-choice and always enable tool use."]


def test_vllm_0_14_xpu_mb_memory_lines():
    f = parse_startup_log_file(LOGS / "vllm-0.14-xpu.log")
    assert f.vllm_version == "0.14.0"
    assert f.model_loading_gib == 15.27 and f.model_loading_s == 21.504113
    assert f.total_memory_gib == round(32656.00 / 1024, 4)
    assert f.free_memory_gib == round(16203.26 / 1024, 4)
    assert f.weights_gib == round(15636.48 / 1024, 4)
    assert f.peak_memory_gib == round(17510.40 / 1024, 4)
    assert f.non_torch_gib == round(563.20 / 1024, 4)
    assert f.peak_activation_gib is None and f.available_kv_cache_gib is None
    assert f.kv_cache_tokens == 158_720 and f.max_concurrency == 4.84
    assert f.init_engine_s == 8.43
    assert f.compile_ranges == [] and f.compile_cache_hit is None
    assert compile_range_signature(f) is None
    assert f.server_address == "http://0.0.0.0:8008"
    assert f.application_startup_complete  # "(APIServer pid=1) INFO:     Application startup complete."


def test_vllm_0_24_two_line_kv_compilation_and_graph_names():
    f = parse_startup_log_file(LOGS / "vllm-0.24-cuda.log")
    assert f.vllm_version == "0.24.0" and f.model == "/models/qwen38-27b-exl3"
    assert f.kv_cache_tokens == 223_677
    assert f.max_concurrency == 1.14 and f.max_concurrency_tokens_per_request == 196_608
    assert f.init_engine_s == 65.72 and f.init_engine_compilation_s == 51.82
    assert f.model_loading_gib == 18.19 and f.model_loading_s == 3.761781
    assert f.compile_ranges == [
        {"graph": "backbone", "range": "(1, 2048)", "compile_s": 33.02, "cache_hit": False},
        {"graph": "eagle_head", "range": "(1, 2048)", "compile_s": 1.874, "cache_hit": True}]
    assert f.torch_compile_s_by_graph == {"backbone": 41.55, "eagle_head": 7.12}
    assert f.torch_compile_total_s == 48.67
    assert f.compile_cache_hit is False  # backbone compiled fresh
    assert f.warmup_s == 2.13
    assert (f.graph_capture_s, f.graph_capture_gib) == (1.0, 0.45)
    assert f.max_num_scheduled_tokens_warning == 2048
    assert _ids(f) == ["spec_method_deprecated", "max_num_scheduled_tokens",
                       "min_p_logit_bias_spec", "padding_layers"]
    assert f.server_address == "http://127.0.0.1:8241"
    depth = [s["speculative_depth"] for s in f.spec_decoding]
    assert depth == [3, None]
    assert f.spec_decoding[0]["mean_acceptance_length"] == 2.68
    assert f.spec_decoding[1]["accepted_tokens"] == 0 and f.spec_decoding[1]["drafted_tokens"] == 558


def test_vllm_0_33_one_line_xpu_kv_and_tagged_compiles():
    f = parse_startup_log_file(LOGS / "vllm-0.33-xpu.log")
    assert f.vllm_version == "0.33.0" and f.model == "/mnt/exl3model"
    assert f.kv_cache_device == "XPU"
    assert f.kv_cache_tokens == 264_846
    assert f.max_concurrency == 2.02 and f.max_concurrency_tokens_per_request == 131_072
    assert f.available_kv_cache_gib == 10.22
    assert (f.free_memory_gib, f.total_memory_gib) == (30.98, 31.89)
    assert f.consumed_memory_gib == 18.97 and f.peak_activation_gib == 1.0
    assert f.cudagraph_memory_gib == 0.0 and f.weights_gib is None and f.non_torch_gib is None
    assert f.init_engine_s == 112.35 and f.init_engine_compilation_s == 95.11
    assert f.init_engine_compilation_parts_s == {"language_model": 93.06, "encoder": 2.05}
    assert f.encoder_cache_budget_tokens == 4096
    assert compile_range_signature(f) == ["backbone (1, 4096)", "eagle_head (1, 4096)"]
    assert f.torch_compile_total_s == round(98.40 + 2.05, 2)
    assert _ids(f) == ["max_num_scheduled_tokens", "xpu_graph_unsupported", "padding_layers"]
    assert f.application_startup_complete and f.server_address == "http://0.0.0.0:9932"
    bullets = dict(summarize(f))
    assert bullets["compile"].startswith("range (1, 4096): backbone 93.08 s + eagle_head 0.81 s from cache")
    assert bullets["max concurrency"] == "2.02x at 131,072 tokens/request"
    assert bullets["free memory"] == "30.98/31.89 GiB at startup"
    assert bullets["weights"] == "17.34 GiB"  # from "Model loading took 17.34 GiB memory"


def test_compile_range_signature_detects_moved_range():
    text = (LOGS / "vllm-0.33-xpu.log").read_text()
    moved = parse_startup_log(text.replace("compile range (1, 4096)", "compile range (1, 8192)"))
    assert compile_range_signature(moved) == ["backbone (1, 8192)", "eagle_head (1, 8192)"]
    assert compile_range_signature(moved) != compile_range_signature(parse_startup_log(text))


def test_foreign_prefixes_cr_and_cache_hit_variants():
    text = "\n".join([
        "2026-05-01 21:36:34.461 | (EngineCore pid=187) INFO 05-01 19:36:34 [backends.py:1128] "
        "Using cache directory: /c/torch_compile_cache/7c/rank_0_0/backbone for vLLM's torch.compile",
        "svc  | (EngineCore pid=187) INFO 05-01 19:36:40 [backends.py:292] Directly load the compiled "
        "graph(s) for compile range (1, 4096) from the cache, took 1.874 s",
        "(EngineCore pid=187) INFO 05-01 19:36:41 [decorators.py:311] Directly load AOT compilation "
        "from path /c/torch_aot_compile/ab/rank_0_0/model",
        "(EngineCore pid=187) INFO 05-01 19:36:41 [monitor.py:53] torch.compile and initial "
        "profiling/warmup run together took 5.50 s in total",
        "Capturing CUDA graphs: 50%|#####     | 1/2\r(EngineCore pid=187) INFO 05-01 19:36:50 "
        "[gpu_model_runner.py:1] Graph capturing finished in 3 secs, took -0.12 GiB",
    ])
    f = parse_startup_log(text)
    assert f.first_log_ts == "05-01 19:36:34"
    assert f.compile_ranges == [{"graph": "backbone", "range": "(1, 4096)", "compile_s": 1.874, "cache_hit": True}]
    assert f.compile_cache_hit is True
    assert f.aot_loaded == [{"graph": "backbone", "path": "/c/torch_aot_compile/ab/rank_0_0/model"}]
    assert f.torch_compile_total_s == 5.5
    assert (f.graph_capture_s, f.graph_capture_gib) == (3.0, -0.12)


def test_non_default_args_with_unparseable_reprs():
    line = ("(APIServer pid=1) INFO 10-17 01:46:02 [startup.py:121] non-default args: "
            "{'model_tag': '/m', 'hf_token': '***', 'download_dir': PosixPath('/x'), "
            "'kv_cache_dtype': 'fp8', 'mode': <Mode.FAST: 2>, 'temp': -1.5}")
    args = parse_startup_log(line).non_default_args
    assert args == {"model_tag": "/m", "hf_token": "***", "download_dir": "PosixPath('/x')",
                    "kv_cache_dtype": "fp8", "mode": "<Mode.FAST: 2>", "temp": -1.5}


# ---- failed starts --------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "kind", "suggested", "value"), [
    ("fail-0.33-max-model-len.log", "max_model_len_exceeds_derived", 262144, 524288),
    ("fail-0.33-kv-cache-too-small.log", "kv_cache_too_small", 256000, 262144),
    ("fail-0.24-no-cache-memory.log", "no_kv_cache_memory", None, None),
    ("fail-0.33-tool-parser.log", "invalid_tool_call_parser", "qwen3_xml", "qwen3xml"),
    ("fail-0.33-reasoning-parser.log", "invalid_reasoning_parser", "qwen3", "qwen"),
    ("fail-0.10.2-reasoning-choice.log", "invalid_reasoning_parser", "qwen3", "qwen"),
    ("fail-0.26-unrecognized.log", "unrecognized_arguments", None, "--disable-log-requests"),
    ("fail-0.24-auto-tool-choice.log", "auto_tool_choice_requires_parser", None, "--enable-auto-tool-choice"),
    ("fail-0.33-mnbt-max-model-len.log", "max_num_batched_tokens_smaller_than_max_model_len", 131072, 4096),
    ("fail-0.33-mnbt-max-num-seqs.log", "max_num_batched_tokens_smaller_than_max_num_seqs", 256, 128),
    ("fail-0.26-xpu-oom.log", "out_of_memory", None, None),
    ("fail-0.24-generic-exception.log", "exception", None, None),
    # the engine core's exit code -9: killed by SIGKILL, no Python error (issue 30: not the wrapper)
    ("fail-0.33-engine-killed.log", "killed_by_signal", None, -9),
])
def test_failed_start_errors(name, kind, suggested, value):
    f = parse_startup_log_file(LOGS / name)
    assert f.error is not None
    assert (f.error["kind"], f.error["suggested_value"], f.error["value"]) == (kind, suggested, value)
    assert f.error["text"]
    assert not f.application_startup_complete
    assert dict(summarize(f))["error"].startswith(kind)


def test_failed_start_details():
    tool = parse_startup_log_file(LOGS / "fail-0.33-tool-parser.log").error
    assert tool["valid_values"] == ["deepseek_v3", "hermes", "qwen3_coder", "qwen3_json", "qwen3_xml", "xlam"]
    choice = parse_startup_log_file(LOGS / "fail-0.10.2-reasoning-choice.log").error
    assert "openai_gptoss" in choice["valid_values"] and len(choice["valid_values"]) == 8
    generic = parse_startup_log_file(LOGS / "fail-0.24-generic-exception.log").error
    assert generic["text"] == ("safetensors_rust.SafetensorError: Error while deserializing header: "
                               "HeaderTooLarge")
    kv = parse_startup_log_file(LOGS / "fail-0.33-kv-cache-too-small.log")
    assert kv.available_kv_cache_gib == 9.1 and kv.error["text"].startswith("ValueError: To serve")
    auto = parse_startup_log_file(LOGS / "fail-0.24-auto-tool-choice.log").error
    assert auto["text"] == "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"


def test_errors_after_ready_do_not_make_a_failed_start():
    text = (LOGS / "vllm-0.33-xpu.log").read_text() + (
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
        "RuntimeError: something at request time\n")
    late = parse_startup_log(text)
    assert late.error is None
    assert late.runtime_errors == [{"ts": "10-17 01:48:53", "process": None, "kind": "exception",
                                    "text": "RuntimeError: something at request time", "context": None}]
    # the same traceback before readiness (no serving line at all) is a failed start
    early_text = "\n".join(line for line in text.splitlines()
                           if "Starting vLLM server" not in line and "routes" not in line
                           and "INFO:     " not in line)
    early = parse_startup_log(early_text)
    assert early.runtime_errors == [] and not early.ready
    assert early.error["kind"] == "exception"
    assert early.error["text"] == "RuntimeError: something at request time"


def test_traceback_frames_are_not_warnings():
    f = parse_startup_log_file(LOGS / "fail-0.33-kv-cache-too-small.log")
    texts = [w["text"] for w in f.warnings]
    assert texts[0] == "EngineCore failed to start."
    assert not any(t.startswith(("Traceback", "File ", "raise ")) for t in texts)
    assert texts[-1].startswith("ValueError: To serve at least one request")


def test_a_compile_cache_that_fails_to_load_is_a_classified_miss():
    line = ("(Worker pid=33) WARNING 11-30 08:12:26 [decorators.py:333] [backbone] Compiling model again "
            "due to a load failure from /root/.cache/vllm/torch_compile_cache/torch_aot_compile/940865c0/"
            "rank_0_0/model, reason: 'function' object has no attribute 'finalize_loading'\n"
            "(Worker pid=33) INFO 11-30 08:12:31 [decorators.py:743] [backbone] saved AOT compiled function "
            "to /root/.cache/vllm/torch_compile_cache/torch_aot_compile/940865c0/rank_0_0/model\n")
    f = parse_startup_log(line).to_dict()
    assert [w["id"] for w in f["warnings"]] == ["compile_cache_load_failed"]
    assert f["compile_cache_hit"] is False
