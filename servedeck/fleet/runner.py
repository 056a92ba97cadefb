"""Run the playbooks shipped in ``servedeck/fleet/ansible/`` with ansible-runner.

The playbooks and the ``servedeck`` role are package data (this directory's ``ansible/``);
ansible-runner (``ansible_runner.run``, 2.4) starts ``ansible-playbook`` with a private data
directory (its artifacts: event JSON, stdout, the exit status) and hands every event to
:func:`run_playbook`'s handler. Event names and fields are ansible-runner's
(``runner_on_start``/``runner_on_ok``/``runner_on_failed``/``runner_on_skipped``,
``event_data.host``/``task``/``res``/``duration``; ansible-runner docs, "Runner Artifact Job
Events").
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from servedeck.errors import ServedeckError

#: bookkeeping task actions left out of progress and results
_QUIET_ACTIONS = {"include_tasks", "include_role", "import_tasks", "set_fact"}
ANSIBLE_DIR = Path(__file__).resolve().parent / "ansible"
PLAYBOOKS = {"rollout": "rollout.yml", "rollback": "rollback.yml", "sweep": "sweep.yml"}
_DONE = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
         "runner_on_unreachable": "unreachable"}


@dataclass
class TaskResult:
    """One task's outcome on one host.

    Attributes:
        host: inventory host name; task: task name; status: ``ok``/``failed``/``skipped``/
        ``unreachable``; duration_s: task wall time (seconds); res: the module result
        (``stdout``, ``stderr``, ``rc``, ``msg``, ...); ignored: a failure the play ignored or
        rescued.
    """

    host: str
    task: str
    status: str
    duration_s: float | None
    res: dict[str, Any]
    ignored: bool = False


@dataclass
class PlaybookResult:
    """What a playbook run did.

    Attributes:
        rc: ``ansible-playbook``'s exit status; status: ansible-runner's (``successful``,
        ``failed``, ``canceled``, ``timeout``); tasks: per host and task, in completion order;
        artifacts: ansible-runner's artifact directory of the run.
    """

    rc: int
    status: str
    tasks: list[TaskResult] = field(default_factory=list)
    artifacts: Path | None = None
    interrupted: bool = False

    def for_host(self, host: str, task_prefix: str = "") -> list[TaskResult]:
        """The results of ``host`` whose task name starts with ``task_prefix``."""
        return [t for t in self.tasks if t.host == host and t.task.startswith(task_prefix)]


#: seconds the commands of an interrupted playbook get to stop cleanly (servedeck's deploy
#: releases the host lock and records "interrupted" on SIGTERM) before everything is killed
STOP_GRACE_S = 30.0


class _Stop:
    """SIGINT/SIGTERM during a playbook: SIGTERM to ansible-playbook's process group (its
    workers and the servedeck commands they run), then ansible-runner's cancel (SIGKILL to
    that group) after :data:`STOP_GRACE_S` or once the group is gone."""

    def __init__(self) -> None:
        self.requested_at: float | None = None
        self.pgid: int | None = None
        self.old: dict[int, Any] = {}

    def __enter__(self) -> "_Stop":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, self._request)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, handler)

    def _request(self, signum: int, frame: Any) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()
            if self.pgid is not None:
                try:
                    os.killpg(self.pgid, signal.SIGTERM)
                except OSError:
                    pass

    def saw_pid(self, pid: Any) -> None:
        if self.pgid is None and isinstance(pid, int):
            try:
                self.pgid = os.getpgid(pid)
            except OSError:
                pass

    def cancel(self) -> bool:
        if self.requested_at is None:
            return False
        if self.pgid is None:
            return True
        try:
            os.killpg(self.pgid, 0)
        except OSError:
            return True
        return time.monotonic() - self.requested_at > STOP_GRACE_S


ProgressFn = Callable[[str, str, str, TaskResult | None], None]
"""``progress(host, task, phase, result)``: phase ``start`` (result None) or the status."""


def ansible_playbook() -> str:
    """The ``ansible-playbook`` to run: the one installed beside the running interpreter (the
    same virtualenv's ``bin``, which need not be on ``PATH`` when ``servedeck`` is started by
    its full path), else whatever ``PATH`` finds.

    Raises:
        ServedeckError: neither exists (with the command that installs it).
    """
    import shutil
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ansible-playbook")
    if found:
        return found
    raise ServedeckError(f"ansible-playbook is not installed beside {sys.executable} nor on PATH",
                         hint=f"{sys.executable} -m pip install 'servedeck[fleet]' (ansible-core)")


def run_playbook(name: str, *, inventory: Path, extravars: dict[str, Any], private_dir: Path,
                 forks: int, limit: str | None = None,
                 progress: ProgressFn | None = None) -> PlaybookResult:
    """Run one of the shipped playbooks (``rollout``, ``rollback``, ``sweep``).

    Args:
        name: key of :data:`PLAYBOOKS`.
        inventory: the Ansible inventory (file or directory).
        extravars: ``-e`` variables (the role's variables, ``servedeck_hosts``, ...); the
            controller's interpreter is added as ``ansible_python_interpreter`` (servedeck's
            commands run on the controller; interpreter discovery is not needed).
        private_dir: ansible-runner's private data directory (artifacts land below it).
        forks: parallel hosts (Ansible ``--forks``).
        limit: Ansible ``--limit`` pattern.
        progress: called on each task start and end (see :data:`ProgressFn`).

    Raises:
        ServedeckError: ansible-runner or ansible-playbook could not start.
    """
    import ansible_runner

    tasks: list[TaskResult] = []
    stop = _Stop()

    def on_event(event: dict[str, Any]) -> bool:
        stop.saw_pid(event.get("pid"))
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = str(data.get("host") or "")
        task = str(data.get("task") or "")
        if str(data.get("task_action") or "").rsplit(".", 1)[-1] in _QUIET_ACTIONS:
            return True
        if kind == "runner_on_start" and progress:
            progress(host, task, "start", None)
        elif kind in _DONE:
            res = data.get("res") or {}
            result = TaskResult(host=host, task=task, status=_DONE[kind],
                                duration_s=data.get("duration"), res=res,
                                ignored=bool(data.get("ignore_errors")) or bool(data.get("rescued")))
            tasks.append(result)
            if progress:
                progress(host, task, result.status, result)
        return True

    private_dir.mkdir(parents=True, exist_ok=True)
    vars_ = {"ansible_python_interpreter": sys.executable, **extravars}
    playbook_bin = ansible_playbook()
    envvars = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "1",
               "ANSIBLE_RETRY_FILES_SAVE_PATH": str(private_dir), "ANSIBLE_LOCALHOST_WARNING": "0",
               "ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles"),
               # ansible-runner starts `ansible-playbook` by name: the one found here comes first
               "PATH": os.pathsep.join([str(Path(playbook_bin).parent), os.environ.get("PATH", "")])}
    try:
        with stop:
            runner = ansible_runner.run(private_data_dir=str(private_dir),
                                        playbook=str(ANSIBLE_DIR / PLAYBOOKS[name]),
                                        inventory=str(inventory), extravars=vars_, forks=forks,
                                        limit=limit, envvars=envvars, quiet=True,
                                        event_handler=on_event, cancel_callback=stop.cancel)
    except Exception as exc:  # ansible-runner raises plain exceptions for a missing binary etc.
        raise ServedeckError(f"ansible-runner could not run the {name} playbook: {exc}",
                             hint="is ansible-core installed (pip install -e '.[fleet]')?") from exc
    interrupted = stop.requested_at is not None
    if runner.rc != 0 and not tasks and not interrupted:
        out = ""
        try:
            out = runner.stdout.read()[-1500:]
        except (OSError, AttributeError):
            pass
        raise ServedeckError(f"ansible-playbook ({name}) failed before running any task "
                             f"(exit {runner.rc}):\n{out}")
    artifacts = Path(runner.config.artifact_dir) if getattr(runner, "config", None) else None
    return PlaybookResult(rc=runner.rc, status=runner.status, tasks=tasks, artifacts=artifacts,
                          interrupted=interrupted)
