"""Roofline, card table and energy arithmetic (issue 33), without a host.

The host side (the sampler, the stand-in sysfs tree's energy counter) is tested in
tests/integration/test_telemetry.py; these tests cover the arithmetic every figure rests on.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from servedeck.bench.energy import (MAX_PLAUSIBLE_W, Signals, Window, measure_windows, series_from_power,
                                    summarize, telemetry_record, unwrap_counter)
from servedeck.bench.limits import format_roofline, matrix_rate_text
from servedeck.bench.roofline import (GIB, LOW_SHARE, Ceilings, ModelCost, Roofline, int8_prefill, model_cost,
                                      resolve_ceilings, roofline)
from servedeck.errors import ServedeckError
from servedeck.host.telemetry import Column, RawTelemetry, parse_nvidia, parse_samples, parse_start
from servedeck.model.cards import CARDS, card, card_for_name, cards_for_memory
from servedeck.model.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
CPU_RUN = ROOT / "tests" / "fixtures" / "runs-cpu" / "0001-cpu-4096-local"

TINY_CONFIG = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
               "hidden_size": 256, "intermediate_size": 512, "torch_dtype": "bfloat16"}

# a hybrid model shaped like the Qwen3-Next / Qwen3.5 family: 3 of 4 layers linear attention
HYBRID_CONFIG = {"num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
                 "hidden_size": 2048, "intermediate_size": 6144, "torch_dtype": "bfloat16",
                 "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
                 + ["full_attention"],
                 "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                 "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}


def _sample(phase="warm", decode=57.0, accept=2.6, prompt=100, output=256, **server):
    return {"phase": phase, "rep": 0, "prompt_tokens": prompt, "output_tokens": output, "decode_tok_s": decode,
            "ttft_s": 1.0, "server": {"spec_accept_len": accept, **server}}


# ------------------------------------------------------------------------------------ cards


def test_card_table_has_the_issue_figures_and_every_row_a_source():
    b70, b60 = card("arc-pro-b70"), card("arc-pro-b60")
    assert (b70.memory_bandwidth_gb_s, b70.memory_bus_bits, b70.memory_gib, b70.board_power_w) == (608, 256, 32, 230)
    assert b60.memory_bandwidth_gb_s == 456
    assert all(c.sources for c in CARDS)
    assert card("cpu").memory_bandwidth_gb_s is None  # a CPU host is measured, not looked up
    for c in CARDS:  # the Xe2 derivation and the dense rates are consistent
        if c.matrix_fp16_tflops and c.matrix_int8_tops:
            assert c.matrix_int8_tops >= 2 * c.matrix_fp16_tflops * 0.99


def test_unknown_card_names_the_closest_ids_and_the_inventory_field(tmp_path):
    with pytest.raises(KeyError, match="did you mean arc-pro-b70"):
        card("arc-pro-b7")
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  b70:\n    ssh: {alias: b70}\n    workdir: /srv\n    card: arc-pro-b7\n")
    with pytest.raises(ServedeckError) as exc:
        load_inventory(inv)
    assert exc.value.field == "hosts.b70.card" and "did you mean arc-pro-b70" in exc.value.message


@pytest.mark.parametrize("name,card_id", [("NVIDIA GeForce RTX 4090", "rtx-4090"), ("NVIDIA L4", "l4"),
                                          ("NVIDIA L40S", "l40s"), ("NVIDIA A10", "a10"),
                                          ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
                                          ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
                                          ("NVIDIA GeForce RTX 3090 Ti", None)])
def test_nvidia_names_find_their_card(name, card_id):
    found = card_for_name(name)
    assert (found.id if found else None) == card_id


def test_memory_match_finds_the_b70_from_the_seed_log_and_refuses_to_guess_between_equals():
    assert [c.id for c in cards_for_memory("xpu", 31.89)] == ["arc-pro-b70"]  # "30.98/31.89 GiB"
    ceil = resolve_ceilings(None, host="b70", device="cuda", total_memory_gib=23.6)
    assert ceil.card is None and "set hosts.b70.card" in ceil.notes[0]


def test_ceilings_inventory_beats_measured_beats_table():
    class Entry:
        card = "arc-pro-b70"
        memory_bandwidth_gb_s = None
        matrix_fp16_tflops = None
        matrix_int8_tops = 300.0
    measured = {"memory_bandwidth_gb_s": 520.0, "matrix_tflops": 150.0, "matrix_dtype": "float16",
                "measured_at": "2026-12-01T00:00:00Z", "method": "torch sum"}
    c = resolve_ceilings(Entry(), host="b70", measured=measured)
    assert (c.memory_bandwidth_gb_s, c.spec_memory_bandwidth_gb_s) == (520.0, 608.0)
    assert c.bandwidth_source.startswith("measured on b70") and c.matrix_tflops == 150.0
    c = resolve_ceilings(Entry(), host="b70", measured=measured, int8=True)
    assert (c.matrix_tflops, c.matrix_precision, c.matrix_source) == \
        (300.0, "int8", "inventory: hosts.b70.matrix_int8_tops")
    assert matrix_rate_text(c) == "300 TOPS int8"
    Entry.memory_bandwidth_gb_s = 560.0
    assert resolve_ceilings(Entry(), host="b70", measured=measured).bandwidth_source == \
        "inventory: hosts.b70.memory_bandwidth_gb_s"
    c = resolve_ceilings(None, host="b70", device="xpu", total_memory_gib=31.89)
    assert c.memory_bandwidth_gb_s == 608.0 and "card table: Intel Arc Pro B70" in c.bandwidth_source
    assert int8_prefill({"EXL3_INT8_PREFILL": "1"}) and not int8_prefill({"EXL3_INT8_PREFILL": "0"})


# ------------------------------------------------------------------------------------ roofline



def test_the_matrix_ceiling_is_labelled_with_the_dtype_it_is_for() -> None:
    """A rate measured on a CPU without bfloat16 arithmetic is a float32 matmul's: its label says
    float32 (it said "FP16 TFLOPS", a claim no sample carried); a card's or the inventory's rate
    is float16 (int8 when the prefill runs W8A8); a record written before the dtype was kept
    names its precision class."""
    measured = {"memory_bandwidth_gb_s": 40.0, "matrix_tflops": 0.155, "matrix_dtype": "float32",
                "matrix_tflops_by_dtype": {"bfloat16": 0.0012, "float32": 0.155},
                "measured_at": "2026-12-04T00:00:00Z", "method": "torch sum"}
    cpu = resolve_ceilings(None, host="local", device="cpu", measured=measured)
    assert (cpu.matrix_tflops, cpu.matrix_dtype) == (0.155, "float32")
    assert matrix_rate_text(cpu) == "0.155 TFLOPS float32" and "(float32 matmul)" in cpu.matrix_source
    card = resolve_ceilings(None, host="b70", device="xpu", total_memory_gib=31.89)
    assert card.matrix_dtype == "float16" and matrix_rate_text(card).endswith("TFLOPS float16")
    w8a8 = resolve_ceilings(None, host="b70", device="xpu", total_memory_gib=31.89, int8=True)
    assert matrix_rate_text(w8a8) == "367 TOPS int8"
    older = Ceilings.model_validate({"matrix_tflops": 98.3, "matrix_precision": "fp16"})
    assert matrix_rate_text(older) == "98.3 TFLOPS FP16"
    assert matrix_rate_text(Ceilings()) is None
    assert any("0.155 TFLOPS float32" in line
               for line in format_roofline(Roofline(ceilings=cpu, model=ModelCost())))

def test_the_seed_run_is_near_70_percent_of_the_b70_ceiling():
    """17.34 GiB of weights, warm decode 57.0 tok/s at acceptance 2.6: ~22 steps/s, ~410 GB/s."""
    cost = ModelCost(weights_bytes=17.34 * GIB, kv_bytes_per_token=0.0)
    ceil = resolve_ceilings(None, host="b70", device="xpu", total_memory_gib=31.89)
    r = roofline([_sample()], cost, ceil)
    req = r.requests[0]
    assert req.decode_gb_s == pytest.approx(57.0 / 2.6 * 17.34 * GIB / 1e9)
    assert 405 < req.decode_gb_s < 412 and req.decode_share == pytest.approx(req.decode_gb_s / 608)
    assert 0.66 < req.decode_share < 0.68 and not req.flags and not r.problems
    assert req.decode_ceiling_tok_s == pytest.approx(608e9 * 2.6 / (17.34 * GIB))


def test_kv_bytes_follow_the_context_and_the_hybrid_layers_as_they_are():
    cost = model_cost(HYBRID_CONFIG, startup={"model_loading_gib": 10.0})
    # only the 2 full-attention layers hold KV: 2 × 2 heads × (256 + 256) × 2 B
    assert cost.kv_bytes_per_token == 2 * 2 * 512 * 2 and cost.attention_layers == 2
    # 6 linear layers: recurrent state 32 × 128 × 128 plus conv state (2·16·128 + 32·128) × 3,
    # 2 bytes each, read and written
    per_layer = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3
    assert cost.state_bytes_per_step == 2 * 6 * per_layer * 2
    ceil = resolve_ceilings(None, device="xpu", total_memory_gib=31.89)
    short, long_ = roofline([_sample(prompt=1000, output=0), _sample(prompt=65000, output=0)], cost, ceil).requests
    assert long_.bytes_per_step - short.bytes_per_step == pytest.approx(64000 * cost.kv_bytes_per_token)
    assert short.bytes_per_step == pytest.approx(10 * GIB + 1000 * 4096 + cost.state_bytes_per_step)


def test_kv_dtype_fp8_halves_the_kv_bytes():
    fp16 = model_cost(TINY_CONFIG, startup={}, weights_file_bytes=1)
    fp8 = model_cost(TINY_CONFIG, startup={}, weights_file_bytes=1, kv_cache_dtype="fp8")
    assert fp16.kv_bytes_per_token == 2 * fp8.kv_bytes_per_token == 1024


def test_weights_come_from_the_startup_log_before_the_files():
    assert model_cost(None, startup={"model_loading_gib": 17.34}, weights_file_bytes=5).weights_bytes == 17.34 * GIB
    cost = model_cost(None, startup={}, weights_file_bytes=4_600_000, weights_files_source="files")
    assert (cost.weights_bytes, cost.weights_source) == (4_600_000, "files")
    assert "no config.json" in cost.notes[-1]


def test_above_100_percent_is_a_measurement_problem():
    cost = ModelCost(weights_bytes=17.34 * GIB, kv_bytes_per_token=0.0)
    ceil = resolve_ceilings(None, device="xpu", total_memory_gib=31.89)
    r = roofline([_sample(decode=120.0, accept=1.0), _sample(decode=57.0)], cost, ceil)
    assert r.requests[0].decode_share > 1 and "measurement problem" in r.requests[0].flags[0]
    assert len(r.problems) == 1 and "above 100 %" in r.problems[0] and "1 of 2 requests" in r.problems[0]


def test_implausibly_low_is_flagged_but_an_overhead_bound_step_is_only_said():
    big = ModelCost(weights_bytes=17.34 * GIB, kv_bytes_per_token=0.0)
    ceil = resolve_ceilings(None, device="xpu", total_memory_gib=31.89)
    r = roofline([_sample(decode=1.0, accept=1.0)], big, ceil)
    assert r.requests[0].decode_share < LOW_SHARE and "implausibly low" in r.problems[0]
    tiny = ModelCost(weights_bytes=4e6, kv_bytes_per_token=1024.0)
    r = roofline([_sample(decode=100.0, accept=1.0)], tiny, ceil)
    assert not r.problems and "overhead-bound" in r.notes[0]


def test_prefill_flops_count_linear_layers_and_causal_attention_of_uncached_tokens():
    cost = model_cost(TINY_CONFIG, startup={}, weights_file_bytes=1)
    n = 2 * (256 * 256 + 2 * 256 * 128 + 256 * 256 + 3 * 256 * 512)
    assert cost.linear_params == n
    ceil = resolve_ceilings(None, device="cpu", measured={"memory_bandwidth_gb_s": 10.0, "matrix_tflops": 1.0,
                                                          "matrix_dtype": "bfloat16"})
    cold = _sample(phase="cold", prompt=1000, prefill_s=0.5)
    warm = _sample(phase="warm", prompt=1000, prefill_s=0.05, prompt_tokens_cached=992)
    rc, rw = roofline([cold, warm], cost, ceil).requests
    attn = 2 * 4 * 128
    assert rc.prefill_tflops == pytest.approx((2 * n * 1000 + attn * 1000 ** 2) / 0.5 / 1e12)
    assert rw.prefill_tokens == 8
    assert rw.prefill_tflops == pytest.approx((2 * n * 8 + attn * (1000 ** 2 - 992 ** 2)) / 0.05 / 1e12)
    assert rc.prefill_time_source == "server prefill time" and rc.prefill_share == pytest.approx(rc.prefill_tflops)


def test_recorded_cpu_run_against_a_measured_bandwidth_is_below_100_percent():
    samples = [json.loads(line) for line in (CPU_RUN / "bench.jsonl").read_text().splitlines()]
    cost = model_cost(TINY_CONFIG, startup=json.loads((CPU_RUN / "startup.json").read_text()),
                      weights_file_bytes=4_720_000)
    ceil = resolve_ceilings(None, host="local", device="cpu", measured={"memory_bandwidth_gb_s": 9.0})
    r = roofline(samples, cost, ceil)
    assert 0 < r.phases["warm"].decode_share < 1 and not r.problems
    assert r.phases["warm"].accept_len > 1  # n-gram speculative decoding: several tokens per step


# ------------------------------------------------------------------------------------ energy


def _counter(power_w, t, start_uj=0, modulus=None):
    out = []
    for x in t:
        v = start_uj + int(power_w * x * 1e6)
        out.append(v % modulus if modulus else v)
    return out


def test_constant_power_gives_the_energy_within_the_stated_error():
    rnd = random.Random(3)
    t, x = [], 0.0
    while x < 10:
        t.append(x)
        x += 0.1 + rnd.uniform(-0.02, 0.02)
    series = unwrap_counter("xe card0 card", t, _counter(150.0, t))
    figs = measure_windows([Window("cold 1", "cold", 0, 1.234, 3.734, 100),
                            Window("warm 1", "warm", 1, 5.05, 5.55, 50)], [series], None)
    for f, dur in zip(figs, (2.5, 0.5)):
        assert abs(f.energy_j - 150 * dur) <= f.energy_error_j + 1e-6
        assert f.energy_error_j < 150 * 0.25  # at most the bracketing samples at each edge
        assert f.mean_power_w == pytest.approx(150, rel=0.01)
    assert figs[0].j_per_token == pytest.approx(150 * 2.5 / 100, rel=0.01)
    total = summarize(figs)
    assert total.j_per_token == pytest.approx(150 * 3.0 / 150, rel=0.01) and total.output_tokens == 150


@pytest.mark.parametrize("uncertainty_s, measured", [(0.0, False), (0.04, True)])
def test_a_window_past_the_readings_by_less_than_the_clock_uncertainty_is_measured_with_it(uncertainty_s, measured):
    """A window is placed on the host's clock by an offset known to ± its uncertainty: the first
    request's start may map up to that much before the first reading (the bug: that window had no
    energy). Within it, the ends are taken at the readings and the error bound holds the true
    energy; beyond it, the window stays unmeasured and says why."""
    t = [1.0 + i * 0.1 for i in range(30)]  # readings 1.0 .. 3.9
    series = unwrap_counter("xe card0 card", t, _counter(150.0, t))
    windows = [Window("cold 1", "cold", 0, 0.97, 1.5, 10), Window("warm 1", "warm", 1, 3.5, 3.93, 10)]
    first, last = measure_windows(windows, [series], None, clock_uncertainty_s=uncertainty_s)
    for f, (a, b) in zip((first, last), ((0.97, 1.5), (3.5, 3.93))):
        if measured:
            assert abs(f.energy_j - 150 * (b - a)) <= f.energy_error_j, f
        else:
            assert f.energy_j is None and f.problems == ["the window is not inside the telemetry readings"]
    (far,) = measure_windows([Window("w", "warm", 0, 0.9, 1.5, 10)], [series], None, clock_uncertainty_s=0.04)
    assert far.energy_j is None


def test_wrap_around_known_range_and_inferred_32_bit():
    t = [i * 0.1 for i in range(100)]
    rapl = unwrap_counter("rapl package-0", t,
                          _counter(80.0, t, start_uj=262_143_328_850 - 300_000_000, modulus=262_143_328_850),
                          range_uj=262_143_328_850)
    assert rapl.wraps == 1 and rapl.joules[-1] == pytest.approx(80 * t[-1], abs=1e-3)
    xe = unwrap_counter("xe card1 card", t, _counter(200.0, t, start_uj=2 ** 32 - 500_000_000, modulus=2 ** 32))
    assert xe.wraps == 1 and xe.resets == 0 and xe.joules[-1] == pytest.approx(200 * t[-1], abs=1e-3)


def test_a_reset_loses_its_interval_and_a_window_across_it_has_no_energy():
    t = [i * 0.1 for i in range(50)]
    raw = _counter(100.0, t, start_uj=10 ** 12)
    raw[25:] = [v - 10 ** 12 for v in raw[25:]]  # driver reload: counter back near 0
    s = unwrap_counter("xe card0 card", t, raw)
    assert s.resets == 1 and s.wraps == 0
    before, across = measure_windows([Window("a", "cold", 0, 0.5, 2.0, 10), Window("b", "cold", 1, 2.0, 3.0, 10)],
                                     [s], None)
    assert before.energy_j == pytest.approx(150.0, abs=1e-3)
    assert across.energy_j is None and "reset" in across.problems[0]
    assert MAX_PLAUSIBLE_W < 1e12 / 1e6 / 0.1  # the reset's implied power is what gave it away


def test_unreadable_readings_are_bridged_and_counted():
    t = [i * 0.1 for i in range(30)]
    raw = _counter(50.0, t)
    raw[10] = raw[11] = None
    s = unwrap_counter("xe card0 card", t, raw)
    assert s.gaps == 2
    (f,) = measure_windows([Window("w", "warm", 0, 0.5, 2.5, 10)], [s], None)
    assert abs(f.energy_j - 100.0) <= f.energy_error_j + 1e-6


def test_throttle_time_reasons_and_clock():
    t = [i * 0.1 for i in range(21)]
    sig = Signals(t=t, freq=[2400.0 if i < 10 else 1800.0 for i in range(21)],
                  throttle=[i >= 10 for i in range(21)], reasons={"pl1": [i >= 10 for i in range(21)]})
    (f,) = measure_windows([Window("w", "warm", 0, 0.5, 1.5, 10)], [], sig)
    assert f.throttled_s == pytest.approx(0.5) and f.throttle_reasons_s == {"pl1": pytest.approx(0.5)}
    assert f.freq_mhz_mean == pytest.approx(2100.0) and (f.freq_mhz_min, f.freq_mhz_max) == (1800.0, 2400.0)
    assert f.energy_j is None


def test_nvidia_power_is_integrated():
    t = [i * 0.1 for i in range(40)]
    s = series_from_power("nvidia power.draw", t, [300.0] * 40)
    (f,) = measure_windows([Window("w", "warm", 0, 1.0, 3.0, 20)], [s], None)
    assert f.energy_j == pytest.approx(600.0) and f.j_per_token == pytest.approx(30.0)


def test_no_counter_says_so_and_missing_windows_stay_unmeasured():
    raw = RawTelemetry(columns=[], problems=["xe card0: no readable energy counter"])
    rec = telemetry_record(raw, [Window("w", "warm", 0, 1.0, 2.0, 10)])
    assert rec.energy_source is None and rec.windows[0].energy_j is None
    assert any("no energy counter could be read" in p for p in rec.problems)


# ------------------------------------------------------------------------------------ parsers


def test_start_and_sample_parsers():
    out = ("clock\t1700000000.123\ncol\tenergy_uj\txe card1 card\t/s/hwmon4/energy1_input\t\n"
           "col\tenergy_uj\trapl package-0\t/s/intel-rapl:0/energy_uj\t262143328850\n"
           "problem\t/s/x cannot be read by sd\nsampler\tbash\nfile\t/w/.servedeck/telemetry/ab.tsv\n")
    clock, cols, problems, other = parse_start(out)
    assert clock == 1700000000.123 and cols[1].range_uj == 262143328850 and cols[0].range_uj is None
    assert problems == ["/s/x cannot be read by sd"] and other["sampler"] == "bash"
    with pytest.raises(ServedeckError, match="unexpected line"):
        parse_start("Welcome to the host!\n")
    t, values, dropped = parse_samples("1700000000,5\t100\t7\n1700000000.6\t\t8\n1700000001.1\t300\n", cols)
    assert t == [1700000000.5, 1700000000.6] and values == [[100, None], [7, 8]] and dropped == 1


def test_nvidia_smi_lines():
    out, errors = parse_nvidia("2026/10/17 01:50:12.345, 231.52, 2520, 0x0000000000000004\n"
                               "2026/10/17 01:50:12.445, [N/A], 2520, 0x0000000000000001\n"
                               "No devices were found\n")
    assert out[0][1:] == (231.52, 2520.0, 4) and out[1][1] is None and errors == ["No devices were found"]
    assert out[1][0] - out[0][0] == pytest.approx(0.1)


def test_telemetry_record_uses_the_xe_card_and_the_throttle_reasons():
    cols = [Column("energy_uj", "xe card1 card", "/e"), Column("freq_mhz", "xe card1 act_freq", "/f"),
            Column("throttle", "xe card1 status", "/s"), Column("reason", "pl1", "/r")]
    t = [100 + i * 0.1 for i in range(50)]
    raw = RawTelemetry(columns=cols, t=t, values=[_counter(120.0, [x - 100 for x in t]), [2000] * 50,
                                                  [1] * 50, [1] * 50])
    rec = telemetry_record(raw, [Window("warm 1", "warm", 1, 101.0, 103.0, 40)])
    w = rec.windows[0]
    assert rec.energy_source == "xe card" and w.energy_j == pytest.approx(240, abs=2)
    assert w.throttled_s == pytest.approx(2.0) and w.throttle_reasons_s["pl1"] == pytest.approx(2.0)
    assert rec.phases["warm"].throttled_fraction == pytest.approx(1.0)
    assert rec.per_request("j_per_token") == {1: pytest.approx(6.0, rel=0.01)}


def test_load_levels_are_windows_of_their_own_on_the_hosts_clock():
    """Each load level is one window (phase ``load``) from its first send for its duration, with
    its successful output tokens; records of the warm-up (level -1) and a level without records
    make none. Two levels at 100 W then 200 W: J/token per level, and show's words per level."""
    from types import SimpleNamespace as NS

    from servedeck.bench.limits import format_telemetry, level_windows
    from servedeck.runs.records import LoadLevel
    levels = [NS(index=0, level=LoadLevel(kind="concurrency", value=1), duration_s=2.0, output_tokens=100),
              NS(index=1, level=LoadLevel(kind="concurrency", value=4), duration_s=1.0, output_tokens=400),
              NS(index=2, level=LoadLevel(kind="concurrency", value=8), duration_s=1.0, output_tokens=0)]
    records = [NS(level=-1, sent_unix_s=10.0), NS(level=0, sent_unix_s=11.5), NS(level=0, sent_unix_s=11.0),
               NS(level=1, sent_unix_s=14.0), NS(level=1, sent_unix_s=14.2)]
    wins = level_windows(levels, records, offset_s=100.0)
    assert [(w.label, w.phase, w.index, w.t0, w.t1, w.output_tokens) for w in wins] == [
        ("level 1 (c=1)", "load", 0, 111.0, 113.0, 100), ("level 2 (c=4)", "load", 1, 114.0, 115.0, 400)]
    t = [110 + i * 0.05 for i in range(120)]
    power = [100.0 if x < 113.5 else 200.0 for x in t]
    energy, e = [], 0.0
    for i, x in enumerate(t):
        e += power[i] * (x - t[i - 1]) * 1e6 if i else 0.0
        energy.append(int(e))
    raw = RawTelemetry(columns=[Column("energy_uj", "xe card1 card", "/e")], t=t, values=[energy])
    rec = telemetry_record(raw, wins)
    assert rec.windows[0].j_per_token == pytest.approx(100 * 2.0 / 100, rel=0.03)
    assert rec.windows[1].j_per_token == pytest.approx(200 * 1.0 / 400, rel=0.03)
    assert rec.phases["load"].windows == 2 and rec.phases["load"].output_tokens == 500
    lines = format_telemetry(rec)
    assert lines[1].startswith("  level 1 (c=1): 2") and "J/token" in lines[1] and "100.0 W mean" in lines[1]
    assert lines[2].startswith("  level 2 (c=4): 0.5") and "(400 output tokens)" in lines[2]


