"""Waiting until a deployed server serves, with a wall-clock deadline whatever the transport does.

Two independent sources, so that a frozen SSH connection cannot stall the wait or be mistaken
for a dead container:

* the served API, polled every :data:`HEALTH_POLL_S` directly over HTTP (``/health`` then
  ``/v1/models`` with the profile's API key): this alone decides *ready*. Once the followed log
  shows a line that vLLM or uvicorn prints as it starts serving
  (:func:`~servedeck.vllm.startup_log.serving_signal`), the poll runs at once and then every
  :data:`FAST_POLL_S` for :data:`FAST_POLL_FOR_S`, so readiness is noticed milliseconds after the
  socket is bound rather than up to a poll interval later;
* the container, watched over the Docker Engine (through SSH) by a background thread every
  :data:`STATE_POLL_S`: it decides *exited* / *restarting* / *gone*, and when the Engine
  cannot be reached the thread reconnects (a fresh SSH connection) and keeps trying.

The main loop never blocks on SSH; it checks the deadline each :data:`HEALTH_POLL_S`. At the
deadline the reason tells "cannot reach the host" (with what was last known of the container)
from "not ready yet" (timeout, with the container's state).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from servedeck.deploy.console import Reporter
from servedeck.host.docker import Container, ContainerGone
from servedeck.host.remote import RemoteHost
from servedeck.safetext import printable

HEALTH_POLL_S = 0.1
FAST_POLL_S = 0.01
FAST_POLL_FOR_S = 5.0
"""After a serving line in the log, poll every FAST_POLL_S for this long (vLLM prints its route
list, and uvicorn "Application startup complete.", just before uvicorn binds the socket)."""
STATE_POLL_S = 1.0
ENGINE_STALL_S = 3.0
"""An Engine call (milliseconds normally) pending longer than this means the host is not
reachable right now."""
ERROR_LINE_RE = re.compile(r"\b(ERROR|CRITICAL|Traceback|Error|error:|Exception)\b")


@dataclass
class Readiness:
    """Outcome of waiting for a server.

    Attributes:
        ready: the server answered /health 200 and listed the served model.
        reason: why not ready, or "".
        diagnosis: ``ready`` | ``not-ready`` (timeout) | ``exited`` | ``restarting`` |
            ``gone`` | ``unreachable`` | ``wants-key`` | ``wrong-model`` | ``no-container``.
        log_text: the container log captured from start until ready/failure.
        container_started_at: docker's StartedAt (epoch seconds) of the container.
        ready_at: epoch seconds when readiness was noticed.
        waited_s: seconds spent waiting.
        container_id: the container's id.
    """

    ready: bool
    reason: str
    log_text: str
    container_started_at: float | None
    ready_at: float | None
    waited_s: float
    container_id: str | None = None
    diagnosis: str = ""

    def error_tail(self, n: int = 15) -> list[str]:
        """The last ``n`` log lines that look like errors (else the last ``n`` lines)."""
        lines = self.log_text.splitlines()
        errors = [line for line in lines if ERROR_LINE_RE.search(line)]
        return (errors or lines)[-n:]


class _Watcher(threading.Thread):
    """Watches the container over the Engine (daemon thread): state snapshots, log lines."""

    def __init__(self, host: RemoteHost, service: str) -> None:
        super().__init__(daemon=True, name="servedeck-watch")
        self.host, self.service = host, service
        self.state: dict[str, Any] | None = None   # last state seen
        self.gone = False                          # the Engine answered: no such container
        self.unreachable_since: float | None = None
        self.call_started: float | None = None     # an Engine call in flight since
        self.last_error = ""
        self.last_line = ""
        self.log_chunks: list[str] = []
        self.serving = threading.Event()           # set by a serving line (cleared by the waiter)
        self.serving_seen_at: float | None = None  # epoch seconds of the last serving line
        self.stop = threading.Event()
        self._container: Container | None = None
        self._follower: threading.Thread | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            self.call_started = time.time()
            try:
                fresh = self._container is None
                if fresh:
                    self._container = self.host.engine.container(self.host.workdir, self.service)
                    if self._container is None:
                        self.gone = True
                    else:
                        self._follow(self._container)
                if self._container is not None:
                    self.state = self._container.state(reload=not fresh)
                self.unreachable_since = self.call_started = None
            except Exception as exc:  # noqa: BLE001 - any Engine/transport failure
                self.call_started = None
                if isinstance(exc, ContainerGone):
                    self.gone = True
                else:
                    self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                    if self.unreachable_since is None:
                        self.unreachable_since = self.call_started or time.time()
                    self._container = None
                    if self.stop.is_set():
                        break  # told to stop mid-call: the caller may be using the connection now
                    try:
                        self.host.reconnect()
                    except Exception:  # noqa: BLE001
                        pass
            self.stop.wait(STATE_POLL_S)

    def unreachable_for(self, now: float) -> float | None:
        """Seconds the Engine has not answered (a failed call, or one hanging longer than
        :data:`ENGINE_STALL_S`), or None while it answers."""
        if self.unreachable_since is not None:
            return now - self.unreachable_since
        started = self.call_started
        if started is not None and now - started > ENGINE_STALL_S:
            return now - started
        return None

    def _follow(self, container) -> None:
        def follow() -> None:
            from servedeck.vllm.startup_log import serving_signal  # imported while compose runs (preload)
            buf = ""
            partial = ""
            try:
                for text in map(printable, container.follow()):
                    self.log_chunks.append(text)
                    buf = (buf + text)[-4000:]
                    lines = [ln for ln in buf.replace("\r", "\n").split("\n") if ln.strip()]
                    if lines:
                        self.last_line = lines[-1][-200:]
                    *complete, partial = (partial + text).replace("\r", "\n").split("\n")
                    partial = partial[-4000:]
                    if any(serving_signal(ln) for ln in complete):
                        self.serving_seen_at = time.time()
                        self.serving.set()
                    if self.stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - the stream ends with the container/connection
                pass

        self._follower = threading.Thread(target=follow, daemon=True, name="servedeck-logs")
        self._follower.start()

    def full_log(self, timeout_s: float = 5.0) -> str:
        """The container's whole log via one Engine call (bounded); else what was followed."""
        out: list[str] = []

        def fetch() -> None:
            try:
                c = self._container or self.host.engine.container(self.host.workdir, self.service)
                if c is not None:
                    out.append(printable(c.logs()))
            except Exception:  # noqa: BLE001
                pass

        t = threading.Thread(target=fetch, daemon=True)
        t.start()
        t.join(timeout_s)
        return out[0] if out else "".join(self.log_chunks)


