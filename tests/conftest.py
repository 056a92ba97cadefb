"""Shared test helpers: the project root, the seed's compose file, temp profile stores."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from run_samples import make_sample  # tests/run_samples.py: a module name no other test directory has

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def pytest_configure(config: pytest.Config) -> None:
    """One servedeck cache (``SERVEDECK_CACHE_HOME``: schema verdicts, in-image dry runs) per
    test session, so tests neither read nor fill the user's own cache."""
    if "SERVEDECK_CACHE_HOME" not in os.environ:
        config._servedeck_cache = tempfile.mkdtemp(prefix="servedeck-test-cache-")  # type: ignore[attr-defined]
        os.environ["SERVEDECK_CACHE_HOME"] = config._servedeck_cache  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's cache (only the one :func:`pytest_configure` made)."""
    made = getattr(config, "_servedeck_cache", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop("SERVEDECK_CACHE_HOME", None)


@pytest.fixture
def catalog_project(tmp_path: Path) -> Path:
    """A temp project with the repository's profiles/, templates/, schema/ and only
    deploy/images.yaml (no inventory: the test writes its own)."""
    for name in ("profiles", "templates", "schema"):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "images.yaml", tmp_path / "deploy" / "images.yaml")
    return tmp_path


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """A copy of the project's profiles/, deploy/, templates/, schema/ in a temp dir."""
    for name in ("profiles", "deploy", "templates", "schema"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("images"))
    return tmp_path


@pytest.fixture
def bench_sample():
    """:func:`run_samples.make_sample`, for tests that write benchmark files."""
    return make_sample
