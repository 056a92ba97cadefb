"""Deploys over real SSH + Docker + registry to the loopback card host (scripts/test-services).

The served image here is the vLLM **stand-in** (``deploy/images/standin``: replays a real vLLM
0.32 startup log, then answers /health, /v1/models, /metrics): deploy logic does not need a
real model. The real vLLM server is exercised by tests/e2e.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from devtools import imagebuild
from servedeck.deploy.apply import DeployOptions, QuietReporter, deploy, find_container, status
from servedeck.errors import DeployError, ServedeckError
from servedeck.model.inventory import HostEntry
from servedeck.model.profile import ProfileStore
from servedeck.model.project import Project
from servedeck.host.remote import RemoteHost, SshTarget

ROOT = Path(__file__).resolve().parents[2]
SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
WEIGHTS = "models/qwen3.8-27b-exl3-4.00bpw"
PORT = 9932


@pytest.fixture(scope="module")
def standin(test_services) -> str:
    return imagebuild.build_standin_image(progress=False)


@pytest.fixture
def project(tmp_path) -> Project:
    for name in ("profiles", "templates", "schema"):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "images.yaml", tmp_path / "deploy" / "images.yaml")
    return Project(tmp_path)


def _variant(project: Project, name: str, body: str) -> None:
    (project.profiles_dir / f"{name}.yaml").write_text(body)


@pytest.fixture
def card(test_services):
    """A fresh working directory on the loopback card host, with weights and cache dirs;
    whatever was deployed there is brought down afterwards."""
    workdir = f"/srv/servedeck-test/deploy-{uuid.uuid4().hex[:8]}"
    host = RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    host.run_script('mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" "$1/cache" && '
                    'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [workdir])
    entry = HostEntry(ssh=host.ssh_target, workdir=workdir, render_gid="992", port=PORT,
                      ready_timeout_s=120, api_host="127.0.0.1")
    yield host, entry
    host.run(f"cd {workdir} && for f in docker-compose.yml docker-compose.yml.prev; do "
             f"[ -e $f ] && docker compose -f $f down --remove-orphans -t 1; done; true", check=False)
    host.run(["rm", "-rf", workdir], check=False)


def _fast(project: Project, name: str = "fast", parent: str = "batch-8192", mode: str | None = None,
          startup_s: float = 2.0, restart: str | None = None) -> str:
    env = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
           "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub", "STANDIN_STARTUP_S": str(startup_s)}
    if mode:
        env["STANDIN_MODE"] = mode
    lines = [f"extends: {parent}", "container:", "  environment:"]
    lines += [f"    {k}: \"{v}\"" for k, v in env.items()]
    if restart:
        lines.append(f"  restart: {restart}")
    _variant(project, name, "\n".join(lines) + "\n")
    return name


def _deploy(project, card, name, standin, **opts):
    host, entry = card
    return deploy(project, host, entry, ProfileStore(project.profiles_dir).load(name),
                  DeployOptions(image=_pinned(standin), **opts), QuietReporter())


def _pinned(ref: str) -> str:
    return ref


def _history(host: RemoteHost) -> list[dict]:
    data = host.read_file(host.history_path, missing_ok=True) or b""
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def _models(port: int = PORT) -> list[str]:
    body = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
    return [m["id"] for m in body["data"]]


# ------------------------------------------------------------------------------ the main job


def test_batch_8192_deploys_over_ssh_and_serves_qwen(project, card, standin):
    """The seed's own profile (image pointed at the local stand-in) deployed over SSH."""
    host, entry = card
    result = _deploy(project, card, "batch-8192", standin)
    assert result.outcome == "ready"
    assert _models() == ["Qwen3.8-27B"]
    hist = _history(host)
    assert hist[-1]["outcome"] == "ready" and hist[-1]["profile"] == "batch-8192"
    assert hist[-1]["compose_sha256"] == result.run.meta["compose_sha256"]
    # the run record keeps the compose byte-for-byte
    on_host = host.read_file("docker-compose.yml")
    assert (result.run.path / "docker-compose.yml").read_bytes() == on_host
    meta = json.loads((result.run.path / "run.json").read_text())
    assert meta["outcome"] == "ready" and meta["image"]["digest"] == standin.split("@")[1]
    startup = json.loads((result.run.path / "startup.json").read_text())
    assert startup["kv_cache_tokens"] == 1_048_576  # the stand-in replays the real 8192 log
    assert startup["non_default_args"]["max_num_batched_tokens"] == 8192
    checks = {c["setting"]: c for c in json.loads((result.run.path / "args_verification.json").read_text())}
    assert checks["max_num_batched_tokens"]["status"] == "confirmed"
    # the stand-in's digest was unknown: deploy read its facts and added it to the catalog
    catalog = (project.catalog_path).read_text()
    assert standin.split("@")[1] in catalog
    st = status(host, entry)
    assert st["serving"] is True and st["drift"] == [] and st["lock"] is None
    assert st["container"]["restart_count"] == 0