def wait_ready(host: RemoteHost, *, service: str, base_url: str, served_name: str,
               api_key: str | None, timeout_s: float, reporter: Reporter, phase: str = "wait",
               clock: Callable[[], float] = time.time) -> Readiness:
    """Wait until the deployed server serves, or fail fast, within ``timeout_s`` wall-clock
    seconds (plus at most one HTTP timeout and the final log fetch).

    Returns:
        :class:`Readiness` (never raises for a failed start; KeyboardInterrupt propagates).
    """
    start = clock()
    deadline = start + timeout_s
    api = host.server_api(base_url, api_key, timeout_s=1.0)
    watch = _Watcher(host, service)
    watch.start()
    reason, diagnosis, ready_at = "", "", None
    try:
        while True:
            now = clock()
            health = api.get("/health")
            if health.status == 200:
                status, ids = api.served_models()
                if status == 200 and served_name in ids:
                    ready_at = clock()
                    diagnosis = "ready"
                    break
                if status in (401, 403):
                    diagnosis = "wants-key"
                    reason = (f"the server wants an API key: /v1/models answered {status} to "
                              + ("the key the profile configures" if api_key else
                                 "a request without a key, and the profile configures none")
                              + " (give the server's key in the profile, --api-key or VLLM_API_KEY,"
                                " literal, $ included; or in a file on the host named by"
                                " container.compose_extra env_file)")
                    break
                if status == 200:
                    diagnosis = "wrong-model"
                    reason = f"/v1/models lists {ids}, not {served_name!r}"
                    break
            st = watch.state
            if st is not None:
                if st["status"] in ("exited", "dead"):
                    diagnosis, reason = "exited", f"the container exited with code {st['exit_code']}"
                    break
                if st["restart_count"] > 0 or st["restarting"]:
                    diagnosis = "restarting"
                    reason = (f"the container restarted (restart count {st['restart_count']}): "
                              "a startup failure loop")
                    break
            if watch.gone:
                diagnosis = "gone" if st is not None else "no-container"
                reason = ("the container is gone (removed while starting)" if st is not None
                          else "no container was created")
                break
            if now >= deadline:
                reason, diagnosis = _timeout_reason(watch, timeout_s, clock())
                break
            reporter.waiting(phase, now - start, watch.last_line)
            seen = watch.serving_seen_at
            fast = seen is not None and time.time() - seen < FAST_POLL_FOR_S
            delay = min(FAST_POLL_S if fast else HEALTH_POLL_S, max(0.0, deadline - clock()))
            if watch.serving.wait(delay):
                watch.serving.clear()
    finally:
        watch.stop.set()
        reporter.done_waiting()
    st = watch.state or {}
    return Readiness(ready=ready_at is not None, reason=reason, log_text=watch.full_log(),
                     container_started_at=st.get("started_at"), ready_at=ready_at,
                     waited_s=clock() - start, container_id=st.get("id"), diagnosis=diagnosis)


def _timeout_reason(watch: _Watcher, timeout_s: float, now: float) -> tuple[str, str]:
    st = watch.state
    known = (f"last seen {st['status']}" + (f" (restarts {st['restart_count']})" if st else "")
             if st else "its state was never seen")
    lost = watch.unreachable_for(now)
    if lost is not None:
        return (f"cannot reach the host over SSH for the last {lost:.0f} s "
                f"({watch.last_error or 'no answer'}); the server did not answer over HTTP within "
                f"{timeout_s:g} s; the container was {known}", "unreachable")
    return (f"not ready after {timeout_s:g} s (timeout); the container is {known}", "not-ready")
