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
