"""Rolling deploys and sweeps over the loopback fleet, through Ansible and servedeck's CLI.

The fleet (``scripts/test-services up``, ``deploy/test-fleet/``): three SSH hosts (sshd on
127.0.0.1:2231-2233) that are all this machine, each with its own working directory,
container name and server port on the one Docker engine. The served image is the vLLM
**stand-in** (``deploy/images/standin``: replays a real vLLM startup log, serves /health,
/v1/models, /metrics, /tokenize and paced stand-in completions), so the sweep test runs
servedeck's real bench (a tiny workload) and its A/B reports compare real samples; the resume
test runs with ``--no-bench`` (the real vLLM server is exercised by tests/e2e).

Everything goes through the user's command line: ``invoke deploy --hosts``, ``invoke sweep``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devtools import imagebuild
from servedeck.fleet.inventory import load_fleet
from servedeck.host.remote import RemoteHost
from servedeck.runs import store

ROOT = Path(__file__).resolve().parents[2]
FLEET_DIR = ROOT / "deploy" / "test-fleet"
HOSTS = ["fleet-1", "fleet-2", "fleet-3"]
STANDIN_ENV = {"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "HF_HOME": "/root/.cache/huggingface",
               "HUGGINGFACE_HUB_CACHE": "/root/.cache/huggingface/hub"}


@pytest.fixture(scope="module")
def standin(test_services) -> str:
    return imagebuild.build_standin_image(progress=False)


@pytest.fixture(scope="module")
def fleet(test_services):
    """The loopback fleet's hosts (RemoteHost per name); each host's deployment, compose files,
    history and lock are removed before and after the module."""
    fl = load_fleet(FLEET_DIR / "hosts.yaml")
    hosts = {name: RemoteHost(name, e.ssh, e.workdir) for name, e in fl.hosts.items()}

    def clean():
        for host in hosts.values():
            host.run_script(
                'cd "$1" || exit 0; for f in docker-compose.yml docker-compose.yml.prev '
                'docker-compose.yml.failed; do [ -e "$f" ] && docker compose -f "$f" down '
                '--remove-orphans -t 1; done; rm -rf docker-compose.yml* .servedeck*; true',
                [host.workdir], check=False)
    clean()
    yield hosts
    clean()


@pytest.fixture
def project(catalog_project) -> Path:
    return catalog_project


def _profile(project: Path, name: str, *, startup_s: float = 2.0, served: str | None = None) -> str:
    env = {**STANDIN_ENV, "STANDIN_STARTUP_S": str(startup_s)}
    # max_model_len 2048: what the stand-in's replayed vLLM log reports (the deploy verifies it)
    lines = ["extends: batch-8192", "engine:", "  max_model_len: 2048"]
    if served:
        lines += ["model:", f"  served_model_name: {served}"]
    lines += ["container:", "  environment:"] + [f'    {k}: "{v}"' for k, v in env.items()]
    (project / "profiles" / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return name


def _cli(project: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "SERVEDECK_PROJECT": str(project)}
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _served(port: int) -> list[str] | None:
    try:
        return [m["id"] for m in httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"]]
    except httpx.HTTPError:
        return None


def _runs(project: Path) -> list[dict]:
    out = []
    for path in sorted((project / "runs").glob("[0-9]*-*")):
        out.append(json.loads((path / "run.json").read_text()))
    return out


def _ts(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _history(host: RemoteHost) -> list[dict]:
    """The host's deploys that served, oldest first (each revision also writes a "started" line)."""
    from servedeck.host.history import history_records
    return [h for h in history_records(host.read_file(host.history_path, missing_ok=True))
            if h.get("event") == "deploy" and h.get("outcome") == "ready"]


PORTS = {"fleet-1": 9941, "fleet-2": 9942, "fleet-3": 9943}


# ------------------------------------------------------------------------------ rollouts


