"""Rule families of the check, each as a kind with its variants: GPU requests (NVIDIA and Intel),
server vs container, environment, flags judged by the release's own facts, JSON-valued flags,
features that need each other, entrypoint semantics, first contact with an unknown digest.

The image under test is a CUDA image with vLLM 0.32.0, judged by the shipped table extracted from
the CPU vLLM 0.32.0 image (``servedeck/vllm/tables/vllm-0.32.0.json``).
"""

from __future__ import annotations

import textwrap

import pytest

from servedeck.compose.check import check_compose_text
from servedeck.compose.rules._context import CheckExpectations
from servedeck.model.catalog import Catalog, ImageFacts

D = "sha256:" + "f" * 64
D_XPU = "sha256:" + "b" * 64
IMG = f"example/llm@{D}"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    cat = Catalog(tmp_path_factory.mktemp("cat") / "images.yaml")
    cat.add(D, ImageFacts(repository="example/llm", launcher="vllm", vllm_version="0.32.0", device="cuda",
                          entrypoint=["vllm", "serve"],
                          binaries={"curl": False, "wget": False, "python3": True, "bash": True}))
    cat.add(D_XPU, ImageFacts(repository="example/llm-xpu", launcher="vllm", vllm_version="0.32.0",
                              device="xpu", entrypoint=["/bin/bash", "/opt/entry.sh"]))
    return cat


def svc(cmd: list[str] = (), extra: str = "", gpu: str | None = None, name: str = "llm",
        top: bool = True) -> str:
    """A clean CUDA vLLM 0.32 service; ``extra`` lines are added to it, ``gpu`` replaces its
    GPU request block."""
    items = ["example/model-7b", "--max-model-len", "8192", *cmd]
    command = "".join(f"      - {item!r}\n".replace("'", '"') if '"' not in item
                      else f"      - '{item}'\n" for item in items)
    if gpu is None:
        gpu = ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
               "            - driver: nvidia\n              device_ids: [\"0\"]\n"
               "              capabilities: [gpu]\n")
    body = (f"  {name}:\n    image: {IMG}\n    ports: [\"8000:8000\"]\n    restart: \"no\"\n"
            f"    ipc: host\n    volumes: [\"/srv/hf:/root/.cache/huggingface\"]\n"  # the HF cache where hub looks
            f"    command:\n{command}{gpu}{textwrap.indent(textwrap.dedent(extra), '    ')}")
    return ("services:\n" if top else "") + body


def check(text: str, catalog: Catalog | None, **expect) -> list:
    return check_compose_text(text, file="t.yml", catalog=catalog,
                              expect=CheckExpectations(**expect) if expect else None)


def rules(found, severity: str | None = None) -> list[str]:
    return [f.rule for f in found if severity is None or f.severity.value == severity]


def test_baseline_is_clean(catalog):
    assert check(svc(), catalog) == []


# ----------------------------------------------------------------------------- GPU requests

@pytest.mark.parametrize("gpu,rule", [
    ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
     "            - {driver: nvidia, count: 1, device_ids: [\"0\"], capabilities: [gpu]}\n",
     "gpu/count-and-device-ids"),
    ("    gpus:\n      - {driver: nvidia, count: 2, device_ids: [\"0\", \"1\"]}\n", "gpu/count-and-device-ids"),
    ("", "gpu/no-device"),
    ("    devices: [/dev/dri]\n", "gpu/no-device"),
])
def test_gpu_request_errors(catalog, gpu, rule):
    assert rule in rules(check(svc(gpu=gpu), catalog), "error")


@pytest.mark.parametrize("gpu", [
    "    gpus: all\n",
    "    devices: [nvidia.com/gpu=all]\n",
    "    devices:\n      - nvidia.com/gpu=GPU-5f1c2a7e-3b4d-4e8f-9a0b-1c2d3e4f5a6b\n",
    "    runtime: nvidia\n",
    "    deploy:\n      resources:\n        reservations:\n          devices:\n"
    "            - {driver: nvidia, count: all, capabilities: [gpu]}\n",
])
def test_gpu_request_variants_accepted(catalog, gpu):
    assert rules(check(svc(gpu=gpu), catalog), "error") == []


