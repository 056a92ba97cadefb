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
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ENV = "SERVEDECK_PROJECT"


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
        return cls(here)

    def _own_or_shipped(self, *parts: str) -> Path:
        own = self.root.joinpath(*parts)
        return own if own.exists() else shipped_root().joinpath(*parts)

    @property
    def profiles_dir(self) -> Path:
        """``profiles/`` of the project, else the shipped profiles."""
        return self._own_or_shipped("profiles")

    @property
    def catalog_path(self) -> Path:
        """``deploy/images.yaml`` of the project. The shipped image catalog only for a directory
        with neither ``profiles/`` nor ``deploy/`` (the embedded default project as a whole):
        a deploy records new image facts here, and must never write into the package."""
        own = self.root / "deploy" / "images.yaml"
        if own.exists() or (self.root / "profiles").is_dir() or (self.root / "deploy").is_dir():
            return own
        return shipped_root() / "deploy" / "images.yaml"

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
