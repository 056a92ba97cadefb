"""Every rendered key is a key: names that reach the compose file are checked against what
Compose accepts when the profile loads, and written as one YAML scalar whatever they hold; the
check flags a mapping key that is not what it appears to be (issue 28: an environment *name*
holding a newline and more YAML deployed a container with ``PidMode=host``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servedeck.compose.check import check_compose_text
from servedeck.compose.document import parse_document
from servedeck.compose.render import render_profile
from servedeck.errors import ServedeckError
from servedeck.model.catalog import Catalog
from servedeck.model.profile import ProfileStore

ROOT = Path(__file__).resolve().parents[2]
CATALOG = Catalog(ROOT / "deploy" / "images.yaml")
INJECTED = 'X: "1"\n    pid: host\n    privileged: true\n    cap_add: [SYS_ADMIN]\n    Y'


def _store(tmp_path: Path, body: str) -> ProfileStore:
    shutil.copy(ROOT / "profiles" / "base.yaml", tmp_path / "base.yaml")
    (tmp_path / "p.yaml").write_text("extends: base\n" + body)
    return ProfileStore(tmp_path)


@pytest.mark.parametrize("body, field", [
    ("container:\n  environment:\n    " + '"X: \\"1\\"\\n    pid: host\\n    Y"' + ": v\n", "container.environment"),
    ("container:\n  service: \"vllm:\\n    privileged: true\\n  other\"\n", "container.service"),
    ("container:\n  container_name: \"a\\n    pid: host\"\n", "container.container_name"),
    ("container:\n  volumes:\n    - {source: \"cache\\n    pid: host\", target: /c}\n", "container.volumes"),
    ("launcher_env:\n  \"A=B C\": x\n", "launcher_env"),
    ("container:\n  environment:\n    \"1X\": v\n", "container.environment"),
])
def test_a_name_compose_would_misread_is_refused_when_the_profile_loads(tmp_path, body, field):
    with pytest.raises(ServedeckError) as exc:
        _store(tmp_path, body).load("p")
    assert exc.value.field.startswith(field) and "is not valid" in exc.value.message


def test_a_key_is_one_scalar_in_the_rendered_file_whatever_it_holds(tmp_path):
    """Past the model (a profile built in code, a user's own validation turned off), the
    template still writes each key as one scalar: the injected text stays inside the name."""
    loaded = _store(tmp_path, "").load("p")
    c = loaded.profile.container
    hostile = loaded.profile.model_copy(update={"container": c.model_copy(update={
        "environment": {**c.environment, INJECTED: "1"}, "service": "vllm: {privileged: true}"})})
    text = render_profile(hostile, CATALOG, ROOT / "templates").compose_text
    doc = parse_document(text)
    svc = doc.service()
    assert svc.name == "vllm: {privileged: true}"
    assert INJECTED in svc.environment.values
    for key in ("pid", "privileged", "cap_add"):
        assert key not in svc.dump()
    rules = {f.rule for f in check_compose_text(text)}
    assert "keys/deceptive" in rules and rules & {"env/name", "env/quoted-name"}


def test_the_check_flags_a_key_that_reads_as_more_yaml():
    text = ('services:\n  vllm:\n    image: "ghcr.io/0xsero/exl3xpu@sha256:' + "1" * 64 + '"\n'
            '    environment:\n      "X: 1\\n      pid: host": "1"\n      GOOD: "1"\n'
            '    labels:\n      "a #b": x\n')
    found = {(f.rule, f.path, f.line) for f in check_compose_text(text)}
    assert ("keys/deceptive", "services.vllm.environment.X: 1\n      pid: host", 5) in found
    assert ("env/name", "services.vllm.environment.X: 1\n      pid: host", 5) in found
    assert ("keys/deceptive", "services.vllm.labels.a #b", 8) in found
    assert not any(p.endswith("GOOD") for _, p, _ in found)


def test_ordinary_names_render_as_before():
    for name in ProfileStore(ROOT / "profiles").names():
        text = render_profile(ProfileStore(ROOT / "profiles").load(name), CATALOG, ROOT / "templates").compose_text
        assert not {f.rule for f in check_compose_text(text)} & {"keys/deceptive", "env/name"}
