"""Fleet layer without hosts: inventories (ansible-core's parser), options, sweep planning and
scheduling, the shipped playbooks (ansible-playbook --syntax-check) and the CLI boundary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servedeck.errors import ServedeckError
from servedeck.fleet.command import servedeck_command
from servedeck.fleet.inventory import load_fleet
from servedeck.fleet.rollout import parse_max_fail, parse_serial
from servedeck.fleet.runner import ANSIBLE_DIR, PLAYBOOKS
from servedeck.fleet.sweep import (AB_COMMAND_S, CLI_OVERHEAD_S, EXPERIMENT_OVERHEAD_S, HostEstimate,
                                   estimate_hosts, parse_vary, plan_sweep, schedule)
from servedeck.model.inventory import HostEntry, load_inventory
from servedeck.model.profile import ProfileStore
from servedeck.model.project import Project

ROOT = Path(__file__).resolve().parents[2]

INI = """\
[cards]
b70-1 ansible_host=10.0.0.11 servedeck_workdir=/srv/llm/b70 servedeck_render_gid=992
b70-2 ansible_host=10.0.0.12 ansible_port=2202 servedeck_workdir=/srv/llm/b70 servedeck_port=9940
b70-3 ansible_host=10.0.0.13 servedeck_workdir=/srv/llm/other servedeck_container_name=b70c

[spare]
b70-3

[lab:children]
cards

[cards:vars]
ansible_user=llm
ansible_ssh_private_key_file=/home/llm/.ssh/id_ed25519
servedeck_render_gid=991
servedeck_port=9932
servedeck_ready_timeout_s=1200
"""


@pytest.fixture
def ini(tmp_path) -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text(INI)
    return path


def test_ansible_ini_inventory_gives_groups_and_host_entries(ini):
    fleet = load_fleet(ini)
    assert fleet.kind == "ansible"
    assert fleet.groups["cards"] == ["b70-1", "b70-2", "b70-3"]
    assert fleet.groups["spare"] == ["b70-3"]
    assert fleet.groups["lab"] == ["b70-1", "b70-2", "b70-3"]  # through children
    one, two, three = (fleet.hosts[h] for h in ("b70-1", "b70-2", "b70-3"))
    # host variables beat group variables; group variables fill the rest
    assert one.render_gid == "992" and two.render_gid == "991"
    assert one.port == 9932 and two.port == 9940
    assert one.ready_timeout_s == 1200
    assert two.ssh.hostname == "10.0.0.12" and two.ssh.port == 2202 and two.ssh.user == "llm"
    assert one.ssh.port is None and one.ssh.identity_file == "/home/llm/.ssh/id_ed25519"
    assert three.container_name == "b70c" and three.workdir == "/srv/llm/other"


def test_ansible_patterns_select_hosts(ini):
    fleet = load_fleet(ini)
    assert fleet.select("lab") == ["b70-1", "b70-2", "b70-3"]
    assert fleet.select("cards:!spare") == ["b70-1", "b70-2"]
    assert fleet.select("b70-2") == ["b70-2"]
    with pytest.raises(ServedeckError, match="no host matches 'nope'"):
        fleet.select("nope")


def test_plain_group_or_host_names_select_what_ansible_selects(ini, tmp_path):
    """The direct lookup of a plain group or host name (no ansible-core import) gives
    ansible-core's answer, for an Ansible and for a servedeck inventory."""
    servedeck_inv = tmp_path / "hosts.yaml"
    servedeck_inv.write_text("hosts:\n  b2: {ssh: {hostname: h2}, workdir: /w}\n"
                             "  b1: {ssh: {hostname: h1}, workdir: /w}\n"
                             "groups:\n  lab: [b1, b2]\n  one: [b1]\n")
    for fleet in (load_fleet(ini), load_fleet(servedeck_inv)):
        manager = fleet._manager()
        for name in [*fleet.groups, *fleet.hosts]:
            matched = {str(h.name) for h in manager.list_hosts(name)}
            if not matched:  # e.g. an empty "ungrouped"
                with pytest.raises(ServedeckError, match="no host matches"):
                    fleet.select(name)
                continue
            assert fleet.select(name) == [str(n) for n in manager.hosts if str(n) in matched], name


def test_converted_inventory_is_servedeck_format(ini, tmp_path):
    fleet = load_fleet(ini)
    path = fleet.write_servedeck_inventory(tmp_path / "out")
    inv = load_inventory(path)
    assert inv.hosts == fleet.hosts
    assert inv.groups["spare"] == ["b70-3"]