def test_gpus_vs_parallel_sizes(catalog):
    found = check(svc(["--tensor-parallel-size", "2"]), catalog)
    f = next(f for f in found if f.rule == "gpu/fewer-than-parallel")
    assert "1 GPU" in f.message and "2 x 1 = 2" in f.message
    two = "    devices: [nvidia.com/gpu=0, nvidia.com/gpu=1]\n"
    assert rules(check(svc(["-tp", "2"], gpu=two), catalog), "error") == []
    found = check(svc(["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"], gpu=two), catalog)
    assert "gpu/fewer-than-parallel" in rules(found, "error")


def test_multi_gpu_shared_memory(catalog):
    two = "    devices: [nvidia.com/gpu=0, nvidia.com/gpu=1]\n"
    text = svc(["--tensor-parallel-size", "2"], gpu=two).replace("    ipc: host\n", "")
    assert "gpu/multi-gpu-shm" in rules(check(text, catalog), "warning")
    assert rules(check(text.replace("    restart:", "    shm_size: 16g\n    restart:"), catalog)) == []
    found = check(svc(extra="shm_size: 16g\n"), catalog)
    assert rules(found) == ["gpu/shm-size-with-ipc-host"]


def test_services_sharing_one_gpu(catalog):
    a = svc(["--gpu-memory-utilization", "0.6"])
    b = svc(["--gpu-memory-utilization", "0.6", "--port", "8001"], name="llm2", top=False).replace(
        '"8000:8000"', '"8001:8001"')
    found = check(a + b, catalog)
    f = next(f for f in found if f.rule == "gpu/shared-memory-over-1")
    assert "1.2" in f.message and "GPU 0" in f.message
    ok = a.replace("0.6", "0.45") + b.replace("0.6", "0.45")
    assert "gpu/shared-memory-over-1" not in rules(check(ok, catalog))
    # default fraction (0.92 from the release's parser) counts too
    b_default = svc(["--port", "8001"], name="llm2", top=False).replace('"8000:8000"', '"8001:8001"')
    assert "gpu/shared-memory-over-1" in rules(check(a + b_default, catalog))


# ----------------------------------------------------------------------------- server vs container

@pytest.mark.parametrize("cmd", [["--host", "127.0.0.1"], ["--host=localhost"], ["--host", "::1"]])
def test_host_loopback_behind_published_port(catalog, cmd):
    assert "server/host-loopback" in rules(check(svc(cmd), catalog), "error")


def test_host_all_interfaces_is_fine(catalog):
    assert check(svc(["--host", "0.0.0.0"]), catalog) == []


HC = ("healthcheck:\n  test: {test}\n  interval: 30s\n  start_period: {sp}\n")
PY = "[\"CMD\", \"python3\", \"-c\", \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}{path}')\"]"


def test_healthcheck_port_and_start_period(catalog):
    good = HC.format(test=PY.format(port=8000, path="/health"), sp="900s")
    assert check(svc(extra=good), catalog) == []
    bad_port = HC.format(test=PY.format(port=8001, path="/health"), sp="900s")
    assert "server/healthcheck-port" in rules(check(svc(extra=bad_port), catalog), "error")
    short = HC.format(test=PY.format(port=8000, path="/health"), sp="30s")
    assert "server/healthcheck-start-period" in rules(check(svc(extra=short), catalog), "warning")
    # a measured time to ready decides instead of the typical one
    assert check(svc(extra=short), catalog, startup_seconds=20.0) == []
    assert "server/healthcheck-start-period" in rules(check(svc(extra=good.replace("900s", "1m")), catalog,
                                                            startup_seconds=95.0))


