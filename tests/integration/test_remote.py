"""servedeck.host.remote against the real sshd (127.0.0.1:2222), dockerd and registry."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from servedeck.errors import ServedeckError
from servedeck.host.history import keep_hashes, known_good, revisions
from servedeck.host.remote import LockInfo, RemoteHost, SshTarget

SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"
HOST_KEY_PUB = "/var/lib/servedeck-test/sshd/ssh_host_ed25519_key.pub"
WORKDIR = "/srv/servedeck-test/b70"

pytestmark = pytest.mark.integration


def _host_fingerprint() -> str:
    out = subprocess.run(["ssh-keygen", "-lf", HOST_KEY_PUB], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[1]  # SHA256:...


# ------------------------------------------------------------------ run


def test_run_returns_output_and_exit_status(test_host: RemoteHost) -> None:
    res = test_host.run(["sh", "-c", 'printf "%s|" "$1"; id -un; exit 3', "sh", "a b;'c"],
                        check=False)
    assert res.returncode == 3
    assert res.stdout == "a b;'c|root\n"
    with pytest.raises(ServedeckError, match="exit status 7"):
        test_host.run("echo boom >&2; exit 7")
    blob = bytes(range(256)) * 64
    assert test_host.run(["cat"], input=blob).stdout_bytes == blob


def test_commands_share_one_remote_session_over_the_real_sshd(test_host: RemoteHost, monkeypatch) -> None:
    """One login (the host's rc files run once), then each command in the session's loop; a
    timeout ends that session and the next command logs in again."""
    loops = {test_host.run("echo $PPID").stdout for _ in range(3)}
    assert len(loops) == 1
    with pytest.raises(ServedeckError, match="timed out after 1 s"):
        test_host.run(["sleep", "3"], timeout=1)
    assert test_host.run("echo $PPID").stdout not in loops
    # the command's environment is the login shell's, as in a session of its own
    monkeypatch.setenv("SERVEDECK_SSH_SESSION", "0")
    own = RemoteHost("own", test_host.ssh_target, test_host.workdir)
    try:
        same = ["sh", "-c", 'echo "$PATH $HOME $(umask) $(id -un)"']
        assert test_host.run(same).stdout == own.run(same).stdout
    finally:
        own.close()


def test_a_reconnect_does_not_end_what_others_run_over_the_shared_connection(
        test_host: RemoteHost) -> None:
    """Two users of one shared connection (two commands of servedeck against the same host, or a
    deploy's watcher thread and its main thread): one of them reconnects (a fault it met) while
    the other's command runs and while the other opens its session. Both finish (the bug: the
    old master was told to exit, the other's ssh ended with status 255 and nothing on stderr:
    "cannot connect over SSH: the connection closed")."""
    other = RemoteHost("other", test_host.ssh_target, test_host.workdir)
    try:
        test_host.run(["true"])
        assert other.transport.control_path() == test_host.transport.control_path()
        master = test_host.transport.master_pid()
        assert master
        out: dict[str, object] = {}

        def long_command() -> None:
            try:
                out["result"] = other.run("sleep 2; echo finished").stdout
            except ServedeckError as exc:
                out["result"] = exc
        t = threading.Thread(target=long_command)
        t.start()
        time.sleep(0.8)  # the other's command is under way on the master
        test_host.reconnect()
        for _ in range(5):  # sessions opened while the old master is being stopped
            other.close()
            assert other.run("echo again").stdout == "again\n"
        t.join(30)
        assert out["result"] == "finished\n"
        # the one that reconnected rides a connection of its own from now on
        assert test_host.transport.control_path() != other.transport.control_path()
        assert test_host.run("echo fresh").stdout == "fresh\n"
        assert test_host.transport.master_pid() not in (None, master)
    finally:
        other.close()


def test_unreachable_port_is_a_servedeck_error(test_services: dict[str, str]) -> None:
    host = RemoteHost("nowhere", SshTarget(hostname="127.0.0.1", port=1, user="root"), "/tmp")
    with pytest.raises(ServedeckError, match="cannot connect over SSH"):
        host.run(["true"])


def test_resolve_alias_with_ssh_G(test_host: RemoteHost) -> None:
    t = test_host.resolve()
    assert (t.hostname, t.port, t.user) == ("127.0.0.1", 2222, "root")
    assert "/var/lib/servedeck-test/client/id_ed25519" in t.identity_files
    assert t.known_hosts_files[0] == "/var/lib/servedeck-test/client/known_hosts"


# ------------------------------------------------------------------ files


def test_upload_atomic_replaces_owner_only(scratch_host: RemoteHost) -> None:
    v1, v2 = b"services: {a: 1}\n", b"services: {a: 2}\n"
    assert scratch_host.upload_atomic("docker-compose.yml", v1) == hashlib.sha256(v1).hexdigest()
    scratch_host.upload_atomic("docker-compose.yml", v2)
    assert scratch_host.read_file("docker-compose.yml") == v2
    # no temp file left behind, nothing else written
    listing = scratch_host.run(["ls", "-A", scratch_host.workdir]).stdout.split()
    assert sorted(listing) == ["docker-compose.yml"]
    mode = scratch_host.run(["stat", "-c", "%a", scratch_host.compose_path]).stdout.strip()
    assert mode == "600"  # compose files can hold secrets
    with pytest.raises(ServedeckError, match="does not exist"):
        scratch_host.read_file("missing.txt")


def test_preflight_reads_files_in_its_round_trip(scratch_host: RemoteHost) -> None:
    blob = bytes(range(256)) + b"\n{}"
    scratch_host.upload_atomic("models/m/config.json", blob)
    calls = []
    real = scratch_host.transport.run
    scratch_host.transport.run = lambda *a, **k: calls.append(a) or real(*a, **k)
    facts, state = scratch_host.preflight(read=["models/m/config.json", ".servedeck/absent.json"])
    assert state.lock == "free" and facts["host"] == scratch_host.name
    assert len(calls) == 1
    # served from the preflight's read: no further round trip
    assert scratch_host.read_file("models/m/config.json") == blob
    assert scratch_host.read_file(".servedeck/absent.json", missing_ok=True) is None
    with pytest.raises(ServedeckError, match="does not exist"):
        scratch_host.read_file(".servedeck/absent.json")
    assert len(calls) == 1
    # a write through the same object replaces what was read
    scratch_host.upload_atomic(".servedeck/absent.json", b"{}")
    assert scratch_host.read_file(".servedeck/absent.json") == b"{}"
    assert len(calls) == 3


def test_append_history_appends_json_lines(scratch_host: RemoteHost) -> None:
    scratch_host.append_history({"event": "deploy", "revision": 1})
    scratch_host.append_history({"event": "rollback", "note": "ünïcode \"quoted\"\nline"})
    text = scratch_host.read_file(".servedeck/history.jsonl").decode()
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == 2
    assert [json.loads(x) for x in lines] == [
        {"event": "deploy", "revision": 1},
        {"event": "rollback", "note": "ünïcode \"quoted\"\nline"}]


# ------------------------------------------------------------------ host keys


def test_unknown_host_key_refused_with_hint(tmp_path: Path, test_services: dict[str, str]) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG,
                                       known_hosts=str(known)), WORKDIR)
    with pytest.raises(ServedeckError) as err:
        host.run(["true"])
    text = err.value.render()
    assert "not known" in err.value.message
    assert _host_fingerprint() in err.value.message
    assert f"ssh-keyscan -p 2222 127.0.0.1 >> {known}" in (err.value.hint or "")
    assert known.read_text() == ""  # nothing was added behind the user's back
    with pytest.raises(ServedeckError, match="not known"):
        _ = host.engine.client  # Docker goes through the same SSH connection and host-key policy
    assert "hint:" in text


def test_changed_host_key_refused(tmp_path: Path, test_services: dict[str, str]) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text("[127.0.0.1]:2222 " + (tmp_path / "other_key.pub").read_text())
    host = RemoteHost("b70", SshTarget(alias="sd-testhost", ssh_config=SSH_CONFIG,
                                       known_hosts=str(known)), WORKDIR)
    with pytest.raises(ServedeckError, match="CHANGED") as err:
        host.run(["true"])
    assert _host_fingerprint() in err.value.message
    assert "ssh-keygen -R '[127.0.0.1]:2222'" in (err.value.hint or "")


# ------------------------------------------------------------------ lock


def test_lock_refuses_second_acquirer(scratch_host: RemoteHost) -> None:
    other = RemoteHost("scratch", scratch_host.ssh_target, scratch_host.workdir)
    assert scratch_host.read_lock() is None
    mine = scratch_host.acquire_lock("alice: deploy speed-8192")
    with pytest.raises(ServedeckError) as err:
        other.acquire_lock("bob: deploy quality")
    msg = err.value.message
    assert "alice: deploy speed-8192" in msg and mine.started_at.isoformat() in msg
    assert "stale" not in msg
    held = other.read_lock()
    assert held == mine
    with pytest.raises(ServedeckError, match="without holding"):
        other.release_lock()
    scratch_host.release_lock()
    assert scratch_host.read_lock() is None
    assert other.acquire_lock("bob").owner == "bob"
    other.release_lock()


def test_lock_staleness_and_force_unlock(scratch_host: RemoteHost) -> None:
    old = LockInfo(owner="carol", pid=1, host="elsewhere",
                   started_at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=30))
    scratch_host.upload_atomic(scratch_host.lock_path, old.model_dump_json().encode())
    with pytest.raises(ServedeckError, match=r"stale: it is 30\.\d h old"):
        scratch_host.acquire_lock("dave", stale_after_h=12)
    # a lock from this machine whose process is gone is stale even when young
    dead = subprocess.Popen(["true"])
    dead.wait()
    young = LockInfo(owner="erin", pid=dead.pid, host=socket.gethostname(),
                     started_at=dt.datetime.now(dt.timezone.utc))
    scratch_host.upload_atomic(scratch_host.lock_path, young.model_dump_json().encode())
    with pytest.raises(ServedeckError, match=f"process {dead.pid} .* is gone"):
        scratch_host.acquire_lock("dave")
    assert scratch_host.force_unlock() == young
    assert scratch_host.read_lock() is None
    assert scratch_host.force_unlock() is None
    scratch_host.acquire_lock("dave")
    scratch_host.release_lock()


# ------------------------------------------------------------------ facts


def test_preflight_facts_shape(test_host: RemoteHost, scratch_host: RemoteHost,
                               tiny_image) -> None:
    # a running container publishing a port: a static docker CLI blocking on `docker events`
    tag = f"servedeck-test/blocker:{uuid.uuid4().hex[:8]}"
    tiny_image(tag, {"/docker": Path("/usr/local/bin/docker").read_bytes()}, {"/docker": 0o755})
    name = f"sd-preflight-{uuid.uuid4().hex[:8]}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(["docker", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:80",
                    "-v", "/var/run/docker.sock:/var/run/docker.sock", tag, "/docker", "events"],
                   check=True, capture_output=True)
    try:
        scratch_host.run(["sh", "-c", 'mkdir -p "$1/models/w" "$1/empty" && echo x > "$1/models/w/c"',
                          "sh", scratch_host.workdir])
        scratch_host.acquire_lock("frank")
        facts = scratch_host.preflight_facts(["models/w", "empty", "nope", "/etc/hostname"],
                                             port=port)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        scratch_host.force_unlock()
    assert json.loads(json.dumps(facts)) == facts  # plain JSON types only
    assert set(facts) == {"host", "hostname", "kernel", "docker_server_version",
                          "docker_api_version", "compose_version", "dri_devices",
                          "gpu_power_caps", "workdir", "paths", "port", "image", "lock"}
    assert facts["image"] is None  # no image asked for
    assert facts["kernel"] == subprocess.run(["uname", "-r"], capture_output=True,
                                             text=True).stdout.strip()
    server = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert facts["docker_server_version"] == server
    assert re.fullmatch(r"\d+\.\d+\.\d+", facts["compose_version"])
    # no GPU here: scripts/test-services made one stand-in render node (226:128, gid 992)
    assert [(d["path"], d["gid"], d["mode"]) for d in facts["dri_devices"]] == [
        ("/dev/dri/renderD128", 992, "660")]
    assert facts["gpu_power_caps"] == []
    assert facts["workdir"]["exists"] is True and facts["workdir"]["free_gib"] > 0
    assert facts["paths"]["models/w"] == {"path": f"{scratch_host.workdir}/models/w",
                                          "exists": True, "nonempty": True, "kind": "dir"}
    assert facts["paths"]["empty"]["nonempty"] is False
    assert facts["paths"]["nope"] == {"path": f"{scratch_host.workdir}/nope", "exists": False,
                                      "nonempty": False, "kind": None}
    assert facts["paths"]["/etc/hostname"]["kind"] == "file"
    # a plain `docker run` container: no Compose project to name
    assert facts["port"] == {"port": port, "listening": True, "containers": [name],
                             "compose_workdirs": {name: None}}
    assert facts["lock"]["owner"] == "frank"
    # after the container is gone the port is free and the lock is gone
    after = scratch_host.preflight_facts([], port=port)
    assert after["port"] == {"port": port, "listening": False, "containers": [], "compose_workdirs": {}}
    assert after["lock"] is None
    # b70's working directory as scripts/test-services made it
    b70 = test_host.preflight_facts(["models/qwen3.8-27b-exl3-4.00bpw", "cache"], port=2222,
                                    image=tag)
    assert b70["paths"]["models/qwen3.8-27b-exl3-4.00bpw"]["nonempty"] is True
    assert b70["paths"]["cache"]["exists"] is True
    assert b70["port"]["listening"] is True and b70["port"]["containers"] == []
    # the image asked for: the Engine's own inspect document, as the docker SDK reads it
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                                        text=True, check=True).stdout)[0]
    assert b70["image"]["Id"] == inspect["Id"] and b70["image"]["Config"] == inspect["Config"]
    assert test_host.preflight_facts([], image=f"{tag}-absent")["image"] is None


# ------------------------------------------------------------------ docker


def test_docker_client_over_ssh_lists_containers(test_host: RemoteHost, tiny_image) -> None:
    tag = f"servedeck-test/tiny:{uuid.uuid4().hex[:8]}"
    tiny_image(tag, {"/hello.txt": b"hello\n"})
    name = f"sd-list-{uuid.uuid4().hex[:8]}"
    cid = subprocess.run(["docker", "create", "--name", name, tag, "/nothing"],
                         capture_output=True, text=True, check=True).stdout.strip()
    dc = test_host.engine.client
    try:
        listed = {c.id: c.name for c in dc.containers.list(all=True)}
        local = subprocess.run(["docker", "ps", "-aq", "--no-trunc"], capture_output=True,
                               text=True, check=True).stdout.split()
        assert listed.get(cid) == name
        assert set(local) <= set(listed)  # every container dockerd has is listed
        assert dc.version()["Version"] == subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True, text=True).stdout.strip()
    finally:
        test_host.close()
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


def test_push_then_pull_by_digest_over_ssh(test_host: RemoteHost, registry: str,
                                           tiny_image) -> None:
    payload = f"servedeck {uuid.uuid4()}\n".encode()  # unique content: a new digest each run
    repo = f"{registry}/servedeck-test/tiny"
    tag = f"{repo}:{uuid.uuid4().hex[:8]}"
    tiny_image(tag, {"/hello.txt": payload})
    subprocess.run(["docker", "push", tag], capture_output=True, check=True, timeout=300)
    digests = json.loads(subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", tag],
        capture_output=True, text=True, check=True).stdout)
    (pushed,) = [d for d in digests if d.startswith(repo + "@")]
    digest = pushed.split("@", 1)[1]
    # same dockerd behind the SSH host: remove the local copy so the pull really fetches it
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=True)
    dc = test_host.engine.client
    try:
        image = dc.images.pull(f"{repo}@{digest}")
        assert f"{repo}@{digest}" in image.attrs["RepoDigests"]
        container = dc.containers.create(image.id, command=["/nothing"])
        try:
            stream, _ = container.get_archive("/hello.txt")
            import io
            import tarfile
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                assert tar.extractfile("hello.txt").read() == payload
        finally:
            container.remove(force=True)
    finally:
        dc.images.remove(f"{repo}@{digest}", force=True)
        test_host.close()


def test_compose_on_host(scratch_host: RemoteHost, tiny_image) -> None:
    tag = f"servedeck-test/tiny:{uuid.uuid4().hex[:8]}"
    tiny_image(tag, {"/hello.txt": b"hi\n"})
    scratch_host.upload_atomic("docker-compose.yml", (
        "name: sdscratch\n"
        "services:\n"
        "  app:\n"
        f"    image: {tag}\n"
        "    command: [/nothing]\n"
        "    ports: ['127.0.0.1:19932:8000']\n").encode())
    cfg = json.loads(scratch_host.compose(["config", "--format", "json"]).stdout)
    assert cfg["services"]["app"]["image"] == tag
    assert cfg["services"]["app"]["ports"][0]["published"] == "19932"
    try:
        scratch_host.compose(["create"])
        ps = scratch_host.compose(["ps", "-a", "--format", "json"]).stdout
        rows = [json.loads(x) for x in ps.splitlines() if x.strip()]
        assert [r["Service"] for r in rows] == ["app"]
    finally:
        scratch_host.compose(["down"])
    bad = scratch_host.compose(["config", "--services", "--no-such-flag"], check=False)
    assert bad.returncode != 0


# ------------------------------------------------------------------ history, known-good files


def test_state_switch_finish_keep_known_good_files_by_hash(scratch_host: RemoteHost) -> None:
    files = [f"name: sdh\nservices:\n  app:\n    image: busybox\n    command: [echo, '{i}']\n".encode()
             for i in range(4)]
    shas = [hashlib.sha256(f).hexdigest() for f in files]
    for i, data in enumerate(files):
        state = scratch_host.state(lock_owner=f"t{i}")
        assert state.lock == "acquired" and scratch_host.holds_lock
        base = {"revision": i + 1, "event": "deploy", "compose_sha256": shas[i], "profile": f"p{i}"}
        res = scratch_host.switch(["config", "-q"], {**base, "outcome": "started"}, data=data)
        assert res.returncode == 0, res.stderr
        outcome = "failed" if i == 2 else "ready"
        lines = [{**base, "outcome": outcome}]
        keep = keep_hashes(state.history + lines, keep=2)
        assert scratch_host.finish(lines, store_good=shas[i] if outcome == "ready" else None,
                                   keep_good=keep) == "released"
    state = scratch_host.state()
    assert state.lock == "free" and state.compose_sha256 == shas[3]
    # revision 3 failed: never stored; pruned to the 2 newest known-good files
    assert state.good == {shas[3], shas[1]}
    assert [r.number for r in state.known_good()] == [4, 2]
    assert [r.outcome for r in revisions(state.history)] == ["ready", "ready", "failed", "ready"]
    assert [r.number for r in known_good(state.history)] == [4, 2, 1]
    modes = scratch_host.run(["sh", "-c", 'stat -c %a "$1"/*.yml', "sh", scratch_host.good_dir]).stdout.split()
    assert modes == ["600", "600"]
    # restoring a stored file is checked by hash; an unknown hash is refused (exit 6)
    scratch_host.state(lock_owner="t")
    back = scratch_host.switch(["config", "-q"], {"revision": 5, "outcome": "started"}, good_sha=shas[1])
    assert back.returncode == 0 and scratch_host.read_file("docker-compose.yml") == files[1]
    gone = scratch_host.switch(["config", "-q"], {"revision": 6, "outcome": "started"}, good_sha=shas[0])
    assert gone.returncode == 6 and scratch_host.read_file("docker-compose.yml") == files[1]
    scratch_host.release_lock()


def test_forced_takeover_of_a_stale_lock_reports_what_it_replaced(scratch_host: RemoteHost) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = LockInfo(owner="killed", pid=dead.pid, host=socket.gethostname(),
                     started_at=dt.datetime.now(dt.timezone.utc))
    scratch_host.upload_atomic(scratch_host.lock_path, stale.model_dump_json().encode())
    state = scratch_host.state(lock_owner="rescuer")
    assert state.lock == "held" and state.holder == stale and stale.stale_reason()
    state = scratch_host.state(lock_owner="rescuer", force_unlock=True)
    assert state.lock == "replaced" and state.replaced == stale
    assert scratch_host.read_lock().owner == "rescuer"
    scratch_host.release_lock()
    assert scratch_host.read_lock() is None
