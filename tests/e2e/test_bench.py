"""servedeck.bench.client against a real vLLM server (see ``conftest.py``: local dev venv or
``SERVEDECK_BENCH_URL``). Assertions are consistency checks between independent sources
(the streamed response, ``usage``, the server's ``/metrics``), never fixed timings."""

from __future__ import annotations

import json
import statistics

import pytest

from servedeck.bench.client import (
    BenchResult,
    Workload,
    check_server_identity,
    run_bench,
)
from servedeck.bench.table import format_table
from servedeck.errors import ServedeckError

REPS = 2


def _workload(server, **kw) -> Workload:
    prompt = min(1024, server.max_model_len - 128)
    return Workload(prompt_tokens=prompt, max_tokens=64, repetitions=REPS, **kw)


@pytest.fixture(scope="module")
def chat_result(local_vllm_server) -> BenchResult:
    calls: list[tuple[int, int, str]] = []
    res = run_bench(local_vllm_server.url, _workload(local_vllm_server),
                    served_model=local_vllm_server.model,
                    progress=lambda done, total, label: calls.append((done, total, label)))
    res.progress_calls = calls  # type: ignore[attr-defined]
    return res


@pytest.fixture(scope="module")
def completions_result(local_vllm_server) -> BenchResult:
    w = _workload(local_vllm_server, endpoint="/v1/completions", warm_order="after_cold", warmup_requests=0)
    return run_bench(local_vllm_server.url, w, served_model=local_vllm_server.model)


def _measured(res: BenchResult):
    return [s for s in res.samples if s.phase != "warmup"]


def test_plan_and_phases(chat_result: BenchResult) -> None:
    phases = [s.phase for s in chat_result.samples]
    assert phases == ["warmup"] + ["cold", "warm"] * REPS
    # warm i repeats the prompt of cold i
    cold = chat_result.phase_samples("cold")
    warm = chat_result.phase_samples("warm")
    assert [s.tag for s in warm] == [s.tag for s in cold]
    assert len({s.tag for s in cold + chat_result.phase_samples("warmup")}) == REPS + 1
    calls = chat_result.progress_calls  # type: ignore[attr-defined]
    assert calls[0][0] == 0 and calls[-1][:2] == (1 + 2 * REPS, 1 + 2 * REPS)


@pytest.mark.parametrize("which", ["chat_result", "completions_result"])
def test_prompt_and_output_sizes_exact(which: str, request: pytest.FixtureRequest) -> None:
    res: BenchResult = request.getfixturevalue(which)
    for s in res.samples:
        assert s.prompt_tokens == res.workload.prompt_tokens, s  # usage.prompt_tokens
        assert s.output_tokens == res.workload.max_tokens, s      # ignore_eos
        assert s.finish_reason == "length"
        # the server counted the same tokens in /metrics
        assert s.server.prompt_tokens == res.workload.prompt_tokens
        assert s.server.generation_tokens == res.workload.max_tokens
        assert s.server.requests_finished == 1 and s.server.ttft_count == 1


@pytest.mark.parametrize("which", ["chat_result", "completions_result"])
def test_rates_consistent_with_times(which: str, request: pytest.FixtureRequest) -> None:
    res: BenchResult = request.getfixturevalue(which)
    for s in res.samples:
        assert s.prefill_tok_s * s.ttft_s == pytest.approx(s.prompt_tokens, rel=1e-9)
        if s.decode_tok_s is not None:
            assert s.decode_tok_s * s.decode_s == pytest.approx(s.output_tokens - s.first_chunk_tokens, rel=1e-9)
        assert 0 < s.ttft_s <= s.e2e_s
        assert 1 <= s.first_chunk_tokens <= s.output_tokens
        assert 1 <= s.chunks <= s.output_tokens


