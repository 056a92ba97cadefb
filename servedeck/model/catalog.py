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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write, read_bounded
from servedeck.launchers import registry
from servedeck.launchers.base import Launcher, LauncherDefaults
from servedeck.yamlio import CATALOG_LIMITS, YAMLError, file_error, load_data, roundtrip


_DIGEST_RE = re.compile(r"^(?P<algo>[a-z0-9]+(?:[+._-][a-z0-9]+)*):(?P<hex>.*)$")
_DIGEST_LEN = {"sha256": 64, "sha512": 128}


@dataclass(frozen=True)
class ImageRef:
    """An image reference ``repository[:tag][@digest]`` split into its parts (no registry
    lookup; a profile's is pinned: :data:`servedeck.model.profile.IMAGE_RE`).

    Attributes:
        text: the reference as written. repository: ``ghcr.io/0xsero/exl3xpu``. tag: the
        optional tag (informational when a digest is given: the digest decides). digest:
        ``sha256:<64 hex>``, None when absent.
    """

    text: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> "ImageRef":
        name, _, digest = text.partition("@")
        last = name.rsplit("/", 1)[-1]
        tag = None
        if ":" in last:
            tag = last.split(":", 1)[1]
            name = name[: len(name) - len(tag) - 1]
        return cls(text, name, tag, digest or None)

    @classmethod
    def of(cls, value: Any) -> "ImageRef | None":
        """:meth:`parse` of a service's ``image`` value when it is a string, else None (absent,
        or a value Compose would refuse: the schema reports it)."""
        return cls.parse(value) if isinstance(value, str) else None

    @property
    def repo_digest(self) -> str:
        """``repository@digest``: the reference without its tag, as the Engine lists it in an
        image's ``RepoDigests`` and pulls it."""
        return f"{self.repository}@{self.digest}"

    def digest_problem(self) -> str | None:
        """Why the digest is malformed, or None when it is well formed (or absent)."""
        if self.digest is None:
            return None
        m = _DIGEST_RE.match(self.digest)
        if not m:
            return "a digest is ALGORITHM:HEX, e.g. sha256:<64 hex digits>"
        want = _DIGEST_LEN.get(m["algo"])
        if want is None:
            return f"unknown digest algorithm {m['algo']!r} (Docker uses sha256)"
        if not re.fullmatch(r"[0-9a-f]+", m["hex"]) or len(m["hex"]) != want:
            return f"{m['algo']} digest must be {want} lowercase hex digits, got {len(m['hex'])} characters"
        return None


Device = Literal["xpu", "cuda", "cpu"]
"""What an image's server runs on: an Intel GPU (``xpu``, needs /dev/dri), an NVIDIA GPU
(``cuda``) or the CPU."""


class ImageFacts(BaseModel):
    """What servedeck knows about one image digest.

    Attributes:
        repository: e.g. ``ghcr.io/0xsero/exl3xpu``.
        launcher: the name of the image's launcher (:mod:`servedeck.launchers.registry`).
        vllm_version: the vLLM version inside, e.g. ``0.26.1.dev0+g568afb3a1.d20260907.xpu``.
        device: ``xpu`` (needs /dev/dri), ``cuda``, or ``cpu``.
        entrypoint: the image ENTRYPOINT (exec form).
        default_port: the port the server listens on when no ``--port`` is given (None: the
            launcher's default port, :attr:`port`).
        launcher_defaults: model configs shipped in the image, by config path.
        note: where the facts come from.
        stand_in: True for images that only imitate a server (test stand-ins).
        cmd, workdir, env, labels: the image config (``docker image inspect`` ``Config``).
        binaries: helper programs found in the image (``curl``, ``wget``, ``python3``, ``bash``).
        vllm_facts: file (relative to the catalog file) holding the image's
            :class:`servedeck.vllm.facts.VllmFacts`, when they were extracted.
        user: the image's ``USER`` (``docker image inspect`` ``Config.User``; empty: root), None
            when not read.
        healthcheck: whether the image defines a ``HEALTHCHECK`` (``Config.Healthcheck``), None
            when not read.
        inferred: True when the facts were guessed from the repository and tag
            (:func:`infer_facts`), not read from the image.
    """

    model_config = ConfigDict(extra="forbid")

    repository: str
    launcher: str
    vllm_version: str
    device: Device
    entrypoint: list[str] = Field(default_factory=list)
    default_port: int | None = None
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
    user: str | None = None
    healthcheck: bool | None = None

    @field_validator("launcher")
    @classmethod
    def _known_launcher(cls, v: str) -> str:
        return registry.known_name(v)

    @property
    def port(self) -> int:
        """The port the server listens on without a port option: :attr:`default_port`, else
        the launcher's."""
        return self.default_port if self.default_port is not None else self.runs.default_port

    @property
    def release(self) -> tuple[int, int, int] | None:
        """The image's vLLM release as ``(major, minor, patch)``, None when :attr:`vllm_version`
        is unknown or not a release (:func:`servedeck.vllm.facts.release_of`)."""
        from servedeck.vllm.facts import release_of
        return release_of(self.vllm_version)

    @property
    def runs(self) -> Launcher:
        """The image's launcher: the one its ENTRYPOINT starts, else the one recorded by name."""
        return registry.of_image(self.entrypoint) or registry.named(self.launcher)

    def defaults_for(self, config: str | None) -> LauncherDefaults | None:
        """The launcher config shipped in the image that ``config`` names, or None
        (:meth:`servedeck.launchers.base.Launcher.defaults`)."""
        return self.runs.defaults(self.launcher_defaults, config)

    def differences(self, seen: "ImageFacts", config: str | None) -> list[str]:
        """What ``seen`` (the facts read from the image itself) says otherwise than these
        facts: the entrypoint, the vLLM version (when the image tells it) and the ``vllm:``
        defaults of the launcher config ``config`` (exl3xpu's ``model.yaml``); one line each,
        empty when they agree."""
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


