"""A/B comparison: the single-variable guard, statistics and verdicts, A/A noise floors,
interleaved arms, the run report.

Fixtures: tests/fixtures/runs/ (hand-made from the seed report's numbers, see its README).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import numpy as np

from servedeck.ab.compare import (
    ArmDiff, compare_arms, flatten_argv, guard, load_arm, parse_compose, plan_against,
)
from servedeck.ab.comparison import compare_metrics
from servedeck.ab.stats import holm, judge_bench, rank_test, ratio_interval, smallest_p
from servedeck.errors import ServedeckError
from servedeck.ab.report import findings, fmt_num, render_report, write_report

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"
A = RUNS / "0002-base-b70"
B = RUNS / "0003-batch-8192-b70"
MULTI = RUNS / "0004-multi-b70"


@pytest.fixture(scope="module")
def diff_ab() -> ArmDiff:
    return compare_arms(A, B)


@pytest.fixture(scope="module")
def comparison_ab():
    return compare_metrics(A, B)


@pytest.fixture(scope="module")
def report_ab(diff_ab, comparison_ab) -> str:
    return render_report(diff_ab, comparison_ab, A, B, None, None, Path("report.png"))


def _copy_run(src: Path, dst_root: Path, name: str | None = None) -> Path:
    dst = dst_root / (name or src.name)
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------- guard / variables

def test_single_variable_collapses_views(diff_ab):
    var = diff_ab.single_variable
    assert var is not None
    assert (var.name, var.a, var.b) == ("max_num_batched_tokens", 4096, 8192)
    views = {(d.view, d.path) for d in var.evidence}
    assert views == {("effective", "max_num_batched_tokens"), ("argv", "max_num_batched_tokens"),
                     ("profile", "engine.max_num_batched_tokens")}
    # naming fields (profile name/description/extends) differ between the runs but are ignored
    assert len(diff_ab.differences) == 1
    assert set(diff_ab.compared) == {"profile", "effective", "compose", "argv", "facts", "workload"}
    assert guard(diff_ab) is diff_ab


def test_two_changes_are_refused_without_allow_multi():
    diff = compare_arms(A, MULTI)
    assert diff.single_variable is None
    assert [v.name for v in diff.differences] == ["gpu_memory_utilization", "max_num_batched_tokens"]
    with pytest.raises(ServedeckError) as exc:
        guard(diff)
    msg = str(exc.value)
    assert "not a single-variable experiment" in msg
    assert "gpu_memory_utilization: 0.94 → 0.9" in msg
    assert "max_num_batched_tokens: 4096 → 8192" in msg
    assert guard(diff, allow_multi=True) is diff


def test_identical_runs_are_not_an_experiment():
    diff = compare_arms(A, A)
    assert diff.is_identical
    with pytest.raises(ServedeckError, match="do not differ") as exc:
        guard(diff, allow_multi=True)
    assert "--aa" in str(exc.value)  # the hint names the option that does compare them
    assert guard(diff, aa=True) is diff


def test_aa_refuses_runs_that_differ(diff_ab):
    with pytest.raises(ServedeckError, match="A/A comparison needs two runs of the same configuration"):
        guard(diff_ab, aa=True)


def test_host_fact_and_compose_changes_are_variables(tmp_path):
    b = _copy_run(B, tmp_path)
    facts = json.loads((b / "facts.json").read_text())
    facts["host"]["gpu_power_cap_w"] = 230
    facts["host"]["disk_free_gib"] = 1.0  # not a result-changing fact
    (b / "facts.json").write_text(json.dumps(facts))
    compose = (b / "docker-compose.yml").read_text()
    (b / "docker-compose.yml").write_text(compose.replace("    devices:\n", "    shm_size: 32g\n    devices:\n"))
    diff = compare_arms(A, b)
    names = {v.name: v for v in diff.differences}
    assert set(names) == {"max_num_batched_tokens", "host.gpu_power_cap_w", "compose.shm_size"}
    assert (names["host.gpu_power_cap_w"].a, names["host.gpu_power_cap_w"].b) == (275, 230)
    assert names["compose.shm_size"].present_a is False
    with pytest.raises(ServedeckError, match="3 variables differ"):
        guard(diff)


def test_passthrough_flag_and_set_map_to_the_same_vllm_name():
    via_set = flatten_argv(["models/x", "--set", "vllm.max_num_batched_tokens=8192", "--gpu", "0"])
    via_flag = flatten_argv(["models/x", "--", "--max-num-batched-tokens", "8192"])
    assert via_set["max_num_batched_tokens"] == via_flag["max_num_batched_tokens"] == 8192
    assert via_set["launcher.gpu"] == 0
    spec = flatten_argv(["models/x", "--set", "env.EXL3_INT8_PREFILL=0", "--", "--speculative-config",
                         '{"method":"mtp","num_speculative_tokens":3}', "--no-enable-prefix-caching"])
    assert spec["speculative_config.num_speculative_tokens"] == 3
    assert spec["enable_prefix_caching"] is False
    assert spec["env.EXL3_INT8_PREFILL"] == 0
    # the same flags of a `vllm serve` command: vLLM's reading, no launcher of its own
    plain = flatten_argv(["org/m", "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
                          "--no-enable-prefix-caching"])
    assert plain["speculative_config.num_speculative_tokens"] == 3 and plain["enable_prefix_caching"] is False
    assert plain["command.positional[0]"] == "org/m" and "launcher.gpu" not in plain


def test_compose_view_reads_yaml_12():
    compose, argv = parse_compose((A / "docker-compose.yml").read_text())
    assert compose["image"].endswith("@sha256:21412bdd7535e9c653eeb3d099dce3bc79a83d440def2cd9556111c79c870fa8")
    assert compose["env.ZE_FLAT_DEVICE_HIERARCHY"] == "COMPOSITE"
    assert compose["compose.volumes[/mnt/exl3model]"] == "./models/qwen3.8-27b-exl3-4.00bpw:Z"
    assert compose["compose.group_add"] == ["992"]
    assert "compose.container_name" not in compose
    # the seed's "--served-model-name " token has a trailing space; it is still the flag
    assert argv["served_model_name"] == "Qwen3.8-27B"
    assert argv["port"] == 9932
    with pytest.raises(ServedeckError, match="no services"):
        parse_compose("version: '3'\n")


def test_plan_against_shares_the_comparison():
    arm = load_arm(B)
    views = {"profile": arm.profile, "effective": arm.effective, "compose_text": arm.compose_text,
             "workload": None, "facts": None}
    diff = plan_against(views, A)
    assert diff.arm_a == A.name and diff.arm_b == "profile batch-8192"
    assert diff.single_variable is not None
    assert diff.single_variable.describe() == "max_num_batched_tokens: 4096 → 8192"
    assert set(diff.skipped) == {"facts", "workload"}
    with pytest.raises(ServedeckError, match="compose text"):
        plan_against({"profile": arm.profile}, A)


# ---------------------------------------------------------------- metrics

def test_startup_facts_are_single_samples(comparison_ab):
    kv = comparison_ab.metric("kv_cache_tokens")
    assert (kv.a, kv.b, kv.difference) == (264846, 236470, -28376)
    assert kv.verdict == "lower" and not kv.judged and kv.ci_low is None
    assert comparison_ab.metric("model_loading_gib").verdict == "same"
    assert comparison_ab.metric("init_engine_s").verdict == "higher"


def test_every_bench_metric_is_judged_with_its_method_and_interval(comparison_ab):
    keys = {(m.phase, m.name) for m in comparison_ab.bench}
    assert keys == {(p, n) for p in ("cold", "warm")
                    for n in ("ttft_s", "prefill_tok_s", "decode_tok_s", "spec_accept_len")}
    for m in comparison_ab.bench:
        assert m.judged and m.ci_low is not None and m.ci_low <= m.ratio <= m.ci_high, m
        assert m.method.startswith("Mann-Whitney U") and 0 < m.p <= m.p_adjusted <= 1
        assert m.margin == 0.03 and m.alpha == 0.05 and m.samples_needed >= 2
    warm_decode = comparison_ab.metric("decode_tok_s", "warm")
    assert (warm_decode.a, warm_decode.b) == (57.0, 56.6)


def test_fixture_cold_decode_gets_no_verdict_and_the_samples_needed(comparison_ab):
    """Issue 13: 58.1 vs 51.0 tok/s from 3 samples per arm (one A sample at 26.3) is not "faster"."""
    cold = comparison_ab.metric("decode_tok_s", "cold")
    assert (cold.a, cold.b) == (51.0, 58.1) and cold.samples_a == [26.3, 51.0, 57.4]
    assert cold.verdict == "no verdict"
    assert "3 vs 3 samples cannot reach" in cold.reason and "smallest exact p is 0.1" in cold.reason
    assert cold.samples_needed > 3
    sentence = next(f for f in findings(comparison_ab) if f.startswith("cold decode_tok_s"))
    assert f"about {cold.samples_needed} samples per arm would decide" in sentence
    # nothing at 3 samples per arm is called faster or slower
    assert not [m for m in comparison_ab.bench if m.verdict in ("faster", "slower")]


def test_verdict_is_direction_aware_and_needs_enough_samples():
    rng = np.random.default_rng(1)
    quick = list(0.50 * np.exp(rng.normal(0, 0.01, 10)))
    slow = list(1.00 * np.exp(rng.normal(0, 0.01, 10)))
    assert judge_bench([("ttft_s", "warm", slow, quick)])[0].verdict == "faster"
    assert judge_bench([("ttft_s", "warm", quick, slow)])[0].verdict == "slower"
    m = judge_bench([("decode_tok_s", "warm", slow, quick)])[0]
    assert m.verdict == "slower" and m.method == "Mann-Whitney U, exact" and m.p < 1e-4
    # the same separation at 3 samples per arm cannot carry a verdict
    few = judge_bench([("ttft_s", "warm", slow[:3], quick[:3])])[0]
    assert few.verdict == "no verdict" and few.p == pytest.approx(0.1)
    one = judge_bench([("decode_tok_s", "warm", [50.0], [60.0, 61.0, 62.0])])[0]
    assert one.verdict == "not judged" and not one.judged and one.ci_low is None


def test_a_difference_inside_the_margin_is_not_called_faster():
    rng = np.random.default_rng(2)
    a = list(100 * np.exp(rng.normal(0, 0.002, 12)))
    b = list(101 * np.exp(rng.normal(0, 0.002, 12)))  # +1 %: detectable, below a 3 % margin
    m = judge_bench([("decode_tok_s", "warm", a, b)], margin=0.03)[0]
    assert m.p_adjusted < 0.05 and m.verdict == "within margin"
    fine = judge_bench([("decode_tok_s", "warm", a, b)], margin=0.005)[0]
    assert fine.verdict == "faster"  # the user asked for that resolution
    same = judge_bench([("decode_tok_s", "warm", a, list(100 * np.exp(rng.normal(0, 0.002, 12))))])[0]
    assert same.verdict == "equivalent"


def test_holm_and_exact_test_floor():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert smallest_p(3, 3) == pytest.approx(0.1) and smallest_p(5, 5) == pytest.approx(2 / 252)
    p, method = rank_test([1.0, 2.0, 2.0, 3.0], [2.0, 5.0, 6.0])
    assert method == "Mann-Whitney U, permutation (ties)" and 0 < p < 1


@pytest.mark.parametrize("n", [3, 8])
def test_false_positive_rate_over_identical_arms_holds_across_the_report(n):
    """Identical arms through the verdict code: the share of reports with ANY faster/slower
    verdict (8 metrics per report, 1-8 % per-request noise plus an occasional outlier) stays at
    or below the nominal 5 %, with the default margin and with no margin at all."""
    rng = np.random.default_rng(20261130 + n)
    reports = 200
    metric_names = [("ttft_s", "cold"), ("prefill_tok_s", "cold"), ("decode_tok_s", "cold"),
                    ("spec_accept_len", "cold"), ("ttft_s", "warm"), ("prefill_tok_s", "warm"),
                    ("decode_tok_s", "warm"), ("spec_accept_len", "warm")]
    flagged = {0.03: 0, 0.0: 0}
    for _ in range(reports):
        metrics = []
        for name, phase in metric_names:
            cv = rng.uniform(0.01, 0.08)
            arms = 50.0 * np.exp(rng.normal(0, cv, (2, n)))
            arms[rng.random((2, n)) < 0.05] *= 0.5  # a JIT-contaminated sample now and then
            metrics.append((name, phase, list(arms[0]), list(arms[1])))
        for margin in flagged:
            out = judge_bench(metrics, margin=margin, intervals=False)
            flagged[margin] += any(m.verdict in ("faster", "slower") for m in out)
    assert flagged[0.03] / reports <= 0.05, flagged
    assert flagged[0.0] / reports <= 0.05, flagged
    if n == 3:
        assert flagged == {0.03: 0, 0.0: 0}  # the smallest exact p at 3 vs 3 is 0.1


def test_bootstrap_interval_is_reproducible_and_degenerate_safe():
    a, b = [57.0, 56.4, 57.5, 56.8], [56.6, 56.2, 57.1, 56.3]
    assert ratio_interval(a, b) == ratio_interval(a, b)
    assert ratio_interval([5.0, 5.0, 5.0], [5.0, 5.0, 5.0]) == (1.0, 1.0)


def test_warning_present_in_a_absent_in_b(comparison_ab):
    w = {x.id: x for x in comparison_ab.warnings}
    assert w["max_num_scheduled_tokens"].status == "present in A, absent in B"
    assert w["max_num_scheduled_tokens"].short == "max_num_scheduled_tokens is set to 4096"
    assert w["spec_method_deprecated"].status == "present in both"


# ---------------------------------------------------------------- report

def test_report_names_the_single_variable(report_ab):
    first = report_ab.splitlines()[0]
    assert first == "# Qwen3.8-27B · max_num_batched_tokens 4096 → 8192"
    assert "only `max_num_batched_tokens` changed (4096 → 8192)" in report_ab
    assert "MULTI-VARIABLE" not in report_ab


def test_report_findings(report_ab):
    findings = report_ab.split("## Findings", 1)[1].split("## Verdict", 1)[0]
    assert ("scheduler warning `max_num_scheduled_tokens is set to 4096` present in A, absent in B"
            in findings)
    assert "KV pool −28,376 tokens (264,846 → 236,470)" in findings
    assert "2.02× → 1.80×" in findings
    assert re.search(r"warm decode_tok_s 56\.6 vs 57\.0 \(ratio 0\.993, 95% CI \d\.\d{3}–\d\.\d{3}; "
                     r"Mann-Whitney U, exact, p=0\.22, Holm p=1\): equivalent: within ±3 %", findings)
    for phase in ("cold", "warm"):
        for metric in ("ttft_s", "prefill_tok_s", "decode_tok_s", "spec_accept_len"):
            assert re.search(rf"^- {phase} {metric} .*95% CI \d+\.\d+–\d+\.\d+; Mann-Whitney U, [a-z ()]+, "
                             r"p=[\d.e-]+, Holm p=[\d.e-]+\): (no verdict|equivalent): ", findings, re.M), \
                (phase, metric)
    assert "_Verdict: to be written_" in report_ab
    assert "_Hypothesis: to be written_" in report_ab
    # startup table gives both arms
    assert re.search(r"\| kv_cache_tokens \| 264,846 \| 236,470 \|", report_ab)
    assert re.search(r"\| max_concurrency \| 2\.02 \| 1\.8 \|", report_ab)


def test_report_appends_both_compose_files_verbatim(report_ab):
    for run in (A, B):
        text = (run / "docker-compose.yml").read_text()
        assert f"```yaml\n{text.rstrip(chr(10))}\n```" in report_ab
    assert "vllm.max_num_batched_tokens=4096" in report_ab.split("## Appendix B")[0]
    assert "vllm.max_num_batched_tokens=8192" in report_ab.split("## Appendix B")[1]


def test_report_given_texts_and_multi_title(comparison_ab):
    diff = guard(compare_arms(A, MULTI), allow_multi=True)
    text = render_report(diff, compare_metrics(A, MULTI), A, MULTI,
                         "Raising the batch budget removes the scheduler warning.",
                         "Revert to 4096.", None)
    assert text.splitlines()[0].startswith("# Qwen3.8-27B · MULTI-VARIABLE (2: ")
    assert "Raising the batch budget removes the scheduler warning." in text
    assert "Revert to 4096." in text and "to be written" not in text
    assert "![A/B chart]" not in text


def test_write_report_writes_report_and_png(tmp_path, diff_ab, comparison_ab):
    report, chart = write_report(tmp_path / "ab" / "report.md", diff_ab, comparison_ab, A, B)
    assert report.read_text().startswith("# Qwen3.8-27B")
    assert chart == tmp_path / "ab" / "report.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![A/B chart](report.png)" in report.read_text()
    assert sorted(p.name for p in (tmp_path / "ab").iterdir()) == ["report.md", "report.png"]


def test_fmt_num():
    assert fmt_num(264846.0) == "264,846"
    assert fmt_num(6438.6) == "6,438.6"
    assert fmt_num(57.0) == "57.0"
    assert fmt_num(170.98) == "170.98"
    assert fmt_num(2.548) == "2.548"


def test_nested_setting_collapses_across_profile_effective_and_argv(tmp_path):
    """MTP depth 3 → 2 written three ways is still one variable, named by vLLM's dest path."""
    a = _copy_run(A, tmp_path, "0010-mtp3-b70")
    b = _copy_run(A, tmp_path, "0011-mtp2-b70")
    for run, depth in ((a, 3), (b, 2)):
        prof = json.loads((run / "profile.resolved.json").read_text())
        prof["engine"]["speculative"] = {"method": "mtp", "num_speculative_tokens": depth, "options": {}}
        (run / "profile.resolved.json").write_text(json.dumps(prof))
        eff = json.loads((run / "effective.json").read_text())
        eff["speculative_config"]["num_speculative_tokens"] = depth
        (run / "effective.json").write_text(json.dumps(eff))
        compose = (run / "docker-compose.yml").read_text()
        compose = compose.replace("      - --enable-auto-tool-choice\n",
                                  "      - --set\n      - vllm.speculative_config.num_speculative_tokens="
                                  f"{depth}\n      - --enable-auto-tool-choice\n")
        (run / "docker-compose.yml").write_text(compose)
    diff = compare_arms(a, b)
    var = diff.single_variable
    assert var is not None, [v.describe() for v in diff.differences]
    assert var.describe() == "speculative_config.num_speculative_tokens: 3 → 2"
    assert {d.view for d in var.evidence} == {"profile", "effective", "argv"}


