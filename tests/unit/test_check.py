"""Unit tests for servedeck.compose.check: every rule family with inputs that must and must not be flagged."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from servedeck.model.catalog import Catalog
from servedeck.compose.check import CheckExpectations, check_compose_text, findings_to_json, format_findings
from servedeck.findings import Severity

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "compose"
EXL3 = "ghcr.io/0xsero/exl3xpu@sha256:21412bdd7535e9c653eeb3d099dce3bc79a83d440def2cd9556111c79c870fa8"
D_VLLM = "sha256:" + "a" * 64
D_CPU = "sha256:" + "c" * 64
D_CUDA = "sha256:" + "d" * 64
D_OLD = "sha256:" + "e" * 64


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """The real catalog plus vllm-launcher images (xpu 0.33, cpu 0.32, cuda 0.11, xpu 0.10.2)."""
    text = (ROOT / "deploy" / "images.yaml").read_text()
    extra = textwrap.dedent(f"""\
      {D_VLLM}:
        repository: vllm/vllm-openai-xpu
        launcher: vllm
        vllm_version: 0.33.0
        device: xpu
        entrypoint: [vllm, serve]
      {D_CPU}:
        repository: servedeck/vllm-cpu
        launcher: vllm
        vllm_version: 0.32.0
        device: cpu
        entrypoint: [vllm, serve]
      {D_CUDA}:
        repository: vllm/vllm-openai
        launcher: vllm
        vllm_version: 0.11.0
        device: cuda
        entrypoint: [vllm, serve]
      {D_OLD}:
        repository: vllm/vllm-openai-xpu
        launcher: vllm
        vllm_version: 0.10.2
        device: xpu
        entrypoint: [vllm, serve]
    """)
    path = tmp_path_factory.mktemp("cat") / "images.yaml"
    path.write_text(text + textwrap.indent(extra, "  "))
    return Catalog(path)


def run(text: str, catalog: Catalog | None = None, **expect) -> list:
    return check_compose_text(textwrap.dedent(text), file="t.yml", catalog=catalog,
                              expect=CheckExpectations(**expect) if expect else None)


def rules(findings, severity: str | None = None) -> list[str]:
    return [f.rule for f in findings if severity is None or f.severity.value == severity]


def xpu(cmd: str = "", extra: str = "", image: str = EXL3) -> str:
    """An exl3xpu service that passes every rule; ``cmd`` lines are appended to its command."""
    body = f"""\
    services:
      s:
        image: {image}
        restart: "no"
        ports: ["8100:8100"]
        devices: [/dev/dri]
        group_add: ["992"]
        volumes: ["/srv/models/q:/models/q:ro"]
        command:
          - models/qwen3.8-27b-exl3-4.00bpw
          - --gpu
          - "0"
          - --model-path
          - /models/q
    """
    body = textwrap.dedent(body)
    for line in textwrap.dedent(cmd).splitlines():
        if line.strip():
            body += f"      {line}\n"
    return body + textwrap.dedent(extra)


def vsvc(cmd: str, digest: str = D_VLLM, extra: str = "", port: str = "8000:8000",
         model: str | None = "example/model-7b") -> str:
    """A vllm-launcher service with the given command items (after ``model``, its first item,
    unless None). Clean as issue 30's rules want it: the Hugging Face cache mounted where
    huggingface_hub looks, and a --max-model-len (unless ``cmd`` gives one)."""
    body = textwrap.dedent(f"""\
    services:
      v:
        image: vllm/vllm-openai-xpu@{digest}
        restart: "no"
        ports: ["{port}"]
        devices: [/dev/dri]
        group_add: ["992"]
        shm_size: "4g"
        volumes: ["/srv/hf:/root/.cache/huggingface"]
        command:
    """)
    if model is not None:
        body += f"      - {model}\n"
        if "--max-model-len" not in cmd:
            body += "      - --max-model-len\n      - '8192'\n"
    for line in textwrap.dedent(cmd).splitlines():
        if line.strip():
            body += f"      {line}\n"
    return body + textwrap.dedent(extra)


# ----------------------------------------------------------------------------- baseline + seed


def test_clean_exl3xpu_service_has_no_findings(catalog):
    assert run(xpu(), catalog) == []


def test_seed_compose_gives_only_whitespace_finding(catalog):
    text = (FIX / "seed-run3.yml").read_text()
    assert "--served-model-name \n" in text  # the trailing space is kept
    found = check_compose_text(text, file="seed-run3.yml", catalog=catalog)
    ws = [f for f in found if f.rule == "argv/whitespace"]
    assert len(ws) == 1 and ws[0].path == "services.exl3xpu.command[18]" and ws[0].line == 38
    # YAML drops trailing whitespace of an unquoted item: the server gets "--served-model-name"
    assert ws[0].severity is Severity.warning
    assert rules(found, "error") == []


def test_seed_quoted_whitespace_is_the_one_error(catalog):
    found = check_compose_text((FIX / "seed-run3-quoted.yml").read_text(), catalog=catalog)
    assert rules(found, "error") == ["argv/whitespace"]
    assert [f.path for f in found if f.severity is Severity.error] == ["services.exl3xpu.command[18]"]


def test_seed_fixed_has_no_errors(catalog):
    found = check_compose_text((FIX / "seed-run3-fixed.yml").read_text(), catalog=catalog)
    assert rules(found, "error") == []
    assert rules(found, "warning") == ["restart/loops-on-failure"]


def test_bad_fixture_flags_every_brief_example():
    found = check_compose_text((FIX / "bad-vllm-latest.yml").read_text())
    errs = set(rules(found, "error"))
    assert {"image/not-pinned", "yaml11/port-sexagesimal", "yaml11/env-boolean", "argv/flag-value-joined",
            "argv/leaked-quotes", "vllm/auto-tool-choice-needs-parser", "ports/mismatch"} <= errs


def test_good_fixture_unknown_digest_runs_device_rules_on_inferred_facts():
    found = check_compose_text((FIX / "good-vllm-pinned.yml").read_text())
    # first contact: vllm/vllm-openai is an official CUDA image, so the missing GPU request counts
    # and the advisory of issue 30: no --max-model-len while the model's facts are unknown
    assert rules(found) == ["gpu/no-device", "image/unknown-digest", "vllm/no-max-model-len"]
    info = next(f for f in found if f.rule == "image/unknown-digest")
    assert "inferred" in info.message and "cuda" in info.message


# ----------------------------------------------------------------------------- yaml


def test_syntax_error_is_one_finding_with_line():
    found = run("services:\n  s:\n    image: [unclosed\n    ports: x\n")
    assert len(found) == 1 and found[0].rule == "yaml/syntax" and found[0].line is not None


def test_duplicate_key_is_error():
    found = run("services:\n  s:\n    image: a@sha256:" + "0" * 64 + "\n    image: b\n")
    assert rules(found) == ["yaml/duplicate-key"] and found[0].line == 4


def test_merge_keys_are_applied(catalog):
    text = 'x-env: &env\n  HF_HUB_OFFLINE: "1"\n' + xpu().replace(
        '    restart: "no"\n', '    restart: "no"\n    environment:\n      <<: *env\n      A: "b"\n')
    assert run(text, catalog) == []


# ----------------------------------------------------------------------------- schema


def test_schema_unknown_key_with_suggestion(catalog):
    found = run(xpu().replace("devices:", "devicez:"), catalog)
    f = next(f for f in found if f.rule == "schema/unknown-key")
    assert f.path == "services.s.devicez" and "devices" in (f.hint or "") and f.line == 6


def test_schema_type_error_has_path(catalog):
    found = run(xpu().replace('restart: "no"', "restart: [no]"), catalog)
    assert any(f.rule.startswith("schema/") and f.path == "services.s.restart" for f in found)


def test_schema_unquoted_int_in_command_is_flagged(catalog):
    found = run(xpu().replace('      - "0"\n', "      - 0\n"), catalog)
    assert any(f.rule.startswith("schema/") and f.path.startswith("services.s.command") for f in found)


# ----------------------------------------------------------------------------- image


@pytest.mark.parametrize("image,rule", [
    ("vllm/vllm-openai:latest", "image/not-pinned"),
    ("ghcr.io/0xsero/exl3xpu:0.1.0", "image/not-pinned"),
    ("ghcr.io/0xsero/exl3xpu@sha256:21412bdd", "image/bad-digest"),
    ("ghcr.io/0xsero/exl3xpu@md5:" + "0" * 32, "image/bad-digest"),
])
def test_image_errors(image, rule):
    found = run(f"services:\n  s:\n    image: {image}\n")
    assert rule in rules(found, "error")


def test_image_tag_and_digest_and_unknown(catalog):
    found = run(xpu(image="ghcr.io/0xsero/exl3xpu:0.1.0@" + EXL3.split("@")[1]), catalog)
    assert rules(found) == ["image/tag-and-digest"]
    found = run(xpu(image="ghcr.io/0xsero/exl3xpu@sha256:" + "1" * 64), catalog)
    assert rules(found) == ["image/unknown-digest"]


def test_image_repository_mismatch(catalog):
    found = run(xpu(image="docker.io/other/img@" + EXL3.split("@")[1]), catalog)
    assert "image/repository-mismatch" in rules(found, "warning")


# ----------------------------------------------------------------------------- yaml11


@pytest.mark.parametrize("snippet,rule,severity", [
    ("ports: [2122:22]", "yaml11/port-sexagesimal", "error"),
    ("environment: {HF_HUB_OFFLINE: yes}", "yaml11/env-boolean", "error"),
    ("environment: {HF_HUB_OFFLINE: 1}", "yaml11/env-number", "warning"),
    ("environment: {RATIO: 0.10}", "yaml11/env-number", "error"),
    ("environment: {MASK: 0123}", "yaml11/octal", "error"),
    ("environment: {N: 1e3}", "yaml11/float", "warning"),
    ("labels: {enabled: on}", "yaml11/boolean", "warning"),
    ("group_add: [992]", "yaml11/group-add-number", "warning"),
    ("labels: {at: 2024-01-02}", "yaml11/timestamp", "warning"),
])
def test_yaml11_flagged(snippet, rule, severity):
    found = run(f"services:\n  s:\n    image: a@sha256:{'0' * 64}\n    {snippet}\n")
    assert (rule, severity) in [(f.rule, f.severity.value) for f in found]
    assert next(f for f in found if f.rule == rule).line == 4


@pytest.mark.parametrize("snippet", [
    'ports: ["2122:22"]', "ports: [8000:8000]", 'environment: {HF_HUB_OFFLINE: "yes"}',
    "environment: {HF_HUB_OFFLINE: '1'}", 'group_add: ["0992"]', "environment: [HF_HUB_OFFLINE=1]",
    "labels: {a: some text}",
])
def test_yaml11_not_flagged(snippet):
    found = run(f"services:\n  s:\n    image: a@sha256:{'0' * 64}\n    {snippet}\n")
    assert [r for r in rules(found) if r.startswith(("yaml11/", "schema/"))] == []


# ----------------------------------------------------------------------------- argv


@pytest.mark.parametrize("item,rule", [
    ('"--served-model-name chat"', "argv/flag-value-joined"),
    ("'''{\"method\":\"ngram\",\"num_speculative_tokens\":3}'''", "argv/leaked-quotes"),
    ('"--served-model-name "', "argv/whitespace"),
    ('" --enforce-eager"', "argv/whitespace"),
    ("--served-model-name='chat'", "argv/leaked-quotes"),
])
def test_argv_item_errors(catalog, item, rule):
    found = run(xpu(f"- --\n- {item}\n- chat2"), catalog)
    assert rule in rules(found, "error")


@pytest.mark.parametrize("items", [
    "- --set=vllm.max_num_seqs=8",
    "- --\n- --served-model-name=chat",
    '- --\n- --speculative-config\n- \'{"method":"ngram","num_speculative_tokens":3}\'',
    '- --\n- --compilation-config\n- "3"',
    "- --\n- --enforce-eager",
])
def test_argv_fine(catalog, items):
    found = run(xpu(items), catalog)
    assert [r for r in rules(found) if r.startswith("argv/")] == []


def test_argv_invalid_json_flag_and_set(catalog):
    found = run(xpu("""\
    - --set
    - vllm.limit_mm_per_prompt={image:1, video
    - --
    - --speculative-config
    - "{method: ngram}"
    """), catalog)
    assert rules(found, "error").count("argv/invalid-json") == 2


def test_argv_missing_value(catalog):
    found = run(xpu("- --\n- --tool-call-parser\n- --enable-auto-tool-choice"), catalog)
    f = next(f for f in found if f.rule == "argv/missing-value")
    assert f.path == "services.s.command[6]"
    found = run(xpu("- --port"), catalog)
    assert "argv/missing-value" in rules(found, "error")


def test_argv_string_command_warns(catalog):
    text = (xpu().split("    command:")[0]
            + "    command: models/qwen3.8-27b-exl3-4.00bpw --gpu 0 --model-path /models/q\n")
    assert rules(run(text, catalog)) == ["argv/string-command"]


# ----------------------------------------------------------------------------- launcher


def test_launcher_set_and_passthrough(catalog):
    found = run(xpu("""\
    - --set
    - vllm.max_num_batched_tokens=8192
    - --
    - --max-num-batched-tokens
    - "4096"
    """), catalog)
    f = next(f for f in found if f.rule == "launcher/set-and-passthrough")
    assert f.severity is Severity.warning and f.path == "services.s.command[8]"


def test_launcher_passthrough_duplicates_config(catalog):
    found = run(xpu("- --\n- --max-model-len\n- '65536'"), catalog)
    assert rules(found) == ["launcher/passthrough-duplicates-config"]


def test_launcher_env_overridden(catalog):
    text = xpu().replace('    restart: "no"\n',
                         '    restart: "no"\n    environment:\n      EXL3_INT8_PREFILL: "0"\n      OK: "1"\n')
    found = run(text, catalog)
    f = next(f for f in found if f.rule == "launcher/env-overridden")
    assert f.path == "services.s.environment.EXL3_INT8_PREFILL" and "--set env.EXL3_INT8_PREFILL" in f.hint
    assert rules(found) == ["launcher/env-overridden"]


@pytest.mark.parametrize("prefix", ["- python3\n- scripts/serve.py", "- vllm\n- serve",
                                    "- /opt/venv/bin/vllm\n- serve", "- python3.12\n- -u\n- /app/serve.py",
                                    "- python\n- -m\n- vllm.entrypoints.openai.api_server",
                                    "- env\n- A=1\n- vllm\n- serve"])
def test_launcher_entrypoint_repeated(catalog, prefix):
    """A command that starts the server again after the image's entrypoint (the same server
    starts the launchers know, :func:`servedeck.launchers.server.start_of`, by any path or wrapper)."""
    text = xpu().replace("      - models/qwen3.8", "".join(f"      {p}\n" for p in prefix.splitlines())
                         + "      - models/qwen3.8")
    assert "launcher/entrypoint-repeated" in rules(run(text, catalog), "error")


@pytest.mark.parametrize("items,rule,severity", [
    ("- --set\n- vllm.max_num_seqs", "launcher/set-malformed", "error"),
    ("- --set\n- =3", "launcher/set-malformed", "error"),
    ("- --set\n- vllm.=3", "launcher/set-malformed", "error"),
    ("- --set\n- vllm.enable_prefix_caching=false", "launcher/set-false-omits", "warning"),
    ("- --model\n- x", "launcher/abbreviation", "warning"),
    ("- --p\n- '1'", "launcher/abbreviation-ambiguous", "error"),
])
def test_launcher_set_and_abbreviations(catalog, items, rule, severity):
    found = run(xpu(items), catalog)
    assert (rule, severity) in [(f.rule, f.severity.value) for f in found]


def test_launcher_after_double_dash_no_abbreviation(catalog):
    found = run(xpu("- --\n- --model\n- x"), catalog)
    assert "launcher/abbreviation" not in rules(found)


# ----------------------------------------------------------------------------- vllm


def test_vllm_auto_tool_choice(catalog):
    assert "vllm/auto-tool-choice-needs-parser" in rules(run(xpu("- --enable-auto-tool-choice"), catalog), "error")
    ok = run(xpu("- --enable-auto-tool-choice\n- --tool-call-parser\n- qwen3_coder"), catalog)
    assert rules(ok) == []


def test_vllm_unknown_parser_did_you_mean(catalog):
    found = run(xpu("- --enable-auto-tool-choice\n- --tool-call-parser\n- qwen3_xlm"), catalog)
    f = next(f for f in found if f.rule == "vllm/unknown-tool-call-parser")
    # bracketing tables: 0.11.0 and the extracted 0.32.0
    assert "qwen3_xml" in f.hint and "0.24" not in f.message and "0.11.0..0.32.0" in f.message


def test_vllm_names_by_version(catalog):
    # `mtp` is absent in 0.10.2, valid in 0.33; qwen3_5_mtp uncertain between 0.11 and 0.33 (exl3xpu 0.26)
    assert "vllm/unknown-speculative-method" in rules(run(vsvc(
        "- --speculative-config\n- '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'", D_OLD), catalog))
    assert rules(run(vsvc("- --speculative-config\n- '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'\n"
                          "- --max-num-batched-tokens\n- '8192'"), catalog)) == []
    found = run(xpu("- --set\n- vllm.speculative_config.method=qwen3_5_mtp"), catalog)
    assert "vllm/uncertain-speculative-method" in rules(found, "warning")
    found = run(vsvc("- --kv-cache-dtype\n- fp9\n- --reasoning-parser\n- qwen4"), catalog)
    assert {"vllm/unknown-kv-cache-dtype", "vllm/unknown-reasoning-parser"} <= set(rules(found, "error"))


def test_vllm_names_skipped_for_unknown_digest():
    found = run(vsvc("- --reasoning-parser\n- qwen4", "sha256:" + "9" * 64))
    assert rules(found) == ["image/unknown-digest"]


@pytest.mark.parametrize("items,rule", [
    ("- --set\n- vllm.gpu_memory_utilization=1.2", "vllm/gpu-memory-utilization-range"),
    ("- --set\n- vllm.gpu_memory_utilization=0", "vllm/gpu-memory-utilization-range"),
    ("- --set\n- vllm.max_num_batched_tokens=8", "vllm/batched-tokens-below-max-num-seqs"),
    ("- --\n- --no-enable-chunked-prefill", "vllm/batched-tokens-below-max-model-len"),
    ("- --set\n- vllm.speculative_config.num_speculative_tokens=0", "vllm/num-speculative-tokens"),
    ("- --\n- --disable-log-requests", "vllm/disable-log-requests-removed"),
])
def test_vllm_constraints(catalog, items, rule):
    assert rule in rules(run(xpu(items), catalog), "error")


def test_vllm_constraints_fine_and_spec_info(catalog):
    found = run(xpu("- --set\n- vllm.gpu_memory_utilization=1.0\n- --\n- --no-enable-log-requests"), catalog)
    assert rules(found) == []
    # image default MNBT 4096 with MTP: only an info; raising it to 8192 removes it
    found = run(xpu("- --set\n- vllm.speculative_config.num_speculative_tokens=2"), catalog)
    assert rules(found) == ["vllm/spec-scheduled-tokens"]
    assert rules(run(xpu("- --set\n- vllm.speculative_config=null"), catalog)) == []


# ----------------------------------------------------------------------------- interpolation


@pytest.mark.parametrize("item,rule,severity", [
    ("--served-model-name=$NAME", "interpolation/unintended", "warning"),
    ("vllm.hf_overrides={\"a\":\"${X}\"}", "interpolation/unintended", "warning"),
    ("cost$", "interpolation/invalid", "error"),
    ("a$1", "interpolation/invalid", "error"),
    ("${unclosed", "interpolation/invalid", "error"),
])
def test_interpolation_flagged(catalog, item, rule, severity):
    found = run(xpu(f"- --set\n- '{item}'"), catalog)
    assert (rule, severity) in [(f.rule, f.severity.value) for f in found]


@pytest.mark.parametrize("item", ["price $$5", "plain"])
def test_interpolation_fine(catalog, item):
    found = run(xpu(f"- --set\n- 'served_model_name={item}'"), catalog)
    assert [r for r in rules(found) if r.startswith("interpolation/")] == []


def test_interpolation_valid_forms_are_not_errors_and_env_is_fine(catalog):
    found = run(xpu("- --set\n- 'served_model_name=${X:-d}${Y?e}$Z'"), catalog)
    assert [r for r in rules(found) if r.startswith("interpolation/")] == ["interpolation/unintended"]
    text = xpu().replace('    restart: "no"\n', '    restart: "no"\n    environment:\n      TOKEN: "${HF_TOKEN}"\n')
    assert rules(run(text, catalog)) == []


# ----------------------------------------------------------------------------- ports


def test_ports_mismatch_and_match(catalog):
    found = run(vsvc("- --port\n- '8000'", port="8100:8100"), catalog)
    f = next(f for f in found if f.rule == "ports/mismatch")
    assert f.severity is Severity.error and f.path == "services.v.ports[0]" and "8000" in f.message
    assert rules(run(vsvc("- --port\n- '8100'", port="8100:8100"), catalog)) == []
    assert rules(run(vsvc("- --port=8000", port="127.0.0.1:9000:8000/tcp"), catalog)) == []
    # exl3xpu default port is the catalog's 8100; --port moves it
    assert "ports/mismatch" in rules(run(xpu("- --port\n- '8000'"), catalog))
    assert rules(run(xpu().replace("8100:8100", "8000-8200:8000-8200"), catalog)) == []


def test_ports_none_and_host_network(catalog):
    assert "ports/none" in rules(run(xpu().replace('    ports: ["8100:8100"]\n', ""), catalog), "warning")
    text = xpu().replace('    ports: ["8100:8100"]\n', "    network_mode: host\n")
    assert rules(run(text, catalog)) == []
    text = xpu().replace('    ports: ["8100:8100"]\n', '    network_mode: host\n    ports: ["8100:8100"]\n')
    assert rules(run(text, catalog)) == ["ports/ignored-with-host-network"]


# ----------------------------------------------------------------------------- gpu


def test_gpu_xpu_device_and_groups(catalog):
    assert "gpu/no-device" in rules(run(xpu().replace("    devices: [/dev/dri]\n", ""), catalog), "error")
    assert rules(run(xpu().replace("[/dev/dri]", "[/dev/dri/renderD128]"), catalog)) == []
    text = xpu().replace("    devices: [/dev/dri]\n", "    privileged: true\n")
    assert "gpu/no-device" not in rules(run(text, catalog))
    assert "gpu/render-gid-mismatch" in rules(run(xpu(), catalog, render_gid="993"), "error")
    assert rules(run(xpu(), catalog, render_gid="992")) == []
    assert "gpu/no-group-add" in rules(run(xpu().replace('    group_add: ["992"]\n', ""), catalog), "warning")
    found = run(xpu().replace('["992"]', "[render]"), catalog)
    assert rules(found) == ["gpu/group-name"]


@pytest.mark.parametrize("shm,bad", [(None, True), ('"512m"', True), ("67108864", True),
                                     ('"1g"', False), ('"8gb"', False)])
def test_gpu_cpu_shm(catalog, shm, bad):
    text = vsvc("- --max-model-len\n- '2048'", D_CPU).replace('    shm_size: "4g"\n',
                                                              f"    shm_size: {shm}\n" if shm else "")
    assert ("gpu/shm-too-small" in rules(run(text, catalog), "error")) is bad


def test_gpu_cuda(catalog):
    assert "gpu/no-device" in rules(run(vsvc("- --max-model-len\n- '2048'", D_CUDA), catalog))
    text = vsvc("- --max-model-len\n- '2048'", D_CUDA).replace(
        "    shm_size:", "    deploy: {resources: {reservations: {devices: [{capabilities: [gpu]}]}}}\n    shm_size:")
    assert "gpu/no-device" not in rules(run(text, catalog))


# ----------------------------------------------------------------------------- restart


@pytest.mark.parametrize("value,rule", [("always", "restart/loops-on-failure"),
                                        ("unless-stopped", "restart/loops-on-failure"),
                                        ("on-failure", "restart/loops-on-failure"),
                                        ("no", "restart/no-unquoted"),
                                        ('"no"', None), ("on-failure:3", None)])
def test_restart(catalog, value, rule):
    found = rules(run(xpu().replace('restart: "no"', f"restart: {value}"), catalog))
    assert found == ([rule] if rule else [])


# ----------------------------------------------------------------------------- paths


@pytest.mark.parametrize("volume,rule,severity", [
    ("/home/me/models/q:/models/q:ro", "paths/machine-specific", "warning"),
    ("~/models/q:/models/q:ro", "paths/machine-specific", "warning"),
    ("/Users/me/q:/models/q:ro", "paths/machine-specific", "warning"),
    ("${HOME}/models/q:/models/q:ro", "paths/home-variable", "warning"),
    ("/:/host:ro", "paths/dangerous-bind", "error"),
    ("/dev:/dev", "paths/dangerous-bind", "error"),
    ("./models/q:/models/q:ro", "paths/relative", "info"),
    ("/srv/models/q:/models/q:ro,Z", "paths/selinux-relabel", "info"),
    ("/srv/models/q:/models/q", "paths/weights-rw", "info"),
])
def test_paths_flagged(catalog, volume, rule, severity):
    found = run(xpu().replace("/srv/models/q:/models/q:ro", volume), catalog)
    assert (rule, severity) in [(f.rule, f.severity.value) for f in found]


def test_paths_fine(catalog):
    text = xpu().replace('["/srv/models/q:/models/q:ro"]',
                         '["/srv/models/q:/models/q:ro", "cache:/root/.cache", "/dev/dri/by-path:/dev/dri/by-path:ro"]')
    assert rules(run(text, catalog)) == []


def test_paths_relative_message_depends_on_rendered(catalog):
    text = xpu().replace("/srv/models/q:/models/q:ro", "./q:/models/q:ro")
    a = next(f for f in run(text, catalog) if f.rule == "paths/relative")
    b = next(f for f in run(text, catalog, rendered=True) if f.rule == "paths/relative")
    assert "working directory" in b.message and "working directory" not in a.message


# ----------------------------------------------------------------------------- output


def test_format_and_json(catalog):
    found = check_compose_text((FIX / "bad-vllm-latest.yml").read_text(), file="bad.yml")
    text = format_findings(found)
    assert "image/not-pinned" in text and "bad.yml:4" in text and text.splitlines()[-1].startswith("8 errors")
    assert "gpu/no-device" in text  # vllm/vllm-openai is inferred to be a CUDA image (first contact)
    data = json.loads(findings_to_json(found))
    assert data[0]["rule"] == found[0].rule and {"severity", "line", "path", "hint"} <= set(data[0])
    assert format_findings([]) == "no findings"
    lines = [f.line for f in found]
    assert lines == sorted(lines)


@pytest.mark.parametrize("body,warned", [
    ("container:\n  environment:\n    VLLM_API_KEY: '${MY_KEY}'\n", ["environment.VLLM_API_KEY"]),
    ("engine:\n  extra_args: ['--api-key', '$MY_KEY']\n", ["command["]),
    ("container:\n  environment:\n    PRICE: 'costs $5'\n", []),
    ("container:\n  compose_extra:\n    labels: {owner: '${USER}'}\n", []),  # verbatim: Compose substitutes
])
def test_a_profile_value_that_looks_like_a_compose_variable_is_warned_as_literal(tmp_path, body, warned):
    """The renderer writes a profile's ``$`` as ``$$``: ``${MY_KEY}`` reaches the server as those
    characters. A value with a literal ``$`` that names nothing, and compose_extra (rendered
    verbatim, so Compose does substitute there), are not warned."""
    from servedeck.compose.render import render_profile
    from servedeck.model.profile import ProfileStore
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "speed.yaml").write_text((ROOT / "profiles" / "speed.yaml").read_text())
    (profiles / "base.yaml").write_text((ROOT / "profiles" / "base.yaml").read_text())
    (profiles / "v.yaml").write_text("extends: speed\n" + body)
    catalog = Catalog(ROOT / "deploy" / "images.yaml")
    text = render_profile(ProfileStore(profiles).load("v"), catalog, ROOT / "templates").compose_text
    found = [f for f in check_compose_text(text, catalog=catalog, expect=CheckExpectations(rendered=True))
             if f.rule == "interpolation/literal"]
    assert [f.severity for f in found] == [Severity.warning] * len(warned)
    assert all(w in f.path for f, w in zip(found, warned))
    if warned:
        assert "$MY_KEY is not substituted" in found[0].message and "env_file" in found[0].hint
    # the same text, checked as a hand-written file, is not servedeck's to judge this way
    assert not [f for f in check_compose_text(text, catalog=catalog) if f.rule == "interpolation/literal"]


# ----------------------------------------------------------------- where each rule lives

#: rules a module emits beside its own family, and why
_GUESTS = {("argv", "entrypoint"): "entrypoint/api-server-positional: the model argument of the api_server start",
           ("flags", "json"): "json/*: the keys of JSON-valued flags, judged with the flags' own release facts"}


def _emitted_families(path):
    """The rule families a rule module emits: the ``family/`` of every rule id given to a
    finding call (``ctx.error("ports/mismatch", ...)``, f-strings included)."""
    import ast
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        name = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else (
            node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None)
        if name in ("error", "warning", "info", "add", "report") and node.args:
            first = node.args[0]
            text = first.value if isinstance(first, ast.Constant) else (
                first.values[0].value if isinstance(first, ast.JoinedStr) and isinstance(first.values[0], ast.Constant)
                else None)
            if isinstance(text, str) and "/" in text:
                out.add(text.split("/", 1)[0])
    return out


def test_each_rule_family_lives_in_the_module_named_after_it():
    rules_dir = Path(__file__).resolve().parents[2] / "servedeck" / "compose" / "rules"
    modules = {p.stem: p for p in rules_dir.glob("*.py") if not p.stem.startswith("_")}
    emitted = {name: _emitted_families(path) for name, path in modules.items()}
    for name, families in emitted.items():
        assert families, f"{name}.py emits no rule"
        strangers = {f for f in families if f != name and (name, f) not in _GUESTS}
        assert not strangers, f"{name}.py emits {sorted(strangers)}: move them to their family's module"
    homes = {f for families in emitted.values() for f in families}
    assert homes - set(modules) == {g for _, g in _GUESTS} - set(modules)


@pytest.mark.parametrize("value", ["5", "true", "1.5", "{a: b}"])
@pytest.mark.parametrize("key", ["command", "entrypoint"])
def test_a_command_compose_refuses_by_its_type_is_a_finding_not_a_crash(key, value):
    """Compose: "services.a.command must be a null, string or array" (v2.40.3); the check says
    so at the key and reads the service on (it raised TypeError before)."""
    text = f"services:\n  a:\n    image: busybox@sha256:{'0' * 64}\n    {key}: {value}\n"
    errors = [(f.rule, f.path) for f in check_compose_text(text) if f.severity is Severity.error]
    assert ("schema/one-of", f"services.a.{key}") in errors
