"""Benchmark files holding several benchmarks (issue 30, item 5): field cases 55 / 55b
(tests/fixtures/cases/field-3) and the same kind in ``vllm bench serve --append-result`` files.

The file's benchmarks are listed; the one the user names is imported and says which it is;
without a name a file of several is refused, never read as its first (or last) benchmark.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servedeck.bench.external import choose, import_file, list_benchmarks
from servedeck.bench.record import import_external
from servedeck.errors import ServedeckError
from servedeck.runs.store import create_run

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "fixtures" / "cases" / "field-3"
SWEEP = CASES / "55-guidellm-sweep-several-benchmarks.json"
SINGLE = CASES / "55b-guidellm-single-benchmark.clean.json"
CASE_42B = ROOT / "tests" / "fixtures" / "cases" / "field-2" / "42b-bench-import-all-ok.clean.json"


def _must_mention(meta: Path) -> list[str]:
    line = next(ln for ln in meta.read_text().splitlines() if ln.startswith("# must-mention:"))
    return [w.strip() for w in line.split(":", 1)[1].split(",")]


# ----------------------------------------------------------------------------- case 55: a sweep

def test_the_sweep_lists_its_four_benchmarks_as_guidellm_names_them():
    entries = list_benchmarks(SWEEP)
    assert [e.label for e in entries] == ["synchronous", "throughput@512", "constant@1.55", "constant@2.93"]
    assert [(e.strategy, e.rate_rps, e.concurrency) for e in entries] == [
        ("synchronous", None, 1), ("throughput", None, 512), ("constant", 1.55, None), ("constant", 2.93, None)]


def test_case_55_without_a_choice_is_refused_naming_what_it_holds():
    with pytest.raises(ServedeckError) as exc:
        import_file(SWEEP)
    text = exc.value.message + " " + (exc.value.hint or "")
    for word in _must_mention(SWEEP.with_name(SWEEP.name.replace(".json", ".meta.yml"))):
        assert word in text
    assert "4 benchmarks" in text and "constant@2.93" in text and "--benchmark" in text


def test_case_55_imports_the_named_benchmark_and_says_which():
    ext = import_file(SWEEP, benchmark="constant@1.55")
    bench = json.loads(SWEEP.read_text())["benchmarks"][2]
    ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
    assert ext.metrics["ttft_s"]["median"] == pytest.approx(ttft["median"] / 1000)
    assert (ext.benchmark.label, ext.benchmark.index, ext.benchmarks_in_file) == ("constant@1.55", 3, 4)
    assert any("of the 4 in this file" in n for n in ext.notes)
    # not the synchronous one
    sync = json.loads(SWEEP.read_text())["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]
    assert ext.metrics["ttft_s"]["median"] != pytest.approx(sync["median"] / 1000)


@pytest.mark.parametrize("selector,index", [
    ("constant@1.55", 3), ("CONSTANT@1.55", 3), ("constant@1.5500", 3), ("3", 3), ("#3", 3),
    ("synchronous", 1), ("throughput", 2), ("throughput@512", 2), ("constant@2.93", 4), ("4", 4),
])
def test_every_way_of_naming_a_benchmark(selector, index):
    assert choose(list_benchmarks(SWEEP), selector).index == index


@pytest.mark.parametrize("selector,words", [
    ("constant", ["names 2 benchmarks", "constant@1.55", "constant@2.93"]),   # two of them: say so
    ("poisson@1.55", ["names none", "synchronous"]),
    ("5", ["names none"]),
    ("", ["4 benchmarks", "choose one"]),
])
def test_a_name_that_picks_none_or_several_is_refused(selector, words):
    with pytest.raises(ServedeckError) as exc:
        choose(list_benchmarks(SWEEP), selector, path=SWEEP)
    for w in words:
        assert w in exc.value.message


def test_import_external_writes_nothing_on_refusal_and_the_chosen_one_under_its_label(tmp_path):
    run = create_run(tmp_path / "runs", "base", "b70")
    with pytest.raises(ServedeckError):
        import_external(run.path, SWEEP)
    assert not list(run.path.glob("external*"))
    mapped = import_external(run.path, SWEEP, "throughput")
    assert mapped["benchmark"]["label"] == "throughput@512" and mapped["benchmarks_in_file"] == 4
    summary = run.path / "external-55-guidellm-sweep-several-benchmarks@2-throughput@512.json"
    assert json.loads(summary.read_text())["benchmark"]["strategy"] == "throughput"
    import_external(run.path, SWEEP, "synchronous")  # a second benchmark of the same file: its own file
    assert len(list(run.path.glob("external-*.json"))) == 2


# ----------------------------------------------------------------------------- case 55b: the clean twin

def test_case_55b_imports_its_one_benchmark_without_a_name():
    ext = import_file(SINGLE)
    ttft = ext.metrics["ttft_s"]
    assert (ttft["median"], ttft["min"], ttft["max"], ttft["n"]) == pytest.approx((0.296, 0.2403, 0.4028, 74))
    assert ext.metrics["decode_tok_s"]["median"] == pytest.approx(1000 / 28.2)
    assert ext.notes == [] and not ext.partial
    assert (ext.benchmark.label, ext.benchmark.concurrency, ext.benchmarks_in_file) == ("concurrent@4", 4, 1)


# ----------------------------------------------------------------------------- vllm bench serve --append-result

def _append_file(tmp_path: Path, loads: list[dict], name: str = "sweep.json") -> Path:
    base = json.loads(CASE_42B.read_text())
    lines = []
    for i, load in enumerate(loads):
        doc = {**base, **load, "median_ttft_ms": 420.0 + 50.0 * i}  # within the file's own ttfts
        lines.append(json.dumps(doc))
    path = tmp_path / name
    path.write_text("\n".join(lines))  # vLLM writes a newline before each appended result
    return path


def test_an_append_result_loop_over_concurrency_is_listed_and_chosen(tmp_path):
    path = _append_file(tmp_path, [{"request_rate": "inf", "max_concurrency": c} for c in (1, 4, 16)])
    assert [e.label for e in list_benchmarks(path)] == ["concurrency@1", "concurrency@4", "concurrency@16"]
    with pytest.raises(ServedeckError, match="3 benchmarks in this file .concurrency@1, concurrency@4"):
        import_file(path)
    ext = import_file(path, benchmark="concurrency@4")
    assert ext.metrics["ttft_s"]["median"] == pytest.approx(0.47)
    assert (ext.benchmark.concurrency, ext.benchmark.strategy) == (4, "concurrency")


def test_rates_labels_and_a_ramp_up_are_read_from_vllms_keys(tmp_path):
    path = _append_file(tmp_path, [
        {"request_rate": 2.0, "max_concurrency": None, "label": "warm-up"},
        {"request_rate": 8.0, "max_concurrency": 32},
        {"request_rate": "inf", "max_concurrency": None, "ramp_up_strategy": "linear"},
    ])
    entries = list_benchmarks(path)
    assert [e.label for e in entries] == ["rate@2.00", "rate@8.00,concurrency@32", "rate@inf,ramp-up@linear"]
    assert choose(entries, "warm-up").index == 1           # vllm bench serve --label
    assert choose(entries, "rate@8").index == 2            # strategy and value, compared as numbers


def test_a_single_vllm_result_needs_no_name(tmp_path):
    path = _append_file(tmp_path, [{"request_rate": "inf", "max_concurrency": None}])
    ext = import_file(path)
    assert ext.benchmark.label == "rate@inf" and ext.benchmarks_in_file == 1 and ext.notes == []


def test_a_broken_line_is_named(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(CASE_42B.read_text().replace("\n", " ") + "\n{not json\n")
    with pytest.raises(ServedeckError, match="line 2"):
        list_benchmarks(path)


# ----------------------------------------------------------------------------- the CLI

def test_the_bench_task_refuses_a_sweep_and_takes_a_named_benchmark(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "0002-base-b70", runs / "0002-base-b70")
    env = {**os.environ, "SERVEDECK_RUNS_DIR": str(runs)}

    def bench(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "bench", "--import-file", str(SWEEP),
                               "--run", "0002-base-b70", *extra], capture_output=True, text=True, env=env)

    refused = bench()
    assert refused.returncode != 0 and "4 benchmarks" in refused.stderr and "synchronous" in refused.stderr
    took = bench("--benchmark", "constant@2.93")
    assert took.returncode == 0, took.stderr
    assert json.loads(took.stdout)["benchmark"]["rate_rps"] == 2.93
