"""The switch: one host step (install the compose file, ``docker compose up``) that nothing else
may overlap, and whose outcome is read from the host, not from the connection that started it.

:meth:`RemoteHost.switch <servedeck.host.remote.RemoteHost.switch>` runs in a thread while this
module's loop waits for it, so that:

* an **interrupt** (Ctrl-C, SIGTERM) during the switch does not abandon it: the first one is
  acknowledged and the loop waits for Compose on the host to end (a GPU server can take its
  ``stop_grace_period`` to stop), the second stops Compose on the host (SIGTERM) and waits for
  that, and only then does the caller decide, from what the host did, whether to roll back; a
  rollback started while Compose still ran raced it ("Conflict. The container name ... is
  already in use", nothing serving);
* a **lost or frozen link** (the connection's keep-alives fail, the SSH session's own ``ssh`` or
  the connection's master stops answering) is found by asking the host over a command of its
  own once the switch takes longer than :data:`PROBE_AFTER_S`; the outcome is then read from
  what the host recorded (:meth:`~servedeck.host.remote.RemoteHost.switch_status`) over a fresh
  connection, as soon as the host answers again;
* every wait has a **deadline** the reporter shows (:data:`SWITCH_DEADLINE_S` by default).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from servedeck.deploy.console import Reporter
from servedeck.errors import DeployError, ServedeckError
from servedeck.host.remote import (SWITCH_COMPOSE_MARK, SWITCH_NOT_STARTED, HostUnreachable, RemoteHost,
                                   SwitchStatus)

SWITCH_DEADLINE_S = 600.0
"""How long a switch may take, stop of the old server and start of the new one included."""
PROBE_AFTER_S = 10.0
"""A switch still running after this long is checked on the host over a command of its own."""
PROBE_EVERY_S = 5.0
PROBE_TIMEOUT_S = 10.0
"""A check that gets no answer within this long means the connection is lost or frozen."""
DONE_GRACE_S = 5.0
"""The host says the switch ended, and its answer has not come back this long after: the
session carrying it is stuck; the host's record is the outcome."""
RETRY_S = 2.0


@dataclass
class SwitchOutcome:
    """What a switch did, as the host recorded it.

    Attributes:
        started: Compose started on the host (the old server may be stopped from there on);
            False: nothing was changed (``detail`` says why).
        ok: Compose ended with exit status 0 (the new server was started).
        known: False when the host did not answer within the deadline: then ``started`` and
            ``ok`` are what is known (the file may be installed, the server may run).
        detail: Compose's (or the script's) error output, tail, when not ok.
        interrupts: interrupts received while the switch ran (they were acted on once it ended).
        stopped: an interrupt stopped Compose on the host (SIGTERM).
        link_lost: the connection was lost or froze; the outcome was read back from the host.
        waited_s: seconds from the start of the switch to its known end.
    """

    started: bool
    ok: bool
    known: bool = True
    detail: str = ""
    interrupts: int = 0
    stopped: bool = False
    link_lost: bool = False
    waited_s: float = 0.0


class SwitchAbandoned(DeployError):
    """Interrupted a third time while a switch ran on the host: the client stops waiting and
    leaves the switch running there (its lock too: the host's state is not known here)."""


