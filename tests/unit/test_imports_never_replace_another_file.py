"""An imported file is kept beside its run under its own name; a second file of that name from
elsewhere must not replace it (its summary's sha256 would then describe a file no longer there)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servedeck.bench.record import import_external, import_external_curve
from servedeck.errors import ServedeckError
from servedeck.runs.store import create_run

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "field-2"


@pytest.fixture
def two_results(tmp_path):
    ok, failed = CASES / "42b-bench-import-all-ok.clean.json", CASES / "42-bench-import-failed-requests.json"
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    shutil.copy(ok, tmp_path / "d1" / "result.json")
    shutil.copy(failed, tmp_path / "d2" / "result.json")
    return tmp_path / "d1" / "result.json", tmp_path / "d2" / "result.json"


def test_a_second_file_of_the_same_name_is_refused_and_the_first_import_stays(tmp_path, two_results):
    first, other = two_results
    run = create_run(tmp_path / "runs", "base", "b70")
    mapped = import_external(run.path, first)
    before = {p.name: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}
    with pytest.raises(ServedeckError, match="already holds another imported file named external/result.json"):
        import_external(run.path, other)
    with pytest.raises(ServedeckError, match="already holds another imported file"):
        import_external_curve(run.path, other)
    after = {p.name: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}
    assert after == before, "nothing is written by a refused import"
    assert import_external(run.path, first)["sha256"] == mapped["sha256"]  # the same file again: fine
