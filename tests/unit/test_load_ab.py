"""A/B under load (servedeck.ab.load) on recorded runs: the capacity verdict, the per-level
latency metrics in the report's judged family, the report section and its chart; the capacity
verdict's false-positive rate over identical arms, by simulation; vllm bench serve export and
the import of sweeps and curves (servedeck.bench.interop)."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from servedeck.ab.experiment import compare_runs
from servedeck.ab.load import ArmLevel, LevelPair, compare_capacity, compare_load
from servedeck.bench.external import import_vllm_bench
from servedeck.bench.interop import export_vllm_bench, import_curve
from servedeck.bench.load import LoadLevel
from servedeck.ab.report import bench_sentence
from servedeck.bench.loadresult import (LevelResult, LevelServer, LoadSummary, RequestRecord, late_delivery,
                                        summarise_level)
from servedeck.bench.quantiles import proportion
from servedeck.bench.slo import Slo, state_of
from servedeck.errors import ServedeckError
from servedeck.runs import store
from servedeck.runs.records import ServerDelta

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs-cpu"
SLO = Slo(ttft_s=0.5, percentile=50)
LEVELS = (1, 2, 4, 8)


def _records(level: int, n: int, ttfts, rng) -> list[RequestRecord]:
    out = []
    for i in range(n):
        ttft = float(ttfts[i])
        e2e = ttft + 0.5 + rng.uniform(0, 0.05)
        out.append(RequestRecord(level=level, index=i, tag=f"[req x-{level}-{i}]", prompt_tokens_requested=64,
                                 max_tokens=16, sent_s=i * 0.05, sent_unix_s=1.0e9 + i, success=True,
                                 ttft_s=ttft, tpot_s=0.5 / 15, e2e_s=e2e, last_token_s=e2e - 0.001,
                                 itl_s=[0.5 / 15] * 15, prompt_tokens=64, output_tokens=16, first_chunk_tokens=1,
                                 chunks=16, finish_reason="length"))
    return out


def _write_load(run: Path, capacity: int, seed: int, n: int = 12, late: tuple[int, ...] = ()) -> None:
    """A load benchmark of a server that holds ``capacity`` requests at once: beyond it, requests
    wait about a request's duration for their first token. At the levels in ``late`` the server
    handled every first token at once (its own TTFT: the queue wait alone) but the streams reached
    the client a whole request later (late delivery)."""
    rng = np.random.default_rng(seed)
    levels, records = [], []
    for i, c in enumerate(LEVELS):
        base = rng.uniform(0.05, 0.15, n)
        queued = 0.0 if c <= capacity else 1.0
        delivery = 0.5 if c in late else 0.0
        ttfts = base + (0.0 if c <= capacity else rng.uniform(0.8, 1.2, n)) + delivery
        recs = _records(i, n, ttfts, rng)
        delta = ServerDelta(ttft_s=0.1 + queued, ttft_count=n, requests_finished=n)
        server = LevelServer(delta=delta, interval_s=0.5, waiting_mean=max(0, c - capacity), preemptions=0)
        levels.append(summarise_level(i, LoadLevel(kind="concurrency", value=c), recs,
                                      started_at="2026-12-03T10:00:00Z", server=server, slo=SLO))
        records += recs
    summary = LoadSummary(workload={"kind": "chat", "name": "chat", "endpoint": "/v1/chat/completions"},
                          load="concurrency:1,2,4,8", slo=SLO, served_model="Qwen3.8-27B", base_url="http://x",
                          nonce="abc", started_at="t0", finished_at="t1", levels=levels)
    store.write_load_files(run, summary.model_dump(mode="json"), [r.model_dump(mode="json") for r in records])


@pytest.fixture
def arms(tmp_path):
    """Copies of the real CPU runs, each with a load benchmark: A holds 2 at once, B 8, A2 = A."""
    a = shutil.copytree(RUNS / "0001-cpu-4096-local", tmp_path / "runs" / "0001-cpu-4096-local")
    b = shutil.copytree(RUNS / "0002-cpu-8192-local", tmp_path / "runs" / "0002-cpu-8192-local")
    a2 = shutil.copytree(RUNS / "0001-cpu-4096-local", tmp_path / "runs" / "0003-cpu-4096-local")
    _write_load(a, 2, seed=1)
    _write_load(b, 8, seed=2)
    _write_load(a2, 2, seed=3)
    return tmp_path / "runs", a, b, a2


def test_ab_finds_the_capacity_difference_and_reports_the_curves(arms):
    runs_dir, a, b, _ = arms
    out = runs_dir / "reports" / "ab" / "report.md"
    res = compare_runs(runs_dir, [a], [b], out=out)
    load = res.comparison.load
    assert [lv.label for lv in load.levels] == ["c=1", "c=2", "c=4", "c=8"]
    cap = load.capacity
    assert cap.verdict == "higher" and cap.level == "c=4" and cap.p_adjusted <= 0.05
    assert (cap.capacity_a, cap.capacity_b) == (2, 8) and cap.bracket_a == [2, 4] and cap.bracket_b == [8, None]
    assert load.levels[2].a.state == "violated" and load.levels[2].b.state == "met"
    # per-level latency joins the report's judged metrics, with its direction
    ttft4 = res.comparison.metric("ttft_s", "c=4")
    assert ttft4.judged and ttft4.verdict == "faster" and ttft4.lower_is_better
    assert res.comparison.metric("ttft_s", "c=1").verdict in ("no verdict", "equivalent", "within margin")
    text = out.read_text()
    assert "### Under load (chat, concurrency:1,2,4,8)" in text
    assert "| A | 2 | [2, 4) |" in text and "| B | 8 | 8 or more |" in text
    assert "Capacity verdict: **higher**: at c=4 B meets the SLO (12/12 good" in text
    assert "![both arms under load](report-load.png)" in text
    assert (out.parent / "report-load.png").stat().st_size > 10_000
    row = [ln for ln in text.splitlines() if ln.startswith("| c=4 |")][-1]  # the curves table, after the judged rows
    assert "0/12 0% [0%–26%] violated" in row and "12/12 100% [74%–100%] met" in row
    assert any(f.startswith("capacity under p50: ttft_s ≤ 0.5 (chat, concurrency:1,2,4,8): A 2, B 8 requests in "
                            "flight: higher") for f in __import__("servedeck.ab.report", fromlist=["findings"])
               .findings(res.comparison))


def test_aa_finds_no_capacity_difference(arms):
    runs_dir, a, _, a2 = arms
    res = compare_runs(runs_dir, [a], [a2], aa=True)
    cap = res.comparison.load.capacity
    assert cap.verdict == "same bracket" and cap.bracket_a == cap.bracket_b == [2, 4]
    assert "both capacities lie in [2, 4) requests in flight" in cap.reason


def test_another_slo_rejudges_the_recorded_runs(arms):
    runs_dir, a, b, _ = arms
    lenient = Slo(ttft_s=5.0, percentile=50)
    load = compare_load([a], [b], slo=lenient)
    assert load.capacity.verdict == "same bracket" and load.capacity.bracket_a == [8, None]
    res = compare_runs(runs_dir, [a], [b], slo=lenient)
    assert res.comparison.load.slo == lenient


def test_a_level_delivered_late_is_held_out_of_the_verdicts(arms):
    """B's streams reached the client a request late at c=4 and c=8 (its server handled the first
    tokens at once): the client's TTFT there is the host's delivery, so neither the latencies nor
    the SLO shares of those levels are compared, and no capacity is claimed from them."""
    runs_dir, a, b, _ = arms
    _write_load(b, 8, seed=2, late=(4, 8))
    summary, _ = store.read_load(b)
    lags = {lv.level.label: lv.delivery_lag_s for lv in summary.levels}
    assert lags["c=1"] == pytest.approx(0.0, abs=0.06) and lags["c=4"] == pytest.approx(0.5, abs=0.06)
    assert [late_delivery(lv) for lv in summary.levels] == [False, False, True, True]
    res = compare_runs(runs_dir, [a], [b])
    ttft4 = res.comparison.metric("ttft_s", "c=4")
    assert ttft4.verdict == "not comparable" and not ttft4.judged and ttft4.p_adjusted is None
    assert "late delivery in B at c=4" in ttft4.reason and "B 5" in ttft4.reason
    assert res.comparison.metric("ttft_s", "c=1").judged  # the levels delivered on time are judged as before
    cap = res.comparison.load.capacity
    # Without the hold-out B's late TTFTs (0.55-0.65 s) miss the 0.5 s SLO at c=4 and c=8 as A's
    # queued ones do, and the verdict would read "same bracket [2, 4)": B's capacity of 8 called 2.
    # With it, only c=1 and c=2 are compared: both arms hold 2 or more.
    assert cap.verdict == "same bracket" and cap.bracket_b == [2, None]
    assert "c=4, c=8 held out: late delivery" in cap.reason
    assert [p.not_comparable is not None for p in res.comparison.load.levels] == [False, False, True, True]
    report = bench_sentence(ttft4)
    assert "not comparable (late delivery in B at c=4" in report


def test_late_delivery_needs_a_lag_both_absolute_and_relative_to_the_request():
    def level(client_ttft: float, server_ttft: float | None, e2e: float) -> LevelResult:
        rec = _records(0, 4, [client_ttft] * 4, np.random.default_rng(0))
        for r in rec:
            r.e2e_s = e2e
        delta = ServerDelta(ttft_s=server_ttft, ttft_count=4 if server_ttft is not None else 0)
        return summarise_level(0, LoadLevel(kind="concurrency", value=4), rec, started_at="t",
                               server=LevelServer(delta=delta, interval_s=0.5), slo=None)
    assert late_delivery(level(0.30, 0.01, 0.35))               # the whole stream at once
    assert not late_delivery(level(0.06, 0.01, 20.0))           # a 50 ms round trip on a 20 s request
    assert not late_delivery(level(0.04, 0.01, 0.05))           # 30 ms: below the absolute floor
    assert not late_delivery(level(1.20, 1.15, 1.5))            # the server's own queue, seen by both
    assert level(0.30, None, 0.35).delivery_lag_s is None       # no server count: nothing claimed
    assert not late_delivery(level(0.30, None, 0.35))


@functools.lru_cache(maxsize=None)
def _arm(k: int, n: int) -> ArmLevel:
    share = proportion(k, n)
    return ArmLevel(runs=1, requests=n, completed=n, failed=0, request_rps=[1.0], output_tok_s=[1.0],
                    attainment=share, state=state_of(share, 0.9))


def _pair(k_a, k_b, n, value=4.0):
    return LevelPair(label=f"c={value:g}", kind="concurrency", value=value, unit="requests in flight",
                     a=_arm(k_a, n), b=_arm(k_b, n))


@pytest.mark.parametrize("shares", [(0.9, 0.9, 0.9), (0.99, 0.9, 0.6), (0.95, 0.85, 0.3)])
def test_identical_arms_rarely_get_a_capacity_verdict(shares):
    """Identical arms (the same true share of good requests at each level, one level right at
    the SLO's 90 %): the capacity verdict calls a difference at most alpha of the time."""
    rng = np.random.default_rng(list(int(s * 100) for s in shares))
    n, trials, wrong = 40, 2000, 0
    slo = Slo(ttft_s=1.0, percentile=90)
    for _ in range(trials):
        pairs = [_pair(int(rng.binomial(n, s)), int(rng.binomial(n, s)), n, v) for v, s in zip((1, 2, 4), shares)]
        wrong += compare_capacity(pairs, slo, 0.05).verdict in ("higher", "lower")
    assert wrong / trials <= 0.05 + 3 * (0.05 * 0.95 / trials) ** 0.5, wrong / trials


def test_a_real_difference_is_found_with_enough_requests():
    slo = Slo(ttft_s=1.0, percentile=90)
    v = compare_capacity([_pair(60, 60, 60, 1), _pair(30, 60, 60, 2)], slo, 0.05)
    assert v.verdict == "higher" and v.level == "c=2"
    v = compare_capacity([_pair(5, 5, 5, 1), _pair(3, 5, 5, 2)], slo, 0.05)
    assert v.verdict == "no verdict" and "requests per arm and level would decide" in v.reason


# ------------------------------------------------------------------------------ interop


def test_export_in_vllm_bench_serve_shape_reads_back(arms, tmp_path):
    _, a, _, _ = arms
    path = export_vllm_bench(a, tmp_path / "vllm.jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == len(LEVELS)
    first = json.loads(lines[0])
    assert first["max_concurrency"] == 1 and first["request_rate"] == "inf" and first["backend"] == "openai-chat"
    assert first["completed"] == 12 and first["failed"] == 0 and len(first["ttfts"]) == 12
    summary, records = store.read_load(a)
    ttfts = sorted(r.ttft_s for r in records if r.level == 0)
    assert first["median_ttft_ms"] == pytest.approx(float(np.median(ttfts)) * 1000)
    # vLLM's TPOT: (latency - ttft) / (output_len - 1), latency = the last output chunk
    assert first["median_tpot_ms"] == pytest.approx(np.median([(r.last_token_s - r.ttft_s) / 15 for r in records
                                                               if r.level == 0]) * 1000)
    (tmp_path / "one.json").write_text(lines[-1])
    back = import_vllm_bench(tmp_path / "one.json")  # servedeck's own importer reads the shape
    assert back.metrics["ttft_s"]["median"] == pytest.approx(json.loads(lines[-1])["median_ttft_ms"] / 1000)
    assert back.requests.completed == 12
    curve = import_curve(path)  # appended results: one level each
    assert [lv.label for lv in curve.levels] == ["c=1", "c=2", "c=4", "c=8"] and curve.source == "vllm-bench-serve"
    with pytest.raises(ServedeckError, match="no load benchmark"):
        export_vllm_bench(RUNS / "0001-cpu-4096-local", tmp_path / "x.jsonl")


def _sweep_result(conc: int, ttft_ms: float, run_number: int) -> dict:
    return {"date": "20261203-101010", "backend": "openai", "model_id": "m", "num_prompts": 20,
            "request_rate": "inf", "burstiness": 1.0, "max_concurrency": conc, "duration": 10.0, "completed": 19,
            "failed": 1, "request_throughput": 1.9 * conc, "output_throughput": 30.0 * conc,
            "request_goodput": None, "median_ttft_ms": ttft_ms, "p99_ttft_ms": ttft_ms * 2,
            "median_tpot_ms": 20.0, "p99_tpot_ms": 30.0, "median_e2el_ms": 500.0, "p99_e2el_ms": 900.0,
            "run_number": run_number}


def test_vllm_bench_sweep_directory_imports_as_a_curve(tmp_path):
    root = tmp_path / "exp"
    for serve in ("mnbt-4096", "mnbt-8192"):
        for conc in (1, 4):
            d = root / f"SERVE-{serve}-BENCH-max_concurrency={conc}"
            d.mkdir(parents=True)
            (d / "run=0.json").write_text(json.dumps(_sweep_result(conc, 100.0 * conc, 0)))
            (d / "summary.json").write_text(json.dumps([_sweep_result(conc, 100.0 * conc, 0)]))
    with pytest.raises(ServedeckError, match="holds 2 server settings") as exc:
        import_curve(root)
    assert "--serve" in exc.value.hint
    curve = import_curve(root, serve="mnbt-8192")
    assert curve.source == "vllm-bench-sweep" and curve.server == {"name": "mnbt-8192"}
    assert [(lv.kind, lv.value, lv.ttft_s["median"]) for lv in curve.levels] == [("concurrency", 1.0, 0.1),
                                                                                 ("concurrency", 4.0, 0.4)]
    assert curve.levels[0].failed == 1 and "requests failed" in curve.notes[0]
    with pytest.raises(ServedeckError, match="no server setting"):
        import_curve(root, serve="nope")
    with pytest.raises(ServedeckError, match="not a `vllm bench sweep serve` output directory"):
        import_curve(tmp_path)


def test_guidellm_report_benchmarks_are_levels(tmp_path):
    def bench(strategy, rps):
        succ = lambda v: {"successful": {"median": v, "mean": v, "percentiles": {"p99": v * 2}}}  # noqa: E731
        return {"config": {"strategy": strategy},
                "metrics": {"request_totals": {"total": 10, "successful": 10, "errored": 0},
                            "requests_per_second": succ(rps), "output_tokens_per_second": succ(rps * 50),
                            "time_to_first_token_ms": succ(80.0), "time_per_output_token_ms": succ(12.0),
                            "request_latency": succ(1.5)}}
    report = {"benchmarks": [bench({"type_": "synchronous"}, 1.0), bench({"type_": "constant", "rate": 3.0}, 2.9),
                             bench({"type_": "concurrent", "streams": 4}, 3.5)]}
    (tmp_path / "g.json").write_text(json.dumps(report))
    curve = import_curve(tmp_path / "g.json")
    assert curve.source == "guidellm"
    assert [lv.label for lv in curve.levels] == ["c=1", "constant 3 req/s", "c=4"]
    assert curve.levels[1].ttft_s == {"median": 0.08, "p99": 0.16} and curve.levels[2].output_tok_s == 175.0


def test_a_fleet_sweep_summary_carries_capacity():
    from types import SimpleNamespace

    from servedeck.fleet.summary import render_table, sweep_table_from_rows
    row = {"id": "e1", "variable": "engine.max_num_seqs", "value_a": 2, "value_b": 8, "host": "h1", "status": "done",
           "run_a": "0001", "run_b": "0002", "kv_a": 10.0, "kv_b": 10.0, "decode_ratio": None, "seconds": 3.0,
           "note": "capacity higher", "capacity_a": 2.0, "capacity_b": 8.0, "capacity_verdict": "higher"}
    text = render_table(sweep_table_from_rows(SimpleNamespace(name="s", base="b"), [row]), width=240)
    assert "capacity A -> B" in text and "2 -> 8" in text
    plain = {**row, "capacity_a": None, "capacity_b": None, "capacity_verdict": None}
    assert "capacity A -> B" not in render_table(sweep_table_from_rows(SimpleNamespace(name="s", base="b"), [plain]))