@pytest.mark.parametrize("test", [
    '["CMD", "curl", "-f", "http://127.0.0.1:8000/health"]',
    '["CMD-SHELL", "wget -qO- http://127.0.0.1:8000/health || exit 1"]',
    '"curl -f http://127.0.0.1:8000/health"',
])
def test_healthcheck_binary_missing_in_image(catalog, test):
    found = check(svc(extra=HC.format(test=test, sp="900s")), catalog)
    f = next(f for f in found if f.rule == "server/healthcheck-binary-missing")
    assert "python3" in f.message


def test_healthcheck_needing_api_key(catalog):
    models = HC.format(test=PY.format(port=8000, path="/v1/models"), sp="900s")
    env = "environment:\n  VLLM_API_KEY: k\n"
    assert "server/healthcheck-needs-api-key" in rules(check(svc(extra=models + env), catalog), "error")
    assert "server/healthcheck-needs-api-key" in rules(check(svc(["--api-key", "k"], extra=models), catalog))
    health = HC.format(test=PY.format(port=8000, path="/health"), sp="900s")
    assert check(svc(extra=health + env), catalog) == []


# ----------------------------------------------------------------------------- environment

@pytest.mark.parametrize("item", ["VLLM_API_KEY=\"k\"", "HF_TOKEN='hf_x'"])
def test_env_list_literal_quotes(catalog, item):
    text = svc(extra=f"environment:\n  - '{item}'\n" if '"' in item else f"environment:\n  - \"{item}\"\n")
    f = next(f for f in check(text, catalog) if f.rule == "env/list-literal-quotes")
    assert item.split("=")[0] in f.message and "quote" in f.message


def test_env_without_quotes_is_fine(catalog):
    assert check(svc(extra="environment:\n  - HF_HUB_OFFLINE=1\n  - VLLM_API_KEY=k\n"), catalog) == []
    assert check(svc(extra="environment:\n  VLLM_API_KEY: \"k\"\n"), catalog) == []


def test_env_not_read_by_version(catalog):
    found = check(svc(extra="environment:\n  VLLM_USE_V1: \"0\"\n  VLLM_LOGING_LEVEL: DEBUG\n"
                            "  VLLM_LOGGING_LEVEL: DEBUG\n"), catalog)
    warned = {f.message.split()[0]: f for f in found if f.rule == "env/not-read-by-version"}
    assert set(warned) == {"VLLM_USE_V1", "VLLM_LOGING_LEVEL"}
    assert "V1" in warned["VLLM_USE_V1"].message and "VLLM_LOGGING_LEVEL" in warned["VLLM_LOGING_LEVEL"].hint


# ----------------------------------------------------------------------------- flags

@pytest.mark.parametrize("flag,hint", [
    ("--disable-log-requests", "--no-enable-log-requests"),
    ("--enable-reasoning", "--reasoning-parser"),
    ("--max-model-length", "--max-model-len"),
])
def test_flags_unknown_to_the_release(catalog, flag, hint):
    f = next(f for f in check(svc([flag]), catalog) if f.rule == "flags/unknown")
    assert f.severity.value == "error" and hint in f.hint and "0.32.0" in f.message


@pytest.mark.parametrize("value", ["16K", "128k", "1M", "auto", "-1", "25.6k", "8192"])
def test_max_model_len_human_readable_values(catalog, value):
    text = svc().replace('"--max-model-len"\n      - "8192"', f'"--max-model-len"\n      - "{value}"')
    assert rules(check(text, catalog)) == []


@pytest.mark.parametrize("cmd", [["--max-model-len", "16Q"], ["--max-num-seqs", "16K"],
                                 ["--max-num-seqs", "auto"], ["--max-num-batched-tokens=auto"]])
def test_values_the_type_function_rejects(catalog, cmd):
    assert "flags/bad-value" in rules(check(svc(cmd), catalog), "error")


def test_flag_equals_value_and_underscores_are_understood(catalog):
    assert check(svc(["--max-num-batched-tokens=16k", "--max_num_seqs", "32"]), catalog) == []


