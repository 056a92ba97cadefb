"""Deploy-level KV prediction on the real vLLM CPU server (loopback SSH host, real image).

1. cpu-4096 is deployed; its preflight predicted the pool from the model's config.json on the
   host and VLLM_CPU_KVCACHE_SPACE; the run's kv.json holds the prediction beside what vLLM
   logged (pool tokens and maximum concurrency), and they agree exactly.
2. a variant with VLLM_CPU_KVCACHE_SPACE=0 (no KV memory: vLLM would refuse to start) is
   stopped in preflight with the prediction in the message; cpu-4096 keeps serving.
3. a variant with VLLM_CPU_KVCACHE_SPACE=2 deploys and again matches exactly.
4. (reusing the server that serves) a profile with a fault only vLLM knows is refused by vLLM's
   own parser in the pinned image before the switch; the server keeps answering.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from devtools.demo import export_model, upload_dir
from servedeck.deploy.apply import DeployOptions, QuietReporter, deploy
from servedeck.errors import DeployError
from servedeck.host.remote import RemoteHost
from servedeck.model.inventory import get_host, load_inventory
from servedeck.model.profile import ProfileStore
from servedeck.runs.kv_history import read_kv
from servedeck.runs.store import EFFECTIVE, STARTUP, read



def _built_image() -> str:
    """The CPU image already built by `invoke image-build` (this test never builds one)."""
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                          "127.0.0.1:5000/servedeck/vllm-cpu"], capture_output=True, text=True).stdout.split()
    if not out:
        pytest.fail("the CPU vLLM image is not built (invoke image-build)", pytrace=False)
    digests = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .RepoDigests}}", out[0]],
                                        capture_output=True, text=True, check=True).stdout)
    ref = next((d for d in digests if d.startswith("127.0.0.1:5000/servedeck/vllm-cpu@")), None)
    if ref is None:
        pytest.fail(f"{out[0]} was not pushed to the local registry", pytrace=False)
    return ref


@pytest.fixture(scope="module")
def cpu_project(loopback_project):
    project, workdir = loopback_project("e2e-kv", 9932)
    ref = _built_image()
    project.local_images.record(ref)  # cpu-4096 pins the placeholder digest: it loads with this image
    for space in (0, 2):
        (project.profiles_dir / f"cpu-kv{space}.yaml").write_text(
            f"extends: cpu-4096\nlauncher_env:\n  VLLM_CPU_KVCACHE_SPACE: \"{space}\"\n")
    entry = get_host(load_inventory(project.inventory_path), "local", project.inventory_path)
    host = RemoteHost("local", entry.ssh, entry.workdir)
    weights = ProfileStore(project.profiles_dir).load("cpu-4096").profile.model.weights_dir
    upload_dir(host, export_model(ref), weights)
    try:
        yield project, host, entry
    finally:
        host.run(f"cd {workdir} 2>/dev/null && docker compose down --remove-orphans -t 2; rm -rf {workdir}",
                 check=False)


def _deploy(project, host, entry, name):
    return deploy(project, host, entry, ProfileStore(project.profiles_dir).load(name), DeployOptions(),
                  QuietReporter())


def _exact(run_path: Path, space_gib: int) -> None:
    """The run's kv.json: vLLM's logged pool and concurrency equal the prediction made before the
    deploy from the model's config.json and VLLM_CPU_KVCACHE_SPACE (CPU: 1,024 bytes per token)."""
    tokens = space_gib * 1024 ** 3 // 1024
    kv = read_kv(run_path)
    assert kv.prediction["method"] == "cpu-kv-space"
    assert any("config.json: num_key_value_heads" in s for s in kv.prediction["sources"])
    assert kv.measured.kv_cache_tokens == tokens
    assert kv.prediction["pool_tokens"] == tokens and kv.error_pct.kv_cache_tokens == 0.0
    assert kv.measured.max_concurrency == round(kv.prediction["max_concurrency"], 2)
    startup = read(run_path, STARTUP, required=True)  # parsed from the server's own log
    assert startup.cpu_kv_cache_gib == space_gib
    assert startup.max_concurrency_tokens_per_request == read(run_path, EFFECTIVE).root["max_model_len"]


def test_prediction_matches_refusal_stops_and_the_deployment_keeps_serving(cpu_project):
    project, host, entry = cpu_project
    first = _deploy(project, host, entry, "cpu-4096")
    assert first.outcome == "ready"
    _exact(first.run.path, 1)

    compose = host.read_file("docker-compose.yml")
    with pytest.raises(DeployError, match="kv/refuses-to-start") as exc:
        _deploy(project, host, entry, "cpu-kv0")
    assert "vLLM would refuse to start" in str(exc.value) and "KV pool 0 tokens" in str(exc.value)
    assert "nothing was changed" in str(exc.value)
    assert host.read_file("docker-compose.yml") == compose
    assert httpx.get("http://127.0.0.1:9932/health", timeout=5).status_code == 200

    second = _deploy(project, host, entry, "cpu-kv2")
    assert second.outcome == "ready"
    _exact(second.run.path, 2)


