"""Run records (layout, sequence, redaction, verbatim compose), external result import,
and effective-args verification against real startup logs."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

from servedeck.model.catalog import Catalog
from servedeck.errors import ServedeckError
from servedeck.bench.record import import_external
from servedeck.model.profile import ProfileStore
from servedeck.runs.store import create_run, open_run, redact
from servedeck.vllm.startup_log import parse_startup_log
from servedeck.vllm.verify import verify_args

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu"


@pytest.mark.parametrize("text,secret", [
    ("--api-key sk-abcdefghijklmnopqrstuvwx", "sk-abcdefghijklmnopqrstuvwx"),
    ("HF_TOKEN=hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ", "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    ("non-default args: {'api_key': 'letmein', 'port': 9932}", "letmein"),
    ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
    ("      HF_TOKEN: hunter2", "hunter2"),
])
def test_redact_removes_secret_values_and_keeps_keys(text, secret):
    out = redact(text)
    assert secret not in out and "***" in out


def test_redact_leaves_ordinary_text_alone():
    text = (LOGS / "serve-4096.log").read_text()
    assert redact(text) == text


def test_runs_get_increasing_sequences_and_unique_dirs(tmp_path):
    made = []
    threads = [threading.Thread(target=lambda: made.append(create_run(tmp_path, "base", "b70")))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(r.path.name for r in made)
    assert names == [f"{i:04d}-base-b70" for i in range(1, 7)]
    meta = json.loads((tmp_path / "0001-base-b70" / "run.json").read_text())
    assert meta["sequence"] == 1 and meta["outcome"] == "started" and meta["host"] == "b70"


def test_compose_is_kept_verbatim_with_its_sha(tmp_path):
    run = create_run(tmp_path, "base", "b70")
    text = (ROOT / "tests" / "fixtures" / "compose" / "seed-run3.yml").read_text()
    digest = run.save_compose(text)
    assert (run.path / "docker-compose.yml").read_bytes() == text.encode()
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    assert open_run(run.path).meta["compose_sha256"] == digest
    assert open_run(run.path).meta["compose_redacted"] is False


def test_compose_with_a_secret_is_redacted_and_says_so(tmp_path):
    run = create_run(tmp_path, "base", "b70")
    text = "services:\n  x:\n    environment:\n      HF_TOKEN: hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"
    digest = run.save_compose(text)
    stored = (run.path / "docker-compose.yml").read_text()
    assert "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ" not in stored
    assert open_run(run.path).meta["compose_redacted"] is True
    assert digest == hashlib.sha256(text.encode()).hexdigest()  # the sha of what was deployed


def test_open_run_refuses_a_directory_without_run_json(tmp_path):
    with pytest.raises(ServedeckError, match="not a run directory"):
        open_run(tmp_path)


def test_import_external_vllm_bench_result(tmp_path):
    run = create_run(tmp_path / "runs", "cpu-4096", "local")
    doc = {"completed": 3, "median_ttft_ms": 65.0, "mean_ttft_ms": 70.0, "median_tpot_ms": 1.0,
           "mean_tpot_ms": 1.25, "median_e2el_ms": 400.0, "spec_decode_acceptance_length": 3.5}
    src = tmp_path / "vllm-bench.json"
    src.write_text(json.dumps(doc) + "\n" + json.dumps(dict(doc, median_ttft_ms=30.0)) + "\n")
    mapped = import_external(run.path, src)
    assert mapped["metrics"]["ttft_s"]["median"] == pytest.approx(0.03)
    assert (run.path / "external" / "vllm-bench.json").read_bytes() == src.read_bytes()
    assert json.loads((run.path / "external-vllm-bench.json").read_text())["sha256"] == \
        hashlib.sha256(src.read_bytes()).hexdigest()


def _cpu(name: str):
    p = ProfileStore(ROOT / "profiles").load(name).profile
    return p


def test_args_verification_confirms_the_batch_budget_on_the_real_logs():
    for name, log in (("cpu-4096", "serve-4096.log"), ("cpu-8192", "serve-8192.log")):
        facts = parse_startup_log((LOGS / log).read_text()).to_dict()
        checks = {c.setting: c for c in verify_args(_cpu(name), None, facts["non_default_args"])}
        mnbt = checks["max_num_batched_tokens"]
        assert mnbt.status == "confirmed" and mnbt.source == "profile"
        assert checks["speculative_config"].status == "confirmed"
        assert checks["served_model_name"].status == "confirmed"


def test_args_verification_reports_a_difference():
    facts = parse_startup_log((LOGS / "serve-4096.log").read_text()).to_dict()
    checks = {c.setting: c for c in verify_args(_cpu("cpu-8192"), None, facts["non_default_args"])}
    bad = checks["max_num_batched_tokens"]
    assert bad.status == "differs" and (bad.expected, bad.reported) == (8192, 4096)
    assert bad.render() == "max_num_batched_tokens: differs (expected 8192, got 4096)"


def test_args_verification_without_a_log_line_reports_nothing_confirmed():
    catalog = Catalog(ROOT / "deploy" / "images.yaml")
    p = ProfileStore(ROOT / "profiles").load("speed").profile
    checks = {c.setting: c for c in verify_args(p, catalog.lookup(p.image_ref.digest), None)}
    assert checks["max_num_batched_tokens"].status == "not reported"
    assert checks["kv_cache_dtype"].source == "image"  # model.yaml default, not the profile
    assert checks["gpu_memory_utilization"].source == "profile"


def test_catalog_add_keeps_the_file_as_written(tmp_path):
    from servedeck.model.catalog import ImageFacts
    path = tmp_path / "images.yaml"
    original = (ROOT / "deploy" / "images.yaml").read_text()
    path.write_text(original)
    digest = "sha256:" + "a" * 64
    Catalog(path).add(digest, ImageFacts(repository="127.0.0.1:5000/x", launcher="exl3xpu",
                                         vllm_version="0.32.0", device="cpu", entrypoint=["python3", "x.py"]))
    text = path.read_text()
    assert text.startswith(original)  # comments, order and quoting of the other entries kept
    assert Catalog(path).lookup(digest).vllm_version == "0.32.0"


@pytest.mark.parametrize("name", ["hosts.yaml", "test-hosts.yaml"])
def test_inventories_validate_against_the_schema_and_load(name):
    import jsonschema
    from ruamel.yaml import YAML

    from servedeck.model.inventory import load_inventory
    schema = json.loads((ROOT / "schema" / "hosts.schema.json").read_text())
    data = YAML(typ="safe", pure=True).load((ROOT / "deploy" / name).read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(data)) == []
    inv = load_inventory(ROOT / "deploy" / name)
    assert all(entry.workdir.startswith("/") for entry in inv.hosts.values())


def test_inventory_errors_name_the_field(tmp_path):
    from servedeck.model.inventory import load_inventory
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  b70:\n    ssh: {alias: b70}\n    workdir: relative/dir\n")
    with pytest.raises(ServedeckError, match="must be an absolute path") as exc:
        load_inventory(path)
    assert exc.value.field == "hosts.b70.workdir" and exc.value.file == str(path)
