"""Deploy a profile to a card host: plan once, apply in short phases, record one final state.

Phases (each printed as it runs):

1. **render + check** locally (when the catalog knows the image digest; else after 3): errors
   stop here, nothing on the host is touched.
2. **preflight** in ONE SSH round trip: host facts, servedeck's history and known-good files,
   and the deploy **lock** taken atomically (a held lock refuses the deploy before any run
   record exists; a stale one is taken over only with ``force_unlock``).
3. **pull** the image by digest if missing (preflight inspected it), verify it, read its facts
   (an unknown digest is added to the catalog) → the :class:`~servedeck.deploy.plan.DeployPlan`, recorded.
4. **switch** in ONE round trip: the compose file (0600) is installed, the revision's
   ``started`` history line appended, ``docker compose up --force-recreate`` stops the old
   server and starts the new one (one GPU cannot hold both).
5. **wait** for readiness (:mod:`servedeck.deploy.readiness`).
6. on failure or interrupt after the switch, **roll back** to the last known-good deployment
   (never to a file that did not serve), unless ``no_rollback``.
7. **finish** in ONE round trip: final history line(s), the served file kept in ``good/``,
   pruning, lock release. The run record gets the same final outcome.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from servedeck.deploy.console import ConsoleReporter, QuietReporter, Reporter, Scrubbed
from servedeck.deploy.kv_power import (KvPowerPlan, apply_power, calibration, preflight_kv_power, preflight_reads,
                                       recheck_kv, record_kv, restore_power)
from servedeck.deploy.plan import (DeployOptions, DeployPlan, build_plan, judge_preflight, owner, preflight_paths,
                                   judge_in_image, published_port, render, render_and_check, resolve_image)
from servedeck.deploy.readiness import Readiness, wait_ready
from servedeck.deploy.secrets import Secrets, deployed_secrets
from servedeck.deploy.switch import SWITCH_DEADLINE_S, SwitchAbandoned, run_switch
from servedeck.deploy.record import (RunWriter, git_commit_soon, mark_abandoned, record_plan,
                                     record_startup, start_run)
from servedeck.errors import DeployError, ServedeckError
from servedeck.host import history as hist
from servedeck.host.docker import preload
from servedeck.host.lock import held_error, unwritable_error
from servedeck.host.remote import HostState, HostUnreachable, RemoteHost
from servedeck.model.inventory import HostEntry
from servedeck.model.profile import LoadedProfile
from servedeck.model.project import Project
from servedeck.runs import store
from servedeck.runs.store import RunRecord, utcnow

__all__ = ["deploy", "DeployOptions", "DeployResult", "Reporter", "ConsoleReporter",
           "QuietReporter", "UP_ARGS", "restore_revision"]

UP_ARGS = ["up", "-d", "--remove-orphans", "--force-recreate", "--pull", "never", "--no-build"]
"""``docker compose`` arguments that replace the running server with the installed file."""


@dataclass
class DeployResult:
    """What a deploy did.

    Attributes:
        outcome: ``ready`` | ``failed`` | ``rolled-back`` | ``interrupted``.
        run: the run record (None with ``record=False``).
        readiness: the wait outcome of the new deployment.
        rollback: the wait outcome of the rollback, if one ran.
        timings_s: pull_s, container_start_to_ready_s, up_to_ready_s, deploy_total_s,
            overhead_s (seconds).
        startup: parsed startup facts (dict) when the log was parsed.
        arg_checks: effective-args verification lines.
        compose_sha256: sha256 of the deployed compose text.
        revision: the host history revision of this deploy.
    """

    outcome: str
    run: RunRecord | None
    readiness: Readiness | None = None
    rollback: Readiness | None = None
    timings_s: dict[str, float | None] = field(default_factory=dict)
    startup: dict[str, Any] | None = None
    arg_checks: list[Any] = field(default_factory=list)
    compose_sha256: str | None = None
    revision: int | None = None


class _Background(threading.Thread):
    """Run ``fn(*args)`` in a thread; :meth:`result` joins and returns or re-raises."""

    def __init__(self, fn, *args) -> None:
        super().__init__(daemon=True, name="servedeck-preflight")
        self.fn, self.args = fn, args
        self.value: Any = None
        self.error: BaseException | None = None
        self.ended = threading.Event()
        self.start()

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self.error = exc
        finally:
            self.ended.set()

    def result(self) -> Any:
        self.ended.wait()
        if self.error is not None:
            raise self.error
        return self.value

    def settle(self) -> int:
        """Wait until the thread has ended, whatever interrupts arrive meanwhile; return how many
        arrived. (Not ``Thread.join``: in Python 3.11 an interrupted join returns at once and
        marks the thread ended, while the round trip it waits for still reaches the host.)"""
        interrupts = 0
        while not self.ended.is_set():
            try:
                self.ended.wait(0.25)
            except KeyboardInterrupt:
                interrupts += 1
        return interrupts


class _Interrupt:
    """Turn SIGTERM into KeyboardInterrupt while a deploy runs (main thread only)."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGTERM, self._handler)
        return self

    @staticmethod
    def _handler(signum, frame):
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False