# ------------------------------------------------------------------------------ failure + rollback


@pytest.mark.parametrize("mode,restart,reason", [
    ("exit", '"no"', "exited with code"),
    ("crashloop", "unless-stopped", "restart"),
    ("never", '"no"', "timeout"),
])
def test_failed_deploy_rolls_back_to_the_previous_ready_one(project, card, standin, mode, restart, reason):
    host, entry = card
    good = _fast(project, "good")
    first = _deploy(project, card, good, standin)
    assert first.outcome == "ready"
    good_compose = host.read_file("docker-compose.yml")
    bad = _fast(project, "bad", parent="good", mode=mode, restart=restart)
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, bad, standin, timeout_s=8 if mode == "never" else None)
    msg = exc.value.message
    assert reason in msg and "rolled back" in msg and "ready again" in msg
    # both compose files intact: the previous one is live again, the failed one kept aside
    assert host.read_file("docker-compose.yml") == good_compose
    failed = host.read_file("docker-compose.yml.failed").decode()
    assert f"STANDIN_MODE: \"{mode}\"" in failed or f"STANDIN_MODE: {mode}" in failed
    assert _models() == ["Qwen3.8-27B"]
    outcomes = [h["outcome"] for h in _history(host)]
    assert outcomes[-2:] == ["ready", "rolled-back"]
    st = status(host, entry)
    assert st["serving"] is True and st["drift"] == [] and st["lock"] is None


def test_failed_first_deploy_without_previous_is_stopped(project, card, standin):
    host, _ = card
    bad = _fast(project, "bad", mode="exit")
    with pytest.raises(DeployError, match="no previous deployment"):
        _deploy(project, card, bad, standin)
    client = host.docker_client()
    try:
        assert find_container(client, host.workdir, "exl3xpu") is None
    finally:
        client.close()
    assert host.read_lock() is None


# ------------------------------------------------------------------------------ lock


def test_a_second_concurrent_deploy_is_refused_by_the_lock(project, card, standin):
    host, entry = card
    slow = _fast(project, "slow", startup_s=6)
    outcome: dict = {}

    def first():
        outcome["result"] = _deploy(project, card, slow, standin)

    t = threading.Thread(target=first)
    t.start()
    deadline = time.time() + 60
    while host.read_lock() is None and time.time() < deadline and t.is_alive():
        time.sleep(0.2)
    assert host.read_lock() is not None, "the first deploy never took the lock"
    other = RemoteHost("b70", host.ssh_target, host.workdir)
    with pytest.raises(DeployError, match="another deploy holds the lock"):
        deploy(project, other, entry, ProfileStore(project.profiles_dir).load(slow),
               DeployOptions(image=standin), QuietReporter())
    t.join(120)
    assert outcome["result"].outcome == "ready"
    assert host.read_lock() is None


# ------------------------------------------------------------------------------ host keys + preflight


