"""Deploys over real SSH + Docker + registry to the loopback card host (scripts/test-services).

The served image here is the vLLM **stand-in** (``deploy/images/standin``: replays a real vLLM
0.32 startup log, then answers /health, /v1/models, /metrics): deploy logic does not need a
real model. The real vLLM server is exercised by tests/e2e.
"""

from __future__ import annotations

import json
import os
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
from servedeck.deploy.apply import deploy
from servedeck.deploy.console import QuietReporter
from servedeck.deploy.ops import down, rollback, status, stream_logs
from servedeck.deploy.plan import DeployOptions
from servedeck.errors import DeployError, ServedeckError
from servedeck.model.inventory import HostEntry
from servedeck.model.profile import ProfileStore
from servedeck.model.project import Project
from servedeck.host.history import revisions
from servedeck.host.remote import RemoteHost, SshTarget
from servedeck.runs.store import run_dirs

ROOT = Path(__file__).resolve().parents[2]
SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
WEIGHTS = "models/qwen3.8-27b-exl3-4.00bpw"
PORT = 9932


def _runs(project) -> list[Path]:
    """The project's run directories, oldest first (its runs/ also holds the store's caches)."""
    return [d for _, d in run_dirs(project.runs_dir)]


@pytest.fixture(scope="module")
def standin(test_services) -> str:
    return imagebuild.build_standin_image(progress=False)


@pytest.fixture
def project(catalog_project) -> Project:
    return Project(catalog_project)


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
    host.close()  # the test may have left its session broken (an interrupted deploy): clean up in a new one
    cleanup = RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    try:
        cleanup.run(f"cd {workdir} && [ -e docker-compose.yml ] && docker compose down --remove-orphans "
                    f"-t 1; true", check=False)
        cleanup.run(["rm", "-rf", workdir], check=False)
    finally:
        cleanup.close()


def _fast(project: Project, name: str = "fast", parent: str = "batch-8192", mode: str | None = None,
          startup_s: float = 2.0, restart: str | None = None, api_key: str | None = None) -> str:
    env = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
           "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub", "STANDIN_STARTUP_S": str(startup_s)}
    if mode:
        env["STANDIN_MODE"] = mode
    if api_key:
        env["VLLM_API_KEY"] = api_key
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


def _revisions(host: RemoteHost) -> list[tuple[int, str, str | None, str]]:
    """(revision, event, profile, outcome) of the host history, oldest first."""
    return [(r.number, r.event, r.profile, r.outcome) for r in revisions(_history(host))]


def _container(host: RemoteHost, service: str = "exl3xpu"):
    try:
        return host.engine.container(host.workdir, service)
    finally:
        host.close()


def _serving_profile(project: Project, card) -> str | None:
    """The profile whose compose file is deployed and serving now (via the host history)."""
    host, entry = card
    st = status(host, entry)
    if not st["serving"]:
        return None
    revs = [r for r in revisions(_history(host)) if r.compose_sha256 == st["compose_sha256"]]
    return revs[-1].profile if revs else None


def _sigterm_after(predicate, timeout_s: float = 90.0) -> threading.Thread:
    """SIGTERM this process (the deploy turns it into an interrupt) once ``predicate()``."""
    def watch():
        deadline = time.time() + timeout_s
        while time.time() < deadline and not predicate():
            time.sleep(0.2)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


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
    assert _revisions(host) == [(1, "deploy", "batch-8192", "ready")]
    hist = _history(host)
    assert [h["outcome"] for h in hist] == ["started", "ready"]
    assert hist[-1]["compose_sha256"] == result.run.meta.compose_sha256 == result.compose_sha256
    # the run record keeps the compose byte-for-byte (no secrets in it)
    on_host = host.read_file("docker-compose.yml")
    assert (result.run.path / "docker-compose.yml").read_bytes() == on_host
    # the served file is kept as known good; compose files are readable by their owner only
    good = f"{host.good_dir}/{result.compose_sha256}.yml"
    assert host.read_file(good) == on_host
    modes = host.run(["stat", "-c", "%a", host.compose_path, good]).stdout.split()
    assert modes == ["600", "600"]
    meta = json.loads((result.run.path / "run.json").read_text())
    assert meta["outcome"] == "ready" and meta["image"]["digest"] == standin.split("@")[1]
    assert meta["kind"] == "deploy" and meta["revision"] == 1
    startup = json.loads((result.run.path / "startup.json").read_text())
    assert startup["kv_cache_tokens"] == 1_048_576  # the stand-in replays the real 8192 log
    assert startup["non_default_args"]["max_num_batched_tokens"] == 8192
    checks = {c["setting"]: c for c in json.loads((result.run.path / "args_verification.json").read_text())}
    assert checks["max_num_batched_tokens"]["status"] == "confirmed"
    # the stand-in's digest was unknown: deploy read its facts and added it to the catalog
    assert standin.split("@")[1] in project.catalog_path.read_text()
    st = status(host, entry)
    assert st["serving"] is True and st["drift"] == [] and st["lock"] is None
    assert st["container"]["restart_count"] == 0
    assert [g["revision"] for g in st["known_good"]] == [1]


