"""Import reads argv as vLLM does and keeps what it cannot model: own variants
of the field cases 38 (``--flag=value``), 39 (model by Hugging Face repo id), 40 (GPU requests
and other unmodelled keys) and 41b (human-readable ints, auto/-1)."""

from __future__ import annotations

from pathlib import Path

import posixpath
import pytest

from servedeck.compose.check import CheckExpectations, check_compose_text
from servedeck.compose.document import parse_document
from servedeck.compose.importer import dump_profile_yaml, import_compose
from servedeck.compose.render import render_profile
from servedeck.errors import ServedeckError
from servedeck.model.catalog import Catalog
from servedeck.model.profile import Profile, ProfileStore
from servedeck.vllm.argv import parse_vllm, repeated

ROOT = Path(__file__).resolve().parents[2]
CATALOG = Catalog(ROOT / "deploy" / "images.yaml")
IMAGE = "ghcr.io/example/llm-server@sha256:" + "ab" * 32


def _compose(tmp_path: Path, command: list[str], *, volumes=("/srv/m:/models/m:ro",), extra: str = "",
             top: str = "") -> Path:
    lines = ["services:", "  llm:", f"    image: {IMAGE}", "    command:"]
    lines += [f"      - {c!r}".replace("'", '"') if not c.startswith("{") else f"      - '{c}'" for c in command]
    lines += ['    ports:', '      - "8000:8000"']
    if volumes:
        lines += ["    volumes:"] + [f"      - {v}" for v in volumes]
    path = tmp_path / "docker-compose.yml"
    path.write_text("\n".join(lines) + "\n" + extra + top)
    return path


def _render(tmp_path: Path, mapping: dict) -> str:
    d = tmp_path / "profiles"
    d.mkdir(exist_ok=True)
    (d / "t.yaml").write_text(dump_profile_yaml(mapping))
    return render_profile(ProfileStore(d).load("t"), CATALOG, ROOT / "templates").compose_text


def _errors(text: str) -> list[str]:
    return [f.rule for f in check_compose_text(text, catalog=CATALOG, expect=CheckExpectations(rendered=True))
            if f.severity.value == "error"]


# ----------------------------------------------------------------- 38: --flag=value


def test_equals_form_flags_become_typed_fields_and_render_once(tmp_path):
    src = _compose(tmp_path, ["--model=/models/m", "--served-model-name=chat", "--port=8000",
                              "--max-num-seqs=8", "--gpu-memory-utilization=0.85", "--tool-call-parser=hermes",
                              "--enable-auto-tool-choice", "--dtype=half", "--seed=7"])
    mapping, notes = import_compose(src, "t", CATALOG)
    assert mapping["model"]["served_model_name"] == ["chat"]
    assert mapping["model"]["mount"] == "/models/m"
    assert mapping["container"]["port"] == 8000
    assert mapping["engine"]["max_num_seqs"] == 8 and mapping["engine"]["gpu_memory_utilization"] == 0.85
    assert mapping["engine"]["tool_call_parser"] == "hermes"
    assert mapping["engine"]["dtype"] == "half"
    assert mapping["engine"]["extra_args"] == ["--seed=7"]  # not modelled: kept verbatim
    command = parse_document(_render(tmp_path, mapping)).service().command
    assert repeated(parse_vllm(command)) == {}


def test_a_flag_given_twice_keeps_the_last_value_and_says_so(tmp_path):
    src = _compose(tmp_path, ["/models/m", "--served-model-name", "model", "--served-model-name=chat",
                              "--max-model-len", "4096", "--max-model-len=8192"])
    mapping, notes = import_compose(src, "t", CATALOG)
    assert mapping["model"]["served_model_name"] == ["chat"]
    assert mapping["engine"]["max_model_len"] == 8192
    assert any("--served-model-name is given 2 times" in n and "'chat'" in n for n in notes)
    assert "extra_args" not in mapping["engine"]


# ----------------------------------------------------------------- 41b: value syntax


def test_human_readable_ints_are_read_as_vllm_reads_them(tmp_path):
    src = _compose(tmp_path, ["/models/m", "--max-model-len", "32k", "--max-num-batched-tokens=2K"])
    mapping, _ = import_compose(src, "t", CATALOG)
    assert mapping["engine"]["max_model_len"] == 32_000
    assert mapping["engine"]["max_num_batched_tokens"] == 2048


