"""Faulty external benchmark inputs (servedeck.bench.external, servedeck.bench.interop): every
wrong type, impossible value or contradicting count is a ServedeckError naming the file and key,
or keeps the result partial; selectors compare only the value they name."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from servedeck.bench.external import import_file, import_guidellm, import_vllm_bench
from servedeck.bench.interop import import_curve
from servedeck.errors import ServedeckError

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases"
CASE_42 = CASES / "field-2" / "42-bench-import-failed-requests.json"
CASE_42B = CASES / "field-2" / "42b-bench-import-all-ok.clean.json"
CASE_55B = CASES / "field-3" / "55b-guidellm-single-benchmark.clean.json"


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def _write(tmp_path: Path, doc: object, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _lines(tmp_path: Path, docs: list[dict], name: str = "append.jsonl") -> Path:
    return _write(tmp_path, "".join(json.dumps(d) + "\n" for d in docs), name)


# ---- #2: rate@X compares the rate only, concurrency@N the concurrency only -----------------

def test_rate_selector_ignores_a_max_concurrency_of_the_same_number(tmp_path):
    a = dict(_doc(CASE_42B), request_rate=1.0, max_concurrency=4)
    b = dict(_doc(CASE_42B), request_rate=2.0, max_concurrency=8)
    path = _lines(tmp_path, [a, b])
    for selector in ("rate@4", "rate@8"):
        with pytest.raises(ServedeckError, match="names none"):
            import_vllm_bench(path, benchmark=selector)
    assert import_vllm_bench(path, benchmark="rate@2").benchmark.index == 2


def test_rate_selector_in_a_rate_sweep_at_a_fixed_cap(tmp_path):
    docs = [dict(_doc(CASE_42B), request_rate=r, max_concurrency=4) for r in (1.0, 4.0)]
    path = _lines(tmp_path, docs)
    assert import_vllm_bench(path, benchmark="rate@4").benchmark.rate_rps == 4.0
    assert import_vllm_bench(path, benchmark="rate@1").benchmark.rate_rps == 1.0
    with pytest.raises(ServedeckError, match="names none"):
        import_vllm_bench(path, benchmark="rate@3")


def test_concurrency_selector_ignores_a_rate_of_the_same_number(tmp_path):
    docs = [dict(_doc(CASE_42B), request_rate="inf", max_concurrency=c) for c in (2, 8)]
    path = _lines(tmp_path, docs)
    assert import_vllm_bench(path, benchmark="concurrency@8").benchmark.index == 2
    with pytest.raises(ServedeckError, match="names none"):
        import_vllm_bench(path, benchmark="concurrency@4")


# ---- #4: non-finite, negative and zero statistics ------------------------------------------

@pytest.mark.parametrize("raw,key", [("NaN", "median_ttft_ms"), ("Infinity", "median_ttft_ms"),
                                     ("-Infinity", "median_ttft_ms")])
def test_non_finite_vllm_statistics_are_refused_naming_the_key(tmp_path, raw, key):
    text = json.dumps(_doc(CASE_42B)).replace('"median_ttft_ms": 504.0', f'"median_ttft_ms": {raw}')
    assert raw in text
    with pytest.raises(ServedeckError) as exc:
        import_vllm_bench(_write(tmp_path, text))
    assert exc.value.field == key and "result.json" in exc.value.file


@pytest.mark.parametrize("key", ["median_ttft_ms", "mean_ttft_ms", "median_tpot_ms", "mean_e2el_ms"])
def test_negative_vllm_statistics_are_refused(tmp_path, key):
    with pytest.raises(ServedeckError, match="never negative") as exc:
        import_vllm_bench(_write(tmp_path, dict(_doc(CASE_42B), **{key: -5.0})))
    assert exc.value.field == key


@pytest.mark.parametrize("bad", [-0.4, "NaN"])
def test_a_bad_item_of_a_per_request_array_is_refused_by_index(tmp_path, bad):
    d = _doc(CASE_42B)
    d["ttfts"][3] = "@@"
    text = json.dumps(d).replace('"@@"', str(bad))
    with pytest.raises(ServedeckError) as exc:
        import_vllm_bench(_write(tmp_path, text))
    assert exc.value.field == "ttfts[3]"


def test_zero_median_ttft_with_successful_requests_is_refused(tmp_path):
    with pytest.raises(ServedeckError, match="5895") as exc:
        import_vllm_bench(_write(tmp_path, dict(_doc(CASE_42B), median_ttft_ms=0.0)))
    assert exc.value.field == "median_ttft_ms"


def test_a_median_outside_the_per_request_minimum_and_maximum_is_refused(tmp_path):
    with pytest.raises(ServedeckError, match="outside") as exc:
        import_vllm_bench(_write(tmp_path, dict(_doc(CASE_42B), median_ttft_ms=900.0)))
    assert exc.value.field == "median_ttft_ms"


@pytest.mark.parametrize("name,value,match", [("time_to_first_token_ms", -296, "never negative"),
                                              ("inter_token_latency_ms", -28.2, "never negative"),
                                              ("time_to_first_token_ms", 0, "5895"),
                                              ("time_to_first_token_ms", 5000.0, "outside")])
def test_bad_guidellm_medians_are_refused_naming_the_key(tmp_path, name, value, match):
    g = _doc(CASE_55B)
    g["benchmarks"][0]["metrics"][name]["successful"]["median"] = value
    with pytest.raises(ServedeckError, match=match) as exc:
        import_guidellm(_write(tmp_path, g))
    assert exc.value.field == f"benchmarks[0].metrics.{name}.successful.median"


def test_guidellm_nan_statistic_never_reaches_a_run_file(tmp_path):
    g = _doc(CASE_55B)
    g["benchmarks"][0]["metrics"]["request_latency"]["successful"]["mean"] = "@@"
    with pytest.raises(ServedeckError, match="not a finite number"):
        import_guidellm(_write(tmp_path, json.dumps(g).replace('"@@"', "NaN")))


# ---- #5: wrongly typed fields ----------------------------------------------------------------

@pytest.mark.parametrize("key,value,field", [("median_ttft_ms", "fast", "median_ttft_ms"),
                                             ("completed", "ten", "completed"), ("completed", [1], "completed"),
                                             ("completed", 9.5, "completed"), ("num_prompts", "ten", "num_prompts"),
                                             ("ttfts", {"a": 1}, "ttfts")])
def test_wrongly_typed_vllm_fields_name_the_key(tmp_path, key, value, field):
    with pytest.raises(ServedeckError) as exc:
        import_vllm_bench(_write(tmp_path, dict(_doc(CASE_42B), **{key: value})))
    assert exc.value.field == field and exc.value.file.endswith("result.json") and exc.value.hint


def test_null_inside_a_per_request_array_names_the_index(tmp_path):
    d = _doc(CASE_42B)
    d["ttfts"][1] = None
    with pytest.raises(ServedeckError, match="null") as exc:
        import_vllm_bench(_write(tmp_path, d))
    assert exc.value.field == "ttfts[1]"


def _guidellm(change) -> dict:
    g = _doc(CASE_55B)
    change(g["benchmarks"][0])
    return g


@pytest.mark.parametrize("change,field", [
    (lambda b: b.__setitem__("metrics", []), "benchmarks[0].metrics"),
    (lambda b: b["metrics"]["time_to_first_token_ms"].__setitem__("successful", [1, 2]),
     "benchmarks[0].metrics.time_to_first_token_ms.successful"),
    (lambda b: b["metrics"]["request_totals"].__setitem__("successful", "many"),
     "benchmarks[0].metrics.request_totals.successful"),
    (lambda b: b["metrics"]["time_to_first_token_ms"]["successful"].__setitem__("count", "x"),
     "benchmarks[0].metrics.time_to_first_token_ms.successful.count"),
    (lambda b: b["metrics"]["time_to_first_token_ms"]["successful"].__setitem__("median", "fast"),
     "benchmarks[0].metrics.time_to_first_token_ms.successful.median"),
])
def test_wrongly_typed_guidellm_fields_name_the_key(tmp_path, change, field):
    with pytest.raises(ServedeckError) as exc:
        import_file(_write(tmp_path, _guidellm(change)))
    assert exc.value.field == field


def test_a_guidellm_benchmark_that_is_not_an_object_is_refused(tmp_path):
    with pytest.raises(ServedeckError) as exc:
        import_file(_write(tmp_path, {"benchmarks": [1]}))
    assert exc.value.field == "benchmarks[0]"
    with pytest.raises(ServedeckError) as exc:
        import_curve(_write(tmp_path, {"benchmarks": ["x", "y"]}))
    assert exc.value.field == "benchmarks[0]"


def test_curve_of_a_guidellm_report_with_metrics_as_a_list_is_refused(tmp_path):
    with pytest.raises(ServedeckError) as exc:
        import_curve(_write(tmp_path, _guidellm(lambda b: b.__setitem__("metrics", []))))
    assert exc.value.field == "benchmarks[0].metrics"


def _sweep(root: Path, docs: dict[str, bytes]) -> Path:
    for name, raw in docs.items():
        (root / "SERVE-a-BENCH-c4").mkdir(parents=True, exist_ok=True)
        (root / "SERVE-a-BENCH-c4" / name).write_bytes(raw)
    return root


def test_a_sweep_file_that_is_not_utf8_is_refused_naming_it(tmp_path):
    root = _sweep(tmp_path / "exp", {"run=0.json": CASE_42B.read_bytes(), "run=1.json": b"\xff\xfe{}"})
    with pytest.raises(ServedeckError, match="not UTF-8") as exc:
        import_curve(root)
    assert exc.value.file.endswith("run=1.json")


def test_a_sweep_file_with_a_string_count_is_refused_naming_the_key(tmp_path):
    bad = json.dumps(dict(_doc(CASE_42B), num_prompts="ten")).encode()
    with pytest.raises(ServedeckError) as exc:
        import_curve(_sweep(tmp_path / "exp", {"run=0.json": bad}))
    assert exc.value.field == "num_prompts" and exc.value.file.endswith("run=0.json")


# ---- #12: a syntax error deep in a pretty-printed file --------------------------------------

def test_a_syntax_error_deep_in_a_pretty_printed_file_is_reported_where_it_is(tmp_path):
    text = json.dumps(_doc(CASE_42B), indent=2).splitlines()
    text[11] = text[11] + ","
    with pytest.raises(ServedeckError) as exc:
        import_file(_write(tmp_path, "\n".join(text)))
    assert exc.value.line == 12 and "line 12" in exc.value.message
    assert not exc.value.hint or "one JSON object per line" not in exc.value.hint


def test_a_bad_line_of_an_append_result_file_still_gets_the_json_lines_hint(tmp_path):
    path = _write(tmp_path, json.dumps(_doc(CASE_42B)) + "\n{oops\n")
    with pytest.raises(ServedeckError, match="line 2") as exc:
        import_file(path)
    assert "one JSON object per line" in exc.value.hint


# ---- #13: the file's own counts say requests failed -----------------------------------------

def test_old_file_whose_completed_is_below_num_prompts_stays_partial(tmp_path):
    d = _doc(CASE_42B)
    d.pop("failed")
    d["completed"] = 6  # 10 prompts, errors all "" and every ttft answered
    ext = import_vllm_bench(_write(tmp_path, d))
    assert ext.partial and (ext.requests.completed, ext.requests.failed, ext.requests.total) == (6, 4, 10)
    assert ext.metrics["ttft_s"]["min"] is None and ext.metrics["ttft_s"]["max"] is None


def test_counts_disagreeing_with_a_longer_errors_array_keep_the_larger_failure_count(tmp_path):
    d = dict(_doc(CASE_42B), failed=4, completed=6)
    for k in ("errors", "ttfts", "input_lens", "output_lens", "latencies", "itls", "generated_texts"):
        if isinstance(d.get(k), list):
            d[k] = d[k] + d[k][:2]
    ext = import_vllm_bench(_write(tmp_path, d))
    assert ext.partial and ext.requests.failed == 4 and ext.requests.completed == 6
    assert ext.metrics["ttft_s"]["min"] is None and ext.metrics.get("e2e_s", {}).get("min") is None


# ---- #14: a GuideLLM benchmark without statistics ------------------------------------------

def test_guidellm_benchmark_with_empty_metrics_is_refused(tmp_path):
    with pytest.raises(ServedeckError, match="no statistics"):
        import_file(_write(tmp_path, _guidellm(lambda b: b.__setitem__("metrics", {}))))


def test_guidellm_benchmark_with_unknown_counts_gets_a_note(tmp_path):
    def strip(b):
        b.pop("request_totals", None)
        b["metrics"].pop("request_totals", None)
        b["metrics"].pop("request_latency", None)
    ext = import_file(_write(tmp_path, _guidellm(strip)))
    assert ext.requests.completed is None
    assert any("does not say how many requests" in n for n in ext.notes)


def test_curve_level_of_a_guidellm_benchmark_without_statistics_is_refused(tmp_path):
    g = _doc(CASE_55B)
    g["benchmarks"].append(copy.deepcopy(g["benchmarks"][0]))
    g["benchmarks"][1]["metrics"] = {"request_totals": g["benchmarks"][0]["metrics"]["request_totals"]}
    with pytest.raises(ServedeckError, match="no TTFT") as exc:
        import_curve(_write(tmp_path, g))
    assert exc.value.field == "benchmarks[1].metrics"


# ---- #3: --import-curve levels -----------------------------------------------------------------

def _all_failed(doc: dict) -> dict:
    n = doc["num_prompts"]
    return dict(doc, completed=0, failed=n, errors=["boom"] * n, ttfts=[0.0] * n, output_lens=[0] * n)


def test_curve_level_with_no_successful_request_is_refused_naming_it(tmp_path):
    ok = dict(_doc(CASE_42B), max_concurrency=2)
    path = _lines(tmp_path, [ok, _all_failed(_doc(CASE_42B))])
    with pytest.raises(ServedeckError, match="level c=4 .*no successful request"):
        import_curve(path)


def test_curve_guidellm_level_with_no_successful_request_is_refused(tmp_path):
    g = _doc(CASE_55B)
    g["benchmarks"][0]["metrics"]["request_totals"].update(successful=0, errored=74, total=74)
    with pytest.raises(ServedeckError, match="no successful request") as exc:
        import_curve(_write(tmp_path, g))
    assert "benchmarks[0]" in exc.value.field


def test_curve_partial_levels_get_a_note_on_every_path(tmp_path):
    ok = dict(_doc(CASE_42B), max_concurrency=2)
    curve = import_curve(_lines(tmp_path, [ok, _doc(CASE_42)]))
    assert any(n.startswith("level c=4: 4 of 10 requests failed") for n in curve.notes)
    g = _doc(CASE_55B)
    g["benchmarks"][0]["metrics"]["request_totals"].update(successful=70, errored=4, total=74)
    curve = import_curve(_write(tmp_path, g, "g.json"))
    assert any("4 of 74 requests failed" in n for n in curve.notes)


def test_curve_labels_keep_the_cap_and_are_never_alike(tmp_path):
    a = dict(_doc(CASE_42B), request_rate=2.0, max_concurrency=4)
    b = dict(_doc(CASE_42B), request_rate=2.0, max_concurrency=64)
    labels = [lv.label for lv in import_curve(_lines(tmp_path, [a, b])).levels]
    assert sorted(labels) == ["2 req/s @ c=4", "2 req/s @ c=64"]
    same = _lines(tmp_path, [_doc(CASE_42B), _doc(CASE_42B)], "same.jsonl")
    labels = [lv.label for lv in import_curve(same).levels]
    assert len(set(labels)) == 2 and all(lb.startswith("c=4") for lb in labels)


def test_curve_refuses_a_negative_throughput(tmp_path):
    bad = dict(_doc(CASE_42B), request_throughput=-1.0)
    with pytest.raises(ServedeckError, match="never negative") as exc:
        import_curve(_lines(tmp_path, [_doc(CASE_42B), bad]))
    assert exc.value.field == "#2.request_throughput"
