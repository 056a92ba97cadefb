"""Deploy faults of issue 28 on the loopback card host with the vLLM stand-in (real SSH, Docker,
Compose): an interrupt during a slow switch, a frozen session, a stopped SSH master and a
frozen link during the switch, a full or read-only working directory (a small tmpfs), an
interrupt during preflight on a slow link, a second interrupt during a rollback, a damaged
history, two working directories with one name, and a soak of 50 deploys with random faults.

The stand-in's ``STANDIN_STOP_S`` makes the old server slow to stop (as a GPU server is), with
``stop_grace_period`` long enough for Docker to wait for it. Interrupts are SIGTERM to this
process (a deploy turns SIGTERM into an interrupt), sent when the history line of the revision
appears on the host or from a reporter hook at a phase. The host is this machine: its files are
read directly, never over the SSH connection a fault is frozen on.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from test_deploy import SSH_CONFIG, _resume, _sshd_pids, card, project, standin  # noqa: F401

from servedeck.deploy import ops, switch
from servedeck.deploy.apply import deploy
from servedeck.deploy.console import ConsoleReporter, QuietReporter, Reporter
from servedeck.deploy.ops import status
from servedeck.deploy.plan import DeployOptions
from servedeck.errors import DeployError
from servedeck.grammar import compose_project_name
from servedeck.host import history as hist
from servedeck.host.remote import RemoteHost, SshTarget
from servedeck.model.inventory import HostEntry
from servedeck.model.profile import ProfileStore
from servedeck.model.project import Project
from servedeck.runs.store import run_dirs

PORT = 9932
ENV = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
       "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub"}

def _runs(project) -> list[Path]:
    """The project's run directories, oldest first (its runs/ also holds the store's caches)."""
    return [d for _, d in run_dirs(project.runs_dir)]



def _profile(project: Project, name: str, *, startup_s: float = 1.0, stop_s: float = 0.0,
             mode: str | None = None, escapes: bool = False) -> str:
    """A stand-in variant of batch-8192 serving under its own name (``served_model_name``)."""
    env = {**ENV, "STANDIN_STARTUP_S": str(startup_s)}
    if stop_s:
        env["STANDIN_STOP_S"] = str(stop_s)
    if mode:
        env["STANDIN_MODE"] = mode
    if escapes:
        env["STANDIN_LOG_ESCAPES"] = "1"
    lines = ["extends: batch-8192", "engine:", "  max_model_len: 2048", "model:",
             f"  served_model_name: {name}", "container:", "  environment:"]
    lines += [f'    {k}: "{v}"' for k, v in env.items()]
    if stop_s:
        lines += ["  compose_extra:", f"    stop_grace_period: {int(stop_s) + 5}s"]
    (project.profiles_dir / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return name


def _deploy(project, card, name, standin, reporter=None, **opts):  # noqa: F811
    host, entry = card
    return deploy(project, host, entry, ProfileStore(project.profiles_dir).load(name),
                  DeployOptions(image=standin, **opts), reporter or QuietReporter())


def _served(port: int = PORT) -> list[str] | None:
    try:
        return [m["id"] for m in httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def _served_soon(port: int = PORT, timeout_s: float = 20.0) -> list[str] | None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        got = _served(port)
        if got:
            return got
        time.sleep(0.2)
    return None


def _history_lines(workdir: str) -> list[bytes]:
    path = Path(workdir) / ".servedeck" / "history.jsonl"
    return path.read_bytes().split(b"\n")[:-1] if path.exists() else []


def _history(workdir: str) -> list[dict]:
    return hist.history_records(b"\n".join(_history_lines(workdir)))


def _revisions(workdir: str) -> list[tuple[int, str, str | None, str]]:
    return [(r.number, r.event, r.profile, r.outcome) for r in hist.revisions(_history(workdir))]


def _started(workdir: str, profile: str, event: str = "deploy") -> bool:
    recs = _history(workdir)
    return bool(recs) and recs[-1].get("outcome") == "started" and recs[-1].get("event", "deploy") == event \
        and (recs[-1].get("profile") == profile or event != "deploy")


def _containers(workdir: str) -> list[tuple[str, str, str]]:
    """(name, state, Compose project) of every container of this working directory."""
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project.working_dir={workdir}",
                          "--format", '{{.Names}} {{.State}} {{.Label "com.docker.compose.project"}}'],
                         capture_output=True, text=True, check=True).stdout
    return sorted(tuple(line.split()) for line in out.splitlines())  # type: ignore[misc]


def _lock_file(workdir: str) -> Path:
    return Path(workdir) / ".servedeck" / "deploy.lock"


def _sigterm_when(predicate, delay_s: float = 0.3, timeout_s: float = 90.0) -> threading.Thread:
    """SIGTERM this process (a deploy's interrupt) ``delay_s`` after ``predicate()`` holds."""
    def watch():
        deadline = time.time() + timeout_s
        while time.time() < deadline and not predicate():
            time.sleep(0.05)
        time.sleep(delay_s)
        os.kill(os.getpid(), signal.SIGTERM)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _assert_host_is_clean(host: RemoteHost, workdir: str, serving: str) -> None:
    """The invariants after any deploy: ``serving`` serves, one container, no lock, every
    history line a JSON object, every started revision ended."""
    assert _served_soon() == [serving]
    assert len(_containers(workdir)) == 1, _containers(workdir)
    assert not _lock_file(workdir).exists()
    for line in _history_lines(workdir):
        assert line and isinstance(json.loads(line), dict), line
    assert hist.unfinished(_history(workdir)) == []


@pytest.fixture
def fast_probes(monkeypatch):
    """The switch's checks on the host sooner than a real GPU host needs (the same code paths)."""
    monkeypatch.setattr(switch, "PROBE_AFTER_S", 2.0)
    monkeypatch.setattr(switch, "PROBE_EVERY_S", 1.0)
    monkeypatch.setattr(switch, "PROBE_TIMEOUT_S", 3.0)
    monkeypatch.setattr(switch, "DONE_GRACE_S", 2.0)
    monkeypatch.setattr(switch, "RETRY_S", 0.5)


# ------------------------------------------------------------------------------ the switch


def test_an_interrupt_during_a_slow_switch_waits_for_it_then_rolls_back_to_one_container(project, card, standin):  # noqa: F811
    """The old server takes 4 s to stop; the interrupt lands while Compose stops it. The client
    waits for Compose to end on the host, then rolls back: one container, the old profile serves
    (the bug: the rollback's compose up raced the interrupted one, "Conflict", nothing served)."""
    host, entry = card
    good = _profile(project, "good", stop_s=4)
    assert _deploy(project, card, good, standin).outcome == "ready"
    new = _profile(project, "new", stop_s=4, startup_s=30)
    _sigterm_when(lambda: _started(host.workdir, "new"), delay_s=0.5)
    reporter = QuietReporter()
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, new, standin, reporter)
    assert "deploy interrupted" in exc.value.message
    assert "rolled back: revision 1 (good) serves again" in exc.value.message
    assert any("waiting for docker compose up on the host to end" in line for line in reporter.lines)
    assert _revisions(host.workdir) == [(1, "deploy", "good", "ready"), (2, "deploy", "new", "interrupted"),
                                        (3, "rollback", "good", "ready")]
    _assert_host_is_clean(host, host.workdir, "good")
    (name, state, proj), = _containers(host.workdir)
    assert state == "running" and proj == compose_project_name(host.workdir)
    run = json.loads((_runs(project)[-1] / "run.json").read_text())
    assert run["outcome"] == "interrupted" and run["rollback"]["ready"] is True


