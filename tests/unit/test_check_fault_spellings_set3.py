"""Variants of the kinds the field-3 compose cases stand for (issue 30, item 3), each with clean
twins: device nodes vs what a multi-GPU Intel engine opens (43); where huggingface_hub looks for
its cache vs the mounts (44); path-valued server arguments vs the mounts (47); rules across
services (48); container limits vLLM needs; no --max-model-len while the model's facts are
unknown. The images are the cases' (tests/fixtures/cases/field-3/images.yaml)."""

from __future__ import annotations

import textwrap

import pytest
from test_check_field_faults_set3 import catalog  # noqa: F401  (the cases' image facts)

from servedeck.compose.check import check_compose_text
from servedeck.compose.rules._context import CheckExpectations
from servedeck.model.catalog import Catalog, ImageFacts

CUDA = "ghcr.io/example/llm-server@sha256:69ab1604404613e831db7db77dfdbd08cca1c65e5264b8d833091da753bed4a3"
XPU = "ghcr.io/example/llm-server@sha256:23ae6ed87af31d7a54f53713e5b72cd50de69a60e4b1a347d9124130f74e5c8d"
GPU = ("deploy:\n  resources:\n    reservations:\n      devices:\n"
       "        - {driver: nvidia, device_ids: [\"GPU-5f1c2a7e-3b4d-4e8f-9a0b-1c2d3e4f5a6b\"], capabilities: [gpu]}\n")


def service(command: list[str], extra: str = "", image: str = CUDA, name: str = "llm", gpu: bool = True) -> str:
    """One service of the cases' shape (model, --max-model-len, port, ipc: host, a healthcheck)."""
    items = "".join(f"    - '{c}'\n" for c in command)
    body = (f"image: {image}\ncommand:\n{items}ports: [\"8000:8000\"]\nipc: host\nrestart: \"no\"\n"
            + (GPU if gpu and image == CUDA else "") + textwrap.dedent(extra))
    return f"  {name}:\n" + textwrap.indent(body, "    ")


def compose(*services: str) -> str:
    return "services:\n" + "".join(services)


def found(text: str, cat: Catalog, **expect) -> dict[str, str]:
    out: dict[str, str] = {}
    expectations = CheckExpectations(**expect) if expect else None
    for f in check_compose_text(text, file="t.yml", catalog=cat, expect=expectations):
        if f.rule != "image/unknown-digest":
            out.setdefault(f.rule, f.severity.value)
    return out


def bad(rules: dict[str, str]) -> dict[str, str]:
    return {r: s for r, s in rules.items() if s in ("error", "warning")}


LOCAL = ["/models/m", "--max-model-len", "8192"]
WEIGHTS = "volumes: [\"/srv/models/m:/models/m:ro\"]\n"


# ============================================================================ 43: oneCCL's /dev/dri/by-path

XPU_BASE = "devices: [\"/dev/dri:/dev/dri\"]\ngroup_add: [\"992\"]\n"


@pytest.mark.parametrize("flags,extra", [
    (["--tensor-parallel-size", "2"], ""),
    (["-tp", "2"], ""),
    (["--tensor_parallel_size=4"], ""),
    (["--pipeline-parallel-size", "2"], ""),
    (["--data-parallel-size", "2", "--enable-expert-parallel"], ""),
    (["-tp", "2"], "privileged: true\n"),
], ids=["tp", "tp-alias", "underscores-equals", "pp", "dp-with-ep", "privileged"])
def test_several_intel_gpu_workers_need_the_by_path_links(catalog, flags, extra):  # noqa: F811
    text = compose(service([*LOCAL, *flags], XPU_BASE + WEIGHTS + extra, image=XPU))
    assert found(text, catalog).get("gpu/xpu-dri-by-path") == "error"


