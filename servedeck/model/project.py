"""Where a servedeck project keeps its files.

A project is a directory with ``profiles/``, ``deploy/`` (``hosts.yaml``, ``images.yaml``),
``runs/`` and ``templates/``. It is found from ``$SERVEDECK_PROJECT`` or by walking up from
the current directory to the first directory holding ``profiles/``. ``$SERVEDECK_INVENTORY``
and ``$SERVEDECK_RUNS_DIR`` override the inventory file and the runs directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


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
        that holds ``profiles/``, else ``start`` itself."""
        env = os.environ.get("SERVEDECK_PROJECT")
        if env:
            return cls(Path(env).resolve())
        here = Path(start or os.getcwd()).resolve()
        for cand in (here, *here.parents):
            if (cand / "profiles").is_dir():
                return cls(cand)
        return cls(here)

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profiles"

    @property
    def catalog_path(self) -> Path:
        return self.root / "deploy" / "images.yaml"

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
        own = self.root / "templates"
        return own if own.is_dir() else PACKAGE_ROOT / "templates"

    @property
    def schema_dir(self) -> Path:
        return self.root / "schema"