def _models() -> list[str] | None:
    try:
        return [m["id"] for m in httpx.get("http://127.0.0.1:9932/v1/models", timeout=5).json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def test_a_config_value_vllm_refuses_is_refused_before_the_host_and_the_deployment_keeps_serving(cpu_project):
    """A value only vLLM's config model knows to be wrong: the structured-outputs backend spelled
    ``lm_format_enforcer`` (vLLM's ``StructuredOutputsConfig.backend`` is a Literal whose value is
    ``lm-format-enforcer``). servedeck's check judges JSON config values by the release's config
    model (issue 30, ``json/bad-value``, read from the pinned image's vLLM 0.32.0), so the deploy
    stops at render + check with vLLM's own words and a hint; nothing on the host changes and the
    server that was serving still answers /v1/models. (The in-image judge for what the tables do
    not model is tests/integration/test_inimage.py.)"""
    project, host, entry = cpu_project
    if _models() is None:  # run alone: put the baseline up first (after test 1 cpu-kv2 serves)
        assert _deploy(project, host, entry, "cpu-4096").outcome == "ready"
    before = _models()
    assert before == ["Qwen3.8-27B"]
    (project.profiles_dir / "cpu-so-typo.yaml").write_text(
        "extends: cpu-4096\nengine:\n  extra_args: [--structured-outputs-config, "
        "'{\"backend\": \"lm_format_enforcer\"}']\n")
    compose = host.read_file("docker-compose.yml")
    with pytest.raises(DeployError, match="the rendered compose file has errors; nothing was changed") as exc:
        _deploy(project, host, entry, "cpu-so-typo")
    msg = str(exc.value)
    assert "json/bad-value" in msg and "StructuredOutputsConfig.backend" in msg and "lm-format-enforcer" in msg
    assert host.read_file("docker-compose.yml") == compose
    assert _models() == before


def test_roofline_of_the_real_cpu_server_against_a_bandwidth_measured_on_this_host(cpu_project):
    """The real vLLM CPU server that serves (reused): the host's read bandwidth is measured in its
    container, kept, and the bench's roofline uses it with the tiny model's bytes (its weight
    files, config.json): decode is below 100 % of that ceiling, and the record says so."""
    from servedeck.bench.client import Workload
    from servedeck.bench.limits import format_roofline, read_roofline
    from servedeck.bench.record import bench_deployed
    from servedeck.deploy.ops import status
    from servedeck.host.ceilings import measure_ceilings
    from servedeck.runs.history import newest_served
    from servedeck.runs.store import read_host_ceilings, utcnow, write_host_ceilings
    project, host, entry = cpu_project
    if _models() is None:  # run alone: put the baseline up first
        assert _deploy(project, host, entry, "cpu-4096").outcome == "ready"
    container = status(host, entry)["container"]["name"]
    measured = measure_ceilings(host, container, buffer_mib=128, repeats=3, matmul_n=512)
    assert measured["device"] == "cpu" and measured["memory_bandwidth_gb_s"] > 0.5
    write_host_ceilings(project.runs_dir,
                        {**measured, "host": "local", "container": container, "measured_at": utcnow()})
    assert read_host_ceilings(project.runs_dir, "local").memory_bandwidth_gb_s == measured["memory_bandwidth_gb_s"]
    run_dir = newest_served(project.runs_dir, "local")
    bench_deployed(run_dir, host, entry, Workload(prompt_tokens=256, max_tokens=64, repetitions=2),
                   runs_dir=project.runs_dir, probes=False)
    roof = read_roofline(run_dir)
    c, m = roof.ceilings, roof.model
    assert c.memory_bandwidth_gb_s == measured["memory_bandwidth_gb_s"]
    assert c.bandwidth_source.startswith("measured on local")
    assert c.card == "cpu" and "weight files in ./models/qwen3-tiny" in m.weights_source
    assert 1e6 < m.weights_bytes < 2e7 and m.kv_bytes_per_token == 1024  # 2 layers × 2 heads × 128 × 2 B
    warm = roof.phases["warm"]
    assert 0 < warm.decode_share < 1 and not [p for p in roof.problems if "above 100 %" in p]
    lines = format_roofline(roof)
    assert any(ln.startswith("  warm decode") and "% of the" in ln for ln in lines), lines
