"""Render's emission: one quoting policy (``servedeck.yamlio.scalar_style``) for the
template's ``q`` filter and for the ruamel-dumped pass-through keys; a user's own template
written for the first release (kept in tests/fixtures/templates-line-by-line) still renders the
same bytes as the shipped one."""

from __future__ import annotations

from pathlib import Path

import pytest

from servedeck.compose.document import parse_document
from servedeck.compose.render import render_profile, yaml_scalar
from servedeck.model.catalog import Catalog
from servedeck.model.profile import ProfileStore

ROOT = Path(__file__).resolve().parents[2]
CATALOG = Catalog(ROOT / "deploy" / "images.yaml")
STORE = ProfileStore(ROOT / "profiles")


@pytest.mark.parametrize("name", STORE.names())
def test_a_line_by_line_user_template_renders_the_same_bytes(name):
    p = STORE.load(name)
    shipped = render_profile(p, CATALOG, ROOT / "templates").compose_text
    own = render_profile(p, CATALOG, ROOT / "tests" / "fixtures" / "templates-line-by-line").compose_text
    assert own == shipped


@pytest.mark.parametrize("value, force, text", [
    ("unless-stopped", False, "unless-stopped"), ("992", False, '"992"'), ("yes", False, '"yes"'),
    ("Qwen3.8-27B", True, '"Qwen3.8-27B"'), ('"k"', False, "'\"k\"'"), ("a$b", False, '"a$$b"'),
    ("vllm.max_model_len=8192", False, "vllm.max_model_len=8192"), ("--gpu", False, "--gpu"),
    ("0123", False, '"0123"'), ("22:22", False, '"22:22"'),
])
def test_scalar_quoting(value, force, text):
    assert yaml_scalar(value, force) == text


def test_the_filter_and_the_dumper_quote_alike():
    from servedeck.yamlio import dump_yaml
    for value in ("unless-stopped", "992", "yes", '"k"', "0123", "22:22", "a b", "on", "1e3", "--x"):
        assert dump_yaml([value]).strip() == "- " + yaml_scalar(value), value


def test_dollar_and_quotes_survive_emission(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "extends: base\ncontainer:\n  environment:\n    K: '\"q\"'\n    P: a$b\n")
    for f in (ROOT / "profiles").glob("base.yaml"):
        (tmp_path / f.name).write_text(f.read_text())
    svc = parse_document(render_profile(ProfileStore(tmp_path).load("p"), CATALOG,
                                        ROOT / "templates").compose_text).service()
    assert svc.environment.values["K"] == '"q"' and svc.environment.values["P"] == "a$$b"
