"""lm-evaluation-harness against the real vLLM CPU server (``conftest.py``'s ``local_vllm_server``)
through its OpenAI-compatible chat backend, on a small local task (a task YAML over a JSON-lines
file in ``tests/fixtures/lm_eval``: no dataset hub is reachable here), stored and compared as
servedeck stores and compares it."""

from __future__ import annotations

from pathlib import Path

import pytest

from servedeck.ab.quality import compare_quality
from servedeck.bench.lmeval import (
    LmEvalResult,
    LmEvalSettings,
    read_lm_eval,
    run_lm_eval,
)
from servedeck.runs import store

TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "lm_eval"


@pytest.fixture(scope="module")
def scores(local_vllm_server) -> LmEvalResult:
    return run_lm_eval(local_vllm_server.url, local_vllm_server.model,
                       LmEvalSettings(tasks=["servedeck_tiny_qa"], include_path=str(TASKS), max_gen_toks=8))


def test_the_local_task_runs_against_the_server_and_scores_every_document(scores):
    (metric,) = scores.task_metrics
    assert (metric.task, metric.metric, metric.filter) == ("servedeck_tiny_qa", "exact_match", "none")
    lines = (TASKS / "servedeck_tiny_qa.jsonl").read_text().splitlines()
    assert sorted(metric.per_doc, key=int) == [str(i) for i in range(len(lines))]
    assert all(v in (0.0, 1.0) for v in metric.per_doc.values())
    assert metric.value == pytest.approx(sum(metric.per_doc.values()) / len(lines))
    assert scores.lm_eval_version.startswith("0.4")


def test_stored_scores_compare_document_by_document(scores, tmp_path):
    runs = []
    for name in ("a", "b"):
        run = tmp_path / name
        run.mkdir()
        (run / store.LM_EVAL).write_text(scores.model_dump_json())
        runs.append(run)
    assert read_lm_eval(runs[0]) == scores
    q = compare_quality([runs[0]], [runs[1]])
    (task,) = q.tasks
    assert task.name == "servedeck_tiny_qa/exact_match" and task.verdict == "identical"
    assert len(task.samples_a) == len(scores.task_metrics[0].per_doc)
    assert q.gate.status == "pass" and not q.gate.reasons
