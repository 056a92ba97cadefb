"""Import then render gives the same document after `docker compose config` normalisation, for
every compose file in tests/fixtures (the seed, vLLM files, the field-2 cases).

The command is compared by meaning (:func:`servedeck.vllm.argv.meaning`): the renderer prints
``--flag value`` where the file said ``--flag=value`` and puts flags in its own order, which
vLLM reads the same way. Everything else is compared as Compose normalises it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from servedeck.compose.document import Environment, load_document
from servedeck.compose.importer import dump_profile_yaml, import_compose
from servedeck.compose.render import render_profile
from servedeck.errors import ServedeckError
from servedeck.model.catalog import Catalog
from servedeck.model.profile import ProfileStore
from servedeck.launchers import registry

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CATALOG = Catalog(ROOT / "deploy" / "images.yaml")
REFUSED = {"bad-vllm-latest.yml": "not pinned", "vllm-variables.yml": "uses the variable"}
def _one_service(path: Path) -> bool:
    """A profile is one service: a file of several (case 48: a front end beside the server) has
    no single-profile rendering to compare with."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    try:
        data = YAML(typ="safe").load(path.read_text())
    except YAMLError:
        return True  # not YAML 1.2 the way Compose reads it: kept, the test says how it fails
    return not isinstance(data, dict) or len(data.get("services") or {}) <= 1


#: every one-service compose file under tests/fixtures: hand-written ones, field cases, deployed
#: run records
COMPOSE_FILES = sorted(p for p in FIXTURES.rglob("*.yml") if "services:" in p.read_text() and _one_service(p))


def _config(path: Path) -> dict:
    """Compose's canonical form, or ``{"refused": message}`` when Compose refuses the file
    (case 30: count and device_ids together); the rendering must then be refused the same way."""
    out = subprocess.run(["docker", "compose", "-f", str(path), "-p", "rt", "config", "--format", "json",
                          "--no-interpolate"], capture_output=True, text=True, cwd=path.parent)
    if out.returncode != 0:
        return {"refused": out.stderr.strip()}
    return json.loads(out.stdout)


def _normalised(doc: dict, directory: Path, kind: str) -> dict:
    if "refused" in doc:
        return doc
    doc.pop("name", None)
    for svc in doc["services"].values():
        svc["command"] = registry.named(kind).meaning(svc.get("command") or [])
        # list and mapping forms of environment are the same values (quotes kept in both)
        svc["environment"] = Environment.parse(svc.get("environment")).values
        for vol in svc.get("volumes", []):
            vol["source"] = vol.get("source", "").replace(str(directory), "<dir>")
    return doc


def _round_trip(src: Path, tmp_path: Path) -> tuple[dict, dict, list[str]]:
    mapping, notes = import_compose(src, "rt", CATALOG)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "rt.yaml").write_text(dump_profile_yaml(mapping))
    rendered = render_profile(ProfileStore(tmp_path / "profiles").load("rt"), CATALOG, ROOT / "templates")
    for d, text in (("orig", src.read_text()), ("mine", rendered.compose_text)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "docker-compose.yml").write_text(text)
    kind = mapping["launcher"]["kind"]
    a = _normalised(_config(tmp_path / "orig" / "docker-compose.yml"), tmp_path / "orig", kind)
    b = _normalised(_config(tmp_path / "mine" / "docker-compose.yml"), tmp_path / "mine", kind)
    return a, b, notes


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_compose(), reason="Compose v2 not installed")
@pytest.mark.parametrize("src", [p for p in COMPOSE_FILES if p.name not in REFUSED],
                         ids=lambda p: str(p.relative_to(FIXTURES)))
def test_import_then_render_is_the_same_document(src: Path, tmp_path: Path) -> None:
    a, b, notes = _round_trip(src, tmp_path)
    assert a == b
    # nothing dropped silently: every service key of the source is in the rendering or a note
    svc = load_document(src).service()
    rendered = load_document(tmp_path / "mine" / "docker-compose.yml").service()
    for key in svc.order:
        assert key in rendered.order or any(key in n for n in notes), key


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_files_say_why(name: str) -> None:
    with pytest.raises(ServedeckError, match=REFUSED[name]):
        import_compose(FIXTURES / "compose" / name, "x", CATALOG)


@pytest.mark.skipif(not _has_compose(), reason="Compose v2 not installed")
def test_a_file_with_variables_imports_as_compose_reads_it(tmp_path: Path) -> None:
    """The refusal's way out works: Compose's own reading of the file (``config
    --no-normalize`` with the variables set) imports, and the rendering gives the server what
    the original gives it under the same environment: every ``$`` of a substituted value
    (``sk-x$y``) stays a literal."""
    src = FIXTURES / "compose" / "vllm-variables.yml"
    env = {**os.environ, "VLLM_KEY": "sk-x$y", "HF_TOKEN": "hf_abc", "PORT": "8123"}
    env.pop("TAG", None)
    resolved = tmp_path / "resolved.yml"
    resolved.write_text(subprocess.run(["docker", "compose", "-f", str(src), "-p", "rt", "config",
                                        "--no-normalize"], env=env, capture_output=True, text=True,
                                       check=True).stdout)
    a, b, _ = _round_trip(resolved, tmp_path)
    assert a == b

    def as_the_server_gets_it(path: Path) -> dict:
        out = subprocess.run(["docker", "compose", "-f", str(path), "-p", "rt", "config", "--format",
                              "json"], env=env, capture_output=True, text=True, check=True)
        svc = json.loads(out.stdout.replace("$$", "$"))["services"]["vllm"]  # Compose prints $ as $$
        return {"command": svc["command"], "environment": svc["environment"],
                "published": [p["published"] for p in svc["ports"]]}

    original = as_the_server_gets_it(src)
    assert original["command"][-3:] == ["chat-dev", "--api-key", "sk-x$y"]
    rendered = as_the_server_gets_it(tmp_path / "mine" / "docker-compose.yml")
    assert rendered["environment"] == original["environment"] == {"HF_TOKEN": "hf_abc", "PRICE": "$5"}
    vllm = registry.named(registry.default().name)
    assert vllm.meaning(rendered["command"]) == vllm.meaning(original["command"])
    assert rendered["published"] == original["published"] == ["8123"]