# ------------------------------------------------------------------------------------ A/B


def _limited_copy(tmp_path, src: Path, name: str, power_w: float) -> Path:
    """A copy of a recorded CPU run with a roofline (measured 9 GB/s) and a telemetry record
    whose windows drew ``power_w`` for each request's e2e time."""
    import shutil

    from servedeck.runs import store
    from servedeck.runs.store import open_run
    dst = tmp_path / name
    shutil.copytree(src, dst)
    run = open_run(dst)
    samples = [s.model_dump(mode="json") for s in store.read(dst, store.BENCH_SAMPLES)]
    cost = model_cost(TINY_CONFIG, startup={}, weights_file_bytes=4_720_000, weights_files_source="files")
    ceil = resolve_ceilings(None, host="local", device="cpu", measured={"memory_bandwidth_gb_s": 9.0})
    run.write(store.ROOFLINE, roofline(samples, cost, ceil))
    wins, x = [], 1000.0
    for i, s in enumerate(samples):
        wins.append(Window(f"{s['phase']} {s['rep'] + 1}", s["phase"], i, x, x + s["e2e_s"], s["output_tokens"]))
        x += s["e2e_s"] + 0.2
    times = [1000.0 + k * 0.05 for k in range(int((x - 1000) / 0.05) + 2)]
    raw = RawTelemetry(columns=[Column("energy_uj", "xe card1 card", "/e")], t=times,
                       values=[_counter(power_w, [tt - 1000 for tt in times])])
    run.write(store.TELEMETRY, telemetry_record(raw, wins))
    return dst


