"""Field cases set 3, compose files 43-48 and their clean twins (tests/fixtures/cases/field-3,
copies of the handed cases): each gives its expected finding (severity, must-mention words), each
clean twin gives no error and no warning.

The pinned (fictional) images' facts come from ``images.yaml`` beside the cases and reach the
checker as catalog entries, the way facts read from an image do (accelerator → device, the
image's ENV and USER). The log and benchmark cases of the set are tested in
test_startup_causes.py and test_bench_multi.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_check_field_faults import _header, case_catalog, judge_case

from servedeck.model.catalog import Catalog

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "field-3"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    # vLLM's images define no HEALTHCHECK (the cases' images.yaml: "binaries" only)
    return case_catalog(tmp_path_factory.mktemp("cat") / "images.yaml", CASES / "images.yaml", healthcheck=False)


CASE_FILES = sorted(p for p in CASES.glob("*.yml")
                    if _header(p.read_text()).get("expect") in ("error", "warning", "clean"))


def test_the_check_cases_are_found() -> None:
    assert [p.name[:3] for p in CASE_FILES] == ["43-", "43b", "44-", "44b", "47-", "48-"]


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.name)
def test_each_fault_gives_its_finding_and_each_clean_twin_none(path: Path, catalog: Catalog) -> None:
    judge_case(path, catalog)