def test_unknown_host_key_is_refused_and_nothing_changes(project, card, standin, tmp_path):
    host, entry = card
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    stranger = RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG,
                                           known_hosts=str(empty)), host.workdir)
    with pytest.raises(ServedeckError) as exc:
        deploy(project, stranger, entry, ProfileStore(project.profiles_dir).load("batch-8192"),
               DeployOptions(image=standin), QuietReporter())
    assert "ssh-keyscan" in (exc.value.hint or "") + exc.value.message
    assert empty.read_text() == ""
    assert host.read_file("docker-compose.yml", missing_ok=True) is None


def test_missing_weights_stop_in_preflight(project, card, standin):
    host, entry = card
    host.run(["rm", "-rf", f"{host.workdir}/models"])
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, "batch-8192", standin)
    assert "preflight" in exc.value.message and "weights directory" in exc.value.message
    assert "does not exist" in exc.value.message
    assert host.run(["ls", "-A", host.workdir]).stdout.split() == ["cache"]


def test_wrong_render_gid_stops_in_preflight(project, card, standin):
    host, entry = card
    _variant(project, "gid", 'extends: batch-8192\ncontainer:\n  group_add: ["993"]\n')
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, "gid", standin)
    assert "render node group id is 992" in exc.value.message
    assert host.read_file("docker-compose.yml", missing_ok=True) is None
    assert host.read_lock() is None


# ------------------------------------------------------------------------------ interruption


def test_interrupted_deploy_leaves_a_state_status_describes(project, card, standin, tmp_path):
    host, entry = card
    slow = _fast(project, "slow", startup_s=30)
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        f"hosts:\n  b70:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n"
        f"    workdir: {host.workdir}\n    render_gid: \"992\"\n    port: {PORT}\n"
        f"    ready_timeout_s: 120\n    api_host: 127.0.0.1\n")
    env = {**os.environ, "SERVEDECK_PROJECT": str(project.root)}
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "-r", str(ROOT), "deploy", "--host", "b70",
                             "--profile", slow, "--inventory", str(inventory), "--image", standin],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = host.docker_client()
    try:
        deadline = time.time() + 90
        while find_container(client, host.workdir, "exl3xpu") is None and time.time() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.3)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        client.close()
    assert proc.returncode != 0
    assert "interrupted" in out and "invoke status --host b70" in out
    st = status(host, entry)
    assert st["lock"] is None
    assert st["last_deploy"]["outcome"] == "interrupted"
    assert st["compose_present"] and st["drift"] == []
    assert st["container"]["state"] == "running"
    assert st["serving"] is False  # still starting: the stand-in needs 30 s


# ------------------------------------------------------------------------------ rollback, logs, down


def test_rollback_then_logs_then_down(project, card, standin):
    from servedeck.deploy.apply import down, rollback, stream_logs
    host, entry = card
    first = _fast(project, "first")
    _variant(project, "second", "extends: first\nengine:\n  max_num_batched_tokens: 4096\n")
    assert _deploy(project, card, first, standin).outcome == "ready"
    first_compose = host.read_file("docker-compose.yml")
    assert _deploy(project, card, "second", standin).outcome == "ready"
    second_compose = host.read_file("docker-compose.yml")
    assert b"max_num_batched_tokens=4096" in second_compose

    rb = rollback(host, entry, reporter=QuietReporter())
    assert rb.ready
    assert host.read_file("docker-compose.yml") == first_compose
    assert host.read_file("docker-compose.yml.prev") == second_compose  # a second rollback goes forward
    assert _models() == ["Qwen3.8-27B"]
    assert status(host, entry)["drift"] == []

    lines: list[str] = []
    stream_logs(host, tail=50, write=lines.append)
    assert "Starting vLLM server on" in "\n".join(lines)

    down(host)
    st = status(host, entry)
    assert st["container"] is None and "down" in " ".join(st["drift"])
    assert [h["profile"] for h in _history(host)][-2:] == ["(rollback)", "(down)"]
