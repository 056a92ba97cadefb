"""KV-capacity prediction (servedeck.vllm.kv) against real logs and the user's runs #2/#3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from servedeck.compose.render import render_profile
from servedeck.model.catalog import Catalog
from servedeck.model.profile import ProfileStore
from servedeck.runs.kv_history import kv_history, read_kv, record_kv, run_identity
from servedeck.runs.store import create_run
from servedeck.vllm.kv import (GIB, CalibrationPoint, KvSettings, calibration_from_startup,
                               judge_kv, model_shape_from_config, predict_kv)
from servedeck.vllm.startup_log import parse_startup_log_file

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TINY = json.loads((FIX / "models" / "qwen3-tiny" / "config.json").read_text())

# Tolerance stated for the seed check: with ONE calibration run the point prediction must land
# within 2 % of what run #3 logged, and run #3's figures must lie inside the stated interval.
SEED_TOLERANCE = 0.02


def _cal(run: str, root: Path = FIX / "runs") -> CalibrationPoint:
    d = root / run
    return calibration_from_startup(run, json.loads((d / "startup.json").read_text()),
                                    json.loads((d / "effective.json").read_text()))


def _image_kv_space() -> int:
    """VLLM_CPU_KVCACHE_SPACE of the CPU image's model.yaml (what the demo logs ran with)."""
    doc = YAML(typ="safe").load((ROOT / "deploy/images/cpu-vllm/models/qwen3-tiny/model.yaml").read_text())
    return int(doc["env"]["VLLM_CPU_KVCACHE_SPACE"])


#: fixture log -> the VLLM_CPU_KVCACHE_SPACE it ran with (tests/fixtures/vllm-0.32-cpu/README.md)
CPU_LOGS = {"serve-4096.log": _image_kv_space(), "serve-8192.log": _image_kv_space(),
            "serve-kv1.log": 1, "serve-kv2.log": 2}


def test_shape_from_config_names_each_source():
    shape = model_shape_from_config(TINY, source="qwen3-tiny/config.json")
    assert (shape.attention_layers.value, shape.num_kv_heads.value, shape.head_size.value) == (2, 2, 64)
    assert "layer_types (2 of 2 layers hold KV)" in shape.attention_layers.source
    assert shape.dtype.value == "bfloat16"
    text = "\n".join(shape.sources())
    assert "qwen3-tiny/config.json: num_key_value_heads" in text and "head_dim" in text
    assert len(set(CPU_LOGS.values())) == 2  # two KV-space settings are covered by real logs


def test_shape_counts_only_attention_layers_of_a_hybrid_model():
    cfg = {"text_config": {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                           "hidden_size": 1024, "torch_dtype": "bfloat16",
                           "layer_types": ["linear_attention"] * 3 + ["full_attention"]}}
    shape = model_shape_from_config(cfg)
    assert shape.attention_layers.value == 1 and shape.head_size.value == 128
    with pytest.raises(ValueError, match="num_hidden_layers"):
        model_shape_from_config({"num_attention_heads": 4})


@pytest.mark.parametrize("name,space", sorted(CPU_LOGS.items()))
def test_cpu_prediction_matches_the_real_vllm_log(name, space):
    facts = parse_startup_log_file(FIX / "vllm-0.32-cpu" / name)
    assert facts.cpu_kv_cache_gib == space  # the log states the KV space it ran with
    s = KvSettings(device="cpu", max_model_len=facts.max_model_len or facts.max_concurrency_tokens_per_request,
                   cpu_kv_cache_space_gib=space)
    pred = predict_kv(s, shape=model_shape_from_config(TINY))
    assert pred.method == "cpu-kv-space" and pred.bytes_per_token == 1024
    assert pred.pool_tokens == facts.kv_cache_tokens
    assert round(pred.max_concurrency, 2) == facts.max_concurrency