def test_a_second_interrupt_stops_the_slow_switch_on_the_host_and_still_leaves_one_container(
        project, card, standin):  # noqa: F811
    """Ctrl-C twice while Compose stops a slow old server: the second stops Compose on the host
    (SIGTERM) in the middle of replacing the container and waits for it to end; the rollback then
    leaves exactly one container, the old profile serving (an interrupted replacement is where
    Compose leaves a ``<id>_<name>`` container behind)."""
    host, entry = card
    good = _profile(project, "good", stop_s=4)
    assert _deploy(project, card, good, standin).outcome == "ready"
    new = _profile(project, "new", stop_s=4, startup_s=30)
    _sigterm_when(lambda: _started(host.workdir, "new"), delay_s=0.5)
    _sigterm_when(lambda: _started(host.workdir, "new"), delay_s=1.5)
    reporter = QuietReporter()
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, new, standin, reporter)
    assert "deploy interrupted" in exc.value.message, exc.value.message
    assert "rolled back: revision 1 (good) serves again" in exc.value.message, exc.value.message
    assert any("stopping docker compose up on the host" in line for line in reporter.lines), reporter.lines
    assert _revisions(host.workdir)[-2:] == [(2, "deploy", "new", "interrupted"), (3, "rollback", "good", "ready")]
    _assert_host_is_clean(host, host.workdir, "good")
    assert status(host, entry)["drift"] == []


