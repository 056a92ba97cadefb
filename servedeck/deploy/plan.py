"""Plan a deploy: everything computed once, before anything that serves is changed.

A :class:`DeployPlan` holds the rendered compose text (rendered and checked ONCE, with the
image's facts), the check findings, the host's preflight facts and servedeck state (history,
known-good files, lock), the image facts, the effective settings and the server argv, the
secrets and API key, where the server will answer, the revision number and the rollback
target. Building it takes the deploy lock and may pull the image (neither changes what
serves); :mod:`servedeck.deploy.apply` then carries it out.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servedeck.deploy.console import Reporter
from servedeck.deploy.secrets import Secrets, find_secrets
from servedeck.errors import DeployError, ServedeckError
from servedeck.findings import Severity
from servedeck.host.history import Revision, next_revision
from servedeck.host.remote import HostState, RemoteHost
from servedeck.model.catalog import Catalog, ImageFacts
from servedeck.model.inventory import HostEntry
from servedeck.model.profile import LoadedProfile, Profile
from servedeck.model.project import Project

if TYPE_CHECKING:  # the renderer (jinja2) is imported by render_and_check, after the preflight started
    from servedeck.compose.render import Rendered

MIN_FREE_GIB = 2.0


@dataclass
class DeployOptions:
    """Options of one deploy.

    Attributes:
        no_rollback: leave a failed (or interrupted) deploy as it is.
        force_unlock: take over a lock whose deploy died (stale) before deploying.
        timeout_s: readiness timeout override (seconds).
        image: replace the profile's image reference (digest-pinned), e.g. a locally built
            image for tests; recorded in the run.
        record: write a run record under the project's runs directory.
        in_image: ask the pinned image's launcher and vLLM to judge the command before the
            switch (:func:`judge_in_image`).
        min_free_gib: refuse when the host's workdir has less free disk.
    """

    no_rollback: bool = False
    force_unlock: bool = False
    timeout_s: float | None = None
    image: str | None = None
    record: bool = True
    in_image: bool = True
    min_free_gib: float = MIN_FREE_GIB


@dataclass(frozen=True)
class ImageInfo:
    """The image as found on the host: ``facts`` (catalog or read now), ``raw`` (reference,
    digest, id, created, entrypoint, workdir, labels, vllm_version, repo_digests), whether it
    was ``pulled`` now, whether its facts were ``added`` to the catalog, ``pull_s``."""

    facts: ImageFacts
    raw: dict[str, Any]
    pulled: bool
    added: bool
    pull_s: float


@dataclass(frozen=True)
class DeployPlan:
    """A deploy, fully computed (see the module docstring). ``argv`` is the server command,
    ``effective`` the settings vLLM will run with and ``environment`` the server's environment
    (both as the rendered service's launcher reads them: ``rendered.service``), ``secrets``
    where the secrets are (their values only in memory), ``rollback_target`` the newest
    known-good revision (None on a host where nothing ever served)."""

    profile: Profile
    loaded: LoadedProfile
    entry: HostEntry
    rendered: Rendered
    findings: list[Any]
    image: ImageInfo
    effective: dict[str, Any]
    argv: list[str]
    environment: dict[str, str]
    host_facts: dict[str, Any]
    state: HostState
    secrets: Secrets
    port: int
    base_url: str
    service: str
    served_name: str
    timeout_s: float
    revision: int
    rollback_target: Revision | None
    parent_rendered: Rendered | None = None

    @property
    def compose_bytes(self) -> bytes:
        return self.rendered.compose_text.encode()

    @property
    def compose_sha256(self) -> str:
        return self.rendered.compose_sha256

    @property
    def api_key(self) -> str | None:
        return self.secrets.api_key

    @property
    def environment_from_host(self) -> bool:
        """Whether Compose on the host may add to the server's environment what the file does
        not hold: the service names an ``env_file``, or a value of it names a variable
        (``${VAR}``, :func:`servedeck.compose.document.interpolation_refs`)."""
        from servedeck.compose.document import interpolation_refs
        svc = self.rendered.service
        return "env_file" in svc.data or any(
            interpolation_refs(sc.raw)[0] for path, sc in self.rendered.doc.scalars.items()
            if path[:len(svc.path)] == svc.path)

    @property
    def record_secrets(self) -> Secrets:
        """What to keep out of this deploy's run record (which holds its profile resolved, and
        ``profile.diff.json`` its parent's value of each changed field): the secrets of every
        service its file runs (the server's own are :attr:`secrets`), those its profile holds
        whether the template writes them or not, and its parent's: those the parent's profile
        holds and those every service of the parent's own rendered file holds
        (:func:`render_parent`: whatever the template writes for it)."""
        found = self.secrets.including(_service_secrets(self.rendered.service), "file")  # values replaced later too
        for svc in self.rendered.services[1:]:
            found = found.including(_service_secrets(svc), f"service {svc.name}")
        found = found.including(self._profile_secrets(self.profile), "profile")
        if self.loaded.parent is None:
            return found
        parent = self.entry.place(self.loaded.parent.profile)
        found = found.including(self._profile_secrets(parent), f"parent {parent.name}")
        for svc in self.parent_rendered.services if self.parent_rendered is not None else ():
            found = found.including(_service_secrets(svc), f"parent {parent.name}, service {svc.name}")
        return found

    def _profile_secrets(self, profile: Profile) -> Secrets:
        """The secrets ``profile`` holds, read from its server command and its environment as
        the launcher builds them (not from a file)."""
        from servedeck.compose.service import Service
        argv = profile.server_command(facts=self.image.facts)
        svc = Service.read(profile.container.service, {"image": profile.image, "command": argv,
                                                       "environment": dict(profile.container.environment)},
                           self.image.facts)
        return find_secrets(argv, svc.server_env())


def _service_secrets(svc: Any) -> Secrets:
    """The secrets of one service of a rendered file (:class:`servedeck.compose.service.Service`):
    its entrypoint and command (Docker runs them as one argv), and every value its environment
    is given (one a later one replaces is still in the file), the value the process gets last."""
    given = [f"{e.key}={e.value}" for e in svc.environment if e.value is not None]
    gets = [f"{k}={v}" for k, v in svc.server_env().items()]
    return find_secrets(svc.process_argv(), given + gets)


def judge_in_image(host: RemoteHost, plan: "DeployPlan", reporter: Reporter) -> None:
    """vLLM's own parser as the last judge: the pinned image's launcher gives its final command
    and vLLM's argument parser and serve-argument validation judge it inside the image, on the
    host's engine, with no GPU (:func:`servedeck.host.inimage.dry_run`, cached per image and
    argv). An image that cannot run the introspection (no vLLM importable, e.g. a stand-in), and
    a launcher whose commands the dry run cannot judge, are reported and skipped.

    Raises:
        DeployError: vLLM rejects the command (its own message; nothing on the host changed).
    """
    from servedeck.host.inimage import dry_run
    launcher = plan.rendered.service.launcher or plan.profile.launcher.runs
    if launcher.in_image is None:
        reporter.info(f"in-image check skipped: the {launcher.name} launcher's commands are not judged in the image")
        return
    try:  # the image's own ENTRYPOINT runs the command: the launcher it starts is asked
        res = dry_run(host, plan.profile.image, plan.argv, image_id=plan.image.raw.get("id"))
    except ServedeckError as exc:
        reporter.info(f"in-image check skipped: {exc.message}")
        return
    if not res.ok:
        raise DeployError(f"vLLM in the pinned image rejects the server command ({res.stage}): "
                          f"{res.message}; nothing serving was changed",
                          hint=f"fix the profile, then `servedeck check --profile {plan.profile.name} "
                               "--in-image`")
    reporter.info(f"in-image check: vLLM accepts the command ({'cached' if res.cached else f'{res.seconds:.1f} s'})")


def published_port(profile: Profile) -> int:
    """The host port the profile publishes (``host_port``, else ``port``)."""
    return profile.container.host_port or profile.container.port


def api_base_url(host: RemoteHost, entry: HostEntry, port: int) -> str:
    """``http://<api_host, else the SSH hostname>:<port>``: where the served API is reached."""
    return f"http://{entry.api_host or host.resolve().hostname}:{port}"


def owner() -> str:
    """``user@machine`` of this process (lock owner, history ``who``)."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def render(profile: Profile, catalog: Catalog, project: Project, workdir: str | None = None) -> Rendered:
    """``profile`` rendered with the project's templates (:func:`servedeck.compose.render.render_profile`),
    named as the Compose project of host working directory ``workdir`` when given
    (:func:`servedeck.grammar.compose_project_name`)."""
    from servedeck.compose.render import render_profile
    from servedeck.grammar import compose_project_name
    return render_profile(profile, catalog, project.templates_dirs,
                          compose_name=compose_project_name(workdir) if workdir else None)


def render_and_check(profile: Profile, catalog: Catalog, project: Project, entry: HostEntry,
                     reporter: Reporter, rendered: Rendered | None = None) -> tuple[Rendered, list[Any]]:
    """Render ``profile`` (unless ``rendered`` is given) and run the compose check on the text;
    warnings are reported.

    Raises:
        DeployError: the check finds errors (listed), or the published port is not the
            inventory's.
    """
    from servedeck.compose.check import check_rendered, format_findings
    rendered = rendered if rendered is not None else render(profile, catalog, project, entry.workdir)
    findings = check_rendered(rendered, catalog, render_gid=entry.render_gid)
    errors = [f for f in findings if f.severity is Severity.error]
    for f in findings:
        if f.severity is Severity.warning:
            reporter.warn(f"{f.rule}: {f.message}")
    if errors:
        raise DeployError("the rendered compose file has errors; nothing was changed on the host:\n"
                          + format_findings(errors), hint="fix the profile, then `invoke check "
                          f"--profile {profile.name}`")
    if published_port(profile) != entry.port:
        raise DeployError(f"the profile publishes port {published_port(profile)} but the host "
                          f"serves on port {entry.port}",
                          hint="align container.port/host_port with the inventory's port")
    return rendered, findings


def resolve_image(host: RemoteHost, profile: Profile, catalog: Catalog, catalog_path: Path,
                  reporter: Reporter, inspected: dict[str, Any] | None = None) -> ImageInfo:
    """Make sure the host has the profile's image by digest (pull if missing), verify its
    repo digest, and read its facts (deeply when the catalog does not know the digest or it
    was just pulled). An unknown digest is added to the catalog.

    ``inspected``: the image's inspect document from the preflight round trip (facts
    ``image``); when it shows the image by this digest and the catalog knows it, no Engine
    connection is made here.

    Raises:
        DeployError: the pull failed (unknown digest, registry down), the image's repo digest
            is not the profile's, or the catalog is wrong about the digest (its entrypoint, vLLM
            version or model.yaml defaults: :meth:`ImageFacts.differences`); nothing that serves
            was touched.
    """
    import time

    from servedeck.host.docker import PullFailed
    from servedeck.host.images import read_image_facts
    t = time.time()
    repo_digest, digest = profile.image_ref.repo_digest, profile.image_ref.digest
    assert digest is not None  # a profile's image is pinned by digest (Profile._pinned)
    known = catalog.lookup(digest)
    pulled = False
    attrs = inspected if inspected and repo_digest in (inspected.get("RepoDigests") or []) else None
    if attrs is None:  # not seen by the preflight: ask the Engine, pull when missing
        attrs = host.engine.image(repo_digest)
        if attrs is None:
            pulled = True
            try:
                attrs = host.engine.pull(repo_digest)
            except PullFailed as exc:
                raise DeployError(f"pulling {profile.image} on host {host.name} failed: "
                                  f"{exc.message}; the running deployment was not touched") from None
    if not pulled:
        reporter.info("image present on the host")
    pull_s = round(time.time() - t, 3)
    digests = attrs.get("RepoDigests") or []
    if repo_digest not in digests:
        raise DeployError(f"the image on the host has repo digests {digests}, not {repo_digest}; "
                          "the running deployment was not touched")
    deep = known is None or pulled
    facts, raw = read_image_facts(host.engine if deep else None, repo_digest, profile, deep=deep, attrs=attrs)
    if known is None:
        reporter.info(f"added {digest[:19]} to the image catalog "
                      f"(launcher {facts.launcher}, vLLM {facts.vllm_version})")
        catalog.add(digest, facts)
        return ImageInfo(facts, raw, pulled, True, pull_s)
    problems = known.differences(facts, profile.launcher.config)
    if problems:  # the catalog must tell the truth about a digest
        raise DeployError("the image catalog is wrong about " + digest[:19] + ": "
                          + "; ".join(problems) + "; the running deployment was not touched",
                          hint=_wrong_entry_hint(catalog, digest, catalog_path))
    return ImageInfo(known, raw, pulled, False, pull_s)


def _wrong_entry_hint(catalog: Catalog, digest: str, catalog_path: Path) -> str:
    """What to do about a catalog entry the image contradicts: correct (or remove) it in the
    user's catalog; a shipped entry is not edited but replaced by one in the user's catalog."""
    found = catalog.source(digest)
    if found is not None and found[0] == catalog.shipped_path:
        return (f"the entry is the shipped catalog's ({found[0]}): record the image's own facts in "
                f"{catalog_path} (`invoke image-facts IMAGE`); an entry there replaces the shipped one")
    return f"correct {catalog_path} (or remove the entry: the next deploy re-reads the image)"


def render_parent(loaded: LoadedProfile, catalog: Catalog, project: Project,
                  workdir: str | None = None) -> Rendered | None:
    """The parent profile of ``loaded`` rendered with the project's templates (:func:`render`;
    a host's placement changes its name and ports, never its secrets); None for a profile
    without a parent, or whose parent does not render (:attr:`DeployPlan.record_secrets` then
    reads its profile)."""
    if loaded.parent is None:
        return None
    try:
        return render(loaded.parent.profile, catalog, project, workdir)
    except Exception:  # noqa: BLE001 - a second reading of the parent's secrets: its profile's stays
        return None


def build_plan(*, loaded: LoadedProfile, profile: Profile, rendered: Rendered, findings: list[Any],
               image: ImageInfo, host: RemoteHost, entry: HostEntry, host_facts: dict[str, Any],
               state: HostState, options: DeployOptions, catalog: Catalog | None = None,
               project: Project | None = None) -> DeployPlan:
    """Assemble the :class:`DeployPlan` from the computed parts (no I/O but ``resolve``); with
    ``catalog`` and ``project``, the parent profile rendered too (:func:`render_parent`)."""
    parent = render_parent(loaded, catalog, project, entry.workdir) if catalog and project else None
    environment, effective = rendered.service.server_env(), rendered.service.settings()
    argv = list(rendered.command)
    process = rendered.service.process_argv()  # the entrypoint's items too: a key given there is the server's
    good = state.known_good()
    port = published_port(profile)
    return DeployPlan(
        profile=profile, loaded=loaded, entry=entry, rendered=rendered, findings=findings, image=image,
        effective=effective, argv=argv, environment=environment,
        host_facts=host_facts, state=state, secrets=find_secrets(process, environment), port=port,
        base_url=api_base_url(host, entry, port), service=profile.container.service,
        served_name=profile.model.served_model_name[0],
        timeout_s=options.timeout_s or entry.ready_timeout_s,
        revision=next_revision(state.history), rollback_target=good[0] if good else None,
        parent_rendered=parent)


def preflight_paths(profile: Profile) -> list[str]:
    """Host paths the preflight must find: the local weights directory, or for a Hugging Face
    repo id served from a cache, the cache's host directory when it is a bind mount (a named
    volume is Docker's to create). Empty when there is nothing to look for."""
    cache = profile.model.hf_cache
    path = profile.model.weights_dir or (cache.source if cache and not cache.is_named else None)
    return [path] if path else []