def test_switching_a_profile_section_on_is_one_variable_per_setting(tmp_path):
    """engine.speculative null → {method, num_speculative_tokens} maps onto effective's
    speculative_config.* leaves; the unset (null) section itself is no extra variable."""
    b = _copy_run(A, tmp_path, "0012-mtp-b70")
    prof = json.loads((b / "profile.resolved.json").read_text())
    prof["engine"]["speculative"] = {"method": "mtp", "num_speculative_tokens": 2, "options": {}}
    (b / "profile.resolved.json").write_text(json.dumps(prof))
    eff = json.loads((b / "effective.json").read_text())
    eff["speculative_config"]["num_speculative_tokens"] = 2
    (b / "effective.json").write_text(json.dumps(eff))
    diff = compare_arms(A, b)
    assert [v.describe() for v in diff.differences] == [
        "speculative_config.num_speculative_tokens: 3 → 2"]
    # the profile now sets method: mtp explicitly, equal to the image default: not a change
    assert {(d.view, d.path) for d in diff.differences[0].evidence} == {
        ("effective", "speculative_config.num_speculative_tokens"),
        ("profile", "engine.speculative.num_speculative_tokens")}


# ---------------------------------------------------------------- A/A and interleaved arms

def _same_config_runs(tmp_path, names=("0010-base-b70", "0011-base-b70")):
    """Two recorded runs of one configuration: copies of fixture run 0002 whose bench samples
    are replaced by draws from one distribution (what two deploys of one profile give)."""
    rng = np.random.default_rng(5)
    out = []
    for name in names:
        run = _copy_run(A, tmp_path, name)
        lines = [json.loads(x) for x in (run / "bench.jsonl").read_text().splitlines() if x.strip()]
        for s in lines:
            if s["phase"] in ("cold", "warm"):
                s["decode_tok_s"] = float(57.0 * np.exp(rng.normal(0, 0.02)))
                s["ttft_s"] = float(1.4 * np.exp(rng.normal(0, 0.03)))
        (run / "bench.jsonl").write_text("".join(json.dumps(s) + "\n" for s in lines))
        out.append(run)
    return out