@pytest.mark.parametrize("value", ["auto", "-1", "AUTO"])
def test_max_model_len_auto_stays_the_images_choice_with_a_note(tmp_path, value):
    src = _compose(tmp_path, ["/models/m", "--max-model-len", value])
    mapping, notes = import_compose(src, "t", CATALOG)
    assert "max_model_len" not in mapping.get("engine", {})
    assert mapping["engine"]["extra_args"] == ["--max-model-len", value]
    assert any("max_model_len -1" in n for n in notes)


def test_a_value_vllm_refuses_is_an_error_naming_the_item(tmp_path):
    src = _compose(tmp_path, ["/models/m", "--max-num-batched-tokens", "1.5K"])
    with pytest.raises(ServedeckError, match="max-num-batched-tokens") as exc:
        import_compose(src, "t", CATALOG)
    assert exc.value.field == "services.llm.command[1]"
    assert "1.5k" in str(exc.value.message)


# ----------------------------------------------------------------- 39: repo id + HF cache


def test_repo_id_with_a_named_cache_volume(tmp_path):
    src = _compose(tmp_path, ["Qwen/Qwen3-8B", "--served-model-name", "q"],
                   volumes=("hf:/root/.cache/huggingface",), top="volumes:\n  hf: {}\n")
    mapping, notes = import_compose(src, "t", CATALOG)
    assert mapping["model"]["repo_id"] == "Qwen/Qwen3-8B"
    assert mapping["model"]["hf_cache"] == {"source": "hf", "target": "/root/.cache/huggingface"}
    assert not any("volumes.hf" in n for n in notes)  # re-declared by the renderer
    text = _render(tmp_path, mapping)
    svc = parse_document(text)
    assert svc.service().command[0] == "Qwen/Qwen3-8B"
    assert "hf" in svc.extra["volumes"]
    assert _errors(text) == []


def test_repo_id_without_a_cache_mount_is_imported_with_a_note(tmp_path):
    src = _compose(tmp_path, ["Qwen/Qwen3-8B"], volumes=())
    mapping, notes = import_compose(src, "t", CATALOG)
    assert mapping["model"] == {"repo_id": "Qwen/Qwen3-8B", "served_model_name": ["Qwen/Qwen3-8B"]}
    assert any("no mount keeps the Hugging Face cache (/root/.cache/huggingface/hub)" in n for n in notes)


def test_a_local_model_path_without_its_mount_is_refused_with_both_ways_out(tmp_path):
    src = _compose(tmp_path, ["/models/other"])
    with pytest.raises(ServedeckError, match="no volume is mounted") as exc:
        import_compose(src, "t", CATALOG)
    assert "repo id" in exc.value.hint and "--model-path" not in exc.value.hint


def test_profile_model_says_local_or_repo_id_not_both():
    base = {"name": "x", "image": IMAGE, "launcher": {"kind": "vllm"}}
    with pytest.raises(ValueError, match="not both"):
        Profile.model_validate({**base, "model": {"weights_dir": "/a", "mount": "/m", "repo_id": "o/n",
                                                  "served_model_name": "x"}})
    with pytest.raises(ValueError, match="repo_id"):
        Profile.model_validate({**base, "model": {"served_model_name": "x"}})
    with pytest.raises(ValueError, match="reads the weights from --model-path"):
        Profile.model_validate({**base, "launcher": {"kind": "exl3xpu", "config": "models/m"},
                                "model": {"repo_id": "o/n", "served_model_name": "x"}})


# ----------------------------------------------------------------- 40: keys servedeck does not model

NVIDIA = """    gpus: all
    runtime: nvidia
    devices:
      - nvidia.com/gpu=all
    ulimits:
      memlock: -1
    labels:
      team: llm
    healthcheck:
      test: ["CMD-SHELL", "curl -f http://localhost:8000/health || exit 1"]
      interval: 30s
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: all
              capabilities: [gpu]
"""


