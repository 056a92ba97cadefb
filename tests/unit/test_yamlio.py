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


# ------------------------------------------------------------------------------ bounds


from servedeck.yamlio import LIMITS, Limits, LimitError, compose_nodes, load_roundtrip  # noqa: E402

LOADERS = [load_data, load_roundtrip, compose_nodes]


@pytest.mark.parametrize("load", LOADERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("text, problem, line", [
    ("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b, *b]\n", "grows past 20 nodes through its aliases", 3),
    ("a: 1\nb: &loop {c: [1, *loop]}\n", "alias *loop refers to a node that contains it", 2),
    ("x:\n  " + "[" * 9 + "]" * 9 + "\n", "nesting deeper than 8 levels", 2),
    ("[" + "1, " * 25 + "1]\n", "grows past 20 nodes", 1),
    ("a: &a 1\nb: [*a, *a, *a, *a]\n", "more than 3 aliases", 2),
])
def test_each_bound_is_refused_at_its_line_by_every_loader(load, text, problem, line):
    small = Limits(max_bytes=4096, max_depth=8, max_nodes=20, max_aliases=3)
    with pytest.raises(LimitError) as err:
        load(text, limits=small)
    assert problem in err.value.problem
    assert err.value.problem_mark.line + 1 == line
    assert isinstance(err.value, YAMLError)  # every YAML error handler reports it with its line


def test_aliases_and_merge_keys_within_the_bounds_read_as_before():
    text = "x: &base {image: a, env: &e {K: '1'}}\ny:\n  <<: *base\n  env: *e\n  more: [*e, *e]\n"
    assert load_data(text) == YAML(typ="safe", pure=True).load(text)
    assert load_data(text)["y"] == {"image": "a", "env": {"K": "1"}, "more": [{"K": "1"}, {"K": "1"}]}


def test_expansion_counts_every_alias_as_the_whole_node_it_names():
    """9 aliases of a 10-node list are 90 nodes more, not 9: the bound is on what a walk visits."""
    text = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [" + ", ".join(["*a"] * 9) + "]\n"
    nodes = 1 + 1 + 10 + 1 + (1 + 9 * 10)  # the mapping, key a, list a, key b, list b expanded
    assert load_data(text, limits=Limits(max_nodes=nodes))["b"][8][8] == 9
    with pytest.raises(LimitError):
        load_data(text, limits=Limits(max_nodes=nodes - 1))


def test_the_text_size_bound_counts_utf8_bytes():
    with pytest.raises(LimitError, match="larger than 16 bytes"):
        load_data("a: ééééééééé\n", limits=Limits(max_bytes=16))
    assert load_data("a: éé\n", limits=Limits(max_bytes=16)) == {"a": "éé"}


def test_yaml_1_1_on_request_for_the_launchers_own_files():
    assert load_data("a: yes\nb: 017\n", version=(1, 1)) == {"a": True, "b": 15}
    assert load_data("a: yes\nb: 017\n") == {"a": "yes", "b": 17}


def test_a_file_beyond_the_bounds_or_not_utf8_is_a_user_error_naming_it(tmp_path):
    from servedeck.errors import ServedeckError
    deep = tmp_path / "deep.yaml"
    deep.write_text("a:\n  b: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(ServedeckError) as exc:
        read_yaml_file(deep)
    assert exc.value.file == str(deep) and exc.value.field == "line 2"
    assert f"nesting deeper than {LIMITS.max_depth} levels" in exc.value.message
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("name: café\n".encode("latin-1"))
    with pytest.raises(ServedeckError) as exc:
        read_yaml_file(latin1)
    assert "not UTF-8" in exc.value.message and "line 1, column 10" in exc.value.message
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(LIMITS.max_bytes + 1)
    with pytest.raises(ServedeckError, match="at most 1,048,576 bytes"):
        read_yaml_file(big)