@pytest.mark.parametrize("space", [1, 2, 3])
def test_cpu_pool_is_linear_in_kv_space_and_block_rounded(space):
    shape = model_shape_from_config(TINY)
    pred = predict_kv(KvSettings(device="cpu", max_model_len=2000, cpu_kv_cache_space_gib=space), shape=shape)
    blocks = space * GIB // (1024 * 128)
    # 2000 tokens need cdiv(2000, 128) = 16 blocks; vLLM logs int(blocks / 16 * 2000)
    assert pred.pool_tokens == int(blocks / 16 * 2000)
    assert pred.max_concurrency == blocks / 16


def test_cpu_space_from_history_without_shape():
    """Without config.json the CPU pool is scaled from a recorded CPU run's effective bytes/token."""
    hist = [_cal("0001-cpu-4096-local", FIX / "runs-cpu")]
    pred = predict_kv(KvSettings(device="cpu", max_model_len=2048, cpu_kv_cache_space_gib=2), history=hist)
    assert pred.pool_tokens_low <= 2 * 1048576 <= pred.pool_tokens_high
    assert pred.method == "calibration"


def test_seed_run3_predicted_from_run2_alone():
    """User's report: run #2 (4096) -> run #3 (8192) logged 236,470 tokens and 1.80x."""
    hist = kv_history(FIX / "runs", host="b70", image_digest=run_identity(FIX / "runs/0002-base-b70")[1],
                      up_to=FIX / "runs/0002-base-b70")
    assert [p.run_id for p in hist] == ["0002-base-b70"]
    s = KvSettings(device="xpu", max_model_len=131072, max_num_batched_tokens=8192,
                   gpu_memory_utilization=0.94)
    pred = predict_kv(s, history=hist)
    assert abs(pred.pool_tokens / 236470 - 1) < SEED_TOLERANCE
    assert abs(pred.max_concurrency / 1.80 - 1) < SEED_TOLERANCE
    assert pred.pool_tokens_low <= 236470 <= pred.pool_tokens_high
    assert pred.max_concurrency_low <= 1.80 <= pred.max_concurrency_high
    assert "peak activation 1.00 GiB scaled by 8192/4096" in pred.model


def test_two_runs_fit_a_line_and_gmu_moves_memory_exactly():
    hist = [_cal("0002-base-b70"), _cal("0003-batch-8192-b70")]
    # same max_num_batched_tokens as run #2, gmu 0.94 -> 0.90: 31.89 GiB x -0.04 less memory
    pred = predict_kv(KvSettings(device="xpu", max_model_len=131072, max_num_batched_tokens=4096,
                                 gpu_memory_utilization=0.90), history=hist)
    assert pred.available_kv_gib == pytest.approx(10.22 - 31.89 * 0.04, abs=1e-6)
    # extrapolate to 16384 along the line through (4096, 2.42) and (8192, 3.54)
    far = predict_kv(KvSettings(device="xpu", max_model_len=131072, max_num_batched_tokens=16384,
                                gpu_memory_utilization=0.94), history=hist)
    assert far.available_kv_gib == pytest.approx(9.10 - 2 * (3.54 - 2.42), abs=1e-6)
    assert "fitted" in far.model
    assert far.pool_tokens_low < far.pool_tokens < far.pool_tokens_high


def test_refusal_is_an_error_with_the_prediction_in_the_message():
    hist = [_cal("0002-base-b70")]
    s = KvSettings(device="xpu", max_model_len=524288, max_num_batched_tokens=4096, gpu_memory_utilization=0.94)
    pred, findings = judge_kv(s, None, hist)
    err = [f for f in findings if f.rule == "kv/refuses-to-start"]
    assert pred.fits is False and len(err) == 1 and err[0].severity.value == "error"
    assert "524,288" in err[0].message and "264,8" in err[0].message
    # CPU: VLLM_CPU_KVCACHE_SPACE=0 leaves no memory ("No available memory for the cache blocks")
    _, cpu = judge_kv(KvSettings(device="cpu", max_model_len=2048, cpu_kv_cache_space_gib=0),
                      model_shape_from_config(TINY), [])
    assert any(f.rule == "kv/refuses-to-start" for f in cpu)