def test_gpu_requests_and_unmodelled_keys_are_carried_and_rendered_back(tmp_path):
    src = _compose(tmp_path, ["/models/m"], extra=NVIDIA)
    mapping, notes = import_compose(src, "t", CATALOG)
    extra = mapping["container"]["compose_extra"]
    assert list(extra) == ["gpus", "runtime", "ulimits", "labels", "healthcheck", "deploy"]
    assert mapping["container"]["devices"] == ["nvidia.com/gpu=all"]
    assert any("gpus, runtime, ulimits, labels, healthcheck, deploy" in n for n in notes)
    rendered = parse_document(_render(tmp_path, mapping)).service()
    original = parse_document(src.read_text()).service()
    for key in extra:
        assert rendered.extra[key] == original.extra[key], key
    assert rendered.gpu_requests[0].count == "all"
    assert [d.short() for d in rendered.devices] == ["nvidia.com/gpu=all"]


def test_what_cannot_be_kept_is_listed_one_by_one(tmp_path):
    src = _compose(tmp_path, ["/models/m"], volumes=("/srv/m:/models/m:ro", "/scratch"),
                   top="networks:\n  backend: {}\n  other: {}\nx-common: {a: 1}\n")
    text = src.read_text().replace('      - "8000:8000"', '      - "8000:8000"\n      - "9100:9100"')
    text = text.replace("services:\n", "services:\n  sidecar:\n    image: busybox\n", 1)
    src.write_text(text)
    mapping, notes = import_compose(src, "t", CATALOG, service="llm")
    joined = "\n".join(notes)
    for expected in ("services.llm.ports[1]", "anonymous volume at /scratch", "services.sidecar",
                     "networks: top-level", "x-common: top-level"):
        assert expected in joined, expected


def test_dollar_escapes_survive_the_round_trip(tmp_path):
    src = _compose(tmp_path, ["/models/m", "--chat-template", "$${x}"],
                   extra="    environment:\n      PASS: \"a$$b\"\n")
    mapping, _ = import_compose(src, "t", CATALOG)
    assert mapping["container"]["environment"]["PASS"] == "a$b"
    assert mapping["engine"]["extra_args"] == ["--chat-template", "${x}"]
    rendered = parse_document(_render(tmp_path, mapping)).service()
    assert rendered.environment.values["PASS"] == "a$$b"
    assert rendered.command[-1] == "$${x}"


@pytest.mark.parametrize("command,extra,field,shown", [
    (["/models/m", "--api-key", "${VLLM_KEY}"], "", "services.llm.command[2]", "$VLLM_KEY"),
    (["/models/m"], "    environment:\n      HF_TOKEN: ${HF_TOKEN:-none}\n",
     "services.llm.environment.HF_TOKEN", "$HF_TOKEN"),
    (["/models/m"], "    environment:\n      - \"TAG=run-$$n-$RUN\"\n", "services.llm.environment[0]", "$RUN"),
    (["/models/m", "--served-model-name", "m-${A}-${B:+b}"], "", "services.llm.command[2]", "$A, $B"),
    (["/models/m"], "    container_name: llm-${SUFFIX?set it}\n", "services.llm.container_name", "$SUFFIX"),
])
def test_a_compose_variable_is_refused_naming_the_field_and_how_to_resolve_it(tmp_path, command, extra,
                                                                             field, shown):
    """A profile holds values: a variable Compose would substitute on the host would reach the
    server as its own characters once the renderer escapes the ``$``."""
    with pytest.raises(ServedeckError) as exc:
        import_compose(_compose(tmp_path, command, extra=extra), "t", CATALOG)
    assert exc.value.field == field and f"uses the variable {shown}:" in exc.value.message
    assert "docker compose config --no-normalize" in exc.value.hint


def test_a_variable_in_a_key_carried_verbatim_keeps_composes_reading(tmp_path):
    """``container.compose_extra`` is rendered verbatim, ``$`` unescaped: Compose still
    substitutes there, so a variable in such a key imports as it is."""
    src = _compose(tmp_path, ["/models/m"], extra="    labels:\n      owner: ${USER}\n      cost: $$5\n")
    mapping, notes = import_compose(src, "t", CATALOG)
    assert mapping["container"]["compose_extra"]["labels"] == {"owner": "${USER}", "cost": "$$5"}
    rendered = parse_document(_render(tmp_path, mapping)).service()
    assert rendered.extra["labels"] == {"owner": "${USER}", "cost": "$$5"}


def test_an_invalid_dollar_is_refused_as_compose_refuses_it(tmp_path):
    with pytest.raises(ServedeckError) as exc:
        import_compose(_compose(tmp_path, ["/models/m", "--chat-template", "a$-b"]), "t", CATALOG)
    assert exc.value.field == "services.llm.command[2]" and "not a valid Compose interpolation" in exc.value.message