# --------------------------------------------------------------------------- the deploy


def deploy(project: Project, host: RemoteHost, entry: HostEntry, loaded: LoadedProfile,
           options: DeployOptions | None = None, reporter: Reporter | None = None) -> DeployResult:
    """Deploy ``loaded`` to ``host`` (phases in the module docstring).

    Returns:
        :class:`DeployResult` with ``outcome == "ready"``.

    Raises:
        DeployError: check or preflight failure or a held lock (nothing changed, no run
            record), a pull/verification failure (nothing serving touched; run failed), a
            failed or interrupted deploy (after the rollback, whose outcome the message
            states). ServedeckError for SSH/host-key problems.
    """
    options = options or DeployOptions()
    holder: list[Any] = []  # the deploy, once it exists: its secrets scrub every text shown
    reporter = Scrubbed(reporter or Reporter(), lambda text: holder[0].run.secrets.scrub_text(text)
                        if holder else text)
    t0 = time.time()
    git_commit = git_commit_soon(project.profiles_dir) if options.record else (lambda: None)
    profile = entry.place(loaded.profile, options.image)  # the --image, the host's container_name / host_port
    interrupt = _Interrupt().__enter__()  # SIGTERM is an interrupt from here on, preflight included
    pre = _Background(_preflight_and_lock, host, entry, profile, options, reporter)
    checked = None
    try:  # the catalog, render + check locally while the preflight round trip runs
        reporter.phase("preflight", f"host {host.name} ({host.workdir})")  # as its round trip runs
        catalog = project.catalog()
        reporter.phase("render", f"profile {profile.name} -> docker-compose.yml")
        rendered = render(profile, catalog, project, entry.workdir)
        if catalog.lookup(profile.image_ref.digest) is not None:
            checked = render_and_check(profile, catalog, project, entry, reporter, rendered=rendered)
        history = calibration(project, host, profile)  # the recorded runs, read while the round trip runs
        facts, state = pre.result()
        # KV capacity and the power cap, judged before anything changes (a refusal gives the lock back)
        kvp = preflight_kv_power(project, host, entry, profile, rendered.service, reporter=reporter,
                                 history=history)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt) and not pre.ended.is_set():
            reporter.warn("interrupted: waiting for the preflight round trip to come back (it takes the "
                          "deploy lock on the host) before giving the lock back")
        try:
            pre.settle()
            if host.holds_lock:
                host.release_lock()  # the lock was taken and is given back: nothing changed
        except KeyboardInterrupt:
            interrupt.__exit__(None, None, None)
            raise DeployError("deploy interrupted twice before it changed anything: the deploy lock taken "
                              "by its preflight may be left on the host (a later command finds it stale)",
                              hint=f"invoke status --host {host.name}") from None
        except HostUnreachable as lost:
            interrupt.__exit__(None, None, None)
            if not isinstance(exc, KeyboardInterrupt):
                raise
            raise DeployError(f"deploy interrupted before it changed anything; giving the deploy lock back "
                              f"failed ({lost.message}): it stays until a command with --force-unlock "
                              "takes it over", hint=f"invoke status --host {host.name}") from None
        interrupt.__exit__(None, None, None)
        if isinstance(exc, KeyboardInterrupt):
            raise DeployError("deploy interrupted before it changed anything"
                              + ("; the deploy lock its preflight took was given back" if pre.error is None
                                 and pre.value is not None else "")) from None
        raise
    d = _Deploy(project, host, entry, options, reporter, t0)
    d.kvp = kvp
    holder.append(d)
    try:
        try:
            d.run = (start_run(project.runs_dir, profile=profile.name, host=host.name,
                               kind="deploy", profiles_git_commit=git_commit(),
                               parent_profile=profile.extends,
                               image={"reference": profile.image, "digest": profile.image_ref.digest},
                               served_model_name=profile.model.served_model_name[0],
                               port=published_port(profile), image_override=options.image,
                               image_source=("local-images" if project.local_images.owns(profile.image_ref.digest)
                                             else None))
                     if options.record else RunWriter(None))
            d.result.run = d.run.run
            if d.run.path:
                reporter.recorded(d.run.path)
            d.recover_abandoned(state)
            d.revision = hist.next_revision(state.history)
            reporter.phase("pull", profile.image)
            d.phase = "pull"
            image = resolve_image(host, profile, catalog, project.catalog_path, reporter,
                                  inspected=facts.get("image"))
            d.timings["pull_s"] = image.pull_s
            d.phase = "check"
            if checked is None:  # the image was unknown at preflight: render with its facts now
                reporter.phase("render", f"profile {profile.name} -> docker-compose.yml")
                checked = render_and_check(profile, catalog, project, entry, reporter)
            recheck_kv(kvp, profile, checked[0].service, reporter)
            d.plan = build_plan(loaded=loaded, profile=profile, rendered=checked[0],
                                findings=checked[1], image=image, host=host, entry=entry,
                                host_facts=facts, state=state, options=options, catalog=catalog, project=project)
            d.run.secrets = d.plan.record_secrets
            record_plan(d.run, d.plan)
            if options.in_image:
                judge_in_image(host, d.plan, reporter)  # a rejection ends here: the old server serves on
            d.warn_compile_range()
            d.apply()
        except KeyboardInterrupt:
            try:
                d.interrupted()
            except SwitchAbandoned as exc:
                d.abandoned(exc)
        except SwitchAbandoned as exc:
            d.abandoned(exc)
        except HostUnreachable as exc:
            d.transport_lost(exc)
        except ServedeckError as exc:
            d.failed(exc)
        finally:
            d.close()
    finally:
        interrupt.__exit__(None, None, None)
    return d.result