def test_a_master_frozen_during_the_readiness_wait_is_waited_out_not_recorded_failed(
        project, card, standin):  # noqa: F811
    """The connection's master stops answering for 8 s as the wait for the new server begins (its
    Docker Engine socket is forwarded over it): the wait goes on within its deadline and the
    healthy new deployment is recorded ready, not failed and rolled back."""
    host, entry = card
    assert _deploy(project, card, _profile(project, "good", startup_s=0.3), standin).outcome == "ready"
    new = _profile(project, "new", startup_s=3)
    host.run(["true"])
    master = host.transport.master_pid()
    assert master
    frozen: list[int] = []

    class _FreezeAtWait(QuietReporter):
        def phase(self, name: str, text: str) -> None:
            super().phase(name, text)
            if name == "wait" and not frozen:
                frozen.append(master)
                os.kill(master, signal.SIGSTOP)
                threading.Timer(8.0, _resume, [frozen]).start()

    reporter = _FreezeAtWait()
    t0 = time.time()
    try:
        result = _deploy(project, card, new, standin, reporter)
    finally:
        _resume(frozen)
    assert frozen
    assert result.outcome == "ready", reporter.lines
    assert time.time() - t0 < 60
    assert _revisions(host.workdir)[-1] == (2, "deploy", "new", "ready")
    _assert_host_is_clean(host, host.workdir, "new")


@pytest.mark.parametrize("fault", ["session", "master", "link"])
def test_a_frozen_session_master_or_link_during_the_switch_is_resolved_by_asking_the_host(
        project, card, standin, fast_probes, fault):  # noqa: F811
    """The switch runs 3 s (the old server stops slowly); its connection freezes as it starts:
    the session's own ssh stopped (SIGSTOP: harmless, the master carries the data), the
    connection's master stopped, or the whole link (the host's sshd and the master) for 8 s.
    The deploy asks the host over a command of its own, reads how Compose ended from what the
    host recorded, verifies the new deployment and records it ready (the bug: recorded failed,
    unreachable, while the new deployment served unverified; a stopped master: nothing printed
    for 900 s)."""
    host, entry = card
    good = _profile(project, "good", stop_s=3)
    assert _deploy(project, card, good, standin).outcome == "ready"
    new = _profile(project, "new", stop_s=3)
    frozen: list[int] = []

    def freeze():
        deadline = time.time() + 60
        while time.time() < deadline and not _started(host.workdir, "new"):
            time.sleep(0.02)
        if fault == "session":
            frozen.append(host.transport._session.proc.pid)
        elif fault == "master":
            frozen.append(master)
        else:
            frozen.extend(_sshd_pids() + [master])
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        if fault == "link":
            time.sleep(8)
            _resume(frozen)

    host.run(["true"])
    master = host.transport.master_pid()
    assert master
    t = threading.Thread(target=freeze, daemon=True)
    t.start()
    reporter = QuietReporter()
    t0 = time.time()
    try:
        result = _deploy(project, card, new, standin, reporter)
    finally:
        t.join(30)
        _resume(frozen)
    assert frozen
    assert result.outcome == "ready", reporter.lines
    # the session's own ssh only handed its pipes to the connection's master (OpenSSH connection
    # sharing passes the descriptors): stopping it stops nothing, the switch's answer arrives
    if fault != "session":
        assert any("lost the connection" in line for line in reporter.lines), reporter.lines
    assert time.time() - t0 < 60
    assert _revisions(host.workdir)[-1] == (2, "deploy", "new", "ready")
    _assert_host_is_clean(host, host.workdir, "new")
    assert json.loads((result.run.path / "run.json").read_text())["outcome"] == "ready"


# ------------------------------------------------------------------------------ a full or read-only disk