@pytest.mark.parametrize("case", ["39-import-hf-repo-id-model.yml", "40-import-drops-gpu-reservation.yml",
                                  "38-import-flag-equals-value.yml", "41b-human-readable-int-import.yml"])
def test_imported_profiles_validate_against_the_published_schema(case):
    import json

    import jsonschema
    from ruamel.yaml import YAML

    mapping, _ = import_compose(ROOT / "tests" / "fixtures" / "cases" / "field-2" / case, "t", CATALOG)
    data = YAML(typ="safe", pure=True).load(dump_profile_yaml(mapping))
    schema = json.loads((ROOT / "schema" / "profile.schema.json").read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(data)) == []


def test_field_case_expectations():
    cases = ROOT / "tests" / "fixtures" / "cases" / "field-2"
    m38, _ = import_compose(cases / "38-import-flag-equals-value.yml", "t38", CATALOG)
    assert m38["model"]["served_model_name"] == ["chat"] and m38["container"]["port"] == 8000
    assert m38["engine"] == {"max_model_len": 8192, "gpu_memory_utilization": 0.9}
    m39, _ = import_compose(cases / "39-import-hf-repo-id-model.yml", "t39", CATALOG)
    assert m39["model"]["repo_id"] == "example/model-7b"
    assert m39["model"]["hf_cache"]["target"] == "/root/.cache/huggingface"
    m40, notes40 = import_compose(cases / "40-import-drops-gpu-reservation.yml", "t40", CATALOG)
    assert {"deploy", "healthcheck", "ulimits"} <= set(m40["container"]["compose_extra"])
    assert any("deploy" in n and "healthcheck" in n for n in notes40)
    m41, _ = import_compose(cases / "41b-human-readable-int-import.yml", "t41b", CATALOG)
    assert (m41["engine"]["max_model_len"], m41["engine"]["max_num_batched_tokens"]) == (131072, 16384)


def test_cli_import_then_render_and_check_carry_the_gpu_request(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    for name in ("profiles", "templates", "schema", "deploy"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("images"))
    env = {**os.environ, "SERVEDECK_PROJECT": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], capture_output=True,
                              text=True, env=env)

    src = ROOT / "tests" / "fixtures" / "cases" / "field-2" / "40-import-drops-gpu-reservation.yml"
    res = run("import", "--compose", str(src), "--name", "t40")
    assert res.returncode == 0, res.stderr
    assert "compose_extra: ulimits, healthcheck, deploy" in res.stderr
    out = run("render", "--profile", "t40")
    assert out.returncode == 0, out.stderr
    svc = parse_document(out.stdout).service()
    assert svc.gpu_requests[0].device_ids == ["GPU-5f1c2a7e-3b4d-4e8f-9a0b-1c2d3e4f5a6b",
                                              "GPU-9d8e7f60-1a2b-4c3d-8e5f-6a7b8c9d0e1f"]
    assert svc.healthcheck["retries"] == 5 and svc.extra["ulimits"]["memlock"] == -1


# ---- variants of cases 38 / 40: the argv Docker runs (entrypoint + command) -------------------

_VLLM_IMAGE = "ghcr.io/example/llm-server@sha256:69ab1604404613e831db7db77dfdbd08cca1c65e5264b8d833091da753bed4a3"


def _import_service(tmp_path, service: str, volumes: str = "      - /srv/models/m:/models/m\n"):
    from test_check_field_faults import CASES as FIELD
    from ruamel.yaml import YAML
    from servedeck.model.catalog import ImageFacts
    cat = Catalog(tmp_path / "images.yaml")
    for img in YAML(typ="safe").load((FIELD / "images.yaml").read_text())["images"]:
        repo, digest = img["ref"].split("@")
        cat.add(digest, ImageFacts(repository=repo, launcher="vllm", vllm_version=img["vllm_version"],
                                   device="cuda", entrypoint=img["entrypoint"], cmd=img["cmd"],
                                   default_port=img["default_port"], binaries=img["binaries"]))
    path = tmp_path / "in.yml"
    path.write_text(f"services:\n  llm:\n    image: {_VLLM_IMAGE}\n{service}    volumes:\n{volumes}")
    return import_compose(path, "imp", cat)