def test_missing_or_bad_host_variable_names_host_and_variable(tmp_path):
    path = tmp_path / "bad.ini"
    path.write_text("[cards]\nb70-1 ansible_host=10.0.0.11\n")
    with pytest.raises(ServedeckError) as exc:
        load_fleet(path)
    assert exc.value.field == "b70-1.servedeck_workdir" and str(path) in exc.value.render()
    path.write_text("[cards]\nb70-1 servedeck_workdir=relative/dir\n")
    with pytest.raises(ServedeckError) as exc:
        load_fleet(path)
    assert exc.value.field == "b70-1.servedeck_workdir" and "absolute" in exc.value.render()


def test_loopback_fleet_inventories_agree():
    yaml_fleet = load_fleet(ROOT / "deploy" / "test-fleet" / "hosts.yaml")
    ini_fleet = load_fleet(ROOT / "deploy" / "test-fleet" / "hosts.ini")
    assert yaml_fleet.kind == "servedeck" and ini_fleet.kind == "ansible"
    assert yaml_fleet.select("lab") == ini_fleet.select("lab") == ["fleet-1", "fleet-2", "fleet-3"]
    assert yaml_fleet.select("pair") == ini_fleet.select("pair") == ["fleet-1", "fleet-2"]
    for name in yaml_fleet.hosts:
        a, b = yaml_fleet.hosts[name], ini_fleet.hosts[name]
        assert (a.workdir, a.port, a.host_port, a.container_name, a.render_gid) == \
               (b.workdir, b.port, b.host_port, b.container_name, b.render_gid)
    assert len({e.host_port for e in yaml_fleet.hosts.values()}) == 3
    assert len({e.container_name for e in yaml_fleet.hosts.values()}) == 3


