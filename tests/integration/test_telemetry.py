"""Energy, clocks and throttling sampled on the loopback host against a STAND-IN xe card.

Real: sshd, servedeck's SSH session, the sampler script on the host, the files it reads, the
small process that advances the stand-in's energy counter at a known power
(``devtools/standin_card.py``). Stand-in: the card's sysfs tree (no Intel GPU here).
"""

from __future__ import annotations

import json
import time

import pytest
from devtools.standin_card import HWMON, UW, make_card, start_load, stop_load

from servedeck.bench.energy import Window, telemetry_record
from servedeck.host.telemetry import TELEMETRY_DIR, start_telemetry, stop_telemetry

#: the stand-in rewrites its counter every 10 ms and may be scheduled late on this shared
#: 2-core machine: its counter can trail the true energy by this many seconds at either edge
STANDIN_SLACK_S = 0.03


def _windows(durations: list[float], gap_s: float = 0.15) -> list[tuple[float, float]]:
    out = []
    for d in durations:
        t0 = time.time()
        time.sleep(d)
        out.append((t0, time.time()))
        time.sleep(gap_s)
    return out


def _measure(host, root, durations, tokens):
    handle = start_telemetry(host, sysfs_root=root, period_s=0.1)
    time.sleep(0.25)  # the sampler's first readings come before the first window
    spans = _windows(durations)
    time.sleep(0.25)
    raw = stop_telemetry(host, handle)
    wins = [Window(f"warm {i + 1}", "warm", i, a + raw.clock_offset_s, b + raw.clock_offset_s, tokens)
            for i, (a, b) in enumerate(spans)]
    return raw, telemetry_record(raw, wins), spans


def test_energy_per_token_of_a_known_power_within_the_sampling_error(scratch_host):
    root = make_card(scratch_host, f"{scratch_host.workdir}/sysfs")
    pid = start_load(scratch_host, root, 150.0)
    try:
        raw, rec, spans = _measure(scratch_host, root, [0.6, 0.4, 0.8], tokens=40)
    finally:
        stop_load(scratch_host, pid)
    assert rec.energy_source == "xe card" and not rec.wraps and not rec.resets
    assert raw.sampler == "bash" and len(raw.t) >= 15  # ~10 samples/s for ~2.5 s, no process per sample
    assert abs(raw.clock_offset_s) < 0.05  # loopback: the same clock
    for w, (a, b) in zip(rec.windows, spans):
        expected = 150.0 * (b - a)
        assert abs(w.energy_j - expected) <= w.energy_error_j + 150.0 * 2 * STANDIN_SLACK_S, (w, expected)
        assert w.j_per_token == pytest.approx(expected / 40, abs=(w.energy_error_j + 150 * 2 * STANDIN_SLACK_S) / 40)
        assert w.mean_power_w == pytest.approx(150.0, rel=0.1)
        assert w.throttled_s == 0 and w.freq_mhz_mean == pytest.approx(2800)
    assert rec.phases["warm"].output_tokens == 120
    # the sampler's files were removed by the stop
    left = scratch_host.run_script('ls -A "$1" 2>/dev/null | wc -l', [scratch_host.abspath(TELEMETRY_DIR)])
    assert left.stdout.strip() == "0"


def test_counter_wrap_around_is_added_back_and_a_cap_shows_as_throttling(scratch_host):
    """The counter starts 40 J below 2^32 µJ (a 32-bit register's range) and the demand of
    200 W is capped at 150 W by power1_max: the wrap comes within ~0.3 s, every window reads
    150 W and the PL1 throttle reason for its whole length."""
    root = make_card(scratch_host, f"{scratch_host.workdir}/sysfs", current_w=150)
    pid = start_load(scratch_host, root, 200.0, start_uj=2 ** 32 - 40 * UW, modulus=2 ** 32)
    try:
        _, rec, spans = _measure(scratch_host, root, [0.5, 0.5, 0.5], tokens=10)
    finally:
        stop_load(scratch_host, pid)
    assert rec.wraps == 1 and rec.resets == 0
    assert any("wrapped around 1 time" in p for p in rec.problems)
    for w, (a, b) in zip(rec.windows, spans):
        assert abs(w.energy_j - 150.0 * (b - a)) <= w.energy_error_j + 150.0 * 2 * STANDIN_SLACK_S
        assert w.throttled_s == pytest.approx(b - a, abs=0.11)
        assert w.throttle_reasons_s.get("pl1", 0) == pytest.approx(b - a, abs=0.11)
        assert w.freq_mhz_mean == pytest.approx(2800 * 150 / 200, rel=0.02)
    assert rec.phases["warm"].throttled_fraction > 0.8


def test_a_missing_counter_is_said_and_clocks_are_still_sampled(scratch_host):
    root = make_card(scratch_host, f"{scratch_host.workdir}/sysfs", energy=False)
    pid = start_load(scratch_host, root, 100.0)
    try:
        raw, rec, _ = _measure(scratch_host, root, [0.3], tokens=5)
    finally:
        stop_load(scratch_host, pid)
    assert any("no readable energy counter" in p for p in raw.problems)
    assert rec.energy_source is None and rec.windows[0].energy_j is None
    assert any("energy per token is not measured" in p for p in rec.problems)
    assert rec.windows[0].freq_mhz_mean == pytest.approx(2800)


