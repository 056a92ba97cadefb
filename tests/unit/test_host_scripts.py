"""Shell code servedeck runs on a card host (servedeck.host.facts), run here with the local
``sh`` against fake programs that print how they were called."""

from __future__ import annotations

import subprocess


def _compose_fn(tmp_path, plugin_dirs: list[str], config: str | None = None) -> str:
    """Run COMPOSE_SH's sd_compose with a fake HOME and a fake `docker` on PATH; both print
    what they were run as."""
    from servedeck.host.facts import COMPOSE_SH
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    (home / ".docker").mkdir(parents=True)
    bin_dir.mkdir()
    if config is not None:
        (home / ".docker" / "config.json").write_text(config)
    fake = bin_dir / "docker"
    fake.write_text('#!/bin/sh\necho "docker $*"\n')
    fake.chmod(0o755)
    for d in plugin_dirs:
        plugin = home / d / "docker-compose"
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.write_text('#!/bin/sh\necho "plugin $*"\n')
        plugin.chmod(0o755)
    env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(["sh", "-c", COMPOSE_SH + 'sd_compose "$@"', "sh", "up", "-d", "a b"],
                          env=env, capture_output=True, text=True, check=True).stdout


def test_compose_runs_the_cli_plugin_binary_when_the_docker_cli_would_find_it_first(tmp_path) -> None:
    assert _compose_fn(tmp_path, [".docker/cli-plugins"]) == "plugin up -d a b\n"


def test_compose_is_docker_compose_without_the_plugin_in_a_known_place_or_with_extra_dirs(tmp_path) -> None:
    assert _compose_fn(tmp_path / "none", []) == "docker compose up -d a b\n"
    extra = '{"cliPluginsExtraDirs": ["/opt/plugins"]}'
    assert _compose_fn(tmp_path / "extra", [".docker/cli-plugins"], extra) == "docker compose up -d a b\n"


# ------------------------------------------------------------------ the history log


def _append(path, text: str) -> None:
    from servedeck.host.history import APPEND_SH
    subprocess.run(["sh", "-c", APPEND_SH + 'umask 022; sd_append "$1" "$2"', "sh", str(path), text], check=True)


def test_a_history_line_is_never_glued_onto_a_torn_one_and_the_file_is_owner_only(tmp_path) -> None:
    from servedeck.host import history as hist
    log = tmp_path / "history.jsonl"
    _append(log, '{"revision":1,"outcome":"started"}')
    _append(log, '{"revision":1,"outcome":"ready"}\n{"revision":2,"outcome":"started"}')
    assert log.read_text().count("\n") == 3 and "\n\n" not in log.read_text()
    with open(log, "ab") as fh:  # a write cut short: the disk filled mid-line
        fh.write(b'{"revision":3,"event":"deploy","outco')
    _append(log, '{"revision":2,"outcome":"ready"}')
    lines = log.read_text().splitlines()
    assert lines[-2] == '{"revision":3,"event":"deploy","outco' and lines[-1] == '{"revision":2,"outcome":"ready"}'
    records = hist.history_records(log.read_bytes())
    assert hist.damaged(records) == 1
    assert [(r.number, r.outcome) for r in hist.revisions(records)] == [(1, "ready"), (2, "ready")]
    assert hist.next_revision(records) == 4  # 3 was started on the host, even if its line is torn
    assert log.stat().st_mode & 0o777 == 0o600


def test_values_read_back_from_the_history_are_checked_before_use() -> None:
    from servedeck.host import history as hist
    records = [{"revision": 1, "event": "deploy", "outcome": "started", "compose_sha256": "../../etc/passwd",
                "run_id": "../../outside/victim", "port": "9932; rm -rf /", "profile": "speed"},
               {"revision": 1, "outcome": "ready"}, {"revision": True, "outcome": "ready"}]
    (rev,) = hist.revisions(records)
    assert rev.compose_sha256 is None and not rev.good  # never a path under good/
    assert "run_id" not in rev.record and "port" not in rev.record and rev.profile == "speed"


def test_one_compose_project_per_working_directory() -> None:
    from servedeck.grammar import PROJECT_NAME_RE, compose_project_name
    a, b = compose_project_name("/srv/a/same"), compose_project_name("/srv/b/same/")
    assert a != b and a.startswith("same-") and b.startswith("same-")
    assert compose_project_name("/srv/b/same") == b  # a trailing / is the same directory
    assert PROJECT_NAME_RE.match(compose_project_name("/srv/My Cards/B70 (new)"))
    assert PROJECT_NAME_RE.match(compose_project_name("/"))