def test_servedeck_groups_must_name_known_hosts(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  a: {ssh: {alias: a}, workdir: /w}\ngroups:\n  lab: [a, b]\n")
    with pytest.raises(ServedeckError, match="unknown host"):
        load_fleet(path)


def test_host_overrides_container_name_and_published_port():
    entry = HostEntry.model_validate({"ssh": {"alias": "x"}, "workdir": "/w", "host_port": 9941,
                                      "container_name": "sd-fleet-1"})
    assert entry.port == 9941
    profile = ProfileStore(ROOT / "profiles").load("batch-8192").profile
    placed = entry.place(profile)
    assert placed.container.container_name == "sd-fleet-1" and placed.container.host_port == 9941
    assert profile.container.container_name == "b70"  # the loaded profile is not changed
    with pytest.raises(ValueError, match="differ"):
        HostEntry.model_validate({"ssh": {"alias": "x"}, "workdir": "/w", "host_port": 9941, "port": 9932})


@pytest.mark.parametrize("value,expected", [(None, "100%"), ("1", "1"), (2, "2"), ("50%", "50%")])
def test_serial(value, expected):
    assert parse_serial(value) == expected


@pytest.mark.parametrize("value", ["0", "0%", "-1", "abc", "150%"])
def test_bad_serial(value):
    with pytest.raises(ServedeckError, match="serial"):
        parse_serial(value)


def test_max_fail():
    assert parse_max_fail(None) == 0 and parse_max_fail("34%") == 34
    with pytest.raises(ServedeckError):
        parse_max_fail("101")


def test_parse_vary_types_and_errors():
    v = parse_vary(["engine.max_num_batched_tokens=4096,8192", "engine.gpu_memory_utilization=0.90,0.94"])
    assert v == {"engine.max_num_batched_tokens": [4096, 8192], "engine.gpu_memory_utilization": [0.9, 0.94]}
    for bad in (["engine.x=1"], ["engine.x"], ["engine.x=1,1"], ["a=1,2", "a=3,4"], []):
        with pytest.raises(ServedeckError):
            parse_vary(bad)


def test_schedule_is_longest_processing_time_list_scheduling():
    # a host twice as fast takes twice as many experiments
    out = schedule([f"e{i}" for i in range(6)], {"fast": 10.0, "slow": 20.0})
    assert len(out["fast"]) == 4 and len(out["slow"]) == 2
    out = schedule(["e1", "e2", "e3"], {"a": 5.0, "b": 5.0, "c": 5.0})
    assert sorted(len(v) for v in out.values()) == [1, 1, 1]


@pytest.fixture
def project(catalog_project) -> Project:
    return Project(catalog_project)


def _run(project: Project, seq: int, host: str, ready_s: float, bench_s: float | None) -> None:
    """A ready run of ``host`` (sequence ``seq``) written through the run store, benchmarked for
    ``bench_s`` seconds when given."""
    from servedeck.runs.store import create_run, write_bench_files
    run = create_run(project.runs_dir, "base", host)
    assert run.sequence == seq
    run.finish("ready", timings_s={"deploy_total_s": ready_s})
    if bench_s is not None:
        write_bench_files(run.path, {"prompt_tokens": 64}, [], {
            "workload": {"prompt_tokens": 64}, "started_at": "2026-11-30T10:00:00Z",
            "finished_at": f"2026-11-30T10:00:{bench_s:02.0f}Z"})


def test_sweep_plan_two_variables_two_values(project):
    fleet = load_fleet(ROOT / "deploy" / "test-fleet" / "hosts.yaml")
    plan = plan_sweep(project, fleet, "pair", "batch-8192",
                      ["engine.max_num_batched_tokens=4096,8192", "engine.gpu_memory_utilization=0.90,0.94"])
    assert [e.variable for e in plan.experiments] == ["engine.max_num_batched_tokens",
                                                      "engine.gpu_memory_utilization"]
    a = {e.profile_a for e in plan.experiments}
    assert len(a) == 1  # one baseline arm
    store = ProfileStore(project.profiles_dir)
    base_arm = store.load(a.pop()).profile
    assert base_arm.engine.max_num_batched_tokens == 4096 and base_arm.engine.gpu_memory_utilization == 0.9
    for e in plan.experiments:
        b = store.load(e.profile_b).profile
        assert getattr(b.engine, e.variable.split(".")[1]) == e.value_b
    # one experiment per host, in parallel
    assert sorted(len(v) for v in plan.assignments.values()) == [1, 1]
    assert (plan.directory / "plan.json").exists()


def test_sweep_resume_skips_finished_experiments(project):
    fleet = load_fleet(ROOT / "deploy" / "test-fleet" / "hosts.yaml")
    args = (project, fleet, "pair", "batch-8192", ["engine.max_num_batched_tokens=4096,8192"])
    plan = plan_sweep(*args, reps=3)
    assert len(plan.experiments) == 3 and not plan.done
    first = plan.experiments[0].id
    plan.result_path(first).parent.mkdir(parents=True, exist_ok=True)
    plan.result_path(first).write_text("{}")
    again = plan_sweep(*args, reps=3)
    assert again.name == plan.name and again.done == [first]
    assert first not in sum(again.assignments.values(), [])
    with pytest.raises(ServedeckError, match="exists with another"):
        plan_sweep(*args, reps=2, name=plan.name)


def test_estimate_uses_each_hosts_run_records(project):
    _run(project, 1, "fleet-1", 10.0, 20.0)
    _run(project, 2, "fleet-1", 12.0, 22.0)
    _run(project, 3, "fleet-2", 30.0, None)
    est = estimate_hosts(project.runs_dir, ["fleet-1", "fleet-2", "fleet-3"])
    assert est["fleet-1"] == HostEstimate(11.0, 21.0, "runs")
    assert est["fleet-2"].ready_s == 30.0 and est["fleet-2"].bench_s == 21.0  # bench: fleet median
    assert est["fleet-3"].source == "fleet"
    assert est["fleet-1"].experiment_s(bench=True) > est["fleet-1"].experiment_s(bench=False)


@pytest.mark.parametrize("name", sorted(PLAYBOOKS))
def test_shipped_playbooks_pass_ansible_syntax_check(name, tmp_path):
    inv = tmp_path / "inv.ini"
    inv.write_text("[lab]\nh1\n")
    proc = subprocess.run(["ansible-playbook", "--syntax-check", "-i", str(inv),
                           str(ANSIBLE_DIR / PLAYBOOKS[name])], capture_output=True, text=True,
                          env={**__import__("os").environ, "ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles")})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cli_boundary_command_runs_servedeck():
    argv = servedeck_command("--list")
    assert argv[0] == sys.executable
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    for task in ("deploy", "hosts", "sweep", "bench", "ab", "rollback"):
        assert f"  {task}" in out


