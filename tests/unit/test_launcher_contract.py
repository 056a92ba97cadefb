"""The CPU image's launcher (deploy/images/cpu-vllm/serve.py) against the exl3xpu serve.py v3
contract (the image's scripts/serve.py), driven through ``--print``."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import yaml  # PyYAML: the launcher parses --set values with safe_load, as in the image

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "deploy" / "images" / "cpu-vllm" / "serve.py"
IMAGE_MODEL = ROOT / "deploy" / "images" / "cpu-vllm" / "models" / "qwen3-tiny" / "model.yaml"


def _load():
    spec = importlib.util.spec_from_file_location("servedeck_cpu_launcher", LAUNCHER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while executing it
    spec.loader.exec_module(module)
    return module


serve = _load()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A fake /opt/exl3xpu: models/m/model.yaml in the real one's shape, plus a weights dir."""
    model_dir = tmp_path / "models" / "m"
    model_dir.mkdir(parents=True)
    (model_dir / "model.yaml").write_text(
        "id: m-id\n"
        "served_model_name: m-served\n"
        "source: {repo: org/M-repo, revision: abc123}\n"
        "vllm:\n"
        "  dtype: bfloat16\n"
        "  max_model_len: 2048\n"
        "  trust_remote_code: true\n"
        "  enable_prefix_caching: true\n"
        "  speculative_config: {method: ngram, num_speculative_tokens: 3}\n"
        "  max_num_batched_tokens: 4096\n"
        "env:\n"
        "  VLLM_CPU_KVCACHE_SPACE: '1'\n"
        "  DRAFT: '{model_dir}/draft.json'\n"
        "  FROM_YAML: yaml\n"
        "parallel: {mode: data, gpus: [0], base_port: 8100, lb_port: 8000}\n")
    (tmp_path / "weights" / "m-id").mkdir(parents=True)
    return tmp_path


def run_plan(workdir: Path, *args: str, environ: dict | None = None):
    env = {"MODELS_DIR": str(workdir / "weights"), **(environ or {})}
    plan, print_only = serve.plan(list(args), environ=env, cwd=workdir, python="PY")
    return plan, print_only


def flag_value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, argv
    return argv[argv.index(flag) + 1]


def test_default_command_shape(workdir: Path) -> None:
    plan, print_only = run_plan(workdir, "models/m", "--print")
    assert print_only
    assert plan.argv == [
        "PY", "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(workdir / "weights" / "m-id"),
        "--served-model-name", "m-served", "--host", "0.0.0.0", "--port", "8100",
        "--dtype", "bfloat16", "--max-model-len", "2048", "--trust-remote-code",
        "--enable-prefix-caching",
        "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}',
        "--max-num-batched-tokens", "4096",
    ]


