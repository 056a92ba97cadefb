"""``invoke tune`` (servedeck.ab.tune) over a known response surface, with the real proposals
(servedeck.ab.next), sequential benchmarks (servedeck.ab.sequential) and reports
(servedeck.ab.experiment); only the host is simulated here: a "deploy" records a copy of a fixture
run with the arm's profile, a "bench" draws per-request samples from the surface with 2 %
noise. The same loop against the stand-in server over SSH is tests/integration/test_tune_standin.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from servedeck.ab.next import propose
from servedeck.ab.sequential import bench_against
from servedeck.ab.tune import TuneOps, TuneSpec, load_state, run_tune, start, summary, tune_knowledge
from servedeck.bench.client import BenchResult, Sample, ServerDelta, Workload
from servedeck.bench.record import append_result

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"
A = RUNS / "0002-base-b70"

MNBT, DEPTH = "engine.max_num_batched_tokens", "engine.max_num_seqs"
#: decode speed factors: the best setting is max_num_batched_tokens 8192, max_num_seqs 32
SURFACE = {MNBT: {2048: 0.90, 4096: 1.00, 8192: 1.15, 16384: 1.10},
           DEPTH: {8: 0.85, 16: 1.00, 32: 1.10, 64: 1.05}}
LADDERS = {MNBT: [2048, 4096, 8192, 16384], DEPTH: [8, 16, 32, 64]}
NOISE = 0.02


def _decode(overrides: dict) -> float:
    return 50.0 * np.prod([SURFACE[k][v] for k, v in overrides.items()])


class Lab:
    """The simulated host: profiles are override dicts, runs are fixture copies."""

    def __init__(self, root: Path, seed: int = 1) -> None:
        self.runs = root / "runs"
        self.runs.mkdir()
        self.profiles: dict[str, dict] = {}
        self.seq = 10
        self.rng = np.random.default_rng(seed)
        self.serving: dict | None = {"revision": 1, "compose_sha256": "original", "run_id": "0001-original-b70"}
        self.restored = 0
        self.deploys: list[str] = []
        self.interrupt_bench_at: int | None = None

    def write_profile(self, base: str, overrides: dict, name: str) -> str:
        pname = f"{base}-sw{abs(hash(json.dumps(overrides, sort_keys=True))) % 10**8:08d}"
        self.profiles[pname] = dict(overrides)
        return pname

    def doc(self, pname: str) -> dict:
        prof = json.loads((A / "profile.resolved.json").read_text())
        prof["name"] = pname
        for path, value in self.profiles[pname].items():
            node = prof
            *parents, leaf = path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        return {"profile": prof, "effective": {}}

    def deploy(self, pname: str) -> Path:
        self.seq += 1
        run = self.runs / f"{self.seq:04d}-{pname}-b70"
        shutil.copytree(A, run, ignore=shutil.ignore_patterns("bench.jsonl", "bench.json", "workload.json"))
        meta = json.loads((run / "run.json").read_text())
        meta.update(run_id=run.name, sequence=self.seq, profile=pname)
        (run / "run.json").write_text(json.dumps(meta))
        (run / "profile.resolved.json").write_text(json.dumps(self.doc(pname)["profile"]))
        effective = json.loads((run / "effective.json").read_text())
        effective.update({path.rsplit(".", 1)[-1]: v for path, v in self.profiles[pname].items()})
        (run / "effective.json").write_text(json.dumps(effective))
        self.serving = {"revision": self.seq, "compose_sha256": pname, "run_id": run.name}
        self.deploys.append(pname)
        return run

    def _batch(self, pname: str, n: int) -> BenchResult:
        decode = _decode(self.profiles[pname])
        samples = [Sample(phase=ph, rep=i, tag="t", prompt_tokens=64, prompt_tokens_requested=64, output_tokens=64,
                          first_chunk_tokens=1, ttft_s=float(0.05 * np.exp(self.rng.normal(0, NOISE))),
                          prefill_tok_s=float(1300 * np.exp(self.rng.normal(0, NOISE))),
                          decode_tok_s=float(decode * np.exp(self.rng.normal(0, NOISE))), decode_s=1.0, e2e_s=1.1,
                          finish_reason="length", chunks=64, server=ServerDelta())
                   for i in range(n) for ph in ("cold", "warm")]
        return BenchResult(workload=Workload(prompt_tokens=64, max_tokens=64, repetitions=n), served_model="m",
                           base_url="http://x", samples=samples, started_at="2026-12-03T00:00:00Z",
                           finished_at="2026-12-03T00:00:10Z")

    def bench(self, run: Path, against: Path | None) -> None:
        if self.interrupt_bench_at is not None and len(self.deploys) == self.interrupt_bench_at:
            self.interrupt_bench_at = None
            raise KeyboardInterrupt
        pname = json.loads((run / "run.json").read_text())["profile"]
        if against is None:
            result = self._batch(pname, 8)
        else:
            more, _ = bench_against(against, run, max_requests=24, batch=2)
            result = self._batch(pname, 3)
            nxt = more(result)
            while nxt is not None:
                result = append_result(result, self._batch(pname, nxt.repetitions))
                nxt = more(result)
        result.write(run)

    def restore(self, original: dict) -> None:
        self.restored += 1
        self.serving = dict(original)

    def ops(self) -> TuneOps:
        return TuneOps(write_profile=self.write_profile, deploy=self.deploy, bench=self.bench,
                       serving=lambda: self.serving, restore=self.restore, profile_doc=self.doc)


def _spec(**kw) -> TuneSpec:
    return TuneSpec(name="t", base="base", host="b70", variables=LADDERS, **kw)


def _base_profile() -> dict:
    prof = json.loads((A / "profile.resolved.json").read_text())
    prof["engine"]["max_num_seqs"] = 16
    return prof


def test_tune_reaches_the_best_setting_and_stops_at_the_noise_floor(tmp_path):
    """From (4096, 16) the best (8192, 32) is reached within 6 experiments; then no step is
    expected to clear the noise floor, and the host serves its original deployment again."""
    lab = Lab(tmp_path)
    state = start(lab.runs, _spec(), _base_profile(), lab.ops())
    assert state.best == {MNBT: 4096, DEPTH: 16}
    state = run_tune(lab.runs, state, lab.ops())
    assert state.best == {MNBT: 8192, DEPTH: 32}, summary(state)
    assert len(state.experiments) <= 6, summary(state)
    assert state.stopped.startswith("noise floor"), state.stopped
    assert state.finished and lab.restored == 1 and lab.serving["compose_sha256"] == "original"
    kept = [s for s in state.experiments if s.kept]
    assert {(s.variable, s.b) for s in kept} == {(MNBT, 8192), (DEPTH, 32)}
    for step in state.experiments:  # every step a normal report with its record
        assert (lab.runs / step.report).exists() and (lab.runs / step.report).with_name("experiment.json").exists()
    # a finished tune only reports when run again
    again = run_tune(lab.runs, load_state(lab.runs, "t"), lab.ops())
    assert again.steps == state.steps and lab.restored == 1
    # next on the same history, from the starting point: the truly best variable first (the
    # batch budget: +15 % on this surface, against +10 % for max_num_seqs), from what was measured
    start_doc = lab.doc(lab.write_profile("base", {MNBT: 4096, DEPTH: 16}, "t"))
    plan = propose(start_doc["profile"], "b70", lab.runs, baseline=lab.runs / state.steps[0].run_b,
                   knowledge=tune_knowledge(state.spec), metric="warm decode_tok_s")
    first = plan.candidates[0]
    assert (first.profile_path, first.proposed, first.gain_source) == (MNBT, 8192, "history"), \
        [(c.change(), c.expected_gain, c.gain_source) for c in plan.candidates]
    assert first.expected_gain == pytest.approx(0.15, abs=0.03)


def test_tune_resumes_after_an_interrupt_and_keeps_the_winner_when_asked(tmp_path):
    lab = Lab(tmp_path, seed=5)
    lab.interrupt_bench_at = 2  # Ctrl-C while the first experiment benchmarks
    spec = TuneSpec(name="t", base="base", host="b70", variables={MNBT: LADDERS[MNBT]}, **{"finally": "keep-winner"})
    state = start(lab.runs, spec, _base_profile(), lab.ops())
    with pytest.raises(KeyboardInterrupt):
        run_tune(lab.runs, state, lab.ops())
    saved = load_state(lab.runs, "t")
    assert saved.steps[-1].status == "deployed" and not saved.finished
    interrupted_run = saved.steps[-1].run_b
    done = run_tune(lab.runs, saved, lab.ops())
    assert done.finished and done.best == {MNBT: 8192}, summary(done)
    # the interrupted step was deployed again as a new run; the first deployment stays recorded
    assert done.experiments[0].run_b != interrupted_run and (lab.runs / interrupted_run).is_dir()
    assert lab.serving["compose_sha256"] == done.best_profile and lab.restored == 0  # the winner serves


def test_a_tune_of_another_spec_under_the_same_name_is_refused(tmp_path):
    from servedeck.errors import ServedeckError
    lab = Lab(tmp_path)
    start(lab.runs, _spec(), _base_profile(), lab.ops())
    other = TuneSpec(name="t", base="base", host="b70", variables={MNBT: [4096, 8192]})
    with pytest.raises(ServedeckError, match="exists with other settings"):
        start(lab.runs, other, _base_profile(), lab.ops())


def test_an_interrupted_baseline_resumes_as_the_same_step(tmp_path):
    lab = Lab(tmp_path, seed=6)
    lab.interrupt_bench_at = 1  # Ctrl-C while the baseline benchmarks
    spec = TuneSpec(name="t", base="base", host="b70", variables={MNBT: LADDERS[MNBT]}, max_experiments=1)
    state = start(lab.runs, spec, _base_profile(), lab.ops())
    with pytest.raises(KeyboardInterrupt):
        run_tune(lab.runs, state, lab.ops())
    done = run_tune(lab.runs, load_state(lab.runs, "t"), lab.ops())
    assert [s.variable for s in done.steps] == [None, MNBT] and done.finished
    assert done.best_run == done.steps[0].run_b and done.stopped.startswith("experiment budget")


def test_a_step_that_fails_the_quality_gate_is_reverted_and_not_proposed_again(tmp_path, monkeypatch):
    """tune judges through the drafted verdict, which reads the comparison's signals
    (servedeck.ab.signals): here the quality stage's gate blocks every arm at batch budget 8192
    (the fastest on this surface), so the tune never keeps it."""
    from servedeck.ab.signals import Signal
    lab = Lab(tmp_path, seed=3)

    def gated(c):
        pname = json.loads((lab.runs / c.runs_b[0] / "run.json").read_text())["profile"]
        if lab.profiles[pname].get(MNBT) != 8192:
            return []
        return [Signal(kind="quality", name="gate", passed=False, verdict="gated",
                       text="quality gate B cannot be called better: 3 of 8 outputs degenerate")]
    monkeypatch.setattr("servedeck.ab.signals.comparison_signals", gated)
    state = run_tune(lab.runs, start(lab.runs, _spec(), _base_profile(), lab.ops()), lab.ops())
    at_8192 = [s for s in state.experiments if s.b == 8192]
    assert len(at_8192) == 1 and at_8192[0].action == "revert" and not at_8192[0].kept, summary(state)
    assert "quality gate" in (lab.runs / at_8192[0].report).read_text()
    assert state.best[MNBT] != 8192 and state.best[DEPTH] == 32, summary(state)


class InterleavingLab(Lab):
    """The simulated host, drifting: every deployment is ``drift`` slower than the one before
    (heat, other load), and experiments are interleaved through the real
    :func:`servedeck.ab.interleave.run_interleaved` with sequential looks."""

    def __init__(self, root: Path, seed: int = 1, drift: float = 0.0) -> None:
        super().__init__(root, seed)
        self.drift = drift
        self.interleaved_calls: list[tuple[str, str, int]] = []
        self.interrupt_interleave_at: int | None = None

    def _batch(self, pname: str, n: int) -> BenchResult:
        result = super()._batch(pname, n)
        slow = (1 - self.drift) ** len(self.deploys)
        for s in result.samples:
            s.decode_tok_s *= slow
        return result

    def interleaved(self, profile_a: str, profile_b: str, deployments: int):
        from servedeck.ab.interleave import run_interleaved
        from servedeck.ab.sequential import SequentialDesign, interleave_monitor
        self.interleaved_calls.append((profile_a, profile_b, deployments))
        go_on, _ = interleave_monitor(SequentialDesign(alpha=0.05, margin=0.03, max_requests_a=deployments * 4,
                                                       max_requests_b=deployments * 4))

        def bench(run: Path) -> None:
            if self.interrupt_interleave_at is not None and len(self.deploys) == self.interrupt_interleave_at:
                self.interrupt_interleave_at = None
                raise KeyboardInterrupt
            pname = json.loads((run / "run.json").read_text())["profile"]
            self._batch(pname, 4).write(run)
        return run_interleaved({"A": profile_a, "B": profile_b}, "abba", deployments, deploy_fn=self.deploy,
                               bench_fn=bench, host="b70", go_on=go_on)

    def ops(self) -> TuneOps:
        ops = super().ops()
        ops.interleaved = self.interleaved
        return ops


def test_an_interleaved_tune_deploys_both_arms_alternately_and_reaches_the_best_on_a_drifting_host(tmp_path):
    """``interleave`` 4: each experiment deploys the best and the variant A B B A (looks after
    each pair), pools each arm's runs for the verdict and reports the order and trend; the host
    loses 1 % per deployment, which the interleaving spreads over both arms."""
    lab = InterleavingLab(tmp_path, seed=3, drift=0.01)
    spec = _spec(interleave=4)
    state = start(lab.runs, spec, _base_profile(), lab.ops())
    state = run_tune(lab.runs, state, lab.ops())
    assert state.best == {MNBT: 8192, DEPTH: 32}, summary(state)
    assert state.stopped.startswith("noise floor") and state.finished
    for step, (_, b, n) in zip(state.experiments, lab.interleaved_calls):
        assert (b, n) == (step.profile, 4) and len(step.runs_a) == len(step.runs_b) >= 1
        arms = [p["arm"] for p in step.interleaving["positions"]]
        assert arms == ["A", "B", "B", "A", "A", "B", "B", "A"][:len(arms)]
        assert step.run_a == step.runs_a[0] and step.run_b == step.runs_b[-1]
        report = (lab.runs / step.report).read_text()
        assert all(r in report for r in step.runs_a + step.runs_b)
        assert f"### Interleaved order (ABBA, {len(arms)} deployments on host b70)" in report
    experiments = json.loads((lab.runs / state.experiments[0].report).with_name("experiment.json").read_text())
    assert experiments["runs_a"] == state.experiments[0].runs_a  # the pooled runs are the experiment's


def test_an_interrupted_interleaved_experiment_is_run_again_whole(tmp_path):
    lab = InterleavingLab(tmp_path, seed=4)
    lab.interrupt_interleave_at = 3  # baseline, A, B deployed: Ctrl-C while B benchmarks
    spec = TuneSpec(name="t", base="base", host="b70", variables={MNBT: LADDERS[MNBT]}, interleave=2,
                    max_experiments=1)
    state = start(lab.runs, spec, _base_profile(), lab.ops())
    with pytest.raises(KeyboardInterrupt):
        run_tune(lab.runs, state, lab.ops())
    saved = load_state(lab.runs, "t")
    assert saved.experiments[0].status == "deployed" and saved.experiments[0].runs_b == []
    done = run_tune(lab.runs, saved, lab.ops())
    assert done.finished and done.experiments[0].status == "judged" and len(lab.interleaved_calls) == 2
    first_try = set(lab.deploys[1:3])
    assert first_try <= {saved.best_profile, saved.experiments[0].profile}


def test_an_interleaved_tune_without_an_interleaving_is_refused(tmp_path):
    from servedeck.errors import ServedeckError
    lab = Lab(tmp_path)
    state = start(lab.runs, _spec(interleave=2), _base_profile(), lab.ops())
    with pytest.raises(ServedeckError, match="interleaves its experiments"):
        run_tune(lab.runs, state, lab.ops())