def test_rollout_all_at_once_then_one_by_one(project, fleet, standin):
    name = _profile(project, "fleet-a", served="fleet-a")
    proc = _cli(project, "deploy", "--hosts", "lab", "--profile", name, "--image", standin,
                "--inventory", str(FLEET_DIR / "hosts.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = _runs(project)
    assert sorted(r["host"] for r in runs) == HOSTS
    assert all(r["outcome"] == "ready" and r["profile"] == name for r in runs)
    for host in HOSTS:  # each host serves the new profile on its own port and container
        assert _served(PORTS[host]) == ["fleet-a"]
        assert host in proc.stdout and "ready" in proc.stdout
    # one batch: the three deploys ran side by side (each started before the others were ready)
    starts = sorted(_ts(r["started_at"]) for r in runs)
    readies = sorted(_ts(r["ready_at"]) for r in runs)
    assert starts[-1] < readies[0]

    # --serial 1 (through the same fleet as an Ansible INI inventory): one host after another
    name_b = _profile(project, "fleet-b", served="fleet-b")
    proc = _cli(project, "deploy", "--hosts", "lab", "--profile", name_b, "--image", standin,
                "--inventory", str(FLEET_DIR / "hosts.ini"), "--serial", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    new = [r for r in _runs(project) if r["profile"] == name_b]
    assert [r["host"] for r in sorted(new, key=lambda r: r["sequence"])] == HOSTS
    for earlier, later in zip(new, new[1:]):
        assert _ts(later["started_at"]) >= _ts(earlier["ready_at"])
    assert all(_served(PORTS[h]) == ["fleet-b"] for h in HOSTS)
    for host in fleet.values():  # the host's own history records both deployments
        assert [h["profile"] for h in _history(host)][-2:] == [name, name_b]


@pytest.mark.parametrize("policy", ["keep", "rollback"])
def test_rollout_stops_when_the_second_host_fails(project, fleet, standin, tmp_path, policy):
    old = _profile(project, "fleet-old", served="fleet-old", startup_s=1)
    # fleet-2 is "slow": its readiness timeout (10 s) is shorter than the new profile's start
    # (16 s: a stand-in never serves before its STANDIN_STARTUP_S, however loaded the machine),
    # so its deploy fails there and servedeck rolls it back to the old deployment
    inv = tmp_path / "hosts.yaml"
    inv.write_text((FLEET_DIR / "hosts.yaml").read_text().replace(
        "workdir: /srv/servedeck-test/fleet-2\n    render_gid: \"992\"\n    container_name: sd-fleet-2\n"
        "    host_port: 9942\n    ready_timeout_s: 300",
        "workdir: /srv/servedeck-test/fleet-2\n    render_gid: \"992\"\n    container_name: sd-fleet-2\n"
        "    host_port: 9942\n    ready_timeout_s: 10"))
    assert "ready_timeout_s: 10" in inv.read_text()
    proc = _cli(project, "deploy", "--hosts", "lab", "--profile", old, "--image", standin,
                "--inventory", str(FLEET_DIR / "hosts.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before3 = fleet["fleet-3"].read_file("docker-compose.yml")
    runs_before = len(_runs(project))

    new = _profile(project, "fleet-new", served="fleet-new", startup_s=16)
    proc = _cli(project, "deploy", "--hosts", "lab", "--profile", new, "--image", standin,
                "--inventory", str(inv), "--serial", "1", "--on-failure", policy)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "rollout of fleet-new incomplete: fleet-" in proc.stderr
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("│") and "fleet-" in line}
    new_runs = {r["host"]: r for r in _runs(project)[runs_before:]}
    # host 1: deployed; kept (policy keep) or rolled back to the old one (policy rollback)
    assert new_runs["fleet-1"]["outcome"] == "ready"
    if policy == "keep":
        assert "ready" in rows["fleet-1"] and _served(PORTS["fleet-1"]) == ["fleet-new"]
    else:
        assert "rolled-back (policy)" in rows["fleet-1"] and _served(PORTS["fleet-1"]) == ["fleet-old"]
    # host 2: its deploy failed and servedeck rolled it back; the old profile serves again
    assert new_runs["fleet-2"]["outcome"] == "rolled-back"
    assert "rolled-back" in rows["fleet-2"] and new_runs["fleet-2"]["run_id"] in rows["fleet-2"]
    assert _served(PORTS["fleet-2"]) == ["fleet-old"]
    # host 3: never touched (no run, same compose file, old profile serving)
    assert "fleet-3" not in new_runs and "untouched" in rows["fleet-3"]
    assert fleet["fleet-3"].read_file("docker-compose.yml") == before3
    assert _served(PORTS["fleet-3"]) == ["fleet-old"]
    assert all(fleet[h].read_lock() is None for h in HOSTS)


# ------------------------------------------------------------------------------ sweeps


#: the sweep test's bench: few requests, short prompts (the stand-in answers in milliseconds)
TINY_BENCH = ["--prompt-tokens", "64", "--max-tokens", "16", "--repetitions", "2"]


def _sweep_args(base: str, standin: str, *vary: str, hosts: str = "pair", reps: int = 1,
                bench: bool = False) -> list[str]:
    args = ["sweep", "--base", base, "--hosts", hosts, "--image", standin,
            *(TINY_BENCH if bench else ["--no-bench"]),
            "--inventory", str(FLEET_DIR / "hosts.yaml"), "--reps", str(reps)]
    for v in vary:
        args += ["--vary", v]
    return args


def test_sweep_two_variables_two_values_on_two_hosts(project, fleet, standin):
    """Each experiment is deploy, wait, bench, record per arm on one host, then the A/B report
    from the benchmark's samples."""
    base = _profile(project, "sw-base")
    vary = ("engine.max_num_batched_tokens=4096,8192", "engine.gpu_memory_utilization=0.90,0.94")
    proc = _cli(project, *_sweep_args(base, standin, *vary, bench=True))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweeps = list((project / "runs" / "sweeps").iterdir())
    assert len(sweeps) == 1
    sweep = sweeps[0]
    results = [json.loads(p.read_text()) for p in sorted((sweep / "results").glob("*.json"))]
    assert len(results) == 2
    runs = {r["run_id"]: r for r in _runs(project)}
    hosts_used = set()
    for res in results:
        a, b = runs[res["run_a"]], runs[res["run_b"]]
        assert a["host"] == b["host"] == res["host"]  # both arms on the same box
        assert a["outcome"] == b["outcome"] == "ready"
        hosts_used.add(res["host"])
        for run_id in (res["run_a"], res["run_b"]):  # each arm was benchmarked: real samples
            warm = store.read(project / "runs" / run_id, store.BENCH_SUMMARY).phases["warm"]
            assert warm["prompt_tokens"].samples == [64, 64]
            assert warm["output_tokens"].samples == [16, 16]
            assert len(warm["decode_tok_s"].samples) == 2 and warm["decode_tok_s"].min > 0
        report = Path(res["report"]).read_text()
        assert res["run_a"] in report and res["run_b"] in report
        assert "decode_tok_s" in report  # the A/B compares the benchmarks, not only startup facts
    assert hosts_used == {"fleet-1", "fleet-2"}  # the two experiments ran on both hosts
    mnbt = next(r for r in results if "max_num_batched_tokens" in r["id"])
    assert "max_num_batched_tokens" in Path(mnbt["report"]).read_text()
    summary = (sweep / "summary.md").read_text()
    assert "e01-max_num_batched_tokens-8192-r1" in summary
    rows = [ln for ln in summary.splitlines() if ln.startswith("│ e0")]
    assert len(rows) == 2 and all("done" in ln for ln in rows)
    assert all(re.search(r"│\s*\d\.\d+\s*│", ln) for ln in rows), rows  # warm decode B/A ratio
    assert (sweep / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "e01-max_num_batched_tokens-8192-r1" in proc.stdout and "done" in proc.stdout
    # --plan now reports everything done and runs nothing
    n_runs = len(_runs(project))
    proc = _cli(project, *_sweep_args(base, standin, *vary, bench=True), "--plan")
    assert proc.returncode == 0 and "2 done" in proc.stdout
    assert len(_runs(project)) == n_runs


def test_interrupted_sweep_resumes_without_rerunning_finished_experiments(project, fleet, standin):
    base = _profile(project, "sw-resume", startup_s=3)
    args = _sweep_args(base, standin, "engine.max_num_batched_tokens=4096,8192", reps=3)
    env = {**os.environ, "SERVEDECK_PROJECT": str(project)}
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results_dir = None
    deadline = time.time() + 600
    try:
        while time.time() < deadline:  # interrupt once the first experiment has finished
            found = list((project / "runs" / "sweeps").glob("*/results/*.json"))
            if found:
                results_dir = found[0].parent
                break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.5)
        assert results_dir is not None, "no experiment finished in time"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out
    finished = {p.name: p.read_bytes() for p in results_dir.glob("*.json")}
    assert 1 <= len(finished) < 3, out
    assert "interrupted" in out
    runs_before = len(_runs(project))
    assert all(fleet[h].read_lock() is None for h in ("fleet-1", "fleet-2")), out

    proc = _cli(project, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(finished)} done" in proc.stdout
    after = {p.name: p.read_bytes() for p in results_dir.glob("*.json")}
    assert len(after) == 3
    for name, data in finished.items():  # finished experiments were not run again
        assert after[name] == data
    # only the remaining experiments deployed: two arms each
    assert len(_runs(project)) - runs_before == 2 * (3 - len(finished))