def test_flag_given_twice(catalog):
    found = check(svc(["--max-model-len", "4096"]), catalog)
    f = next(f for f in found if f.rule == "flags/repeated")
    assert "'4096'" in f.message and "last" in f.message


def test_choices(catalog):
    f = next(f for f in check(svc(["--dtype", "bfloat"]), catalog) if f.rule == "flags/bad-choice")
    assert "bfloat16" in f.hint


# ----------------------------------------------------------------------------- JSON-valued flags

def test_json_unknown_key_with_did_you_mean(catalog):
    found = check(svc(["--speculative-config", '{"method":"ngram","num_speculative_tokenz":3}']), catalog)
    f = next(f for f in found if f.rule == "json/unknown-key")
    assert "num_speculative_tokens" in f.hint and "SpeculativeConfig" in f.message
    found = check(svc(["--compilation-config", '{"cudagraph_mod":"NONE"}']), catalog)
    assert "cudagraph_mode" in next(f for f in found if f.rule == "json/unknown-key").hint


def test_json_key_of_another_flag(catalog):
    found = check(svc(["--speculative-config", '{"method":"ngram","num_speculative_tokens":3,'
                                               '"cudagraph_mode":"NONE"}']), catalog)
    f = next(f for f in found if f.rule == "json/unknown-key")
    assert "--compilation-config" in f.hint


def test_json_wrong_type(catalog):
    """Judged by the config model as vLLM validates it (pydantic, lax): ``"3"`` is an integer to
    vLLM 0.32 (seen with its own SpeculativeConfig in the CPU image), ``3.5`` and ``"three"``
    are not."""
    found = check(svc(["--compilation-config", '{"max_cudagraph_capture_size":"many"}']), catalog)
    f = next(f for f in found if f.rule == "json/bad-value")
    assert f.severity.value == "error" and "max_cudagraph_capture_size" in f.message
    for spelling in ('{"method":"ngram","num_speculative_tokens":3}',
                     '{"method":"ngram","num_speculative_tokens":"3"}'):
        assert check(svc(["--speculative-config", spelling]), catalog) == []


# ----------------------------------------------------------------------------- features, entrypoint

def test_thinking_default_without_reasoning_parser(catalog):
    kw = ["--default-chat-template-kwargs", '{"enable_thinking": true}']
    assert "features/thinking-without-reasoning-parser" in rules(check(svc(kw), catalog), "warning")
    assert check(svc(kw + ["--reasoning-parser", "qwen3"]), catalog) == []


def test_auto_tool_choice_needs_parser(catalog):
    assert "vllm/auto-tool-choice-needs-parser" in rules(check(svc(["--enable-auto-tool-choice"]), catalog))


def test_entrypoint_replacing_a_wrapper_script(catalog):
    text = (f"services:\n  x:\n    image: example/llm-xpu@{D_XPU}\n    devices: [/dev/dri]\n"
            f"    group_add: [\"992\"]\n    ipc: host\n    ports: [\"8000:8000\"]\n    restart: \"no\"\n"
            f"    entrypoint: [vllm, serve]\n    command: [example/model-7b]\n")
    f = next(f for f in check(text, catalog) if f.rule == "entrypoint/replaces-wrapper")
    assert "/opt/entry.sh" in f.message and "oneAPI" in f.message
    assert "entrypoint/replaces-wrapper" not in rules(check(text.replace("    entrypoint: [vllm, serve]\n", ""),
                                                            catalog))


def test_legacy_api_server_with_positional_model(catalog):
    legacy = svc().replace("    command:", "    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n"
                                            "    command:")
    assert "entrypoint/api-server-positional" in rules(check(legacy, catalog), "error")
    fixed = legacy.replace('      - "example/model-7b"\n', '      - "--model"\n      - "example/model-7b"\n')
    assert "entrypoint/api-server-positional" not in rules(check(fixed, catalog))


def test_command_repeating_the_entrypoint(catalog):
    text = svc().replace('      - "example/model-7b"\n', '      - vllm\n      - serve\n      - "example/model-7b"\n')
    assert "launcher/entrypoint-repeated" in rules(check(text, catalog), "error")


