"""A profile with an API key on the real CPU vLLM server: it deploys (readiness sends the key),
benches (the bench sends it), and no file of its run record or of the host history contains it.

Real vLLM answers ``/health`` without a key and ``/v1/models`` with 401 to a request without
it (issue 15); the key lives only in the deployed compose file on the host (mode 0600).
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from devtools.demo import BASELINE, export_model, upload_dir
from devtools.imagebuild import build_cpu_vllm_image
from servedeck.bench.client import Workload
from servedeck.bench.record import bench_deployed
from servedeck.deploy.apply import deploy
from servedeck.deploy.console import QuietReporter
from servedeck.deploy.plan import DeployOptions
from servedeck.deploy.readiness import wait_ready
from servedeck.deploy.secrets import find_secrets
from servedeck.host.remote import RemoteHost
from servedeck.model.inventory import get_host, load_inventory
from servedeck.model.profile import ProfileStore
from servedeck.runs.store import run_dirs

KEY = "sk-servedeck-e2e-$" + uuid.uuid4().hex  # a profile value is literal: the server gets the $ too
ESCAPED = KEY.replace("$", "$$")  # as a compose file writes it
PORT = 9932
EAGER = "--enforce-eager"
"""Every server here starts eager (no torch.compile; vLLM's own flag, passed through): what these
tests judge is the key, not the compiled configuration the demo ships (tests/e2e/test_demo.py
starts that), and an eager start of the CPU server is ~15 s shorter (benchmarks/README)."""


def _runs(project) -> list:
    """The project's run directories, oldest first (its runs/ also holds the store's caches)."""
    return [d for _, d in run_dirs(project.runs_dir)]


@pytest.fixture(scope="module")
def keyed(loopback_project):
    project, workdir = loopback_project("apikey", PORT)
    ref = build_cpu_vllm_image(progress=False)
    project.local_images.record(ref)  # the baseline pins the placeholder digest: it loads with this image
    (project.profiles_dir / "cpu-keyed.yaml").write_text(
        f"extends: {BASELINE}\ncontainer:\n  environment:\n    VLLM_CPU_OMP_THREADS_BIND: auto\n"
        f"    VLLM_API_KEY: '{KEY}'\nengine:\n  extra_args: [{EAGER}]\n")
    entry = get_host(load_inventory(project.inventory_path), "local", project.inventory_path)
    host = RemoteHost("local", entry.ssh, entry.workdir)
    weights = ProfileStore(project.profiles_dir).load(BASELINE).profile.model.weights_dir
    upload_dir(host, export_model(ref), weights)
    try:
        yield project, host, entry
    finally:
        host.run(f"cd {workdir} 2>/dev/null && docker compose down --remove-orphans -t 2; "
                 f"rm -rf {workdir}", check=False)
        host.close()


def test_a_keyed_profile_deploys_benches_and_never_records_the_key(keyed):
    project, host, entry = keyed
    store = ProfileStore(project.profiles_dir)
    result = deploy(project, host, entry, store.load("cpu-keyed"), DeployOptions(), QuietReporter())
    assert result.outcome == "ready"
    # the real server wants the key: without it /v1/models is refused
    assert httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=10).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=10).status_code == 401
    bench_deployed(result.run.path, host, entry, Workload(prompt_tokens=128, max_tokens=16,
                                                          repetitions=1))
    assert (result.run.path / "bench.jsonl").exists()
    leaks = [p for p in result.run.path.rglob("*") if p.is_file()
             and (KEY.encode() in p.read_bytes() or ESCAPED.encode() in p.read_bytes())]
    assert leaks == []
    assert result.run.meta.redacted == ["environment.VLLM_API_KEY"]
    state = host.run(["sh", "-c", 'cat "$1"/history.jsonl; ls "$1"/good', "sh",
                      f"{host.workdir}/.servedeck"]).stdout
    assert KEY not in state and ESCAPED not in state
    assert host.run(["stat", "-c", "%a", host.compose_path]).stdout.strip() == "600"


def test_without_the_key_readiness_says_the_server_wants_one(keyed):
    """Readiness against the real keyed server (the test above's: no second vLLM start, another
    minute and a half here) says the server wants a key when none is sent and when another is;
    with the profile's key, read as the server gets it (``$`` and all), it is ready."""
    project, host, entry = keyed
    try:
        keyed_server_up = httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=10).status_code == 401
    except httpx.HTTPError:
        keyed_server_up = False
    if not keyed_server_up:  # run alone: put the keyed server up first
        assert deploy(project, host, entry, ProfileStore(project.profiles_dir).load("cpu-keyed"),
                      DeployOptions(), QuietReporter()).outcome == "ready"
    profile = ProfileStore(project.profiles_dir).load("cpu-keyed").profile
    secrets = find_secrets([], profile.container.environment)
    assert secrets.names == ["environment.VLLM_API_KEY"] and secrets.api_key == KEY

    def wait(api_key):
        return wait_ready(host, service=profile.container.service, base_url=f"http://127.0.0.1:{PORT}",
                          served_name=profile.model.served_model_name[0], api_key=api_key,
                          timeout_s=60, reporter=QuietReporter())

    refused = wait(None)
    assert not refused.ready and refused.diagnosis == "wants-key"
    assert "wants an API key" in refused.reason and "without a key" in refused.reason
    wrong = wait(ESCAPED)  # the key as the compose file spells it is not the key
    assert not wrong.ready and wrong.diagnosis == "wants-key" and "the key the profile configures" in wrong.reason
    assert wait(secrets.api_key).ready


