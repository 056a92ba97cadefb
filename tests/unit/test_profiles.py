"""Profiles: loading, extends, errors, rendering (golden seed), import round-trip, schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from servedeck.model.catalog import Catalog
from servedeck.errors import ServedeckError
from servedeck.compose.importer import dump_profile_yaml, import_compose
from servedeck.launchers.exl3xpu import set_value
from servedeck.model.profile import ProfileStore, deep_merge, diff_profiles
from servedeck.compose.render import render_profile
from servedeck.model.schema import profile_schema, stale_schemas

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "tests" / "fixtures" / "compose" / "seed-run3.yml"
CATALOG = Catalog(ROOT / "deploy" / "images.yaml")
STORE = ProfileStore(ROOT / "profiles")


def _render(name: str, store: ProfileStore = STORE) -> str:
    return render_profile(store.load(name), CATALOG, ROOT / "templates").compose_text


def _service(name: str):
    """The rendered service of profile ``name`` as it will run (its effective settings and environment)."""
    return render_profile(STORE.load(name), CATALOG, ROOT / "templates").service


def _body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def _seed_fixed() -> str:
    text = SEED.read_text()
    assert "--served-model-name \n" in text, "the fixture keeps the hand-written trailing space"
    return text.replace("--served-model-name \n", "--served-model-name\n")


# ----------------------------------------------------------------- golden render of the seed


def test_batch_8192_reproduces_the_seed_line_by_line():
    assert _body(_render("batch-8192")) == _seed_fixed().rstrip("\n").splitlines()


def test_rendered_file_carries_provenance_comment():
    first = _render("batch-8192").splitlines()[0]
    assert first.startswith("# servedeck profile batch-8192 (extends base)")
    assert "sha256:" in first


def _compose_config(path: Path) -> dict:
    out = subprocess.run(["docker", "compose", "-f", str(path), "-p", "golden", "config", "--format", "json",
                          "--no-interpolate"], capture_output=True, text=True, check=True,
                         cwd=path.parent)
    return json.loads(out.stdout)


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_compose(), reason="Compose v2 not installed (`invoke test` installs it; "
                                               "`invoke test --unit` may run without it)")
def test_batch_8192_is_the_seed_after_docker_compose_config(tmp_path):
    (tmp_path / "seed").mkdir()
    (tmp_path / "mine").mkdir()
    (tmp_path / "seed" / "docker-compose.yml").write_text(SEED.read_text())
    (tmp_path / "mine" / "docker-compose.yml").write_text(_render("batch-8192"))
    seed = _compose_config(tmp_path / "seed" / "docker-compose.yml")
    mine = _compose_config(tmp_path / "mine" / "docker-compose.yml")
    for doc, d in ((seed, "seed"), (mine, "mine")):
        doc.pop("name", None)
        for vol in doc["services"]["exl3xpu"]["volumes"]:  # absolute paths depend on the dir
            vol["source"] = vol["source"].replace(str(tmp_path / d), "<dir>")
    assert mine == seed


# ----------------------------------------------------------------- profiles and variants


def test_every_shipped_profile_loads_and_renders():
    assert set(STORE.names()) >= {"base", "batch-8192", "speed", "quality", "mtp-2", "mtp-off"}
    for name in STORE.names():
        assert "services:" in _render(name)


def test_variant_diffs_name_only_what_changed():
    loaded = STORE.load("batch-8192")
    changes = diff_profiles(loaded.parent.profile, loaded.profile)
    assert [(c.path, c.old, c.new) for c in changes] == [
        ("engine.max_num_batched_tokens", 4096, 8192)]
    off = STORE.load("mtp-off")
    assert [c.render() for c in diff_profiles(off.parent.profile, off.profile)] == [
        "engine.speculative: {'num_speculative_tokens': 3} -> 'off'"]


def test_speculative_null_turns_off_and_absent_keeps_image_default():
    off = STORE.load("mtp-off").profile
    assert off.engine.speculative_state == "off"
    assert "vllm.speculative_config=null" in _render("mtp-off")
    base = STORE.load("base").profile
    assert base.engine.speculative_state == "default"
    assert "speculative_config" not in _render("base")
    eff = _service("base").settings()
    assert eff["speculative_config"] == {"method": "qwen3_5_mtp", "num_speculative_tokens": 3}
    assert _service("mtp-off").settings()["speculative_config"] is None


def test_mtp_2_edits_only_the_depth_keeping_the_image_method():
    text = _render("mtp-2")
    assert "vllm.speculative_config.num_speculative_tokens=2" in text
    eff = _service("mtp-2").settings()
    assert eff["speculative_config"] == {"method": "qwen3_5_mtp", "num_speculative_tokens": 2}
    assert eff["max_num_batched_tokens"] == 4096 and eff["kv_cache_dtype"] == "fp8"


def test_quality_sets_fp16_prefill_through_the_launcher_not_compose_env():
    p = STORE.load("quality").profile
    text = _render("quality")
    assert "env.EXL3_INT8_PREFILL=0" in text
    assert "EXL3_INT8_PREFILL:" not in text  # not in compose environment (model.yaml would win)
    env = _service("quality").server_env()
    assert env["EXL3_INT8_PREFILL"] == "0" and env["EXL3_ONEDNN_ATTN"] == "1"
    assert "5.00bpw-h6" in p.model.weights_dir


def test_deep_merge_null_deletes_but_keeps_speculative_off():
    base = {"engine": {"a": 1, "speculative": {"n": 3}}, "x": {"y": 1}}
    out = deep_merge(base, {"engine": {"a": None, "speculative": None}, "x": {"z": 2}})
    assert out == {"engine": {"speculative": None}, "x": {"y": 1, "z": 2}}
    assert base["engine"]["a"] == 1  # inputs untouched


@pytest.mark.parametrize("value,expected", [
    (0.94, "0.94"), (131072, "131072"), (True, "true"), (None, "null"),
    ({"method": "ngram", "num_speculative_tokens": 3}, '{"method":"ngram","num_speculative_tokens":3}'),
    ("qwen3", "qwen3"), ("on", '"on"'), ("1e3", "1e3"), ("0123", '"0123"'),
])
def test_set_values_survive_the_launchers_yaml_reading(value, expected):
    assert set_value(value) == expected


# ----------------------------------------------------------------- bad input


def _write(dirpath: Path, name: str, text: str) -> None:
    (dirpath / f"{name}.yaml").write_text(text)


@pytest.fixture
def store(tmp_path) -> ProfileStore:
    shutil.copy(ROOT / "profiles" / "base.yaml", tmp_path / "base.yaml")
    return ProfileStore(tmp_path)


def test_unknown_key_names_file_field_value_and_hint(store, tmp_path):
    _write(tmp_path, "v", "extends: base\nengine:\n  max_num_batched_tokenz: 8192\n")
    with pytest.raises(ServedeckError) as exc:
        store.load("v")
    e = exc.value
    assert e.file.endswith("v.yaml") and e.field == "engine.max_num_batched_tokenz"
    assert "8192" in e.message and e.hint == "did you mean engine.max_num_batched_tokens?"


def test_key_in_wrong_section_suggests_the_right_one(store, tmp_path):
    _write(tmp_path, "v", "extends: base\nmax_model_len: 4096\n")
    with pytest.raises(ServedeckError, match="unknown key") as exc:
        store.load("v")
    assert exc.value.hint == "did you mean engine.max_model_len?"


def test_wrong_type_names_the_file_that_set_it(store, tmp_path):
    _write(tmp_path, "v", "extends: base\ncontainer:\n  group_add: [992]\n")
    with pytest.raises(ServedeckError) as exc:
        store.load("v")
    e = exc.value
    assert e.file.endswith("v.yaml") and e.field == "container.group_add.0"
    assert "quote it" in e.hint


def test_image_without_digest_is_refused(store, tmp_path):
    _write(tmp_path, "v", "extends: base\nimage: vllm/vllm-openai:latest\n")
    with pytest.raises(ServedeckError, match="not pinned by digest") as exc:
        store.load("v")
    assert exc.value.field == "image" and exc.value.file.endswith("v.yaml")


def test_cycle_in_extends_is_refused(store, tmp_path):
    _write(tmp_path, "a", "extends: b\n")
    _write(tmp_path, "b", "extends: a\n")
    with pytest.raises(ServedeckError, match="cycle in extends: a -> b -> a"):
        store.load("a")


def test_missing_parent_and_missing_profile(store, tmp_path):
    _write(tmp_path, "v", "extends: bsae\n")
    with pytest.raises(ServedeckError) as exc:
        store.load("v")
    assert exc.value.field == "extends" and "base" in exc.value.hint
    with pytest.raises(ServedeckError, match="no profile named 'nope'"):
        store.load("nope")


def test_yaml_syntax_error_names_the_line(store, tmp_path):
    _write(tmp_path, "v", "extends: base\nengine: [\n")
    with pytest.raises(ServedeckError, match="not valid YAML") as exc:
        store.load("v")
    assert exc.value.field.startswith("line ")


def test_auto_tool_choice_without_parser_is_refused(store, tmp_path):
    _write(tmp_path, "v", "extends: base\nengine:\n  tool_call_parser: null\n")
    with pytest.raises(ServedeckError, match="tool_call_parser"):
        store.load("v")


def test_render_task_writes_nothing_when_rendering_fails(tmp_path):
    proj = tmp_path / "proj"
    for name in ("profiles", "deploy", "templates", "schema"):
        shutil.copytree(ROOT / name, proj / name, ignore=shutil.ignore_patterns("images"))
    _write(proj / "profiles", "bad", "extends: base\nengine:\n  gpu_memory_utilization: 1.5\n")
    out = tmp_path / "out.yml"
    out.write_text("previous content\n")
    env = {**os.environ, "SERVEDECK_PROJECT": str(proj)}
    res = subprocess.run(["invoke", "-r", str(ROOT), "render", "--profile", "bad", "--out", str(out)],
                         capture_output=True, text=True, env=env)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert "engine.gpu_memory_utilization" in res.stderr and "1.5" in res.stderr
    assert out.read_text() == "previous content\n"


# ----------------------------------------------------------------- import


def test_import_of_the_seed_renders_back_the_same_document(tmp_path):
    mapping, notes = import_compose(SEED, "run3", CATALOG)
    assert mapping["engine"]["max_num_batched_tokens"] == 8192
    assert mapping["container"]["group_add"] == ["992"]
    (tmp_path / "run3.yaml").write_text(dump_profile_yaml(mapping))
    text = _render("run3", ProfileStore(tmp_path))
    assert _body(text) == _seed_fixed().rstrip("\n").splitlines()


def test_import_refuses_an_unpinned_image(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text(SEED.read_text().replace(
        "ghcr.io/0xsero/exl3xpu@sha256:21412bdd7535e9c653eeb3d099dce3bc79a83d440def2cd9556111c79c870fa8",
        "ghcr.io/0xsero/exl3xpu:0.1.0"))
    with pytest.raises(ServedeckError, match="not pinned") as exc:
        import_compose(path, "x", CATALOG)
    assert exc.value.field == "services.exl3xpu.image"


# ----------------------------------------------------------------- schema


def test_schema_files_are_fresh():
    assert stale_schemas(ROOT / "schema") == []


def test_every_profile_file_validates_against_the_schema():
    validator = jsonschema.Draft202012Validator(json.loads((ROOT / "schema" / "profile.schema.json").read_text()))
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        data = YAML(typ="safe", pure=True).load(path.read_text())
        assert list(validator.iter_errors(data)) == [], path


def test_schema_rejects_typos_and_unpinned_images():
    validator = jsonschema.Draft202012Validator(profile_schema())
    assert not validator.is_valid({"extends": "base", "engine": {"max_num_batched_tokenz": 1}})
    assert validator.is_valid({"extends": "base", "engine": {"speculative": None}})
    full = YAML(typ="safe", pure=True).load((ROOT / "profiles" / "base.yaml").read_text())
    assert validator.is_valid(full)
    full["image"] = "vllm/vllm-openai:latest"
    assert not validator.is_valid(full)


def test_dollar_signs_are_escaped_for_compose_and_json_stays_one_item(store, tmp_path):
    _write(tmp_path, "v", "extends: base\ncontainer:\n  environment:\n    PROMPT: \"cost $5 ${HOME}\"\n"
                          "engine:\n  extra_args: ['--hf-overrides', '{\"a\": \"$x\"}']\n")
    text = render_profile(store.load("v"), CATALOG, ROOT / "templates").compose_text
    assert 'PROMPT: "cost $$5 $${HOME}"' in text
    assert "- --hf-overrides\n      - '{\"a\": \"$$x\"}'" in text