@pytest.fixture
def small_card(test_services):
    """A 3 MiB tmpfs mounted as the working directory on the loopback card host."""
    workdir = f"/srv/servedeck-test/tmpfs-{uuid.uuid4().hex[:8]}"
    host = RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    host.run_script('mkdir -p "$1" && mount -t tmpfs -o size=3m,mode=755 tmpfs "$1" && '
                    'mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" "$1/cache" && '
                    'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [workdir])
    entry = HostEntry(ssh=host.ssh_target, workdir=workdir, render_gid="992", port=PORT,
                      ready_timeout_s=60, api_host="127.0.0.1")
    yield host, entry
    host.close()
    cleanup = RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), workdir)
    cleanup.run_script('mount -o remount,rw "$1" 2>/dev/null; rm -f "$1/fill"; '
                       'docker ps -aq --filter "label=com.docker.compose.project.working_dir=$1" | '
                       'xargs -r docker rm -f >/dev/null; umount "$1"; rmdir "$1"', [workdir], check=False)
    cleanup.close()


def _fill(workdir: str) -> None:
    subprocess.run(["sh", "-c", f'dd if=/dev/zero of="{workdir}/fill" bs=4k 2>/dev/null; sync; true'])


class _FillAt(QuietReporter):
    """Fills the working directory when the deploy reaches ``phase`` (before its work)."""

    def __init__(self, workdir: str, phase: str) -> None:
        super().__init__()
        self.workdir, self.at = workdir, phase

    def phase(self, name: str, text: str) -> None:
        super().phase(name, text)
        if name == self.at:
            _fill(self.workdir)


def test_a_full_or_read_only_working_directory_is_named_and_changes_nothing(project, small_card, standin):
    """Full before preflight: the cause is named, no (empty) lock is left, status shows none.
    Read-only: the same. Full between preflight and switch: the old deployment is untouched and
    serving, no rollback is tried (the bug: it "rolled back" to the file already running and
    recorded a rollback that "did not become ready either"). A damaged (empty) lock left by an
    older version is named as damage, shown by status, and taken over with --force-unlock."""
    host, entry = small_card
    wd = host.workdir
    good = _profile(project, "good")
    _fill(wd)
    with pytest.raises(DeployError) as exc:
        _deploy(project, small_card, good, standin, min_free_gib=0)
    assert "No space left on device" in exc.value.message and "nothing was changed" in exc.value.message
    assert not _lock_file(wd).exists() and not list(Path(wd, ".servedeck").glob("deploy.lock*"))
    assert status(host, entry)["lock"] is None
    assert not project.runs_dir.exists()  # refused before any run record

    os.unlink(f"{wd}/fill")
    assert _deploy(project, small_card, good, standin, min_free_gib=0).outcome == "ready"

    subprocess.run(["mount", "-o", "remount,ro", wd], check=True)
    try:
        with pytest.raises(DeployError) as exc:
            _deploy(project, small_card, good, standin, min_free_gib=0)
        assert "Read-only file system" in exc.value.message
    finally:
        subprocess.run(["mount", "-o", "remount,rw", wd], check=True)
    assert not _lock_file(wd).exists()

    new = _profile(project, "new")
    reporter = _FillAt(wd, "switch")
    with pytest.raises(DeployError) as exc:
        _deploy(project, small_card, new, standin, reporter, min_free_gib=0)
    msg = exc.value.message
    assert "the switch changed nothing" in msg and "No space left on device" in msg and "not touched" in msg
    assert "rollback" not in msg and not any("[rollback]" in line for line in reporter.lines)
    assert _served() == ["good"]
    assert len(_containers(wd)) == 1 and not _lock_file(wd).exists()
    run = json.loads((_runs(project)[-1] / "run.json").read_text())
    assert run["outcome"] == "failed" and "No space left on device" in run["failure"]
    assert "rollback" not in run
    # rollback on the full disk: the only known-good deployment serves, so there is nothing to roll
    # back to (refused before anything is written); down: the cause named, nothing changed; no lock left
    with pytest.raises(DeployError) as exc:
        ops.rollback(host, entry, project=project, reporter=QuietReporter())
    assert "no known-good deployment to roll back to" in exc.value.message
    assert not _lock_file(wd).exists() and _served() == ["good"]
    # the failed switch gave back what its upload took (a page or so): full again, for down
    _fill(wd)
    with pytest.raises(DeployError) as exc:
        ops.down(host, reporter=QuietReporter())
    assert "No space left on device" in exc.value.message and "nothing was changed" in exc.value.message
    assert not _lock_file(wd).exists() and _served() == ["good"]
    os.unlink(f"{wd}/fill")

    _lock_file(wd).write_bytes(b"")  # an older version's lock write on a full disk
    with pytest.raises(DeployError) as exc:
        _deploy(project, small_card, new, standin, min_free_gib=0)
    assert "damaged (empty" in exc.value.message and "--force-unlock" in exc.value.hint
    st = status(host, entry)
    assert st["lock"] == {"damaged": "(empty)"} and "no command holds it" in st["lock_stale"]
    assert _deploy(project, small_card, new, standin, force_unlock=True, min_free_gib=0).outcome == "ready"
    _assert_host_is_clean(host, wd, "new")