def test_separate_render_nodes_are_still_no_links(catalog):  # noqa: F811
    devices = ("devices: [/dev/dri/renderD128, /dev/dri/renderD129, /dev/dri/card1, /dev/dri/card2]\n"
               "group_add: [\"992\"]\n")
    text = compose(service([*LOCAL, "-tp", "2"], devices + WEIGHTS, image=XPU))
    assert found(text, catalog).get("gpu/xpu-dri-by-path") == "error"


@pytest.mark.parametrize("flags,extra", [
    ([], ""),                                                                    # one card
    (["-tp", "2"], "volumes: [\"/srv/models/m:/models/m:ro\", \"/dev/dri/by-path:/dev/dri/by-path:ro\"]\n"),
    (["-tp", "2"], "volumes:\n  - /srv/models/m:/models/m:ro\n  - {type: bind, source: /dev/dri/by-path, "
                   "target: /dev/dri/by-path, read_only: true}\n"),
    (["-tp", "2"], "volumes: [\"/srv/models/m:/models/m:ro\", \"/dev/dri:/dev/dri\"]\n"),   # the directory itself
    (["-tp", "2"], WEIGHTS + "environment: {CCL_ZE_IPC_EXCHANGE: sockets}\n"),
    (["-tp", "2"], "volumes: [\"/srv/models/m:/models/m:ro\", \"/dev/dri/by-path:/run/links:ro\"]\n"
                   "environment: {CCL_DRMFD_DEV_RENDER_DIR_PATH: /run/links}\n"),
    (["--data-parallel-size", "2"], WEIGHTS),                                   # no device buffers exchanged
], ids=["one-card", "bind", "long-syntax", "whole-dri", "sockets", "own-dir", "dp-alone"])
def test_by_path_clean_twins(catalog, flags, extra):  # noqa: F811
    text = compose(service([*LOCAL, *flags], XPU_BASE + (extra if "volumes" in extra else WEIGHTS + extra), image=XPU))
    assert "gpu/xpu-dri-by-path" not in found(text, catalog)


def test_a_cuda_engine_is_not_judged_by_onecc(catalog):  # noqa: F811
    assert "gpu/xpu-dri-by-path" not in found(compose(service([*LOCAL, "-tp", "2"], WEIGHTS)), catalog)


# the same family: fewer GPUs visible to the engine than its workers

BY_PATH = "volumes: [\"/srv/models/m:/models/m:ro\", \"/dev/dri/by-path:/dev/dri/by-path:ro\"]\n"


@pytest.mark.parametrize("image,extra", [
    (XPU, "devices: [/dev/dri/card0, /dev/dri/renderD128]\ngroup_add: [\"992\"]\n"),   # one card, two nodes
    (XPU, XPU_BASE + "environment: {ZE_AFFINITY_MASK: \"0\"}\n"),
    (XPU, XPU_BASE + "environment: {ONEAPI_DEVICE_SELECTOR: \"level_zero:1\"}\n"),
    (CUDA, "environment: {CUDA_VISIBLE_DEVICES: \"0\"}\n"),
    (CUDA, "environment: [\"CUDA_VISIBLE_DEVICES=\"]\n"),
], ids=["one-render-node", "ze-affinity-mask", "oneapi-selector", "cuda-visible", "cuda-visible-empty"])
def test_fewer_gpus_visible_than_tensor_parallel(catalog, image, extra):  # noqa: F811
    gpu = "gpus: all\n" if image == CUDA else ""
    text = compose(service([*LOCAL, "-tp", "2"], BY_PATH + gpu + HEALTH + extra, image=image, gpu=False))
    assert found(text, catalog).get("gpu/fewer-than-parallel") == "error"