# ----------------------------------------------------------------------------- first contact

@pytest.mark.parametrize("image,device,version", [
    ("vllm/vllm-openai:v0.11.0", "cuda", "0.11.0"),
    ("intel/vllm:0.10.2-xpu", "xpu", "0.10.2"),
    ("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0", "cpu", "0.32.0"),
])
def test_first_contact_infers_from_repository_and_tag(image, device, version):
    text = f"services:\n  s:\n    image: {image}@sha256:{'1' * 64}\n    ports: [\"8000:8000\"]\n" \
           f"    command: [example/model-7b]\n"
    found = check_compose_text(text)  # no catalog, no Docker
    info = next(f for f in found if f.rule == "image/unknown-digest")
    assert "inferred" in info.message and device in info.message and version in info.message
    if device in ("cuda", "xpu"):
        assert "gpu/no-device" in rules(found, "error")  # device rules still run
    else:
        assert "gpu/shm-too-small" in rules(found, "error")


def test_first_contact_version_rules_still_run():
    text = (f"services:\n  s:\n    image: vllm/vllm-openai:v0.32.0@sha256:{'1' * 64}\n    gpus: all\n"
            f"    ipc: host\n    ports: [\"8000:8000\"]\n    command: [m, --disable-log-requests]\n")
    assert "flags/unknown" in rules(check_compose_text(text), "error")


@pytest.mark.parametrize("env,warned", [
    ("environment:\n  VLLM_API_KEY: abc$def1\n", True),
    ("environment:\n  - VLLM_API_KEY=abc$def1\n", True),
    ("environment:\n  HF_TOKEN: ${HF_TOKEN}\n", False),
    ("environment:\n  HF_TOKEN: $HF_TOKEN\n", False),
    ("environment:\n  VLLM_API_KEY: abc$$def1\n", False),
])
def test_dollar_in_environment_values(catalog, env, warned):
    found = check(svc(extra=env), catalog)
    assert ("interpolation/unintended" in rules(found, "warning")) is warned


QWEN3_8B = {"model_type": "qwen3", "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096,
            "max_position_embeddings": 131072}


def test_full_context_that_does_not_fit(catalog):
    no_len = svc().replace('      - "--max-model-len"\n      - "8192"\n', "")
    # 131072 tokens x 144 KiB/token = 18 GiB of KV cache > 0.9 x 16 GiB
    found = check(no_len, catalog, hf_config=QWEN3_8B, gpu_memory_gib=16)
    f = next(f for f in found if f.rule == "features/full-context-does-not-fit")
    assert "131072" in f.message and "18.0 GiB" in f.message
    assert "features/full-context-does-not-fit" not in rules(
        check(no_len, catalog, hf_config=QWEN3_8B, gpu_memory_gib=80))
    # fp8 KV cache halves it; a given --max-model-len settles it; unknown GPU size: not judged
    fp8 = svc(["--kv-cache-dtype", "fp8"]).replace('      - "--max-model-len"\n      - "8192"\n', "")
    assert check(fp8, catalog, hf_config=QWEN3_8B, gpu_memory_gib=16) == []
    assert check(svc(), catalog, hf_config=QWEN3_8B, gpu_memory_gib=16) == []
    assert check(no_len, catalog, hf_config=QWEN3_8B) == []


def test_full_context_of_a_hybrid_model_counts_only_its_attention_layers(catalog):
    """The check and the deploy's KV prediction share one KV model (servedeck.vllm.kv): in a
    hybrid model (Qwen3-Next, the user's Qwen3.8 family) the linear-attention layers hold no KV
    cache, so 9 of these 36 layers need 4.5 GiB at the full context, which fits 16 GiB."""
    from servedeck.vllm.kv import model_shape_from_config
    hybrid = {**QWEN3_8B, "layer_types": ["linear_attention"] * 3 * 9 + ["full_attention"] * 9}
    assert model_shape_from_config(hybrid).attention_layers.value == 9
    no_len = svc().replace('      - "--max-model-len"\n      - "8192"\n', "")
    assert "features/full-context-does-not-fit" not in rules(check(no_len, catalog, hf_config=hybrid,
                                                                   gpu_memory_gib=16))
    small = check(no_len, catalog, hf_config=hybrid, gpu_memory_gib=4)
    f = next(f for f in small if f.rule == "features/full-context-does-not-fit")
    assert "(4.5 GiB)" in f.message


