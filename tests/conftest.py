"""Shared test helpers: the project root, the seed's compose file, temp profile stores."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """A copy of the project's profiles/, deploy/, templates/, schema/ in a temp dir."""
    for name in ("profiles", "deploy", "templates", "schema"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("images"))
    return tmp_path