def _port_problems(port: int, pinfo: dict[str, Any], ours: str | None, workdir: str) -> list[str]:
    """The published port is listening: fine when only this deployment's containers hold it
    (its Compose project is ``workdir``; by name when a container has no Compose label), else
    a problem naming each holder and, for a Compose container, the project it belongs to (a
    container of another project also holds ``container_name``, so compose could not replace it)."""
    holders = pinfo.get("containers") or []
    if not holders:
        return [f"port {port} is in use on the host by a process that is not a container of this "
                "deployment (stop it, or publish another port: container.host_port)"]
    dirs = pinfo.get("compose_workdirs") or {}
    foreign = []
    for name in holders:
        owner = dirs.get(name)
        if owner is not None:
            mine = Path(owner) == Path(workdir)
        else:  # no Compose label (or an older preflight): judge by name
            mine = name == ours or name.startswith(Path(workdir).name + "-")
        if not mine:
            foreign.append(f"{name} (Compose project in {owner})" if owner else name)
    if not foreign:
        return []
    return [f"port {port} is in use on the host by {', '.join(foreign)}, not by this host's deployment in "
            f"{workdir}: stop it there (docker compose --project-directory DIR down) or publish "
            "another port (container.host_port)"]


def judge_preflight(host: RemoteHost, entry: HostEntry, profile: Profile, facts: dict[str, Any],
                    options: DeployOptions) -> list[str]:
    """The problems host ``facts`` (:meth:`RemoteHost.preflight_facts`) show for deploying
    ``profile``: Docker and Compose v2, ``/dev/dri`` and its group vs ``group_add`` (GPU
    profiles), weights directory present and non-empty, port free or held by this deployment,
    free disk. Empty when the deploy may go on. (The lock is judged by the caller.)"""
    weights = next(iter(preflight_paths(profile)), None)
    port = published_port(profile)
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
    wfacts = facts["paths"].get(weights, {}) if weights else {"exists": True, "nonempty": True}
    if not wfacts.get("exists"):
        problems.append(f"the model weights directory {wfacts.get('path', weights)} does not exist "
                        "on the host")
    elif not wfacts.get("nonempty") and profile.model.weights_dir:
        problems.append(f"the model weights directory {wfacts.get('path', weights)} is empty")
    pinfo = facts.get("port") or {}
    if pinfo.get("listening"):
        problems += _port_problems(port, pinfo, profile.container.container_name, host.workdir)
    free = (facts.get("workdir") or {}).get("free_gib")
    if free is not None and free < options.min_free_gib:
        problems.append(f"only {free:.1f} GiB free under {host.workdir} (need {options.min_free_gib:g})")
    return problems


def host_facts_summary(facts: dict[str, Any]) -> dict[str, Any]:
    """The host facts a run record keeps (facts.json ``host``)."""
    caps = [c["cap_w"] for c in facts.get("gpu_power_caps") or [] if c.get("cap_w") is not None]
    return {"name": facts.get("host"), "hostname": facts.get("hostname"), "kernel": facts.get("kernel"),
            "docker_version": facts.get("docker_server_version"),
            "compose_version": facts.get("compose_version"),
            "gpu_devices": [{"path": d["path"], "gid": d["gid"]} for d in facts.get("dri_devices") or []],
            "gpu_power_cap_w": caps[0] if caps else None,
            "disk_free_gib": (facts.get("workdir") or {}).get("free_gib")}