def run_switch(host: RemoteHost, compose_args: list[str], line: dict[str, Any], *, data: bytes | None = None,
               good_sha: str | None = None, reporter: Reporter, phase: str = "switch",
               deadline_s: float = SWITCH_DEADLINE_S) -> SwitchOutcome:
    """Run :meth:`RemoteHost.switch` for history ``line`` (its ``revision``) and wait for its
    outcome as the module docstring describes.

    Raises:
        SwitchAbandoned: a third interrupt while it ran.
        ServedeckError: a host-key or authentication failure (not a transport fault).
    """
    revision = int(line["revision"])
    t0 = time.monotonic()
    box: dict[str, Any] = {}

    ended = threading.Event()  # not Thread.join: in Python 3.11 an interrupted join marks the thread ended

    def work() -> None:
        try:
            box["result"] = host.switch(compose_args, line, data=data, good_sha=good_sha,
                                        timeout=deadline_s + 30.0)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting loop
            box["error"] = exc
        finally:
            ended.set()

    thread = threading.Thread(target=work, daemon=True, name="servedeck-switch")
    thread.start()
    out = SwitchOutcome(started=False, ok=False)
    next_probe = t0 + PROBE_AFTER_S
    done_seen: float | None = None
    while not ended.is_set():
        try:
            if ended.wait(0.25):
                break
        except KeyboardInterrupt:
            _interrupted(host, revision, out, reporter)
            continue
        now = time.monotonic()
        reporter.waiting(phase, now - t0, f"docker compose up on {host.name} (deadline {deadline_s:.0f} s)")
        if now - t0 > deadline_s:
            out.link_lost = True
            break
        if now < next_probe:
            continue
        next_probe = now + PROBE_EVERY_S
        try:
            st = host.switch_status(revision, timeout=PROBE_TIMEOUT_S)
        except HostUnreachable:
            out.link_lost = True  # the host does not answer a command of its own: the link froze
            break
        except KeyboardInterrupt:
            _interrupted(host, revision, out, reporter)
            continue
        if st.state == "done":
            done_seen = done_seen or now
            if now - done_seen > DONE_GRACE_S:
                out.link_lost = True  # the session carrying the answer is stuck
                break
    if not ended.is_set():
        host.transport.abort_session()  # unblocks the thread: its session ends
        _settle(ended, 10.0)
    result, error = box.get("result"), box.get("error")
    if result is not None and not out.link_lost:
        out.started = SWITCH_COMPOSE_MARK in result.stdout or result.returncode not in SWITCH_NOT_STARTED
        out.ok = out.started and result.returncode == 0
        if not out.ok:
            out.detail = _tail(result.stderr) or f"exit status {result.returncode}"
        out.waited_s = time.monotonic() - t0
        reporter.done_waiting()
        return out
    if isinstance(error, ServedeckError) and not isinstance(error, HostUnreachable):
        raise error
    if error is not None and not isinstance(error, (HostUnreachable, ServedeckError)):
        raise error
    out.link_lost = True
    reporter.done_waiting()
    reporter.warn(f"lost the connection to {host.name} during the switch: asking the host what it did "
                  f"(deadline {deadline_s:.0f} s from the switch's start)")
    host.reconnect()
    return _resolve(host, revision, out, reporter, phase, t0, deadline_s)


def _resolve(host: RemoteHost, revision: int, out: SwitchOutcome, reporter: Reporter, phase: str,
             t0: float, deadline_s: float) -> SwitchOutcome:
    """Ask the host, over fresh connections, until it says how revision ``revision``'s switch
    ended, or the deadline passes."""
    last: SwitchStatus | None = None
    while time.monotonic() - t0 <= deadline_s:
        try:
            last = host.switch_status(revision, timeout=PROBE_TIMEOUT_S)
        except HostUnreachable:
            host.reconnect()
            last = None
        except KeyboardInterrupt:
            _interrupted(host, revision, out, reporter)
            continue
        if last is not None and last.state != "running":
            break
        reporter.waiting(phase, time.monotonic() - t0,
                         f"{'the switch still runs on' if last else 'no answer from'} {host.name} "
                         f"(deadline {deadline_s:.0f} s)")
        try:
            time.sleep(RETRY_S)
        except KeyboardInterrupt:
            _interrupted(host, revision, out, reporter)
    reporter.done_waiting()
    out.waited_s = time.monotonic() - t0
    if last is None or last.state == "running":
        out.known = False
        out.started = True  # it may have: the caller must not assume the old server serves on
        out.detail = (f"the host did not answer for {deadline_s:.0f} s" if last is None
                      else f"Compose still ran on the host after {deadline_s:.0f} s")
        return out
    out.started = last.state in ("done", "installed")
    out.ok = last.state == "done" and last.rc == 0
    if last.state == "done" and last.rc != 0:
        out.detail = f"docker compose up ended with exit status {last.rc} (its output went with the lost connection)"
    elif last.state == "installed":
        out.known = False
        out.detail = "the file was installed; nothing on the host records how Compose ended"
    elif last.state == "absent":
        out.detail = "the switch never reached the host: nothing was changed"
    return out


def _settle(event: threading.Event, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for ``event``, interrupts or not."""
    deadline = time.monotonic() + timeout_s
    while not event.is_set() and time.monotonic() < deadline:
        try:
            event.wait(0.1)
        except KeyboardInterrupt:
            pass


def _interrupted(host: RemoteHost, revision: int, out: SwitchOutcome, reporter: Reporter) -> None:
    out.interrupts += 1
    if out.interrupts == 1:
        reporter.warn("interrupted during the switch: waiting for docker compose up on the host to end "
                      "before anything else (interrupt again to stop it there)")
    elif out.interrupts == 2:
        try:
            out.stopped = host.stop_switch(revision, timeout=PROBE_TIMEOUT_S)
        except HostUnreachable:
            pass
        reporter.warn("stopping docker compose up on the host and waiting for it to end "
                      "(interrupt a third time to leave it running and exit)")
    else:
        raise SwitchAbandoned(f"interrupted three times during the switch of {host.name}: left docker "
                              "compose up running there; what serves is not known here and the deploy "
                              "lock stays", hint=f"invoke status --host {host.name}")


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-800:]