def test_two_inventory_hosts_that_are_one_deployment_are_named() -> None:
    from servedeck.host.ssh import SshTarget
    from servedeck.model.inventory import HostEntry, shared_deployments
    same = SshTarget(hostname="card1", port=22)
    hosts = {"b70": HostEntry(ssh=same, workdir="/srv/b70"), "b70-again": HostEntry(ssh=same, workdir="/srv/b70/"),
             "b70-other": HostEntry(ssh=same, workdir="/srv/other/b70"),
             "b71": HostEntry(ssh=SshTarget(hostname="card2"), workdir="/srv/b70")}
    (finding,) = shared_deployments(hosts)
    assert "hosts b70 and b70-again are one deployment" in finding


def test_hostile_history_lines_are_damage_and_never_set_the_next_revision() -> None:
    """Bytes that are not UTF-8, a line past MAX_LINE_BYTES, JSON that is not an object and a
    revision of 5,000 digits are damaged lines; a revision of 1e400 (an object, no integer
    revision) is skipped; the revisions servedeck wrote read on, and the next number is one past
    the highest that could be a real one."""
    from servedeck.host import history as hist
    data = (b'{"revision":1,"event":"deploy","outcome":"started"}\n\xff\xfe not text\n'
            + b'{"revision":2,"x":"' + b"a" * (hist.MAX_LINE_BYTES + 10) + b'"}\n[1, 2]\n'
            + b'{"revision":1,"outcome":"ready"}\n{"revision":' + b"9" * 5000 + b'}\n{"revision":1e400}\n')
    records = hist.history_records(data)
    assert hist.damaged(records) == 4
    assert [(r.number, r.outcome) for r in hist.revisions(records)] == [(1, "ready")]
    assert hist.next_revision(records) == 3  # 2 shows in a damaged line: never given again


# ------------------------------------------------------------------------------ telemetry


def _xe_tree(root) -> dict[str, str]:
    """A stand-in xe card tree (no Intel GPU here): hwmon with an energy counter, the GT's
    frequency and throttle files."""
    hw = root / "class/drm/card1/device/hwmon/hwmon4"
    fr = root / "class/drm/card1/device/tile0/gt0/freq0"
    (fr / "throttle").mkdir(parents=True)
    hw.mkdir(parents=True)
    for path, value in ((hw / "name", "xe"), (hw / "energy1_input", "5000000"), (fr / "act_freq", "2400"),
                        (fr / "throttle/status", "1"), (fr / "throttle/reason_pl1", "1")):
        path.write_text(value + "\n")
    return {"energy": str(hw / "energy1_input"), "freq": str(fr / "act_freq")}


def test_the_sampler_runs_under_plain_posix_sh_with_date_and_sleep(tmp_path) -> None:
    """dash has no $EPOCHREALTIME: the sampler falls back to `date` and `sleep` and still
    writes one timestamped line per period; a missing file reads as an empty value."""
    import time

    from servedeck.host.telemetry import SAMPLER_SH, Column, parse_samples
    files = _xe_tree(tmp_path)
    out = tmp_path / "s.tsv"
    proc = subprocess.Popen(["dash", "-c", SAMPLER_SH, "sd-telemetry-t0k", str(out), "0.05",
                             str(int(time.time()) + 60), "t0k", files["energy"], files["freq"],
                             str(tmp_path / "missing")])
    try:
        time.sleep(0.6)
    finally:
        proc.terminate()
        proc.wait(5)
    cols = [Column("energy_uj", "xe card1 card", files["energy"]), Column("freq_mhz", "f", files["freq"]),
            Column("energy_uj", "gone", "missing")]
    t, values, dropped = parse_samples(out.read_text(), cols)
    assert len(t) >= 4 and t == sorted(t) and dropped == 0
    assert set(values[0]) == {5000000} and set(values[1]) == {2400} and set(values[2]) == {None}
    assert (tmp_path / "s.tsv.pid").read_text().strip() == str(proc.pid)


