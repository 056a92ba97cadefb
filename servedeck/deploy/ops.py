"""Operations on a deployed host: status (with drift), rollback to a known-good revision, down,
logs.

``rollback`` and ``down`` take the deploy lock like a deploy does (same ``force_unlock``
for a stale one), write a revision into the host history, and ``rollback`` records a run like
a deploy.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from servedeck.deploy.apply import restore_revision
from servedeck.deploy.switch import SwitchAbandoned
from servedeck.deploy.console import Reporter
from servedeck.deploy.kv_power import format_power_status, power_status, restore_power
from servedeck.deploy.plan import api_base_url, owner
from servedeck.deploy.readiness import Readiness
from servedeck.deploy.record import RunWriter, mark_abandoned, record_restored, start_run
from servedeck.errors import DeployError, ServedeckError
from servedeck.host import history as hist
from servedeck.host.lock import held_error, unwritable_error
from servedeck.host.remote import HostState, RemoteHost
from servedeck.model.inventory import HostEntry
from servedeck.model.project import Project
from servedeck.runs.store import git_commit, utcnow
from servedeck.safetext import printable


def drift(container_attrs: dict[str, Any], service: dict[str, Any]) -> list[str]:
    """Differences between a running container and its normalised compose service.

    Compares image, command, environment (compose entries must be present with the same
    value; the image's own env is ignored) and mounts (target → source).

    Returns:
        human-readable lines, empty when the container matches.
    """
    out: list[str] = []
    cfg = container_attrs.get("Config") or {}
    if cfg.get("Image") != service.get("image"):
        out.append(f"image: running {cfg.get('Image')!r}, compose file {service.get('image')!r}")
    want_cmd = [str(c) for c in service.get("command") or []]
    if want_cmd and (cfg.get("Cmd") or []) != want_cmd:
        out.append(f"command: running {cfg.get('Cmd')}, compose file {want_cmd}")
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
    for k, v in (service.get("environment") or {}).items():
        if env.get(k) != (v if v is not None else ""):
            out.append(f"environment {k}: running {env.get(k)!r}, compose file {v!r}")
    mounts = {m.get("Destination"): m.get("Source") or m.get("Name") for m in container_attrs.get("Mounts") or []}
    for vol in service.get("volumes") or []:
        target, source = vol.get("target"), vol.get("source")
        got = mounts.get(target)
        if got is None:
            out.append(f"mount {target}: missing in the running container")
        elif vol.get("type") == "bind" and got != source:
            out.append(f"mount {target}: running {got!r}, compose file {source!r}")
    return out


def _same_compose(revs: list[hist.Revision], newest: hist.Revision) -> list[int]:
    """Older known-good revisions with ``newest``'s compose file (listed once, under the newest)."""
    return [r.number for r in revs if r.good and r.number != newest.number
            and r.compose_sha256 == newest.compose_sha256]


def _served(revs: list[hist.Revision]) -> str | None:
    """The server's service in the compose file on the host: the one its newest revision names
    (a template may write a sidecar, which Compose may list first), None when none does."""
    service = revs[-1].record.get("service") if revs else None
    return service if isinstance(service, str) else None


def status(host: RemoteHost, entry: HostEntry) -> dict[str, Any]:
    """What runs on the host and how it compares with the deployed compose file.

    Returns:
        ``{"host", "workdir", "compose_present", "compose_sha256", "service", "container":
        {name, state, running, restarting, exit_code, started_at, uptime_s, restart_count,
        image, image_digests} | None, "serving": bool|None, "drift": [str] (the container
        against the compose file, and where the records contradict the host:
        :func:`contradictions`), "lock": {...}|None,
        "last_deploy": {...}|None (the newest history revision), "known_good": [{"revision",
        "profile", "compose_sha256", "ended", "same_as": [older good revisions deployed with this
        very compose file]}] newest first, "unfinished": [revision numbers],
        "lock_stale": why the lock looks stale | None, "project": the Compose project servedeck
        deploys this working directory as, "history_damaged": history lines that could not be read}``.
    """
    state = host.state()
    revs = hist.revisions(state.history)
    out: dict[str, Any] = {
        "host": host.name, "workdir": host.workdir, "compose_present": state.compose_sha256 is not None,
        "compose_sha256": state.compose_sha256, "service": None, "container": None, "serving": None,
        "drift": [], "lock": (state.holder.model_dump(mode="json") if state.holder
                              else {"damaged": state.holder_raw} if state.lock == "held" else None),
        "last_deploy": revs[-1].record if revs else None,
        "known_good": [{"revision": r.number, "profile": r.profile, "compose_sha256": r.compose_sha256,
                        "ended": r.record.get("ended"), "same_as": _same_compose(revs, r)}
                       for r in state.known_good()],
        "unfinished": [r.number for r in hist.unfinished(state.history)],
        "lock_stale": (state.holder.stale_reason() if state.holder
                       else "the lock file is damaged: no command holds it" if state.lock == "held" else None),
        "power": power_status(host, entry.sysfs_root), "project": host.project,
        "history_damaged": hist.damaged(state.history)}
    if state.compose_sha256 is None:
        return out
    norm = host.normalised_service(service=_served(revs), or_first=True)
    if norm is None:
        out["drift"].append("the compose file on the host does not pass `docker compose config`")
        return out
    service, svc = norm
    out["service"] = service
    try:
        found = [(c.name, c.state(reload=False)["status"]) for c in host.engine.containers(host.workdir)]
        container = host.engine.container(host.workdir, service)
        if container is None:
            out["drift"].append("no container: the deployment is down")
            out["drift"] += contradictions(state.history, state.compose_sha256, serving=None, containers=found)
            return out
        attrs = container.attrs
        st = container.state(reload=False)
        digests = host.engine.image_digests(attrs.get("Image", ""))
        out["container"] = {
            "name": container.name, "state": st["status"], "running": st["running"],
            "restarting": st["restarting"], "exit_code": st["exit_code"],
            "started_at": (attrs.get("State") or {}).get("StartedAt"),
            "uptime_s": round(time.time() - st["started_at"], 1) if st["started_at"] and st["running"] else None,
            "restart_count": st["restart_count"], "image": (attrs.get("Config") or {}).get("Image"),
            "image_digests": digests}
        out["drift"] = drift(attrs, svc)
        running_as = ((attrs.get("Config") or {}).get("Labels") or {}).get("com.docker.compose.project")
        if running_as != host.project:
            out["drift"].append(f"the container runs as Compose project {running_as!r}, not {host.project!r} "
                                "(started before servedeck named projects per working directory, or by "
                                "hand): the next deploy or rollback replaces it")
        ports = list(svc.get("ports") or [])
        port = int(ports[0]["published"]) if ports else entry.port
        if st["running"]:
            out["serving"] = host.server_api(api_base_url(host, entry, port)).get("/health").status == 200
        else:
            out["serving"] = False
        out["drift"] += contradictions(state.history, state.compose_sha256, serving=out["serving"],
                                       containers=found)
    finally:
        host.close()
    return out


def contradictions(history: list[dict[str, Any]], compose_sha256: str | None, *, serving: bool | None,
                   containers: list[tuple[str, str]]) -> list[str]:
    """Where servedeck's records and what the host runs disagree (each a line for ``status``).

    Args:
        history: the host's history records, oldest first.
        compose_sha256: sha256 of the installed ``docker-compose.yml`` (None: none).
        serving: whether the server answers ``/health`` (None: not asked: no running container).
        containers: (name, state) of every container of the working directory.

    Returns:
        human-readable lines, empty when the records agree with the host: more than one
        container (a switch raced another: Compose leaves a ``<id>_<name>`` container), the
        newest deploy or rollback recorded ``ready`` while another file is installed, or
        recorded failed/interrupted/abandoned while its own file is installed and serves.
    """
    out: list[str] = []
    if len(containers) > 1:
        out.append(f"{len(containers)} containers of this working directory ("
                   + ", ".join(f"{name} {state}" for name, state in sorted(containers))
                   + "): one is expected; remove the extra ones (docker rm NAME) or deploy again")
    revs = [r for r in hist.revisions(history) if r.event in ("deploy", "rollback") and r.compose_sha256]
    if not revs or compose_sha256 is None:
        return out
    last = revs[-1]
    theirs = last.compose_sha256 or ""
    what = f"revision {last.number} ({last.event} of {last.profile})"
    if last.outcome == "ready" and theirs != compose_sha256:
        out.append(f"the history says {what} serves, but another compose file is installed "
                   f"(sha256 {compose_sha256[:12]}, not {theirs[:12]}): changed by hand?")
    elif last.outcome in ("failed", "interrupted", "abandoned") and theirs == compose_sha256 and serving:
        out.append(f"the history says {what} ended {last.outcome}, but its compose file is installed and "
                   "serves, never verified: deploy it again or roll back")
    return out


def format_status(st: dict[str, Any]) -> str:
    """Human-readable :func:`status` output."""
    lines = [f"host {st['host']} ({st['workdir']})"]
    if not st["compose_present"]:
        lines.append("  nothing deployed (no docker-compose.yml)")
    c = st.get("container")
    if c:
        up = f", up {c['uptime_s']:.0f} s" if c.get("uptime_s") is not None else ""
        lines.append(f"  container {c['name']}: {c['state']}{up}, restarts {c['restart_count']}, "
                     f"exit code {c['exit_code']}")
        lines.append(f"  image {c['image']}  digests {', '.join(c['image_digests']) or '-'}")
        lines.append(f"  serving: {'yes' if st['serving'] else 'no'}")
    if st.get("compose_sha256"):
        lines.append(f"  compose sha256 {st['compose_sha256']}, Compose project {st.get('project')}")
    if st.get("history_damaged"):
        lines.append(f"  history: {st['history_damaged']} damaged line(s) skipped (a torn write; later "
                     "lines and revision numbers are unaffected)")
    if st.get("last_deploy"):
        d = st["last_deploy"]
        lines.append(f"  last revision {d.get('revision')}: {d.get('event', 'deploy')} "
                     f"{d.get('profile')} {d.get('outcome')} at {d.get('ended') or d.get('time')} "
                     f"by {d.get('who')}")
    if st.get("known_good"):
        lines.append("  known-good revisions (rollback --to N): " + ", ".join(
            f"{g['revision']} {g['profile']}"
            + (f" (the same compose file as revision {', '.join(map(str, g['same_as']))})" if g.get("same_as") else "")
            for g in st["known_good"]))
    if format_power_status(st.get("power")):
        lines.append(f"  {format_power_status(st['power'])}")
    if st.get("lock") and "damaged" in st["lock"]:
        lines.append(f"  LOCK FILE DAMAGED ({st['lock']['damaged'][:80]}): no command holds it "
                     "(--force-unlock removes it)")
    elif st.get("lock"):
        lines.append(f"  LOCKED by {st['lock'].get('owner')} since {st['lock'].get('started_at')}"
                     + (f"; looks stale: {st['lock_stale']} (--force-unlock takes it over)"
                        if st.get("lock_stale") else ""))
    if st["drift"]:
        lines.append("  drift:")
        lines += [f"    - {d}" for d in st["drift"]]
    elif c:
        lines.append("  no drift: the container matches the compose file")
    return "\n".join(lines)


def _lock(host: RemoteHost, what: str, force_unlock: bool, reporter: Reporter) -> HostState:
    """Take the deploy lock for ``what`` (one round trip, with the host state).

    Raises:
        DeployError: held by another command (says whether stale; hint --force-unlock).
    """
    state = host.state(lock_owner=f"{owner()}: {what}", force_unlock=force_unlock)
    if state.lock == "unwritable":
        err = unwritable_error(host.name, host.workdir, state.unwritable or "")
        raise DeployError(f"cannot {what}: {err.message}", hint=err.hint)
    if state.lock == "held":
        err = held_error(host.name, state.holder, raw=state.holder_raw)
        raise DeployError(f"cannot {what}: {err.message}", hint=err.hint)
    if state.replaced is not None:
        reporter.warn(f"took over the lock of {state.replaced.owner} (pid {state.replaced.pid})")
    return state


def _close_unfinished(host: RemoteHost, state: HostState, project: Project | None) -> None:
    """Give revisions whose client died their final state (we hold the lock)."""
    for rev in hist.unfinished(state.history):
        reason = "its client died before it finished"
        host.append_history({"revision": rev.number, "outcome": "abandoned", "reason": reason,
                             "ended": utcnow()})
        state.history.append({"revision": rev.number, "outcome": "abandoned"})
        if project is not None:
            mark_abandoned(project.runs_dir, rev.record.get("run_id"), reason)


def rollback(host: RemoteHost, entry: HostEntry, *, to: int | None = None,
             timeout_s: float | None = None, reporter: Reporter | None = None,
             project: Project | None = None, force_unlock: bool = False,
             record: bool = True) -> Readiness:
    """Restore a known-good deployment and wait until it serves; record a run like a deploy.

    Args:
        to: the history revision to restore (must be known good: it served and its file is
            kept); default the newest known-good revision other than what is deployed now
            (or the newest one when the deployed file never served).
        project: where the run record goes (default: the project of the current directory).

    Raises:
        DeployError: the lock is held, no known-good revision (or ``to`` is not one), or the
            restored deployment did not become ready.
    """
    reporter = reporter or Reporter()
    state = _lock(host, "rollback", force_unlock, reporter)
    run = RunWriter(None)
    lines: list[dict[str, Any]] = []
    rb: Readiness | None = None
    leave = False
    revision = hist.next_revision(state.history)
    try:
        if record and project is None:
            project = Project.find()
        target = _rollback_target(host, state, to)
    except BaseException:
        host.release_lock()  # a refusal: no revision, no run record
        raise
    try:
        _close_unfinished(host, state, project)
        if record and project is not None:
            run = start_run(project.runs_dir, profile=target.profile or "rollback", host=host.name,
                            kind="rollback", profiles_git_commit=git_commit(project.profiles_dir),
                            rollback_to=target.number,
                            image={"digest": target.record.get("image_digest")},
                            served_model_name=target.record.get("served_model_name"),
                            port=target.record.get("port"))
            reporter.recorded(run.path)
        reporter.phase("rollback", f"to revision {target.number} ({target.profile}) as revision {revision}")
        restore_power(host, run.run, reporter)  # the limit the current deployment replaced
        rb, run.secrets = restore_revision(host, entry, target, revision,
                                           timeout_s=timeout_s or entry.ready_timeout_s,
                                           reporter=reporter, who=owner(), run_id=run.run_id,
                                           reason="invoke rollback", lines=lines)
        sha = target.compose_sha256
        assert sha is not None  # a known-good revision has its compose file (Revision.good)
        if run.run is not None and project is not None:
            restored = host.read_file(host.good_file(sha), missing_ok=True)
            record_restored(run, project.runs_dir, target.record.get("run_id"),
                            restored.decode("utf-8") if restored is not None else None, sha, rb)
        run.save_meta(revision=revision, compose_sha256=target.compose_sha256,
                      outcome="ready" if rb.ready else "failed",
                      **({"ready_at": utcnow()} if rb.ready else {"failure": rb.reason, "ended_at": utcnow()}))
    except KeyboardInterrupt:
        if not lines:
            lines.append({"revision": revision, "event": "rollback", "outcome": "interrupted", "ended": utcnow()})
        run.save_meta(outcome="interrupted", ended_at=utcnow())
        raise DeployError("rollback interrupted", hint=f"invoke status --host {host.name}") from None
    except SwitchAbandoned:
        run.save_meta(outcome="interrupted", ended_at=utcnow())
        leave = True  # the switch runs on: its lock and history stay for the next command to judge
        raise
    except ServedeckError as exc:
        if run.outcome() == "started":
            run.save_meta(outcome="failed", failure=exc.message, ended_at=utcnow())
        raise
    finally:
        if not leave:
            host.finish(run.secrets.scrub(lines) or [{"revision": revision, "event": "rollback",
                                                     "outcome": "failed", "ended": utcnow()}],
                        keep_good=hist.keep_hashes(state.history + lines))
        host.close()
    if not rb.ready:
        raise DeployError(f"rollback on {host.name} did not become ready: {rb.reason}")
    reporter.phase("ready", f"revision {target.number} serves again (revision {revision})")
    return rb


def _rollback_target(host: RemoteHost, state: HostState, to: int | None) -> hist.Revision:
    good = state.known_good()
    if to is not None:
        same = {r.compose_sha256 for r in hist.revisions(state.history) if r.number == to and r.good}
        for rev in good:  # an older revision of a compose file deployed again: its newest revision
            if rev.number == to or rev.compose_sha256 in same:
                return rev
        raise DeployError(f"revision {to} of host {host.name} is not a known-good deployment",
                          hint="known-good revisions: " + (", ".join(f"{r.number} ({r.profile})"
                                                                     for r in good) or "none"))
    others = [r for r in good if r.compose_sha256 != state.compose_sha256]
    # the installed file serves as far as the history knows when the revision that installed it
    # last ended ready; after a failed or interrupted switch (a rollback that met a Compose left
    # half-done included) the same known-good file is the one to restore
    installed_by = next((r for r in reversed(hist.revisions(state.history))
                         if r.event in ("deploy", "rollback") and r.compose_sha256 == state.compose_sha256), None)
    current_good = installed_by is not None and installed_by.good
    candidates = others if current_good else good
    if not candidates:
        raise DeployError(f"host {host.name} has no known-good deployment to roll back to "
                          "(none other than the current one served)")
    return candidates[0]


def down(host: RemoteHost, *, force_unlock: bool = False, reporter: Reporter | None = None) -> str:
    """``docker compose down`` on the host (volumes kept), under the deploy lock; returns
    compose's output.

    Raises:
        DeployError: nothing deployed, or the lock is held by another command.
    """
    reporter = reporter or Reporter()
    state = _lock(host, "down", force_unlock, reporter)
    revision = hist.next_revision(state.history)
    line = {"revision": revision, "event": "down", "who": owner(), "time": utcnow()}
    try:
        if state.compose_sha256 is None:
            raise DeployError(f"nothing deployed on {host.name} ({host.compose_path} missing)")
        _close_unfinished(host, state, None)
        res = host.compose(["down", "--remove-orphans"])
        restore_power(host)
        line["outcome"] = "down"
    except BaseException:
        line["outcome"] = "failed"
        raise
    finally:
        if state.compose_sha256 is None:
            host.release_lock()
        else:
            host.finish([line], keep_good=hist.keep_hashes(state.history))
    return (res.stdout + res.stderr).strip()


def stream_logs(host: RemoteHost, service: str | None = None, *, follow: bool = False,
                tail: int | str = 200, write: Callable[[str], None] = print) -> None:
    """Print the deployed container's log (``follow`` streams until interrupted): ``service``'s,
    by default the server's (:func:`_served`).

    Raises:
        DeployError: nothing deployed, or no container for the service.
    """
    if service is None:
        norm = host.normalised_service(service=_served(hist.revisions(host.state().history)), or_first=True)
        if norm is None:
            raise DeployError(f"nothing deployed on {host.name}")
        service = norm[0]
    try:
        container = host.engine.container(host.workdir, service)
        if container is None:
            raise DeployError(f"no container for service {service!r} on {host.name}")
        if follow:
            for text in container.follow(tail=tail):
                write(printable(text).rstrip("\n"))
        else:
            write(printable(container.logs(tail=tail)).rstrip("\n"))
    finally:
        host.close()