def test_aa_reports_the_noise_floor_and_later_ab_reports_cite_it(tmp_path):
    from servedeck.ab.experiment import compare_runs
    from servedeck.ab.noise import load_noise_floor
    a1, a2 = _same_config_runs(tmp_path)
    with pytest.raises(ServedeckError, match="do not differ"):
        compare_runs(tmp_path, [a1], [a2])  # not an A/B ...
    aa = compare_runs(tmp_path, [a1], [a2], aa=True, out=tmp_path / "aa" / "report.md")  # ... but an A/A
    assert aa.noise_path == tmp_path / "noise" / "b70-21412bdd7535.json"
    floor = load_noise_floor(tmp_path, "b70", "sha256:21412bdd7535e9c653eeb3d099dce3bc79a83d440def2cd9556111c79c870fa8")
    warm = floor.metrics["warm decode_tok_s"]
    assert 0.005 < warm.noise < 0.05 and warm.n_a == 5 and warm.detectable > warm.noise
    assert floor.runs == ["0010-base-b70", "0011-base-b70"]
    text = aa.report.read_text()
    assert "**A/A comparison**" in text and "noise floor of host b70" in text
    with pytest.raises(ServedeckError, match="A/A comparison needs two runs of the same configuration"):
        compare_runs(tmp_path, [A], [B], aa=True)
    # an A/B on the same host and image now cites the floor
    ab = compare_runs(tmp_path, [A], [B])
    assert ab.noise is not None and ab.noise.runs == floor.runs
    cite = [f for f in findings(ab.comparison, ab.noise) if f.startswith("noise floor of host b70")]
    assert cite and "warm decode_tok_s ±" in cite[0] and "A/A 0010-base-b70 vs 0011-base-b70" in cite[0]


