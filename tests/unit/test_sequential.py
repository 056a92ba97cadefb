"""Sequential sampling (servedeck.ab.sequential): the error rates of the looks, proven by
simulation as the fixed-n false-positive test in test_ab.py does; the stop rule, its record, the
replay in reports; the compile-cache rule of startup timings (servedeck.ab.stats)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from servedeck.ab.sequential import (
    Look, Monitor, SequentialDesign, SequentialRecord, bench_against, interleave_monitor, judge_looks,
    load_record, replay, requests_per_phase, spent_alpha,
)
from servedeck.ab.comparison import compare_metrics
from servedeck.ab.stats import compile_cache_state, judge_bench
from servedeck.errors import ServedeckError

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"
A = RUNS / "0002-base-b70"
B = RUNS / "0003-batch-8192-b70"

#: The report's eight judged metrics.
METRICS = [(n, p) for p in ("cold", "warm") for n in ("ttft_s", "prefill_tok_s", "decode_tok_s", "spec_accept_len")]
CLAIMS = ("faster", "slower", "higher", "lower")


def _simulate(rng, effects, looks, design):
    """One sequential experiment over METRICS: per-request noise 1-8 % (log-normal, one CV per
    metric) and a JIT-contaminated sample now and then; the experiment stops at the first look
    where every metric is decided. Returns ``({metric: verdict} claimed, looks taken)``."""
    max_a, max_b = max(a for a, _ in looks), max(b for _, b in looks)
    arms = []
    for (name, phase), effect in zip(METRICS, effects):
        cv = rng.uniform(0.01, 0.08)
        a = 50.0 * np.exp(rng.normal(0, cv, max_a))
        b = 50.0 * np.exp(effect) * np.exp(rng.normal(0, cv, max_b))
        a[rng.random(max_a) < 0.03] *= 0.5
        b[rng.random(max_b) < 0.03] *= 0.5
        arms.append((name, phase, a, b))
    per_look = [[(n, p, list(a[:na]), list(b[:nb])) for n, p, a, b in arms] for na, nb in looks]
    final = [False] * (len(looks) - 1) + [True]
    _, taken = judge_looks(per_look, [design.fraction(na, nb) for na, nb in looks], design,
                           final=final, intervals=False, until_decided=True)
    claimed: dict[str, str] = {}
    for look in taken:
        claimed.update(look.decided)
    return claimed, len(taken)


BOTH_GROW = ([(n, n) for n in range(3, 24, 2)] + [(24, 24)], SequentialDesign(max_requests_a=24, max_requests_b=24))
"""``ab --interleave``-like: both arms grow, a look every 2 requests per arm, budget 24."""
BASELINE_FIXED = ([(8, n) for n in range(3, 24, 2)] + [(8, 24)], SequentialDesign(max_requests_a=8, max_requests_b=24))
"""``bench --against``-like: the recorded baseline holds 8 requests, B grows to 24."""


@pytest.mark.parametrize("shape", [BOTH_GROW, BASELINE_FIXED], ids=["both-arms-grow", "baseline-fixed"])
def test_false_positive_rate_over_identical_arms_holds_despite_the_looks(shape):
    """Identical arms through every look: the share of experiments with ANY faster/slower
    claim over the eight metrics stays at or below alpha = 5 % (12 looks each)."""
    looks, design = shape
    rng = np.random.default_rng(20261203)
    experiments = 100
    flagged = 0
    for _ in range(experiments):
        claimed, _ = _simulate(rng, [0.0] * 8, looks, design)
        flagged += any(v in CLAIMS for v in claimed.values())
    assert flagged / experiments <= 0.05, flagged


def test_false_equivalence_rate_beyond_the_margin_holds_despite_the_looks():
    """Every metric truly differs by 4 % (beyond the ±3 % margin): the share of experiments with
    ANY equivalence claim stays at or below 5 %."""
    looks, design = BOTH_GROW
    rng = np.random.default_rng(7)
    experiments = 60
    flagged = 0
    for _ in range(experiments):
        effects = list(rng.choice([-1.0, 1.0], 8) * np.log(1.04))
        claimed, _ = _simulate(rng, effects, looks, design)
        flagged += any(v == "equivalent" for v in claimed.values())
    assert flagged / experiments <= 0.05, flagged


def test_power_a_ten_percent_change_is_called_in_its_direction():
    """Every metric 10 % higher in B: at least 90 % of the metrics are called in the right
    direction within the budget (higher ttft_s is slower, higher decode_tok_s faster)."""
    looks, design = BOTH_GROW
    rng = np.random.default_rng(11)
    experiments = 30
    right = 0
    for _ in range(experiments):
        claimed, _ = _simulate(rng, [np.log(1.10)] * 8, looks, design)
        for (name, phase) in METRICS:
            want = "slower" if name == "ttft_s" else "faster"
            right += claimed.get(f"{phase} {name}") == want
    assert right / (experiments * len(METRICS)) >= 0.9, right


def test_a_clear_change_stops_sampling_early():
    """Every metric 20 % higher in B: experiments stop at the look where all eight are decided,
    on average within the first half of the budget's 12 looks (11 requests per arm of 24)."""
    looks, design = BOTH_GROW
    rng = np.random.default_rng(12)
    stops = [_simulate(rng, [np.log(1.20)] * 8, looks, design)[1] for _ in range(30)]
    assert np.mean(stops) <= len(looks) / 2, stops
    assert max(stops) < len(looks)


