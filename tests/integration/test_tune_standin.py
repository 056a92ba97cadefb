"""``invoke tune`` on the stand-in server with a known response surface (issue 34), end to end
over the loopback card host: real command line, SSH, Docker engine, registry, deploys and
benchmarks; the server is the vLLM stand-in (``deploy/images/standin``), whose decode speed is
``STANDIN_SURFACE`` of its settings with 2 % per-request noise (``STANDIN_NOISE``).

The surface: max_num_batched_tokens 4096/8192/16384 → ×1.0/×1.2/×1.1, max_num_seqs 16/32 →
×1.0/×1.1; the best setting is (8192, 32). The host first serves the base profile (4096, 16),
benchmarked: the tune reuses that run as its baseline and puts that deployment back at the end.
"""

from __future__ import annotations

import json
import re

import pytest

from servedeck.ab.tune import load_state
from servedeck.deploy.ops import status
from servedeck.model.inventory import get_host, load_inventory
from test_deploy import _variant
from test_experiments import _servedeck

HOST = "b70"
SURFACE = {"max_num_batched_tokens": {"4096": 1.0, "8192": 1.2, "16384": 1.1},
           "max_num_seqs": {"16": 1.0, "32": 1.1}}
VARY = ["--vary", "engine.max_num_batched_tokens=4096,8192,16384", "--vary", "engine.max_num_seqs=16,32"]
MAX_EXPERIMENTS_TO_BEST = 4
"""The stated bound: the tune reaches (8192, 32) within this many experiments (one step per
variable and direction from each best: 4096→8192 kept, 8192→16384 reverted, 16→32 kept)."""


@pytest.fixture(scope="module")
def tuned(standin_lab):
    env = {"STANDIN_DECODE_S_PER_TOKEN": "0.002", "STANDIN_NOISE": "0.02",
           "STANDIN_SURFACE": json.dumps(SURFACE, separators=(",", ":"))}
    project, host = standin_lab("tune", "tune-standin", "batch-8192", env, host=HOST)
    _variant(project, "tune-base", "extends: tune-standin\nengine:\n  max_num_batched_tokens: 4096\n"
                                   "  max_num_seqs: 16\n")
    for args in (("deploy", "--host", HOST, "--profile", "tune-base"),
                     ("bench", "--host", HOST, "--prompt-tokens", "64", "--max-tokens", "32", "--repetitions", "8")):
        proc = _servedeck(project, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = get_host(load_inventory(project.inventory_path), HOST, project.inventory_path)
    before = status(host, entry)
    proc = _servedeck(project, "tune", "--base", "tune-base", "--host", HOST, "--name", "surface", *VARY,
                      "--prompt-tokens", "64", "--max-tokens", "32", "--max-requests", "12")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return project, host, entry, before, proc


def test_tune_reaches_the_best_setting_within_the_stated_experiments_and_stops_at_the_noise_floor(tuned):
    project, *_ , proc = tuned
    state = load_state(project.runs_dir, "surface")
    assert state.best == {"engine.max_num_batched_tokens": 8192, "engine.max_num_seqs": 32}, proc.stdout + proc.stderr
    assert len(state.experiments) <= MAX_EXPERIMENTS_TO_BEST, proc.stdout
    assert state.stopped.startswith("noise floor"), state.stopped
    assert state.finished
    assert "reusing run" in proc.stderr  # the host's benchmarked run of the same configuration
    for step in state.experiments:  # every step a normal run and report
        meta = json.loads((project.runs_dir / step.run_b / "run.json").read_text())
        assert meta["outcome"] == "ready" and meta["benched_at"]
        assert (project.runs_dir / step.report).exists()
    assert re.search(r"best: .*8192.*32", proc.stdout)


def test_the_host_serves_its_original_deployment_again(tuned):
    project, host, entry, before, _ = tuned
    now = status(host, entry)
    assert now["serving"] and now["compose_sha256"] == before["compose_sha256"]


def test_next_on_the_same_history_ranks_the_truly_best_variable_first(tuned):
    project, *_ = tuned
    proc = _servedeck(project, "next", "--profile", "tune-base", "--host", HOST, "--json",
                      "--only", "engine.max_num_batched_tokens", "--only", "engine.max_num_seqs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)
    first = plan["candidates"][0]
    assert (first["profile_path"], first["proposed"], first["gain_source"]) == (
        "engine.max_num_batched_tokens", 8192, "history"), plan["candidates"]
    assert first["clears_noise"] and 0.12 <= first["expected_gain"] <= 0.28


def test_an_interleaved_tune_from_the_command_line(tuned):
    """``tune --interleave 2``: the experiment deploys the best and the variant alternately
    (A B B A, looks after each pair), judges the pooled runs with their order in the report,
    and leaves the host serving what it served before."""
    project, host, entry, before, _ = tuned
    proc = _servedeck(project, "tune", "--base", "tune-base", "--host", HOST, "--name", "ilv",
                      "--vary", "engine.max_num_batched_tokens=4096,8192", "--interleave", "2",
                      "--max-experiments", "1", "--prompt-tokens", "64", "--max-tokens", "32", "--max-requests", "8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    state = load_state(project.runs_dir, "ilv")
    (step,) = state.experiments
    assert state.finished and step.status == "judged" and step.interleaving is not None
    arms = [p["arm"] for p in step.interleaving["positions"]]
    assert arms in (["A", "B"], ["A", "B", "B", "A"]) and len(step.runs_a) == arms.count("A")
    for run in step.runs_a + step.runs_b:
        meta = json.loads((project.runs_dir / run / "run.json").read_text())
        assert meta["outcome"] == "ready" and meta["benched_at"] and meta["experiment"]
    assert "### Interleaved order (ABBA" in (project.runs_dir / step.report).read_text()
    assert status(host, entry)["compose_sha256"] == before["compose_sha256"]