def _preflight_and_lock(host: RemoteHost, entry: HostEntry, profile, options: DeployOptions,
                        reporter: Reporter) -> tuple[dict[str, Any], HostState]:
    """Preflight facts + state + lock in one round trip; judge; release the lock on problems.

    Raises:
        DeployError: the problems found, or the lock is held (nothing changed, no record).
    """
    facts, state = host.preflight(preflight_paths(profile), port=published_port(profile),
                                  lock_owner=f"{owner()}: deploy {profile.name}",
                                  force_unlock=options.force_unlock, read=preflight_reads(profile),
                                  image=profile.image_ref.repo_digest, sysfs_root=entry.sysfs_root)
    host.api_version = facts.get("docker_api_version")
    if state.lock == "unwritable":
        err = unwritable_error(host.name, host.workdir, state.unwritable or "")
        raise DeployError(f"preflight on host {host.name} failed: {err.message}", hint=err.hint)
    if state.lock == "held":
        err = held_error(host.name, state.holder, raw=state.holder_raw)
        raise DeployError(f"{'another deploy holds the lock: ' if state.holder else ''}{err.message}; "
                          "nothing was changed", hint=err.hint)
    if state.replaced is not None:
        reporter.warn(f"took over the lock of {state.replaced.owner} (pid {state.replaced.pid} on "
                      f"{state.replaced.host}, since {state.replaced.started_at.isoformat()})")
    problems = judge_preflight(host, entry, profile, facts, options)
    if problems:
        host.release_lock()
        raise DeployError("preflight on host " + host.name + " failed; nothing was changed:\n  - "
                          + "\n  - ".join(problems))
    reporter.info(f"docker {facts['docker_server_version']}, compose {facts['compose_version']}, "
                  f"kernel {facts['kernel']}, {facts['workdir']['free_gib']} GiB free")
    return facts, state


_FAILURE_PHASE = {"compose-up": "start", "no-container": "start", "exited": "crash", "gone": "crash",
                  "restarting": "crash", "not-ready": "timeout"}
"""Readiness diagnosis → ``failure_phase`` (others, e.g. ``unreachable``, ``api-key``: ``readiness``)."""


