"""Signals for decisions (servedeck.ab.signals): what the load, quality and energy stages measured,
read from their typed run files and from the A/B comparison, and how the drafted verdict and
`invoke next` use them (issue 34, items 1-2 over issues 31-33's measurements).

Runs: copies of the recorded CPU runs (tests/fixtures/runs-cpu) with a load benchmark
(test_load_ab._write_load: a server that holds N requests at once), a roofline and a telemetry
record (test_limits._limited_copy: a measured 9 GB/s roof, a constant power draw)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_limits import _limited_copy
from test_load_ab import RUNS, _write_load

from servedeck.ab.compare import compare_arms, load_arm
from servedeck.ab.draft import verdict
from servedeck.ab.experiment import compare_runs
from servedeck.ab.next import propose
from servedeck.ab.quality import GateReason, QualityGate
from servedeck.ab.signals import Signal, comparison_signals, read_signals
from servedeck.ab.comparison import compare_metrics
from servedeck.bench.loadresult import LoadSummary
from servedeck.runs import store

A, B = RUNS / "0001-cpu-4096-local", RUNS / "0002-cpu-8192-local"


def _copy(tmp_path: Path, src: Path, name: str | None = None) -> Path:
    return shutil.copytree(src, tmp_path / "runs" / (name or src.name))


def _plan(run: Path, signals=None, **kw):
    arm = load_arm(run)
    return propose(arm.profile, "local", run.parent, effective=arm.effective or {}, facts=arm.facts, baseline=run,
                   signals=signals, **kw)


def _cand(plan, knob, proposed):
    return next(c for c in plan.candidates if c.knob == knob and c.proposed == proposed)


def _preempting(run: Path) -> None:
    """Make the saturated levels of ``run``'s load benchmark preempt (a KV pool that runs out)."""
    summary = store.read(run, store.LOAD_SUMMARY)
    for lv in summary.levels:
        if lv.server is not None and (lv.server.waiting_mean or 0) > 0:
            lv.server.preemptions = 3
            lv.server.kv_cache_usage_max = 0.99
    (run / store.LOAD_SUMMARY).write_text(LoadSummary.model_validate(summary.model_dump()).model_dump_json())


# ------------------------------------------------------------------------------ of one run

def test_a_load_benchmark_says_what_bounds_the_capacity(tmp_path):
    run = _copy(tmp_path, A)
    assert read_signals(run) == []  # nothing measured under load: no signal
    _write_load(run, 2, seed=1)
    [bound] = read_signals(run, "capacity")
    assert (bound.name, bound.phase, bound.value) == ("queue_bound", "c=4", 4.0)  # the first level that queued
    _preempting(run)
    [bound] = read_signals(run, "capacity")
    assert bound.name == "kv_bound" and "preemption" in bound.text


def test_roofline_and_energy_signals_per_measured_phase(tmp_path):
    run = _limited_copy(tmp_path, A, "0001-cpu-4096-local", 100.0)
    roof = {s.metric: s for s in read_signals(run, "roofline")}
    assert set(roof) == {"cold decode_tok_s", "warm decode_tok_s"}  # the warm-up is no measurement
    warm = roof["warm decode_tok_s"]
    assert 0 < warm.value < 1 and warm.headroom == pytest.approx(1 / warm.value - 1)
    energy = {s.phase: s for s in read_signals(run, "energy")}
    assert set(energy) == {"cold", "warm"} and energy["warm"].name == "j_per_token"
    assert energy["warm"].value == pytest.approx(store.read(run, store.TELEMETRY).phases["warm"].j_per_token)


def test_a_failing_reader_is_skipped(tmp_path):
    run = _copy(tmp_path, A)
    (run / store.ROOFLINE).write_text("{not json")
    assert read_signals(run) == []


# ------------------------------------------------------------------------------ of a comparison

