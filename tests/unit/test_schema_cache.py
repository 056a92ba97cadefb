"""The Compose-schema verdict cache: a valid document is remembered, an invalid one never."""

from __future__ import annotations

import datetime
from pathlib import Path

from servedeck.compose.check import check_compose_text
from servedeck.compose.rules.schema import _valid_marker

VALID = """services:
  api:
    image: example/vllm@sha256:""" + "a" * 64 + """
    ports: ["8000:8000"]
"""


def _schema_errors(text: str) -> list[str]:
    return [f.rule for f in check_compose_text(text, file="t.yml") if f.rule.startswith("schema/")]


def test_valid_document_is_cached_and_a_changed_one_is_validated(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SERVEDECK_CACHE_HOME", str(tmp_path))
    assert _schema_errors(VALID) == []
    markers = list((tmp_path / "compose-valid").iterdir())
    assert len(markers) == 1
    # the same document again: still valid, no second marker
    assert _schema_errors(VALID) == []
    assert len(list((tmp_path / "compose-valid").iterdir())) == 1
    # an invalid variant is validated (not taken from the cache) and never cached
    bad = VALID.replace("    ports:", "    portz:")
    assert _schema_errors(bad) == ["schema/unknown-key"]
    assert _schema_errors(bad) == ["schema/unknown-key"]
    assert len(list((tmp_path / "compose-valid").iterdir())) == 1


def test_the_cache_key_keeps_types_apart(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SERVEDECK_CACHE_HOME", str(tmp_path))
    assert _valid_marker({"a": 1}) != _valid_marker({"a": "1"})
    assert _valid_marker({"a": True}) != _valid_marker({"a": "true"})
    assert _valid_marker({"a": datetime.date(2024, 1, 1)}) != _valid_marker({"a": "2024-01-01"})
    assert _valid_marker({"a": 1, "b": 2}) == _valid_marker({"b": 2, "a": 1})


def test_unwritable_cache_still_checks(tmp_path: Path, monkeypatch) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")  # root ignores permission bits: a file where the directory goes fails for everyone
    monkeypatch.setenv("SERVEDECK_CACHE_HOME", str(not_a_dir))
    assert _schema_errors(VALID) == []
    assert _schema_errors(VALID.replace("    ports:", "    portz:")) == ["schema/unknown-key"]
