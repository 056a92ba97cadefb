"""The switch's wait against a fake host at the one seam (RemoteHost): interrupts wait for the
host step, a stuck session or a lost link is resolved by what the host recorded."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from servedeck.deploy import switch
from servedeck.deploy.console import QuietReporter
from servedeck.host.remote import SWITCH_COMPOSE_MARK, HostUnreachable, SwitchStatus
from servedeck.host.ssh import Result


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(switch, "PROBE_AFTER_S", 0.3)
    monkeypatch.setattr(switch, "PROBE_EVERY_S", 0.1)
    monkeypatch.setattr(switch, "DONE_GRACE_S", 0.3)
    monkeypatch.setattr(switch, "RETRY_S", 0.05)


class _Transport:
    def __init__(self, host):
        self.host = host

    def abort_session(self):
        self.host.aborted.set()


class FakeHost:
    """``switch`` takes ``takes_s`` (or hangs until the session is aborted); ``switch_status``
    answers from ``statuses`` (an exception is raised)."""

    name = "fake"

    def __init__(self, takes_s=0.5, rc=0, marked=True, hang=False, statuses=()):
        self.takes_s, self.rc, self.marked, self.hang = takes_s, rc, marked, hang
        self.statuses = list(statuses)
        self.aborted = threading.Event()
        self.transport = _Transport(self)
        self.stopped = []
        self.reconnects = 0
        self.ran = threading.Event()

    def switch(self, args, line, *, data=None, good_sha=None, timeout=None):
        self.ran.set()
        if self.hang:
            self.aborted.wait(30)
            raise HostUnreachable("fake: the session was aborted")
        time.sleep(self.takes_s)
        return Result([], "", self.rc, (SWITCH_COMPOSE_MARK + "\n").encode() if self.marked else b"",
                      b"compose said no" if self.rc else b"")

    def switch_status(self, revision, *, timeout=10.0):
        item = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        if isinstance(item, Exception):
            raise item
        return item

    def stop_switch(self, revision, *, timeout=10.0):
        self.stopped.append(revision)
        return True

    def reconnect(self):
        self.reconnects += 1


def _run(host, **kw):
    return switch.run_switch(host, ["up"], {"revision": 7}, data=b"x", reporter=QuietReporter(), **kw)


def test_an_interrupt_waits_for_the_host_step_to_end():
    host = FakeHost(takes_s=0.8, statuses=[SwitchStatus("running", None, None)])
    threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    out = _run(host)
    assert time.monotonic() - t0 >= 0.8  # it waited for compose, interrupted or not
    assert (out.started, out.ok, out.interrupts, out.link_lost) == (True, True, 1, False)


def test_a_second_interrupt_stops_compose_on_the_host_a_third_gives_up():
    host = FakeHost(takes_s=1.5, statuses=[SwitchStatus("running", None, None)])
    for at in (0.1, 0.3):
        threading.Timer(at, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    out = _run(host)
    assert out.interrupts == 2 and out.stopped and host.stopped == [7]
    host = FakeHost(takes_s=1.5, statuses=[SwitchStatus("running", None, None)])
    for at in (0.1, 0.2, 0.3):
        threading.Timer(at, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(switch.SwitchAbandoned, match="left docker compose up running"):
        _run(host)


def test_a_stuck_session_is_resolved_by_what_the_host_recorded():
    host = FakeHost(hang=True, statuses=[SwitchStatus("done", 0, "ab" * 32)])
    out = _run(host)
    assert host.aborted.is_set() and host.reconnects == 1
    assert (out.started, out.ok, out.known, out.link_lost) == (True, True, True, True)


def test_a_lost_link_is_asked_again_until_the_host_answers():
    host = FakeHost(hang=True, statuses=[HostUnreachable("frozen"), HostUnreachable("still"),
                                         HostUnreachable("still"), SwitchStatus("running", None, None),
                                         SwitchStatus("done", 1, None)])
    out = _run(host)
    assert (out.started, out.ok, out.link_lost) == (True, False, True)
    assert "exit status 1" in out.detail and host.reconnects >= 2


def test_a_switch_that_never_reached_the_host_changed_nothing():
    host = FakeHost(hang=True, statuses=[HostUnreachable("frozen"), SwitchStatus("absent", None, "cd" * 32)])
    out = _run(host)
    assert (out.started, out.ok, out.known) == (False, False, True)
    assert "nothing was changed" in out.detail


def test_a_host_that_never_answers_leaves_the_outcome_unknown_within_the_deadline():
    host = FakeHost(hang=True, statuses=[HostUnreachable("frozen")])
    t0 = time.monotonic()
    out = _run(host, deadline_s=1.0)
    assert time.monotonic() - t0 < 5
    assert (out.known, out.started) == (False, True) and "did not answer" in out.detail


def test_a_file_the_script_could_not_install_is_no_switch():
    host = FakeHost(takes_s=0.0, rc=4, marked=False, statuses=[SwitchStatus("absent", None, None)])
    out = _run(host)
    assert (out.started, out.ok) == (False, False) and "compose said no" in out.detail
    host = FakeHost(takes_s=0.0, rc=4, marked=True, statuses=[SwitchStatus("done", 4, None)])
    assert _run(host).started  # compose itself exited 4 after the mark: it ran
