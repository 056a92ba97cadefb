"""Locally built images on the real Docker engine and registry (scripts/test-services).

The vLLM stand-in image is built (cached after the first run), pushed, and run with the seed's
command shape; the CPU vLLM image's launcher is checked with ``--print`` inside the image
(marked e2e: building that image takes minutes the first time).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from devtools import imagebuild

pytestmark = pytest.mark.integration

# The seed's compose command (run report 000_7dad7444a29ba20b), as a list.
SEED_COMMAND = [
    "models/qwen3.8-27b-exl3-4.00bpw", "--gpu", "0", "--model-path", "/mnt/exl3model",
    "--set", "vllm.gpu_memory_utilization=0.94", "--set", "vllm.max_model_len=131072",
    "--set", "vllm.max_num_batched_tokens=8192",
    "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml", "--port", "9932",
    "--reasoning-parser", "qwen3", "--served-model-name", "Qwen3.8-27B",
]
WAIT_S = 120  # generous upper bound for polling loops (not an assertion on speed)


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def standin_ref() -> str:
    return imagebuild.build_standin_image(progress=False)


@pytest.fixture
def containers():
    started: list[str] = []
    yield started
    for cid in started:
        docker("rm", "-f", cid, check=False)


def run_detached(containers: list[str], ref: str, command: list[str], *opts: str) -> str:
    cid = docker("run", "-d", "--shm-size", "1g", *opts, ref, *command).stdout.strip()
    containers.append(cid)
    return cid


def logs(cid: str) -> str:
    proc = docker("logs", cid, check=False)
    return proc.stdout + proc.stderr


def http_get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read()


def wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_reference_is_pinned_and_recorded(standin_ref: str) -> None:
    assert standin_ref.startswith("127.0.0.1:5000/servedeck/vllm-standin@sha256:")
    assert len(standin_ref.rsplit(":", 1)[1]) == 64
    assert imagebuild.recorded_images()["servedeck/vllm-standin"]["ref"] == standin_ref
    # A rebuild with nothing changed reuses every cached step and yields the same digest.
    assert imagebuild.build_standin_image(progress=False) == standin_ref


def test_image_has_the_launcher_layout(standin_ref: str) -> None:
    info = json.loads(docker("image", "inspect", standin_ref).stdout)[0]["Config"]
    assert info["WorkingDir"] == "/opt/exl3xpu"
    assert info["Cmd"] == ["models/qwen3-tiny", "--gpu", "0"]
    assert "MODELS_DIR=/models" in info["Env"]
    assert info["Labels"]["io.servedeck.vllm-version"] == "0.32.0"
    assert info["Labels"]["io.servedeck.standin"] == "true"


def test_standin_serves_with_seed_command(standin_ref: str, containers: list[str]) -> None:
    cid = run_detached(containers, standin_ref, SEED_COMMAND, "-e", "STANDIN_STARTUP_S=3",
                       "-p", "127.0.0.1::9932")
    host_port = docker("port", cid, "9932/tcp").stdout.splitlines()[0].rsplit(":", 1)[1]
    base = f"http://127.0.0.1:{host_port}"

    def models():
        try:
            return http_get(f"{base}/v1/models")
        except (urllib.error.URLError, ConnectionError, OSError):
            return None

    status, body = wait_for(models, "/v1/models on the stand-in")
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["Qwen3.8-27B"]
    assert http_get(f"{base}/health") == (200, b"")
    status, metrics = http_get(f"{base}/metrics")
    assert status == 200 and b"vllm:" in metrics
    assert json.loads(http_get(f"{base}/version")[1]) == {"version": "0.32.0"}
    text = logs(cid)
    assert "Application startup complete." in text
    assert "max_num_batched_tokens=8192" in text  # the 8192 fixture log was chosen
    assert "Starting vLLM server on http://0.0.0.0:9932" in text


def test_standin_never_listens_in_never_mode(standin_ref: str, containers: list[str]) -> None:
    cid = run_detached(containers, standin_ref, SEED_COMMAND,
                       "-e", "STANDIN_MODE=never", "-e", "STANDIN_STARTUP_S=1")
    wait_for(lambda: "init engine" in logs(cid), "the startup log")
    # Everything before "Starting vLLM server" has been logged; nothing listens on the port.
    probe = docker("exec", cid, "python3", "-c",
                   "import socket; s = socket.socket(); "
                   "print(s.connect_ex(('127.0.0.1', 9932)))").stdout.strip()
    assert probe != "0"
    assert "Application startup complete." not in logs(cid)


def test_standin_exit_mode_fails_startup(standin_ref: str) -> None:
    proc = subprocess.run(
        ["docker", "run", "--rm", "-e", "STANDIN_MODE=exit", "-e", "STANDIN_STARTUP_S=1",
         standin_ref, *SEED_COMMAND], capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == 1
    assert "EngineCore failed to start." in proc.stdout
    assert "Engine core initialization failed" in proc.stdout
    assert "Application startup complete." not in proc.stdout


def test_standin_crashloop_restarts(standin_ref: str, containers: list[str]) -> None:
    cid = run_detached(containers, standin_ref, SEED_COMMAND, "-e", "STANDIN_MODE=crashloop",
                       "--restart", "unless-stopped")

    def restarted():
        state = json.loads(docker("inspect", cid).stdout)[0]
        return state["RestartCount"] >= 1

    wait_for(restarted, "a restart of the crash-looping stand-in")


@pytest.mark.e2e
def test_cpu_vllm_image_launcher_print() -> None:
    ref = imagebuild.build_cpu_vllm_image(progress=False)
    assert ref.startswith("127.0.0.1:5000/servedeck/vllm-cpu@sha256:")
    proc = subprocess.run(
        ["docker", "run", "--rm", ref, "models/qwen3-tiny", "--gpu", "0", "--port", "9932",
         "--set", "vllm.max_num_batched_tokens=8192", "--set", "vllm.dtype=null", "--print",
         "--", "--served-model-name", "Qwen3.8-27B"],
        capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == 0, proc.stderr
    prefix, _, rest = proc.stdout.strip().partition(" ")
    assert prefix == "ZE_AFFINITY_MASK=0"
    argv = shlex.split(rest)
    assert argv[:5] == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                        "--model", "/models/qwen3-tiny"]
    assert "--dtype" not in argv
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "8192"
    assert argv[-2:] == ["--served-model-name", "Qwen3.8-27B"]


def test_unreachable_registry_is_a_servedeck_error() -> None:
    from servedeck.errors import ServedeckError

    with pytest.raises(ServedeckError, match="registry at 127.0.0.1:1 is not reachable"):
        imagebuild.build_standin_image(registry="127.0.0.1:1", progress=False)