# ------------------------------------------------------------------------------ every spelling (issue 27)


def _spelled(project, name: str, spelling: str, key: str) -> None:
    """A keyed variant of the baseline giving vLLM ``key`` in one of the spellings it accepts."""
    body = f"extends: {BASELINE}\ncontainer:\n  environment:\n    VLLM_CPU_OMP_THREADS_BIND: auto\n"
    if spelling == "--api_key K":
        body += f"engine:\n  extra_args: [{EAGER}, --api_key, '{key}']\n"
    elif spelling == "--api-key=K":
        body += f"engine:\n  extra_args: [{EAGER}, '--api-key={key}']\n"
    else:  # env_file: the key is in a file on the host, in no profile; the old server stops slowly
        body += ("  compose_extra:\n    env_file: [secrets.env]\n    stop_signal: SIGWINCH\n"
                 f"    stop_grace_period: 6s\nengine:\n  extra_args: [{EAGER}]\n")
    (project.profiles_dir / f"{name}.yaml").write_text(body)


@pytest.mark.parametrize("spelling", ["--api_key K", "--api-key=K", "env_file"])
def test_every_spelling_of_the_key_deploys_benches_and_is_never_recorded(keyed, spelling):
    """``--api_key KEY`` (vLLM folds ``_`` into ``-``), ``--api-key=KEY`` and a key the host
    keeps in an ``env_file``: readiness and the bench send the key the server wants (the bug:
    ``--api_key`` was neither sent, 401, nor redacted), and no run file or host history holds it."""
    project, host, entry = keyed
    key = f"sk-e2e-{spelling[:5].strip('-=')}-" + uuid.uuid4().hex
    name = "keyed-" + {"--api_key K": "underscore", "--api-key=K": "equals", "env_file": "envfile"}[spelling]
    if spelling == "env_file":
        host.run_script('umask 077; printf "VLLM_API_KEY=%s\\n" "$2" > "$1/secrets.env"', [host.workdir, key])
    _spelled(project, name, spelling, key)
    result = deploy(project, host, entry, ProfileStore(project.profiles_dir).load(name), DeployOptions(),
                    QuietReporter())
    assert result.outcome == "ready"
    assert httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=10).status_code == 401
    bench_deployed(result.run.path, host, entry, Workload(prompt_tokens=64, max_tokens=8, repetitions=1))
    assert (result.run.path / "bench.jsonl").exists()
    leaks = [p.name for p in result.run.path.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaks == []
    assert result.run.meta.redacted == (["environment.VLLM_API_KEY"] if spelling == "env_file" else ["--api-key"])
    assert key not in host.run(["cat", host.history_path]).stdout


def test_an_interrupt_during_the_switch_of_the_real_server_rolls_back_to_one_serving_container(keyed):
    """The env_file deployment (the test above) is serving and stops slowly (6 s: vLLM ignores
    its stop signal here, as a GPU server takes its time); a deploy of another variant is
    interrupted while Compose stops it. The client waits for Compose, then rolls back: the
    env_file deployment serves again, in one container, with its key."""
    import json
    import os
    import signal
    import subprocess
    import threading
    import time

    from servedeck.errors import DeployError
    from servedeck.host import history as hist

    project, host, entry = keyed
    prev = [r for r in hist.revisions(hist.history_records(host.read_file(host.history_path)))][-1]
    assert prev.profile == "keyed-envfile" and prev.outcome == "ready", "runs after the env_file spelling"
    _spelled(project, "keyed-next", "--api-key=K", "sk-e2e-next-" + uuid.uuid4().hex)

    def interrupt():
        deadline = time.time() + 120
        while time.time() < deadline:
            recs = hist.history_records(open(host.history_path, "rb").read())
            if recs and recs[-1].get("profile") == "keyed-next" and recs[-1].get("outcome") == "started":
                break
            time.sleep(0.1)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(DeployError) as exc:
        deploy(project, host, entry, ProfileStore(project.profiles_dir).load("keyed-next"), DeployOptions(),
               QuietReporter())
    assert f"rolled back: revision {prev.number} (keyed-envfile) serves again" in exc.value.message
    out = subprocess.run(["docker", "ps", "-a",
                          "--filter", f"label=com.docker.compose.project.working_dir={host.workdir}",
                          "--format", "{{.Names}} {{.State}}"], capture_output=True, text=True).stdout.split("\n")
    assert [ln.split()[1] for ln in out if ln] == ["running"]
    assert httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=10).status_code == 401  # its key again
    records = hist.history_records(host.read_file(host.history_path))
    last = [(r.event, r.profile, r.outcome) for r in hist.revisions(records)][-2:]
    assert last == [("deploy", "keyed-next", "interrupted"), ("rollback", "keyed-envfile", "ready")]
    assert host.read_lock() is None
    assert json.loads((_runs(project)[-1] / "run.json").read_text())["outcome"] == "interrupted"
