"""Deploy logic without a host: secrets and scrubbing, host history, and the readiness wait
against a fake host at the one seam (``RemoteHost``: ``engine`` + ``server_api``)."""

from __future__ import annotations

import threading
import time

import pytest

from servedeck.deploy.console import QuietReporter
from servedeck.deploy import readiness
from servedeck.deploy.readiness import wait_ready
from servedeck.deploy.secrets import find_secrets
from servedeck.host import history as hist
from servedeck.host.http import Answer

KEY = "sk-unit-test-key-0123456789"


# ------------------------------------------------------------------ secrets


def test_secrets_in_every_argv_and_environment_shape_are_found_and_scrubbed() -> None:
    s = find_secrets(["vllm", "serve", "--api-key", KEY, "--hf-token=hf_abcdefghij"],
                     ["HF_TOKEN=hf_abcdefghij", "PATH=/bin", "MY_SECRET=s3cr3t-value"])
    assert s.names == ["--api-key", "--hf-token", "environment.HF_TOKEN", "environment.MY_SECRET"]
    assert s.api_key == KEY
    record = {"command": ["--api-key", KEY], "flat": f"--api-key={KEY}",
              "env": {"VLLM_API_KEY": KEY}, "list": [f"VLLM_API_KEY={KEY}"],
              "diff": [{"path": "engine.extra_args[1]", "parent": None, "value": KEY}],
              KEY: "as a key", "n": 3}
    clean = s.scrub(record)
    assert KEY not in repr(clean) and "s3cr3t-value" not in s.scrub_text("x s3cr3t-value y")
    assert clean["command"] == ["--api-key", "***"] and clean["n"] == 3
    assert clean["diff"][0]["value"] == "***" and "***" in clean


def test_api_key_is_the_value_as_the_server_gets_it(monkeypatch) -> None:
    """A profile's values are literal (the renderer writes ``$`` as ``$$``): ``${NAME}`` is the
    key itself, whatever this process's environment holds."""
    assert find_secrets([], {"VLLM_API_KEY": KEY}).api_key == KEY
    monkeypatch.setenv("SD_TEST_KEY", "not-the-key")
    assert find_secrets(["--api-key", "${SD_TEST_KEY}"], {}).api_key == "${SD_TEST_KEY}"
    assert find_secrets([], ["VLLM_API_KEY=${SD_TEST_KEY:-dflt}"]).api_key == "${SD_TEST_KEY:-dflt}"
    assert find_secrets(["--port", "8000"], {"HF_HOME": "/x"}).api_key is None
    assert find_secrets([], {}).scrub({"a": KEY}) == {"a": KEY}  # nothing to scrub


def test_secrets_including_another_deployments_scrub_both_and_name_a_clash() -> None:
    a = find_secrets([], {"VLLM_API_KEY": KEY, "HF_TOKEN": "hf_same_token"})
    b = find_secrets(["--api-key", "sk-other-key"], {"VLLM_API_KEY": "sk-rollback-key",
                                                     "HF_TOKEN": "hf_same_token"})
    both = a.including(b, "revision 3")
    assert both.names == ["--api-key", "environment.HF_TOKEN", "environment.VLLM_API_KEY",
                          "environment.VLLM_API_KEY (revision 3)"]
    assert both.api_key == "sk-other-key"
    assert both.scrub_text(f"{KEY} sk-rollback-key sk-other-key") == "*** *** ***"


def test_a_key_with_a_dollar_is_scrubbed_also_as_a_compose_file_writes_it() -> None:
    s = find_secrets([], {"VLLM_API_KEY": "sk-$HOME-$$-x"})
    assert s.scrub_text('VLLM_API_KEY: "sk-$$HOME-$$$$-x" and sk-$HOME-$$-x') == 'VLLM_API_KEY: "***" and ***'


# ------------------------------------------------------------------ history