def test_set_value_types(workdir: Path) -> None:
    config, _ = serve.load_config("models/m", workdir)
    for item in ("vllm.max_model_len=262144", "vllm.gpu_memory_utilization=0.94",
                 "vllm.enforce_eager=true", "vllm.dtype=null",
                 'vllm.limit_mm_per_prompt={"image":1,"video":1}',
                 "served_model_name=/model", "env.EXL3_INT8_PREFILL=0",
                 "vllm.speculative_config.num_speculative_tokens=5",
                 "new.deep.key=yes", "vllm.big=1e3", "env.PATH_LIKE={model_dir}/x.json"):
        serve.apply_set(config, item)
    v = config["vllm"]
    assert v["max_model_len"] == 262144 and type(v["max_model_len"]) is int
    assert v["gpu_memory_utilization"] == 0.94 and type(v["gpu_memory_utilization"]) is float
    assert v["enforce_eager"] is True
    assert "dtype" in v and v["dtype"] is None
    assert v["limit_mm_per_prompt"] == {"image": 1, "video": 1}
    assert config["served_model_name"] == "/model"
    assert config["env"]["EXL3_INT8_PREFILL"] == 0
    assert v["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 5}
    assert config["new"] == {"deep": {"key": True}}  # YAML 1.1: yes -> bool, mappings created
    assert v["big"] == "1e3"  # YAML 1.1 float needs a dot
    assert config["env"]["PATH_LIKE"] == "{model_dir}/x.json"  # invalid YAML kept raw


def test_set_splits_at_first_equals_and_rejects_walk_through_scalar(workdir: Path) -> None:
    config, _ = serve.load_config("models/m", workdir)
    serve.apply_set(config, "env.OPTS=a=b=c")
    assert config["env"]["OPTS"] == "a=b=c"
    serve.apply_set(config, "vllm.speculative_config=null")
    with pytest.raises(serve.LaunchError):
        serve.apply_set(config, "vllm.speculative_config.num_speculative_tokens=2")
    with pytest.raises(serve.LaunchError):
        serve.apply_set(config, "no-equals-sign")


def test_null_drops_flag_and_false_omits_it(workdir: Path) -> None:
    plan, _ = run_plan(workdir, "models/m", "--set", "vllm.speculative_config=null",
                       "--set", "vllm.enable_prefix_caching=false",
                       "--set", "vllm.trust_remote_code=true")
    assert "--speculative-config" not in plan.argv
    assert "--enable-prefix-caching" not in plan.argv
    assert not any(a.startswith("--no-") for a in plan.argv)
    assert "--trust-remote-code" in plan.argv


def test_set_overrides_flag_values_in_place(workdir: Path) -> None:
    plan, _ = run_plan(workdir, "models/m", "--set", "vllm.max_num_batched_tokens=8192",
                       "--set", "vllm.speculative_config.num_speculative_tokens=1",
                       "--set", "served_model_name=Qwen3.8-27B", "--port", "9932")
    assert flag_value(plan.argv, "--max-num-batched-tokens") == "8192"
    assert json.loads(flag_value(plan.argv, "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 1}
    assert flag_value(plan.argv, "--served-model-name") == "Qwen3.8-27B"
    assert flag_value(plan.argv, "--port") == "9932"


def test_passthrough_is_verbatim_and_last(workdir: Path) -> None:
    plan, _ = run_plan(workdir, "models/m", "--gpu", "0", "--enable-auto-tool-choice",
                       "--tool-call-parser", "qwen3_xml", "--port", "9932",
                       "--set", "vllm.max_num_batched_tokens=8192",
                       "--", "--max-model-len", "4096", "--served-model-name", "Qwen3.8-27B",
                       "--print", "--", "x")
    own_end = plan.argv.index("8192") + 1
    assert plan.argv[own_end:] == [
        "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml",
        "--max-model-len", "4096", "--served-model-name", "Qwen3.8-27B", "--print", "--", "x"]
    # Duplicated flags are not merged: vLLM takes the last occurrence.
    assert plan.argv.count("--max-model-len") == 2


def test_child_env_yaml_overrides_container_and_null_unsets(workdir: Path) -> None:
    container = {"VLLM_CPU_KVCACHE_SPACE": "8", "FROM_YAML": "container", "KEEP": "k",
                 "GONE": "g", "ZE_AFFINITY_MASK": "7"}
    plan, _ = run_plan(workdir, "models/m", "--gpu", "1", "--set", "env.GONE=null",
                       "--set", "env.EXL3_INT8_PREFILL=0", environ=container)
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert plan.env["FROM_YAML"] == "yaml"
    assert plan.env["KEEP"] == "k"
    assert "GONE" not in plan.env
    assert plan.env["EXL3_INT8_PREFILL"] == "0"
    assert plan.env["DRAFT"] == f"{workdir / 'models' / 'm'}/draft.json"
    assert plan.env["ZE_AFFINITY_MASK"] == "1"


def test_yaml_file_config_and_model_path(workdir: Path, tmp_path: Path) -> None:
    alt = workdir / "alt.yaml"
    alt.write_text("id: other\nserved_model_name: alt\nsource: {repo: org/Alt, revision: r1}\n"
                   "vllm: {max_model_len: 512}\nenv: {D: '{model_dir}'}\n")
    plan, _ = run_plan(workdir, str(alt), "--model-path", "/mnt/w")
    assert flag_value(plan.argv, "--model") == "/mnt/w"
    assert "--revision" not in plan.argv
    assert plan.env["D"] == str(workdir)
    plan, _ = run_plan(workdir, str(alt))  # no weights under MODELS_DIR: HF repo + revision
    assert flag_value(plan.argv, "--model") == "org/Alt"
    assert flag_value(plan.argv, "--revision") == "r1"


def test_print_format_via_subprocess(workdir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(LAUNCHER), "models/m", "--gpu", "3", "--port", "9932",
         "--set", "served_model_name=My Model", "--print", "--", "--reasoning-parser", "qwen3"],
        cwd=workdir, capture_output=True, text=True,
        env={"MODELS_DIR": str(workdir / "weights"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.rstrip("\n")
    assert "\n" not in line
    prefix, _, rest = line.partition(" ")
    assert prefix == "ZE_AFFINITY_MASK=3"
    argv = shlex.split(rest)
    assert argv[0] == sys.executable
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "'My Model'" in rest  # shell-quoted
    assert flag_value(argv, "--served-model-name") == "My Model"
    assert argv[-2:] == ["--reasoning-parser", "qwen3"]


def test_bad_config_exits_2(workdir: Path) -> None:
    proc = subprocess.run([sys.executable, str(LAUNCHER), "models/missing", "--print"],
                          cwd=workdir, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "no model config" in proc.stderr


def test_image_model_yaml_has_the_real_shape() -> None:
    data = yaml.safe_load(IMAGE_MODEL.read_text())
    assert set(data) == {"id", "served_model_name", "source", "vllm", "env", "parallel"}
    assert data["vllm"]["dtype"] == "bfloat16"
    assert data["vllm"]["max_model_len"] == 2048
    assert data["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"


_FAKE_VLLM = r"""
import os, subprocess, sys, time
role = sys.argv[1] if len(sys.argv) > 1 else "api"
if role == "api":  # the API server: starts the engine core, which starts the worker
    engine = subprocess.Popen([sys.executable, __file__, "engine"])
    engine.wait()
elif role == "engine":
    open("/proc/self/comm", "w").write("VLLM::EngineCore")
    worker = subprocess.Popen([sys.executable, __file__, "worker"])
    worker.wait()
else:
    open("/proc/self/comm", "w").write("VLLM::Worker")
    time.sleep(0.3)  # bound a little after it appears, as vLLM's worker binds during its init
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    time.sleep(60)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_engine_core_joins_its_worker_and_the_api_server_keeps_the_rest(tmp_path: Path) -> None:
    """vLLM's process tree played by three processes named as vLLM names them: once the worker has
    bound itself to one core, the engine core (every thread) moves onto it and the API server
    onto the cores left."""
    launcher = serve
    script = tmp_path / "fake_vllm.py"
    script.write_text(_FAKE_VLLM)
    api = subprocess.Popen([sys.executable, str(script)])
    try:
        line = launcher.place_engine_core(api.pid, timeout_s=20, poll_s=0.05)
        procs = {launcher._comm(c): c for c in launcher._children(api.pid)}
        worker, engine = procs["VLLM::Worker"], procs["VLLM::EngineCor"]
        core = os.sched_getaffinity(worker)
        assert len(core) == 1
        assert all(os.sched_getaffinity(int(t)) == core for t in os.listdir(f"/proc/{engine}/task"))
        assert os.sched_getaffinity(api.pid) == os.sched_getaffinity(0) - core
        assert line and f"the engine core (pid {engine}) on CPUs {sorted(core)}" in line
    finally:
        for pid in launcher._children(api.pid):
            os.kill(pid, 9)
        api.kill()
        api.wait()


def test_placement_gives_up_when_no_worker_appears(tmp_path: Path) -> None:
    launcher = serve
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert launcher.place_engine_core(idle.pid, timeout_s=0.3, poll_s=0.05) is None
    finally:
        idle.kill()
        idle.wait()