# ------------------------------------------------------------------------------ interrupts before and after the switch


def test_an_interrupt_during_preflight_on_a_slow_link_leaves_no_lock(project, card, standin):  # noqa: F811
    """The link is frozen for 3 s while the preflight (which takes the lock) is on its way; the
    interrupt comes as it leaves. The client waits for the preflight to come back and gives the lock
    back (the bug: it said "nothing changed" and exited; the preflight then took a lock in the
    name of the dead process)."""
    host, entry = card
    good = _profile(project, "good")
    host.run(["true"])  # the connection is up: the preflight goes out over it, then waits
    pids = _sshd_pids()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)

    threading.Timer(3.0, _resume, [pids]).start()
    try:
        with pytest.raises(DeployError) as exc:
            _deploy(project, card, good, standin, _InterruptAt("preflight"))
    finally:
        _resume(pids)
    assert "interrupted before it changed anything" in exc.value.message
    assert "the deploy lock its preflight took was given back" in exc.value.message
    assert not _lock_file(host.workdir).exists()
    assert not project.runs_dir.exists() and _history_lines(host.workdir) == []


class _InterruptedReaderGone(ConsoleReporter):
    """Plain console lines into a pipe whose reader has gone, and SIGTERM to this process at
    ``at`` (a phase, or ``switch-wait``): a fleet rollout's Ansible task stopped together with the
    deploy it runs, as an interrupted ``sweep`` does."""

    def __init__(self, at: str, stream) -> None:
        super().__init__()
        self.at, self.done, self.stream = at, False, stream

    def _maybe(self, name: str) -> None:
        if not self.done and name == self.at:
            self.done = True
            self.stream.close_reader()
            os.kill(os.getpid(), signal.SIGTERM)

    def phase(self, name: str, text: str) -> None:
        self._maybe(name)
        super().phase(name, text)

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        if phase == "switch":
            self._maybe("switch-wait")
        super().waiting(phase, elapsed_s, last_line)


class _PipeOut:
    """A text stream into a pipe whose read end :meth:`close_reader` closes."""

    def __init__(self) -> None:
        self.r, w = os.pipe()
        self.file = os.fdopen(w, "w")

    def close_reader(self) -> None:
        os.close(self.r)

    def write(self, text: str) -> int:
        return self.file.write(text)

    def flush(self) -> None:
        self.file.flush()

    def fileno(self) -> int:
        return self.file.fileno()


@pytest.mark.parametrize("at", ["preflight", "pull", "switch-wait"])
def test_an_interrupt_whose_output_reader_has_gone_still_gives_the_lock_back(project, card, standin, at,  # noqa: F811
                                                                           monkeypatch):
    """The bug: a sweep stopped mid-deploy left the host locked by the dead deploy. Its Ansible
    task died with it, every line the deploy wrote met EPIPE, and the BrokenPipeError of its
    "interrupted: waiting for the preflight" warning left the cleanup before the lock was given
    back. Now the lines are lost and the work is not: no lock, the old deployment serves."""
    host, entry = card
    good = _profile(project, "good")
    assert _deploy(project, card, good, standin).outcome == "ready"
    out = _PipeOut()
    monkeypatch.setattr(sys, "stdout", out)  # the console reporter's lines go to stdout
    try:
        with pytest.raises(DeployError, match="interrupted"):
            _deploy(project, card, _profile(project, "new"), standin, _InterruptedReaderGone(at, out))
    finally:
        try:
            out.file.close()
        except OSError:  # lines still buffered for the reader that has gone
            pass
    assert host.read_lock() is None and not _lock_file(host.workdir).exists()
    assert _served_soon() == ["good"]
    assert len(_containers(host.workdir)) == 1