def test_ab_judges_roofline_and_energy_and_reports_them(tmp_path):
    from servedeck.ab.chart import chart_png
    from servedeck.ab.compare import compare_arms
    from servedeck.ab.report import render_report
    from servedeck.ab.comparison import compare_metrics
    a = _limited_copy(tmp_path, CPU_RUN, "0001-cpu-4096-local", 100.0)
    b = _limited_copy(tmp_path, CPU_RUN.parent / "0002-cpu-8192-local", "0002-cpu-8192-local", 60.0)
    c = compare_metrics(a, b)
    share, energy = c.metric("decode_roofline_pct", "warm"), c.metric("energy_j_per_token", "warm")
    assert share.judged and energy.judged and len(energy.samples_a) == 3
    assert energy.lower_is_better and share.lower_is_better is False
    assert 0 < share.a < 100 and energy.b < energy.a  # 60 W over similar request times
    text = render_report(compare_arms(a, b), c, a, b, hypothesis=None, verdict=None, chart_path=None)
    assert "### Physical limits" in text and "| memory bandwidth (GB/s) | 9.0 | 9.0 |" in text
    assert "| warm energy per output token (J) |" in text and "measured on local" in text
    assert "| warm | energy_j_per_token |" in text and "| warm | decode_roofline_pct |" in text
    assert chart_png(c)[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_limits_keeps_the_report_as_it_was():
    from servedeck.ab.compare import compare_arms
    from servedeck.ab.report import render_report
    from servedeck.ab.comparison import compare_metrics
    b = CPU_RUN.parent / "0002-cpu-8192-local"
    c = compare_metrics(CPU_RUN, b)
    assert c.metric("energy_j_per_token", "warm") is None
    assert "Physical limits" not in render_report(compare_arms(CPU_RUN, b), c, CPU_RUN, b, hypothesis=None,
                                                  verdict=None, chart_path=None)


# ------------------------------------------------------------------------------------ power caps


def test_knee_is_the_lowest_cap_within_the_margin_of_the_best_decode():
    from servedeck.ab.power_caps import CapRow, caps_markdown, knee
    rows = [CapRow(160, ["r1"], [40.0], 40.0, 2.1, 150.0, 0.9), CapRow(200, ["r2"], [55.5], 55.5, 2.4, 190.0, 0.5),
            CapRow(230, ["r3"], [57.0], 57.0, 2.9, 225.0, 0.1), CapRow(275, ["r4"], [57.2], 57.2, 3.5, 260.0, 0.0)]
    k, text = knee(rows)
    assert k.cap_w == 200 and "knee at 200 W" in text and "at 160 W decode falls to 40.0 tok/s (-30.1%)" in text
    assert "Lowest energy per token: 2.1 J at 160 W" in text
    assert knee(rows, margin=0.01)[0].cap_w == 230
    assert "no lower cap was tested" in knee(rows[3:])[1] and knee([CapRow(230)])[0] is None
    table = caps_markdown(rows)
    assert table[2] == "| 160 | r1 | 40.0 (1) | 2.1 | 150 | 90% |" and table[-1].startswith("knee at 200 W")


def test_a_series_that_sets_a_cap_is_recognised():
    from servedeck.deploy.power_series import varies_power_cap
    from servedeck.model.profile import ProfileStore
    store_ = ProfileStore(ROOT / "profiles")
    base = store_.load("base").profile
    assert not varies_power_cap([base])
    capped = base.model_copy(update={"host": base.host.model_copy(update={"power_cap_w": 230})})
    assert varies_power_cap([base, capped])


def test_show_prints_the_roofline_and_the_energy_in_words(tmp_path):
    from servedeck.cli import show_lines
    run = _limited_copy(tmp_path, CPU_RUN, "0001-cpu-4096-local", 100.0)
    lines = show_lines(run)
    roof = lines.index(next(ln for ln in lines if ln.startswith("roofline: CPU build")))
    assert "9.0 GB/s (measured on local" in lines[roof]
    assert any(ln.startswith("  warm decode") and "% of the" in ln for ln in lines[roof:])
    energy = next(ln for ln in lines if ln.startswith("energy: xe card"))
    assert "sampled every" not in energy  # a record without raw samples says nothing of a period
    assert any(ln.startswith("  warm: ") and "J/token" in ln and "100.0 W mean" in ln for ln in lines)


def test_cap_rows_pool_each_caps_runs_from_their_samples_and_telemetry(tmp_path):
    from servedeck.ab.power_caps import cap_rows, caps_markdown
    a = _limited_copy(tmp_path, CPU_RUN, "0001-cpu-4096-local", 100.0)
    b = _limited_copy(tmp_path, CPU_RUN.parent / "0002-cpu-8192-local", "0002-cpu-8192-local", 60.0)
    rows = cap_rows(tmp_path, {275.0: [a.name], 160.0: [b.name, b.name]})
    assert [r.cap_w for r in rows] == [160.0, 275.0] and rows[0].runs == [b.name]  # a run counts once
    assert rows[1].mean_power_w == pytest.approx(100.0, rel=0.01)
    assert rows[0].mean_power_w == pytest.approx(60, rel=0.01)
    assert len(rows[1].decode_samples) == 3 and rows[0].j_per_token < rows[1].j_per_token
    assert caps_markdown(rows)[-1].startswith("knee at")


def test_the_recorded_b70_run_against_its_card_with_the_images_int8_prefill(tmp_path):
    """The hand-made record of the seed's run #2: the card is the B70 (the only xpu card with the
    startup log's 31.89 GiB), the weights the log's 17.34 GiB, and the prefill ceiling the INT8
    rate, because the image's model.yaml sets EXL3_INT8_PREFILL=1 (read from the deployed compose
    file through the catalog)."""
    import shutil

    from servedeck.bench.limits import record_roofline
    from servedeck.model.catalog import Catalog
    from servedeck.runs.store import open_run
    src = ROOT / "tests" / "fixtures" / "runs" / "0002-base-b70"
    shutil.copytree(src, tmp_path / src.name)
    run = open_run(tmp_path / src.name)
    roof = record_roofline(run, None, None, catalog=Catalog(ROOT / "deploy" / "images.yaml"))
    c = roof.ceilings
    assert (c.card, c.memory_bandwidth_gb_s, c.matrix_precision, c.matrix_tflops) == \
        ("arc-pro-b70", 608.0, "int8", 367.0)
    assert roof.model.weights_bytes == 17.34 * GIB and "Model loading took 17.34 GiB" in roof.model.weights_source
    warm = roof.phases["warm"]
    assert 0 < warm.decode_share < 1 and warm.accept_len > 1
    assert any("config.json is not read" in n or "no config.json" in n for n in roof.notes + roof.model.notes)
    from servedeck.bench.limits import read_roofline
    assert read_roofline(tmp_path / src.name) == roof  # as written: the store's model, read back
