"""Quality probes and the quality gate.

The probes run over real HTTP against the vLLM stand-in (``deploy/images/standin/standin.py``,
the script the stand-in image runs) served in this process: its ``STANDIN_OUTPUT`` modes produce
sane answers or break exactly one thing (degenerate text, malformed or unparsed tool calls,
reasoning in the answer, invalid JSON), ``STANDIN_LOGPROB_SHIFT`` lowers the likelihood and
``STANDIN_TOP1_FLIP`` changes the most likely next token. Each broken arm must be caught by the
gate against a sane reference; a second sane deployment must pass it with identical numbers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from servedeck.ab.quality import QualityGateSettings, compare_quality, read_quality
from servedeck.bench.probes import ServerFeatures, run_probes
from servedeck.bench.quality import (
    QualitySettings,
    classify_reasoning,
    classify_structured_output,
    classify_tool_call,
    degenerate_kinds,
    quality_texts,
    repetition_loop,
)
from servedeck.errors import ServedeckError
from servedeck.runs import store

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "deploy" / "images" / "standin" / "standin.py"
METRICS = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu" / "metrics-4096.txt"
CPU_RUNS = ROOT / "tests" / "fixtures" / "runs-cpu"
ARGV = ["models/qwen3-tiny", "--port", "0", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml",
        "--reasoning-parser", "qwen3", "--served-model-name", "Qwen3.8-27B"]
FEATURES = ServerFeatures(tool_call_parser="qwen3_xml", enable_auto_tool_choice=True, reasoning_parser="qwen3",
                          max_model_len=2048)
TOOLS = quality_texts()["tool_call"]["tools"]


def _standin_module():
    spec = importlib.util.spec_from_file_location("standin_for_tests", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STANDIN_MOD = _standin_module()


@contextlib.contextmanager
def standin(monkeypatch, **env: str):
    """The stand-in's HTTP server on a free loopback port, with ``STANDIN_*`` variables ``env``."""
    for key in ("STANDIN_OUTPUT", "STANDIN_LOGPROB_SHIFT", "STANDIN_TOP1_FLIP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("STANDIN_DECODE_S_PER_TOKEN", "0.000001")
    monkeypatch.setenv("STANDIN_PREFILL_S_PER_TOKEN", "0.000001")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(STANDIN_MOD, "say", lambda line: None)
    cfg = STANDIN_MOD.parse_argv(ARGV)
    server = ThreadingHTTPServer(("127.0.0.1", 0), STANDIN_MOD.make_handler(cfg, METRICS.read_text()))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _probe(monkeypatch, **env):
    with standin(monkeypatch, **env) as url:
        return run_probes(url, "Qwen3.8-27B", features=FEATURES)


def _run_with(tmp_path: Path, name: str, quality) -> Path:
    """A copy of a recorded CPU run holding ``quality`` as its ``quality.json``."""
    src = CPU_RUNS / ("0001-cpu-4096-local" if name.endswith("a") else "0002-cpu-8192-local")
    dst = tmp_path / name
    shutil.copytree(src, dst)
    (dst / store.QUALITY).write_text(quality.model_dump_json(indent=1))
    return dst


@pytest.fixture(scope="module")
def sane_pair():
    """Two probes of two sane stand-ins (an A/A)."""
    mp = pytest.MonkeyPatch()
    try:
        return _probe(mp, STANDIN_OUTPUT="sane"), _probe(mp, STANDIN_OUTPUT="sane")
    finally:
        mp.undo()


# ----------------------------------------------------------------------------- output analysis


def test_degenerate_kinds_name_what_is_wrong():
    assert degenerate_kinds("Paris is the capital of France.", None, [1, 2, 3, 4, 5, 6]) == []
    assert degenerate_kinds("", None) == ["empty"]
    assert degenerate_kinds(None, "\n\n\n", [207] * 48) == ["empty", "repetition_loop"]
    assert degenerate_kinds(None, "Let me think about the capital.") == ["reasoning_only"]
    assert degenerate_kinds("!" * 40, None, [5] * 40) == ["repeated_char", "repetition_loop"]
    assert degenerate_kinds("Wow!!! That is " + "!" * 14 + " loud.", None) == []
    # a parsed tool call with no text is an answer
    assert degenerate_kinds(None, None, [9], tool_calls=True) == []


def test_repetition_loop_finds_the_shortest_unit_covering_the_tail():
    assert repetition_loop([1, 2, 3] + [7, 8] * 10) == (2, 10)
    assert repetition_loop([4] * 30) == (1, 30)
    assert repetition_loop(list(range(40))) is None
    # a short repeat at the end of a long varied answer is not a loop
    assert repetition_loop(list(range(60)) + [9, 9, 9, 9]) is None


def test_tool_call_classification():
    ok = {"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]}
    assert classify_tool_call(ok, TOOLS, "p").status == "parsed"
    bad_json = {"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Lis'}}]}
    check = classify_tool_call(bad_json, TOOLS, "p")
    assert (check.status, check.broken) == ("malformed", True) and "not JSON" in check.detail
    wrong = {"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"town": "Lisbon"}'}}]}
    assert "do not match its parameters" in classify_tool_call(wrong, TOOLS, "p").detail
    unknown = {"tool_calls": [{"function": {"name": "rm_rf", "arguments": "{}"}}]}
    assert "unknown function 'rm_rf'" in classify_tool_call(unknown, TOOLS, "p").detail
    markup = {"content": "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"}
    assert classify_tool_call(markup, TOOLS, "p").status == "unparsed"
    assert classify_tool_call({"content": "It is sunny."}, TOOLS, "p").status == "no_call"


def test_reasoning_and_structured_output_classification():
    assert classify_reasoning({"content": "No.", "reasoning": "91 = 7 x 13"}, "stop", "p").status == "separated"
    assert classify_reasoning({"content": "No.", "reasoning_content": "91 = 7 x 13"}, "stop", "p").status == "separated"
    leaked = classify_reasoning({"content": "<think>\n91 = 7 x 13\n</think>\n\nNo."}, "stop", "p")
    assert (leaked.status, leaked.broken) == ("leaked", True)
    assert classify_reasoning({"content": None, "reasoning": "hmm"}, "length", "p").status == "unfinished"
    schema = quality_texts()["structured_output"]["schema"]
    assert classify_structured_output({"content": '{"city": "Lisbon", "population": 545000}'}, "stop",
                                      schema).status == "valid"
    assert classify_structured_output({"content": '{"city": "Lisbon"}'}, "stop", schema).status == "invalid"
    assert classify_structured_output({"content": '{"city": "Lis'}, "length", schema).status == "truncated"


# ----------------------------------------------------------------------------- probes over HTTP


def test_sane_standin_probes_everything_and_nothing_is_wrong(sane_pair):
    q, _ = sane_pair
    n_texts = QualitySettings().likelihood_texts
    assert q.likelihood.error is None and len(q.likelihood.items) == n_texts
    item = q.likelihood.items[0]
    assert item.tokens == len(item.logprobs) == len(item.top1_ids) == len(item.token_text) - 1
    assert item.sum_logprob == pytest.approx(sum(item.logprobs)) and item.sum_logprob < 0
    assert [g.degenerate for g in q.generation] == [[]] * len(q.generation) and q.generation
    assert {f.name: f.status for f in q.features} == {"tool_call": "parsed", "reasoning": "separated",
                                                       "structured_output": "valid"}
    assert [n.retrieved for n in q.needle] == [True, True, True]
    # sized by the deployed context: the needle context fills max_model_len less the answer
    assert 2048 - 16 - 16 - 40 <= q.needle[0].context_tokens <= 2048 - 16
    assert q.skipped == {}


def test_a_server_without_prompt_logprobs_records_the_error_and_probes_the_rest(monkeypatch):
    q = _probe(monkeypatch)  # the stand-in's default: no prompt_logprobs, "word word ..." answers
    assert q.likelihood.items == [] and "no prompt_logprobs" in q.likelihood.error
    assert all("repetition_loop" in g.degenerate for g in q.generation)


def test_probes_skip_what_the_profile_does_not_enable(monkeypatch):
    with standin(monkeypatch, STANDIN_OUTPUT="sane") as url:
        q = run_probes(url, "Qwen3.8-27B", features=ServerFeatures(max_model_len=2048),
                       settings=QualitySettings(likelihood_texts=2, generation_prompts=1, needle_depths=[]))
    assert [f.name for f in q.features] == ["structured_output"]
    assert q.skipped == {"tool_call": "no tool-call parser", "reasoning": "no reasoning parser",
                         "needle": "no needle depths"}
    assert len(q.likelihood.items) == 2 and len(q.generation) == 1


def test_a_short_context_truncates_texts_and_shrinks_the_needle(monkeypatch):
    with standin(monkeypatch, STANDIN_OUTPUT="sane") as url:
        q = run_probes(url, "Qwen3.8-27B", features=ServerFeatures(max_model_len=40),
                       settings=QualitySettings(likelihood_texts=3, generation_prompts=0, features=False))
    assert all(i.truncated and i.tokens <= 39 for i in q.likelihood.items)
    assert q.needle == [] and "leaves no room" in q.skipped["needle"]


def test_probes_refuse_a_server_serving_another_model(monkeypatch):
    with standin(monkeypatch, STANDIN_OUTPUT="sane") as url, \
            pytest.raises(ServedeckError, match="does not serve model 'other'"):
        run_probes(url, "other")


# ----------------------------------------------------------------------------- the gate


def test_aa_of_two_sane_deployments_agrees_fully_and_passes(sane_pair, tmp_path):
    a, b = (_run_with(tmp_path, n, q) for n, q in zip(("run-a", "run-b"), sane_pair))
    q = compare_quality([a], [b])
    assert q.likelihood.verdict == "identical" and q.likelihood.ratio == 1.0
    assert q.next_token.rate == 1.0 and q.next_token.identical == len(q.next_token.items)
    assert q.generation.rate == 1.0 and q.generation.first is None
    assert q.gate.status == "pass" and not q.gate.reasons
    assert {c.name: c.new for c in q.checks} == {"degenerate": [], "length_stop": [], "tool_call": [],
                                                  "reasoning": [], "structured_output": [], "needle": []}


BROKEN = [
    ({"STANDIN_OUTPUT": "repeat_char"}, {"degenerate", "length_stop", "structured_output", "needle",
                                         "generation_agreement"}),
    ({"STANDIN_OUTPUT": "loop"}, {"degenerate", "length_stop", "structured_output", "needle", "generation_agreement"}),
    ({"STANDIN_OUTPUT": "empty"}, {"degenerate", "structured_output", "needle", "generation_agreement"}),
    ({"STANDIN_OUTPUT": "reasoning_only"}, {"degenerate", "structured_output", "needle", "generation_agreement"}),
    ({"STANDIN_OUTPUT": "tool_malformed"}, {"tool_call"}),
    ({"STANDIN_OUTPUT": "tool_unparsed"}, {"tool_call"}),
    ({"STANDIN_OUTPUT": "reasoning_leak"}, {"reasoning"}),
    ({"STANDIN_OUTPUT": "json_invalid"}, {"structured_output"}),
    ({"STANDIN_OUTPUT": "sane", "STANDIN_LOGPROB_SHIFT": "-0.2"}, {"likelihood"}),
    ({"STANDIN_OUTPUT": "sane", "STANDIN_TOP1_FLIP": "0.3"}, {"agreement"}),
]


@pytest.mark.parametrize("env,rules", BROKEN, ids=[",".join(f"{k[8:].lower()}={v}" for k, v in e.items())
                                                    for e, _ in BROKEN])
def test_each_broken_standin_mode_is_caught_by_the_gate(monkeypatch, sane_pair, tmp_path, env, rules):
    broken = _probe(monkeypatch, **env)
    a, b = _run_with(tmp_path, "run-a", sane_pair[0]), _run_with(tmp_path, "run-b", broken)
    q = compare_quality([a], [b])
    assert q.gate.status == "gated" and q.gate.blocks
    assert {r.rule for r in q.gate.reasons} == rules, q.gate.reasons
    assert q.gate.summary().startswith("B cannot be called better: ")
    # the same broken arm as the reference gates nothing on the sane arm for what only it breaks
    flipped = compare_quality([a], [b], QualityGateSettings(reference="B"))
    assert flipped.gate.arm == "A"
    assert not {"degenerate", "tool_call", "reasoning", "structured_output", "needle", "length_stop"} & {
        r.rule for r in flipped.gate.reasons}


def test_the_likelihood_drop_reports_its_interval_and_test(monkeypatch, sane_pair, tmp_path):
    b = _probe(monkeypatch, STANDIN_OUTPUT="sane", STANDIN_LOGPROB_SHIFT="-0.2")
    q = compare_quality([_run_with(tmp_path, "run-a", sane_pair[0])], [_run_with(tmp_path, "run-b", b)])
    m = q.likelihood
    # every scored token lost 0.2 nats: the perplexity ratio is exp(0.2) with a point interval
    assert m.ratio == pytest.approx(1.2214, abs=1e-3) and m.ci_low == pytest.approx(m.ci_high)
    n = len(m.samples_a)
    assert m.p == pytest.approx(2 / 2 ** n) and m.verdict == "worse"
    reason = next(r.text for r in q.gate.reasons if r.rule == "likelihood")
    assert "perplexity +22.14 % against A" in reason and "beyond the +1 % margin" in reason
    assert "paired sign-flip permutation test, exact" in reason


def test_a_shared_fault_is_noted_not_gated(monkeypatch, sane_pair, tmp_path):
    leak = _probe(monkeypatch, STANDIN_OUTPUT="reasoning_leak")
    q = compare_quality([_run_with(tmp_path, "run-a", leak)], [_run_with(tmp_path, "run-b", leak)])
    assert q.gate.status == "pass"
    assert any("reasoning in both arms, not gated" in n for n in q.gate.notes)


def test_gate_margins_are_the_users(monkeypatch, sane_pair, tmp_path):
    b = _probe(monkeypatch, STANDIN_OUTPUT="sane", STANDIN_TOP1_FLIP="0.3")
    runs = ([_run_with(tmp_path, "run-a", sane_pair[0])], [_run_with(tmp_path, "run-b", b)])
    rate = compare_quality(*runs).next_token.rate
    assert 0.4 < rate < 0.95
    assert compare_quality(*runs, QualityGateSettings(min_agreement=rate - 0.01)).gate.status == "pass"
    assert compare_quality(*runs, QualityGateSettings(min_agreement=rate + 0.01)).gate.status == "gated"


def test_one_arm_without_probes_is_not_checked(sane_pair, tmp_path):
    a = _run_with(tmp_path, "run-a", sane_pair[0])
    b = tmp_path / "run-b"
    shutil.copytree(CPU_RUNS / "0002-cpu-8192-local", b)
    q = compare_quality([a], [b])
    assert q.gate.status == "not checked" and q.gate.notes == ["B has no quality probes"]
    assert compare_quality([b], [b]) is None


def test_a_broken_quality_file_names_the_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / store.QUALITY).write_text(json.dumps({"texts_version": 1}))
    with pytest.raises(ServedeckError, match="invalid quality.json: Field required") as exc:
        read_quality(run)
    assert str(run / store.QUALITY) in exc.value.render()


# ----------------------------------------------------------------------------- report and CLI


def _invoke(*args: str, runs: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SERVEDECK_RUNS_DIR": str(runs)}
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], capture_output=True,
                          text=True, env=env, check=False)


@pytest.fixture(scope="module")
def gated_runs(sane_pair, tmp_path_factory):
    """A runs directory: 0001 (cpu-4096, sane stand-in probes) and 0002 (cpu-8192, probes of a
    stand-in whose answers are ``!!!!…``)."""
    mp = pytest.MonkeyPatch()
    try:
        broken = _probe(mp, STANDIN_OUTPUT="repeat_char")
    finally:
        mp.undo()
    runs = tmp_path_factory.mktemp("runs")
    for name, q in (("0001-cpu-4096-local", sane_pair[0]), ("0002-cpu-8192-local", broken)):
        shutil.copytree(CPU_RUNS / name, runs / name)
        (runs / name / store.QUALITY).write_text(q.model_dump_json())
    return runs


def test_report_has_a_quality_section_with_the_gate_and_its_reasons(gated_runs, tmp_path):
    from servedeck.ab.experiment import compare_runs
    out = compare_runs(gated_runs, [gated_runs / "0001-cpu-4096-local"], [gated_runs / "0002-cpu-8192-local"],
                       out=tmp_path / "report.md")
    text = out.report.read_text()
    quality_part = text.split("### Quality", 1)[1].split("## Findings", 1)[0]
    assert "**Gate: B cannot be called better: " in quality_part
    assert "- degenerate: degenerate output in 3 of 3 prompts (repeated_char, repetition_loop) where A's was not" \
        in quality_part
    assert "  - prompt 'autumn': repeated_char, repetition_loop (output: '!!!!" in quality_part
    assert "| perplexity (8 texts," in quality_part and "identical" in quality_part
    assert "| needle | 3/3 retrieved (2,002 tokens) | 0/3 retrieved (2,002 tokens) | 3 of 3 needle depths missed" \
        in quality_part
    assert "Diverging text (greedy generation): in 'autumn' at token 0: at the start → A ` Here is" in quality_part
    findings = text.split("## Findings", 1)[1].split("## Verdict", 1)[0]
    assert "- quality gate: B cannot be called better" in findings
    assert "- perplexity " in findings and ": identical: every text scored the same" in findings


def test_ab_cli_prints_the_gate_and_takes_the_users_thresholds(gated_runs):
    res = _invoke("ab", "1", "2", runs=gated_runs)
    assert res.returncode == 0, res.stderr
    assert "quality gate: B cannot be called better: " in res.stdout
    assert "degenerate output in 3 of 3 prompts (repeated_char, repetition_loop)" in res.stdout
    # with B as the reference, A's sane answers are what disagrees with it
    flipped = _invoke("ab", "1", "2", "--quality-reference", "b", runs=gated_runs)
    assert "quality gate: A cannot be called better: greedy generation agreement with B 0.0%" in flipped.stdout
    assert "repeated_char" not in flipped.stdout.split("quality gate:", 1)[1].split("\n", 1)[0]
    bad = _invoke("ab", "1", "2", "--min-agreement", "1.5", runs=gated_runs)
    assert bad.returncode != 0 and "--min-agreement" in bad.stderr and "Traceback" not in bad.stderr
    bad = _invoke("ab", "1", "2", "--quality-reference", "C", runs=gated_runs)
    assert bad.returncode != 0 and "--quality-reference" in bad.stderr


def test_sweep_summary_carries_the_gate(gated_runs, tmp_path):
    from types import SimpleNamespace

    from servedeck.fleet.summary import render_table, sweep_table_from_rows
    from servedeck.fleet.sweep import summary_rows
    exp = SimpleNamespace(id="e01-r1", variable="engine.max_num_batched_tokens", value_a=4096, value_b=8192)
    plan = SimpleNamespace(name="s", base="cpu-4096", experiments=[exp],
                           result_path=lambda i: tmp_path / f"{i}.json")
    (tmp_path / "e01-r1.json").write_text(json.dumps({
        "host": "local", "run_a": "0001-cpu-4096-local", "run_b": "0002-cpu-8192-local", "report": "r.md",
        "started_at": 0, "finished_at": 60}))
    row = summary_rows(SimpleNamespace(runs_dir=gated_runs), plan)[0]
    assert row["gate"] == "gated: generation_agreement, degenerate, length_stop, structured_output, needle"
    assert "B cannot be called better (quality)" in row["note"]
    assert "gated: generation_agreement, degenerate" in render_table(sweep_table_from_rows(plan, [row]), width=400)


# ----------------------------------------------------------------------------- quality variants


@pytest.mark.parametrize("variant,parent,variable,values", [
    ("cpu-fp32", "cpu-4096", "dtype", (None, "float32")),
    ("quality-h6", "speed", "compose.volumes[/mnt/exl3model]", None),
    ("quality-fp16-prefill", "speed", "env.EXL3_INT8_PREFILL", (None, 0)),
])
def test_shipped_quality_variants_change_one_variable(variant, parent, variable, values):
    from servedeck.ab.compare import diff_views, views_from_profile
    from servedeck.compose.render import render_profile
    from servedeck.model.catalog import Catalog
    from servedeck.model.profile import ProfileStore
    profiles = ProfileStore(ROOT / "profiles")
    catalog = Catalog(ROOT / "deploy" / "images.yaml")
    views = []
    for name in (parent, variant):
        r = render_profile(profiles.load(name), catalog, ROOT / "templates")
        views.append(views_from_profile({"profile": r.profile.model_dump(mode="json"), "compose_text": r.compose_text,
                                         "effective": r.service.settings()}))
    diff = diff_views(*views)
    assert diff.single_variable is not None, [v.describe() for v in diff.differences]
    assert diff.single_variable.name.endswith(variable)
    if values:
        got = (diff.single_variable.a if diff.single_variable.present_a else None, diff.single_variable.b)
        assert got == values
    if variant == "cpu-fp32":  # exl3xpu edits model.yaml's dtype, it does not add a second --dtype
        assert "vllm.dtype=float32" in views[1].compose_text and "--dtype" not in views[1].compose_text


def test_bench_quality_options_are_checked_before_anything_runs(tmp_path):
    res = _invoke("bench", "--host", "nowhere", "--needle-tokens", "lots", runs=tmp_path)
    assert res.returncode != 0 and "--needle-tokens 'lots' is neither a token count nor `max`" in res.stderr
    res = _invoke("bench", "--host", "nowhere", "--lm-eval-limit", "5", runs=tmp_path)
    assert res.returncode != 0 and "need --lm-eval TASKS" in res.stderr
    res = _invoke("bench", "--host", "nowhere", "--lm-eval", "t", "--lm-eval-backend", "hf", runs=tmp_path)
    assert res.returncode != 0 and "--lm-eval-backend: bad lm-eval option: Input should be" in res.stderr
    assert "Traceback" not in res.stderr
