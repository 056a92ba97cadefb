"""The host's Docker Engine, through the docker SDK's public API, over servedeck's SSH connection.

This module is the only one that handles the SDK's objects: callers get plain data (an image's
inspect document, a container's state) or a :class:`Container`, servedeck's own view of one
container. The SDK talks to a local Unix socket that OpenSSH forwards to the host's
``/var/run/docker.sock`` over the shared connection of :class:`~servedeck.host.ssh.SshTransport`
(``ssh -O forward -L``): one host-key policy, the user's ssh config as given, and no new
key exchange per Docker call. ``docker.DockerClient(base_url="unix://...")`` is the SDK's
documented way to reach an Engine socket (docker SDK 7.1, ``docker/client.py``).

``import docker`` takes 0.3 to 0.5 s (it imports requests and paramiko), so a deploy needs
no Engine connection before the switch when the preflight round trip found the image, and
:func:`preload` imports the SDK in a background thread while ``docker compose up`` runs.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.host.ssh import HostUnreachable, SshTransport

ENGINE_SOCKET = "/var/run/docker.sock"
"""The Engine's socket on the host (dockerd's default ``-H unix:///var/run/docker.sock``)."""

_preloaded: set[str] = set()


def preload(*modules: str) -> None:
    """Import the docker SDK, and ``modules`` (dotted names), in a daemon thread, each once
    per process: their import cost overlaps with the caller's waits on SSH round trips."""
    names = [m for m in ("docker", *modules) if m not in _preloaded]
    if not names:
        return
    _preloaded.update(names)

    def _import() -> None:
        import importlib
        for name in names:
            importlib.import_module(name)

    threading.Thread(target=_import, daemon=True, name="servedeck-preload").start()