@pytest.mark.parametrize("image,extra", [
    (XPU, "devices: [/dev/dri/card0, /dev/dri/renderD128, /dev/dri/card1, /dev/dri/renderD129]\n"
          "group_add: [\"992\"]\n"),
    (XPU, XPU_BASE + "environment: {ZE_AFFINITY_MASK: \"0,1\"}\n"),
    (XPU, XPU_BASE + "environment: {ONEAPI_DEVICE_SELECTOR: \"level_zero:*\"}\n"),
    (CUDA, "environment: {CUDA_VISIBLE_DEVICES: \"0,1\"}\n"),
], ids=["two-render-nodes", "ze-affinity-two", "oneapi-all", "cuda-visible-two"])
def test_enough_gpus_visible_clean_twins(catalog, image, extra):  # noqa: F811
    gpu = "gpus: all\n" if image == CUDA else ""
    text = compose(service([*LOCAL, "-tp", "2"], BY_PATH + gpu + HEALTH + extra, image=image, gpu=False))
    assert bad(found(text, catalog)) == {}


# ============================================================================ 44: the Hugging Face cache

REPO = ["example/model-7b", "--max-model-len", "8192"]


@pytest.mark.parametrize("extra", [
    "environment: {HF_HUB_OFFLINE: \"1\"}\nvolumes: [\"/srv/hf:/data/hf-cache\"]\n",
    "environment: [\"HF_HUB_OFFLINE=true\"]\nvolumes: [\"/srv/hf:/data/hf-cache\"]\n",
    "environment: {TRANSFORMERS_OFFLINE: \"YES\"}\nvolumes: [\"/srv/hf:/data/hf-cache\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\", HF_HOME: /data/elsewhere}\nvolumes: [\"/srv/hf:/data/hf-cache\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\", HF_HUB_CACHE: /cache/hub}\nvolumes: [\"/srv/hf:/root/.cache/huggingface\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\"}\nuser: \"1000:1000\"\nvolumes: [\"/srv/hf:/root/.cache/huggingface\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\"}\n",                                     # no cache at all
], ids=["mapping", "list", "transformers", "hf-home-elsewhere", "hub-cache-elsewhere", "uid-home-is-root",
        "no-mount"])
def test_offline_repo_id_whose_cache_is_not_where_hub_looks(catalog, extra):  # noqa: F811
    assert found(compose(service(REPO, extra)), catalog).get("cache/hf-offline-not-mounted") == "error"


@pytest.mark.parametrize("command", [
    [*LOCAL, "--tokenizer", "example/tokenizer"],
    [*LOCAL, "--speculative-config",
     '{"method": "draft_model", "model": "example/draft-1b", "num_speculative_tokens": 3}'],
], ids=["tokenizer", "draft-model"])
def test_every_repo_id_the_server_loads_counts(catalog, command):  # noqa: F811
    text = compose(service(command, WEIGHTS + "environment: {HF_HUB_OFFLINE: \"1\"}\n"))
    assert found(text, catalog).get("cache/hf-offline-not-mounted") == "error"


@pytest.mark.parametrize("extra", [
    "environment: {HF_HUB_OFFLINE: \"1\", HF_HOME: /data/hf-cache}\nvolumes: [\"/srv/hf:/data/hf-cache\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\", HF_HUB_CACHE: /data/hf-cache}\nvolumes: [\"/srv/hf/hub:/data/hf-cache\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\", HUGGINGFACE_HUB_CACHE: /data/hub}\nvolumes: [\"/srv/hf/hub:/data/hub\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\", XDG_CACHE_HOME: /data/xdg}\nvolumes: [\"/srv/xdg:/data/xdg\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\", HOME: /home/app}\nvolumes: [\"/srv/hf:/home/app/.cache/huggingface\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\"}\nvolumes: [\"/srv/hf:/root/.cache/huggingface\"]\n",
    "environment: {HF_HUB_OFFLINE: \"1\"}\nvolumes: [\"hf-cache:/root/.cache\"]\n",        # a named volume, a parent
    "environment: {HF_HUB_OFFLINE: \"0\"}\nvolumes: [\"/srv/hf:/root/.cache/huggingface\"]\n",
], ids=["hf-home", "hub-cache", "legacy-name", "xdg", "home", "default", "named-parent", "online"])
def test_offline_cache_clean_twins(catalog, extra):  # noqa: F811
    assert bad(found(compose(service(REPO, extra)), catalog)) == {}


