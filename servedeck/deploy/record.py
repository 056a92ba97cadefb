"""What a deploy or rollback writes into its run record (through :mod:`servedeck.runs.store`).

Every write goes through :class:`RunWriter`, which scrubs the deployment's secret values
(:mod:`servedeck.deploy.secrets`) out of every file and every shape before the store writes
it (the store's own pattern-based redaction stays as a second net). The run's
``docker-compose.yml`` is the deployed text with the secrets replaced; ``run.json`` keeps the
sha256 of the text actually deployed and names what was redacted (``redacted``), never a value.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from servedeck.deploy.console import Reporter
from servedeck.deploy.secrets import Secrets
from servedeck.errors import ServedeckError
from servedeck.runs import store
from servedeck.runs.store import RunFile, RunRecord, create_run, git_commit, open_run, utcnow

if TYPE_CHECKING:
    from servedeck.deploy.plan import DeployPlan
    from servedeck.deploy.readiness import Readiness


class RunWriter:
    """A run record plus the secrets to keep out of it. ``run`` may be None (no record):
    every method is then a no-op."""

    def __init__(self, run: RunRecord | None, secrets: Secrets | None = None) -> None:
        self.run = run
        self.secrets = secrets or Secrets()

    @property
    def path(self) -> Path | None:
        return self.run.path if self.run else None

    @property
    def run_id(self) -> str | None:
        return self.run.run_id if self.run else None

    def outcome(self) -> str | None:
        return self.run.meta.outcome if self.run else None

    def save_meta(self, **updates: Any) -> None:
        if self.run:
            self.run.save_meta(**self.secrets.scrub(updates))

    def write(self, file: RunFile[Any], value: Any) -> None:
        """Write a run file (:meth:`servedeck.runs.store.RunRecord.write`), this deployment's
        secret values scrubbed out of its content."""
        if self.run:
            self.run.write(file, value, scrub=self.secrets.scrub_text if file.form == "text" else self.secrets.scrub)

    def save_compose(self, compose_text: str, deployed_sha256: str) -> None:
        """The deployed compose text with secrets replaced; ``run.json`` gets the deployed
        text's sha256 and which secrets were replaced."""
        if not self.run:
            return
        clean = self.secrets.scrub_yaml(compose_text)
        self.run.save_compose(clean)
        self.run.save_meta(compose_sha256=deployed_sha256, compose_redacted=clean != compose_text,
                           redacted=self.secrets.names)


def start_run(runs_dir: Path, *, profile: str, host: str, kind: str,
              profiles_git_commit: str | None, **meta: Any) -> RunWriter:
    """Create the run record of a deploy or rollback (``kind``), after the lock was taken."""
    return RunWriter(create_run(runs_dir, profile, host, kind=kind,
                                profiles_git_commit=profiles_git_commit, **meta))


def git_commit_soon(profiles_dir: Path) -> Callable[[], str | None]:
    """Start :func:`servedeck.runs.store.git_commit` of ``profiles_dir`` in a thread (two
    ``git`` processes, overlapping the deploy's first SSH round trip); call the result to get
    the commit."""
    box: list[str | None] = []
    t = threading.Thread(target=lambda: box.append(git_commit(profiles_dir)), daemon=True)
    t.start()

    def result() -> str | None:
        t.join(15)
        return box[0] if box else None
    return result


def record_plan(w: RunWriter, plan: "DeployPlan") -> None:
    """Write what the plan computed: compose, resolved profile, effective settings, argv,
    profile diff against its parent, host and image facts."""
    from servedeck.deploy.plan import host_facts_summary
    from servedeck.model.profile import diff_profiles
    from servedeck.runs.records import ArgvRecord, FactsRecord, ProfileChange
    if not w.run:
        return
    raw = plan.image.raw
    w.save_compose(plan.rendered.compose_text, plan.compose_sha256)
    w.write(store.PROFILE_RESOLVED, plan.profile.model_dump(mode="json"))
    w.write(store.EFFECTIVE, plan.effective)
    w.write(store.ARGV, ArgvRecord(command=plan.argv, entrypoint=raw["entrypoint"]))
    parent = plan.entry.place(plan.loaded.parent.profile) if plan.loaded.parent else None
    w.write(store.PROFILE_DIFF, [ProfileChange(path=c.path, parent=c.old, value=c.new)
                                 for c in (diff_profiles(parent, plan.profile) if parent else [])])
    w.write(store.FACTS, FactsRecord.model_validate({"host": host_facts_summary(plan.host_facts), "image": {
        k: raw[k] for k in ("reference", "digest", "created", "entrypoint", "vllm_version", "labels")}}))
    w.save_meta(revision=plan.revision)


