"""The SSH transport's remote session (servedeck.host.ssh): its framing, exit statuses, timeouts,
a session that cannot start, and a second thread while it is busy.

Stand-in (named as such): :class:`LocalTransport` runs the remote side with the local ``sh``
instead of ``ssh HOST``, so the session loop, the protocol and every error path run for real
without an SSH server; tests/integration/test_remote.py runs the same session over the loopback
sshd.
"""

from __future__ import annotations

import os
import shlex
import signal
import shutil
import threading
import time

import pytest

from servedeck.errors import ServedeckError
from servedeck.host.ssh import HostUnreachable, SshTarget, SshTransport


class LocalTransport(SshTransport):
    """An :class:`SshTransport` whose "host" is this machine's ``sh`` (stand-in for ssh).

    ``login_noise`` is printed before the command runs, as a login shell's start-up files may;
    ``session_path`` replaces ``PATH`` for the session only (to take its tools away).
    """

    def __init__(self, login_noise: str = "", session_path: str | None = None) -> None:
        super().__init__("local", SshTarget(hostname="localhost"))
        self.login_noise, self.session_path = login_noise, session_path
        self.commands: list[str] = []

    def argv(self, command: str) -> list[str]:
        self.commands.append(command)
        env = ["env", f"PATH={self.session_path}"] if self.session_path and "servedeck-session" in command else []
        return [*env, "/bin/sh", "-c", f"printf %s {shlex.quote(self.login_noise)}; {command}"]


@pytest.fixture
def local():
    transport = LocalTransport(login_noise="motd: welcome\nno newline at its end: ")
    yield transport
    transport.close()


def test_commands_ride_on_one_session_and_keep_bytes_args_and_status(local) -> None:
    res = local.run_script('printf "%s|" "$@"; echo; cat; echo to-stderr >&2; exit 3',
                           ["a b", "it's", "", "two\nlines", "$HOME;`id`"],
                           input=b"in\x00put\xff", check=False)
    assert res.returncode == 3
    assert res.stdout_bytes == b"a b|it's||two\nlines|$HOME;`id`|\nin\x00put\xff"
    assert res.stderr == "to-stderr\n"
    # the login noise went before the session's banner, not into any command's output
    assert local.run(["echo", "x"]).stdout == "x\n"
    parents = {local.run("echo $PPID").stdout for _ in range(3)}
    assert len(parents) == 1  # one loop ran all three: one session
    assert sum("servedeck-session" in c for c in local.commands) == 1
    blob = bytes(range(256)) * 512
    assert local.run(["cat"], input=blob).stdout_bytes == blob
    with pytest.raises(ServedeckError, match="exit status 7"):
        local.run("echo boom >&2; exit 7")


def test_a_timeout_ends_the_session_and_the_next_command_gets_a_fresh_one(local) -> None:
    first = local.run("echo $PPID").stdout
    t = time.monotonic()
    with pytest.raises(HostUnreachable, match="timed out after 0.5 s"):
        local.run(["sleep", "5"], timeout=0.5)
    assert time.monotonic() - t < 3
    assert local.run("echo $PPID").stdout != first
    assert local.run(["echo", "ok"]).stdout == "ok\n"


def test_a_session_that_dies_mid_command_is_a_transport_fault(local) -> None:
    local.run(["true"])
    with pytest.raises(HostUnreachable, match="connection closed"):
        local.run("kill -9 $PPID; sleep 1")
    assert local.run(["echo", "back"]).stdout == "back\n"


def test_a_host_without_the_session_tools_runs_each_command_alone(tmp_path) -> None:
    bin_dir = tmp_path / "bin"  # sh and mktemp, no base64
    bin_dir.mkdir()
    for tool in ("sh", "mktemp", "rm"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    transport = LocalTransport(session_path=str(bin_dir))
    try:
        assert transport.run(["echo", "alone"]).stdout == "alone\n"
        assert transport.run(["echo", "again"]).stdout == "again\n"
        # one failed session start, then no more tries: each command in a session of its own
        assert sum("servedeck-session" in c for c in transport.commands) == 1
        assert transport.run("echo $PPID").stdout == f"{os.getpid()}\n"  # started by this process
    finally:
        transport.close()


def test_session_off_by_environment(monkeypatch) -> None:
    monkeypatch.setenv("SERVEDECK_SSH_SESSION", "0")
    transport = LocalTransport()
    assert transport.run(["echo", "plain"]).stdout == "plain\n"
    assert not any("servedeck-session" in c for c in transport.commands)


def test_a_second_thread_while_the_session_is_busy_gets_a_session_of_its_own(local) -> None:
    loop = local.run("echo $PPID").stdout  # the session loop's pid
    out: dict[str, str] = {}

    def slow() -> None:
        out["slow"] = local.run("sleep 0.5; echo $PPID").stdout

    worker = threading.Thread(target=slow)
    worker.start()
    time.sleep(0.15)
    out["fast"] = local.run("echo $PPID").stdout
    worker.join()
    assert out["slow"] == loop  # in the session
    assert out["fast"] != loop  # beside it, in a process of its own


def test_open_session_soon_hands_its_error_to_the_next_command() -> None:
    class Refusing(LocalTransport):
        def argv(self, command: str) -> list[str]:
            return ["/bin/sh", "-c", "exit 255"]  # as ssh exits when it cannot connect

        def resolve(self):
            raise AssertionError("not needed")

    transport = Refusing()
    transport.open_session_soon()
    with pytest.raises(HostUnreachable, match="cannot connect over SSH"):
        transport.run(["true"])


def test_closing_removes_the_session_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    transport = LocalTransport()
    assert transport.run(["echo", "hi"]).stdout == "hi\n"
    assert [p.name.startswith("servedeck-session.") for p in tmp_path.iterdir()] == [True]
    transport.close()
    deadline = time.monotonic() + 5
    while any(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(tmp_path.iterdir())


def test_an_interrupted_command_ends_the_session_so_no_later_command_reads_its_answer(local) -> None:
    local.run(["true"])
    main = threading.get_ident()
    threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        local.run("sleep 1; echo late")
    assert local.run(["echo", "next"]).stdout == "next\n"
    time.sleep(1.2)  # the interrupted command has finished by now
    assert local.run(["echo", "after"]).stdout == "after\n"