def test_download_dir_holds_the_weights_when_mounted(catalog):  # noqa: F811
    text = compose(service([*REPO, "--download-dir", "/data/hf-cache"],
                           "environment: {HF_HUB_OFFLINE: \"1\"}\nvolumes: [\"/srv/hf:/data/hf-cache\"]\n"))
    assert bad(found(text, catalog)) == {}


def test_a_cache_set_in_the_images_own_env_counts(tmp_path):
    cat = Catalog(tmp_path / "images.yaml")
    digest = "sha256:" + "7" * 64
    cat.add(digest, ImageFacts(repository="example/llm", launcher="vllm", vllm_version="0.33.0", device="cuda",
                               entrypoint=["vllm", "serve"], env={"HF_HOME": "/data/hf"}, user=""))
    extra = "environment: {HF_HUB_OFFLINE: \"1\"}\nvolumes: [\"/srv/hf:/data/hf\"]\n"
    text = compose(service(REPO, extra, image=f"example/llm@{digest}").replace(CUDA, f"example/llm@{digest}"))
    assert "cache/hf-offline-not-mounted" not in found(text, cat)


def test_online_a_cache_mounted_elsewhere_is_a_warning_and_none_is_a_note(catalog):  # noqa: F811
    elsewhere = found(compose(service(REPO, "volumes: [\"/srv/hf:/data/hf-cache\"]\n")), catalog)
    assert elsewhere.get("cache/hf-not-mounted") == "warning"
    assert found(compose(service(REPO)), catalog).get("cache/hf-not-mounted") == "info"


def test_a_uid_without_home_cannot_create_the_cache(catalog):  # noqa: F811
    rules = found(compose(service(REPO, "user: \"1000\"\nvolumes: [\"/srv/hf:/data/hf-cache\"]\n")), catalog)
    assert rules.get("cache/hf-home-unwritable") == "warning"


def test_a_local_model_needs_no_cache(catalog):  # noqa: F811
    text = compose(service(LOCAL, WEIGHTS + "environment: {HF_HUB_OFFLINE: \"1\"}\n"))
    assert not any(r.startswith("cache/") for r in found(text, catalog))


# ============================================================================ 47: path arguments vs mounts

ADAPTERS = "volumes: [\"/srv/models/m:/models/m:ro\", \"/srv/adapters:/adapters:ro\"]\n"


@pytest.mark.parametrize("flags,extra", [
    (["--enable-lora", "--lora-modules", "sql=/srv/adapters/sql"], ADAPTERS),
    (["--enable-lora", "--lora-modules=sql=/srv/adapters/sql"], ADAPTERS),
    (["--enable-lora", "--lora-modules", "a=/adapters/a", "b=/srv/adapters/b"], ADAPTERS),       # the second item
    (["--enable-lora", "--lora-modules", '{"name": "sql", "path": "/srv/adapters/sql", "base_model_name": "m"}'],
     ADAPTERS),
    (["--chat-template", "/srv/adapters/chat.jinja"], ADAPTERS),
    (["--tokenizer", "/srv/models/m"], WEIGHTS),
    (["--speculative-config", '{"method": "draft_model", "model": "/srv/drafts/d", "num_speculative_tokens": 3}'],
     "volumes: [\"/srv/models/m:/models/m:ro\", \"/srv/drafts:/drafts:ro\"]\n"),
    (["--enable-lora", "--lora-modules", "sql=./lora/sql"], "volumes: [\"/srv/models/m:/models/m:ro\", "
                                                             "\"./lora:/adapters:ro\"]\n"),   # the compose dir's
], ids=["lora", "lora-equals", "lora-second", "lora-json", "chat-template", "tokenizer", "draft", "relative"])
def test_a_path_argument_given_by_its_host_path(catalog, flags, extra):  # noqa: F811
    assert found(compose(service([*LOCAL, *flags], extra)), catalog).get("paths/argv-host-path") == "error"


