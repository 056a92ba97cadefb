"""The invoke tasks as a user runs them: exit codes, one-paragraph errors, files written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def invoke(*args: str, project: Path | None = None, runs: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if project:
        env["SERVEDECK_PROJECT"] = str(project)
    if runs:
        env["SERVEDECK_RUNS_DIR"] = str(runs)
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], capture_output=True,
                          text=True, env=env)


@pytest.fixture
def project(tmp_path) -> Path:
    for name in ("profiles", "templates", "schema", "deploy"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("images"))
    return tmp_path


def test_render_flags_prints_one_token_per_line():
    res = invoke("render", "--profile", "batch-8192", "--flags")
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert lines[:5] == ["models/qwen3.8-27b-exl3-4.00bpw", "--gpu", "0", "--model-path", "/mnt/exl3model"]
    assert lines[-2:] == ["--served-model-name", "Qwen3.8-27B"]


def test_check_exit_status_follows_errors(tmp_path):
    ok = invoke("check", "--compose", str(FIX / "compose" / "seed-run3-fixed.yml"))
    assert ok.returncode == 0 and "0 errors" in ok.stdout
    bad = tmp_path / "bad.yml"
    bad.write_text((FIX / "compose" / "seed-run3-fixed.yml").read_text().replace('"9932:9932"', "2122:22"))
    res = invoke("check", "--compose", str(bad), "--json")
    assert res.returncode == 1
    rules = {f["rule"] for f in json.loads(res.stdout)}
    assert "yaml11/port-sexagesimal" in rules
    missing = invoke("check", "--compose", str(tmp_path / "nope.yml"))
    assert missing.returncode == 2 and "file not found" in missing.stderr and "Traceback" not in missing.stderr


def test_check_all_profiles_has_no_errors():
    res = invoke("check", "--all")
    assert res.returncode == 0, res.stdout


def test_import_writes_a_profile_and_refuses_to_overwrite(project):
    res = invoke("import", "--compose", str(FIX / "compose" / "seed-run3.yml"), "--name", "run3", project=project)
    assert res.returncode == 0, res.stderr
    assert (project / "profiles" / "run3.yaml").exists()
    again = invoke("import", "--compose", str(FIX / "compose" / "seed-run3.yml"), "--name", "run3", project=project)
    assert again.returncode == 2 and "--force" in again.stderr
    out = invoke("render", "--profile", "run3", project=project)
    assert "vllm.max_num_batched_tokens=8192" in out.stdout


def test_schema_check_fails_when_stale(project):
    assert invoke("schema", "--check", project=project).returncode == 0
    (project / "schema" / "profile.schema.json").write_text("{}\n")
    res = invoke("schema", "--check", project=project)
    assert res.returncode == 2 and "stale" in res.stderr and "invoke schema" in res.stderr


def test_startup_facts_of_a_log_file():
    res = invoke("startup-facts", "--log", str(FIX / "vllm-0.32-cpu" / "serve-8192.log"), "--json")
    facts = json.loads(res.stdout)
    assert facts["kv_cache_tokens"] == 1_048_576 and facts["max_concurrency"] == 512.0
    text = invoke("startup-facts", "--log", str(FIX / "vllm-0.32-cpu" / "serve-4096.log")).stdout
    assert "max_num_scheduled_tokens is set to 4096" in text


def test_ab_refuses_two_variables_and_reports_one(tmp_path):
    runs = FIX / "runs"
    res = invoke("ab", "2", "4", runs=runs)
    assert res.returncode == 2 and "2 variables differ" in res.stderr and "--allow-multi" in res.stderr
    out = tmp_path / "r" / "report.md"
    res = invoke("ab", "latest:base", "latest:batch-8192", "--out", str(out), runs=runs)
    assert res.returncode == 0, res.stderr
    assert "changed: max_num_batched_tokens: 4096 → 8192" in res.stdout
    assert out.exists() and out.with_suffix(".png").exists()


def test_plan_against_a_recorded_run():
    res = invoke("plan", "--profile", "batch-8192", "--against", "0002-base-b70", runs=FIX / "runs")
    assert res.returncode == 0, res.stderr
    assert "single variable: max_num_batched_tokens: 4096 → 8192" in res.stdout
    res = invoke("plan", "--profile", "mtp-2", "--against", "0002-base-b70", runs=FIX / "runs")
    assert res.returncode == 2 and "variables differ" in res.stderr


def test_runs_and_show():
    res = invoke("runs", runs=FIX / "runs")
    assert "0003-batch-8192-b70" in res.stdout and "236,470" in res.stdout
    show = invoke("show", "latest:batch-8192", "--json", runs=FIX / "runs")
    doc = json.loads(show.stdout)
    assert doc["run"]["profile"] == "batch-8192" and doc["startup"]["kv_cache_tokens"] == 236470


def test_render_refuses_a_file_that_fails_the_check(project, tmp_path):
    (project / "profiles" / "typo.yaml").write_text("extends: base\nengine:\n  tool_call_parser: qwen3_xmll\n")
    out = tmp_path / "out.yml"
    res = invoke("render", "--profile", "typo", "--out", str(out), project=project)
    assert res.returncode == 1
    assert "qwen3_xml" in res.stderr and "nothing was written" in res.stderr
    assert not out.exists()
    ok = invoke("render", "--profile", "batch-8192", "--out", str(out), project=project)
    assert ok.returncode == 0 and "checked: 0 errors" in ok.stderr and out.exists()


def test_check_judges_a_healthcheck_start_period_by_the_profiles_measured_time_to_ready(project):
    """A healthcheck whose start_period covers the typical start-up passes until a ready run of
    that profile measured a longer container start to ready (read from runs/ as plain JSON)."""
    from servedeck.runs.store import create_run
    (project / "profiles" / "probed.yaml").write_text(
        "extends: speed\ncontainer:\n  compose_extra:\n    healthcheck:\n"
        "      test: [\"CMD\", \"curl\", \"-fsS\", \"http://127.0.0.1:9932/health\"]\n"
        "      interval: 30s\n      start_period: 20m\n")
    before = invoke("check", "--profile", "probed", "--json", project=project)
    assert before.returncode == 0, before.stderr
    assert "server/healthcheck-start-period" not in {f["rule"] for f in json.loads(before.stdout)}
    runs = project / "runs"
    slow = create_run(runs, "probed", "b70")
    slow.save_meta(outcome="ready", timings_s={"container_start_to_ready_s": 1500.0})
    failed = create_run(runs, "probed", "b70")  # newer but never served: not a measurement
    failed.save_meta(outcome="failed", timings_s={"container_start_to_ready_s": 5.0})
    after = invoke("check", "--profile", "probed", "--json", project=project)
    found = [f for f in json.loads(after.stdout) if f["rule"] == "server/healthcheck-start-period"]
    assert found and "1500" in found[0]["message"], after.stdout


def test_next_series_and_tune_as_the_user_runs_them(tmp_path):
    """`next` ranks candidates from the recorded runs; `series` lists them with the experiment an
    `ab --out` left; `tune` refuses an unknown host by name (after its stages were loaded)."""
    runs = tmp_path / "runs"
    shutil.copytree(FIX / "runs", runs)
    res = invoke("ab", "latest:base", "latest:batch-8192", "--out", str(runs / "reports" / "x" / "report.md"),
                 runs=runs)
    assert res.returncode == 0, res.stderr
    assert "verdict (drafted): Revert max_num_batched_tokens to 4096" in res.stdout
    res = invoke("next", "--profile", "base", "--host", "b70", "--json", runs=runs)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["baseline_run"] == "0002-base-b70" and plan["candidates"]
    assert not any(c["knob"] == "batch-budget" and c["proposed"] == 8192 for c in plan["candidates"])  # reverted
    text = invoke("next", "--profile", "base", "--host", "b70", runs=runs)
    assert "nothing left is expected to clear the noise floor" in text.stdout, text.stdout + text.stderr
    res = invoke("series", "--profile", "base", runs=runs)
    assert res.returncode == 0, res.stderr
    assert "| 1 | #2 → #3 | `max_num_batched_tokens` 4096 → 8192 | revert |" in res.stdout
    res = invoke("tune", "--base", "base", "--host", "nowhere", "--vary", "engine.max_num_seqs=8,16", runs=runs)
    assert res.returncode == 2 and "nowhere" in res.stderr, res.stderr