def test_a_second_interrupt_during_the_rollback_still_ends_every_revision(project, card, standin):  # noqa: F811
    host, entry = card
    good = _profile(project, "good", startup_s=5)
    assert _deploy(project, card, good, standin).outcome == "ready"
    slow = _profile(project, "slow", startup_s=60)
    _sigterm_when(lambda: _started(host.workdir, "slow"), delay_s=1.0)
    _sigterm_when(lambda: _started(host.workdir, "", event="rollback"), delay_s=2.0)
    with pytest.raises(DeployError) as exc:
        _deploy(project, card, slow, standin)
    assert "the rollback was interrupted too" in exc.value.message
    assert _revisions(host.workdir) == [(1, "deploy", "good", "ready"), (2, "deploy", "slow", "interrupted"),
                                        (3, "rollback", "good", "interrupted")]
    _assert_host_is_clean(host, host.workdir, "good")  # Compose had started it: it comes up


# ------------------------------------------------------------------------------ records and names


def test_a_damaged_history_and_hostile_history_values_are_survived(project, card, standin, tmp_path):  # noqa: F811
    """A torn last line is ended, never glued; its revision number is not given again; a
    run_id pointing outside the run store is not followed; status names the damage. The
    container log's terminal escapes reach neither the record nor the reporter's terminal."""
    host, entry = card
    good = _profile(project, "good", escapes=True)
    assert _deploy(project, card, good, standin).outcome == "ready"
    victim = tmp_path / "outside" / "victim"
    victim.mkdir(parents=True)
    (victim / "run.json").write_text('{"outcome": "started"}')
    history = Path(host.workdir) / ".servedeck" / "history.jsonl"
    with open(history, "ab") as fh:
        fh.write(json.dumps({"revision": 2, "event": "deploy", "outcome": "started",
                             "run_id": f"../../{tmp_path.name}/outside/victim"}).encode() + b"\n")
        fh.write(b'{"revision":3,"event":"deploy","outcome":"sta')  # torn: the disk filled mid-line
    result = _deploy(project, card, _profile(project, "new"), standin)
    assert result.outcome == "ready" and result.revision == 4
    assert (victim / "run.json").read_text() == '{"outcome": "started"}'
    lines = _history_lines(host.workdir)
    assert lines[3] == b'{"revision":3,"event":"deploy","outcome":"sta' and b"" not in lines
    assert [json.loads(ln)["revision"] for ln in lines[4:]] == [2, 4, 4]  # abandoned 2, then 4
    st = status(host, entry)
    assert st["history_damaged"] == 1 and st["serving"]
    assert oct(history.stat().st_mode & 0o777) == "0o600"
    first = _runs(project)[0]
    log = (first / "startup.log").read_text()
    assert "\x1b" not in log and "\\x1b]0;owned\\x07" in log and "\u202e" not in log


def test_status_names_a_leftover_container_and_a_record_that_contradicts_the_host(project, card, standin):  # noqa: F811
    """What a raced switch left (issue 28: a ``<id>_<name>`` container in Created state beside the
    serving one, and ``status`` said "no drift"), and a newest revision recorded failed while its
    own file is installed and serves: ``status`` names both."""
    host, entry = card
    assert _deploy(project, card, _profile(project, "good", startup_s=0.3), standin).outcome == "ready"
    st = status(host, entry)
    assert st["serving"] and st["drift"] == [], st["drift"]
    (name, _, proj), = _containers(host.workdir)
    leftover = f"{uuid.uuid4().hex[:12]}_{name}"
    subprocess.run(["docker", "create", "--name", leftover, "--label", f"com.docker.compose.project={proj}",
                    "--label", f"com.docker.compose.project.working_dir={host.workdir}",
                    "--label", "com.docker.compose.service=vllm", standin, "true"],
                   check=True, capture_output=True)
    try:
        history = Path(host.workdir) / ".servedeck" / "history.jsonl"
        with open(history, "ab") as fh:  # as a client that lost its link wrote it before this round
            fh.write(json.dumps({"revision": 1, "outcome": "failed", "reason": "unreachable"}).encode() + b"\n")
        drift = status(host, entry)["drift"]
        assert any("2 containers" in d and f"{leftover} created" in d for d in drift), drift
        assert any("revision 1 (deploy of good) ended failed" in d and "serves" in d for d in drift), drift
    finally:
        subprocess.run(["docker", "rm", "-f", leftover], capture_output=True)