def test_the_model_given_by_its_host_path(catalog):  # noqa: F811
    text = compose(service(["/srv/models/m", "--max-model-len", "8192"], WEIGHTS))
    assert found(text, catalog).get("paths/argv-host-path") == "error"


@pytest.mark.parametrize("flags,extra", [
    (["--enable-lora", "--lora-modules", "sql=/adapters/sql"], ADAPTERS),
    (["--enable-lora", "--lora-modules", '{"name": "sql", "path": "/adapters/sql"}'], ADAPTERS),
    (["--chat-template", "/vllm-workspace/examples/template_chatml.jinja"], WEIGHTS),    # the image's own file
    (["--chat-template", "{% for m in messages %}{{ m.content }}{% endfor %}"], WEIGHTS),  # a template, not a path
    (["--tokenizer", "example/tokenizer"], WEIGHTS + "volumes: [\"/srv/hf:/root/.cache/huggingface\"]\n"),
    (["--generation-config", "auto"], WEIGHTS),
    (["--download-dir", "/models/m/dl"], WEIGHTS),
], ids=["lora", "lora-json", "image-file", "inline-template", "repo-id", "auto", "download-mounted"])
def test_path_argument_clean_twins(catalog, flags, extra):  # noqa: F811
    rules = found(compose(service([*LOCAL, *flags], extra if extra.count("volumes") == 1 else
                                  "volumes: [\"/srv/models/m:/models/m:ro\", \"/srv/hf:/root/.cache/huggingface\"]\n")),
                  catalog)
    assert not any(r.startswith("paths/argv") for r in rules), rules


@pytest.mark.parametrize("flags", [["--chat-template", "/templates/chat.jinja"], ["--download-dir", "/data/dl"]])
def test_a_path_no_mount_provides_is_a_warning(catalog, flags):  # noqa: F811
    assert found(compose(service([*LOCAL, *flags], WEIGHTS)), catalog).get("paths/argv-not-mounted") == "warning"


# ============================================================================ 48: across services

WEBUI = ("  webui:\n    image: ghcr.io/example/chat-ui@sha256:" + "4" * 64 + "\n    ports: [\"3000:8080\"]\n"
         "    depends_on:\n      llm:\n        condition: {condition}\n{more}")
HEALTH = ("healthcheck:\n  test: [\"CMD\", \"python3\", \"-c\", \"import urllib.request; "
          "urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=5)\"]\n  start_period: 900s\n")


@pytest.mark.parametrize("llm_extra,condition,more,severity", [
    ("", "service_healthy", "", "error"),
    ("healthcheck: {disable: true}\n", "service_healthy", "", "error"),
    ("healthcheck: {test: [\"NONE\"]}\n", "service_healthy", "", "error"),
    ("", "service_healthy", "        required: false\n", "warning"),
], ids=["none", "disabled", "NONE", "not-required"])
def test_waiting_for_healthy_without_a_healthcheck(catalog, llm_extra, condition, more, severity):  # noqa: F811
    text = compose(service(LOCAL, WEIGHTS + llm_extra), WEBUI.format(condition=condition, more=more))
    assert found(text, catalog).get("deps/healthy-needs-healthcheck") == severity


@pytest.mark.parametrize("condition", ["service_healthy", "service_started"])
def test_depends_on_clean_twins(catalog, condition):  # noqa: F811
    text = compose(service(LOCAL, WEIGHTS + HEALTH), WEBUI.format(condition=condition, more=""))
    assert bad(found(text, catalog)) == {}


def test_an_unknown_image_dependency_without_a_healthcheck_is_only_likely(catalog):  # noqa: F811
    db = "  db:\n    image: example/db@sha256:" + "5" * 64 + "\n"
    text = compose(service(LOCAL, WEIGHTS + "depends_on: {db: {condition: service_healthy}}\n"), db)
    assert found(text, catalog).get("deps/healthy-needs-healthcheck") == "warning"