def test_per_digest_facts_judge_before_shipped_tables(tmp_path):
    from servedeck.vllm.facts import shipped_tables
    table = shipped_tables()[(0, 32, 0)]
    own = table.model_copy(update={"source": "extracted from image example/llm (test)",
                                   "serve_args": [a for a in table.serve_args if a.dest != "max_num_seqs"]})
    cat = Catalog(tmp_path / "images.yaml")
    cat.add_with_vllm_facts(D, ImageFacts(repository="example/llm", launcher="vllm", vllm_version="0.32.0",
                                          device="cuda", entrypoint=["vllm", "serve"]), own)
    assert (tmp_path / "image-facts" / f"sha256-{'f' * 64}.json").exists()
    f = next(f for f in check(svc(["--max-num-seqs", "8"]), Catalog(tmp_path / "images.yaml"))
             if f.rule == "flags/unknown")
    assert f.severity.value == "error" and "extracted from image example/llm (test)" in f.message


def test_per_digest_facts_judge_names_before_shipped_tables(tmp_path):
    """A tool-call parser registered in the image itself (a plugin, a vendor build) is judged by the
    image's own registry, as flags are: accepted there, it is no error; missing there, it is one
    even though the shipped 0.32 table lists it."""
    from servedeck.vllm.facts import shipped_tables
    table = shipped_tables()[(0, 32, 0)]
    own = table.model_copy(update={"source": "extracted from image example/llm (test)",
                                   "tool_call_parsers": ["vendor_xml"]})
    cat = Catalog(tmp_path / "images.yaml")
    cat.add_with_vllm_facts(D, ImageFacts(repository="example/llm", launcher="vllm", vllm_version="0.32.0",
                                          device="cuda", entrypoint=["vllm", "serve"]), own)
    args = ["--enable-auto-tool-choice", "--tool-call-parser"]
    assert "vllm/unknown-tool-call-parser" not in rules(check(svc([*args, "vendor_xml"]), cat))
    f = next(f for f in check(svc([*args, "hermes"]), cat) if f.rule == "vllm/unknown-tool-call-parser")
    assert f.severity.value == "error" and "extracted from image example/llm (test)" in f.message
    # without the image's own facts, the shipped 0.32 table judges: hermes is valid, vendor_xml not
    shipped = Catalog(tmp_path / "other.yaml")
    shipped.add(D, ImageFacts(repository="example/llm", launcher="vllm", vllm_version="0.32.0",
                              device="cuda", entrypoint=["vllm", "serve"]))
    assert "vllm/unknown-tool-call-parser" not in rules(check(svc([*args, "hermes"]), shipped))
    assert "vllm/unknown-tool-call-parser" in rules(check(svc([*args, "vendor_xml"]), shipped), "error")


def test_nearest_older_table_gives_warnings_not_errors(tmp_path):
    cat = Catalog(tmp_path / "images.yaml")
    cat.add(D, ImageFacts(repository="example/llm", launcher="vllm", vllm_version="0.34.1", device="cuda",
                          entrypoint=["vllm", "serve"]))
    f = next(f for f in check(svc(["--enable-reasoning"]), cat) if f.rule == "flags/unknown")
    assert f.severity.value == "warning" and "nearest older" in f.message and "0.34.1" in f.message


