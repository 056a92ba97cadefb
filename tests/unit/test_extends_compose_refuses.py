"""An ``extends`` Compose cannot resolve is an error of the check, in every spelling: a service
the file (or the other file it names) does not define, a chain that comes back to itself, or
another file that cannot be read or parsed. What Compose says of each (v2.40.3, ``docker compose
config``): 'cannot extend service "a" in FILE: service "nothere" not found'; 'Circular
reference: a in FILE, extends a in FILE'; 'open FILE: no such file or directory', 'read FILE: is
a directory', 'failed to parse FILE: ...'; of an empty FILE: 'no services section'."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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
    f"services:\n  a:\n    image: {PIN}\n    extends: {{file: other.yml, service: x}}\n",  # text: no file read
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


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True).returncode == 0


UNREADABLE = {  # the other file as written → what the check says of it, in its message
    "missing": (None, "cannot be read"),
    "a directory": ("dir", "cannot be read"),
    "broken YAML": ("services:\n  x: [\n", "not valid YAML"),
    "not UTF-8": (b"services:\n  x:\n    image: \xff\n", "not UTF-8"),
    "a duplicate key": (f"services:\n  x:\n    image: {PIN}\n    image: {PIN}\n", "cannot be read"),
}


def _write_other(tmp_path: Path, content) -> None:
    other = tmp_path / "conf" / "other.yml"
    other.parent.mkdir(exist_ok=True)
    if content == "dir":
        other.mkdir()
    elif isinstance(content, bytes):
        other.write_bytes(content)
    elif content is not None:
        other.write_text(content)


@pytest.mark.parametrize("case", sorted(UNREADABLE))
@pytest.mark.parametrize("spelling", ["{file: conf/other.yml, service: x}",
                                      "\n      file: 'conf/other.yml'\n      service: x"])
def test_a_base_in_a_file_that_cannot_be_read_is_an_error_at_its_file_key(tmp_path, case, spelling):
    content, says = UNREADABLE[case]
    _write_other(tmp_path, content)
    main = tmp_path / "compose.yml"
    main.write_text(f"services:\n  a:\n    image: {PIN}\n    extends: {spelling}\n")
    _, findings = check_compose_file(main)
    found = [f for f in findings if f.rule.startswith("deps/")]
    assert [(f.rule, f.path, f.severity.value) for f in found] == [
        ("deps/extends-file-unreadable", "services.a.extends.file", "error")]
    assert says in found[0].message and "conf/other.yml" in found[0].message
    assert found[0].line == (4 if spelling.startswith("{") else 5)


def test_an_empty_other_file_defines_no_base(tmp_path):
    (tmp_path / "other.yml").write_text("# nothing yet\n")
    main = tmp_path / "compose.yml"
    main.write_text(f"services:\n  a:\n    image: {PIN}\n    extends: {{file: other.yml, service: x}}\n")
    _, findings = check_compose_file(main)
    assert [(f.rule, f.path) for f in findings if f.rule.startswith("deps/")] == [
        ("deps/extends-unknown-service", "services.a.extends")]


def test_one_unreadable_file_named_by_two_services_is_read_once_and_named_for_each(tmp_path):
    main = tmp_path / "compose.yml"
    main.write_text(f"services:\n  a:\n    image: {PIN}\n    extends: {{file: gone.yml, service: x}}\n"
                    f"  b:\n    image: {PIN}\n    extends: {{file: gone.yml, service: y}}\n")
    _, findings = check_compose_file(main)
    assert [(f.rule, f.path) for f in findings if f.rule.startswith("deps/")] == [
        ("deps/extends-file-unreadable", "services.a.extends.file"),
        ("deps/extends-file-unreadable", "services.b.extends.file")]


GOOD = f"services:\n  x:\n    image: {PIN}\n"
AGREE = {  # case → (files beside the compose file, the extends spec); Compose's verdict is the judge
    **{case: ({"conf/other.yml": content}, "{file: conf/other.yml, service: x}")
       for case, (content, _) in UNREADABLE.items()},
    "empty": ({"conf/other.yml": ""}, "{file: conf/other.yml, service: x}"),
    "readable": ({"conf/other.yml": GOOD}, "{file: conf/other.yml, service: x}"),
    "Compose's own tags": ({"other.yml": GOOD + "    ports: !override\n      - 80:80\n    environment: !reset {}\n"},
                           "{file: other.yml, service: x}"),
    "two documents": ({"other.yml": GOOD + "---\nservices:\n  y:\n    image: busybox\n"},
                      "{file: other.yml, service: y}"),
    "UTF-16": ({"other.yml": GOOD.encode("utf-16")}, "{file: other.yml, service: x}"),
    "beyond servedeck's size": ({"other.yml": GOOD + "#" * 1_100_000 + "\n"}, "{file: other.yml, service: x}"),
    "tilde is not home": ({"~/other.yml": GOOD}, "{file: ~/other.yml, service: x}"),
    "interpolated, .env": ({".env": "DIR=conf\n", "conf/other.yml": GOOD}, "{file: '${DIR}/other.yml', service: x}"),
    "dollar escaped": ({"a$b.yml": GOOD}, "{file: 'a$$b.yml', service: x}"),
    "dollar escaped, missing": ({}, "{file: 'a$$b.yml', service: x}"),
}


def _lay_out(root: Path, files: dict) -> None:
    for name, content in files.items():
        f = root / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.mkdir() if content == "dir" else f.write_bytes(content) if isinstance(content, bytes) else (
            f.write_text(content) if content is not None else None)


@pytest.mark.skipif(not _has_compose(), reason="Compose v2 not installed")
@pytest.mark.parametrize("case", sorted(AGREE))
def test_the_check_refuses_what_compose_refuses(tmp_path, case):
    files, spec = AGREE[case]
    _lay_out(tmp_path, files)
    main = tmp_path / "compose.yml"
    main.write_text(f"services:\n  a:\n    image: {PIN}\n    extends: {spec}\n")
    compose = subprocess.run(["docker", "compose", "-f", str(main), "-p", "ext", "config", "-q"],
                             capture_output=True, text=True, cwd=tmp_path)
    _, findings = check_compose_file(main)
    errors = [f.rule for f in findings if f.rule.startswith("deps/extends")]
    assert (compose.returncode != 0) == bool(errors), (compose.stderr, errors)


@pytest.mark.parametrize("beside", ["link", "target"])
def test_a_symlinked_compose_file_reads_its_other_files_beside_the_link(tmp_path, beside):
    """Compose's project directory is the directory of the file as given (``-f link/compose.yml``),
    not of its target: the other file is looked for there (the unit twin of the Compose cases)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").mkdir()
    (tmp_path / "real" / "compose.yml").write_text(
        f"services:\n  a:\n    image: {PIN}\n    extends: {{file: other.yml, service: x}}\n")
    (tmp_path / "link" / "compose.yml").symlink_to(tmp_path / "real" / "compose.yml")
    (tmp_path / ("link" if beside == "link" else "real") / "other.yml").write_text(GOOD)
    _, findings = check_compose_file(tmp_path / "link" / "compose.yml")
    rules = [f.rule for f in findings if f.rule.startswith("deps/")]
    assert rules == ([] if beside == "link" else ["deps/extends-file-unreadable"])


