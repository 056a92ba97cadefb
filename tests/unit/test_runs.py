"""Run records (layout, sequence, redaction, verbatim compose), external result import,
and effective-args verification against real startup logs."""

from __future__ import annotations

import hashlib
import json
import shutil
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
    assert open_run(run.path).meta.compose_sha256 == digest
    assert open_run(run.path).meta.compose_redacted is False


def test_compose_with_a_secret_is_redacted_and_says_so(tmp_path):
    run = create_run(tmp_path, "base", "b70")
    text = "services:\n  x:\n    environment:\n      HF_TOKEN: hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"
    digest = run.save_compose(text)
    stored = (run.path / "docker-compose.yml").read_text()
    assert "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ" not in stored
    assert open_run(run.path).meta.compose_redacted is True
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
    mapped = import_external(run.path, src, "2")  # two results in one --append-result file: named (issue 30)
    assert mapped["metrics"]["ttft_s"]["median"] == pytest.approx(0.03)
    assert (run.path / "external" / "vllm-bench.json").read_bytes() == src.read_bytes()
    assert json.loads((run.path / "external-vllm-bench@2-rate@inf.json").read_text())["sha256"] == \
        hashlib.sha256(src.read_bytes()).hexdigest()


def _effective(name: str, catalog: Catalog | None = None):
    """The effective settings of profile ``name``'s rendered service (no catalog: the image's
    facts are the ones its repository suggests, without a launcher config)."""
    from servedeck.compose.render import render_profile
    catalog = catalog or Catalog(ROOT / "tests" / "fixtures" / "no-catalog.yaml")
    return render_profile(ProfileStore(ROOT / "profiles").load(name), catalog, ROOT / "templates").service.effective


def test_args_verification_confirms_the_batch_budget_on_the_real_logs():
    for name, log in (("cpu-4096", "serve-4096.log"), ("cpu-8192", "serve-8192.log")):
        facts = parse_startup_log((LOGS / log).read_text()).to_dict()
        checks = {c.setting: c for c in verify_args(_effective(name), facts["non_default_args"])}
        mnbt = checks["max_num_batched_tokens"]
        assert mnbt.status == "confirmed" and mnbt.source == "profile"
        assert checks["speculative_config"].status == "confirmed"
        assert checks["served_model_name"].status == "confirmed"


def test_args_verification_reports_a_difference():
    facts = parse_startup_log((LOGS / "serve-4096.log").read_text()).to_dict()
    checks = {c.setting: c for c in verify_args(_effective("cpu-8192"), facts["non_default_args"])}
    bad = checks["max_num_batched_tokens"]
    assert bad.status == "differs" and (bad.expected, bad.reported) == (8192, 4096)
    assert bad.render() == "max_num_batched_tokens: differs (expected 8192, got 4096)"


def test_args_verification_without_a_log_line_reports_nothing_confirmed():
    checks = {c.setting: c for c in verify_args(_effective("speed", Catalog(ROOT / "deploy" / "images.yaml")), None)}
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


# ---------------------------------------------------------------- the run store

FIXTURE_RUNS = [d for root in ("runs", "runs-cpu") for d in sorted((ROOT / "tests" / "fixtures" / root).iterdir())
                if d.is_dir()]


@pytest.mark.parametrize("run_dir", FIXTURE_RUNS, ids=lambda d: d.name)
def test_recorded_run_json_files_are_valid_run_meta(run_dir):
    from servedeck.runs.store import read_meta
    meta = read_meta(run_dir)
    assert meta.run_id == run_dir.name and meta.outcome == "ready"


def test_run_meta_is_typed_and_refuses_unknown_fields(tmp_path):
    with pytest.raises(ServedeckError, match="invalid run metadata") as exc:
        create_run(tmp_path, "base", "b70", colour="blue")
    assert exc.value.field == "colour"
    assert list(tmp_path.iterdir()) == []  # the half-made directory is removed again
    run = create_run(tmp_path, "base", "b70",
                     image={"reference": "r@sha256:" + "a" * 64, "digest": "sha256:" + "a" * 64})
    before = (run.path / "run.json").read_bytes()
    with pytest.raises(ServedeckError) as exc:
        run.save_meta(outcome="finished")
    assert exc.value.field == "outcome"
    assert (run.path / "run.json").read_bytes() == before  # nothing written
    assert open_run(run.path).meta.image.digest == "sha256:" + "a" * 64