def _rev(n, outcome, sha, event="deploy"):
    sha = sha * 64  # a SHA-256 in hex: the history's values are checked
    return [{"revision": n, "event": event, "outcome": "started", "compose_sha256": sha, "profile": f"p{n}"},
            {"revision": n, "outcome": outcome}] if outcome != "started" else [
            {"revision": n, "event": event, "outcome": "started", "compose_sha256": sha}]


def test_known_good_is_only_what_served_newest_first_one_per_file() -> None:
    records = (_rev(1, "ready", "a") + _rev(2, "failed", "b") + _rev(3, "interrupted", "c")
               + _rev(4, "ready", "a", "rollback") + _rev(5, "ready", "d") + _rev(6, "started", "e")
               + [{"event": "deploy", "outcome": "ready"}])  # an old line without revision
    assert [r.number for r in hist.known_good(records)] == [5, 4]
    assert [r.number for r in hist.known_good(records, stored={"a" * 64})] == [4]
    assert [r.number for r in hist.unfinished(records)] == [6]
    assert hist.next_revision(records) == 7 and hist.next_revision([]) == 1
    assert hist.keep_hashes(records, keep=1) == ["d" * 64]
    assert hist.history_records(b'{"revision": 1}\nnot json\n\n[1]\n') == [
        {"revision": 1}, {"damaged": "not json", "revision_seen": None}, {"damaged": "[1]", "revision_seen": None}]


# ------------------------------------------------------------------ readiness at the seam


class _Container:
    """What readiness uses of a :class:`servedeck.host.docker.Container`."""

    def __init__(self, status="running", exit_code=0, restarts=0):
        self.id = "c0ffee"
        self.status, self.exit_code, self.restarts = status, exit_code, restarts

    def state(self, *, reload=True):
        return {"id": self.id, "status": self.status, "running": self.status == "running", "restarting": False,
                "exit_code": self.exit_code, "restart_count": self.restarts, "started_at": 1767225600.5}

    def logs(self, *, tail="all"):
        return "INFO starting\n"

    def follow(self, *, tail="all"):
        return iter(["INFO starting\n"])


class _Engine:
    def __init__(self, container=None, hang: threading.Event | None = None):
        self.found, self.hang = container, hang

    def container(self, workdir, service):
        if self.hang is not None:
            self.hang.wait()  # a frozen SSH connection: the call never returns
        return self.found


class _Api:
    def __init__(self, health=None, models=(None, [])):
        self.health, self.models = health, models
        self.keys = []

    def get(self, path):
        return Answer(self.health)

    def served_models(self):
        return self.models


class _Host:
    """The seam: what readiness uses of a RemoteHost."""

    workdir = "/srv/x"

    def __init__(self, engine, api):
        self.engine, self.api, self.reconnects = engine, api, 0

    def server_api(self, base_url, api_key=None, *, timeout_s=2.0):
        self.api.keys.append(api_key)
        return self.api

    def reconnect(self):
        self.reconnects += 1


def _wait(host, timeout_s=1.5, key=None):
    return wait_ready(host, service="vllm", base_url="http://h:1", served_name="m", api_key=key,
                      timeout_s=timeout_s, reporter=QuietReporter())


def test_ready_when_the_model_is_listed_with_the_key_sent() -> None:
    host = _Host(_Engine(_Container()), _Api(200, (200, ["m"])))
    r = _wait(host, key=KEY)
    assert r.ready and r.diagnosis == "ready" and host.api.keys == [KEY]


def test_401_is_the_server_wants_a_key_not_a_missing_model() -> None:
    r = _wait(_Host(_Engine(_Container()), _Api(200, (401, []))))
    assert not r.ready and r.diagnosis == "wants-key" and "wants an API key" in r.reason


def test_exited_container_and_not_ready_yet_are_told_apart() -> None:
    exited = _wait(_Host(_Engine(_Container("exited", 1)), _Api()))
    assert exited.diagnosis == "exited" and "code 1" in exited.reason
    slow = _wait(_Host(_Engine(_Container()), _Api()), timeout_s=1.2)
    assert slow.diagnosis == "not-ready" and "last seen running" in slow.reason