def test_the_switch_clears_what_would_take_the_new_containers_name(project, card, standin):  # noqa: F811
    """Before compose's replace, the switch removes every container of the working directory that
    would stand in its way (the ``Conflict. The container name ... is already in use`` of a raced
    switch): one of ours that does not run (a ``<id>_<name>`` in Created state, as an interrupted
    Compose leaves it), and another Compose project's, running or not; the serving one is
    Compose's to replace. Another working directory's container is left alone."""
    host, entry = card
    assert _deploy(project, card, _profile(project, "good", startup_s=0.3), standin).outcome == "ready"
    (name, _, proj), = _containers(host.workdir)
    tag = uuid.uuid4().hex[:8]
    made = {"ours": f"{tag}_{name}", "other": f"sd-other-{tag}", "elsewhere": f"sd-elsewhere-{tag}"}
    labels = {"ours": (proj, host.workdir), "other": (f"older-{tag}", host.workdir),
              "elsewhere": (proj, host.workdir + "-elsewhere")}
    try:
        for key, cname in made.items():
            p, wd = labels[key]
            subprocess.run(["docker", "run" if key == "other" else "create", *(["-d"] if key == "other" else []),
                            "--name", cname, "--label", f"com.docker.compose.project={p}",
                            "--label", f"com.docker.compose.project.working_dir={wd}", "--entrypoint", "sleep",
                            standin, "300"], check=True, capture_output=True)
        assert len(_containers(host.workdir)) == 3
        assert _deploy(project, card, _profile(project, "good", startup_s=0.3), standin).outcome == "ready"
        after = _containers(host.workdir)
        assert [(n, st) for n, st, _ in after] == [(name, "running")], after
        left = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"name=^{made['elsewhere']}$"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert len(left) == 1, "another working directory's container was removed"
    finally:
        subprocess.run(["docker", "rm", "-f", *made.values()], capture_output=True)


def test_two_working_directories_with_one_name_are_two_projects(project, standin, test_services):  # noqa: F811
    """/…/a-X/same and /…/b-X/same: each deploy keeps the other's container (the bug: Compose's
    project was the directory name, and a deploy to one removed the other's). A container the
    old naming left in a working directory is replaced by the first deploy there."""
    tag = uuid.uuid4().hex[:6]
    dirs = [f"/srv/servedeck-test/a-{tag}/same", f"/srv/servedeck-test/b-{tag}/same"]
    cards = []
    for i, wd in enumerate(dirs):
        host = RemoteHost(f"h{i}", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG), wd)
        host.run_script('mkdir -p "$1/models/qwen3.8-27b-exl3-4.00bpw" && '
                        'echo "{}" > "$1/models/qwen3.8-27b-exl3-4.00bpw/config.json"', [wd])
        cards.append((host, HostEntry(ssh=host.ssh_target, workdir=wd, render_gid="992", port=9960 + i,
                                      host_port=9960 + i, container_name=f"sd-same-{tag}-{i}",
                                      ready_timeout_s=60, api_host="127.0.0.1")))
    try:
        one = _profile(project, "one")
        assert _deploy(project, cards[0], one, standin).outcome == "ready"
        # an older servedeck's deployment in the second directory: Compose's default project name
        second = cards[1][0]
        second.upload_atomic("docker-compose.yml", (Path(dirs[0]) / "docker-compose.yml").read_bytes()
                             .replace(b"9960", b"9961")
                             .replace(f"sd-same-{tag}-0".encode(), f"sd-same-{tag}-1".encode())
                             .replace(b"\nname:", b"\nx-old-name:"))
        subprocess.run(["docker", "compose", "up", "-d"], cwd=dirs[1], check=True, capture_output=True)
        assert [c[2] for c in _containers(dirs[1])] == ["same"]
        assert _deploy(project, cards[1], one, standin).outcome == "ready"
        assert [c[2] for c in _containers(dirs[0])] == [compose_project_name(dirs[0])]
        assert [c[2] for c in _containers(dirs[1])] == [compose_project_name(dirs[1])]  # the old one replaced
        assert _served(9960) == ["one"] and _served(9961) == ["one"]
        assert _deploy(project, cards[0], _profile(project, "two"), standin).outcome == "ready"
        assert _served(9961) == ["one"] and len(_containers(dirs[1])) == 1
    finally:
        for host, _ in cards:
            host.close()
            host.run_script('docker ps -aq --filter "label=com.docker.compose.project.working_dir=$1" | '
                            'xargs -r docker rm -f >/dev/null; rm -rf "$(dirname "$1")"', [host.workdir],
                            check=False)
            host.close()