# ------------------------------------------------------------------------------ failure + rollback


@pytest.mark.parametrize("mode,restart,reason,phase", [
    ("exit", '"no"', "exited with code", "crash"),
    ("crashloop", "unless-stopped", "restart", "crash"),
    ("never", '"no"', "timeout", "timeout"),
])
def test_failed_deploy_rolls_back_to_the_last_known_good(project, card, standin, mode, restart, reason, phase):
    host, entry = card
    good = _fast(project, "good")
    assert _deploy(project, card, good, standin).outcome == "ready"
    good_compose = host.read_file("docker-compose.yml")
    bad = _fast(project, "bad", parent="good", mode=mode, restart=restart)
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, bad, standin, timeout_s=8 if mode == "never" else None)
    msg = exc.value.message
    assert reason in msg and "rolled back: revision 1 (good) serves again" in msg
    assert host.read_file("docker-compose.yml") == good_compose
    assert _models() == ["Qwen3.8-27B"]
    assert _revisions(host) == [(1, "deploy", "good", "ready"), (2, "deploy", "bad", "failed"),
                                (3, "rollback", "good", "ready")]
    bad_dir = sorted(d for d in project.runs_dir.iterdir() if "-bad-" in d.name)[-1]
    bad_run = json.loads((bad_dir / "run.json").read_text())
    assert (bad_run["outcome"], bad_run["failure_phase"]) == ("rolled-back", phase)
    st = status(host, entry)
    assert st["serving"] is True and st["drift"] == [] and st["lock"] is None
    assert [g["revision"] for g in st["known_good"]] == [3]  # one entry per file, newest


def test_the_rollback_sends_the_restored_servers_own_key_and_records_neither(project, card, standin):
    """A/B where arm B changes the API key and fails: the rollback waits for arm A's server with
    arm A's key (from its known-good file, as Compose reads it on the host), not with B's.
    The key holds a ``$``: a profile value is literal, so the server gets those characters."""
    host, _ = card
    key_a, key_b = "sk-a-$HOME-" + uuid.uuid4().hex, "sk-b-" + uuid.uuid4().hex
    assert _deploy(project, card, _fast(project, "good", api_key=key_a), standin).outcome == "ready"
    assert httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=5).status_code == 401
    answer = httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=5,
                       headers={"Authorization": f"Bearer {key_a}"})
    assert [m["id"] for m in answer.json()["data"]] == ["Qwen3.8-27B"]
    bad = _fast(project, "bad", parent="good", mode="exit", api_key=key_b)
    with pytest.raises(DeployError, match=r"rolled back: revision 1 \(good\) serves again"):
        _deploy(project, card, bad, standin)
    assert [o for *_, o in _revisions(host)] == ["ready", "failed", "ready"]
    st = status(host, card[1])  # the running container's environment, $ and all, is the file's
    assert st["serving"] is True and st["drift"] == []
    needles = [k.encode() for k in (key_a, key_a.replace("$", "$$"), key_b)]  # $$: as a compose file has it
    leaks = [str(p.relative_to(project.runs_dir)) for p in project.runs_dir.rglob("*")  # the caches too
             if p.is_file() and any(n in p.read_bytes() for n in needles)]
    assert leaks == []