def test_capacity_compared_under_load_is_a_gain_of_the_verdict_and_lifts_the_caveat(tmp_path):
    a, b = _copy(tmp_path, A), _copy(tmp_path, B)
    before = compare_runs(a.parent, [a], [b])
    assert before.draft.verdict.action != "keep" or "capacity" not in before.draft.verdict.cites
    _write_load(a, 2, seed=1)
    _write_load(b, 8, seed=2)
    out = compare_runs(a.parent, [a], [b])
    [cap] = [s for s in comparison_signals(out.comparison) if s.kind == "capacity"]
    assert cap.verdict == "higher" and cap.value == 8
    v = out.draft.verdict
    assert v.action == "keep" and "capacity" in v.cites and v.caveat is None
    assert any(f.kind == "capacity" and "B 8" in f.text for f in out.draft.findings)
    # B holds less: a loss, and with no gain a revert
    out = compare_runs(a.parent, [b], [a], allow_multi=True)
    assert out.draft.verdict.action in ("revert", "trade-off") and "capacity" in out.draft.verdict.cites


def test_a_blocking_quality_gate_reverts_whatever_the_speed(tmp_path):
    a, b = _copy(tmp_path, A), _copy(tmp_path, B)
    gated = QualityGate(arm="B", reference="A", status="gated",
                        reasons=[GateReason(rule="degenerate", text="2 of 4 outputs repeat a loop A does not")])
    c = compare_metrics(a, b)
    [gate] = comparison_signals(SimpleNamespace(quality=SimpleNamespace(gate=gated), load=None))
    assert gate.passed is False and gate.name == "gate" and "repeat a loop" in gate.text
    v = verdict(compare_arms(a, b), c, b, signals=[gate])
    assert v.action == "revert" and "quality gate" in v.text and "gate" in v.cites
    passed = QualityGate(arm="B", reference="A", status="pass")
    [ok] = comparison_signals(SimpleNamespace(quality=SimpleNamespace(gate=passed), load=None))
    assert ok.passed is True and verdict(compare_arms(a, b), c, b, signals=[ok]).action == verdict(
        compare_arms(a, b), c, b).action
    unchecked = QualityGate(arm="B", reference="A", status="not checked", notes=["no probes"])
    assert comparison_signals(SimpleNamespace(quality=SimpleNamespace(gate=unchecked), load=None)) == []


def _energy_decided(c, verdict_: str, ratio: float):
    """``c`` with its warm energy per token decided (3 recorded requests per arm cannot decide it:
    the verdict logic is what is tested here, the statistics in test_limits and test_stats)."""
    m = c.metric("energy_j_per_token", "warm")
    m.verdict, m.ratio, m.p_adjusted = verdict_, ratio, 0.01
    return c


def test_less_energy_per_token_is_a_gain_more_is_a_loss(tmp_path):
    from servedeck.ab.draft import findings
    a = _limited_copy(tmp_path, A, "0001-cpu-4096-local", 100.0)
    b = _limited_copy(tmp_path, B, "0002-cpu-8192-local", 60.0)
    diff, signals = compare_arms(a, b), read_signals(b)
    c = _energy_decided(compare_metrics(a, b), "faster", 0.6)
    v = verdict(diff, c, b, signals=signals)
    assert v.action in ("keep", "trade-off") and "warm energy_j_per_token" in v.cites and "less energy" in v.text
    said = findings(diff, c, b, signals=signals)
    assert any(f.kind == "energy" and "-40.0 %, less energy" in f.text for f in said)
    assert any(f.kind == "roofline" and f.text.startswith("B: warm decode at") for f in said)
    c = _energy_decided(compare_metrics(a, b), "slower", 1.5)
    v = verdict(diff, c, b, signals=signals)
    assert v.action == "revert" and "more energy" in v.text and "warm energy_j_per_token" in v.cites


# ------------------------------------------------------------------------------ next