def test_estimate_takes_command_cost_from_the_hosts_rollouts(project):
    _run(project, 1, "fleet-1", 10.0, None)
    summary = project.runs_dir / "rollouts" / "20261130T100000Z-base" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"hosts": [
        {"host": "fleet-1", "outcome": "ready", "run_id": "0001-base-fleet-1", "duration_s": 14.5},
        {"host": "fleet-2", "outcome": "untouched", "run_id": None, "duration_s": None}]}))
    est = estimate_hosts(project.runs_dir, ["fleet-1", "fleet-2"])
    assert est["fleet-1"].command_s == 4.5
    assert est["fleet-2"].command_s == 4.5  # the fleet's measurement
    assert est["fleet-1"].experiment_s(bench=False) == 2 * (10.0 + 4.5) + AB_COMMAND_S + EXPERIMENT_OVERHEAD_S


def test_estimate_takes_bench_ab_and_ansible_steps_from_earlier_sweeps(project):
    """Ansible's task times of an earlier sweep (ansible-runner job events) replace the
    defaults for the bench command's cost, the ab command and Ansible's own steps."""
    _run(project, 1, "fleet-1", 10.0, 2.0)
    events = (project.runs_dir / "sweeps" / "base-1234" / "ansible" / "20261130T100000Z" / "artifacts" / "x"
              / "job_events")
    events.mkdir(parents=True)
    steps = [("fleet-1", "e01-x-2-r1: start", 0.1), ("fleet-1", "e01-x-2-r1: deploy arm A (a)", 13.0),
             ("fleet-1", "e01-x-2-r1: bench arm A", 5.0), ("fleet-1", "e01-x-2-r1: bench arm B", 6.0),
             ("fleet-1", "e01-x-2-r1: A/B report", 7.0), ("fleet-1", "e01-x-2-r1: done", 1.7),
             ("fleet-2", "e02-y-3-r1: A/B report", 9.0)]
    for n, (host, task, took) in enumerate(steps):
        (events / f"{n}.json").write_text(json.dumps({"event": "runner_on_ok", "event_data": {
            "host": host, "task": task, "duration": took}}))
    est = estimate_hosts(project.runs_dir, ["fleet-1", "fleet-2", "fleet-3"])
    assert est["fleet-1"].bench_command_s == 5.5 - 2.0  # bench step median minus the bench itself
    assert est["fleet-1"].ab_s == 7.0 and est["fleet-2"].ab_s == 9.0
    assert est["fleet-1"].experiment_overhead_s == 1.8  # start + done
    assert est["fleet-3"].ab_s == 8.0  # no sweep there yet: the fleet's median
    assert est["fleet-1"].experiment_s(bench=True) == 2 * (10.0 + CLI_OVERHEAD_S + 2.0 + 3.5) + 7.0 + 1.8


def test_sweep_summary_cells_read_the_same_for_every_ratio_and_token_count():
    """A warm decode ratio of exactly 1 reads ``1.000`` (not ``1``: CI saw a row with a
    ratio cell that no longer looked like a number of the same kind as its neighbours), and KV
    cache token counts, which arrive as floats, read as whole numbers, not ``1.05e+06``."""
    from types import SimpleNamespace

    from servedeck.fleet.summary import render_table, sweep_table_from_rows
    base = {"variable": "engine.max_num_batched_tokens", "value_a": 4096, "value_b": 8192,
            "host": "fleet-1", "status": "done", "run_a": "0001-a", "run_b": "0002-b",
            "seconds": 18.2, "note": "no verdict"}
    rows = [dict(base, id="e01", kv_a=1048576.0, kv_b=1101004.0, decode_ratio=1.0),
            dict(base, id="e02", kv_a=None, kv_b=None, decode_ratio=0.9996),
            dict(base, id="e03", kv_a=None, kv_b=None, decode_ratio=None, status="pending")]
    text = render_table(sweep_table_from_rows(SimpleNamespace(name="s", base="sw-base"), rows), width=400)
    lines = {ln.split("│")[1].strip(): ln for ln in text.splitlines() if ln.startswith("│ e0")}
    assert "1,048,576 -> 1,101,004" in lines["e01"] and "e+" not in text
    assert "│ 1.000 " in lines["e01"] and "│ 1.000 " in lines["e02"]
    assert "│ -  " in lines["e03"]