@pytest.mark.parametrize("parser,model_type,warned", [
    ("mistral", "qwen3", True),
    ("glm45", "qwen3_moe", True),
    ("qwen3", "qwen3_moe", False),
    ("deepseek_r1", "qwen2", False),     # generic <think> parser, used by R1 distills
    ("openai_gptoss", "gpt_oss", False),
    ("qwen3", "llama", False),           # no llama reasoning parser in the release: not judged
])
def test_reasoning_parser_for_another_family(catalog, parser, model_type, warned):
    found = check(svc(["--reasoning-parser", parser]), catalog, hf_config={"model_type": model_type})
    assert ("features/reasoning-parser-family" in rules(found, "warning")) is warned


def test_first_contact_exl3xpu_tag_is_not_a_vllm_version():
    from servedeck.model.catalog import infer_facts
    f = infer_facts("ghcr.io/0xsero/exl3xpu", "0.1.0")
    assert f.launcher == "exl3xpu" and f.device == "xpu" and f.default_port == 8100
    assert f.vllm_version == "unknown" and f.inferred
    assert infer_facts("example/unrelated", "1.0") is None


def test_in_image_without_docker_is_a_clear_error(monkeypatch, tmp_path):
    from servedeck.compose.check import check_in_image
    from servedeck.host.inimage import judge
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    found = check_in_image(svc(), file="t.yml", judge=judge())
    assert [f.rule for f in found] == ["inimage/not-judged"] and found[0].severity.value == "error"
    assert "no Docker engine reachable" in found[0].message


def test_in_image_judges_every_image_it_can_get_and_says_why_not_for_the_others():
    from servedeck.compose.check import check_in_image_each
    from servedeck.errors import ServedeckError
    from servedeck.host.inimage import DryRunResult
    asked = []

    def judge(image, commands, entrypoint, mode):
        asked.append(image)
        if "gone" in image:
            raise ServedeckError(f"image {image} is not present and cannot be pulled: manifest unknown",
                                 hint="pull it on this engine first (docker pull REF)")
        return [DryRunResult(ok=True, stage="done", message="", vllm_argv=[], image_id="x", cached=False, seconds=0.1)
                for _ in commands]
    digest = "@sha256:" + "a" * 64
    doc = "services:\n  llm:\n    image: {}\n    command: [--model, m]\n".format
    found = check_in_image_each([(doc("example/gone" + digest), "a.yml"), (doc("example/here" + digest), "b.yml")],
                                judge=judge)
    assert asked == ["example/gone" + digest, "example/here" + digest]
    assert [(f.file, f.rule, f.line) for f in found] == [("a.yml", "inimage/not-judged", 4),
                                                         ("b.yml", "inimage/accepted", 4)]
    assert "manifest unknown" in found[0].message and found[0].hint.startswith("pull it")


@pytest.mark.parametrize("repository, tag, launcher, device, version", [
    ("vllm/vllm-openai", "v0.11.0", "vllm", "cuda", "0.11.0"),
    ("docker.io/vllm/vllm-openai", "v0.10.2", "vllm", "cuda", "0.10.2"),
    ("vllm/vllm-openai", "v0.11.0-xpu", "vllm", "xpu", "0.11.0"),
    ("intel/vllm", "0.10.2-xpu", "vllm", "xpu", "0.10.2"),
    ("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo", "v0.11.0", "vllm", "cpu", "0.11.0"),
    ("ghcr.io/example/exl3xpu", "0.2.0", "exl3xpu", "xpu", "unknown"),
])
def test_first_contact_official_repositories(repository, tag, launcher, device, version):
    from servedeck.model.catalog import infer_facts
    f = infer_facts(repository, tag)
    assert (f.launcher, f.device, f.vllm_version, f.inferred) == (launcher, device, version, True)


@pytest.mark.parametrize("repository", [
    "127.0.0.1:5000/servedeck/vllm-standin",   # a local build that only mentions vLLM
    "example/my-vllm-fork",
    "example/cpu-tools",                        # "cpu" alone says nothing about vLLM
])
def test_first_contact_guesses_nothing_for_other_repositories(repository):
    from servedeck.model.catalog import infer_facts
    assert infer_facts(repository, "latest") is None