def test_depends_on_an_undefined_service_a_server_to_exit_and_a_cycle(catalog):  # noqa: F811
    text = compose(service(LOCAL, WEIGHTS + HEALTH), WEBUI.format(condition="service_started", more="")
                   .replace("llm:\n        condition", "lm:\n        condition"))
    assert found(text, catalog).get("deps/unknown-service") == "error"
    text = compose(service(LOCAL, WEIGHTS + HEALTH), WEBUI.format(condition="service_completed_successfully", more=""))
    assert found(text, catalog).get("deps/waits-for-server-to-exit") == "error"
    text = compose(service(LOCAL, WEIGHTS + HEALTH + "depends_on: [webui]\n"),
                   WEBUI.format(condition="service_started", more=""))
    assert found(text, catalog).get("deps/cycle") == "error"


@pytest.mark.parametrize("second_ports,expected", [
    ("[\"8000:8000\"]", "error"),
    ("[\"127.0.0.1:8000:8000\"]", "error"),                  # 0.0.0.0:8000 of the first holds it
    ("[{target: 8001, published: \"8000\"}]", "error"),      # long syntax
    ("[\"7990-8010:7990-8010\"]", "error"),                  # a range over it
    ("[\"8001:8000\"]", None),
    ("[\"8000\"]", None),                                    # no host port: Docker picks one
    ("[\"8000:8000/udp\"]", None),
], ids=["same", "loopback-vs-all", "long", "range", "other-port", "no-host-port", "udp"])
def test_two_services_publishing_one_host_port(catalog, second_ports, expected):  # noqa: F811
    second = service(LOCAL, WEIGHTS + HEALTH, name="llm2").replace("ports: [\"8000:8000\"]", f"ports: {second_ports}")
    assert found(compose(service(LOCAL, WEIGHTS + HEALTH), second), catalog).get("ports/host-port-conflict") == expected


def test_two_specific_addresses_do_not_clash(catalog):  # noqa: F811
    a = service(LOCAL, WEIGHTS + HEALTH).replace("[\"8000:8000\"]", "[\"127.0.0.1:8000:8000\"]")
    b = service(LOCAL, WEIGHTS + HEALTH, name="llm2").replace("[\"8000:8000\"]", "[\"10.0.0.5:8000:8000\"]")
    assert "ports/host-port-conflict" not in found(compose(a, b), catalog)


@pytest.mark.parametrize("first,second,expected", [
    (["cpu"], ["gpu"], None),            # alternatives: `--profile cpu` or `--profile gpu`
    (["cpu"], ["cpu", "gpu"], "error"),  # `--profile cpu` starts both
    ([], ["gpu"], "error"),              # the first always runs
], ids=["disjoint", "shared-profile", "one-always-runs"])
def test_services_of_disjoint_profiles_may_share_a_host_port(catalog, first, second, expected):  # noqa: F811
    a = service(LOCAL, WEIGHTS + HEALTH + (f"profiles: {first}\n" if first else ""))
    b = service(LOCAL, WEIGHTS + HEALTH + f"profiles: {second}\n", name="llm2")
    assert found(compose(a, b), catalog).get("ports/host-port-conflict") == expected


@pytest.mark.parametrize("ports,replicas,expected", [
    ("[\"8000:8000\"]", 2, "error"),
    ("[\"8000-8001:8000\"]", 2, None),     # a range of one host port per replica
    ("[\"8000-8001:8000\"]", 3, "error"),
], ids=["one-port", "range-fits", "range-short"])
def test_replicas_need_a_host_port_each(catalog, ports, replicas, expected):  # noqa: F811
    text = compose(service(LOCAL, WEIGHTS + HEALTH + f"gpus: all\ndeploy: {{replicas: {replicas}}}\n", gpu=False)
                   .replace("[\"8000:8000\"]", ports))
    assert found(text, catalog).get("ports/host-port-replicas") == expected


