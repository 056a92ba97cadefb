"""The load client, capacity search, saturation, knee and KV check against the vLLM stand-in's
load model (``deploy/images/standin/standin.py``, the program of the ``servedeck/vllm-standin``
image, run here as a local process): a server whose capacity is known, so the answers are
checked against the truth.

The stand-in runs at most ``STANDIN_MAX_NUM_SEQS`` = 4 requests at once (later ones queue in
arrival order); a request takes ~11 × 40 ms of decode. A closed loop of ``c`` requests of equal
length runs in batches: up to ``c = 4`` every request starts at once (a few ms to its first
token); from 5 on, ``c − 4`` of every ``c`` wait for a whole batch (~0.45 s) before a slot frees,
one in five or more, beyond the 10 % a TTFT SLO of 100 ms at p90 allows: the truth is 4,
exactly, and the search must find it. A constant rate is served until it passes what 4 slots
complete per second (``μ = 4 / service time``); the rate search must land within ±20 % of
``μ`` measured by the same client at concurrency 4 (the stated precision: arrivals near ``μ``
queue by chance on a shared 2-core machine).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from servedeck.bench.load import LoadLevel, LoadProfile
from servedeck.bench.loadclient import run_capacity, run_load
from servedeck.bench.slo import Slo
from servedeck.bench.workload import ChatWorkload, FullContextWorkload, Lengths
from servedeck.errors import ServedeckError

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "deploy" / "images" / "standin" / "standin.py"
MODEL = "Qwen3.8-27B"
DECODE_S = 0.04
OUTPUT = 12
SEQS = 4


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp_path: Path, **env: str):
    """Start the stand-in with ``env`` on a free port; return (url, process)."""
    port = _port()
    full = {**os.environ, "STANDIN_STARTUP_S": "0.1", "STANDIN_FIXTURES": str(ROOT / "tests/fixtures/vllm-0.32-cpu"),
            "STANDIN_PREFILL_S_PER_TOKEN": "0.00001", **env}
    log = open(tmp_path / f"standin-{port}.log", "wb")
    proc = subprocess.Popen([sys.executable, str(STANDIN), "models/qwen3-tiny", "--port", str(port),
                             "--served-model-name", MODEL], env=full, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"the stand-in did not serve: {(tmp_path / f'standin-{port}.log').read_text()[-2000:]}")


@pytest.fixture(scope="module")
def slots(tmp_path_factory):
    """A stand-in that runs at most 4 requests at once."""
    url, proc = _start(tmp_path_factory.mktemp("standin"), STANDIN_MAX_NUM_SEQS=str(SEQS),
                       STANDIN_DECODE_S_PER_TOKEN=str(DECODE_S))
    yield url
    proc.kill()
    proc.wait()


def _chat(**kw) -> ChatWorkload:
    return ChatWorkload(**{"name": "t", "requests": 20, "warmup_requests": 1, "output_tokens": Lengths(value=OUTPUT),
                           "prompt_tokens": Lengths(distribution="uniform", min=24, max=64), **kw})


SLO = Slo(ttft_s=0.1, percentile=90)


@pytest.fixture(scope="module")
def concurrency_search(slots):
    return run_capacity(slots, _chat(), LoadLevel(kind="concurrency", value=2), SLO, served_model=MODEL,
                        precision=0.1, max_levels=8, metrics_interval_s=0.1)


def test_concurrency_capacity_is_the_known_truth(concurrency_search):
    cap = concurrency_search.capacity
    assert (cap.lo, cap.hi, cap.capacity) == (SEQS, SEQS + 1, SEQS), cap.steps
    assert cap.precise and cap.levels_run <= 8
    assert [s.value for s in cap.steps][:2] == [2, 8]
    # 20 requests a level steer the search by the point estimate; they cannot show p90 either way
    # (an interval needs 36): the answer says so rather than calling the ends met or violated
    assert cap.lo_state == "undecided" and cap.steps[0].attainment == 1.0 and cap.steps[1].state == "violated"
    assert f"capacity under {SLO.describe()}: 4 requests in flight" in cap.reading, cap.reading


def test_saturation_and_knee_are_where_the_slots_run_out(concurrency_search):
    cap = concurrency_search.capacity
    levels = {lv.level.value: lv for lv in concurrency_search.summary.levels}
    assert cap.saturation == SEQS + 1 and "queue" in cap.saturation_flags
    assert levels[SEQS].saturation == [] and levels[SEQS].server.running_max == SEQS
    assert levels[8].server.waiting_max >= 3 and levels[8].server.running_max == SEQS
    assert cap.knee == SEQS


def test_the_servers_counters_agree_with_the_client(concurrency_search):
    for lv in concurrency_search.summary.levels:
        recs = [r for r in concurrency_search.records if r.level == lv.index]
        delta = lv.server.delta
        assert lv.failed == 0 and lv.completed == len(recs) == 20
        assert delta.requests_finished == lv.completed
        assert delta.generation_tokens == sum(r.output_tokens for r in recs) == 20 * OUTPUT
        assert delta.prompt_tokens == sum(r.prompt_tokens for r in recs) == sum(r.prompt_tokens_requested for r in recs)
        # the client's own TTFT can only be later than what the server measured
        assert lv.means["ttft_s"] >= delta.ttft_s - 0.002


def test_streams_held_back_by_the_host_are_flagged_late_delivery(tmp_path, concurrency_search):
    """A server that handles every first token on time but whose streams reach the client whole,
    after the last token (``STANDIN_HOLD_STREAM``: vLLM's CPU server on 2 busy cores): the client's
    TTFT is then the whole request, the server's own a few ms, and the level says it measured
    delivery. The same levels of the plain stand-in (the search above) are not flagged."""
    url, proc = _start(tmp_path, STANDIN_MAX_NUM_SEQS=str(SEQS), STANDIN_DECODE_S_PER_TOKEN=str(DECODE_S),
                       STANDIN_HOLD_STREAM="1")
    try:
        run = run_load(url, _chat(requests=8), LoadProfile(kind="concurrency", levels=[
            LoadLevel(kind="concurrency", value=2)]), served_model=MODEL, metrics_interval_s=0)
    finally:
        proc.kill()
        proc.wait()
    (lv,) = run.summary.levels
    decode = (OUTPUT - 1) * DECODE_S
    assert lv.completed == 8 and lv.server.delta.ttft_count == 8 and lv.server.delta.ttft_s < 0.1
    assert lv.delivery_lag_s == pytest.approx(decode, rel=0.5) and lv.means["ttft_s"] > decode
    assert "late delivery" in lv.saturation
    assert all(r.ttft_s > 0.8 * r.e2e_s for r in run.records if r.level == 0)
    for plain in concurrency_search.summary.levels:
        assert "late delivery" not in plain.saturation and plain.delivery_lag_s < 0.05, plain.delivery_lag_s


def test_a_rate_search_lands_near_what_the_slots_can_complete(slots, concurrency_search):
    at_capacity = next(lv for lv in concurrency_search.summary.levels if lv.level.value == SEQS)
    mu = at_capacity.request_rps  # requests/s four slots complete, measured by the same client
    run = run_capacity(slots, _chat(warmup_requests=0), LoadLevel(kind="constant", value=mu / 2), SLO,
                       served_model=MODEL, precision=0.2, max_levels=5, metrics_interval_s=0.1)
    cap = run.capacity
    assert cap.kind == "constant" and cap.capacity is not None and cap.precise, cap.steps
    assert abs(cap.capacity / mu - 1) <= 0.2, (cap.capacity, mu, cap.steps)
    over = max(run.summary.levels, key=lambda lv: lv.level.value)  # twice what the slots complete
    assert over.level.value == pytest.approx(2 * mu) and {"queue", "behind"} <= set(over.saturation)
    assert over.request_rps < 1.2 * mu


def test_open_loop_rates_and_a_cap_on_requests_in_flight(slots):
    run = run_load(slots, _chat(requests=12, warmup_requests=0), LoadProfile.parse("poisson:8,200@2"),
                   served_model=MODEL, slo=SLO, metrics_interval_s=0.1)
    low, capped = run.summary.levels
    assert low.failed == 0 and low.slo is not None
    recs = [r for r in run.records if r.level == 1]
    assert all(r.scheduled_s is not None for r in recs)
    # at most 2 in flight: requests due meanwhile waited in the client, and that wait is recorded
    assert max(r.queued_s for r in recs) > 0.05 and capped.server.running_max <= 2
    assert capped.concurrency_mean <= 2.05


def test_failures_are_recorded_not_raised(slots):
    # a workload that cannot fit the context is refused before anything is sent
    w = _chat(requests=3, warmup_requests=0, prompt_tokens=Lengths(value=64), output_tokens=Lengths(value=1990))
    with pytest.raises(ServedeckError, match="max_model_len is 2048"):  # the client refuses before sending
        run_load(slots, w, LoadProfile.parse("concurrency:1"), served_model=MODEL)
    w = _chat(requests=4, warmup_requests=0, request_timeout_s=0.05)  # the stand-in takes ~230 ms
    run = run_load(slots, w, LoadProfile.parse("concurrency:2"), served_model=MODEL, slo=SLO)
    lv = run.summary.levels[0]
    assert lv.failed == 4 and lv.completed == 0 and "request_timeout_s=0.05" in lv.errors[0]["text"]
    assert lv.slo.good == 0 and lv.slo.state in ("violated", "undecided")


@pytest.fixture(scope="module")
def kv_pool(tmp_path_factory):
    """A stand-in whose KV pool (16-token blocks) admits three full-context requests at their
    prompt but holds only two whole ones: the third is preempted as they grow."""
    # a request: 1,904 prompt + 144 output = 2,048 tokens = 128 blocks; admission needs 120
    url, proc = _start(tmp_path_factory.mktemp("standin-kv"), STANDIN_KV_TOKENS=str(3 * 120 * 16),
                       STANDIN_BLOCK_SIZE="16", STANDIN_DECODE_S_PER_TOKEN="0.002")
    yield url
    proc.kill()
    proc.wait()


def test_kv_prediction_against_the_onset_of_preemption(kv_pool):
    w = FullContextWorkload(name="fc", concurrent=3, output_tokens=144, requests=3, endpoint="/v1/completions")
    pred = {"pool_tokens": 3 * 120 * 16, "pool_tokens_low": 3 * 120 * 16, "pool_tokens_high": 3 * 120 * 16,
            "block_size": 16}
    run = run_capacity(kv_pool, w, LoadLevel(kind="concurrency", value=1), Slo(e2e_s=60.0, percentile=50),
                       served_model=MODEL, max_levels=3, growth=2, kv_prediction=pred, metrics_interval_s=0.05)
    levels = {lv.level.value: lv for lv in run.summary.levels}
    assert sorted(levels) == [1, 2, 4]
    assert levels[2].server.preemptions == 0 and levels[4].server.preemptions > 0
    # the workload asks 3 requests a level; a level of 4 in flight sends one per slot
    assert levels[4].requests == 4 and levels[4].server.waiting_max >= 1
    kv = run.capacity.kv
    assert kv.predicted_concurrency == 2 and kv.request_tokens == 2048
    assert kv.agrees and kv.observed_onset == 4 and kv.highest_clean == 2, kv
    assert all(r.success and r.output_tokens == 144 for r in run.records)  # preempted requests still finish