@pytest.mark.parametrize("service", [
    "    entrypoint: [vllm]\n    command: [serve, /models/m, --port, \"8000\"]\n",
    "    entrypoint: [/usr/local/bin/vllm, serve]\n    command: [/models/m, --port, \"8000\"]\n",
    "    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n"
    "    command: [--model, /models/m, --port, \"8000\"]\n",
    "    entrypoint: [/bin/bash, -c]\n    command: [\"exec vllm serve /models/m --port 8000\"]\n",
])
def test_an_entrypoint_that_starts_vllm_gives_its_arguments_to_the_profile(tmp_path, service):
    mapping, notes = _import_service(tmp_path, service)
    assert mapping["model"]["weights_dir"] == "/srv/models/m" and mapping["container"]["port"] == 8000
    assert any("entrypoint" in n and "left out" in n for n in notes)


@pytest.mark.parametrize("service, field", [
    ("    entrypoint: [/bin/bash, -c]\n    command: [\"vllm serve $$MODEL\"]\n", "services.llm.entrypoint"),
    ("    entrypoint: [/bin/sh, -c]\n    command: \"vllm serve /models/m\"\n", "services.llm.entrypoint"),
    ("    entrypoint: [/opt/start.sh]\n", "services.llm.entrypoint"),
    ("    command: [vllm, serve, /models/m]\n", "services.llm.command[0]"),  # the image runs vllm serve
])
def test_an_argv_that_is_not_the_servers_own_is_refused_naming_the_field(tmp_path, service, field):
    with pytest.raises(ServedeckError) as exc:
        _import_service(tmp_path, service)
    assert exc.value.field == field


def test_a_model_given_twice_is_refused_as_vllm_serve_refuses_it(tmp_path):
    """vLLM 0.11.1+ moves --model to the front: the positional is then 'unrecognized arguments'."""
    with pytest.raises(ServedeckError, match="gives the model twice") as exc:
        _import_service(tmp_path, "    command: [/models/m, --model, /models/other]\n")
    assert exc.value.field == "services.llm.command[0]" and "unrecognized arguments: /models/m" in exc.value.message


@pytest.mark.parametrize("command", ["[--model, /models/m, --port, \"8000\"]",
                                     "[--port, \"8000\", --model=/models/m]",
                                     "[--port, \"8000\", /models/m, --served-model-name, chat]"])
def test_the_model_is_what_vllm_serves_wherever_the_command_puts_it(tmp_path, command):
    mapping, notes = _import_service(tmp_path, f"    command: {command}\n")
    assert mapping["model"]["weights_dir"] == "/srv/models/m"


def test_dotted_speculative_config_keys_merge_into_one_config(tmp_path):
    mapping, _ = _import_service(tmp_path, "    command: [/models/m, --speculative-config.method=ngram, "
                                           "--speculative-config.num_speculative_tokens=3]\n")
    assert mapping["engine"]["speculative"] == {"method": "ngram", "num_speculative_tokens": 3}


@pytest.mark.parametrize("flag, value, says", [("--max-num-batched-tokens", "-1", "not a positive size"),
                                               ("--max-num-batched-tokens", "0", "not a positive size"),
                                               ("--max-model-len", "-1", "auto: vLLM decides")])
def test_a_non_positive_size_is_kept_for_vllm_and_only_max_model_len_minus_one_is_auto(
        tmp_path, flag, value, says):
    mapping, notes = _import_service(tmp_path, f"    command: [/models/m, {flag}, \"{value}\"]\n")
    assert [flag, value] == mapping["engine"]["extra_args"][-2:]
    assert any(says in n for n in notes)


@pytest.mark.parametrize("env, target", [("", "/root/.cache/huggingface"), ("HF_HOME: /data/hf", "/data/hf"),
                                         ("HF_HUB_CACHE: /data/hub", "/data/hub"),
                                         ("HUGGINGFACE_HUB_CACHE: /data/hub", "/data"),
                                         ("XDG_CACHE_HOME: /cache", "/cache/huggingface/hub")])
def test_the_hf_cache_mount_is_found_where_huggingface_hub_looks(tmp_path, env, target):
    environment = f"    environment:\n      {env}\n" if env else ""
    mapping, notes = _import_service(tmp_path, f"    command: [example/model-7b]\n{environment}",
                                     volumes=f"      - /srv/hf:{target}\n")
    assert mapping["model"]["hf_cache"] == {"source": "/srv/hf", "target": target}
    assert not any("Hugging Face cache" in n for n in notes)