class _Deploy:
    """The state of one deploy while it applies: the plan, the run, the host lines to write."""

    def __init__(self, project: Project, host: RemoteHost, entry: HostEntry,
                 options: DeployOptions, reporter: Reporter, t0: float) -> None:
        self.project, self.host, self.entry = project, host, entry
        self.options, self.reporter, self.t0 = options, reporter, t0
        self.run = RunWriter(None)
        self.plan: DeployPlan | None = None
        self.result = DeployResult(outcome="failed", run=None)
        self.timings: dict[str, float | None] = {}
        self.revision = 0
        self.switched = False       # the old server may be stopped from here on
        self.kvp: KvPowerPlan | None = None       # KV prediction + power cap judged in preflight
        self.power_change: dict[str, Any] | None = None  # the cap this deploy set (restored on rollback)
        self.lines: list[dict[str, Any]] = []   # final history lines to write
        self.store_good: str | None = None
        self.error: DeployError | None = None
        self.phase = "preflight"  # the phase running now: run.json's failure_phase if it fails

    # ------------------------------------------------------------------ phases

    def base_line(self) -> dict[str, Any]:
        p = self.plan
        line: dict[str, Any] = {"revision": self.revision, "event": "deploy", "who": owner(),
                                "run_id": self.run.run_id}
        if p is not None:
            line.update(profile=p.profile.name, compose_sha256=p.compose_sha256,
                        image_digest=p.profile.image_ref.digest, service=p.service, port=p.port,
                        served_model_name=p.served_name,
                        max_num_batched_tokens=p.effective.get("max_num_batched_tokens"))
        return line

    def apply(self) -> None:
        p = self.plan
        assert p is not None
        self.result.compose_sha256, self.result.revision = p.compose_sha256, self.revision
        self.reporter.phase("switch", f"{self.host.compose_path} (revision {self.revision}, deadline "
                                      f"{SWITCH_DEADLINE_S:.0f} s); stop the old server, start service {p.service}")
        t_up = time.time()
        # what readiness (the docker SDK) and recording need imports while compose runs
        preload("servedeck.vllm.startup_log", "servedeck.vllm.verify")
        self.phase = "start"
        self.power_change = apply_power(self.host, self.kvp, self.run.run, p.profile.name, self.reporter)
        sw = run_switch(self.host, UP_ARGS, {**self.base_line(), "outcome": "started", "time": utcnow()},
                        data=p.compose_bytes, reporter=self.reporter)
        self.switched = sw.started
        if not sw.started:  # nothing changed: the running deployment serves on
            if self.power_change:
                restore_power(self.host, self.run.run, self.reporter)
            if sw.interrupts:
                raise KeyboardInterrupt
            raise DeployError(f"the switch changed nothing on {self.host.name}: {sw.detail}; the running "
                              "deployment was not touched",
                              hint=f"free space on the host (df -h {self.host.workdir}) if it is full, "
                                   f"then deploy again")
        if not sw.known:  # the host stopped answering: what serves is unknown
            raise HostUnreachable(f"the host stopped answering during the switch ({sw.detail}); whether "
                                  f"revision {self.revision} or the old deployment serves is not known here")
        if sw.link_lost:
            self.reporter.warn(f"the connection was lost during the switch; the host says docker compose up "
                               f"{'succeeded' if sw.ok else 'failed'}: going on from there")
        if sw.interrupts:
            raise KeyboardInterrupt  # the switch has ended on the host: now roll back (interrupted())
        if not sw.ok:
            readiness = Readiness(False, "docker compose up failed: " + sw.detail[-500:],
                                  "", None, None, 0.0, diagnosis="compose-up")
        else:
            self.reporter.phase("wait", f"{p.base_url}/health and /v1/models (timeout {p.timeout_s:g} s)")
            self.phase = "readiness"
            api_key = p.api_key
            if p.environment_from_host:  # Compose adds to the environment on the host: read it there
                theirs = deployed_secrets(self.host, p.service)
                self.run.secrets = self.run.secrets.including(theirs, "host")
                self.run.save_meta(redacted=self.run.secrets.names)
                api_key = theirs.api_key or api_key
            # what the record after ready validates is built while the server starts
            store.prepare(store.STARTUP, store.ARGS_VERIFICATION, store.KV)
            readiness = wait_ready(self.host, service=p.service, base_url=p.base_url,
                                   served_name=p.served_name, api_key=api_key,
                                   timeout_s=p.timeout_s, reporter=self.reporter)
        self.result.readiness = readiness
        self.result.startup, self.result.arg_checks = record_startup(self.run, p, readiness, self.reporter)
        record_kv(self.run.run, self.kvp, self.result.startup)
        if readiness.ready:
            self.ready(readiness, t_up)
        else:
            self.not_ready(readiness)

    def ready(self, r: Readiness, t_up: float) -> None:
        p = self.plan
        assert p is not None and r.ready_at is not None
        server_s = (r.ready_at - r.container_started_at) if r.container_started_at else None
        t = self.timings
        t["container_start_to_ready_s"] = round(server_s, 3) if server_s is not None else None
        t["up_to_ready_s"] = round(r.ready_at - t_up, 3)
        t["deploy_total_s"] = total_s = round(r.ready_at - self.t0, 3)
        if server_s is not None:
            t["overhead_s"] = round(total_s - (t.get("pull_s") or 0.0) - server_s, 3)
        self.result.timings_s = t
        self.result.outcome = "ready"
        self.lines.append({**self.base_line(), "outcome": "ready", "ended": utcnow()})
        self.store_good = p.compose_sha256
        self.run.save_meta(outcome="ready", ready_at=utcnow(), timings_s=t, wait_s=round(r.waited_s, 1))
        self.reporter.phase("ready", f"{p.served_name} serves on {p.base_url} after "
                                     f"{t['up_to_ready_s']:.1f} s (revision {self.revision})")

    def not_ready(self, r: Readiness) -> None:
        p = self.plan
        assert p is not None
        self.reporter.phase("failed", r.reason)
        for line in r.error_tail():
            self.reporter.info(f"| {line}")
        self.lines.append({**self.base_line(), "outcome": "failed", "reason": r.reason,
                           "diagnosis": r.diagnosis, "ended": utcnow()})
        self.phase = _FAILURE_PHASE.get(r.diagnosis or "", "readiness")
        self.run.save_meta(outcome="failed", failure=r.reason, failure_phase=self.phase, diagnosis=r.diagnosis,
                           wait_s=round(r.waited_s, 1), ended_at=utcnow())
        if r.diagnosis == "unreachable":
            self.host.reconnect()  # the shared connection may be the frozen one
        head = f"deploy of {p.profile.name} failed: {r.reason}"
        if self.options.no_rollback:
            raise DeployError(f"{head}; left as it is (--no-rollback)",
                              hint=f"invoke rollback --host {self.host.name}")
        state = self.roll_back("failed")
        raise DeployError(f"{head}; {state}", hint=f"invoke logs --host {self.host.name}")

    def roll_back(self, why: str) -> str:
        """Restore the last known-good deployment (or stop the failed one when there is none);
        return a sentence saying what now serves."""
        p = self.plan
        target = p.rollback_target if p else None
        if self.power_change:
            restore_power(self.host, self.run.run, self.reporter)
        if target is None:
            self.host.compose(["down", "--remove-orphans"], check=False)
            return ("no deployment on this host ever served, so there is nothing to roll back to; "
                    "the failed one was stopped")
        self.reporter.phase("rollback", f"to revision {target.number} ({target.profile}), the last "
                                        "known-good deployment")
        rb, theirs = restore_revision(self.host, self.entry, target, self.revision + 1,
                                      timeout_s=p.timeout_s if p else self.entry.ready_timeout_s,
                                      reporter=self.reporter, who=owner(), run_id=self.run.run_id,
                                      reason=f"automatic after {why} revision {self.revision}",
                                      lines=self.lines)
        self.run.secrets = self.run.secrets.including(theirs, f"revision {target.number}")
        self.result.rollback = rb
        self.run.save_meta(rollback={"revision": target.number, "ready": rb.ready, "reason": rb.reason})
        if rb.ready:
            if self.result.outcome != "interrupted":
                self.result.outcome = "rolled-back"
                self.run.save_meta(outcome="rolled-back")
            return f"rolled back: revision {target.number} ({target.profile}) serves again"
        return f"the rollback to revision {target.number} did not become ready either: {rb.reason}"

    # ------------------------------------------------------------------ endings

    def interrupted(self) -> None:
        self.result.outcome = "interrupted"
        msg = "deploy interrupted"
        target = self.plan.rollback_target if self.plan else None
        if self.switched and not self.options.no_rollback and target is not None:
            self.reporter.warn("interrupted after the old server was stopped: rolling back to the "
                               "last known-good deployment (interrupt again to stop)")
            self.lines.append({**self.base_line(), "outcome": "interrupted", "ended": utcnow()})
            try:
                msg += "; " + self.roll_back("interrupted")
            except KeyboardInterrupt:  # its final history line is written (restore_revision)
                msg += ("; the rollback was interrupted too (its server may still be starting: "
                        f"invoke status --host {self.host.name})")
        else:
            self.lines.append({**self.base_line(), "outcome": "interrupted", "ended": utcnow()})
            msg += ("; nothing serving was changed" if not self.switched
                    else "; left as it is (--no-rollback)" if self.options.no_rollback
                    else "; left as it is: no deployment on this host ever served, nothing to "
                         "roll back to")
        self.run.save_meta(outcome="interrupted", failure=msg, failure_phase="interrupt", ended_at=utcnow())
        self.reporter.warn(msg)
        self.error = DeployError(msg, hint=f"invoke status --host {self.host.name}")

    def transport_lost(self, exc: HostUnreachable) -> None:
        msg = f"lost the connection to host {self.host.name}: {exc.message}"
        if any(ln["revision"] == self.revision for ln in self.lines):  # after the wait ended
            self.run.save_meta(rollback={"ready": False, "reason": msg})
            msg = f"{self.run.run.meta.failure if self.run.run else 'deploy failed'}; then {msg}"
        else:
            self.lines.append({**self.base_line(), "outcome": "failed", "reason": msg,
                               "ended": utcnow()})
            self.run.save_meta(outcome="failed", failure=msg, failure_phase=self.phase, diagnosis="unreachable",
                               ended_at=utcnow())
        self.host.reconnect()
        self.error = DeployError(msg, hint=f"when the host answers again: invoke status --host "
                                           f"{self.host.name}")

    def failed(self, exc: ServedeckError) -> None:
        """A DeployError raised by a phase (after its final state was written, or before the
        switch: pull, verification, check) or any other user-facing error."""
        if not any(ln["revision"] == self.revision for ln in self.lines):
            self.lines.append({**self.base_line(), "outcome": "failed", "reason": exc.message,
                               "ended": utcnow()})
        if self.run.outcome() == "started":
            self.run.save_meta(outcome="failed", failure=exc.message, failure_phase=self.phase, ended_at=utcnow())
        self.error = exc if isinstance(exc, DeployError) else DeployError(exc.message, hint=exc.hint)

    def abandoned(self, exc: SwitchAbandoned) -> None:
        """A third interrupt left a switch running on the host: record that; the lock and the
        history stay as they are (the switch's own lines are the host's to finish)."""
        self.result.outcome = "interrupted"
        self.run.save_meta(outcome="interrupted", failure=exc.message, failure_phase="interrupt",
                           ended_at=utcnow())
        self.error = exc
        self.leave_host = True

    def close(self) -> None:
        """Write the final host lines, keep the served file, prune, release the lock (one
        round trip; once more over a fresh connection if the first attempt fails)."""
        if getattr(self, "leave_host", False):
            self.host.close()
            raise self.error  # type: ignore[misc]
        history = self.plan.state.history if self.plan else []
        if not self.lines:
            self.lines.append({**self.base_line(), "outcome": self.result.outcome, "ended": utcnow()})
        keep = hist.keep_hashes(history + self.lines)
        for attempt in (1, 2):
            try:
                status = self.host.finish(self.run.secrets.scrub(self.lines),
                                          store_good=self.store_good, keep_good=keep)
                if status == "other":
                    self.reporter.warn("the deploy lock was taken over by another command; left it")
                if self.host.finish_problem:
                    self.reporter.warn(f"{self.host.finish_problem} (the lock was released)")
                    self.run.save_meta(host_state_written=False)
                break
            except HostUnreachable as exc:
                if attempt == 2:
                    self.reporter.warn(f"could not write the final state on the host: {exc.message}; "
                                       "its lock stays until a command with --force-unlock takes it over")
                    self.run.save_meta(host_state_written=False)
                self.host.reconnect()
        self.host.close()
        if self.error is not None:
            scrub = self.run.secrets.scrub_text
            raise type(self.error)(scrub(self.error.message), file=self.error.file, field=self.error.field,
                                   hint=scrub(self.error.hint) if self.error.hint else None)

    def recover_abandoned(self, state: HostState) -> None:
        """Revisions that never finished belong to clients that died (we hold the lock now):
        give them their final state ``abandoned`` on the host and in local run records."""
        for rev in hist.unfinished(state.history):
            reason = ("its client died before it finished"
                      + (f" (lock of pid {state.replaced.pid} on {state.replaced.host} taken over)"
                         if state.replaced else ""))
            self.host.append_history({"revision": rev.number, "outcome": "abandoned",
                                      "reason": reason, "ended": utcnow()})
            state.history.append({"revision": rev.number, "outcome": "abandoned"})
            if mark_abandoned(self.project.runs_dir, rev.record.get("run_id"), reason):
                self.reporter.warn(f"run {rev.record.get('run_id')} (revision {rev.number}) was "
                                   f"abandoned by its client; marked so")

    def warn_compile_range(self) -> None:
        """Warn when the compile range (1, max_num_batched_tokens) never served on this host."""
        p = self.plan
        assert p is not None
        mnbt = p.effective.get("max_num_batched_tokens")
        seen = {v for r in hist.revisions(p.state.history)
                if r.good and (v := r.record.get("max_num_batched_tokens")) is not None}
        if mnbt is not None and seen and mnbt not in seen:
            self.reporter.warn(f"compile range (1, {mnbt}) was never served on this host (seen: "
                               f"{sorted(seen)}): expect a cold compile (minutes on the real card)")


