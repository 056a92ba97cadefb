"""servedeck.yamlio.load_data: libyaml's speed, ruamel's YAML 1.2 reading."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from servedeck.yamlio import load_data, read_yaml_file

ROOT = Path(__file__).resolve().parents[2]
DATA_FILES = sorted([*ROOT.glob("profiles/*.yaml"), *ROOT.glob("deploy/**/*.yaml")])


def test_libyaml_is_installed_and_used():
    """pyproject's ruamel.yaml.clib is what makes load_data fast; without it every load falls
    back silently, so its absence is a packaging defect worth a failing test."""
    assert YAML(typ="safe").Parser.__module__.startswith("ruamel.yaml.clib")


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_same_data_as_the_pure_yaml_1_2_loader(path):
    text = path.read_text(encoding="utf-8")
    assert load_data(text) == YAML(typ="safe", pure=True).load(text)


@pytest.mark.parametrize("text, expected", [
    # YAML 1.2 allows ':' inside a plain scalar in a flow collection; libyaml (YAML 1.1) refuses it
    ("ports: [2122:22, \"8100:8100\"]\n", {"ports": ["2122:22", "8100:8100"]}),
    ("hosts: {b70: {ssh: a:b}}\n", {"hosts": {"b70": {"ssh": "a:b"}}}),
    # YAML 1.2 scalars, resolved the same on both paths
    ("a: yes\nb: 0o17\nc: 017\nd: 1:20\ne: ~\n", {"a": "yes", "b": 15, "c": 17, "d": "1:20", "e": None}),
])
def test_yaml_1_2_reading_where_libyaml_differs_or_agrees(text, expected):
    assert load_data(text) == expected


def test_errors_come_from_the_pure_parser_with_the_source_line(tmp_path):
    with pytest.raises(YAMLError) as err:
        load_data("a: 1\n  b: 2\n")
    assert "line 2" in str(err.value) and "b: 2" in str(err.value)  # the snippet only ruamel prints
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine:\n  max_model_len: [1, 2\n")
    from servedeck.errors import ServedeckError
    with pytest.raises(ServedeckError) as exc:
        read_yaml_file(bad)
    assert exc.value.file == str(bad) and exc.value.field == "line 3"