def _remove_orphaned_sockets(base: str) -> None:
    """Remove forwarded-socket files ``docker-<pid>-<id>.sock`` in ``base`` whose process is
    gone (a client killed before :meth:`Engine.close`); the master that served them is gone or
    forwards to a file nobody uses."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"docker-(\d+)-[0-9a-f]+\.sock", name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(base, name))
            except OSError:
                pass
        except OSError:  # alive, another user's (EPERM)
            pass


class Engine:
    """A Docker Engine client for one host, created on first use.

    Args:
        transport: the host's SSH transport (the socket is forwarded over it).
        api_version: the Engine API version if known (saves the ``/version`` negotiation).
        timeout_s: socket timeout of each API call, seconds.
    """

    def __init__(self, transport: SshTransport, *, api_version: str | None = None,
                 timeout_s: float = 15.0) -> None:
        self.transport = transport
        self.api_version = api_version
        self.timeout_s = timeout_s
        self._client = None
        self._local: str | None = None
        self._lock = threading.Lock()

    @property
    def client(self):
        """The ``docker.DockerClient`` (forwarding the socket on first use).

        Raises:
            HostUnreachable: the socket cannot be forwarded or the Engine does not answer.
        """
        with self._lock:
            if self._client is None:
                import docker
                base = os.path.dirname(self.transport.control_path())
                _remove_orphaned_sockets(base)
                local = f"{base}/docker-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
                self.transport.forward_unix_socket(local, ENGINE_SOCKET)
                self._local = local
                try:
                    self._client = docker.DockerClient(base_url=f"unix://{local}",
                                                       version=self.api_version or "auto",
                                                       timeout=int(self.timeout_s))
                except docker.errors.DockerException as exc:
                    self._drop_forward()
                    raise HostUnreachable(
                        f"host {self.transport.name}: the Docker Engine does not answer over SSH: {exc}",
                        hint="is dockerd running on the host, and may the SSH user use "
                             f"{ENGINE_SOCKET}?") from exc
            return self._client

    def reset(self) -> None:
        """Forget the client and its forwarding (after a transport fault); the next use
        forwards again (over a fresh connection if the transport reconnected)."""
        client, self._client = self._client, None  # no lock: a hung creation must not block
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a broken client
                pass
        self._drop_forward()

    def _drop_forward(self) -> None:
        if self._local:
            local, self._local = self._local, None
            threading.Thread(target=self.transport.cancel_forward, args=(local, ENGINE_SOCKET),
                             daemon=True).start()

    def close(self) -> None:
        """Close the client and cancel the socket forwarding."""
        client, self._client = self._client, None
        local, self._local = self._local, None
        if client is not None:
            client.close()
        if local:
            self.transport.cancel_forward(local, ENGINE_SOCKET)

    # ------------------------------------------------------------------ images

    def image(self, ref: str) -> dict[str, Any] | None:
        """The inspect document of image ``ref`` (``docker image inspect``), or None when the
        engine does not have it."""
        import docker
        try:
            return self.client.images.get(ref).attrs
        except docker.errors.ImageNotFound:
            return None

    def pull(self, ref: str) -> dict[str, Any]:
        """Pull ``ref`` (by digest) and return its inspect document.

        Raises:
            PullFailed: the registry or the engine refused (their explanation in the message).
        """
        import docker
        try:
            return self.client.images.pull(ref).attrs
        except docker.errors.APIError as exc:
            raise PullFailed(str(exc.explanation or exc)) from None

    def image_digests(self, image_id: str) -> list[str]:
        """``RepoDigests`` of the image ``image_id`` (``[]`` when it is gone)."""
        try:
            return (self.image(image_id) or {}).get("RepoDigests") or []
        except Exception:  # noqa: BLE001 - an image removed under a running container
            return []

    # ------------------------------------------------------------------ containers

    def container(self, workdir: str, service: str) -> Container | None:
        """The compose container of ``service`` whose project works in ``workdir``, or None; a
        running one first when there are several (a raced switch leaves a created one beside it)."""
        found = self.client.containers.list(all=True, filters={
            "label": [f"com.docker.compose.project.working_dir={workdir}",
                      f"com.docker.compose.service={service}"]})
        found.sort(key=lambda c: (c.attrs.get("State") or {}).get("Status") != "running")
        return Container(found[0]) if found else None

    def containers(self, workdir: str) -> list[Container]:
        """Every container (any state, any service, any Compose project name) whose project
        works in ``workdir``: one when the host is as servedeck left it."""
        return [Container(c) for c in self.client.containers.list(all=True, filters={
            "label": [f"com.docker.compose.project.working_dir={workdir}"]})]


class PullFailed(ServedeckError):
    """An image pull failed on the host's engine (``message``: the engine's explanation)."""


class ContainerGone(ServedeckError):
    """The engine answered that the container no longer exists (removed while watched)."""


class Container:
    """One container on a host's engine, as servedeck reads it: its inspect document, its state
    and its log as text. The docker SDK's container it wraps stays inside this layer."""

    def __init__(self, sdk_container: Any) -> None:
        self._c = sdk_container

    @property
    def id(self) -> str:
        return self._c.id

    @property
    def name(self) -> str:
        return self._c.name

    @property
    def attrs(self) -> dict[str, Any]:
        """The inspect document as last read (``docker container inspect``)."""
        return self._c.attrs

    def state(self, *, reload: bool = True) -> dict[str, Any]:
        """:func:`container_state` of the container, read again from the engine (``reload``).

        Raises:
            ContainerGone: the container was removed.
        """
        if reload:
            try:
                self._c.reload()
            except Exception as exc:  # noqa: BLE001 - the SDK's NotFound, without importing it
                if type(exc).__name__ == "NotFound":
                    raise ContainerGone(f"container {self._c.id[:12]} is gone") from None
                raise
        return container_state(self._c)

    def logs(self, *, tail: int | str = "all") -> str:
        """The container's log (stdout and stderr) as text."""
        return self._c.logs(tail=tail).decode("utf-8", "replace")

    def follow(self, *, tail: int | str = "all") -> Iterator[str]:
        """The container's log as text chunks as they come, until the container or the
        connection ends it."""
        for chunk in self._c.logs(stream=True, follow=True, tail=tail):
            yield chunk.decode("utf-8", "replace")


def parse_docker_time(value: str | None) -> float | None:
    """Epoch seconds of a Docker RFC 3339 timestamp (nanoseconds allowed); None for the zero
    time ``0001-01-01T00:00:00Z`` or an unparsable value."""
    if not value or value.startswith("0001-"):
        return None
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", value)
    if not m:
        return None
    frac = float(m.group(2) or 0)
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return _dt.datetime.fromisoformat(m.group(1) + tz).timestamp() + frac


def container_state(container) -> dict[str, Any]:
    """The state of a (reloaded) container: ``{"id", "status", "running", "restarting",
    "exit_code", "restart_count", "started_at" (epoch s or None)}``."""
    st = container.attrs.get("State") or {}
    return {"id": container.id, "status": st.get("Status"), "running": bool(st.get("Running")),
            "restarting": bool(st.get("Restarting")), "exit_code": st.get("ExitCode"),
            "restart_count": container.attrs.get("RestartCount", 0),
            "started_at": parse_docker_time(st.get("StartedAt"))}