def test_a_frozen_engine_is_cannot_reach_the_host_at_the_deadline() -> None:
    hang = threading.Event()
    try:
        r = _wait(_Host(_Engine(_Container(), hang), _Api()), timeout_s=4.0)
    finally:
        hang.set()
    assert not r.ready and r.diagnosis == "unreachable"
    assert "cannot reach the host" in r.reason and "never seen" in r.reason


class _FailingEngine(_Engine):
    """Each Engine call fails (a broken connection); ``hold`` keeps the first one hanging until
    it is set, and the call then fails too."""

    def __init__(self, hold: threading.Event | None = None):
        super().__init__()
        self.hold = hold

    def container(self, workdir, service):
        if self.hold is not None:
            self.hold.wait()
        raise OSError("the forwarded Engine socket closed")


def _watchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "servedeck-watch"]


def test_an_engine_failure_during_the_wait_reconnects_and_one_after_it_does_not() -> None:
    """During the wait a failing Engine call reconnects the host (the connection may be the frozen
    one); a call still hanging when the wait ended fails later, while the deploy goes on over the
    same connection (its rollback, its final state): that late failure must not reconnect it
    (the bug: the old master was stopped under the deploy's next command)."""
    during = _Host(_FailingEngine(), _Api())
    assert _wait(during, timeout_s=1.0).diagnosis == "unreachable"
    assert during.reconnects >= 1
    hold = threading.Event()
    after = _Host(_FailingEngine(hold), _Api())
    before = set(_watchers())
    r = _wait(after, timeout_s=1.0)
    assert not r.ready
    late = [t for t in _watchers() if t not in before]
    assert late, "the watcher's call should still hang after the wait"
    hold.set()
    for t in late:
        t.join(5)
    assert not any(t.is_alive() for t in late)
    assert after.reconnects == 0


class _StartingContainer(_Container):
    """Streams a start-up log whose last line is uvicorn's, then serves (``api.health``)."""

    def __init__(self, api, serving_line):
        super().__init__()
        self.api, self.serving_line = api, serving_line

    def follow(self, *, tail="all"):
        yield "INFO 12-01 10:00:00 [loader.py:1] loading\n"
        time.sleep(0.3)
        self.api.health, self.api.models = 200, (200, ["m"])
        yield self.serving_line.decode()


@pytest.mark.parametrize("line", [
    b"(APIServer pid=1) INFO:     Application startup complete.\n",
    b"(APIServer pid=1) INFO 12-01 10:00:01 [launcher.py:47] Route: /health, Methods: GET\n",
])
def test_a_serving_line_in_the_log_wakes_the_poll_at_once(monkeypatch, line) -> None:
    """With the HTTP poll interval at 30 s, only the log's serving line can make the wait see the
    server within the 10 s deadline."""
    monkeypatch.setattr(readiness, "HEALTH_POLL_S", 30.0)
    api = _Api()
    r = _wait(_Host(_Engine(_StartingContainer(api, line)), api), timeout_s=10.0)
    assert r.ready and r.waited_s < 10.0


def test_other_log_lines_do_not_wake_the_poll(monkeypatch) -> None:
    """The server serves from 0.3 s but logs no serving line: the next poll is the one at the
    1 s deadline (the wait's sleep never passes its deadline)."""
    monkeypatch.setattr(readiness, "HEALTH_POLL_S", 30.0)
    api = _Api()
    r = _wait(_Host(_Engine(_StartingContainer(api, b"INFO 12-01 10:00:01 [x.py:1] still loading\n")), api),
              timeout_s=1.0)
    assert r.ready and 1.0 <= r.waited_s < 10.0


# ------------------------------------------------------------------ rollback target


