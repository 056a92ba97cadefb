"""Rolling deploy of one profile to a group of hosts (``invoke deploy --hosts GROUP``).

Ansible does the fleet work (``rollout.yml``: ``serial`` batches, ``max_fail_percentage``,
forks = hosts in a batch); each host runs servedeck's own per-host deploy, which keeps the
host's old deployment until the new one is pulled and checked and rolls the host back when the
new one does not become ready. Once more than ``max_fail`` percent of a batch failed, Ansible
starts no further batch: those hosts keep their old deployment (outcome ``untouched``).

Failure policy for the hosts of the rollout that did get the new deployment:

* ``keep``: they keep serving it (the default);
* ``rollback``: when any host failed, they are rolled back to their previous deployment
  (``rollback.yml``), so the fleet serves one profile again.

State of each rollout: ``runs/rollouts/<UTC time>-<profile>/`` (inventories handed to Ansible,
ansible-runner's artifacts, ``summary.json``). Every host's deploy has its own run record.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from servedeck.errors import ServedeckError
from servedeck.fleet.command import servedeck_command
from servedeck.fleet.inventory import Fleet
from servedeck.fleet.runner import PlaybookResult, ProgressFn, run_playbook
from servedeck.fsutil import atomic_write
from servedeck.model.project import Project

POLICIES = ("keep", "rollback")
DEPLOY_TASK = "servedeck deploy"      # task names in ansible/roles/servedeck/tasks/
ROLLBACK_TASK = "servedeck rollback"
SERIAL_RE = re.compile(r"^(?:[1-9]\d*|(?:100|[1-9]?\d)%)$")


@dataclass
class HostOutcome:
    """One host's line of the rollout summary.

    Attributes:
        host: inventory name.
        outcome: ``ready`` (serves the new profile), ``rolled-back`` (its deploy failed, the
            previous deployment serves again), ``failed`` (its deploy failed and nothing
            serves, or it failed before changing anything), ``untouched`` (not reached: the
            rollout stopped), ``rolled-back (policy)`` (deployed, then rolled back by the
            ``rollback`` policy), ``rollback failed``.
        run_id: the host's run record of this rollout (None when no run was recorded).
        duration_s: the host's deploy wall time, seconds.
        message: the deploy's error (first line) for failed hosts.
    """

    host: str
    outcome: str
    run_id: str | None = None
    duration_s: float | None = None
    message: str = ""


@dataclass
class RolloutResult:
    """The rollout's outcome: ``hosts`` in inventory order, ``ok`` when every host is ready."""

    profile: str
    pattern: str
    serial: str
    max_fail_percentage: int
    policy: str
    hosts: list[HostOutcome] = field(default_factory=list)
    state_dir: Path | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(h.outcome == "ready" for h in self.hosts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state_dir"] = str(self.state_dir) if self.state_dir else None
        d["ok"] = self.ok
        return d


def parse_serial(serial: str | int | None) -> str:
    """``--serial``: a host count (``1``) or a percentage of the hosts (``50%``); None = all.

    Raises:
        ServedeckError: anything else.
    """
    if serial is None or serial == "":
        return "100%"
    text = str(serial).strip()
    if not SERIAL_RE.match(text) or text == "0%":
        raise ServedeckError(f"--serial {serial!r} is not a host count or a percentage",
                             field="serial", hint="e.g. --serial 1 or --serial 50%")
    return text


def parse_max_fail(value: str | int | None) -> int:
    """``--max-fail``: percent of a batch that may fail before the rollout stops (0-100)."""
    if value is None or value == "":
        return 0
    try:
        pct = int(str(value).strip().rstrip("%"))
    except ValueError:
        pct = -1
    if not 0 <= pct <= 100:
        raise ServedeckError(f"--max-fail {value!r} is not a percentage 0-100", field="max_fail")
    return pct


def role_vars(project: Project, servedeck_inventory: Path, *, image: str | None = None,
              timeout_s: float | None = None, rollback: bool = True) -> dict[str, Any]:
    """The ``servedeck`` role's variables for servedeck's own playbooks."""
    env = {"SERVEDECK_PROJECT": str(project.root), "SERVEDECK_RUNS_DIR": str(project.runs_dir)}
    return {"servedeck_cli": servedeck_command(), "servedeck_project": str(project.root),
            "servedeck_inventory": str(servedeck_inventory), "servedeck_image": image or "",
            "servedeck_rollback": rollback, "servedeck_ready_timeout_s": float(timeout_s or 0),
            "servedeck_environment": env}


def deploy_output(res: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON document a host's ``deploy --json`` printed (``servedeck.cli.deploy_document``:
    ``outcome``, ``run_id``, ..., ``error``), from its task result's ``stdout``; None when the
    command printed none (it did not start, or died)."""
    for line in reversed((res.get("stdout") or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


def _error_line(res: dict[str, Any]) -> str:
    text = (res.get("stderr") or res.get("msg") or "").strip()
    for line in text.splitlines():
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    return text.splitlines()[-1] if text else ""


def state_dir_for(project: Project, kind: str, label: str) -> Path:
    """A fresh state directory ``runs/<kind>/<UTC time>-<label>/``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = project.runs_dir / kind / f"{stamp}-{label}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def rollout(project: Project, fleet: Fleet, pattern: str, profile: str, *,
            serial: str | int | None = None, max_fail: str | int | None = None,
            policy: str = "keep", image: str | None = None, timeout_s: float | None = None,
            progress: ProgressFn | None = None) -> RolloutResult:
    """Deploy ``profile`` to the hosts matching ``pattern``, batch by batch, through Ansible.

    Args:
        project: the servedeck project (profiles/, runs/).
        fleet: the inventory (:func:`servedeck.fleet.inventory.load_fleet`).
        pattern: Ansible host pattern (a group, a host, ``lab:!b70-3``, ...).
        profile: profile name.
        serial: batch size, see :func:`parse_serial`; max_fail: see :func:`parse_max_fail`.
        policy: ``keep`` or ``rollback`` (module docstring).
        image: digest-pinned image overriding the profile's (as ``invoke deploy --image``).
        timeout_s: readiness timeout per host (default: each host's own).
        progress: per-host progress callback.

    Returns:
        :class:`RolloutResult` (``ok`` False when any host is not ready).

    Raises:
        ServedeckError: bad options, unknown profile or hosts, Ansible not runnable.
    """
    if policy not in POLICIES:
        raise ServedeckError(f"unknown failure policy {policy!r}", field="on_failure",
                             hint=f"one of {', '.join(POLICIES)}")
    serial_s, max_fail_pct = parse_serial(serial), parse_max_fail(max_fail)
    from servedeck.model.profile import ProfileStore
    ProfileStore(project.profiles_dir).load(profile)  # a bad profile fails here, nothing started
    hosts = fleet.select(pattern)
    state = state_dir_for(project, "rollouts", profile)
    ansible_inv = fleet.write_ansible_inventory(state)
    servedeck_inv = fleet.write_servedeck_inventory(state)
    t0 = time.monotonic()
    extravars = {**role_vars(project, servedeck_inv, image=image, timeout_s=timeout_s),
                 "servedeck_hosts": ",".join(hosts), "servedeck_profile": profile,
                 "servedeck_serial": serial_s, "servedeck_max_fail_percentage": max_fail_pct}
    played = run_playbook("rollout", inventory=ansible_inv, extravars=extravars,
                          private_dir=state / "ansible", forks=len(hosts), progress=progress)
    result = RolloutResult(profile=profile, pattern=pattern, serial=serial_s,
                           max_fail_percentage=max_fail_pct, policy=policy, state_dir=state)
    for host in hosts:
        result.hosts.append(_outcome(host, played))
    if policy == "rollback" and not result.ok:
        deployed = [h for h in result.hosts if h.outcome == "ready"]
        if deployed:
            back = run_playbook("rollback", inventory=ansible_inv,
                                extravars={**extravars, "servedeck_hosts": ",".join(h.host for h in deployed)},
                                private_dir=state / "ansible-rollback", forks=len(deployed),
                                progress=progress)
            for h in deployed:
                done = back.for_host(h.host, ROLLBACK_TASK)
                ok = bool(done) and all(t.status == "ok" for t in done)
                h.outcome = "rolled-back (policy)" if ok else "rollback failed"
                if not ok and done:
                    h.message = _error_line(done[-1].res)
    result.duration_s = round(time.monotonic() - t0, 3)
    atomic_write(state / "summary.json", json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _outcome(host: str, played: PlaybookResult) -> HostOutcome:
    """A host's outcome from its deploy task: its status, and the run id and final state its
    ``deploy --json`` printed."""
    tasks = played.for_host(host, DEPLOY_TASK)
    if not tasks:
        return HostOutcome(host, "untouched", None)
    last = tasks[-1]
    doc = deploy_output(last.res) or {}
    run_id = doc.get("run_id")
    if last.status == "ok":
        return HostOutcome(host, "ready", run_id, last.duration_s)
    outcome = "rolled-back" if doc.get("outcome") == "rolled-back" else "failed"
    return HostOutcome(host, outcome, run_id, last.duration_s, _error_line(last.res))


def console_progress(print_fn: Callable[[str], None]) -> ProgressFn:
    """A progress callback printing one line per host and task (start, end with duration)."""
    def progress(host: str, task: str, phase: str, result) -> None:
        if phase == "start":
            print_fn(f"{host:>12}  started  {task}")
        else:
            took = f" ({result.duration_s:.1f} s)" if result and result.duration_s is not None else ""
            note = ""
            if phase == "failed" and result is not None:
                note = f": {_error_line(result.res)}"
            print_fn(f"{host:>12}  {phase:8} {task}{took}{note}")
    return progress
