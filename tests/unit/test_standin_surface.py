"""The stand-in's known response surface and launcher --print (deploy/images/standin/standin.py):
what ``invoke tune``'s integration test and servedeck's in-image check need of it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

STANDIN = Path(__file__).resolve().parents[2] / "deploy" / "images" / "standin" / "standin.py"
spec = importlib.util.spec_from_file_location("standin", STANDIN)
standin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(standin)

ARGV = ["models/x", "--gpu", "0", "--set", "vllm.max_num_batched_tokens=8192",
        "--set", 'vllm.speculative_config={"method":"ngram","num_speculative_tokens":3}',
        "--max-num-seqs", "16", "--served-model-name", "M"]


def test_the_command_settings_read_as_dotted_names():
    cfg = standin.parse_argv(ARGV)
    assert cfg["settings"]["max_num_batched_tokens"] == "8192"
    assert cfg["settings"]["speculative_config.num_speculative_tokens"] == "3"
    assert cfg["settings"]["max_num_seqs"] == "16"


def test_the_surface_multiplies_the_factor_of_each_setting():
    surface = {"max_num_batched_tokens": {"4096": 1.0, "8192": 1.2},
               "speculative_config.num_speculative_tokens": {"3": 1.1, "*": 0.9},
               "gpu_memory_utilization": {"0.9": 2.0}}  # not in the command: no factor
    values = standin.parse_argv(ARGV)["settings"]
    assert abs(standin.surface_factor(surface, values) - 1.32) < 1e-12
    values["speculative_config.num_speculative_tokens"] = "2"
    assert abs(standin.surface_factor(surface, values) - 1.08) < 1e-12
    assert standin.surface_factor({"max_num_batched_tokens": {"8192.0": 1.5}}, values) == 1.5


def test_print_prints_the_launchers_final_command_and_exits():
    out = subprocess.run([sys.executable, str(STANDIN), *ARGV, "--print"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("ZE_AFFINITY_MASK=0 vllm serve /models/x")
    assert "--max-num-batched-tokens 8192" in line and json.dumps({"method": "ngram"})[:10] in line.replace("'", "")