def test_rollback_target_is_known_good_and_never_a_file_that_did_not_serve() -> None:
    import pytest

    from servedeck.deploy.ops import _rollback_target
    from servedeck.errors import DeployError
    from servedeck.host.remote import HostState

    class H:
        name = "b70"

    records = _rev(1, "ready", "a") + _rev(2, "ready", "b") + _rev(3, "failed", "c")
    # the deployed file "c" never served: the newest known-good one is the target
    assert _rollback_target(H(), HostState("acquired", compose_sha256="c" * 64, good={"a" * 64, "b" * 64},
                                           history=records), None).number == 2
    # the deployed file "b" serves: go back to the one before it
    assert _rollback_target(H(), HostState("acquired", compose_sha256="b" * 64, good={"a" * 64, "b" * 64},
                                           history=records), None).number == 1
    # a pruned file is not a target; --to must name a known-good revision
    with pytest.raises(DeployError, match="no known-good deployment"):
        _rollback_target(H(), HostState("acquired", compose_sha256="b" * 64, good={"b" * 64},
                                        history=records), None)
    with pytest.raises(DeployError, match="revision 3 .* is not a known-good"):
        _rollback_target(H(), HostState("acquired", compose_sha256="b" * 64, good={"a" * 64, "b" * 64, "c" * 64},
                                        history=records), 3)


def test_forwarded_socket_files_of_dead_clients_are_removed_and_live_ones_kept(tmp_path) -> None:
    import os
    import subprocess

    from servedeck.host.docker import _remove_orphaned_sockets
    dead = subprocess.Popen(["true"])
    dead.wait()
    names = {f"docker-{dead.pid}-0a1b2c3d.sock": False, f"docker-{os.getpid()}-0a1b2c3d.sock": True,
             f"docker-{os.getppid()}-deadbeef.sock": True, "f9e6064efe3c42160424": True,
             f"docker-{dead.pid}-x.sock": True}  # not servedeck's pattern: left alone
    for name in names:
        (tmp_path / name).write_text("")
    _remove_orphaned_sockets(str(tmp_path))
    assert {p.name for p in tmp_path.iterdir()} == {n for n, kept in names.items() if kept}


# ------------------------------------------------------------------ image


class _NoEngineHost:
    """A host whose Engine must not be reached (the docker SDK is neither imported nor asked)."""

    name = "b70"

    @property
    def engine(self):
        raise AssertionError("the Engine was reached")


def test_an_image_the_preflight_found_needs_no_engine_and_a_missing_one_asks_the_engine() -> None:
    from pathlib import Path

    import pytest

    from servedeck.deploy.plan import resolve_image
    from servedeck.errors import DeployError
    from servedeck.model.catalog import Catalog
    from servedeck.model.profile import ProfileStore
    root = Path(__file__).resolve().parents[2]
    profile = ProfileStore(root / "profiles").load("speed").profile
    catalog = Catalog(root / "deploy" / "images.yaml")
    known = catalog.lookup(profile.image_ref.digest)
    repo_digest = f"{profile.image_ref.repository}@{profile.image_ref.digest}"
    attrs = {"Id": "sha256:" + "ab" * 32, "RepoDigests": [repo_digest], "Created": "2026-09-07T00:00:00Z",
             "Config": {"Entrypoint": list(known.entrypoint), "WorkingDir": "/opt/exl3xpu", "Labels": None}}
    info = resolve_image(_NoEngineHost(), profile, catalog, Path("deploy/images.yaml"), QuietReporter(),
                         inspected=attrs)
    assert info.facts == known and not info.pulled
    assert info.raw["id"] == attrs["Id"] and info.raw["repo_digests"] == [repo_digest]
    # the catalog is still held to the truth by what the preflight read
    wrong = {**attrs, "Config": {**attrs["Config"], "Entrypoint": ["python3", "other.py"]}}
    with pytest.raises(DeployError, match="catalog is wrong"):
        resolve_image(_NoEngineHost(), profile, catalog, Path("deploy/images.yaml"), QuietReporter(),
                      inspected=wrong)
    # not on the host (or inspected under another digest): the Engine is asked (and pulls)
    for inspected in (None, {**attrs, "RepoDigests": [f"{profile.image_ref.repository}@sha256:{'0' * 64}"]}):
        with pytest.raises(AssertionError, match="the Engine was reached"):
            resolve_image(_NoEngineHost(), profile, catalog, Path("deploy/images.yaml"), QuietReporter(),
                          inspected=inspected)


