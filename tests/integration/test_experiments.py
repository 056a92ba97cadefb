"""Experiments the user can trust (issue 13), end to end over the loopback card host.

Real parts: the ``servedeck`` command line (``invoke``), SSH to the loopback host, its Docker
engine, the local registry. The served image is the vLLM **stand-in** (``deploy/images/standin``:
no model; it replays a real vLLM 0.32 startup log and answers the benchmark's requests with a
fixed pace), because what is tested here is the experiment around the server, not vLLM.

1. ``invoke ab A B --interleave``: four deployments in ABBA order, each benchmarked; the report
   shows the order of arms and the trend across repetitions; every deployment has its own run.
2. ``invoke rollback`` then ``invoke bench``: the rollback's run is benchmarked like a deploy's
   and compares with ``invoke ab``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from servedeck.bench.client import Workload
from servedeck.bench.record import bench_deployed
from servedeck.errors import ServedeckError
from servedeck.host.history import revisions
from servedeck.model.inventory import get_host, load_inventory
from servedeck.model.project import Project
from servedeck.runs.history import resolve_run
from test_deploy import PORT, ROOT, _history, _variant

HOST = "b70"
REQUESTS = 2  # requests per phase and deployment: a tiny bench, the stand-in answers in ~0.15 s


def _servedeck(project: Project, *args: str) -> subprocess.CompletedProcess:
    """Run a servedeck task as the user does (``invoke -r REPO TASK ...``) in ``project``."""
    env = {**os.environ, "SERVEDECK_PROJECT": str(project.root)}
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def lab(standin_lab):
    """A project whose two profiles (``arm-a``, ``arm-b``: max_num_batched_tokens 8192 vs 4096)
    serve the stand-in image, and a fresh working directory on the loopback card host."""
    project, host = standin_lab("experiments", "arm-a", "batch-8192", host=HOST, port=PORT)
    _variant(project, "arm-b", "extends: arm-a\nengine:\n  max_num_batched_tokens: 4096\n")
    return project, host


@pytest.fixture(scope="module")
def interleaved(lab):
    """``invoke ab arm-a arm-b --interleave --host b70 --repetitions 2``: its output and runs."""
    project, host = lab
    proc = _servedeck(project, "ab", "arm-a", "arm-b", "--interleave", "--host", HOST,
                      "--repetitions", "2", "--requests", str(REQUESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, sorted(p for p in project.runs_dir.iterdir() if re.match(r"^\d{4}-", p.name))


def _meta(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def test_interleave_deploys_each_arm_twice_in_abba_order_each_with_its_own_benchmarked_run(lab, interleaved):
    project, host = lab
    _, runs = interleaved
    metas = [_meta(r) for r in runs]
    assert [m["profile"] for m in metas] == ["arm-a", "arm-b", "arm-b", "arm-a"]
    assert all(m["kind"] == "deploy" and m["outcome"] == "ready" for m in metas)
    assert len({m["experiment"] for m in metas}) == 1 and metas[0]["experiment"].startswith("ilv-")
    for run in runs:
        samples = [json.loads(line) for line in (run / "bench.jsonl").read_text().splitlines()]
        measured = sorted(s["phase"] for s in samples if s["phase"] != "warmup")
        assert measured == ["cold"] * REQUESTS + ["warm"] * REQUESTS
    # the host saw four deployments in the same order, and the two arms' compose files differ
    deploys = [r for r in revisions(_history(host)) if r.event == "deploy"]
    assert [(r.profile, r.outcome) for r in deploys] == [("arm-a", "ready"), ("arm-b", "ready"),
                                                          ("arm-b", "ready"), ("arm-a", "ready")]
    assert [r.record.get("run_id") for r in deploys] == [r.name for r in runs]
    sha = [m["compose_sha256"] for m in metas]
    assert sha[0] == sha[3] != sha[1] == sha[2]


def test_interleave_output_and_report_show_the_order_and_the_trend(lab, interleaved):
    project, _ = lab
    out, runs = interleaved
    ids = [r.name for r in runs]
    assert f"A = {ids[0]}, {ids[3]}" in out and f"B = {ids[1]}, {ids[2]}" in out
    assert "changed: max_num_batched_tokens" in out
    assert f"order: A:{ids[0]} B:{ids[1]} B:{ids[2]} A:{ids[3]}" in out
    trend_lines = [ln for ln in out.splitlines() if ln.strip().startswith("trend ")]
    assert {ln.split(":")[0].strip() for ln in trend_lines} == {
        "trend cold ttft_s", "trend cold prefill_tok_s", "trend warm decode_tok_s"}
    report = project.runs_dir / "reports" / f"{ids[0]}_vs_{ids[1]}" / "report.md"
    assert f"report: {report}" in out
    text = report.read_text()
    assert "### Interleaved order (ABBA, 4 deployments on host b70)" in text
    for position, (arm, run) in enumerate(zip("ABBA", ids), 1):
        # one row per deployment with its medians of the three trend metrics (measured: numbers)
        assert re.search(rf"^\| {position} \| {arm} \| {run} \| [\d.,]+ \| [\d.,]+ \| [\d.,]+ \|$", text, re.M), text
    trend = text.split("Trend across repetitions", 1)[1].split("## Findings", 1)[0]
    for metric in ("cold ttft_s", "cold prefill_tok_s", "warm decode_tok_s"):
        assert re.search(rf"^- {metric}: rho (-?[\d.]+|–)", trend, re.M), trend
    # the verdicts pool both deployments of each arm: 2 x REQUESTS samples per arm
    n = 2 * REQUESTS
    assert re.search(rf"^\| warm \| decode_tok_s \| [\d.,]+ \({n}, [^)]*\) \| [\d.,]+ \({n}, [^)]*\) \|",
                     text, re.M), text


def test_a_rollback_records_a_run_that_bench_accepts_and_ab_compares(lab, interleaved):
    """After the experiment (arm-a serves), ``invoke rollback`` restores arm-b; ``invoke bench``
    benchmarks the rollback's run by default, and ``invoke ab`` compares it with arm-a's run."""
    project, host = lab
    _, runs = interleaved
    proc = _servedeck(project, "rollback", "--host", HOST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rolled = max(p for p in project.runs_dir.iterdir() if re.match(r"^\d{4}-", p.name))
    meta = _meta(rolled)
    assert meta["kind"] == "rollback" and meta["outcome"] == "ready" and meta["profile"] == "arm-b"
    assert meta["compose_sha256"] == _meta(runs[2])["compose_sha256"]
    # the run that first deployed this compose file did not start the server that runs now
    entry = get_host(load_inventory(project.inventory_path), HOST, project.inventory_path)
    with pytest.raises(ServedeckError, match=f"was started by run {rolled.name}"):
        bench_deployed(runs[2], host, entry, Workload(prompt_tokens=64, max_tokens=8, repetitions=1))
    proc = _servedeck(project, "bench", "--host", HOST, "--repetitions", str(REQUESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"results in {rolled}" in proc.stdout
    samples = [json.loads(line) for line in (rolled / "bench.jsonl").read_text().splitlines()]
    # sized from the deployed max_model_len (2048), as for a deploy's run
    assert {s["prompt_tokens"] + s["output_tokens"] for s in samples} == {2048}
    assert _meta(rolled)["benched_at"]
    proc = _servedeck(project, "ab", runs[3].name, rolled.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed: max_num_batched_tokens" in proc.stdout and "decode_tok_s" in proc.stdout
    # latest:arm-b now names the rollback's run: it served and was benchmarked
    assert resolve_run(project.runs_dir, "latest:arm-b") == rolled


def test_a_capacity_search_from_the_command_line_is_recorded_shown_and_exported(lab, interleaved, tmp_path):
    """``invoke bench --workload --load --slo --capacity`` against the stand-in deployment (no
    load model: every level meets a lenient SLO, so the search grows until its level budget and
    says the capacity is higher than it reached); the run keeps load.jsonl, load.json and
    capacity.json; ``show`` prints them; ``--export-vllm`` writes vllm bench serve's shape and
    ``--import-curve`` reads it back beside the run."""
    project, _ = lab
    proc = _servedeck(project, "bench", "--host", HOST, "--workload", "chat", "--load", "concurrency:1",
                      "--slo", "e2e_s=30,p=50", "--capacity", "--max-levels", "3", "--requests", "6")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = max(p for p in project.runs_dir.iterdir() if re.match(r"^\d{4}-", p.name))
    assert "every level met the SLO up to 16 requests in flight" in proc.stdout and f"results in {run}" in proc.stdout
    assert {"load.jsonl", "load.json", "capacity.json"} <= {p.name for p in run.iterdir()}
    assert _meta(run)["load_benched_at"]
    shown = _servedeck(project, "show", run.name)
    assert shown.returncode == 0 and "load:" in shown.stdout and "c=16" in shown.stdout and "capacity:" in shown.stdout
    again = _servedeck(project, "bench", "--host", HOST, "--workload", "chat", "--load", "concurrency:1")
    assert again.returncode != 0 and "already holds load results" in again.stderr
    out = tmp_path / "vllm.jsonl"
    proc = _servedeck(project, "bench", "--run", run.name, "--export-vllm", str(out))
    assert proc.returncode == 0 and len(out.read_text().splitlines()) == 3
    proc = _servedeck(project, "bench", "--run", run.name, "--import-curve", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vllm-bench-serve: 3 levels (c=1, c=4, c=16)" in proc.stdout
    assert json.loads((run / "curve-vllm.json").read_text())["levels"][2]["value"] == 16