def test_warnings_below_one_and_change_threshold():
    hist = [_cal("0002-base-b70")]
    # 239,200 tokens/request: above the point (238,931) but inside the interval's top end
    straddle = KvSettings(device="xpu", max_model_len=239200, max_num_batched_tokens=8192,
                          gpu_memory_utilization=0.94)
    pred, findings = judge_kv(straddle, None, hist)
    rules = {f.rule for f in findings}
    assert pred.fits is None
    assert {"kv/concurrency-below-one", "kv/may-refuse"} <= rules and "kv/refuses-to-start" not in rules
    s = KvSettings(device="xpu", max_model_len=131072, max_num_batched_tokens=8192, gpu_memory_utilization=0.94)
    assert "kv/concurrency-change" in {f.rule for f in judge_kv(s, None, hist, change_threshold_pct=5)[1]}
    assert "kv/concurrency-change" not in {f.rule for f in judge_kv(s, None, hist, change_threshold_pct=15)[1]}


def _settings(name: str, catalog: Catalog | None = None) -> KvSettings:
    """The KV settings of profile ``name``'s rendered service (its effective settings and environment)."""
    catalog = catalog or Catalog(ROOT / "deploy" / "images.yaml")
    rendered = render_profile(ProfileStore(ROOT / "profiles").load(name), catalog, ROOT / "templates")
    return rendered.service.kv_settings()


def test_kv_prediction_of_a_profile_on_the_catalog_image():
    s = _settings("batch-8192")
    assert (s.device, s.max_num_batched_tokens, s.max_model_len, s.gpu_memory_utilization) == (
        "xpu", 8192, 131072, 0.94)
    findings = judge_kv(s, None, [_cal("0002-base-b70")])[1]
    assert [f.rule for f in findings] == ["kv/prediction"]
    assert "238," in findings[0].message


def test_no_history_and_no_shape_is_said_not_guessed(tmp_path):
    findings = judge_kv(_settings("base", Catalog(tmp_path / "images.yaml")), None, [])[1]
    assert [f.rule for f in findings] == ["kv/no-prediction"]


def test_run_record_keeps_prediction_beside_measurement(tmp_path):
    run = create_run(tmp_path, "batch-8192", "b70")
    pred = predict_kv(KvSettings(device="xpu", max_model_len=131072, max_num_batched_tokens=8192,
                                 gpu_memory_utilization=0.94), history=[_cal("0002-base-b70")])
    startup = json.loads((FIX / "runs/0003-batch-8192-b70/startup.json").read_text())
    record_kv(run, pred.to_dict(), startup)
    doc = read_kv(run.path)
    assert doc.measured.kv_cache_tokens == 236470
    assert doc.prediction["pool_tokens"] == pred.pool_tokens
    assert doc.within_interval is True and abs(doc.error_pct.kv_cache_tokens) < 2


def test_kv_line_for_ab(tmp_path):
    from servedeck.runs.kv_history import format_kv
    run = create_run(tmp_path, "batch-8192", "b70")
    pred = predict_kv(KvSettings(device="xpu", max_model_len=131072, max_num_batched_tokens=8192,
                                 gpu_memory_utilization=0.94), history=[_cal("0002-base-b70")])
    record_kv(run, pred.to_dict(), json.loads((FIX / "runs/0003-batch-8192-b70/startup.json").read_text()))
    line = format_kv(read_kv(run.path))
    assert line == "predicted 238,931 tokens / 1.82x, logged 236,470 / 1.80x (+1.0 %, inside the interval)"
    assert format_kv(None) is None