def test_a_host_without_any_counter_still_benches(scratch_host):
    handle = start_telemetry(scratch_host, sysfs_root=f"{scratch_host.workdir}/nothing-here", period_s=0.1)
    assert handle.columns == [] and handle.file
    time.sleep(0.3)
    raw = stop_telemetry(scratch_host, handle)
    rec = telemetry_record(raw, [Window("cold 1", "cold", 0, time.time() - 0.2, time.time(), 3)])
    assert rec.energy_source is None and rec.windows[0].energy_j is None
    assert json.loads(rec.model_dump_json())["windows"][0]["output_tokens"] == 3


def test_the_sampler_stops_by_itself_at_its_deadline(scratch_host):
    root = make_card(scratch_host, f"{scratch_host.workdir}/sysfs")
    from servedeck.host import telemetry
    handle = start_telemetry(scratch_host, sysfs_root=root, period_s=0.05,
                             max_duration_s=-telemetry.DEADLINE_MARGIN_S + 1)
    time.sleep(2.5)
    pid = scratch_host.read_file(handle.file + ".pid").decode().strip()
    alive = scratch_host.run_script('[ -d "/proc/$1" ] && grep -q "sd-telemetry-$2" "/proc/$1/cmdline" '
                                    '&& echo alive; true',
                                    [pid, handle.token]).stdout.strip()
    assert alive == ""
    raw = stop_telemetry(scratch_host, handle)
    assert 0 < len(raw.t) < 60
    assert scratch_host.read_file(f"{root}/{HWMON}/name").decode().strip() == "xe"


# ------------------------------------------------------------------------------ the bench flow

from test_deploy import _deploy, _fast, _variant, card, project, standin  # noqa: E402,F401


def test_bench_records_energy_per_token_of_each_request(project, card, standin):  # noqa: F811
    """A deployed stand-in server benchmarked while the stand-in card draws 150 W: every request's
    J/token is 150 W × its time ÷ its output tokens, within the stated error; then a load
    benchmark of the same deployment: each level's energy is 150 W × the level's time."""
    from servedeck.bench.client import Workload
    from servedeck.bench.limits import format_telemetry, read_roofline, read_telemetry
    from servedeck.bench.record import bench_deployed
    host, entry = card
    root = make_card(host, f"{host.workdir}/sysfs")
    entry = entry.model_copy(update={"sysfs_root": root})
    name = _fast(project, "paced", startup_s=1)
    _variant(project, "paced-slow", "extends: paced\ncontainer:\n  environment:\n"
                                    "    STANDIN_DECODE_S_PER_TOKEN: \"0.01\"\n")
    res = _deploy(project, (host, entry), "paced-slow", standin)
    assert res.outcome == "ready"
    from servedeck.bench.load import LoadProfile
    from servedeck.bench.record import load_deployed
    from servedeck.bench.workload import ChatWorkload, Lengths
    from servedeck.runs import store
    chat = ChatWorkload(name="t", requests=3, warmup_requests=0, output_tokens=Lengths(value=24),
                        prompt_tokens=Lengths(value=32))
    pid = start_load(host, root, 150.0)  # one load process for the bench and then the load benchmark
    try:
        result = bench_deployed(res.run.path, host, entry, Workload(prompt_tokens=64, max_tokens=48, repetitions=2),
                                probes=False)
        run = load_deployed(res.run.path, host, entry, chat, profile=LoadProfile.parse("concurrency:1,3"),
                            probes=False)
    finally:
        stop_load(host, pid)
    tel = read_telemetry(res.run.path)
    assert tel.energy_source == "xe card" and [w.index for w in tel.windows] == [0, 1, 2, 3, 4]
    for w, s in zip(tel.windows, result.samples):
        expected = 150.0 * s.e2e_s / s.output_tokens
        slack = w.energy_error_j / s.output_tokens + 150.0 * 2 * STANDIN_SLACK_S / s.output_tokens
        assert abs(w.j_per_token - expected) <= slack + 0.02 * expected, (w, expected)
        assert w.output_tokens == s.output_tokens == 48
    assert tel.phases["cold"].windows == 2 and tel.phases["warm"].mean_power_w == pytest.approx(150, rel=0.1)
    lines = format_telemetry(tel)
    assert lines[0].startswith("energy: xe card") and any("J/token" in ln for ln in lines)
    roof = read_roofline(res.run.path)  # the stand-in has no model: said, not raised
    assert roof is not None and any("no weights figure" in n for n in roof.notes + roof.model.notes)
    assert name == "paced"

    # the same deployment under load: one window per level, 150 W × the level's time
    load_tel = store.read(res.run.path, store.LOAD_TELEMETRY)
    assert [w.label for w in load_tel.windows] == ["level 1 (c=1)", "level 2 (c=3)"]
    for w, lv in zip(load_tel.windows, run.summary.levels):
        assert w.output_tokens == lv.output_tokens == 72
        assert w.duration_s == pytest.approx(lv.duration_s, abs=1e-6)  # a window's duration is stored to the µs
        assert w.energy_j is not None, (w, load_tel.problems)
        assert abs(w.energy_j - 150.0 * lv.duration_s) <= w.energy_error_j + 150.0 * 2 * STANDIN_SLACK_S, (w, lv)
    words = format_telemetry(load_tel)
    assert any(ln.startswith("  level 2 (c=3): ") and "J/token" in ln for ln in words), words
