"""An ``extends`` Compose cannot resolve is an error of the check, in every spelling: a service
the file (or the other file it names) does not define, or a chain that comes back to itself.
What Compose says of each (v2.40.3, ``docker compose config``): 'cannot extend service "a" in
FILE: service "nothere" not found'; 'Circular reference: a in FILE, extends a in FILE'."""

from __future__ import annotations

import pytest

from servedeck.compose.check import check_compose_file, check_compose_text

PIN = "busybox@sha256:" + "0" * 64


def _errors(text: str) -> dict[str, str]:
    return {f.rule: f.path for f in check_compose_text(text) if f.rule.startswith("deps/extends")}


@pytest.mark.parametrize("spec", ["nothere", "{service: nothere}", "{service: 'nothere'}"])
def test_a_base_the_file_does_not_define(spec):
    text = f"services:\n  a:\n    image: {PIN}\n    extends: {spec}\n"
    assert _errors(text) == {"deps/extends-unknown-service": "services.a.extends"}


@pytest.mark.parametrize("text, where", [
    (f"services:\n  a:\n    image: {PIN}\n    extends: a\n", "services.a.extends"),
    (f"services:\n  a:\n    image: {PIN}\n    extends: b\n  b:\n    image: {PIN}\n    extends: {{service: a}}\n",
     "services.a.extends"),
    (f"services:\n  x:\n    image: {PIN}\n  a:\n    image: {PIN}\n    extends: b\n  b:\n    extends: c\n"
     f"  c:\n    extends: a\n", "services.a.extends"),
])
def test_a_chain_that_comes_back_is_one_cycle(text, where):
    found = [f for f in check_compose_text(text) if f.rule == "deps/extends-cycle"]
    assert [f.path for f in found] == [where]
    assert "unknown-service" not in str(_errors(text))


def test_only_the_root_of_a_broken_chain_is_named():
    text = f"services:\n  a:\n    image: {PIN}\n    extends: b\n  b:\n    image: {PIN}\n    extends: gone\n"
    assert _errors(text) == {"deps/extends-unknown-service": "services.b.extends"}


@pytest.mark.parametrize("text", [
    f"services:\n  base:\n    image: {PIN}\n  a:\n    extends: base\n",
    f"services:\n  base:\n    image: {PIN}\n  a:\n    extends: {{service: base}}\n  b:\n    extends: a\n",
    f"services:\n  a:\n    image: {PIN}\n    extends: {{file: other.yml, service: x}}\n",  # a file not read: not judged
])
def test_an_extends_compose_resolves_or_cannot_judge_is_not_an_error(text):
    assert _errors(text) == {}


def test_a_base_in_another_file_is_judged_when_that_file_is_read(tmp_path):
    (tmp_path / "other.yml").write_text(f"services:\n  x:\n    image: {PIN}\n")
    main = tmp_path / "compose.yml"
    main.write_text(f"services:\n  a:\n    extends: {{file: other.yml, service: x}}\n"
                    f"  b:\n    image: {PIN}\n    extends: {{file: other.yml, service: y}}\n")
    _, findings = check_compose_file(main)
    assert [(f.rule, f.path) for f in findings if f.rule.startswith("deps/extends")] == [
        ("deps/extends-unknown-service", "services.b.extends")]
    assert "other.yml does not define" in next(f.message for f in findings if f.rule.startswith("deps/extends"))