def test_finish_records_the_final_state_and_reason(tmp_path):
    run = create_run(tmp_path, "cpu-4096", "local")
    run.finish("failed", "pulling 127.0.0.1:5000/x@sha256:00… failed: manifest unknown", phase="pull")
    meta = json.loads((run.path / "run.json").read_text())
    assert meta["outcome"] == "failed" and meta["failure_phase"] == "pull"
    assert "manifest unknown" in meta["failure"] and meta["ended_at"]
    with pytest.raises(ServedeckError):
        run.finish("started")


def test_every_record_name_is_found_in_the_module_the_package_names():
    """servedeck.runs.records imports a module when one of its names is first asked for: the
    table (MODULES) is each module's __all__, and every name resolves through the package."""
    import importlib

    from servedeck.runs import records, store
    for module, names in records.MODULES.items():
        assert tuple(importlib.import_module(f"servedeck.runs.records.{module}").__all__) == names, module
    assert all(getattr(records, name) is not None for name in records.__all__)
    assert {f.model for f in store.RUN_FILES if f.model} <= set(records.__all__)
    with pytest.raises(AttributeError):
        records.NoSuchRecord  # noqa: B018


def test_docs_run_record_is_generated_from_the_code():
    from servedeck.runs.doc import render
    assert (ROOT / "docs" / "run-record.md").read_text() == render(), \
        "regenerate: python -m servedeck.runs.doc docs/run-record.md"


def test_run_file_names_are_spelled_only_in_the_store():
    import re as _re
    names = ["run.json", "bench.json", "bench.jsonl", "startup.json", "startup.log", "effective.json",
             "argv.json", "facts.json", "workload.json", "profile.resolved.json", "profile.diff.json",
             "args_verification.json", ".index.json"]
    pattern = _re.compile("[\"'](" + "|".join(_re.escape(n) for n in names) + ")[\"']")
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in sorted((ROOT / "servedeck").rglob("*.py"))
                 if p != ROOT / "servedeck" / "runs" / "store.py"
                 for m in pattern.finditer(p.read_text())]
    assert offenders == []


def test_run_file_names_include_kv_json_and_every_constant_is_a_listed_run_file():
    from servedeck.runs import store
    constants = [v for v in vars(store).values() if isinstance(v, store.RunFile)]
    assert set(constants) == set(store.RUN_FILES)  # a RunFile left out of RUN_FILES is not documented
    for f in store.RUN_FILES:
        assert (f.model_class() is None) == (f.form in ("text", "bytes")), f


@pytest.mark.parametrize("run_dir", FIXTURE_RUNS, ids=lambda d: d.name)
def test_every_file_of_the_recorded_runs_reads_as_its_model(run_dir):
    from servedeck.runs import store
    files = store.present_files(run_dir)
    assert {store.RUN_META, store.FACTS, store.STARTUP, store.BENCH_SAMPLES} <= set(files)
    for f in files:
        value = store.read(run_dir, f)
        if f.form == "json":
            assert isinstance(value, f.model_class())
        elif f.form == "jsonl":
            assert value and all(isinstance(v, f.model_class()) for v in value)


def test_a_write_that_does_not_match_its_model_is_refused_and_nothing_is_written(tmp_path):
    from servedeck.runs import store
    run = create_run(tmp_path, "base", "b70")
    with pytest.raises(ServedeckError) as exc:
        run.write(store.FACTS, {"host": {"name": "b70", "kernal": "6.17"}})
    assert exc.value.field == "host.kernal" and "facts.json" in exc.value.message
    assert not (run.path / "facts.json").exists()
    with pytest.raises(ServedeckError, match="save_meta"):
        run.write(store.RUN_META, {})


def test_a_damaged_run_file_is_an_error_naming_the_file_the_line_and_the_field(tmp_path, bench_sample):
    from servedeck.runs import store
    run = create_run(tmp_path, "base", "b70")
    good = json.dumps(store.encode(store.BENCH_SAMPLES, [bench_sample("cold", 0)])[0])
    (run.path / "bench.jsonl").write_text(good + "\n" + good.replace('"rep": 0', '"rep": "first"') + "\n")
    with pytest.raises(ServedeckError) as exc:
        store.read(run.path, store.BENCH_SAMPLES)
    assert exc.value.file.endswith("bench.jsonl") and exc.value.field == "line 2: rep"
    (run.path / "kv.json").write_text("{not json")
    with pytest.raises(ServedeckError, match="invalid JSON kv.json"):
        store.read(run.path, store.KV)
    assert store.read(run.path, store.WORKLOAD) is None and store.read(run.path, store.STARTUP_LOG) is None