def has_healthcheck(config: dict[str, Any]) -> bool:
    """Whether an image config (``docker image inspect`` ``Config``) defines a HEALTHCHECK
    (``Healthcheck.Test`` given and not ``["NONE"]``)."""
    test = (config.get("Healthcheck") or {}).get("Test") or []
    return bool(test) and test[0] != "NONE"


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
    """The image catalog loaded from a YAML file, optionally over the shipped catalog.

    Layers, first match wins, entry by entry: ``path`` (the project's, the one written),
    locally built images, then ``shipped`` (read only). An entry of the user's replaces the
    shipped entry of the same digest as a whole; every other shipped entry stays known.

    Args:
        path: ``deploy/images.yaml``; a missing file is an empty catalog.
        local: locally built images (:mod:`servedeck.model.local_images`): their facts are read
            from and written to ``.servedeck/images.yaml`` (untracked) instead of ``path``.
        shipped: the catalog shipped with servedeck (:meth:`servedeck.model.project.Project.catalog`),
            read under the others and never written; None: no shipped layer.
        label: what ``path`` is, as :meth:`describe_source` names it (``your per-user catalog``
            for the one in the per-user state directory).

    Raises:
        ServedeckError: when a file is not valid YAML or does not match :class:`CatalogFile`.
    """

    def __init__(self, path: str | Path, local=None, shipped: str | Path | None = None,
                 label: str = "the project's catalog") -> None:
        self.path = Path(path)
        self.label = label
        self.local = local
        self.data = _load_catalog(self.path)
        self.local_data = _load_catalog(local.catalog_path) if local is not None else CatalogFile()
        self.shipped_path = Path(shipped) if shipped is not None else None
        self.shipped_data = _load_catalog(self.shipped_path) if self.shipped_path is not None else CatalogFile()

    def _layers(self) -> list[tuple[Path | None, CatalogFile]]:
        return [(self.path, self.data),
                (self.local.catalog_path if self.local is not None else None, self.local_data),
                (self.shipped_path, self.shipped_data)]

    def lookup(self, digest: str | None) -> ImageFacts | None:
        """Facts for ``sha256:<hex>``, or None when the digest is unknown."""
        found = self.source(digest)
        return found[1] if found is not None else None

    def source(self, digest: str | None) -> tuple[Path, ImageFacts] | None:
        """(the catalog file whose entry is used, the facts) for ``digest``, or None."""
        if not digest:
            return None
        for path, data in self._layers():
            facts = data.images.get(digest)
            if facts is not None and path is not None:
                return path, facts
        return None

    def describe_source(self, digest: str | None) -> str | None:
        """Which catalog the facts of ``digest`` come from, as a user reads it: ``the shipped
        catalog (PATH)``, ``the project's catalog (PATH)``, ``your per-user catalog (PATH)``,
        ``the catalog of local builds (PATH)``; None when
        the digest is unknown."""
        found = self.source(digest)
        if found is None:
            return None
        path = found[0]
        if path == self.shipped_path:
            kind = "the shipped catalog"
        elif self.local is not None and path == self.local.catalog_path:
            kind = "the catalog of local builds"
        else:
            kind = self.label
        return f"{kind} ({path})"

    def vllm_facts_path(self, digest: str | None) -> Path | None:
        """The file of the extracted vLLM facts of ``digest`` (read by
        :func:`servedeck.vllm.facts.image_vllm_facts`), relative to the catalog file the entry
        comes from, or None when none were extracted."""
        found = self.source(digest)
        if found is None or not found[1].vllm_facts:
            return None
        return found[0].parent / found[1].vllm_facts

    def add_with_vllm_facts(self, digest: str, facts: ImageFacts, vllm: Any) -> None:
        """Write ``vllm`` (a VllmFacts) to ``image-facts/<algo>-<hex>.json`` beside the catalog
        file, point ``facts.vllm_facts`` at it and :meth:`add` the entry (both writes atomic).

        Raises:
            OSError: when a file cannot be written.
        """
        rel = f"image-facts/{digest.replace(':', '-')}.json"
        out = self._target(digest).parent / rel
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
        target = self._target(digest)
        if target != self.path:
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

    def _target(self, digest: str) -> Path:
        """The file an entry for ``digest`` is written to: ``.servedeck/images.yaml`` for a
        local build, else :attr:`path` (never the shipped catalog)."""
        if self.local is not None and self.local.owns(digest):
            return self.local.catalog_path
        return self.path