@pytest.mark.parametrize("command", [
    "[/models/m, --speculative-config, '{\"method\":\"ngram\",\"num_speculative_tokens\":3}', "
    "--speculative-config.num_speculative_tokens, \"5\"]",
    "[/models/m, --speculative-config.num_speculative_tokens, \"5\", --speculative-config, "
    "'{\"method\":\"ngram\",\"num_speculative_tokens\":3}']"])
def test_sub_key_flags_replace_a_whole_speculative_config_as_vllm_reads_them(tmp_path, command):
    """Seen with vLLM 0.32's parser: both orders give {"num_speculative_tokens": 5}."""
    mapping, notes = _import_service(tmp_path, f"    command: {command}\n")
    assert mapping["engine"]["speculative"] == {"num_speculative_tokens": 5}
    assert any("is dropped: vLLM builds one value" in n for n in notes)


def test_a_positional_model_after_the_api_server_module_is_refused(tmp_path):
    with pytest.raises(ServedeckError, match="never uses it: it serves its default model") as exc:
        _import_service(tmp_path, "    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n"
                                  "    command: [/models/m, --port, \"8000\"]\n")
    assert exc.value.field == "services.llm.command[0]" and exc.value.hint.startswith("give the model as --model")


def test_a_positional_beside_model_after_the_api_server_module_is_left_out(tmp_path):
    mapping, notes = _import_service(tmp_path, "    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n"
                                               "    command: [/models/x, --model, /models/m]\n")
    assert mapping["model"]["weights_dir"] == "/srv/models/m"
    assert any("'/models/x' is left out" in n for n in notes)


@pytest.mark.parametrize("command", ["    command: [/models/m, --port, 8000]\n",
                                     "    command:\n      - /models/m\n      - --port\n      - 8000\n"])
def test_a_file_compose_refuses_is_refused_naming_the_item(tmp_path, command):
    """`docker compose config`: "services.s.command.2 must be a string" (an unquoted 8000), in
    flow and block style; not "unknown key 'command'" (the schema's unevaluatedProperties also
    lists a known key whose value failed)."""
    with pytest.raises(ServedeckError, match="Compose refuses this file") as exc:
        _import_service(tmp_path, command)
    assert exc.value.field == "services.llm.command[2]" and "8000 is not of type 'string'" in exc.value.message
    assert "unknown key" not in exc.value.message


def test_an_unknown_key_beside_a_failing_known_key_is_still_named():
    from servedeck.compose.check import check_compose_text
    text = ("services:\n  llm:\n    image: example/llm:1\n    comand: [x]\n"
            "    command:\n      - /models/m\n      - 8000\n")
    found = [(f.rule, f.path) for f in check_compose_text(text, file="x.yml") if f.rule.startswith("schema/")]
    assert ("schema/unknown-key", "services.llm.comand") in found
    assert not [p for r, p in found if r == "schema/unknown-key" and p != "services.llm.comand"], found


@pytest.mark.parametrize("flag", ["--enable-prefix-caching=false", "--enforce-eager=true",
                                  "--no-enable-prefix-caching=1", "--enable-auto-tool-choice=True"])
def test_a_bool_flag_given_a_value_is_refused_not_inverted(tmp_path, flag):
    """argparse refuses ``--flag=value`` for a flag that takes none ("ignored explicit argument"):
    vLLM exits, so the import must not turn it into a setting (``=false`` read as on)."""
    with pytest.raises(ServedeckError, match="ignored explicit argument") as exc:
        _import_service(tmp_path, f"    command: [/models/m, --served-model-name, chat, \"{flag}\"]\n")
    assert exc.value.field == "services.llm.command[3]"


