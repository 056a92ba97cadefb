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
import subprocess
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

    def __init__(self, login_noise: str = "", session_path: str | None = None,
                 session_tmpfs_kib: int | None = None) -> None:
        super().__init__("local", SshTarget(hostname="localhost"))
        self.login_noise, self.session_path = login_noise, session_path
        self.session_tmpfs_kib = session_tmpfs_kib  # the session's $TMPDIR: a tmpfs this small
        self.commands: list[str] = []

    def argv(self, command: str) -> list[str]:
        self.commands.append(command)
        shell = ["/bin/sh", "-c", f"printf %s {shlex.quote(self.login_noise)}; {command}"]
        if "servedeck-session" not in command:
            return shell
        if self.session_path:
            return ["env", f"PATH={self.session_path}", *shell]
        if self.session_tmpfs_kib:  # mounted over the session's $TMPDIR in a mount namespace of its own
            return ["unshare", "--mount", "sh", "-c",
                    f'mount -t tmpfs -o size={self.session_tmpfs_kib}k none "${{TMPDIR:-/tmp}}" && exec "$@"',
                    "sh", *shell]
        return shell


@pytest.fixture(autouse=True)
def _session_tmpdir(tmp_path, monkeypatch):
    """The stand-in's session directories go to the test's own temporary directory: a test
    that kills its stand-in "ssh" kills the loop itself (with real ssh only the client dies,
    and the remote loop removes its directory)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))


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
    blob = bytes(range(256)) * 200  # under SESSION_MAX_INPUT: through the session
    assert local.run(["cat"], input=blob).stdout_bytes == blob
    big = local.run("head -c 8000000 /dev/zero; echo end >&2")  # output of any size, read in step
    assert len(big.stdout_bytes) == 8_000_000 and big.stderr == "end\n"
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
        local.run("kill $PPID; sleep 1")  # the loop ends (after this command, as a shell does)
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


class _MasterGone(LocalTransport):
    """The first ``silent`` session starts end as ssh ends when the shared connection's master
    goes away under it: status 255, nothing on stderr."""

    def __init__(self, silent: int) -> None:
        super().__init__()
        self.silent = silent

    def argv(self, command: str) -> list[str]:
        if "servedeck-session" in command and self.silent > 0:
            self.silent -= 1
            self.commands.append(command)
            return ["/bin/sh", "-c", "exit 255"]
        return super().argv(command)

    def resolve(self):
        raise AssertionError("not needed")


def test_a_session_whose_shared_connection_went_away_as_it_started_is_started_again() -> None:
    """Nothing ran on the host before the loop's banner: one silent end is met by a second start
    (the bug: "cannot connect over SSH: the connection closed" for a host that answered); a
    second silent end is the host's answer."""
    once = _MasterGone(silent=1)
    try:
        assert once.run(["echo", "served"]).stdout == "served\n"
        assert sum("servedeck-session" in c for c in once.commands) == 2
    finally:
        once.close()
    twice = _MasterGone(silent=2)
    with pytest.raises(HostUnreachable, match="cannot connect over SSH"):
        twice.run(["true"])
    assert sum("servedeck-session" in c for c in twice.commands) == 2


def test_closing_removes_the_session_directory(tmp_path) -> None:
    transport = LocalTransport()
    assert transport.run(["echo", "hi"]).stdout == "hi\n"
    assert [p.name.startswith("servedeck-session.") for p in tmp_path.iterdir()] == [True]
    transport.close()
    deadline = time.monotonic() + 5
    while any(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(tmp_path.iterdir())


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt, as Ctrl-C in a terminal does, also when pytest itself
    was started in the background by a shell (``cmd &``): such a process begins with SIGINT
    ignored, and Python then installs no handler."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_an_interrupted_command_ends_the_session_so_no_later_command_reads_its_answer(local, tmp_path,
                                                                                    sigint_raises) -> None:
    local.run(["true"])
    main, running = threading.get_ident(), tmp_path / "running"

    def interrupt_once_it_runs() -> None:  # however slowly a loaded machine starts it
        while not running.exists():
            time.sleep(0.02)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        local.run(f"touch {running}; sleep 1; echo late")
    started = running.stat().st_mtime
    assert local.run(["echo", "next"]).stdout == "next\n"
    time.sleep(max(0.0, started + 1.3 - time.time()))  # the interrupted command has finished by now
    assert local.run(["echo", "after"]).stdout == "after\n"


def test_output_of_a_process_left_in_the_background_never_reaches_a_later_command(local) -> None:
    assert local.run("(for i in 1 2 3 4 5; do sleep 0.1; echo tick$i; done) & echo started").stdout == "started\n"
    assert local.run("sleep 0.25; echo cmd1").stdout_bytes == b"cmd1\n"
    assert local.run("sleep 0.3; echo cmd2").stdout_bytes == b"cmd2\n"


def test_the_session_ssh_is_not_in_the_terminal_process_group(local) -> None:
    local.run(["true"])
    session = local._session
    assert session is not None and os.getsid(session.proc.pid) != os.getsid(0)  # Ctrl-C spares it


def _can_mount_tmpfs() -> bool:
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", 'mount -t tmpfs none /mnt'], capture_output=True)
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root for a private tmpfs (CI runs as root)")


@needs_tmpfs
def test_a_full_temporary_directory_loses_no_output_silently() -> None:
    transport = LocalTransport(session_tmpfs_kib=32)
    try:
        assert transport.run(["echo", "small"]).stdout == "small\n"
        with pytest.raises(ServedeckError, match="output of this command was lost \\(the command itself ran\\)"):
            transport.run("head -c 200000 /dev/zero; echo done")
        # from now on each command alone, with all its output
        assert len(transport.run("head -c 200000 /dev/zero").stdout_bytes) == 200000
    finally:
        transport.close()


@needs_tmpfs
def test_a_command_that_does_not_fit_in_the_full_temporary_directory_runs_alone() -> None:
    transport = LocalTransport(session_tmpfs_kib=16)
    try:
        word = "x" * 40000  # the command text alone is larger than the session's $TMPDIR
        assert transport.run(["echo", word]).stdout == word + "\n"
        assert transport.run("echo $PPID").stdout == f"{os.getpid()}\n"  # not in a session any more
    finally:
        transport.close()



def test_an_aborted_session_ends_the_command_waiting_on_it_even_when_its_pipes_stay_open(local) -> None:
    """With OpenSSH connection sharing the master holds a session's pipes: killing the session's
    own ssh does not end them, and a command waiting on it waited out its whole timeout (a
    frozen link's switch: 630 s, the deploy's last step blocked behind it). Here killing the
    stand-in's "ssh" is made to do nothing, as there."""
    local.run(["true"])
    session = local._session
    kill, kills = session.proc.kill, []

    def first_kill_does_nothing() -> None:  # abort_session's: the pipes stay open
        if kills:
            kill()
        kills.append(1)
    session.proc.kill = first_kill_does_nothing
    got: list[BaseException] = []

    def call() -> None:
        try:
            local.run("sleep 20", timeout=60)
        except BaseException as exc:  # noqa: BLE001 - checked below
            got.append(exc)

    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    local.abort_session()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 3
    assert len(got) == 1 and isinstance(got[0], HostUnreachable) and "aborted" in got[0].message
    assert local.run(["echo", "fresh"]).stdout == "fresh\n"  # the next command opens a new session