def test_033_log_with_consumed_memory_calibrates():
    """vLLM 0.33 logs "consumed memory (weights + non-torch)" instead of non-torch alone."""
    facts = parse_startup_log_file(FIX / "logs" / "vllm-0.33-xpu.log").to_dict()
    point = calibration_from_startup("033", facts)
    assert point.overhead_gib == pytest.approx(
        facts["peak_activation_gib"] + facts["consumed_memory_gib"] + (facts["cudagraph_memory_gib"] or 0))
    same = KvSettings(device="xpu", max_model_len=point.max_model_len,
                      max_num_batched_tokens=point.max_num_batched_tokens,
                      gpu_memory_utilization=point.gpu_memory_utilization)
    pred = predict_kv(same, history=[point])
    assert pred.pool_tokens_low <= facts["kv_cache_tokens"] <= pred.pool_tokens_high


def test_the_calibration_is_read_from_its_cache_until_a_run_changes(tmp_path, monkeypatch):
    """A deploy reads the KV calibration before it changes anything: each run's point is kept in
    ``runs/.kv-index.json`` keyed by the run directory's time, so a run's files are read once;
    a changed run is read again, and a lost or broken cache loses nothing."""
    import os
    import shutil
    from servedeck.runs import history, kv_history as kvh
    monkeypatch.setattr(history, "HOT_S", 0.0)  # cache every row at once
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("0002-base-b70", "0003-batch-8192-b70", "0004-multi-b70"):
        shutil.copytree(FIX / "runs" / name, runs / name)
    digest = run_identity(runs / "0002-base-b70")[1]
    expected = kv_history(FIX / "runs", host="b70", image_digest=digest)
    reads: list[str] = []
    real = kvh._calibration_row
    monkeypatch.setattr(kvh, "_calibration_row", lambda d: reads.append(d.name) or real(d))
    first = kv_history(runs, host="b70", image_digest=digest)
    assert first == expected and [p.run_id for p in first] == ["0002-base-b70", "0003-batch-8192-b70",
                                                                "0004-multi-b70"]
    assert sorted(reads) == ["0002-base-b70", "0003-batch-8192-b70", "0004-multi-b70"]
    reads.clear()
    assert kv_history(runs, host="b70", image_digest=digest) == expected and reads == []  # from the cache
    assert kv_history(runs, host="other", image_digest=digest) == [] and reads == []
    assert [p.run_id for p in kv_history(runs, host="b70", image_digest=digest, up_to=runs / "0002-base-b70")] \
        == ["0002-base-b70"]
    # a cached row is used while its directory keeps its time ...
    index = json.loads((runs / ".kv-index.json").read_text())
    index["runs"]["0003-batch-8192-b70"][1][1] = "sha256:" + "f" * 64
    (runs / ".kv-index.json").write_text(json.dumps(index))
    assert [p.run_id for p in kv_history(runs, host="b70", image_digest=digest)] == ["0002-base-b70",
                                                                                   "0004-multi-b70"]
    # ... and read again once a write moved it
    os.utime(runs / "0003-batch-8192-b70", ns=(1, index["runs"]["0003-batch-8192-b70"][0] + 1))
    assert kv_history(runs, host="b70", image_digest=digest) == expected and reads == ["0003-batch-8192-b70"]
    (runs / ".kv-index.json").write_text("{not json")
    assert kv_history(runs, host="b70", image_digest=digest) == expected
    # rows of another CalibrationPoint (a field added, removed or moved) are not taken for this one's
    index = json.loads((runs / ".kv-index.json").read_text())
    from dataclasses import fields
    assert index["format"] == kvh.KV_INDEX_FORMAT  # names the point's fields in their order
    assert index["format"].endswith(":" + ",".join(f.name for f in fields(CalibrationPoint)))
    for _, row in index["runs"].values():
        row[2] = row[2][1:] + [0.5] if row[2] else row[2]
    (runs / ".kv-index.json").write_text(json.dumps({**index, "format": "calibration:run_id,other"}))
    assert kv_history(runs, host="b70", image_digest=digest) == expected
    assert kv_history(tmp_path / "none", host="b70", image_digest=digest) == []
