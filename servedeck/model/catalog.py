"""The image catalog: known facts about image digests.

Each entry says which launcher an image uses, which vLLM runs inside, the launcher's
``model.yaml`` defaults (the settings a profile overrides), and the device it needs.
servedeck uses it to compute a profile's *effective* engine settings (image defaults +
overrides) and to check names against the right vLLM version. ``invoke deploy`` adds an
unknown digest after reading the facts from the pulled image.

File format: ``deploy/images.yaml`` (YAML 1.2), ``images: {<sha256:...>: ImageFacts}``.
Facts for the exl3xpu digests come from the image itself (``ghcr.io/0xsero/exl3xpu``: its
config, labels and ``models/*/model.yaml``), read as :mod:`servedeck.host.images` reads any image.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.yamlio import load_data


class LauncherDefaults(BaseModel):
    """The launcher's model config as shipped in the image (exl3xpu ``model.yaml``).

    Attributes:
        config: the positional config the defaults belong to (``models/qwen3.8-27b-exl3-4.00bpw``).
        served_model_name: the model.yaml ``served_model_name``.
        vllm: the ``vllm:`` mapping, vLLM dest names → values, in file order.
        env: the ``env:`` mapping the launcher applies over the container environment.
    """

    model_config = ConfigDict(extra="forbid")

    config: str
    served_model_name: str | None = None
    vllm: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str | None] = Field(default_factory=dict)


class ImageFacts(BaseModel):
    """What servedeck knows about one image digest.

    Attributes:
        repository: e.g. ``ghcr.io/0xsero/exl3xpu``.
        launcher: ``exl3xpu`` (scripts/serve.py contract) or ``vllm`` (``vllm serve`` entrypoint).
        vllm_version: the vLLM version inside, e.g. ``0.26.1.dev0+g568afb3a1.d20260907.xpu``.
        device: ``xpu`` (needs /dev/dri), ``cuda``, or ``cpu``.
        entrypoint: the image ENTRYPOINT (exec form).
        default_port: the port the server listens on when no ``--port`` is given.
        launcher_defaults: model configs shipped in the image, by config path.
        note: where the facts come from.
        stand_in: True for images that only imitate a server (test stand-ins).
        cmd, workdir, env, labels: the image config (``docker image inspect`` ``Config``).
        binaries: helper programs found in the image (``curl``, ``wget``, ``python3``, ``bash``).
        vllm_facts: file (relative to the catalog file) holding the image's
            :class:`servedeck.vllm.facts.VllmFacts`, when they were extracted.
        inferred: True when the facts were guessed from the repository and tag
            (:func:`infer_facts`), not read from the image.
    """

    model_config = ConfigDict(extra="forbid")

    repository: str
    launcher: Literal["exl3xpu", "vllm"]
    vllm_version: str
    device: Literal["xpu", "cuda", "cpu"]
    entrypoint: list[str] = Field(default_factory=list)
    default_port: int = 8000
    launcher_defaults: list[LauncherDefaults] = Field(default_factory=list)
    note: str | None = None
    stand_in: bool = False
    cmd: list[str] = Field(default_factory=list)
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    binaries: dict[str, bool] = Field(default_factory=dict)
    vllm_facts: str | None = None
    inferred: bool = False

    def defaults_for(self, config: str | None) -> LauncherDefaults | None:
        """The model config defaults for ``config`` (exact path match), or None."""
        for d in self.launcher_defaults:
            if d.config == config:
                return d
        return None


    def differences(self, seen: "ImageFacts", config: str | None) -> list[str]:
        """What ``seen`` (the facts read from the image itself) says otherwise than these
        facts: the entrypoint, the vLLM version (when the image tells it) and the launcher's
        ``model.yaml`` ``vllm:`` defaults for ``config``; one line each, empty when they agree."""
        problems = []
        if self.entrypoint and seen.entrypoint and self.entrypoint != seen.entrypoint:
            problems.append(f"entrypoint: catalog {self.entrypoint}, image {seen.entrypoint}")
        if seen.vllm_version != "unknown" and self.vllm_version != seen.vllm_version:
            problems.append(f"vLLM version: catalog {self.vllm_version}, image {seen.vllm_version}")
        mine, theirs = self.defaults_for(config), seen.defaults_for(config)
        if mine and theirs and mine.vllm != theirs.vllm:
            keys = sorted(k for k in set(mine.vllm) | set(theirs.vllm) if mine.vllm.get(k) != theirs.vllm.get(k))
            problems.append(f"model.yaml vllm defaults differ for {', '.join(keys)}")
        return problems


class CatalogFile(BaseModel):
    """Top level of ``deploy/images.yaml``."""

    model_config = ConfigDict(extra="forbid")

    images: dict[str, ImageFacts] = Field(default_factory=dict)


def _load_catalog(path: Path) -> CatalogFile:
    if not path.exists():
        return CatalogFile()
    try:
        raw = load_data(path.read_text(encoding="utf-8")) or {}
        return CatalogFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ServedeckError(err["msg"], file=str(path), field=loc,
                             hint="fix the image catalog entry") from None
    except Exception as exc:  # ruamel parse errors
        if isinstance(exc, ServedeckError):
            raise
        raise ServedeckError(f"not valid YAML: {exc}", file=str(path)) from None


class Catalog:
    """The image catalog loaded from a YAML file.

    Args:
        path: ``deploy/images.yaml``; a missing file is an empty catalog.
        local: locally built images (:mod:`servedeck.model.local_images`): their facts are read
            from and written to ``.servedeck/images.yaml`` (untracked) instead of ``path``.

    Raises:
        ServedeckError: when the file is not valid YAML or does not match :class:`CatalogFile`.
    """

    def __init__(self, path: str | Path, local=None) -> None:
        self.path = Path(path)
        self.local = local
        self.data = _load_catalog(self.path)
        self.local_data = _load_catalog(local.catalog_path) if local is not None else CatalogFile()

    def lookup(self, digest: str | None) -> ImageFacts | None:
        """Facts for ``sha256:<hex>``, or None when the digest is unknown."""
        if not digest:
            return None
        return self.data.images.get(digest) or self.local_data.images.get(digest)

    def vllm_facts_path(self, digest: str | None) -> Path | None:
        """The file of the extracted vLLM facts of ``digest`` (read by
        :func:`servedeck.vllm.facts.image_vllm_facts`), or None when none were extracted."""
        entry = self.lookup(digest)
        return self.path.parent / entry.vllm_facts if entry is not None and entry.vllm_facts else None

    def add_with_vllm_facts(self, digest: str, facts: ImageFacts, vllm: Any) -> None:
        """Write ``vllm`` (a VllmFacts) to ``image-facts/<algo>-<hex>.json`` beside the catalog
        file, point ``facts.vllm_facts`` at it and :meth:`add` the entry (both writes atomic).

        Raises:
            OSError: when a file cannot be written.
        """
        rel = f"image-facts/{digest.replace(':', '-')}.json"
        out = self.path.parent / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, vllm.model_dump_json(indent=1, by_alias=True) + "\n")
        self.add(digest, facts.model_copy(update={"vllm_facts": rel}))

    def add(self, digest: str, facts: ImageFacts) -> None:
        """Add or replace one entry and write the file atomically (a locally built digest goes
        to ``.servedeck/images.yaml``, every other one to the catalog file).

        The file is edited round-trip (ruamel.yaml), so the other entries, their order and the
        comments stay as they were.

        Raises:
            OSError: when the file cannot be written.
        """
        target = self.path
        if self.local is not None and self.local.owns(digest):
            target = self.local.catalog_path
            self.local_data.images[digest] = facts
        else:
            self.data.images[digest] = facts
        y = YAML(typ="rt")
        y.width = 4096
        y.preserve_quotes = True
        y.indent(mapping=2, sequence=2, offset=0)
        doc = y.load(target.read_text(encoding="utf-8")) if target.exists() else None
        if not doc:
            doc = y.load("# servedeck image catalog: facts per image digest (see servedeck/catalog.py).\n"
                         "images: {}\n")
        if doc.get("images") is None:
            doc["images"] = {}
        doc["images"][digest] = facts.model_dump(mode="json", exclude_defaults=True)
        buf = io.StringIO()
        y.dump(doc, buf)
        atomic_write(target, buf.getvalue())


# ----------------------------------------------------------------------------- first contact

#: Repository hints for images whose digest is unknown: (what the repository must contain,
#: launcher, device, entrypoint, default port). First match wins. A hint is either every one of
#: a tuple of substrings or, spelled ``=owner/name``, that exact repository on any registry.
#: Official images: ``vllm/vllm-openai`` (CUDA), ``vllm/vllm-openai-cpu`` / ``vllm-cpu*`` (CPU
#: builds), ``intel/vllm`` and ``*-xpu`` (Intel XPU builds, entrypoint is a wrapper that sources
#: oneAPI), ``exl3xpu`` (``python3 scripts/serve.py`` on port 8100). Any other repository that
#: merely mentions vLLM (a local build, a stand-in) is not guessed at: no facts, and the
#: unknown-digest finding says so.
_HINTS: tuple[tuple[tuple[str, ...] | str, str, str, tuple[str, ...], int], ...] = (
    (("exl3xpu",), "exl3xpu", "xpu", ("python3", "scripts/serve.py"), 8100),
    (("vllm", "xpu"), "vllm", "xpu", ("vllm", "serve"), 8000),
    ("=intel/vllm", "vllm", "xpu", ("vllm", "serve"), 8000),
    (("vllm", "cpu"), "vllm", "cpu", ("vllm", "serve"), 8000),
    ("=vllm/vllm-openai", "vllm", "cuda", ("vllm", "serve"), 8000),
)


def _hint_matches(hint: tuple[str, ...] | str, repo: str) -> bool:
    if isinstance(hint, str):
        exact = hint.removeprefix("=")
        return repo == exact or repo.endswith("/" + exact)
    return all(part in repo for part in hint)


def infer_facts(repository: str, tag: str | None) -> ImageFacts | None:
    """Facts guessed from an image's repository and tag when its digest is unknown and no Docker
    engine can be asked (``inferred=True``; the vLLM version is the tag's ``vX.Y.Z`` or
    ``"unknown"``). Returns None when nothing about the repository says vLLM.

    Example: ``("vllm/vllm-openai", "v0.11.0")`` → launcher vllm, device cuda, vLLM 0.11.0,
    entrypoint ``vllm serve``.
    """
    import re
    repo = repository.lower()
    for hint, launcher, device, entry, port in _HINTS:
        if _hint_matches(hint, repo):
            # the tag carries the vLLM version for vLLM's own builds; exl3xpu tags its own releases
            m = re.search(r"v?(\d+\.\d+(?:\.\d+)?)", tag or "") if launcher == "vllm" else None
            version = m[1] if m else "unknown"
            if "xpu" in (tag or "").lower() and device == "cuda":
                device = "xpu"
            return ImageFacts(repository=repository, launcher=launcher,  # type: ignore[arg-type]
                              vllm_version=version, device=device,  # type: ignore[arg-type]
                              entrypoint=list(entry), default_port=port, inferred=True,
                              note=f"inferred from the repository and tag {tag or '(none)'}")
    return None
