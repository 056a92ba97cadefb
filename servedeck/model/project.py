"""Where a servedeck project keeps its files.

A project (a user's profiles repository) is a directory with ``profiles/``, ``deploy/``
(``hosts.yaml``, ``images.yaml``), ``runs/`` and optionally ``templates/`` and ``schema/``. It
is found from ``servedeck --project DIR`` / ``$SERVEDECK_PROJECT`` or by walking up from the
current directory to the first directory holding ``profiles/``. ``$SERVEDECK_INVENTORY`` and
``$SERVEDECK_RUNS_DIR`` override the inventory file and the runs directory.

The embedded default project ships with servedeck: the repository's top-level ``profiles/``,
``deploy/images.yaml``, ``templates/`` and ``schema/`` are mapped into the wheel as
``servedeck/default_project/`` (``[tool.setuptools.package-dir]`` in ``pyproject.toml``). Each
of these the user's project lacks is taken from there: a user's own ``templates/`` overrides
the shipped templates, a directory without ``profiles/`` uses the shipped profiles and catalog.
Runs and the inventory are never taken from the package.

Nothing is ever written inside the package. The image catalog is layered
(:meth:`Project.catalog`): the shipped ``deploy/images.yaml`` under the user's, entry by entry,
so a project holding only ``profiles/`` still knows the shipped images and renders them as the
embedded default project does. What servedeck records about images (``image-facts``, a deploy's
first contact with a digest) goes into the project's ``deploy/images.yaml`` (``deploy/`` is
created there), or, when no project was found, into the per-user state directory
(:func:`state_dir`).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from servedeck.fsutil import state_dir

PROJECT_ENV = "SERVEDECK_PROJECT"


def is_source_checkout() -> bool:
    """True when servedeck runs from a checkout of its repository (editable install or
    ``PYTHONPATH``), where the shipped files are the repository's own; False for an installed
    wheel, whose shipped files are package data that nothing may write."""
    return shipped_root() == Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def shipped_root() -> Path:
    """The embedded default project's directory.

    In an installed wheel: ``servedeck/default_project`` (package data, read through
    ``importlib.resources``; wheels install unzipped, so it is a real directory). In a source
    checkout (editable install or ``PYTHONPATH``): the repository root, which holds the very
    files the wheel maps there.
    """
    import importlib.resources
    inside = importlib.resources.files("servedeck").joinpath("default_project")
    if inside.is_dir():
        return Path(str(inside))
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Project:
    """Paths of one servedeck project.

    Attributes:
        root: the project directory.
    """

    root: Path
    found: bool = True
    """False when no project was found (no ``--project``, no ``profiles/`` up from the current
    directory): ``root`` is then the current directory, and image facts are recorded in
    :func:`state_dir` instead."""

    @classmethod
    def find(cls, start: str | Path | None = None) -> "Project":
        """The project from ``$SERVEDECK_PROJECT``, else the nearest parent of ``start`` (cwd)
        that holds ``profiles/``, else ``start`` itself (whose missing parts then come from the
        embedded default project, see :func:`shipped_root`)."""
        env = os.environ.get(PROJECT_ENV)
        if env:
            if not Path(env).is_dir():
                from servedeck.errors import ServedeckError
                raise ServedeckError(f"${PROJECT_ENV} (or --project) is {env!r}: not a directory",
                                     hint="point it at your profiles repository")
            return cls(Path(env).resolve())
        here = Path(start or os.getcwd()).resolve()
        for cand in (here, *here.parents):
            if (cand / "profiles").is_dir():
                return cls(cand)
        return cls(here, found=(here / "deploy").is_dir())

    def _own_or_shipped(self, *parts: str) -> Path:
        own = self.root.joinpath(*parts)
        return own if own.exists() else shipped_root().joinpath(*parts)

    @property
    def profiles_dir(self) -> Path:
        """``profiles/`` of the project, else the shipped profiles."""
        return self._own_or_shipped("profiles")

    @property
    def catalog_path(self) -> Path:
        """The image catalog this project writes (and reads over the shipped one):
        ``deploy/images.yaml`` of the project, or ``images.yaml`` in :func:`state_dir` when no
        project was found. Never a file inside the package."""
        own = self.root / "deploy" / "images.yaml"
        if self.found or own.exists():
            return own
        return state_dir() / "images.yaml"

    @property
    def shipped_catalog_path(self) -> Path | None:
        """The shipped image catalog (read only), or None when it is :attr:`catalog_path`
        itself (the repository's own checkout)."""
        shipped = shipped_root() / "deploy" / "images.yaml"
        own = self.catalog_path
        if own.exists() and shipped.exists() and own.resolve() == shipped.resolve():
            return None
        return shipped

    def catalog(self):
        """The layered image catalog (:class:`servedeck.model.catalog.Catalog`): this project's
        :attr:`catalog_path` over :attr:`shipped_catalog_path`, with the locally built images.

        Raises:
            ServedeckError: a catalog file is not valid YAML or does not match the model.
        """
        from servedeck.model.catalog import Catalog
        return Catalog(self.catalog_path, local=self.local_images, shipped=self.shipped_catalog_path)

    @property
    def own_profiles_dir(self) -> Path:
        """``profiles/`` inside the project directory (where ``import`` writes; may not exist)."""
        return self.root / "profiles"

    @property
    def local_images(self):
        """Locally built images of this project (``.servedeck/``, untracked)."""
        from servedeck.model.local_images import LocalImages
        return LocalImages(self.root)

    @property
    def inventory_path(self) -> Path:
        env = os.environ.get("SERVEDECK_INVENTORY")
        return Path(env) if env else self.root / "deploy" / "hosts.yaml"

    @property
    def runs_dir(self) -> Path:
        env = os.environ.get("SERVEDECK_RUNS_DIR")
        return Path(env) if env else self.root / "runs"

    @property
    def templates_dir(self) -> Path:
        """``templates/`` of the project (the user's override), else the shipped templates."""
        return self._own_or_shipped("templates")

    @property
    def templates_dirs(self) -> tuple[Path, ...]:
        """Template search path: the project's ``templates/`` (when it exists) before the shipped
        templates, so a user's file overrides the shipped one of the same name."""
        own, shipped = self.root / "templates", shipped_root() / "templates"
        return (own, shipped) if own.is_dir() and own.resolve() != shipped.resolve() else (shipped,)

    @property
    def schema_dir(self) -> Path:
        """``schema/`` of the project, else the shipped JSON Schemas (what ``validate`` reads
        and ``schema --check`` compares); ``schema`` without ``--check`` writes
        :attr:`own_schema_dir`."""
        return self._own_or_shipped("schema")

    @property
    def own_schema_dir(self) -> Path:
        """``schema/`` inside the project directory (may not exist yet)."""
        return self.root / "schema"