def test_spending_functions_spend_alpha_by_the_information_fraction():
    for kind in ("pocock", "obrien-fleming"):
        values = [spent_alpha(0.05, t, kind) for t in (0, 0.1, 0.3, 0.6, 1.0)]
        assert values[0] == 0 and values[-1] == pytest.approx(0.05)
        assert values == sorted(values)
    # Pocock spends early, O'Brien-Fleming late
    assert spent_alpha(0.05, 0.3, "pocock") > 10 * spent_alpha(0.05, 0.3, "obrien-fleming")
    with pytest.raises(ValueError, match="unknown spending"):
        spent_alpha(0.05, 0.5, "linear")
    d = SequentialDesign(max_requests_a=8, max_requests_b=24)
    assert d.fraction(8, 24) == 1.0 and 0 < d.fraction(8, 5) < d.fraction(8, 7) < 1


def test_where_three_samples_cannot_decide_the_looks_do():
    """The demo's case (issue 34): cold decode 784-859 vs 578-640 tok/s never overlaps, but at
    3 vs 3 the smallest exact p is 0.1. Sampled sequentially against an 8-request baseline, the
    look at 5 requests already decides it (slower), and a look that could not reach its level
    spent nothing."""
    rng = np.random.default_rng(3)
    a = list(rng.uniform(784, 859, 8))
    b = list(rng.uniform(578, 640, 24))
    fixed = judge_bench([("decode_tok_s", "cold", a[:3], b[:3])])[0]
    assert fixed.verdict == "no verdict" and "smallest exact p is 0.1" in fixed.reason
    same = {key: list(100 * np.exp(rng.normal(0, 0.02, 24))) for key in METRICS[1:]}  # the other seven
    looks = [(8, n) for n in (3, 5, 7)]
    design = SequentialDesign(max_requests_a=8, max_requests_b=24)
    per_look = [[("decode_tok_s", "cold", a, b[:n])] + [(k[0], k[1], v[:8], v[8:8 + n]) for k, v in same.items()]
                for _, n in looks]
    metrics, taken = judge_looks(per_look, [design.fraction(*lk) for lk in looks], design)
    m = metrics[0]
    assert m.verdict == "slower" and m.look == 2 and m.looks == 3 and len(m.samples_b) == 5
    assert taken[0].spent_difference == 0 and taken[1].spent_difference > 0
    assert taken[1].decided == {"cold decode_tok_s": "slower"}
    assert sum(t.spent_difference for t in taken) <= 0.05


def _bench_rows(values: dict[str, list[float]], phases=("cold", "warm"), seed: int = 0) -> list:
    """bench.jsonl samples (typed): one per request per phase, the given metric values, and
    ttft_s / prefill_tok_s around 0.1 s and 640 tok/s with 1 % noise where not given."""
    from run_samples import make_sample
    rng = np.random.default_rng(seed)
    n = len(next(iter(values.values())))
    rows = []
    for i in range(n):
        for phase in phases:
            fields = {"ttft_s": float(0.1 * np.exp(rng.normal(0, 0.01))),
                      "prefill_tok_s": float(640 * np.exp(rng.normal(0, 0.01)))}
            fields.update({k: float(v[i]) for k, v in values.items()})
            rows.append(make_sample(phase, i, **fields))
    return rows


