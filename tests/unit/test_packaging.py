"""What the wheel ships and how a project finds its files (the slow, real wheel install is
``tests/integration/test_wheel.py``)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from servedeck.compose.rules.schema import COMPOSE_SPEC_SOURCE, compose_validator
from servedeck.model.project import Project, shipped_root

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed_for_the_wheel():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "servedeck").rglob("__init__.py")}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_default_project_maps_the_top_level_directories():
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    for name in ("profiles", "deploy", "templates", "schema"):
        assert mapping[f"servedeck.default_project.{name}"] == name
        assert (ROOT / name).is_dir()
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    assert data["servedeck.default_project.deploy"] == ["images.yaml"]  # not hosts.yaml, not images/
    assert PYPROJECT["project"]["scripts"]["servedeck"] == "servedeck.cli:main"


def test_compose_spec_schema_is_the_recorded_file():
    path = ROOT / "servedeck" / "compose" / "compose-spec.json"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == COMPOSE_SPEC_SOURCE["sha256"]
    source_md = (ROOT / "servedeck" / "compose" / "COMPOSE-SPEC-SOURCE.md").read_text()
    for value in COMPOSE_SPEC_SOURCE.values():
        assert value.split()[-1] in source_md
    assert compose_validator().schema["title"] == "Compose Specification"


def test_checkout_uses_the_repository_as_the_shipped_project():
    assert shipped_root() == ROOT


def test_missing_parts_come_from_the_shipped_project(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVEDECK_PROJECT", raising=False)
    monkeypatch.delenv("SERVEDECK_RUNS_DIR", raising=False)
    monkeypatch.delenv("SERVEDECK_INVENTORY", raising=False)
    monkeypatch.setenv("SERVEDECK_STATE_DIR", str(tmp_path / "state"))
    bare = Project.find(tmp_path)
    assert bare.root == tmp_path and not bare.found
    assert bare.profiles_dir == ROOT / "profiles"
    # no project: image facts are recorded in the per-user state directory, read over the shipped catalog
    assert bare.catalog_path == tmp_path / "state" / "images.yaml"
    assert bare.shipped_catalog_path == ROOT / "deploy" / "images.yaml"
    assert bare.templates_dirs == (ROOT / "templates",)
    assert bare.schema_dir == ROOT / "schema"
    assert bare.runs_dir == tmp_path / "runs"  # never inside the package
    assert bare.inventory_path == tmp_path / "deploy" / "hosts.yaml"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "templates").mkdir()
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    found = Project.find(sub)
    assert found.root == tmp_path and found.profiles_dir == tmp_path / "profiles"
    assert found.templates_dirs == (tmp_path / "templates", ROOT / "templates")
    # a project of its own writes its own catalog and reads the shipped one under it
    assert found.catalog_path == tmp_path / "deploy" / "images.yaml"
    assert found.shipped_catalog_path == ROOT / "deploy" / "images.yaml"
    # the repository's own checkout: one catalog, not layered over itself
    assert Project.find(ROOT).shipped_catalog_path is None


def _servedeck(*args: str, cwd: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVEDECK_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "servedeck", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_project_option_selects_the_repository(tmp_path):
    proj = tmp_path / "proj"
    (proj / "profiles").mkdir(parents=True)
    (proj / "profiles" / "solo.yaml").write_text((ROOT / "profiles" / "base.yaml").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = _servedeck("--project", str(proj), "profiles", cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[:3] == ["profile", "extends", "description"]
    assert "solo" in res.stdout and "speed" not in res.stdout
    shipped = _servedeck("profiles", cwd=elsewhere)
    assert "speed" in shipped.stdout and "solo" not in shipped.stdout
    bad = _servedeck("--project", str(tmp_path / "nope"), "profiles", cwd=elsewhere)
    assert bad.returncode == 2 and "not a directory" in bad.stderr
    bad_env = _servedeck("profiles", cwd=elsewhere, env_extra={"SERVEDECK_PROJECT": str(tmp_path / "nope")})
    assert bad_env.returncode == 2 and "not a directory" in bad_env.stderr
    assert "Traceback" not in bad_env.stderr


def test_users_template_overrides_one_file(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "base.yaml").write_text((ROOT / "profiles" / "base.yaml").read_text())
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "docker-compose.yml.j2").write_text(
        "# my template\n" + (ROOT / "templates" / "docker-compose.yml.j2").read_text())
    res = _servedeck("render", "--profile", "base", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("# my template\n")


@pytest.mark.parametrize("module", ["servedeck.cli", "tasks"])
def test_cli_module_imports_no_heavy_library(module):
    """The CLI's start-up: none of these load before a task needs them."""
    heavy = ("pydantic", "jsonschema", "rich", "scipy", "matplotlib", "docker", "paramiko", "httpx",
             "numpy", "jinja2", "ruamel")
    code = (f"import sys, {module}\n"
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""


def test_show_imports_the_models_of_the_files_it_reads_only(tmp_path):
    """``show`` of a run holding what a deploy and a bench leave (run.json, startup.json,
    bench.jsonl, the compose file; benchmarks/runs_scale.py) creates the models of run.json and
    startup.json, not the other ~70, and imports no YAML library."""
    run = tmp_path / "0001-cpu-4096-local"
    run.mkdir()
    for name in ("run.json", "startup.json", "bench.jsonl", "docker-compose.yml"):
        (run / name).write_bytes((ROOT / "tests" / "fixtures" / "runs-cpu" / run.name / name).read_bytes())
    code = ("import sys\n"
            "from servedeck.cli import show_lines\n"
            f"show_lines(__import__('pathlib').Path({str(run)!r}))\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('servedeck.runs.records.', 'ruamel')))))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["servedeck.runs.records.base", "servedeck.runs.records.run",
                                  "servedeck.runs.records.startup"]


def test_cli_imports_invoke_without_unittest_mock_and_mock_context_still_works():
    """invoke imports unittest.mock (and asyncio) for MockContext; servedeck.cli keeps it out
    of start-up, and both the real unittest.mock and invoke's MockContext work afterwards."""
    code = ("import sys, servedeck.cli\n"
            "print(sorted(m for m in ('unittest', 'unittest.mock', 'asyncio') if m in sys.modules))\n"
            "import unittest.mock, invoke.context\n"
            "ctx = invoke.context.MockContext(run={'true': invoke.Result('ok')})\n"
            "print(ctx.run('true').stdout, isinstance(ctx.run, unittest.mock.Mock))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["[]", "ok True"]


def test_check_all_in_worker_processes_gives_the_serial_findings(monkeypatch):
    """``check --all`` over many profiles forks workers; same findings, same order."""
    from servedeck import cli
    monkeypatch.setenv("SERVEDECK_PROJECT", str(ROOT))
    for cached in (cli.current_project, cli._store, cli._catalog):
        cached.cache_clear()
    names = cli._store().names()
    monkeypatch.setattr(cli, "PARALLEL_MIN_PROFILES", 10**9)
    serial_texts, serial = cli._check_profiles(names)
    monkeypatch.setattr(cli, "PARALLEL_MIN_PROFILES", 2)
    parallel_texts, parallel = cli._check_profiles(names)
    assert [f.model_dump() for f in parallel] == [f.model_dump() for f in serial]
    assert parallel_texts == serial_texts == [cli._render(n).compose_text for n in names]
    assert {f.file for f in serial} == {f"profile:{n}" for n in names}
    for cached in (cli.current_project, cli._store, cli._catalog):
        cached.cache_clear()


def test_hints_name_the_command_the_user_typed(tmp_path):
    """The same error, run as ``servedeck`` and as ``invoke``: its suggested command is spelled
    the way the user runs servedeck; checkout-only development tasks keep ``invoke``."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "base.yaml").write_text((ROOT / "profiles" / "base.yaml").read_text())
    as_servedeck = _servedeck("show", "latest", cwd=tmp_path)
    assert as_servedeck.returncode != 0
    assert "(servedeck deploy)" in as_servedeck.stderr and "invoke deploy" not in as_servedeck.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVEDECK_")}
    as_invoke = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "show", "latest"], cwd=tmp_path,
                               env={**env, "SERVEDECK_PROJECT": str(tmp_path), "PYTHONPATH": str(ROOT)},
                               capture_output=True, text=True)
    assert as_invoke.returncode != 0 and "(invoke deploy)" in as_invoke.stderr
    rendered = _servedeck("render", "--profile", "base", cwd=tmp_path)
    assert "(details: servedeck check --profile base)" in rendered.stderr


def test_as_typed_respells_only_servedecks_own_tasks(monkeypatch):
    from servedeck import cli
    monkeypatch.setattr(cli, "PROGRAM", "servedeck")
    assert (cli.as_typed("invoke status --host b70, then invoke image-build; invoke deploy-all")
            == "servedeck status --host b70, then invoke image-build; invoke deploy-all")
    monkeypatch.setattr(cli, "PROGRAM", "invoke")
    assert cli.as_typed("run `servedeck schema`") == "run `invoke schema`"


def test_servedeck_help_lists_only_core_options_that_mean_something_here(tmp_path):
    res = _servedeck("--help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    options = re.findall(r"^  (-\S.*?)\s{2,}", res.stdout, re.M)
    longs = {m for line in options for m in re.findall(r"--[a-z-]+", line)}
    assert longs == {"--complete", "--print-completion-script", "--project", "--debug", "--list-format",
                     "--help", "--list", "--version"}
    assert "Subcommands:" in res.stdout and "deploy" in res.stdout
    assert _servedeck("--echo", "profiles", cwd=ROOT).returncode == 0  # hidden options still parse