# ------------------------------------------------------------------------------ soak


class _InterruptAt(Reporter):
    """A quiet reporter that interrupts the deploy (SIGTERM to this process) the first time it
    reaches ``at``: a phase name, or ``switch-wait`` (while Compose runs on the host)."""

    def __init__(self, at: str | None) -> None:
        self.at, self.done = at, False

    def _maybe(self, name: str) -> None:
        if not self.done and name == self.at:
            self.done = True
            os.kill(os.getpid(), signal.SIGTERM)

    def phase(self, name: str, text: str) -> None:
        self._maybe(name)

    def info(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        if phase == "switch":
            self._maybe("switch-wait")


SOAK_FAULTS = ["none", "none", "fails", "preflight", "pull", "switch", "switch-wait", "wait", "rollback",
               "torn-history", "stale-lock"]


def test_soak_of_50_deploys_with_random_faults(project, card, standin):  # noqa: F811
    """50 deploys over 4 profiles with a fault drawn for each (seeded): none, a server that
    exits, an interrupt at every phase (preflight, pull, before the switch, during it, during
    the wait, during the rollback), a torn history line, a stale lock of a dead process. After
    every step: the last known-good deployment serves, one container, no lock left, every
    history line that servedeck wrote parses, every started revision ended."""
    host, entry = card
    rng = random.Random(28)
    names = [_profile(project, f"v{i}", startup_s=0.3) for i in range(4)]
    bad = _profile(project, "bad", startup_s=0.3, mode="exit")
    assert _deploy(project, card, names[0], standin).outcome == "ready"
    good = names[0]
    torn = 0
    counts: dict[str, int] = {}
    for step in range(49):
        fault = rng.choice(SOAK_FAULTS)
        counts[fault] = counts.get(fault, 0) + 1
        target = rng.choice([n for n in names if n != good])
        at = fault if fault in ("preflight", "pull", "switch", "switch-wait", "wait", "rollback") else None
        profile = bad if fault in ("fails", "rollback") else target
        if fault == "torn-history":
            with open(Path(host.workdir) / ".servedeck" / "history.jsonl", "ab") as fh:
                fh.write(b'{"revision":99999,"outco')
            torn += 1
        if fault == "stale-lock":
            dead = subprocess.Popen(["true"])
            dead.wait()
            _lock_file(host.workdir).write_text(json.dumps(
                {"owner": "soak: deploy", "pid": dead.pid, "host": os.uname().nodename,
                 "started_at": "2026-01-01T00:00:00Z"}))
        try:
            result = _deploy(project, card, profile, standin, _InterruptAt(at),
                             force_unlock=fault == "stale-lock")
            assert result.outcome == "ready", (step, fault)
            good = profile
        except DeployError as exc:
            assert fault in ("fails", "rollback", "preflight", "pull", "switch", "switch-wait", "wait"), \
                (step, fault, exc.message)
        served = _served_soon()
        assert served == [good], (step, fault, served, _revisions(host.workdir)[-3:])
        assert len(_containers(host.workdir)) == 1, (step, fault, _containers(host.workdir))
        assert not _lock_file(host.workdir).exists(), (step, fault)
        records = _history(host.workdir)
        assert hist.damaged(records) == torn, (step, fault)  # only the tears the soak made
        assert hist.unfinished(records) == [], (step, fault)
        assert len({r.number for r in hist.revisions(records)}) == len(hist.revisions(records))
    assert set(counts) == set(SOAK_FAULTS), counts  # every fault was drawn
