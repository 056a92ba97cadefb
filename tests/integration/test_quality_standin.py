"""The quality gate end to end over the loopback card host (issue 32).

Real parts: the ``servedeck`` command line (``invoke deploy``, ``bench``, ``ab``), SSH to the
loopback host, its Docker engine, the local registry. The served image is the vLLM stand-in
(``deploy/images/standin``): ``STANDIN_OUTPUT=sane`` answers the probes well, and each other
mode breaks one thing, as people see on the user's card (``!!!!`` output, tool calls left as
text, reasoning in the answer). A single-variable A/B (``env.STANDIN_OUTPUT``) against the sane
deployment must hold the broken arm back, and say why.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from test_deploy import PORT, ROOT, _variant

from servedeck.model.project import Project

HOST = "b70"
BENCH = ["--repetitions", "1", "--prompt-tokens", "64", "--max-tokens", "8"]


def _servedeck(project: Project, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SERVEDECK_PROJECT": str(project.root)}
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def lab(standin_lab):
    """A project whose ``qa-sane`` profile serves the stand-in with sane answers, variants that
    change only ``STANDIN_OUTPUT``, and a fresh working directory on the loopback card host."""
    project, host = standin_lab("quality", "qa-sane", "base", {"STANDIN_OUTPUT": "sane"}, host=HOST, port=PORT)
    for mode in ("repeat_char", "tool_unparsed", "reasoning_leak", "tool_malformed"):
        _variant(project, f"qa-{mode.replace('_', '-')}",
                 f"extends: qa-sane\ncontainer:\n  environment:\n    STANDIN_OUTPUT: {mode}\n")
    return project, host


def _deploy_and_bench(project: Project, profile: str) -> str:
    proc = _servedeck(project, "deploy", "--host", HOST, "--profile", profile)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = re.search(r"^run record: (\S+)$", proc.stdout, re.MULTILINE).group(1)
    proc = _servedeck(project, "bench", "--host", HOST, *BENCH)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "quality probes (" in proc.stdout
    return os.path.basename(run)


@pytest.fixture(scope="module")
def sane_run(lab):
    project, _ = lab
    return _deploy_and_bench(project, "qa-sane")


def test_the_sane_deployment_passes_every_probe(lab, sane_run):
    project, _ = lab
    doc = json.loads((project.runs_dir / sane_run / "quality.json").read_text())
    assert doc["likelihood"]["error"] is None and len(doc["likelihood"]["items"]) == 8
    assert {f["name"]: f["status"] for f in doc["features"]} == {
        "tool_call": "parsed", "reasoning": "separated", "structured_output": "valid"}
    assert [n["retrieved"] for n in doc["needle"]] == [True, True, True]
    assert all(not g["degenerate"] for g in doc["generation"])


@pytest.mark.parametrize("mode,rule,words", [
    ("repeat-char", "degenerate", "degenerate output in 3 of 3 prompts (repeated_char, repetition_loop)"),
    ("tool-unparsed", "tool_call", "tool_call unparsed (tool_call_parser=qwen3_xml): tool-call markup '<tool_call>'"),
    ("reasoning-leak", "reasoning", "reasoning leaked (reasoning_parser=qwen3): '<think>' in the answer"),
])
def test_a_broken_arm_is_held_back_and_the_report_says_why(lab, sane_run, mode, rule, words, tmp_path):
    project, _ = lab
    broken = _deploy_and_bench(project, f"qa-{mode}")
    out = tmp_path / "report.md"
    proc = _servedeck(project, "ab", sane_run, broken, "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed: env.STANDIN_OUTPUT: sane → " in proc.stdout
    gate = next(ln for ln in proc.stdout.splitlines() if "quality gate:" in ln)
    assert "B cannot be called better: " in gate and words in gate, gate
    section = out.read_text().split("### Quality", 1)[1].split("## Findings", 1)[0]
    assert f"- {rule}: {words}" in section


def test_a_load_benchmark_probes_too_and_a_malformed_tool_call_is_gated(lab, sane_run):
    """``invoke bench`` under load runs the probes after its levels, as a single-stream bench does:
    a deployment whose tool calls come back with arguments that are not JSON is held back."""
    from servedeck.ab.quality import compare_quality, read_quality
    project, _ = lab
    proc = _servedeck(project, "deploy", "--host", HOST, "--profile", "qa-tool-malformed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = project.runs_dir / re.search(r"^run record: (\S+)$", proc.stdout, re.MULTILINE).group(1).rsplit("/", 1)[1]
    proc = _servedeck(project, "bench", "--host", HOST, "--workload", "chat", "--load", "concurrency:1",
                      "--requests", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "quality probes (" in proc.stdout
    assert "tool_call (tool_call_parser=qwen3_xml): malformed BROKEN" in proc.stdout
    assert {"load.json", "quality.json"} <= {p.name for p in run.iterdir()}
    assert {f.name: f.status for f in read_quality(run).features}["tool_call"] == "malformed"
    gate = compare_quality([project.runs_dir / sane_run], [run]).gate
    assert gate.blocks and [r.rule for r in gate.reasons] == ["tool_call"], gate.reasons