def test_a_key_kept_on_the_host_in_an_env_file_is_read_there_and_never_recorded(project, card, standin):
    """The key is in no profile: ``compose_extra: {env_file: [secrets.env]}`` names a file in the
    host's working directory, which Compose reads there. Readiness sends the key Compose gave
    the server (read on the host after the switch), and no record holds it."""
    host, _ = card
    key = "sk-host-" + uuid.uuid4().hex
    host.run_script('umask 077; printf "VLLM_API_KEY=%s\\n" "$2" > "$1/secrets.env"', [host.workdir, key])
    _fast(project, "good")
    _variant(project, "keyed", "extends: good\ncontainer:\n  compose_extra:\n    env_file: [secrets.env]\n")
    result = _deploy(project, card, "keyed", standin)
    assert result.outcome == "ready"
    assert httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=5).status_code == 401
    assert httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=5,
                     headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert result.run.meta.redacted == ["environment.VLLM_API_KEY"]
    leaks = [p.name for p in result.run.path.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaks == []


def test_failed_first_deploy_without_previous_is_stopped(project, card, standin):
    host, _ = card
    bad = _fast(project, "bad", mode="exit")
    with pytest.raises(DeployError, match="nothing to roll back to"):
        _deploy(project, card, bad, standin)
    assert _container(host) is None
    assert host.read_lock() is None


# ------------------------------------------------------------------------------ issue 15 sequences


def test_two_interrupted_deploys_in_a_row_roll_back_to_the_last_known_good(project, card, standin):
    host, entry = card
    assert _deploy(project, card, _fast(project, "good"), standin).outcome == "ready"
    slow = _fast(project, "slow", parent="good", startup_s=60)
    for _ in range(2):
        started = lambda: any(h.get("profile") == "slow" and h["outcome"] == "started"  # noqa: E731
                              for h in _history(host)[-1:])
        _sigterm_after(started)
        with pytest.raises(DeployError, match=r"interrupted.*rolled back: revision \d+ \(good\)"):
            _deploy(project, card, slow, standin)
    assert _serving_profile(project, card) == "good"
    outcomes = [(e, p, o) for _, e, p, o in _revisions(host)]
    assert outcomes == [("deploy", "good", "ready"), ("deploy", "slow", "interrupted"),
                        ("rollback", "good", "ready"), ("deploy", "slow", "interrupted"),
                        ("rollback", "good", "ready")]
    assert host.read_lock() is None


def test_no_rollback_then_a_failing_deploy_restores_the_last_good_not_the_unserved(project, card, standin):
    host, entry = card
    assert _deploy(project, card, _fast(project, "good"), standin).outcome == "ready"
    _fast(project, "bad1", parent="good", mode="exit")
    with pytest.raises(DeployError, match="left as it is"):
        _deploy(project, card, "bad1", standin, no_rollback=True)
    _fast(project, "bad2", parent="good", mode="crashloop", restart="unless-stopped")
    with pytest.raises(DeployError, match="rolled back: revision 1 \\(good\\) serves again"):
        _deploy(project, card, "bad2", standin)
    assert _serving_profile(project, card) == "good"


def test_failed_first_then_good_then_failing_restores_the_good(project, card, standin):
    host, entry = card
    _fast(project, "bad", mode="exit")
    with pytest.raises(DeployError, match="nothing to roll back to"):
        _deploy(project, card, "bad", standin)
    assert _deploy(project, card, _fast(project, "good"), standin).outcome == "ready"
    with pytest.raises(DeployError, match="rolled back: revision 2 \\(good\\)"):
        _deploy(project, card, "bad", standin)
    assert _serving_profile(project, card) == "good"
    # `invoke rollback` has no other known-good file: it refuses instead of restoring "bad"
    with pytest.raises(DeployError, match="no known-good deployment to roll back to"):
        rollback(host, entry, reporter=QuietReporter(), project=project)
    assert host.read_lock() is None


def _inventory(tmp_path: Path, host: RemoteHost) -> Path:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        f"hosts:\n  b70:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n"
        f"    workdir: {host.workdir}\n    render_gid: \"992\"\n    port: {PORT}\n"
        f"    ready_timeout_s: 120\n    api_host: 127.0.0.1\n")
    return inventory