def record_startup(w: RunWriter, plan: "DeployPlan", readiness: "Readiness",
                   reporter: Reporter) -> tuple[dict[str, Any], list[Any]]:
    """Parse the startup log, verify the effective args against it, report differences and
    write startup.log / startup.json / args_verification.json. Returns (parsed, checks)."""
    from servedeck.vllm.verify import verify_args
    parsed = startup_facts(readiness)
    checks = verify_args(plan.rendered.service.effective, parsed.get("non_default_args"))
    if readiness.ready:
        differs = [c for c in checks if c.status == "differs"]
        for c in checks:
            if c.source == "profile" or c.status == "differs":
                (reporter.warn if c.status == "differs" else reporter.info)(c.render())
        if differs:
            reporter.warn(f"{len(differs)} setting(s) differ from the profile: the server does not "
                          "run what was rendered")
        from servedeck.vllm.startup_facts import prefix_caching_reach
        reach = prefix_caching_reach(parsed, plan.profile.engine.max_model_len or parsed.get("max_model_len"),
                                     plan.profile.engine.enable_prefix_caching)
        if reach is not None:
            reporter.warn(reach)
    w.save_meta(args_verification={
        "confirmed": [c.setting for c in checks if c.status == "confirmed"],
        "differs": [c.render() for c in checks if c.status == "differs"]})
    w.write(store.STARTUP_LOG, readiness.log_text)
    w.write(store.STARTUP, parsed)
    w.write(store.ARGS_VERIFICATION, checks)
    return parsed, checks


def startup_facts(readiness: "Readiness") -> dict[str, Any]:
    """The parsed startup log of one start (:func:`servedeck.vllm.startup_log.parse_startup_log`),
    with ``time_to_ready_s`` (container start to ready) when it served."""
    from servedeck.vllm.startup_log import parse_startup_log
    parsed = parse_startup_log(readiness.log_text).to_dict()
    if readiness.ready and readiness.container_started_at and readiness.ready_at:
        parsed["time_to_ready_s"] = round(readiness.ready_at - readiness.container_started_at, 3)
    return parsed


#: What a rollback's run takes over from the run that first deployed the restored file: the
#: same compose file was rendered from the same resolved profile, settings, argv and image.
RESTORED_VIEWS: tuple[RunFile[Any], ...] = (store.PROFILE_RESOLVED, store.EFFECTIVE, store.ARGV, store.PROFILE_DIFF,
                                             store.FACTS)


def record_restored(w: RunWriter, runs_dir: Path, source_run_id: str | None, compose_text: str | None,
                    compose_sha256: str, readiness: "Readiness") -> None:
    """Fill a rollback's run record like a deploy's, so that it can be benchmarked and compared:
    the restored compose file (the host's known-good copy, secrets scrubbed), the plan views of
    the run that first deployed it (:data:`RESTORED_VIEWS`, when that run is in ``runs_dir``),
    and the startup log, its facts (``startup.json``) and the log itself of this start."""
    if not w.run:
        return
    if compose_text is not None:
        w.save_compose(compose_text, compose_sha256)
    source = store.recorded_run(runs_dir, source_run_id)  # a value from the host's history
    if source is not None and source != w.path and store.is_run_dir(source):
        for file in RESTORED_VIEWS:
            try:
                view = store.read(source, file)
            except ServedeckError:  # a damaged older record: that view stays absent
                continue
            if view is not None:
                w.write(file, view)
        w.save_meta(restores=source.name)
    w.write(store.STARTUP_LOG, readiness.log_text)
    w.write(store.STARTUP, startup_facts(readiness))


def mark_abandoned(runs_dir: Path, run_id: str | None, reason: str) -> bool:
    """Give a run whose client died (still ``started``) its final state ``abandoned``.
    Returns whether a local run record was updated."""
    path = store.recorded_run(runs_dir, run_id)  # a value from the host's history
    if path is None:
        return False
    run = open_run(path)
    if run.meta.outcome != "started":
        return False
    run.save_meta(outcome="abandoned", failure=reason, ended_at=utcnow())
    return True
