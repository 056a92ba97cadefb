"""External benchmark files with failed requests (servedeck.bench.external, bench.record).

Field cases 42/42b are copied into tests/fixtures/cases/field-2/ with their .meta.yml; the
variants below are built from them (other vLLM versions' shapes, guidellm reports).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servedeck.bench.external import import_file, import_guidellm, import_vllm_bench
from servedeck.bench.record import import_external
from servedeck.errors import ServedeckError
from servedeck.runs.store import create_run

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "field-2"
CASE_42 = CASES / "42-bench-import-failed-requests.json"
CASE_42B = CASES / "42b-bench-import-all-ok.clean.json"


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def _write(tmp_path: Path, doc: dict, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _must_mention(meta: Path) -> list[str]:
    line = next(ln for ln in meta.read_text().splitlines() if ln.startswith("# must-mention:"))
    return [w.strip() for w in line.split(":", 1)[1].split(",")]


# ---- field cases 42 / 42b --------------------------------------------------------------------

def test_case_42_counts_failures_and_uses_only_successful_requests():
    ext = import_vllm_bench(CASE_42)
    assert ext.partial is True
    assert ext.requests.model_dump() == {"total": 10, "completed": 6, "failed": 4, "incomplete": None}
    ttft = ext.metrics["ttft_s"]
    assert (ttft["median"], ttft["min"], ttft["max"], ttft["n"]) == (0.504, 0.412, 0.618, 6)
    assert ext.metrics["prompt_tokens"] == {"median": 2048.0, "mean": 2048.0, "min": 2048.0, "max": 2048.0, "n": 6}
    assert ext.metrics["output_tokens"]["min"] == 256.0 and ext.metrics["output_tokens"]["n"] == 6
    assert ext.metrics["prefill_tok_s"]["n"] == 6 and ext.metrics["prefill_tok_s"]["max"] == pytest.approx(2048 / 0.412)
    assert ext.metrics["e2e_s"]["min"] == 5.8945  # not the failed requests' 0.012 s
    assert ext.failure_reasons == [{"text": "Bad Request: input of 40000 tokens exceeds the model's context "
                                            "length of 32768", "count": 4}]
    assert ext.notes[0].startswith("4 of 10 requests failed")
    assert all(word in ext.notes[0] for word in _must_mention(CASE_42.with_suffix(".meta.yml")))


def test_case_42b_imports_fully_without_notes():
    ext = import_vllm_bench(CASE_42B)
    d = _doc(CASE_42B)
    ttft = ext.metrics["ttft_s"]
    assert (ttft["median"], ttft["min"], ttft["max"], ttft["n"]) == (0.504, 0.412, 0.618, 10)
    assert ext.metrics["decode_tok_s"]["median"] == pytest.approx(1000.0 / d["median_tpot_ms"])
    assert not ext.partial and ext.notes == [] and ext.failure_reasons == []
    assert ext.requests.model_dump() == {"total": 10, "completed": 10, "failed": 0, "incomplete": None}


def test_import_external_records_the_partial_run(tmp_path):
    run = create_run(tmp_path / "runs", "base", "b70")
    mapped = import_external(run.path, CASE_42)
    stored = json.loads((run.path / "external-42-bench-import-failed-requests.json").read_text())
    assert stored == mapped
    assert stored["partial"] is True and stored["requests"]["failed"] == 4
    assert (run.path / "external" / CASE_42.name).read_bytes() == CASE_42.read_bytes()
    clean = import_external(run.path, CASE_42B)
    assert clean["partial"] is False


def test_an_all_failed_file_is_refused_and_nothing_is_written(tmp_path):
    d = _doc(CASE_42)
    n = len(d["errors"])
    d.update(completed=0, failed=n, errors=["Server disconnected without sending a response."] * n,
             ttfts=[0.0] * n, output_lens=[0] * n, mean_ttft_ms=0.0, median_ttft_ms=0.0)
    path = _write(tmp_path, d, "all-failed.json")
    run = create_run(tmp_path / "runs", "base", "b70")
    with pytest.raises(ServedeckError, match="all 10 requests failed: Server disconnected") as exc:
        import_external(run.path, path)
    assert exc.value.file == str(path) and exc.value.hint
    assert not (run.path / "external").exists()
    assert not list(run.path.glob("external-*.json"))


# ---- vllm bench serve variants -----------------------------------------------------------------

def test_failed_requests_without_detailed_arrays_are_counted_from_failed(tmp_path):
    d = {k: v for k, v in _doc(CASE_42).items()
         if k not in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "errors", "generated_texts")}
    ext = import_vllm_bench(_write(tmp_path, d))
    assert ext.partial and ext.requests.failed == 4 and ext.requests.total == 10
    assert ext.metrics["ttft_s"]["min"] is None and ext.metrics["ttft_s"]["n"] == 6
    assert ext.failure_reasons == [] and ext.notes[0].startswith("4 of 10 requests failed:")


def test_old_file_without_failed_key_derives_it_from_num_prompts(tmp_path):
    d = {k: v for k, v in _doc(CASE_42).items() if k not in ("failed", "errors")}
    ext = import_vllm_bench(_write(tmp_path, d))
    assert ext.requests.model_dump() == {"total": 10, "completed": 6, "failed": 4, "incomplete": None}
    # the arrays hold failed requests too, but without an errors array they cannot be told apart
    assert ext.metrics["ttft_s"]["min"] is None and "prompt_tokens" not in ext.metrics
    assert any("no per-request errors array" in n for n in ext.notes)


def test_old_file_all_ok_without_failed_key_uses_the_arrays(tmp_path):
    d = {k: v for k, v in _doc(CASE_42B).items() if k not in ("failed", "errors")}
    ext = import_vllm_bench(_write(tmp_path, d))
    assert not ext.partial and ext.metrics["ttft_s"]["min"] == 0.412 and ext.metrics["prompt_tokens"]["n"] == 10


def test_errors_array_wins_over_a_contradicting_completed_count(tmp_path):
    d = dict(_doc(CASE_42), completed=10, failed=0)
    ext = import_vllm_bench(_write(tmp_path, d))
    assert ext.requests.completed == 6 and ext.requests.failed == 4 and ext.partial
    assert any("servedeck follows the errors array" in n for n in ext.notes)


def test_arrays_of_different_lengths_are_not_used(tmp_path):
    d = _doc(CASE_42B)
    d["ttfts"] = d["ttfts"][:-1]
    ext = import_vllm_bench(_write(tmp_path, d))
    assert ext.metrics["ttft_s"]["min"] is None and "prefill_tok_s" not in ext.metrics
    assert any("different lengths" in n for n in ext.notes)


def test_append_result_is_refused_unless_one_is_named_then_keeps_its_failures(tmp_path):
    """Issue 30: an --append-result file of two runs is not silently its last line."""
    path = tmp_path / "appended.json"
    path.write_text(CASE_42B.read_text().replace("\n", " ") + "\n" + json.dumps(_doc(CASE_42)) + "\n")
    with pytest.raises(ServedeckError, match="2 benchmarks in this file"):
        import_file(path)
    ext = import_file(path, benchmark="2")
    assert ext.source == "vllm-bench-serve" and ext.partial and ext.requests.failed == 4
    assert (ext.benchmark.index, ext.benchmarks_in_file) == (2, 2)


def test_failed_count_without_totals_still_makes_a_partial_import(tmp_path):
    d = {"failed": 2, "median_ttft_ms": 500.0, "mean_ttft_ms": 510.0, "median_tpot_ms": 20.0}
    ext = import_vllm_bench(_write(tmp_path, d))
    assert ext.partial and ext.requests.failed == 2 and ext.requests.total is None
    assert ext.notes == ["2 requests failed: all statistics cover the successful requests only; "
                         "the run is partial"]


def test_all_failed_summary_only_file_is_refused(tmp_path):
    d = {"num_prompts": 5, "completed": 0, "failed": 5, "median_ttft_ms": 0.0, "mean_ttft_ms": 0.0,
         "median_tpot_ms": 0.0, "mean_tpot_ms": 0.0}
    with pytest.raises(ServedeckError, match="no request succeeded: all 5 requests failed"):
        import_vllm_bench(_write(tmp_path, d))


# ---- guidellm ---------------------------------------------------------------------------------

def _summ(mean, median, lo, hi, n, errored=0, incomplete=0):
    part = lambda c: {"mean": mean, "median": median, "min": lo, "max": hi, "count": c}  # noqa: E731
    return {"successful": part(n), "errored": part(errored), "incomplete": part(incomplete),
            "total": part(n + errored + incomplete)}


def _guidellm(ok: int, errored: int, incomplete: int = 0, *, totals: str | None = "benchmark") -> dict:
    metrics = {
        "time_to_first_token_ms": _summ(500.0, 504.0, 412.0, 618.0, ok, errored, incomplete),
        "inter_token_latency_ms": _summ(21.6, 21.5, 21.4, 21.9, ok, errored, incomplete),
        "request_latency": _summ(6.0, 6.0, 5.9, 6.2, ok, errored, incomplete),
    }
    bench: dict = {"config": {}, "metrics": metrics}
    totals_doc = {"successful": ok, "errored": errored, "incomplete": incomplete, "total": ok + errored + incomplete}
    if totals == "benchmark":
        bench["request_totals"] = totals_doc
    elif totals == "metrics":
        metrics["request_totals"] = totals_doc
    return {"metadata": {}, "benchmarks": [bench]}


@pytest.mark.parametrize("where", ["benchmark", "metrics", None])
def test_guidellm_errored_requests_make_a_partial_import(tmp_path, where):
    ext = import_file(_write(tmp_path, _guidellm(6, 4, totals=where), "benchmarks.json"))
    assert ext.source == "guidellm" and ext.partial
    assert (ext.requests.total, ext.requests.completed, ext.requests.failed) == (10, 6, 4)
    assert ext.metrics["ttft_s"]["n"] == 6 and ext.metrics["ttft_s"]["min"] == pytest.approx(0.412)
    assert ext.notes[0].startswith("4 of 10 requests failed")


def test_guidellm_incomplete_requests_are_partial_too(tmp_path):
    ext = import_guidellm(_write(tmp_path, _guidellm(8, 0, 2), "benchmarks.json"))
    assert ext.partial and ext.requests.incomplete == 2
    assert "2 of 10 did not complete" in ext.notes[0]


def test_guidellm_clean_report_is_not_partial(tmp_path):
    ext = import_guidellm(_write(tmp_path, _guidellm(10, 0), "benchmarks.json"))
    assert not ext.partial and ext.notes == [] and ext.requests.completed == 10


def test_guidellm_all_errored_is_refused(tmp_path):
    with pytest.raises(ServedeckError, match="all 7 requests failed"):
        import_guidellm(_write(tmp_path, _guidellm(0, 7), "benchmarks.json"))


def test_failures_with_an_empty_error_text_are_told_by_their_missing_answer(tmp_path):
    """vLLM's request functions write ``response.reason or ""``: a failed request may carry an
    empty error text; its ttft 0.0 and 0 output tokens still mark it."""
    d = _doc(CASE_42)
    d["errors"] = [""] * len(d["errors"])
    ext = import_vllm_bench(_write(tmp_path, d))
    assert (ext.requests.completed, ext.requests.failed, ext.partial) == (6, 4, True)
    assert ext.metrics["ttft_s"]["min"] > 0 and ext.metrics["output_tokens"]["min"] > 0


def test_more_failures_than_the_arrays_show_keeps_the_files_counts(tmp_path):
    d = _doc(CASE_42B)
    d.update(completed=7, failed=3)  # three failures that answered something, with empty error texts
    ext = import_vllm_bench(_write(tmp_path, d))
    assert (ext.requests.completed, ext.requests.failed, ext.partial) == (7, 3, True)
    assert ext.metrics["ttft_s"]["min"] is None and "output_tokens" not in ext.metrics
    assert any("follows the file's counts" in n for n in ext.notes)


def test_all_failed_with_empty_error_texts_is_refused(tmp_path):
    d = _doc(CASE_42)
    d.update(completed=0, failed=len(d["errors"]), errors=[""] * len(d["errors"]),
             ttfts=[0.0] * len(d["errors"]), output_lens=[0] * len(d["errors"]))
    with pytest.raises(ServedeckError, match="no request succeeded"):
        import_vllm_bench(_write(tmp_path, d))


def test_a_file_saved_with_a_byte_order_mark_imports(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + CASE_42B.read_bytes())
    assert import_vllm_bench(path).requests.completed == _doc(CASE_42B)["completed"]