def test_client_ttft_matches_server_histogram(chat_result: BenchResult, completions_result: BenchResult) -> None:
    samples = _measured(chat_result) + _measured(completions_result)
    for s in samples:
        # the server's clock starts after the request arrived: the client can only see later
        assert s.ttft_s >= s.server.ttft_s - 0.002, s
    # median over requests: a loaded 2-core box may stall single streams
    gaps = [abs(s.ttft_s - s.server.ttft_s) - (0.05 + 0.10 * s.server.ttft_s) for s in samples]
    assert statistics.median(gaps) <= 0, [(s.ttft_s, s.server.ttft_s) for s in samples]


def test_speculative_decoding_metrics(local_vllm_server, chat_result: BenchResult) -> None:
    k = local_vllm_server.num_speculative_tokens
    if k == 0:
        pytest.skip("server runs without speculative decoding (SERVEDECK_BENCH_SPEC_TOKENS=0)")
    summary = chat_result.summary()
    for phase in ("cold", "warm"):
        srv = summary["server"][phase]
        assert srv["spec_drafts"] > 0
        assert 1.0 <= srv["spec_accept_len"] <= 1.0 + k
        rates = srv["spec_per_position"]
        assert len(rates) == k
        assert all(0.0 <= r <= 1.0 for r in rates)
        assert all(a >= b - 1e-12 for a, b in zip(rates, rates[1:])), rates
        # acceptance length = 1 + sum of per-position rates (both from the same counters)
        assert srv["spec_accept_len"] == pytest.approx(1.0 + sum(rates), rel=1e-9)
    for s in _measured(chat_result):
        assert s.server.spec_accepted_tokens <= s.server.spec_draft_tokens


def test_warm_requests_hit_prefix_cache(chat_result: BenchResult, completions_result: BenchResult) -> None:
    for res in (chat_result, completions_result):
        for s in res.phase_samples("warm"):
            assert s.server.prefix_cache_hits > 0, s
            assert s.server.prefix_cache_hits <= s.prompt_tokens
        for s in res.phase_samples("cold"):
            assert s.server.prefix_cache_hits == 0, s  # unique tag right after the template head


def test_write_and_summary(chat_result: BenchResult, tmp_path) -> None:
    paths = chat_result.write(tmp_path)
    lines = paths["bench.jsonl"].read_text().splitlines()
    assert len(lines) == len(chat_result.samples)
    assert [json.loads(ln)["phase"] for ln in lines] == [s.phase for s in chat_result.samples]
    summary = json.loads(paths["bench.json"].read_text())
    assert Workload.model_validate(json.loads(paths["workload.json"].read_text())) == chat_result.workload
    cold = summary["phases"]["cold"]["ttft_s"]
    assert cold["n"] == REPS and cold["min"] <= cold["median"] <= cold["max"]
    assert sorted(cold["samples"]) == sorted(s.ttft_s for s in chat_result.phase_samples("cold"))
    assert summary["warmup"]["phase"] == "warmup"
    table = format_table(summary)
    assert "decode_tok_s" in table and "server.spec_accept_len" in table and "warmup (excluded)" in table


def test_check_server_identity(local_vllm_server) -> None:
    entry = check_server_identity(local_vllm_server.url, local_vllm_server.model)
    assert entry["id"] == local_vllm_server.model
    with pytest.raises(ServedeckError, match="does not serve model 'not-this-model'"):
        check_server_identity(local_vllm_server.url, "not-this-model")
    with pytest.raises(ServedeckError, match="does not serve model"):
        run_bench(local_vllm_server.url, _workload(local_vllm_server), served_model="not-this-model")


def test_prompt_longer_than_context_is_a_user_error(local_vllm_server) -> None:
    w = Workload(prompt_tokens=local_vllm_server.max_model_len + 8, max_tokens=8, repetitions=1,
                 warmup_requests=0)
    with pytest.raises(ServedeckError, match="exceeds the server's max_model_len"):
        run_bench(local_vllm_server.url, w, served_model=local_vllm_server.model)
