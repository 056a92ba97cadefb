"""The image catalog: known facts about image digests.

Each entry says which launcher an image uses, which vLLM runs inside, the launcher's
``model.yaml`` defaults (the settings a profile overrides), and the device it needs.
servedeck uses it to compute a profile's *effective* engine settings (image defaults +
overrides) and to check names against the right vLLM version. ``invoke deploy`` adds an
unknown digest after reading the facts from the pulled image.

File format: ``deploy/images.yaml`` (YAML 1.2), ``images: {<sha256:...>: ImageFacts}``.
Facts for the exl3xpu digests come from ``shared/reference/exl3xpu-image-facts.md`` §1, §6.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write


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


def _yaml() -> YAML:
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    return y


def _load_catalog(path: Path) -> CatalogFile:
    if not path.exists():
        return CatalogFile()
    try:
        raw = _yaml().load(path.read_text()) or {}
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