def test_monitor_stops_when_decided_and_records_every_look(tmp_path):
    rng = np.random.default_rng(5)
    a = _bench_rows({"decode_tok_s": list(50 * np.exp(rng.normal(0, 0.01, 8))),
                     "ttft_s": list(1.0 * np.exp(rng.normal(0, 0.01, 8)))})
    b_all = _bench_rows({"decode_tok_s": list(60 * np.exp(rng.normal(0, 0.01, 24))),
                         "ttft_s": list(0.8 * np.exp(rng.normal(0, 0.01, 24)))})
    design = SequentialDesign(max_requests_a=8, max_requests_b=24)
    run_b = _copy(B, tmp_path, "0003-batch-8192-b70")
    monitor = Monitor(SequentialRecord(design=design, runs_a=["0002-base-b70"], runs_b=[run_b.name]), [run_b])
    n, go = 3, True
    while go:
        go = monitor.look(a, b_all[:2 * n])
        n += 2
    rec = monitor.record
    assert rec.stopped == "decided" and len(rec.looks) >= 2
    assert [lk.requests_b for lk in rec.looks] == list(range(3, 3 + 2 * len(rec.looks), 2))
    verdicts = {m.key: m.verdict for m in monitor.metrics}
    assert {k: v for k, v in verdicts.items() if "prefill" not in k} == {
        f"{phase} {name}": "faster" for phase in ("cold", "warm") for name in ("ttft_s", "decode_tok_s")}
    assert {verdicts["cold prefill_tok_s"], verdicts["warm prefill_tok_s"]} == {"equivalent"}
    assert rec.looks[0].spent_difference == 0  # 8 vs 3 cannot reach 1/6 of its level: nothing spent
    saved = SequentialRecord.model_validate_json((run_b / "sequential.json").read_text())
    assert saved.looks[-1].decided and saved.stopped == "decided"


def test_monitor_stops_at_the_sample_and_time_budgets():
    rng = np.random.default_rng(6)
    a = _bench_rows({"decode_tok_s": list(50 * np.exp(rng.normal(0, 0.2, 4)))}, phases=("cold",))
    b = _bench_rows({"decode_tok_s": list(50 * np.exp(rng.normal(0, 0.2, 6)))}, phases=("cold",))
    budget = Monitor(SequentialRecord(design=SequentialDesign(max_requests_a=4, max_requests_b=6),
                                      runs_a=["a"], runs_b=["b"]))
    assert budget.look(a, b[:3]) is True
    assert budget.look(a, b) is False and budget.record.stopped == "sample budget"
    assert budget.record.looks[-1].final and budget.open_metrics() == ["cold decode_tok_s"]
    # the final look takes every bit of alpha the earlier looks did not spend
    replayed = budget.record.looks
    assert sum(lk.spent_difference for lk in replayed) <= 0.05
    assert replayed[-1].level_difference == pytest.approx(0.05 - replayed[0].spent_difference)
    now = [0.0]
    timed = Monitor(SequentialRecord(design=SequentialDesign(max_requests_a=4, max_requests_b=60, max_seconds=30),
                                     runs_a=["a"], runs_b=["b"]), clock=lambda: now[0])
    assert timed.look(a, b[:3]) is True
    now[0] = 31.0
    assert timed.look(a, b) is False and timed.record.stopped == "time budget"
    assert timed.record.looks[-1].final


def _copy(src: Path, root: Path, name: str) -> Path:
    dst = root / name
    shutil.copytree(src, dst)
    return dst


