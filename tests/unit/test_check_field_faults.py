"""The check finds the faults users met in the field: each compose file of
``tests/fixtures/cases/field-2/`` gives its expected finding (severity, must-mention words), and
each clean twin gives no error and no warning.

The pinned (fictional) image's facts come from ``tests/fixtures/cases/field-2/images.yaml`` and are
fed to the checker as a catalog entry, the way facts read from an image reach it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from servedeck.compose.check import check_compose_text
from servedeck.model.catalog import Catalog, ImageFacts

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "field-2"
_DEVICE = {"nvidia": "cuda", "intel": "xpu", "intel-xpu": "xpu", "cpu": "cpu"}


def case_catalog(path: Path, images_yaml: Path, *, healthcheck: bool | None = None) -> Catalog:
    """A catalog at ``path`` holding the facts a field set's ``images.yaml`` assumes about its
    pinned images, as facts read from an image reach the checker (accelerator → device, the
    image's ENV and USER; ``healthcheck``: whether the images define a HEALTHCHECK, None: not
    said)."""
    cat = Catalog(path)
    for img in YAML(typ="safe").load(images_yaml.read_text())["images"]:
        repo, digest = img["ref"].split("@")
        cat.add(digest, ImageFacts(repository=repo, launcher="vllm", vllm_version=img["vllm_version"],
                                   device=_DEVICE[img["accelerator"]], entrypoint=img["entrypoint"],
                                   cmd=img["cmd"], default_port=img["default_port"],
                                   binaries=img["binaries"], env=img.get("env") or {},
                                   user="" if img.get("user") == "root" else img.get("user"),
                                   healthcheck=healthcheck))
    return cat


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    return case_catalog(tmp_path_factory.mktemp("cat") / "images.yaml", CASES / "images.yaml")


def _header(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"#\s*([a-z-]+):\s*(.*)", line)
        if m and m[1] not in out:
            out[m[1]] = m[2].strip()
    return out


CASE_FILES = sorted(p for p in CASES.glob("*.yml")
                    if _header(p.read_text()).get("expect") in ("error", "warning", "clean"))
"""The check cases; the import cases (``expect: import-...``) are tests/unit/test_import_reads_as_vllm.py's,
the ``.meta.yml`` sidecars describe log and benchmark-file cases."""


def test_the_check_cases_are_found() -> None:
    assert len(CASE_FILES) == 6  # 30, 31c, 32, 33, 33b, 34


def judge_case(path: Path, catalog: Catalog) -> None:
    """One compose case: its expected finding (severity and must-mention words in the message or
    hint), or, for a clean twin, no error and no warning. Shared with the later field sets."""
    text = path.read_text()
    head = _header(text)
    found = check_compose_text(text, file=path.name, catalog=catalog)
    if head["expect"] == "clean":
        bad = [f.render() for f in found if f.severity.value in ("error", "warning")]
        assert bad == [], "clean twin must give no error/warning"
        return
    words = [w.strip() for w in head["must-mention"].split(",")]
    hits = [f for f in found if f.severity.value == head["expect"]
            and all(w in f.message + " " + (f.hint or "") for w in words)]
    assert hits, f"no {head['expect']} mentioning {words}: {[f.render() for f in found]}"


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.name)
def test_each_fault_gives_its_finding_and_each_clean_twin_none(path: Path, catalog: Catalog) -> None:
    judge_case(path, catalog)