def _invoke(project: Project, *args: str) -> subprocess.Popen:
    env = {**os.environ, "SERVEDECK_PROJECT": str(project.root)}
    return subprocess.Popen([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_killed_client_leaves_a_stale_lock_that_rollback_takes_over(project, card, standin, tmp_path):
    host, entry = card
    assert _deploy(project, card, _fast(project, "good"), standin).outcome == "ready"
    slow = _fast(project, "slow", parent="good", startup_s=60)
    inv = _inventory(tmp_path, host)
    proc = _invoke(project, "deploy", "--host", "b70", "--profile", slow, "--inventory", str(inv),
                   "--image", standin)
    deadline = time.time() + 90
    while not any(h.get("profile") == "slow" and h["outcome"] == "started" for h in _history(host)):
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
        time.sleep(0.3)
    proc.kill()
    proc.communicate(timeout=30)
    killed_run = _runs(project)[-1]
    assert json.loads((killed_run / "run.json").read_text())["outcome"] == "started"
    lock = host.read_lock()
    assert lock is not None and lock.stale_reason() is not None
    # every command that takes the lock recognises it as stale and names the option
    for attempt in (lambda: rollback(host, entry, reporter=QuietReporter(), project=project),
                    lambda: down(host)):
        with pytest.raises(DeployError) as exc:
            attempt()
        assert "looks stale" in exc.value.message and "--force-unlock" in exc.value.hint
    rb = rollback(host, entry, reporter=QuietReporter(), project=project, force_unlock=True)
    assert rb.ready
    assert _serving_profile(project, card) == "good"
    assert host.read_lock() is None
    killed = json.loads((killed_run / "run.json").read_text())
    assert killed["outcome"] == "abandoned" and "client died" in killed["failure"]
    runs = _runs(project)
    meta = json.loads((runs[-1] / "run.json").read_text())
    assert meta["kind"] == "rollback" and meta["outcome"] == "ready" and meta["rollback_to"] == 1
    assert [o for _, _, _, o in _revisions(host)] == ["ready", "abandoned", "ready"]


# ------------------------------------------------------------------------------ lock


def test_a_second_concurrent_deploy_is_refused_by_the_lock_without_a_run_record(project, card, standin):
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
    runs_before = _runs(project)
    other = RemoteHost("b70", host.ssh_target, host.workdir)
    with pytest.raises(DeployError, match="another deploy holds the lock"):
        deploy(project, other, entry, ProfileStore(project.profiles_dir).load(slow),
               DeployOptions(image=standin), QuietReporter())
    with pytest.raises(DeployError, match="cannot down"):
        down(other)
    assert _runs(project) == runs_before  # no orphan run record
    t.join(120)
    assert outcome["result"].outcome == "ready"
    assert host.read_lock() is None
    assert _container(host) is not None  # the refused `down` did not touch it


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
    assert host.run(["ls", "-A", host.workdir]).stdout.split() == [".servedeck", "cache"]
    assert host.read_lock() is None and not project.runs_dir.exists()


def test_a_port_held_by_another_workdirs_deployment_stops_in_preflight_naming_it(project, card, standin):
    """Two working directories on one host with the same port and container name: the second
    deploy stops in preflight, naming the other Compose project, and the first keeps serving."""
    host, entry = card
    _deploy(project, card, _fast(project), standin)
    workdir = f"/srv/servedeck-test/deploy-{uuid.uuid4().hex[:8]}"
    other = RemoteHost("b70", host.ssh_target, workdir)
    other.run_script('mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" && '
                     'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [workdir])
    try:
        with pytest.raises(DeployError) as exc:
            _deploy(project, (other, entry.model_copy(update={"workdir": workdir})), "fast", standin)
        assert "preflight" in exc.value.message
        assert f"port {PORT} is in use on the host by b70 (Compose project in {host.workdir})" in exc.value.message
        assert other.read_file("docker-compose.yml", missing_ok=True) is None and other.read_lock() is None
        assert _models() == ["Qwen3.8-27B"]  # the first deployment serves on
    finally:
        other.run(["rm", "-rf", workdir], check=False)
        other.close()


def test_wrong_render_gid_stops_in_preflight(project, card, standin):
    host, entry = card
    _variant(project, "gid", 'extends: batch-8192\ncontainer:\n  group_add: ["993"]\n')
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, "gid", standin)
    assert "render node group id is 992" in exc.value.message
    assert host.read_file("docker-compose.yml", missing_ok=True) is None
    assert host.read_lock() is None


def test_unknown_digest_pull_failure_marks_the_run_failed(project, card, standin, registry):
    host, entry = card
    missing = f"{registry}/servedeck/nothing@sha256:{'0' * 64}"
    with pytest.raises(DeployError, match="pulling .* failed") as exc:
        deploy(project, host, entry, ProfileStore(project.profiles_dir).load("batch-8192"),
               DeployOptions(image=missing), QuietReporter())
    run = _runs(project)[-1]
    meta = json.loads((run / "run.json").read_text())
    assert meta["outcome"] == "failed" and "pulling" in meta["failure"] and meta["failure_phase"] == "pull"
    assert _revisions(host) == [(1, "deploy", None, "failed")]
    assert host.read_lock() is None and host.read_file("docker-compose.yml", missing_ok=True) is None
    assert "the running deployment was not touched" in exc.value.message


# ------------------------------------------------------------------------------ interruption


def test_interrupted_first_deploy_is_left_as_it_is_and_recorded(project, card, standin, tmp_path):
    host, entry = card
    slow = _fast(project, "slow", startup_s=30)
    proc = _invoke(project, "deploy", "--host", "b70", "--profile", slow, "--inventory",
                   str(_inventory(tmp_path, host)), "--image", standin)
    deadline = time.time() + 90
    while _container(host) is None and time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.3)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "interrupted" in out and "nothing to roll back to" in out
    st = status(host, entry)
    assert st["lock"] is None and st["last_deploy"]["outcome"] == "interrupted"
    assert st["compose_present"] and st["drift"] == []
    assert st["container"]["state"] == "running"
    run = json.loads((_runs(project)[-1] / "run.json").read_text())
    assert run["outcome"] == "interrupted"


# ------------------------------------------------------------------------------ rollback, logs, down


def test_rollback_to_a_revision_then_logs_then_down(project, card, standin):
    host, entry = card
    first = _fast(project, "first")
    _variant(project, "second", "extends: first\nengine:\n  max_num_batched_tokens: 4096\n")
    assert _deploy(project, card, first, standin).outcome == "ready"
    first_compose = host.read_file("docker-compose.yml")
    assert _deploy(project, card, "second", standin).outcome == "ready"
    second_compose = host.read_file("docker-compose.yml")
    assert b"max_num_batched_tokens=4096" in second_compose

    rb = rollback(host, entry, reporter=QuietReporter(), project=project)
    assert rb.ready and host.read_file("docker-compose.yml") == first_compose
    rb = rollback(host, entry, to=2, reporter=QuietReporter(), project=project)
    assert rb.ready and host.read_file("docker-compose.yml") == second_compose
    with pytest.raises(DeployError, match="not a known-good"):
        rollback(host, entry, to=99, reporter=QuietReporter(), project=project)
    assert _models() == ["Qwen3.8-27B"]
    assert status(host, entry)["drift"] == []
    kinds = [json.loads((p / "run.json").read_text())["kind"] for p in _runs(project)]
    assert kinds == ["deploy", "deploy", "rollback", "rollback"]  # a refusal records nothing

    lines: list[str] = []
    stream_logs(host, tail=50, write=lines.append)
    assert "Starting vLLM server on" in "\n".join(lines)

    down(host)
    st = status(host, entry)
    assert st["container"] is None and "down" in " ".join(st["drift"])
    assert [(e, o) for _, e, _, o in _revisions(host)][-3:] == [
        ("rollback", "ready"), ("rollback", "ready"), ("down", "down")]
    assert host.read_lock() is None


# ------------------------------------------------------------------------------ transport faults


def _sshd_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "sshd.*servedeck-test|sshd: root"], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def _resume(pids: list[int]) -> None:
    """SIGCONT to each of ``pids`` still there (a frozen sshd or ssh of a test)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_frozen_ssh_during_the_wait_is_diagnosed_within_the_deadline(project, card, standin):
    """The test sshd (listener and every session) and the client's shared connection are
    frozen (SIGSTOP) for 25 s from the start of the wait; the server never becomes ready
    (STANDIN_MODE=never) and the readiness timeout is 10 s."""
    host, entry = card
    assert _deploy(project, card, _fast(project, "good"), standin).outcome == "ready"
    _fast(project, "never", parent="good", mode="never")
    frozen: list[int] = []
    margin_s = 20.0
    waiting = threading.Event()

    class WaitSignal(QuietReporter):
        def phase(self, name: str, text: str) -> None:
            super().phase(name, text)
            if name == "wait":
                waiting.set()

    def freeze():
        if not waiting.wait(120):
            return
        time.sleep(1.0)  # the container watcher has found the container
        master = host.transport.master_pid()
        frozen.extend(_sshd_pids() + ([master] if master else []))
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(25)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)

    t = threading.Thread(target=freeze, daemon=True)
    t.start()
    try:
        with pytest.raises(DeployError) as exc:
            deploy(project, host, entry, ProfileStore(project.profiles_dir).load("never"),
                   DeployOptions(image=standin, timeout_s=10), WaitSignal())
    finally:
        t.join(60)
        _resume(frozen)
    assert frozen, "nothing was frozen"
    run = json.loads((_runs(project)[-1] / "run.json").read_text())
    assert run["diagnosis"] == "unreachable" and "cannot reach the host" in run["failure"]
    assert run["failure_phase"] == "readiness"
    assert "cannot reach the host" in exc.value.message
    # the wait ended within the readiness timeout plus the stated margin (the bug: 166 s for 60)
    assert run["wait_s"] <= 10 + margin_s
    assert host.read_lock() is None
    assert _serving_profile(project, card) == "good"


# ------------------------------------------------------------------------------ secrets


def test_secrets_never_reach_a_record_or_the_host_history(project, card, standin):
    host, entry = card
    key, token = "sk-servedeck-test-key-0123456789", "hf_servedecktesttoken0123456789"
    _variant(project, "keyed", (
        "extends: batch-8192\nengine:\n  extra_args: [\"--api-key\", \"" + key + "\"]\n"
        "container:\n  environment:\n    ZE_FLAT_DEVICE_HIERARCHY: COMPOSITE\n"
        "    HF_HOME: /root/.cache/huggingface\n    HUGGINGFACE_HUB_CACHE: /root/.cache/huggingface/hub\n"
        f"    STANDIN_STARTUP_S: \"2\"\n    HF_TOKEN: \"{token}\"\n"))
    result = _deploy(project, card, "keyed", standin)
    assert result.outcome == "ready"
    on_host = host.read_file("docker-compose.yml")
    assert key.encode() in on_host  # deployed as written, readable by its owner only
    assert host.run(["stat", "-c", "%a", host.compose_path]).stdout.strip() == "600"
    for path in result.run.path.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert key not in text and token not in text, path
    meta = result.run.meta
    assert meta.compose_redacted is True
    assert meta.redacted == ["--api-key", "environment.HF_TOKEN"]
    assert meta.compose_sha256 == result.compose_sha256  # the deployed text's hash
    hist_text = host.read_file(host.history_path).decode()
    assert key not in hist_text and token not in hist_text


# ------------------------------------------------------------------------------ soak


def test_soak_of_20_alternating_deploys_leaves_only_bounded_history(project, card, standin,
                                                                   monkeypatch):
    """20 deploys alternating over 7 distinct compose files: nothing is left on the engine or in
    the workdir beyond the history, pruned to its stated size (here 12 lines, and the
    KEEP_GOOD newest known-good files)."""
    host, entry = card
    from servedeck.host import history
    monkeypatch.setattr(history, "KEEP_LINES", 12)
    names = [_fast(project, f"v{i}", startup_s=0.5 + 0.1 * i) for i in range(7)]

    def engine_objects():
        out = subprocess.run(["sh", "-c", "docker ps -aq | wc -l; docker volume ls -q | wc -l; "
                              "docker network ls -q | wc -l"], capture_output=True, text=True)
        return out.stdout.split()

    for i in range(20):
        assert _deploy(project, card, names[i % 7], standin).outcome == "ready"
        if i == 0:
            after_first = engine_objects()
    assert engine_objects() == after_first
    listing = host.run(["find", host.workdir, "-not", "-path", "*/models/*"]).stdout.split()
    rel = sorted(p[len(host.workdir):] for p in listing)
    goods = [p for p in rel if p.startswith("/.servedeck/good/")]
    assert len(goods) == history.KEEP_GOOD
    assert sorted(set(rel) - set(goods)) == ["", "/.servedeck", "/.servedeck/good",
                                              "/.servedeck/history.jsonl", "/cache",
                                              "/docker-compose.yml", "/models"]
    assert 0 < len(_history(host)) <= 12  # pruned to KEEP_LINES
    assert host.read_lock() is None
    st = status(host, entry)
    # every known-good revision the (pruned) history still names is restorable from good/
    assert st["serving"] and 1 <= len(st["known_good"]) <= history.KEEP_GOOD
    stored = {p.rsplit("/", 1)[1][:-4] for p in goods}
    assert {g["compose_sha256"] for g in st["known_good"]} <= stored