def test_the_facts_an_ab_compares_are_the_fields_the_model_marks():
    from servedeck.ab.compare import flatten_facts
    from servedeck.runs import store
    from servedeck.runs.records import compared_paths
    assert compared_paths() == {("host", "name"): "host.name", ("host", "kernel"): "host.kernel",
                                ("host", "docker_version"): "host.docker_version",
                                ("host", "compose_version"): "host.compose_version",
                                ("host", "gpu_power_cap_w"): "host.gpu_power_cap_w",
                                ("image", "digest"): "image", ("image", "vllm_version"): "vllm_version"}
    facts = store.read(ROOT / "tests/fixtures/runs/0003-batch-8192-b70", store.FACTS)
    assert flatten_facts(facts) == {"host.name": "b70", "host.kernel": "6.17.0-5-generic",
                                    "host.docker_version": "28.5.1", "host.compose_version": "2.40.0",
                                    "host.gpu_power_cap_w": 275.0, "image": facts.image.digest,
                                    "vllm_version": "0.26.1.dev0+g568afb3a1.d20260907.xpu"}


def test_a_field_added_to_the_run_record_is_the_model_plus_its_writer_and_show_displays_it(
        tmp_path, monkeypatch):
    """The acceptance of issue 27: a new run.json field and a new run file need their model and
    their writer only; show, show --json and docs/run-record.md follow without more code."""
    from pydantic import Field

    from servedeck.cli import show_lines
    from servedeck.runs import doc, records, store
    from servedeck.runs.history import run_document

    class RunMetaPlus(records.RunMeta):
        tuned_by: str | None = Field(None, description="who tuned this run")

    class ProbeResult(records.Record):
        """``probe.json``: what a probe found."""

        capacity_rps: float = Field(description="requests per second held within the SLO")

    probe = store.RunFile("probe.json", "ProbeResult", "the capacity a probe found")
    monkeypatch.setattr(records, "RunMeta", RunMetaPlus)
    monkeypatch.setattr(records, "ProbeResult", ProbeResult, raising=False)
    monkeypatch.setattr(store, "RUN_FILES", (*store.RUN_FILES, probe))
    monkeypatch.setattr(store, "_adapters", {})

    run = create_run(tmp_path, "base", "b70")
    run.save_meta(tuned_by="ada")                   # the writer of the new field
    run.write(probe, ProbeResult(capacity_rps=3.5))   # the writer of the new file
    lines = show_lines(run.path)
    assert "  tuned_by: ada" in lines
    assert lines[lines.index("probe.json:") + 1] == "  capacity_rps: 3.5"
    document = run_document(run.path)
    assert document["run"]["tuned_by"] == "ada" and document["files"]["probe.json"] == {"capacity_rps": 3.5}
    text = doc.render()
    assert "| `tuned_by` | `str` \\| `null` | who tuned this run |" in text
    assert "## `probe.json` (`ProbeResult`)" in text and "requests per second held within the SLO" in text
    with pytest.raises(ServedeckError):  # still typed: the new file refuses what its model does not hold
        run.write(probe, {"capacity_rps": 3.5, "colour": "blue"})


# ---------------------------------------------------------------- history

def _benched(run, sample, ttft=(0.5, 0.6, 0.55)):
    from servedeck.runs.store import write_bench_files
    samples = [sample("cold", i, ttft_s=t, decode_tok_s=50.0) for i, t in enumerate(ttft)]
    write_bench_files(run.path, {"prompt_tokens": 64}, samples, {"workload": {"prompt_tokens": 64}})
    run.save_meta(benched_at="2026-11-30T00:00:00Z")


def test_latest_means_served_and_benchmarked_and_newest_means_newest(tmp_path, bench_sample):
    from servedeck.runs.history import resolve_run
    a = create_run(tmp_path, "cpu-4096", "local")
    a.finish("ready")
    _benched(a, bench_sample)
    b = create_run(tmp_path, "cpu-4096", "local")
    b.finish("ready")  # served, never benchmarked
    c = create_run(tmp_path, "cpu-4096", "local")
    c.finish("failed", "manifest unknown", phase="pull")
    d = create_run(tmp_path, "cpu-8192", "local")  # another profile, still starting
    assert resolve_run(tmp_path, "latest:cpu-4096") == a.path
    assert resolve_run(tmp_path, "latest") == a.path
    assert resolve_run(tmp_path, "newest:cpu-4096") == c.path
    assert resolve_run(tmp_path, "newest") == d.path
    with pytest.raises(ServedeckError) as exc:
        resolve_run(tmp_path, "latest:cpu-8192")
    msg = str(exc.value)
    assert "served and was benchmarked" in msg and "0004-cpu-8192-local (outcome started)" in msg
    assert "newest:cpu-8192" in msg
    with pytest.raises(ServedeckError,
                       match="no run of profile 'speed' recorded; profiles with runs: cpu-4096, cpu-8192"):
        resolve_run(tmp_path, "latest:speed")