@pytest.mark.parametrize("model, volume, weights, mount", [
    ("/models/m", "      - /srv/models:/models:ro\n", "/srv/models/m", "/models/m"),
    ("/models/m/", "      - /srv/models/m:/models/m\n", "/srv/models/m", "/models/m"),
    ("/models/m", "      - /srv/models/m/:/models/m/\n", "/srv/models/m/", "/models/m/"),
    ("/data/hf/hub/models--o--m/snapshots/abc", "      - /srv/hf:/data/hf\n",
     "/srv/hf/hub/models--o--m/snapshots/abc", "/data/hf/hub/models--o--m/snapshots/abc"),
])
def test_a_model_inside_a_mount_is_imported_with_the_mount_kept(tmp_path, model, volume, weights, mount):
    """A bind mount of a parent directory exposes the model's directory (the most common layout:
    a models folder): the import names the weights and keeps the whole mount, so other files and
    the links of a Hugging Face snapshot (into ../../blobs) resolve as before. Docker cleans the
    paths, so a trailing slash on either side matches."""
    mapping, notes = _import_service(tmp_path, f"    command: [\"{model}\", --served-model-name, chat]\n",
                                     volumes=volume)
    assert mapping["model"]["weights_dir"] == weights and mapping["model"]["mount"] == mount
    parent = volume.strip()[2:].split(":")
    if posixpath.normpath(parent[1]) != posixpath.normpath(model):
        assert {"source": parent[0], "target": parent[1], **({"options": "ro"} if len(parent) > 2 else {})} \
            in mapping["container"]["volumes"]
        assert any("the whole mount is kept" in n for n in notes)


def test_a_named_volume_above_the_model_does_not_hold_it(tmp_path):
    """A named volume has no host path for a subdirectory: only its exact target holds the model."""
    with pytest.raises(ServedeckError, match="no volume is mounted at the model path"):
        _import_service(tmp_path, "    command: [/models/m]\n", volumes="      - models:/models\n")


@pytest.mark.parametrize("volume, noted", [("      - /srv/weights:/data/weights\n", False),
                                           ("      - /srv/weights:/data\n", False),
                                           ("      - /srv/other:/srv/other\n", True)])
def test_a_download_dir_on_a_volume_keeps_the_downloads(tmp_path, volume, noted):
    """vLLM downloads a repo id into ``--download-dir`` (not the Hugging Face cache) when one is
    given: a volume holding it keeps the weights, so no note says they are downloaded again."""
    mapping, notes = _import_service(tmp_path, "    command: [example/model-7b, --served-model-name, chat, "
                                               "--download-dir, /data/weights]\n", volumes=volume)
    assert mapping["model"]["repo_id"] == "example/model-7b"
    assert "--download-dir" in mapping["engine"]["extra_args"]
    assert any("no mount keeps --download-dir /data/weights" in n for n in notes) is noted


@pytest.mark.parametrize("command", ["    command: [/models/m, --config, /cfg/vllm.yaml]\n",
                                     "    command: [--config=/cfg/vllm.yaml]\n"])
def test_a_config_file_is_refused_naming_it(tmp_path, command):
    """vLLM reads ``--config FILE`` and puts its settings before the command line's, so the
    rendered command's own served name, port and model would override what the file sets."""
    with pytest.raises(ServedeckError, match="--config /cfg/vllm.yaml") as exc:
        _import_service(tmp_path, command)
    assert exc.value.field.startswith("services.llm.command[")


@pytest.mark.parametrize("service, volumes, weights, mount", [
    ("    working_dir: /app\n    command: [models/m]\n", "      - /srv/models/m:/app/models/m\n",
     "/srv/models/m", "/app/models/m"),
    ("    working_dir: /app\n    command: [./models/m]\n", "      - /srv/models:/app/models\n",
     "/srv/models/m", "/app/models/m"),
    ("    command: [models/m]\n", "      - /srv/models:/models\n", "/srv/models/m", "/models/m"),
])
def test_a_relative_model_path_is_read_from_the_working_directory(tmp_path, service, volumes, weights, mount):
    """vLLM takes the model as a local directory when one exists at that path in the server's
    working directory (compose working_dir, else the image's WorkingDir, else /): a mount there
    makes ``models/m`` a path, not the Hugging Face repo ``models/m``."""
    mapping, notes = _import_service(tmp_path, service, volumes)
    assert (mapping["model"].get("weights_dir"), mapping["model"].get("mount")) == (weights, mount)
    assert "repo_id" not in mapping["model"]
    assert mapping["model"]["served_model_name"] == [service.split("[")[1].split("]")[0]]


def test_a_relative_model_without_a_mount_there_is_a_repo_id(tmp_path):
    mapping, _ = _import_service(tmp_path, "    working_dir: /app\n    command: [org/model-7b]\n",
                                 "      - /srv/hf:/root/.cache/huggingface\n")
    assert mapping["model"]["repo_id"] == "org/model-7b"