def test_replicas_names_and_the_host_network(catalog):  # noqa: F811
    text = compose(service(LOCAL, WEIGHTS + HEALTH + "gpus: all\ndeploy: {replicas: 2}\n", gpu=False))
    assert found(text, catalog).get("ports/host-port-replicas") == "error"
    a = service(LOCAL, WEIGHTS + HEALTH + "container_name: vllm\n")
    b = service(LOCAL, WEIGHTS + HEALTH + "container_name: vllm\n", name="llm2").replace("8000:8000", "8001:8000")
    assert found(compose(a, b), catalog).get("container/name-conflict") == "error"
    host = service(LOCAL, WEIGHTS + HEALTH + "network_mode: host\n", name="llm2").replace(
        "    ports: [\"8000:8000\"]\n", "")
    assert found(compose(service(LOCAL, WEIGHTS + HEALTH), host), catalog).get("ports/host-port-conflict") == "error"


# ============================================================================ resource limits

@pytest.mark.parametrize("flags,extra,rule,severity", [
    (["--cpu-offload-gb", "32"], "mem_limit: 24g\n", "resources/memory-below-host-buffers", "error"),
    (["--kv-offloading-size", "20", "-tp", "2"], "gpus: all\ndeploy:\n  resources:\n    limits: {memory: 32G}\n",
     "resources/memory-below-host-buffers", "error"),
    ([], "mem_limit: 6g\n", "resources/memory-limit-low", "warning"),
    ([], "mem_limit: 16g\nmem_reservation: 32g\n", "resources/reservation-above-limit", "error"),
    ([], "mem_limit: 32g\nmemswap_limit: 16g\n", "resources/memswap-below-memory", "error"),
    ([], "pids_limit: 256\n", "resources/pids-limit-low", "warning"),
    ([], "ulimits: {nofile: {soft: 1024, hard: 4096}}\n", "resources/nofile-low", "warning"),
], ids=["cpu-offload", "kv-offload-tp", "low", "reservation", "memswap", "pids", "nofile"])
def test_limits_vllm_cannot_run_within(catalog, flags, extra, rule, severity):  # noqa: F811
    text = compose(service([*LOCAL, *flags], WEIGHTS + HEALTH + extra, gpu="deploy:" not in extra))
    assert found(text, catalog).get(rule) == severity


@pytest.mark.parametrize("extra", ["mem_limit: 64g\n", "mem_limit: 64g\nmemswap_limit: -1\n",
                                   "ulimits: {nofile: 65535}\npids_limit: 8192\n", ""])
def test_limits_clean_twins(catalog, extra):  # noqa: F811
    text = compose(service([*LOCAL, "--cpu-offload-gb", "8"], WEIGHTS + HEALTH + extra))
    assert not any(r.startswith("resources/") for r in found(text, catalog))


def test_the_cpu_builds_kv_cache_lives_in_host_memory(tmp_path):
    cat = Catalog(tmp_path / "images.yaml")
    digest = "sha256:" + "8" * 64
    cat.add(digest, ImageFacts(repository="example/vllm-cpu", launcher="vllm", vllm_version="0.32.0", device="cpu",
                               entrypoint=["vllm", "serve"]))
    extra = WEIGHTS + "shm_size: 4g\nmem_limit: 32g\nenvironment: {VLLM_CPU_KVCACHE_SPACE: \"40\"}\n"
    text = compose(service(LOCAL, extra, image=f"example/vllm-cpu@{digest}"))
    assert found(text, cat).get("resources/memory-below-host-buffers") == "error"


# ============================================================================ no --max-model-len (advisory)

def test_no_max_model_len_while_the_model_is_unknown_is_advisory(catalog):  # noqa: F811
    text = compose(service(["/models/m"], WEIGHTS + HEALTH))
    assert found(text, catalog).get("vllm/no-max-model-len") == "info"
    assert "vllm/no-max-model-len" not in found(compose(service(LOCAL, WEIGHTS + HEALTH)), catalog)
    known = found(text, catalog, hf_config={"max_position_embeddings": 4096, "num_hidden_layers": 2})
    assert "vllm/no-max-model-len" not in known   # features/full-context-does-not-fit judges it then