def test_next_proposes_what_relieves_the_measured_capacity_bound(tmp_path):
    run = _copy(tmp_path, A)
    _write_load(run, 2, seed=1)
    # queue-bound at c=4 with max_num_seqs 16: four requests never reached the limit of sixteen
    seqs = _cand(_plan(run), "max-seqs", 32)
    assert seqs.metric == "capacity" and seqs.expected_gain == 0 and "not this limit" in " ".join(seqs.why)
    # a limit that was reached: max_num_seqs 2 at c=4 is the bound, doubling it can double the capacity
    arm = load_arm(run)
    profile = {**arm.profile, "engine": {**arm.profile["engine"], "max_num_seqs": 2}}
    plan = propose(profile, "local", run.parent, effective={}, facts=arm.facts, baseline=run)
    up = _cand(plan, "max-seqs", 4)
    assert (up.metric, up.gain_source, up.expected_gain, up.clears_noise) == ("capacity", "capacity", 1.0, True)
    assert _cand(plan, "kv-dtype", "fp8").expected_gain == 0  # the KV pool is not what bounds it
    assert _cand(plan, "spec-depth", 4).metric == "warm decode_tok_s"  # a knob that is not load-dependent
    # KV-bound: the fp8 KV cache (twice the pool, sourced) relieves it, more sequences do not
    _preempting(run)
    plan = propose(profile, "local", run.parent, effective={}, facts=arm.facts, baseline=run)
    fp8 = _cand(plan, "kv-dtype", "fp8")
    assert (fp8.metric, fp8.expected_gain, fp8.clears_noise) == ("capacity", 1.0, True)
    from servedeck.ab.next import format_plan
    assert "measured: at c=4 the load is bound by the KV pool" in format_plan(plan)
    assert _cand(plan, "max-seqs", 4).expected_gain == 0


def test_next_bounds_a_gain_by_the_roofline_headroom_of_its_metric(tmp_path):
    run = _copy(tmp_path, A)
    arm = load_arm(run)
    profile = {**arm.profile, "host": {**(arm.profile.get("host") or {}), "power_cap_w": 180}}
    free = _cand(propose(profile, "local", run.parent, baseline=run, signals=[]), "power-cap", 230)
    near = Signal(kind="roofline", name="decode_share", phase="warm", metric="warm decode_tok_s", value=0.95,
                  headroom=1 / 0.95 - 1, text="warm decode at 95% of the memory-bandwidth roof")
    other = Signal(kind="roofline", name="prefill_share", phase="warm", metric="warm prefill_tok_s", value=0.99,
                   headroom=1 / 0.99 - 1, text="warm prefill at 99% of the matrix roof")
    bounded = _cand(propose(profile, "local", run.parent, baseline=run, signals=[near, other]), "power-cap", 230)
    assert free.expected_gain == pytest.approx(0.33) and free.metric == "warm decode_tok_s"
    assert bounded.expected_gain == pytest.approx(1 / 0.95 - 1)
    assert "95% of the memory-bandwidth roof" in " ".join(bounded.why)


def test_next_reads_the_power_limit_from_the_telemetry(tmp_path):
    run = _limited_copy(tmp_path, A, "0001-cpu-4096-local", 100.0)
    arm = load_arm(run)
    profile = {**arm.profile, "host": {**(arm.profile.get("host") or {}), "power_cap_w": 180}}
    calm = _cand(propose(profile, "local", tmp_path, baseline=run), "power-cap", 230)
    assert calm.expected_gain == 0 and "never throttled" in " ".join(calm.why)
    throttled = [*read_signals(run), Signal(kind="energy", name="power_throttled", phase="warm", value=0.6,
                                            text="warm: the card throttled 60% of the time (pl1)")]
    hot = _cand(propose(profile, "local", tmp_path, baseline=run, signals=throttled), "power-cap", 230)
    assert hot.expected_gain > 0.1 and "throttled 60%" in " ".join(hot.why)