def test_newest_orders_by_sequence_past_four_digits_and_passes_over_what_is_not_a_run(tmp_path):
    from servedeck.runs.history import resolve_run
    for name in ("0009-a-h", "0998-b-h", "10000-c-h", "9999-d-h"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text('{"profile": "%s", "outcome": "ready"}' % name.split("-")[1])
    (tmp_path / "99999-file-h").write_text("a file, not a run directory")
    (tmp_path / "notes-z").mkdir()
    (tmp_path / "zz").mkdir()
    assert resolve_run(tmp_path, "newest").name == "10000-c-h"
    assert resolve_run(tmp_path, "newest:d").name == "9999-d-h"
    assert resolve_run(tmp_path, "newest:a").name == "0009-a-h"


def test_resolve_run_forms_on_the_fixtures():
    from servedeck.runs.history import resolve_run
    runs = ROOT / "tests" / "fixtures" / "runs"
    for ref, expected in [("0003-batch-8192-b70", "0003-batch-8192-b70"), ("3", "0003-batch-8192-b70"),
                          ("0002", "0002-base-b70"), ("latest", "0004-multi-b70"),
                          ("latest:base", "0002-base-b70"), ("latest:batch-8192", "0003-batch-8192-b70"),
                          (str(runs / "0002-base-b70"), "0002-base-b70")]:
        assert resolve_run(runs, ref).name == expected
    for ref, needle in [("7", "no run with sequence 7"), ("0009-x-b70", "unknown run '0009-x-b70'")]:
        with pytest.raises(ServedeckError) as exc:
            resolve_run(runs, ref)
        assert needle in str(exc.value) and "0002-base-b70" in str(exc.value)


def test_resolve_run_missing_dir_and_empty(tmp_path):
    from servedeck.runs.history import resolve_run
    with pytest.raises(ServedeckError, match="does not exist"):
        resolve_run(tmp_path / "nope", "latest")
    with pytest.raises(ServedeckError, match="no run recorded"):
        resolve_run(tmp_path, "latest")


def test_list_runs_headlines_on_the_fixtures(tmp_path):
    from servedeck.runs.history import list_runs
    runs_dir = tmp_path / "runs"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs", runs_dir)
    rows = list_runs(runs_dir)
    assert [r.sequence for r in rows] == [2, 3, 4]
    first = rows[0]
    assert (first.profile, first.host, first.outcome, first.benchmarked) == ("base", "b70", "ready", True)
    assert (first.kv_cache_tokens, first.warm_decode_tok_s, first.cold_ttft_s) == (264846, 57.0, 2.548)
    assert [r.run_id for r in list_runs(runs_dir, profile="batch-8192")] == ["0003-batch-8192-b70"]


def test_the_listing_cache_follows_changes_and_can_be_lost(tmp_path, monkeypatch, bench_sample):
    import os
    from servedeck.runs import history
    monkeypatch.setattr(history, "HOT_S", 0.0)  # cache every row at once
    run = create_run(tmp_path, "cpu-4096", "local")
    run.finish("ready")
    old = 1_700_000_000
    os.utime(run.path, (old, old))
    rows = history.list_runs(tmp_path)
    assert rows[0].benchmarked is False and (tmp_path / ".index.json").exists()
    index = json.loads((tmp_path / ".index.json").read_text())
    row = index["runs"][run.run_id][1]
    assert row[history._CACHED_FIELDS.index("outcome")] == "ready"
    # a cached row is used as long as the directory did not change ...
    row[history._CACHED_FIELDS.index("profile")] = "from-the-cache"
    (tmp_path / ".index.json").write_text(json.dumps(index))
    assert history.list_runs(tmp_path)[0].profile == "from-the-cache"
    # ... and recomputed once a write into the run directory moved its time
    _benched(run, bench_sample)
    row = history.list_runs(tmp_path)[0]
    assert row.profile == "cpu-4096" and row.benchmarked and row.cold_ttft_s == 0.55
    (tmp_path / ".index.json").write_text("{not json")
    assert history.list_runs(tmp_path)[0].benchmarked
    import shutil as _sh
    _sh.rmtree(run.path)
    assert history.list_runs(tmp_path) == []
    assert json.loads((tmp_path / ".index.json").read_text())["runs"] == {}


def test_newest_served_includes_rollback_runs(tmp_path):
    from servedeck.runs.history import newest_served
    a = create_run(tmp_path, "cpu-4096", "local")
    a.finish("ready")
    b = create_run(tmp_path, "cpu-8192", "local")
    b.finish("rolled-back", "readiness timed out", phase="timeout")
    r = create_run(tmp_path, "cpu-4096", "local", kind="rollback", restores=a.run_id)
    r.finish("ready")
    assert newest_served(tmp_path, "local") == r.path
    with pytest.raises(ServedeckError, match="no ready run of host 'b70'"):
        newest_served(tmp_path, "b70")
    # a project that has recorded no run yet (no runs directory): the same answer, not a
    # FileNotFoundError traceback (`invoke ceilings --host H` in a fresh project)
    with pytest.raises(ServedeckError, match="no ready run of host 'local'"):
        newest_served(tmp_path / "runs", "local")


# ---------------------------------------------------------------- bench sizing

def test_bench_workload_fits_the_deployed_max_model_len():
    from servedeck.bench.sizing import max_model_len_of, size_workload
    cpu = ROOT / "tests" / "fixtures" / "runs-cpu" / "0001-cpu-4096-local"
    assert max_model_len_of(cpu) == 2048
    assert size_workload(2048) == (1792, 256)
    assert size_workload(1024) == (896, 128)
    assert size_workload(131072) == (32768, 256)
    assert size_workload(None) == (32768, 256)
    assert size_workload(2048, prompt_tokens=1000) == (1000, 256)
    with pytest.raises(ServedeckError) as exc:
        size_workload(2048, prompt_tokens=32768)
    assert "33024 does not fit the deployed max_model_len 2048" in str(exc.value)
    assert "--prompt-tokens" in exc.value.hint and "engine.max_model_len" in exc.value.hint


# ---------------------------------------------------------------- locally built images

def _project_copy(tmp_path):
    root = tmp_path / "proj"
    for name in ("profiles", "deploy"):
        shutil.copytree(ROOT / name, root / name)
    return root


def test_a_placeholder_digest_is_a_check_finding_with_the_command_that_fixes_it(tmp_path):
    from servedeck.compose.check import CheckExpectations, check_compose_text
    from servedeck.compose.render import render_profile
    root = _project_copy(tmp_path)
    store = ProfileStore(root / "profiles")
    catalog = Catalog(root / "deploy" / "images.yaml")
    rendered = render_profile(store.load("cpu-4096").profile, catalog, ROOT / "templates")
    findings = check_compose_text(rendered.compose_text, file="profile:cpu-4096", catalog=catalog,
                                  expect=CheckExpectations(rendered=True))
    hit = [f for f in findings if f.rule == "image/placeholder-digest"]
    assert hit and hit[0].severity.value == "warning"
    assert "`invoke image-build`" in hit[0].hint and ".servedeck/local-images.yaml" in hit[0].hint


def test_a_locally_built_image_resolves_the_placeholder_without_editing_tracked_files(tmp_path):
    from servedeck.model.catalog import ImageFacts
    from servedeck.model.project import Project
    root = _project_copy(tmp_path)
    before = {p: p.read_bytes() for p in (root / "profiles").iterdir()} | \
        {root / "deploy" / "images.yaml": (root / "deploy" / "images.yaml").read_bytes()}
    project = Project(root)
    built = "127.0.0.1:5000/servedeck/vllm-cpu@sha256:" + "d" * 64
    project.local_images.record(built)
    assert (root / ".servedeck" / ".gitignore").read_text() == "*\n"
    store = ProfileStore(project.profiles_dir)
    assert store.load("cpu-4096").profile.image == built
    assert store.load("cpu-8192").profile.image == built  # inherited through extends
    assert store.load("speed").profile.image != built     # a real digest is never replaced
    catalog = Catalog(project.catalog_path, local=project.local_images)
    facts = ImageFacts(repository="127.0.0.1:5000/servedeck/vllm-cpu", launcher="exl3xpu",
                       vllm_version="0.32.0", device="cpu", entrypoint=["python3", "serve.py"])
    catalog.add("sha256:" + "d" * 64, facts)
    assert Catalog(project.catalog_path, local=project.local_images).lookup("sha256:" + "d" * 64) == facts
    assert (root / ".servedeck" / "images.yaml").exists()
    after = {p: p.read_bytes() for p in before}
    assert after == before
    with pytest.raises(ServedeckError, match="not a built image reference"):
        project.local_images.record("127.0.0.1:5000/servedeck/vllm-cpu@sha256:" + "0" * 64)
