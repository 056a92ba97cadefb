"""`invoke plan` shows the KV prediction and stops a profile vLLM would refuse to start."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def invoke(*args: str, project: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SERVEDECK_RUNS_DIR=str(FIX / "runs"))
    if project:
        env["SERVEDECK_PROJECT"] = str(project)
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args],
                          capture_output=True, text=True, env=env)


def test_plan_predicts_run3_from_run2_within_the_stated_tolerance():
    res = invoke("plan", "--profile", "batch-8192", "--against", "0002-base-b70")
    assert res.returncode == 0, res.stderr
    m = re.search(r"predicted KV pool ([\d,]+) tokens \(([\d,]+)–([\d,]+)\).*max concurrency ([\d.]+)x", res.stdout)
    tokens, low, high = (int(m.group(i).replace(",", "")) for i in (1, 2, 3))
    assert abs(tokens / 236470 - 1) < 0.02 and low <= 236470 <= high   # run #3 logged 236,470
    assert abs(float(m.group(4)) / 1.80 - 1) < 0.02                      # and 1.80x
    assert "peak activation 1.00 GiB scaled by 8192/4096" in res.stdout
    warn = invoke("plan", "--profile", "batch-8192", "--against", "0002-base-b70", "--kv-threshold", "5")
    assert "kv/concurrency-change" in warn.stdout and "2.02x -> 1.82x" in warn.stdout


def test_plan_stops_a_max_model_len_that_cannot_fit(tmp_path):
    for name in ("profiles", "templates", "schema", "deploy"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("images"))
    (tmp_path / "profiles" / "batch-8192.yaml").write_text(
        "extends: base\nengine:\n  max_model_len: 524288\n")
    res = invoke("plan", "--profile", "batch-8192", "--against", "0002-base-b70", project=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "kv/refuses-to-start" in res.stdout and "524,288" in res.stdout
    assert "vLLM would refuse to start" in res.stderr and "Traceback" not in res.stderr


def test_ab_shows_prediction_beside_measurement(tmp_path):
    import json

    from servedeck.runs.kv_history import record_kv
    from servedeck.runs.store import open_run
    from servedeck.vllm.kv import KvSettings, calibration_from_startup, predict_kv
    runs = tmp_path / "runs"
    for name in ("0002-base-b70", "0003-batch-8192-b70"):
        shutil.copytree(FIX / "runs" / name, runs / name)
    base = runs / "0002-base-b70"
    point = calibration_from_startup(base.name, json.loads((base / "startup.json").read_text()))
    pred = predict_kv(KvSettings(device="xpu", max_model_len=131072, max_num_batched_tokens=8192,
                                 gpu_memory_utilization=0.94), history=[point])
    b = runs / "0003-batch-8192-b70"
    record_kv(open_run(b), pred.to_dict(), json.loads((b / "startup.json").read_text()))
    env = dict(os.environ, SERVEDECK_RUNS_DIR=str(runs))
    res = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "ab", "0002-base-b70",
                          "0003-batch-8192-b70"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert ("KV 0003-batch-8192-b70: predicted 238,931 tokens / 1.82x, logged 236,470 / 1.80x "
            "(+1.0 %, inside the interval)") in res.stdout