def _write_samples(run: Path, rows: list) -> None:
    (run / "bench.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))


def test_reports_replay_the_recorded_looks(tmp_path):
    """A comparison of runs sampled sequentially is judged at the looks that were taken (not as
    if n had been fixed), and only when the record names exactly these runs."""
    from servedeck.ab.experiment import compare_runs
    a, b = _copy(A, tmp_path, "0002-base-b70"), _copy(B, tmp_path, "0003-batch-8192-b70")
    rng = np.random.default_rng(8)
    rows_a = _bench_rows({"decode_tok_s": list(57 * np.exp(rng.normal(0, 0.01, 8))),
                          "ttft_s": list(1.4 * np.exp(rng.normal(0, 0.01, 8)))})
    rows_b = _bench_rows({"decode_tok_s": list(65 * np.exp(rng.normal(0, 0.01, 9))),
                          "ttft_s": list(1.4 * np.exp(rng.normal(0, 0.01, 9)))})
    _write_samples(a, rows_a)
    _write_samples(b, rows_b)
    design = SequentialDesign(max_requests_a=8, max_requests_b=24)
    record = SequentialRecord(design=design, runs_a=[a.name], runs_b=[b.name],
                              looks=[Look(requests_a=8, requests_b=n) for n in (3, 5, 7, 9)], stopped="sample budget")
    (b / "sequential.json").write_text(record.model_dump_json())
    assert load_record([a], [b]) is not None and load_record([b], [a]) is None
    out = compare_runs(tmp_path, [a], [b])
    decode = out.comparison.metric("decode_tok_s", "warm")
    assert decode.verdict == "faster" and decode.looks == 4 and decode.look < 4
    assert len(decode.samples_b) == [3, 5, 7, 9][decode.look - 1]  # the deciding look's samples
    assert out.comparison.sequential is not None
    # the same samples judged as if n had been fixed differ in what they carry
    fixed = compare_metrics([a], [b])
    assert fixed.metric("decode_tok_s", "warm").looks is None
    with pytest.raises(ServedeckError, match="needs 8 vs 12 requests"):
        replay(SequentialRecord(design=design, runs_a=[a.name], runs_b=[b.name],
                                looks=[Look(requests_a=8, requests_b=12)]), rows_a, rows_b)


def test_bench_against_adds_batches_until_decided(tmp_path):
    """The `more` callback of bench_deployed: each batch is a look against the recorded baseline;
    the next batch adds requests without a warm-up, and sampling stops once decided."""
    from servedeck.bench.client import BenchResult, Sample, ServerDelta, Workload
    from servedeck.bench.record import append_result
    base = _copy(A, tmp_path, "0002-base-b70")
    run_b = _copy(B, tmp_path, "0003-batch-8192-b70")
    rng = np.random.default_rng(9)
    _write_samples(base, _bench_rows({"decode_tok_s": list(57 * np.exp(rng.normal(0, 0.01, 8))),
                                      "ttft_s": list(0.12 * np.exp(rng.normal(0, 0.01, 8))),
                                      "prefill_tok_s": list(540 * np.exp(rng.normal(0, 0.01, 8)))}))
    more, monitor = bench_against(base, run_b, max_requests=12, batch=2)

    def batch(n: int, start: int = 0) -> BenchResult:
        samples = [Sample(phase=ph, rep=i, tag="t", prompt_tokens=64, prompt_tokens_requested=64, output_tokens=8,
                          first_chunk_tokens=1, ttft_s=float(0.1 * np.exp(rng.normal(0, 0.01))),
                          prefill_tok_s=float(640 * np.exp(rng.normal(0, 0.01))),
                          decode_tok_s=float(66 * np.exp(rng.normal(0, 0.01))), decode_s=0.1, e2e_s=0.2,
                          finish_reason="length", chunks=8, server=ServerDelta())
                   for i in range(n) for ph in ("cold", "warm")]
        return BenchResult(workload=Workload(prompt_tokens=64, max_tokens=8, repetitions=n), served_model="m",
                           base_url="http://x", samples=samples, started_at=f"t{start}", finished_at=f"t{start + 1}")

    result = batch(3)
    nxt = more(result)
    assert nxt is not None and nxt.repetitions == 2 and nxt.warmup_requests == 0
    while nxt is not None:
        result = append_result(result, batch(nxt.repetitions, 1))
        nxt = more(result)
    assert monitor.record.stopped == "decided"
    assert [s.rep for s in result.samples if s.phase == "cold"] == list(range(requests_per_phase(result.samples)))
    assert result.workload.repetitions == requests_per_phase(result.samples)
    assert (run_b / "sequential.json").exists()
    with pytest.raises(ServedeckError, match="holds no bench samples"):
        bench_against(tmp_path / "0002-base-b70" / "nothing", run_b)


def test_interleaved_experiment_stops_once_decided(tmp_path):
    """go_on is asked after each pair of deployments; a clear difference stops the experiment
    before its budget of deployments, and every run keeps the record the report replays."""
    from servedeck.ab.experiment import compare_runs
    from servedeck.ab.interleave import run_interleaved
    from servedeck.runs.store import write_bench_files
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    counter = iter(range(20, 60))
    rng = np.random.default_rng(10)

    def deploy_fn(profile):
        src = A if profile == "base" else B
        dst = runs_dir / f"00{next(counter)}-{profile}-b70"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("bench.jsonl", "bench.json", "workload.json"))
        return dst

    def bench_fn(run_dir):
        level = 57.0 if "base" in run_dir.name else 66.0
        write_bench_files(run_dir, {"prompt_tokens": 64}, _bench_rows(
            {"decode_tok_s": list(level * np.exp(rng.normal(0, 0.01, 3)))}, seed=int(rng.integers(1 << 30))),
            {"workload": {"prompt_tokens": 64}})

    design = SequentialDesign(max_requests_a=30, max_requests_b=30)
    go_on, monitor = interleave_monitor(design)
    runs_a, runs_b, ilv = run_interleaved({"A": "base", "B": "batch-8192"}, "abba", 10, deploy_fn=deploy_fn,
                                          bench_fn=bench_fn, host="b70", go_on=go_on)
    assert monitor.record.stopped == "decided"
    assert len(runs_a) == len(runs_b) < 10 and len(ilv.positions) == 2 * len(runs_a)
    for run in [*runs_a, *runs_b]:
        assert json.loads((run / "sequential.json").read_text())["runs_b"] == [r.name for r in runs_b]
    out = compare_runs(runs_dir, runs_a, runs_b)
    assert out.comparison.metric("decode_tok_s", "warm").verdict == "faster"
    assert out.comparison.metric("decode_tok_s", "warm").looks == len(monitor.record.looks)