def test_an_absolute_path_is_not_said_to_be_relative(tmp_path):
    main = tmp_path / "compose.yml"
    main.write_text(f"services:\n  a:\n    image: {PIN}\n    extends: {{file: {tmp_path}/gone.yml, service: x}}\n")
    _, findings = check_compose_file(main)
    found = [f for f in findings if f.rule == "deps/extends-file-unreadable"]
    assert len(found) == 1 and "relative" not in found[0].message and str(tmp_path / "gone.yml") in found[0].message


@pytest.mark.parametrize("env, name", [
    (None, "${SITE_DIR}/o.yml"),  # the shell's
    ("SITE_DIR=gone\n", "${SITE_DIR}/o.yml"),  # the .env's, which the shell that runs Compose overrides
    (None, "${SITE_DIR:-gone}/o.yml"),
    ("BASE=conf\nSITE_DIR=${BASE}\n", "${SITE_DIR}/o.yml"),  # a .env value with a reference of its own
])
def test_a_name_with_a_variable_is_not_judged(tmp_path, env, name):
    """Whoever runs Compose may set the variable in the shell, over the ``.env`` too: the name's
    file is then not known here, so neither an error nor a base is claimed."""
    if env:
        (tmp_path / ".env").write_text(env)
    main = tmp_path / "compose.yml"
    main.write_text(f"services:\n  a:\n    image: {PIN}\n    extends: {{file: '{name}', service: x}}\n")
    _, findings = check_compose_file(main)
    assert [f.rule for f in findings if f.rule.startswith("deps/")] == []
