"""Pure parts of the load benchmark: load profiles, workloads (YAML, lengths, errors), level
summaries, the capacity search against known truths, saturation, knee and the KV check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servedeck.bench.capacity import CapacitySearch, knee, kv_check, saturation_flags
from servedeck.bench.load import LoadLevel, LoadProfile, arrivals
from servedeck.bench.loadresult import LevelServer, RequestRecord, ServerSample, server_gauges, summarise_level
from servedeck.bench.slo import Slo
from servedeck.bench.workload import (FullContextWorkload, Lengths, SharedPrefixWorkload,
                                      available_workloads, corpus_words, load_workload)
from servedeck.errors import ServedeckError

SLO = Slo(ttft_s=1.0, percentile=90)


# ---------------------------------------------------------------------------- load profiles


def test_profiles_parse_and_round_trip():
    for text in ("concurrency:1,2,4,8", "constant:2.5,5", "poisson:1,2@16", "ramp:1-20@8"):
        assert LoadProfile.parse(text).text == text
    (ramp,) = LoadProfile.parse("ramp:1e-2-20").levels  # an exponent's sign is not the ramp's dash
    assert (ramp.start_rps, ramp.value) == (0.01, 20.0)
    assert [lv.label for lv in LoadProfile.parse("poisson:1,2@16").levels] == ["poisson 1 req/s \u226416",
                                                                               "poisson 2 req/s \u226416"]


@pytest.mark.parametrize("text, words", [("concurrency:1.5", "whole number"), ("bogus:1", "unknown load profile"),
                                         ("ramp:5", "START-END"), ("concurrency:2@4", "caps rate profiles"),
                                         ("poisson:-1", "greater than 0"), ("constant:", "no levels")])
def test_bad_profiles_say_what_is_wrong(text, words):
    with pytest.raises(ServedeckError, match=words) as exc:
        LoadProfile.parse(text)
    assert exc.value.field == "--load" and "concurrency:1,2,4,8" in exc.value.hint


def test_arrivals():
    assert arrivals(LoadLevel(kind="concurrency", value=4), 5, 0) is None
    assert arrivals(LoadLevel(kind="constant", value=4), 3, 0) == [0.0, 0.25, 0.5]
    pois = LoadLevel(kind="poisson", value=5.0)
    a = arrivals(pois, 4000, seed=3)
    assert a == arrivals(pois, 4000, seed=3) != arrivals(pois, 4000, seed=4)  # seeded
    gaps = np.diff(a)
    assert np.mean(gaps) == pytest.approx(0.2, rel=0.05)
    assert np.std(gaps) == pytest.approx(0.2, rel=0.08)  # exponential: sd = mean
    ramp = arrivals(LoadLevel(kind="ramp", start_rps=1.0, value=10.0), 10, 0)
    gaps = np.diff(ramp)
    assert gaps[0] == pytest.approx(1 / 2.0) and gaps[-1] == pytest.approx(1 / 10.0)
    assert all(g1 > g2 for g1, g2 in zip(gaps, gaps[1:]))


# ---------------------------------------------------------------------------- workloads


def test_shipped_workloads_load_and_keep_the_single_stream_defaults():
    names = set(available_workloads())
    assert {"single-stream", "chat", "shared-prefix", "full-context-2"} <= names
    single = load_workload("single-stream").to_bench_workload()
    from servedeck.bench.client import Workload
    assert single == Workload()  # today's workload, field for field
    fc = load_workload("full-context-2")
    assert isinstance(fc, FullContextWorkload) and fc.default_load() == "concurrency:1,2"
    assert fc.lengths(None, 2, 2048) == [(2048 - 256, 256, 0)] * 2


def test_project_workloads_shadow_shipped_ones(tmp_path):
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "chat.yaml").write_text("kind: chat\nrequests: 5\n")
    assert load_workload("chat", tmp_path).requests == 5
    assert load_workload("chat").requests == 64


@pytest.mark.parametrize("text, field, words", [
    ("kind: chatty\n", "kind", "unknown workload kind"),
    ("kind: chat\nrequests: 0\n", "requests", "greater than or equal to 1"),
    ("kind: chat\nprompt_tokens: {distribution: uniform, min: 9}\n", "prompt_tokens", "needs max"),
    ("kind: chat\nprompt_tokens: {distribution: uniform, min: 90, max: 10}\n", "prompt_tokens", "above max"),
    ("kind: chat\nload: sideways:3\n", "load", "unknown load profile"),
    ("kind: chat\nslo: {ttft_s: 2, p: 0.9}\n", "slo.p", "write 90 for 90 %"),
    ("kind: chat\nslo: {ttft_s: 2, percentile: 1e-300}\n", "slo.percentile", "in percent, above 1"),
    ("kind: chat\nslo: {ttft_s: .inf}\n", "slo.ttft_s", "finite number"),
    ("kind: chat\nload: ramp:1-inf\n", "load", "finite number"),
    ("kind: chat\nseed: -1\n", "seed", "greater than or equal to 0"),
    ("kind: chat\nprompt_tokens: {distribution: lognormal, median: .inf, sigma: 1}\n", "prompt_tokens.median",
     "finite number"),
    ("kind: chat\nprompt_tokens: {distribution: lognormal, median: 100, sigma: 1e308, max: 900}\n",
     "prompt_tokens.sigma", "less than or equal to 5"),
    ("kind: chat\noutput_tokens: {distribution: fixed, value: 100, min: 500, max: 600}\n", "output_tokens",
     "does not use min, max"),
    ("kind: chat\noutput_tokens: {distribution: uniform, min: 1, max: 5, value: 9999}\n", "output_tokens",
     "does not use value"),
    ("kind: chat\ncorpus: /nonexistent/corpus.txt\n", "corpus", "no corpus named"),
    ("kind: shared-prefix\nprefixes: 100\nrequests: 4\n", None, "no two requests share a prefix"),
    ("kind: full-context\ncontext_fraction: 1.5\n", "context_fraction", "less than or equal to 1"),
    ("- a list\n", None, "must hold a mapping"),
])
def test_bad_workload_files_name_file_and_field(tmp_path, text, field, words):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(ServedeckError, match=words) as exc:
        load_workload(str(path))
    assert exc.value.file == str(path) and exc.value.field == field


def test_a_workload_file_that_is_not_utf8_is_named_with_its_line_and_the_listing_goes_on(tmp_path):
    import os
    import subprocess
    import sys
    (tmp_path / "workloads").mkdir()
    bad = tmp_path / "workloads" / "latin1.yaml"
    bad.write_bytes(b"kind: chat\ndescription: caf\xe9\n")
    with pytest.raises(ServedeckError, match="UTF-8") as exc:
        load_workload(str(bad))
    assert exc.value.file == str(bad) and "line 2" in exc.value.message
    res = subprocess.run([sys.executable, "-m", "servedeck", "workloads"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "SERVEDECK_PROJECT": str(tmp_path)}, cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "latin1" in res.stdout and "invalid" in res.stdout and "chat" in res.stdout, res.stdout


def test_unknown_workload_lists_the_known_ones():
    with pytest.raises(ServedeckError, match="no workload named 'nope'") as exc:
        load_workload("nope")
    assert "chat" in exc.value.hint


def test_lengths_are_seeded_and_bounded():
    rng = lambda: np.random.default_rng(5)  # noqa: E731
    uni = Lengths(distribution="uniform", min=10, max=20)
    assert uni.draw(rng(), 50) == uni.draw(rng(), 50)
    assert set(uni.draw(rng(), 500)) == set(range(10, 21))
    ln = Lengths(distribution="lognormal", median=100, sigma=0.5, min=20, max=300)
    vals = ln.draw(rng(), 5000)
    assert 20 <= min(vals) and max(vals) <= 300 and np.median(vals) == pytest.approx(100, rel=0.05)
    assert Lengths.model_validate(64).draw(rng(), 2) == [64, 64]
    with pytest.raises(ValueError, match="needs median, sigma"):
        Lengths(distribution="lognormal")


def test_shared_prefix_groups_and_lengths():
    w = SharedPrefixWorkload(prefixes=3, prefix_tokens=100, suffix_tokens=Lengths(value=20),
                             output_tokens=Lengths(value=8))
    assert [w.prefix_group(i) for i in range(5)] == [0, 1, 2, 0, 1]
    assert w.lengths(np.random.default_rng(0), 2, None) == [(120, 8, 100)] * 2
    assert w.longest_request(None) == 128


def test_full_context_needs_room_for_a_prompt():
    w = FullContextWorkload(output_tokens=64, context_fraction=0.02)
    with pytest.raises(ServedeckError, match="leaves -24 prompt tokens"):
        w.prompt_tokens_for(2048)
    with pytest.raises(ServedeckError, match="needs the server's max_model_len"):
        w.prompt_tokens_for(None)


def test_corpus_is_shipped_prose_or_a_user_file(tmp_path):
    words = corpus_words("default")
    assert len(words) > 2000 and len(set(words)) > 800  # varied text, not one repeated sentence
    own = tmp_path / "mine.txt"
    own.write_text("# comment line\n" + "alpha beta gamma " * 40)
    assert corpus_words(str(own))[:3] == ("alpha", "beta", "gamma") and "comment" not in corpus_words(str(own))
    own.write_text("too few words")
    with pytest.raises(ServedeckError, match="at least 100"):
        corpus_words(str(own))
    with pytest.raises(ServedeckError, match="no corpus named"):
        corpus_words("no-such-corpus")


# ---------------------------------------------------------------------------- level summaries


def _records(n, *, ttft=0.1, fail=0, level=0, e2e=1.0, spread=0.0):
    out = []
    for i in range(n):
        ok = i >= fail
        out.append(RequestRecord(level=level, index=i, tag=f"t{i}", prompt_tokens_requested=100, max_tokens=10,
                                 sent_s=i * 0.1, sent_unix_s=0.0, success=ok, error=None if ok else "HTTP 500: x",
                                 ttft_s=ttft + spread * i if ok else None, tpot_s=0.01 if ok else None,
                                 e2e_s=e2e if ok else None, itl_s=[0.01] * 9 if ok else [],
                                 prompt_tokens=100 if ok else None, output_tokens=10 if ok else 0,
                                 first_chunk_tokens=1, chunks=10))
    return out


def test_level_summary_throughput_percentiles_and_errors():
    recs = _records(40, fail=2, spread=0.001)
    lv = summarise_level(0, LoadLevel(kind="concurrency", value=4), recs, started_at="t", server=None, slo=SLO)
    assert (lv.requests, lv.completed, lv.failed) == (40, 38, 2)
    assert lv.errors == [{"text": "HTTP 500: x", "count": 2}]
    assert lv.duration_s == pytest.approx(3.9 + 1.0)
    assert lv.request_rps == pytest.approx(38 / 4.9) and lv.output_tok_s == pytest.approx(380 / 4.9)
    assert lv.percentiles["ttft_s"]["p50"].reported and not lv.percentiles["ttft_s"]["p99"].reported
    assert lv.percentiles["itl_s"]["p99"].n == 38 * 9  # every gap of every request
    assert lv.slo.good == 38 and lv.slo.total == 40


def test_server_gauges_are_time_weighted():
    samples = [ServerSample(t_s=0.0, waiting=0.0, running=1), ServerSample(t_s=1.0, waiting=4.0, running=2),
               ServerSample(t_s=4.0, waiting=0.0, running=2, kv_cache_usage=0.5)]
    g = server_gauges(samples)
    assert g["waiting_mean"] == pytest.approx((0 * 1 + 4 * 3) / 4) and g["waiting_max"] == 4.0
    assert g["running_max"] == 2 and g["kv_cache_usage_max"] == 0.5


# ---------------------------------------------------------------------------- capacity search


def _level(kind, value, passes, *, waiting=0.0, preempt=0, tok_s=None, e2e=1.0, n=40):
    """A level whose requests meet the SLO (``passes``) or miss it, with given server figures."""
    recs = _records(n, ttft=0.1 if passes else 2.0, e2e=e2e)
    server = LevelServer(interval_s=0.5, preemptions=preempt, waiting_mean=waiting,
                         waiting_max=math.ceil(waiting) if waiting else 0.0)
    lv = summarise_level(0, LoadLevel(kind=kind, value=value), recs, started_at="t", server=server, slo=SLO)
    if tok_s is not None:
        lv.output_tok_s = tok_s
    return lv


def _search(truth, *, kind="concurrency", start=1.0, precision=0.1, max_levels=8):
    s = CapacitySearch(LoadLevel(kind=kind, value=start), precision=precision, max_levels=max_levels)
    while (level := s.next_level()) is not None:
        s.record(_level(kind, level.value, level.value <= truth))
    return s, s.result(SLO)


@pytest.mark.parametrize("truth", [1, 2, 3, 5, 6, 7, 13, 20, 37, 64, 100, 250])
def test_concurrency_search_brackets_the_truth_within_ten_percent_in_eight_levels(truth):
    s, res = _search(truth)
    assert res.lo <= truth < res.hi
    assert res.precise and res.levels_run <= 8, res.steps
    assert abs(res.capacity / truth - 1) <= 0.1, (res.capacity, truth)
    assert res.lo_state == "met" and res.hi_state == "violated"
    assert [st.phase for st in res.steps][:2] == ["start", "grow"]


@pytest.mark.parametrize("truth", [0.3, 1.7, 4.2, 30.0, 250.0])
def test_rate_search_grows_or_shrinks_to_the_truth(truth):
    _, res = _search(truth, kind="poisson", start=1.0)
    assert res.lo <= truth < res.hi and res.precise and res.levels_run <= 8, res.steps
    assert abs(res.capacity / truth - 1) <= 0.1


def test_search_reports_when_it_cannot_answer():
    _, res = _search(0)  # even one request at a time misses
    assert res.capacity is None and res.lo is None and res.hi == 1 and "no level met the SLO" in res.reading
    _, res = _search(10 ** 9, max_levels=3)
    assert res.capacity is None and res.hi is None and res.levels_run == 3
    assert "higher than the search reached" in res.reading
    _, res = _search(20, max_levels=4)
    assert not res.precise and "not yet within ±10%" in res.reading and res.lo <= 20 < res.hi


def _late_search(truth, late_at: dict[float, int]):
    """A search whose level at a value is delivered late for its first ``late_at[value]`` runs
    (the client's latencies set by the host's front end: missing the SLO although the engine
    would meet it)."""
    s = CapacitySearch(LoadLevel(kind="concurrency", value=1.0), precision=0.1, max_levels=10)
    runs: dict[float, int] = {}
    while (level := s.next_level()) is not None:
        v = level.value
        runs[v] = runs.get(v, 0) + 1
        late = runs[v] <= late_at.get(v, 0)
        lv = _level("concurrency", v, v <= truth and not late)
        if late:
            lv.delivery_lag_s = 0.6  # of a mean end-to-end latency of 1.0 s
        s.record(lv)
    return s.result(SLO), runs


def test_a_level_delivered_late_runs_again_and_steers_only_then():
    res, runs = _late_search(13, {4.0: 1})
    assert runs[4.0] == 2 and res.lo <= 13 < res.hi and res.precise, res.steps
    first, again = [st for st in res.steps if st.value == 4.0]
    assert first.late and not first.passed and (again.phase, again.late, again.passed) == ("again", False, True)
    assert "run again: 4 requests in flight" in res.reading and "steering as measured" not in res.reading
    _, without = _search(13)
    assert res.capacity == without.capacity
    # late twice: the second run steers as measured (the host's front end is part of what the client gets)
    res, runs = _late_search(13, {4.0: 2})
    assert runs[4.0] == 2 and res.hi == 4 and "late again, and steering as measured: 4" in res.reading
    assert not any(st.late for st in _search(13)[1].steps)


def test_a_rate_search_stops_shrinking_once_its_requests_ran_one_at_a_time():
    """Nothing meets the SLO at any rate: the search stops at the first rate whose requests were
    seldom in flight together (rate × mean latency 1 s below 0.1), not after hours-long levels."""
    s = CapacitySearch(LoadLevel(kind="poisson", value=64.0), precision=0.1, max_levels=8)
    while (level := s.next_level()) is not None:
        s.record(_level("poisson", level.value, False, e2e=1.0))
    res = s.result(SLO)
    assert [st.value for st in res.steps] == [64.0, 16.0, 4.0, 1.0, 0.25, 0.0625], res.steps
    assert res.capacity is None and "seldom in flight together" in res.reading
    _, res = _search(0.3, kind="poisson", start=1.0)  # latencies that fall with the rate: still found
    assert res.lo <= 0.3 < res.hi


def test_search_settings_are_checked():
    with pytest.raises(ServedeckError, match="not ramp"):
        CapacitySearch(LoadLevel(kind="ramp", start_rps=1, value=2))
    with pytest.raises(ServedeckError, match="precision"):
        CapacitySearch(LoadLevel(kind="concurrency", value=1), precision=1.5)
    for growth in (math.nan, math.inf, 1.0):
        with pytest.raises(ServedeckError, match="growth must be a finite number above 1"):
            CapacitySearch(LoadLevel(kind="poisson", value=1), growth=growth)


def test_saturation_flags():
    levels = [_level("concurrency", 1, True, tok_s=100), _level("concurrency", 2, True, tok_s=190),
              _level("concurrency", 4, True, tok_s=200, e2e=2.0, waiting=1.2),
              _level("concurrency", 8, False, tok_s=201, e2e=4.0, waiting=5, preempt=3)]
    saturation_flags(levels)
    assert [lv.saturation for lv in levels] == [[], [], ["queue", "throughput flat"],
                                                ["queue", "preemption", "throughput flat"]]
    behind = _level("poisson", 50, True)  # 40 requests over ~4.9 s is ~8 req/s, far below 50 offered
    saturation_flags([behind])
    assert behind.saturation == ["behind"]


def test_knee_of_a_saturating_curve():
    # throughput rises with concurrency until 6, then stays flat: the knee is at 6
    curve = [(c, min(c, 6) * 100 / (1 + 0.05 * (min(c, 6) - 1))) for c in (1, 2, 4, 6, 8, 12, 16, 32)]
    assert knee(curve) == 6
    assert knee([(1, 1), (2, 2), (4, 4)]) is None  # a straight line has no knee
    assert knee([(1, 1), (2, 2)]) is None


def test_kv_check_against_the_onset_of_queue_and_preemption():
    pred = {"pool_tokens": 5000, "pool_tokens_low": 4900, "pool_tokens_high": 5100, "block_size": 16}
    # requests of 2000 tokens (125 blocks = 2000 tokens) fit twice in 5000 tokens
    ok = [_level("concurrency", 1, True), _level("concurrency", 2, True), _level("concurrency", 3, True, preempt=2)]
    kv = kv_check(ok, pred, 2000)
    assert kv.predicted_concurrency == 2 and kv.agrees and kv.observed_onset == 3 and kv.highest_clean == 2
    bad = [_level("concurrency", 1, True), _level("concurrency", 2, True, waiting=1.0)]
    kv = kv_check(bad, pred, 2000)
    assert kv.agrees is False and kv.observed_onset == 2 and "began to queue or preempt at 2" in kv.reading
    assert kv_check(ok, None, 2000) is None


def test_prompts_from_the_corpus_are_sized_exactly_with_a_many_tokens_per_word_tokenizer():
    """A tokenizer that splits words into 1 to 8 pieces (the tiny CPU model's does) made the
    sizing oscillate; every length must still come out exact."""
    from servedeck.bench.client import build_prompt
    words = corpus_words("default")
    pieces = {w: 1 + (sum(map(ord, w)) % 8) for w in set(words)}

    def count(text: str) -> int:
        return 9 + sum(pieces.get(w, 1) for w in text.split())
    rng = np.random.default_rng(4)
    hint = None
    for i in range(200):
        n, start = int(rng.integers(40, 900)), int(rng.integers(0, len(words)))
        text = build_prompt(count, n, f"[req t-{i}]", words=words, start=start, tokens_per_word=hint)
        assert count(text) == n and text.startswith(f"[req t-{i}] ")
        hint = n / len(text.split())


@pytest.mark.parametrize("args, words", [
    (["--workload", "single-stream", "--load", "concurrency:2"], "is a single stream"),
    (["--workload", "chat", "--capacity"], "--capacity needs an SLO"),
    (["--workload", "chat", "--load", "ramp:1-4", "--slo", "ttft_s=1", "--capacity"], "not ramp"),
    (["--workload", "chat", "--load", "concurrency:1.5"], "whole number of requests"),
    (["--workload", "chat", "--slo", "ttft=1"], "unknown SLO key 'ttft'"),
    (["--workload", "nope"], "no workload named 'nope'"),
    (["--workload", "chat", "--slo", "ttft_s=2,p=0.9"], "write 90 for 90 %"),
    (["--workload", "chat", "--slo", "ttft_s=inf"], "finite number"),
    (["--workload", "chat", "--load", "ramp:inf-20"], "finite number"),
    (["--workload", "chat", "--requests", "abc"], "--requests 'abc' is not a whole number"),
    (["--workload", "chat", "--requests", "-5"], "greater than or equal to 1"),
    (["--workload", "chat", "--requests", "0"], "greater than or equal to 1"),
    (["--workload", "chat", "--slo", "ttft_s=1", "--capacity", "--precision", "abc"], "--precision 'abc' is not"),
    (["--workload", "chat", "--slo", "ttft_s=1", "--capacity", "--precision", "5"], "between 0 and 1"),
    (["--workload", "chat", "--slo", "ttft_s=1", "--capacity", "--precision", "nan"], "between 0 and 1"),
    (["--workload", "chat", "--slo", "ttft_s=1", "--capacity", "--max-levels", "1.5"], "not a whole number"),
    (["--workload", "chat", "--slo", "ttft_s=1", "--capacity", "--max-levels", "0"], "at least 2 levels"),
    (["--run", "latest", "--export-vllm", "/tmp"], "--export-vllm /tmp is a directory"),
    (["--workload", "chat", "--slo", "ttft_s=1", "--capacity", "--load", "concurrency:1,2,4"],
     "--capacity starts from one level"),
    (["--workload", "chat", "--slo", "ttft_s=2,tpot_s=0.1,ttft_s=3"], "gives ttft_s twice"),
])
def test_bench_under_load_settings_are_refused_before_the_host_is_asked(args, words):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-m", "invoke", "-r", str(root), "bench", "--host", "no-such-host", *args],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and words in res.stderr and "no-such-host" not in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


# ---------------------------------------------------------------------------- event loop

def test_the_client_runs_on_uvloop_when_installed_and_on_asyncio_without(monkeypatch):
    import asyncio
    import sys

    from servedeck.bench.loadclient import run_loop

    async def which() -> str:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()).__module__
    pytest.importorskip("uvloop")
    assert run_loop(which()) == "uvloop"
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert run_loop(which()).startswith("asyncio")