# ---------------------------------------------------------------- compile caches and startup timings

def test_startup_timings_compare_when_both_logs_show_a_fresh_compile():
    c = compare_metrics(A, B)
    assert (c.compile_cache_a.state, c.compile_cache_b.state) == ("compiled", "compiled")
    assert "backbone (1, 8192)" in c.compile_cache_b.evidence
    assert c.metric("init_engine_s").verdict == "higher"


def test_startup_timings_are_not_compared_when_b_may_have_reused_the_cache_a_filled(tmp_path):
    """The demo on CPU (issue 34): vLLM's log says nothing about torch inductor's cache, and B
    started after A of the same image on the same host: its faster engine start is not
    called lower."""
    a = _copy(A, tmp_path, "0001-cpu-4096-local")
    b = _copy(B, tmp_path, "0002-cpu-8192-local")
    for run, seq, init in ((a, 1, 24.4), (b, 2, 10.3)):
        startup = json.loads((run / "startup.json").read_text())
        startup.update(compile_cache_hit=None, compile_ranges=[], init_engine_s=init)
        (run / "startup.json").write_text(json.dumps(startup))
        (run / "startup.log").unlink()
        meta = json.loads((run / "run.json").read_text())
        meta.update(sequence=seq, run_id=run.name)
        (run / "run.json").write_text(json.dumps(meta))
    assert compile_cache_state(a).state == "first-start"
    state_b = compile_cache_state(b)
    assert state_b.state == "after-start" and "0001-cpu-4096-local" in state_b.evidence
    c = compare_metrics(a, b)
    init = c.metric("init_engine_s")
    assert (init.a, init.b, init.verdict) == (24.4, 10.3, "not comparable")
    assert "compile caches differed" in init.reason
    assert c.metric("kv_cache_tokens").verdict == "lower"  # not a compile timing: still compared


def test_the_exact_rank_test_agrees_with_scipy():
    """The exact U distribution the looks use (servedeck.ab.stats._u_counts) gives scipy's exact
    Mann-Whitney p values (scipy.stats.mannwhitneyu(method="exact")) for every alternative."""
    from scipy.stats import mannwhitneyu

    from servedeck.ab.stats import rank_tests
    rng = np.random.default_rng(0)
    for _ in range(150):
        m, n = (int(v) for v in rng.integers(1, 26, 2))
        x, y = rng.normal(size=m), rng.normal(size=n) + rng.normal() * 0.5
        for alt in ("two-sided", "less", "greater"):
            p, method = rank_tests([(x, y)], alt)[0]
            assert method == "Mann-Whitney U, exact"
            assert p == pytest.approx(float(mannwhitneyu(y, x, alternative=alt, method="exact").pvalue), rel=1e-9)


def test_other_stages_add_metrics_to_the_same_family(monkeypatch):
    """A stage's metric source (load, quality, energy) is judged with the bench metrics: its
    direction registered, its p Holm-adjusted with theirs."""
    from servedeck.ab import stats
    monkeypatch.setattr(stats, "METRIC_SOURCES", [])
    monkeypatch.setitem(stats.METRIC_DIRECTIONS, "goodput_req_s", False)
    rng = np.random.default_rng(4)
    stats.register_metric_source(lambda a, b: [("goodput_req_s", "load", list(10 * np.exp(rng.normal(0, .01, 8))),
                                                list(13 * np.exp(rng.normal(0, .01, 8))))])
    c = compare_metrics(A, B)
    good = c.metric("goodput_req_s", "load")
    assert good.verdict == "faster" and good.judged
    assert good.p_adjusted >= good.p * 1.0 and len([m for m in c.bench if m.judged]) == 9  # 8 bench + 1
