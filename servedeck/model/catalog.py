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

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write, read_bounded
from servedeck.yamlio import CATALOG_LIMITS, YAMLError, file_error, load_data, roundtrip


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


class CatalogFile(BaseModel):
    """Top level of ``deploy/images.yaml``."""

    model_config = ConfigDict(extra="forbid")

    images: dict[str, ImageFacts] = Field(default_factory=dict)


def _load_catalog(path: Path) -> CatalogFile:
    try:
        raw = load_data(read_bounded(path, CATALOG_LIMITS.max_bytes, what="YAML"), limits=CATALOG_LIMITS) or {}
        return CatalogFile.model_validate(raw)
    except FileNotFoundError:
        return CatalogFile()
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ServedeckError(err["msg"], file=str(path), field=loc,
                             hint="fix the image catalog entry") from None
    except YAMLError as exc:
        raise file_error(exc, path) from None


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

    def vllm_facts(self, digest: str | None) -> Any:
        """The extracted :class:`~servedeck.vllm.facts.VllmFacts` of ``digest``, or None.

        Raises:
            ServedeckError: the entry names a facts file that cannot be read.
        """
        entry = self.lookup(digest)
        if entry is None or not entry.vllm_facts:
            return None
        from servedeck.vllm.facts import load_facts
        return load_facts(self.path.parent / entry.vllm_facts)

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
        y = roundtrip(width=4096, indent=(2, 2, 0), preserve_quotes=True, limits=CATALOG_LIMITS)
        doc = (y.load(read_bounded(target, CATALOG_LIMITS.max_bytes, what="YAML")) if target.exists()
               else None)
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