# ------------------------------------------------------------------ console


def test_console_lines_into_a_pipe_are_plain_and_keep_brackets_and_rich_is_not_imported(tmp_path) -> None:
    """Into a pipe (a deploy's output read by a script, a CI log) the phase lines come plain, as
    written (brackets are text, not markup), the status every 10 s, and rich is never imported."""
    import subprocess
    import sys
    script = (
        "import sys\n"
        "from servedeck.deploy.console import ConsoleReporter\n"
        "r = ConsoleReporter()\n"
        "r.phase('preflight', 'host b70 (/srv/x) [lock]')\n"
        "r.info('image present on the host')\n"
        "r.warn('kv/[x]: tight')\n"
        "r.waiting('wait', 0.5, 'INFO loading')\n"
        "r.waiting('wait', 11.0, 'INFO loaded')\n"
        "r.done_waiting()\n"
        "print('rich imported' if 'rich' in sys.modules else 'no rich')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["preflight host b70 (/srv/x) [lock]", "          image present on the host",
                                "  warning kv/[x]: tight", "          wait   11.0 s | INFO loaded", "no rich"]


@pytest.mark.parametrize("reporter", ["ConsoleReporter()", "ConsoleReporter(stderr=True)", "Reporter()"])
def test_a_reader_that_has_gone_costs_the_lines_not_the_work(reporter) -> None:
    """The fleet's Ansible task that runs a deploy is stopped with it, closing the pipe the deploy
    writes to: every later line (the interrupt's warning, the rollback's phases) met EPIPE, and the
    BrokenPipeError left the cleanup before the lock was given back. Now the lines are dropped, the
    code after them runs, and the process exits without a flush error at shutdown."""
    import os
    import subprocess
    import sys
    stream = "stderr" if "stderr" in reporter else "stdout"
    out_r, out_w = os.pipe()  # the deploy's output, read by a reader that goes away
    note_r, note_w = os.pipe()  # what the child says on the side
    go_r, go_w = os.pipe()  # the parent says: the reader has gone
    script = (
        "import os, sys\n"
        "from servedeck.deploy.console import ConsoleReporter, Reporter\n"
        f"r = {reporter}\n"
        "r.phase('preflight', 'host b70')\n"
        f"os.write({note_w}, b'first line out\\n')\n"
        f"os.read({go_r}, 1)\n"
        "for i in range(3):\n"
        "    r.warn('interrupted: waiting for the preflight round trip ' + 'x' * 70000)\n"
        "    r.phase('rollback', 'to revision 3')\n"
        "    r.waiting('wait', 11.0 * (i + 1), 'INFO loaded')\n"
        "r.done_waiting()\n"
        f"os.write({note_w}, (b'lost' if r.lost else b'not lost') + b' cleanup ran\\n')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], pass_fds=(note_w, go_r),
                            stdout=out_w if stream == "stdout" else subprocess.DEVNULL,
                            stderr=out_w if stream == "stderr" else subprocess.PIPE)
    os.close(out_w), os.close(note_w), os.close(go_r)
    with os.fdopen(note_r) as notes, os.fdopen(out_r) as out:
        assert notes.readline() == "first line out\n"
        assert "preflight" in out.readline()
        out.close()  # the reader goes
        os.write(go_w, b"x")
        os.close(go_w)
        rest = notes.read()
    _, err = proc.communicate(timeout=30)
    assert rest == "lost cleanup ran\n", err
    assert proc.returncode == 0 and not err, err
