"""Fixtures for integration tests against the real services of ``scripts/test-services``.

The session fixture ``test_services`` runs ``scripts/test-services up`` (idempotent, fast when
already up) and fails loudly if the services cannot start: nothing here is skipped.

Fixtures for everyone:
    test_services  dict of the exports printed by ``scripts/test-services env``
    test_host      RemoteHost("b70") for alias sd-testhost, workdir /srv/servedeck-test/b70
    registry       "127.0.0.1:5000" (Debian's docker-registry, plain HTTP, loopback)
    scratch_host   a RemoteHost on the same machine with a fresh, empty workdir
                   /srv/servedeck-test/scratch-<random> (removed afterwards), for tests that
                   write files or take the deploy lock without disturbing b70
    tiny_image     factory: tiny_image(tag, files={"/hello.txt": b"..."}) -> image id, an image
                   made locally by `docker import` of a tarball (no pulls)

Every test collected under ``tests/integration/`` gets the ``integration`` marker.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servedeck.host.remote import RemoteHost, SshTarget

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "test-services"
SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
KNOWN_HOSTS = "/var/lib/servedeck-test/client/known_hosts"
HOST_KEY_PUB = "/var/lib/servedeck-test/sshd/ssh_host_ed25519_key.pub"
WORKDIR = "/srv/servedeck-test/b70"
REGISTRY = "127.0.0.1:5000"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def test_services() -> dict[str, str]:
    """Start (or confirm) dockerd, registry, sshd; return the `env` exports as a dict."""
    up = subprocess.run([str(SERVICES), "up"], capture_output=True, text=True, timeout=1500)
    if up.returncode != 0:
        pytest.fail(f"scripts/test-services up failed (exit {up.returncode}):\n"
                    f"{up.stdout}\n{up.stderr}", pytrace=False)
    env = subprocess.run([str(SERVICES), "env"], capture_output=True, text=True, check=True)
    exports: dict[str, str] = {}
    for line in env.stdout.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            exports[key] = value
    return exports


@pytest.fixture(scope="session")
def test_host(test_services: dict[str, str]) -> RemoteHost:
    """The card host b70 of deploy/test-hosts.yaml."""
    return RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), WORKDIR)


@pytest.fixture(scope="session")
def registry(test_services: dict[str, str]) -> str:
    """Address of the test registry (host:port), reachable from the host's dockerd."""
    return test_services.get("SERVEDECK_REGISTRY", REGISTRY)


@pytest.fixture
def scratch_host(test_services: dict[str, str]) -> Iterator[RemoteHost]:
    """A RemoteHost with its own empty workdir on the test machine, removed afterwards."""
    workdir = f"/srv/servedeck-test/scratch-{uuid.uuid4().hex[:10]}"
    host = RemoteHost("scratch", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    host.run(["mkdir", "-p", workdir])
    yield host
    host.run(["rm", "-rf", "--", workdir])


def _tar_bytes(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(data)
            info.mode = (modes or {}).get(path, 0o644)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="session")
def tiny_image(test_services: dict[str, str]) -> Iterator[Callable[..., str]]:
    """Factory making images locally with `docker import` (no registry pulls).

    ``tiny_image(tag, files={"/path": bytes}, modes={"/path": 0o755}, cmd=None) -> image id``;
    all tags made are removed at the end of the session.
    """
    made: list[str] = []

    def make(tag: str, files: dict[str, bytes], modes: dict[str, int] | None = None,
             cmd: list[str] | None = None) -> str:
        argv = ["docker", "import"]
        if cmd:
            import json
            argv += ["--change", f"CMD {json.dumps(cmd)}"]
        proc = subprocess.run([*argv, "-", tag], input=_tar_bytes(files, modes),
                              capture_output=True, check=True, timeout=300)
        made.append(tag)
        return proc.stdout.decode().strip()

    yield make
    for tag in made:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


#: The stand-in serving a card profile: the seed's container environment, a 1 s start-up, and
#: 256 output tokens in about 50 ms.
STANDIN_ENV = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
               "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub", "STANDIN_STARTUP_S": "1",
               "STANDIN_DECODE_S_PER_TOKEN": "0.0002"}


STANDIN_MAX_MODEL_LEN = 2048
"""What the stand-in's replayed vLLM log reports (``non-default args``): the deploy verifies the
profile's ``max_model_len`` against it, and ``invoke deploy`` exits 4 when they differ."""


@pytest.fixture(scope="module")
def standin_lab(test_services, tmp_path_factory):
    """Factory ``make(name, profile, extends, env, host="b70", port=9932) -> (Project, RemoteHost)``:
    a copy of the repository's profiles, templates, schema and image catalog whose profile
    ``profile`` extends ``extends`` with the stand-in image, :data:`STANDIN_MAX_MODEL_LEN` and
    :data:`STANDIN_ENV` plus ``env``,
    and one inventory host with a fresh working directory ``/srv/servedeck-test/<name>-<random>``
    on the loopback card host (weights and cache directories made). Whatever was deployed there is
    brought down and the directory removed at the end of the module."""
    from devtools import imagebuild
    from servedeck.model.project import Project

    made: list[tuple[RemoteHost, str]] = []

    def make(name: str, profile: str, extends: str, env: dict[str, str] | None = None, *, host: str = "b70",
             port: int = 9932):
        standin = imagebuild.build_standin_image(progress=False)
        root = tmp_path_factory.mktemp(name)
        for part in ("profiles", "templates", "schema"):
            subprocess.run(["cp", "-r", str(ROOT / part), str(root / part)], check=True)
        (root / "deploy").mkdir()
        (root / "deploy" / "images.yaml").write_bytes((ROOT / "deploy" / "images.yaml").read_bytes())
        workdir = f"/srv/servedeck-test/{name}-{uuid.uuid4().hex[:8]}"
        remote = RemoteHost(host, SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
        remote.run_script('mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" "$1/cache" && '
                          'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [workdir])
        made.append((remote, workdir))
        (root / "deploy" / "hosts.yaml").write_text(
            f"hosts:\n  {host}:\n    ssh: {{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}\n"
            f"    workdir: {workdir}\n    render_gid: \"992\"\n    port: {port}\n"
            f"    ready_timeout_s: 120\n    api_host: 127.0.0.1\n")
        lines = "\n".join(f"    {k}: {json.dumps(str(v))}" for k, v in {**STANDIN_ENV, **(env or {})}.items())
        (root / "profiles" / f"{profile}.yaml").write_text(
            f"extends: {extends}\nimage: {standin}\nengine:\n  max_model_len: {STANDIN_MAX_MODEL_LEN}\n"
            f"container:\n  environment:\n{lines}\n")
        return Project(root), remote

    yield make
    for remote, workdir in made:
        remote.run(f"cd {workdir} && [ -e docker-compose.yml ] && docker compose down --remove-orphans -t 1; true",
                   check=False)
        remote.run(["rm", "-rf", workdir], check=False)
        remote.close()