def test_a_rollout_reads_each_hosts_outcome_and_run_from_its_deploy_json(tmp_path):
    """The role runs `deploy --json`: the rollout takes the run id and the final state from that
    document (stdout), never from the text meant for people (stderr)."""
    from servedeck.cli import deploy_document
    from servedeck.fleet.rollout import DEPLOY_TASK, HostOutcome, _outcome, deploy_output
    from servedeck.fleet.runner import PlaybookResult, TaskResult
    from servedeck.runs.store import create_run

    run = create_run(tmp_path, "new", "fleet-2")
    run.finish("rolled-back", "not ready after 10 s (timeout)", phase="timeout")
    failed = deploy_document("fleet-2", "new", run.path,
                             error=ServedeckError("deploy of new failed: not ready", hint="invoke logs"))
    assert failed["outcome"] == "rolled-back" and failed["run_id"] == run.run_id
    assert failed["error"] == {"message": "deploy of new failed: not ready", "hint": "invoke logs"}
    ok = deploy_document("fleet-1", "new", tmp_path / "0001-new-fleet-1", outcome="ready", revision=3)
    played = PlaybookResult(rc=2, status="failed", tasks=[
        TaskResult("fleet-1", f"{DEPLOY_TASK} new", "ok", 14.5, {"stdout": json.dumps(ok) + "\n", "stderr": ""}),
        TaskResult("fleet-2", f"{DEPLOY_TASK} new", "failed", 12.0,
                   {"stdout": json.dumps(failed),
                    "stderr": "  preflight ...\nerror: deploy of new failed: not ready"})])
    assert _outcome("fleet-1", played) == HostOutcome("fleet-1", "ready", "0001-new-fleet-1", 14.5)
    two = _outcome("fleet-2", played)
    assert (two.outcome, two.run_id, two.message) == ("rolled-back", run.run_id, "deploy of new failed: not ready")
    assert _outcome("fleet-3", played).outcome == "untouched"
    assert deploy_output({"stdout": "Traceback (most recent call last):\n"}) is None


# ------------------------------------------------------------------ the failure budget, played


def _play_rollout(tmp_path, failing: set[str], serial: str, max_fail: int) -> list[str]:
    """Run the shipped rollout.yml through ansible-runner over 3 inventory hosts whose
    "servedeck deploy" is a shell line failing for ``failing``; return the hosts deployed."""
    from servedeck.fleet.runner import run_playbook
    inv = tmp_path / "inv.ini"
    inv.write_text("[lab]\nh1\nh2\nh3\n")
    log = tmp_path / "deployed.txt"
    script = f'echo "$3" >> {log}; case " {" ".join(sorted(failing))} " in *" $3 "*) exit 1;; esac'
    extravars = {"servedeck_cli": ["sh", "-c", script, "sh"], "servedeck_project": str(tmp_path),
                 "servedeck_hosts": "lab", "servedeck_profile": "p", "servedeck_serial": serial,
                 "servedeck_max_fail_percentage": max_fail, "servedeck_environment": {}}
    played = run_playbook("rollout", inventory=inv, extravars=extravars, private_dir=tmp_path / "pd",
                          forks=3)
    assert not played.interrupted
    return log.read_text().split() if log.exists() else []


@pytest.mark.parametrize("failing, serial, max_fail, deployed", [
    ({"h1"}, "1", 100, ["h1", "h2", "h3"]),   # the bug: Ansible ended the play after h1's batch
    ({"h1"}, "1", 0, ["h1"]),                 # any failure stops the rollout
    ({"h1"}, "1", 50, ["h1"]),                # 100 % of the one-host batch failed: more than 50
    ({"h2"}, "2", 50, ["h1", "h2", "h3"]),    # 50 % of the first batch failed: not more than 50
    ({"h1", "h2"}, "2", 50, ["h1", "h2"]),    # 100 %: the third host keeps its deployment
])
def test_max_fail_is_the_percent_of_a_batch_as_documented(tmp_path, failing, serial, max_fail, deployed):
    """docs/fleet.md: once MORE than --max-fail percent of a batch failed, no further batch
    starts; a batch at or under the budget lets the rollout go on."""
    assert sorted(_play_rollout(tmp_path, failing, serial, max_fail)) == deployed


def test_ansible_playbook_is_found_beside_the_interpreter_without_path(monkeypatch):
    import sys
    from pathlib import Path
    from servedeck.fleet.runner import ansible_playbook
    monkeypatch.setenv("PATH", "/nonexistent")
    assert ansible_playbook() == str(Path(sys.executable).parent / "ansible-playbook")