def test_interleaved_schedule_orders():
    from servedeck.ab.interleave import schedule
    assert schedule("abba", 3) == ["A", "B", "B", "A", "A", "B"]
    rnd = schedule("random", 4, seed=3)
    assert rnd == schedule("random", 4, seed=3) and sorted(rnd) == ["A"] * 4 + ["B"] * 4
    assert all(sorted(rnd[i:i + 2]) == ["A", "B"] for i in range(0, 8, 2))
    with pytest.raises(ServedeckError, match="unknown order"):
        schedule("aabb", 2)


def test_interleaved_experiment_pools_arms_and_reports_order_and_trend(tmp_path, bench_sample):
    """deploy_fn/bench_fn are stand-ins for servedeck.deploy.apply.deploy and
    servedeck.bench.record.bench_deployed (no server here): each "deploy" records a copy of a
    fixture run, each "bench" writes samples that drift downwards over time, as a warming host does."""
    from servedeck.ab.experiment import compare_runs
    from servedeck.ab.interleave import run_interleaved
    from servedeck.runs.store import open_run, write_bench_files
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    counter = iter(range(20, 40))
    clock = iter(range(100))

    def deploy_fn(profile):
        src = A if profile == "base" else B
        dst = runs_dir / f"00{next(counter)}-{profile}-b70"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("bench.jsonl", "bench.json", "workload.json"))
        return dst

    def bench_fn(run_dir):
        samples = []
        for phase in ("cold", "warm"):
            for rep in range(3):
                t = next(clock)
                samples.append(bench_sample(phase, rep, ttft_s=1.0 + 0.01 * t + 0.001 * rep,
                                            prefill_tok_s=6000.0 - 10 * t - rep,
                                            decode_tok_s=57.0 - 0.1 * t - 0.01 * rep))
        write_bench_files(run_dir, {"prompt_tokens": 64}, samples, {"workload": {"prompt_tokens": 64}})

    steps = []
    runs_a, runs_b, ilv = run_interleaved({"A": "base", "B": "batch-8192"}, "abba", 2, deploy_fn=deploy_fn,
                                          bench_fn=bench_fn, host="b70", on_step=lambda *s: steps.append(s))
    assert [s[1] for s in steps] == ["A", "B", "B", "A"]
    assert [p.arm for p in ilv.positions] == ["A", "B", "B", "A"] and len(runs_a) == len(runs_b) == 2
    assert {open_run(r).meta.experiment for r in runs_a + runs_b} == {ilv.experiment}
    drift = {t.metric: t for t in ilv.trends}
    assert drift["warm decode_tok_s"].rho < 0 and "falls" in drift["warm decode_tok_s"].reading
    out = compare_runs(runs_dir, runs_a, runs_b, out=runs_dir / "reports" / "x" / "report.md", interleaving=ilv)
    m = out.comparison.metric("decode_tok_s", "warm")
    assert len(m.samples_a) == len(m.samples_b) == 6  # pooled over both deployments of each arm
    text = out.report.read_text()
    assert "### Interleaved order (ABBA, 4 deployments on host b70)" in text
    assert re.search(r"^\| 3 \| B \| 0022-batch-8192-b70 \| [\d.,]+ \| [\d.,]+ \| [\d.,]+ \|$", text, re.M)
    assert "warm decode_tok_s: rho" in text
    # startup facts come from each arm's first deployment, and the findings say so
    startup = [f for f in findings(out.comparison) if "single sample" in f]
    assert startup and all("first deployment of each arm" in f for f in startup)