def test_start_and_stop_find_the_card_run_nvidia_smi_beside_and_kill_only_their_own(tmp_path) -> None:
    """The start script (bash here) finds the xe files and a stand-in `nvidia-smi` on PATH; the
    stop script reads everything back, stops both processes and removes the files."""
    import time

    from servedeck.host.telemetry import (SAMPLER_SH, START_SCRIPT, STOP_SCRIPT, parse_nvidia, parse_samples,
                                          parse_start)
    _xe_tree(tmp_path / "sys")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"  # a stand-in: prints what the query asks, every -lms milliseconds
    fake.write_text('#!/bin/sh\ncase "$*" in *"--query-gpu=name"*) echo "NVIDIA L4"; exit 0;; esac\n'
                    'while :; do printf "%s, 70.50, 2040, 0x0000000000000004\\n" "$(date -u "+%Y/%m/%d %H:%M:%S.%3N")";'
                    ' sleep 0.05; done\n')
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    tel = tmp_path / "tel"
    start = subprocess.run(["sh", "-c", START_SCRIPT, "sh", str(tmp_path / "sys"), "0", "0.05",
                            str(int(time.time()) + 60), str(tel), "abc123", SAMPLER_SH, "50"],
                           env=env, capture_output=True, text=True, check=True, timeout=30)
    clock, cols, problems, other = parse_start(start.stdout)
    assert abs(clock - time.time()) < 5 and not problems
    assert [c.kind for c in cols] == ["energy_uj", "freq_mhz", "throttle", "reason"]
    assert other["sampler"] == "bash" and other["gpu_name"] == "NVIDIA L4" and other["file"] == str(tel / "abc123.tsv")
    first = float((tel / "abc123.tsv").read_text().split("\t", 1)[0])
    assert first <= clock  # the clock is read after the first reading: a window after it maps after it
    time.sleep(0.6)
    stop = subprocess.run(["sh", "-c", STOP_SCRIPT, "sh", other["file"], "abc123"], env=env,
                          capture_output=True, text=True, timeout=30)
    head, _, rest = stop.stdout.partition("==samples\n")
    samples, _, nv = rest.partition("==nvidia\n")
    t, values, _ = parse_samples(samples, cols)
    assert len(t) >= 4 and set(values[2]) == {1}
    # a last reading (of every file) taken after the clock the stop script read as it began
    stop_clock = float(head.split("clock\t", 1)[1].split("\n", 1)[0])
    assert t[-1] >= stop_clock and all(v[-1] is not None for v in values) and t == sorted(t)
    nvidia, errors = parse_nvidia(nv)
    assert len(nvidia) >= 4 and not errors and nvidia[0][1:] == (70.5, 2040.0, 4)
    assert list(tel.iterdir()) == []
    for _ in range(50):  # a stopped process's last child (the stand-in's `date`) may take a moment
        count = f"ps -eo args | grep -c '[s]d-telemetry-abc123\\|{bin_dir}/[n]vidia-smi'"
        running = subprocess.run(["sh", "-c", count],
                                 capture_output=True, text=True).stdout.strip()
        if running == "0":
            break
        time.sleep(0.1)
    assert running == "0"


# ------------------------------------------------------------------ the switch's clearing

_FAKE_DOCKER = r"""#!/bin/sh
echo "$*" >> "$CALLS"
case "$1 $2" in
  "ps -a")
    case "$*" in *"{{.State}}"*)
      [ -n "$OLD_CLI" ] && { echo "template: :1: can't evaluate field State" >&2; exit 1; }
      cat "$TABLE" ;;
    esac ;;
  "ps -aq") cut -d'|' -f1 "$TABLE" ;;
  "inspect -f") grep "^$4|" "$TABLE" ;;
esac
"""


def _clear(tmp_path, containers: list[str], *, old_cli: bool) -> list[str]:
    """Run sd_clear_workdir against a fake `docker` knowing ``containers`` (``ID|project|state``);
    the Docker commands it ran that change something."""
    from servedeck.host.remote import CLEAR_WORKDIR_SH
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "docker").write_text(_FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    (tmp_path / "table").write_text("".join(c + "\n" for c in containers))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls"), "TABLE": str(tmp_path / "table"),
           "OLD_CLI": "1" if old_cli else ""}
    subprocess.run(["sh", "-c", CLEAR_WORKDIR_SH + 'set -u; sd_clear_workdir "$1" "$2"', "sh", "/srv/w d", "proj"],
                   env=env, check=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("ps -a --filter label=com.docker.compose.project.working_dir=/srv/w d --format")
    return [c for c in calls if c.split()[0] in ("stop", "rm")]


def test_the_switch_clears_another_projects_containers_and_ours_that_do_not_run(tmp_path) -> None:
    """In one Engine call with a current Docker CLI, and per container with one whose ``ps
    --format`` has no ``{{.State}}``; the serving container (running or restarting) is left to
    Compose's replace."""
    table = ["aaa|proj|running", "bbb|proj|created", "ccc|old|running", "ddd|proj|exited", "eee|proj|restarting",
             "fff|old|exited"]
    want = ["rm -f bbb", "stop ccc", "rm -f ccc", "rm -f ddd", "stop fff", "rm -f fff"]
    for old_cli in (False, True):
        changed = _clear(tmp_path / str(old_cli), table, old_cli=old_cli)
        assert changed == want, (old_cli, changed)
    assert _clear(tmp_path / "none", [], old_cli=False) == []
    assert _clear(tmp_path / "serving", ["aaa|proj|running"], old_cli=True) == []