# ----------------------------------------------------------------------------- first contact

_CUDA_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "NVIDIA_REQUIRE_CUDA")
"""Variables the NVIDIA CUDA base images set in their ENV (``nvidia/cuda`` Dockerfiles), which
every image built on them inherits."""


def image_device(reference: str, *, labels: dict[str, str] | None = None, env: dict[str, str] | None = None,
                 vllm_version: str | None = None) -> Device | None:
    """The device an image is built for, from what the image says about itself: ``xpu`` or
    ``cpu`` in its reference, labels or vLLM version (``0.26.1.dev0+...xpu``, ``vllm-cpu``);
    ``cuda`` when its ENV is the CUDA base images' or its vLLM version names CUDA (``+cu128``);
    None when nothing says (the caller decides: a profile's devices, or the repository hints).
    """
    blob = " ".join([reference, *(labels or {}).values(), vllm_version or ""]).lower()
    if "xpu" in blob:
        return "xpu"
    if "cpu" in blob:
        return "cpu"
    if any(k in (env or {}) for k in _CUDA_ENV) or "+cu" in (vllm_version or "") or "cuda" in blob:
        return "cuda"
    return None


def image_facts(catalog: Catalog | None, image: ImageRef | None) -> ImageFacts | None:
    """The facts of ``image``: the catalog's for its digest, else inferred from its repository
    and tag (:func:`infer_facts`, marked ``inferred``), else None (no image, or nothing to infer)."""
    if image is None:
        return None
    facts = catalog.lookup(image.digest) if (catalog is not None and image.digest) else None
    return facts if facts is not None else infer_facts(image.repository, image.tag)


def infer_facts(repository: str, tag: str | None) -> ImageFacts | None:
    """Facts guessed from an image's repository and tag when its digest is unknown and no Docker
    engine can be asked (``inferred=True``): the launcher whose repository hints match
    (:func:`servedeck.launchers.registry.of_repository`), its start as the entrypoint and its
    default port, the hint's device (``xpu`` when the tag says so), and the vLLM version of the
    tag's ``vX.Y.Z`` when the launcher's images are tagged by vLLM release, else ``"unknown"``.
    Returns None when no hint matches: an image whose repository merely mentions vLLM (a local
    build, a stand-in) is not guessed at, and the unknown-digest finding says so.

    Example: ``("vllm/vllm-openai", "v0.11.0")`` → launcher vllm, device cuda, vLLM 0.11.0,
    entrypoint ``vllm serve``.
    """
    import re
    found = registry.of_repository(repository)
    if found is None:
        return None
    launcher, device = found
    m = re.search(r"v?(\d+\.\d+(?:\.\d+)?)", tag or "") if launcher.tag_is_vllm_version else None
    version = m[1] if m else "unknown"
    if "xpu" in (tag or "").lower() and device == "cuda":
        device = "xpu"
    return ImageFacts(repository=repository, launcher=launcher.name, vllm_version=version,
                      device=device,
                      entrypoint=list(launcher.start), default_port=launcher.default_port, inferred=True,
                      note=f"inferred from the repository and tag {tag or '(none)'}")