# --------------------------------------------------------------------------- restore


def restore_revision(host: RemoteHost, entry: HostEntry, target: hist.Revision, revision: int, *,
                     timeout_s: float, reporter: Reporter, who: str, run_id: str | None,
                     reason: str, lines: list[dict[str, Any]]) -> tuple[Readiness, Secrets]:
    """Install the known-good file of ``target`` as revision ``revision``, restart, wait.

    The switch is :func:`~servedeck.deploy.switch.run_switch` (interrupts wait for it; a lost
    link is resolved by asking the host; a switch that never reached the host is tried again
    over a fresh connection until the deadline). The wait sends the key the restored server
    wants: its own file's, as Compose reads it on the host
    (:func:`~servedeck.deploy.secrets.deployed_secrets`).

    Appends the revision's final history line to ``lines`` however it ends (``ready``,
    ``failed``, or ``interrupted`` when an interrupt ends the wait: it is raised on), so no
    started revision is left without one.

    Returns:
        the readiness and the restored file's secrets (to scrub from a record).
    """
    from servedeck.deploy.plan import api_base_url
    rec = target.record
    line = {"revision": revision, "event": "rollback", "who": who, "run_id": run_id,
            "target_revision": target.number, "profile": target.profile,
            "compose_sha256": target.compose_sha256, "image_digest": rec.get("image_digest"),
            "service": rec.get("service"), "port": rec.get("port"),
            "served_model_name": rec.get("served_model_name"),
            "max_num_batched_tokens": rec.get("max_num_batched_tokens"), "reason": reason}
    secrets = Secrets()
    final: dict[str, Any] = {**line, "outcome": "interrupted"}
    try:
        deadline = time.monotonic() + max(60.0, timeout_s)
        while True:
            sw = run_switch(host, UP_ARGS, {**line, "outcome": "started", "time": utcnow()},
                            good_sha=target.compose_sha256, reporter=reporter, phase="rollback")
            if sw.started or not sw.link_lost or time.monotonic() >= deadline:
                break
            time.sleep(1.0)  # it never reached the host: the same file again, over a fresh connection
        if sw.interrupts:
            raise KeyboardInterrupt
        if not sw.started or not sw.ok or not sw.known:
            rb = Readiness(False, f"docker compose up of revision {target.number} "
                                  f"{'did not start' if not sw.started else 'failed'}: {sw.detail[-300:]}",
                           "", None, None, 0.0, diagnosis="compose-up")
        else:
            try:
                secrets = deployed_secrets(host, rec.get("service"))
            except HostUnreachable:
                pass  # readiness tells an unreachable host apart (a key it wants shows there)
            rb = wait_ready(host, service=rec.get("service") or "vllm",
                            base_url=api_base_url(host, entry, int(rec.get("port") or entry.port)),
                            served_name=rec.get("served_model_name") or "", api_key=secrets.api_key,
                            timeout_s=timeout_s, reporter=reporter, phase="rollback")
        final = {**line, "outcome": "ready" if rb.ready else "failed"}
        if not rb.ready:
            final["reason"] = rb.reason
        return rb, secrets
    finally:
        lines.append({**final, "ended": utcnow()})
