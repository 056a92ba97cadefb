"""servedeck as a user installs it: a wheel built from this repository, installed into a clean
virtualenv (no system site-packages, no PYTHONPATH), used from a directory outside the checkout
that holds only a copy of ``profiles/`` and ``deploy/``.

No shared services are needed (nothing here talks to Docker, sshd or the registry); the module
builds the wheel and the virtualenv once (pip installs every dependency) and its tests share them.
pip installs without byte-compiling (``PIP_COMPILE=0``: a third of each install's time here), and
the user's shell writes bytecode as Python imports (no ``PYTHONDONTWRITEBYTECODE``), as a shell
without that variable does.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A plain virtualenv with the wheel built from this checkout installed; returns its bin/."""
    from devtools.wheelenv import wheel_venv
    return wheel_venv(ROOT, tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def user_env(venv) -> dict[str, str]:
    """The environment of a user's shell with the venv activated: no PYTHONPATH, no
    PYTHONDONTWRITEBYTECODE, no SERVEDECK_* variables; pip does not byte-compile."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
           and not k.startswith("SERVEDECK_")}
    env["PIP_COMPILE"] = "0"
    env["PATH"] = f"{venv}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv.parent)
    return env


@pytest.fixture
def user_project(tmp_path) -> Path:
    """A user's profiles repository outside the checkout: copies of profiles/ and deploy/."""
    proj = tmp_path / "my-profiles"
    shutil.copytree(ROOT / "profiles", proj / "profiles")
    shutil.copytree(ROOT / "deploy", proj / "deploy")
    return proj


def servedeck(env, cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["servedeck", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_the_installed_package_is_the_wheel(venv, user_env, tmp_path):
    res = subprocess.run([str(venv / "python"), "-c", "import servedeck, sys; print(servedeck.__file__)"],
                         cwd=tmp_path, env=user_env, capture_output=True, text=True, check=True)
    assert res.stdout.startswith(str(venv.parent)), res.stdout
    assert not res.stdout.startswith(str(ROOT))


def test_render_check_schema_from_a_users_project(user_env, user_project):
    res = servedeck(user_env, user_project, "render", "--profile", "speed")
    assert res.returncode == 0, res.stderr
    assert "services:" in res.stdout and "checked: 0 errors" in res.stderr
    res = servedeck(user_env, user_project, "check", "--all")
    assert res.returncode == 0, res.stdout + res.stderr
    res = servedeck(user_env, user_project, "schema", "--check")
    assert res.returncode == 0, res.stderr
    assert "up to date" in res.stdout


def test_bad_profile_is_one_paragraph_and_exit_code(user_env, user_project):
    (user_project / "profiles" / "bad.yaml").write_text("extends: base\nengine:\n  gpu_memory_utilization: 1.5\n")
    res = servedeck(user_env, user_project, "render", "--profile", "bad")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "engine.gpu_memory_utilization" in res.stderr


def test_project_option_and_embedded_default(user_env, user_project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (user_project / "profiles" / "mine.yaml").write_text("extends: speed\nengine:\n  max_num_seqs: 2\n")
    # no profiles/ here: the embedded default project (the shipped profiles) answers
    res = servedeck(user_env, elsewhere, "profiles")
    assert res.returncode == 0 and "speed" in res.stdout and "mine" not in res.stdout
    # --project selects the user's repository from anywhere
    res = servedeck(user_env, elsewhere, "--project", str(user_project), "profiles")
    assert res.returncode == 0 and "mine" in res.stdout
    # found by walking up from a sub-directory
    sub = user_project / "deploy"
    res = servedeck(user_env, sub, "render", "--profile", "mine", "--flags")
    assert res.returncode == 0 and "vllm.max_num_seqs=2" in res.stdout.split()
    # the embedded default renders from an empty directory too
    res = servedeck(user_env, elsewhere, "render", "--profile", "speed")
    assert res.returncode == 0 and "services:" in res.stdout


def test_users_templates_override_the_shipped_ones(user_env, user_project):
    (user_project / "templates").mkdir()
    shipped = (ROOT / "templates" / "docker-compose.yml.j2").read_text()
    (user_project / "templates" / "docker-compose.yml.j2").write_text(
        "# rendered with my own template\n" + shipped)
    res = servedeck(user_env, user_project, "render", "--profile", "speed")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("# rendered with my own template\n")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                   cwd=repo, check=True, capture_output=True)


def test_pre_commit_hook_entries_in_a_users_repository(user_env, user_project):
    """Each hook of .pre-commit-hooks.yaml, run as pre-commit runs it (entry + file names when
    pass_filenames), in a git repository that is not servedeck's: passes on the shipped
    profiles, fails on a broken one."""
    hooks = YAML(typ="safe", pure=True).load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"] for h in hooks} == {"servedeck-profiles", "servedeck-check"}
    _git(user_project, "init", "-q")
    _git(user_project, "add", "-A")
    _git(user_project, "commit", "-q", "-m", "profiles")

    def run_hooks() -> dict[str, subprocess.CompletedProcess]:
        files = subprocess.run(["git", "ls-files"], cwd=user_project, capture_output=True, text=True,
                               check=True).stdout.split()
        out = {}
        for hook in hooks:
            assert hook["language"] == "python"
            import re
            matched = [f for f in files if re.search(hook["files"], f)]
            argv = shlex.split(hook["entry"]) + (matched if hook.get("pass_filenames", True) else [])
            out[hook["id"]] = subprocess.run(argv, cwd=user_project, env=user_env, capture_output=True,
                                             text=True)
        return out

    for hook_id, res in run_hooks().items():
        assert res.returncode == 0, f"{hook_id}: {res.stdout}{res.stderr}"
    (user_project / "profiles" / "broken.yaml").write_text("extends: speed\nengine:\n  max_num_seqs: -3\n")
    _git(user_project, "add", "-A")
    for hook_id, res in run_hooks().items():
        assert res.returncode != 0, hook_id
        assert "broken" in res.stdout + res.stderr, hook_id


def test_pre_commit_try_repo_in_a_users_repository(venv, user_env, user_project, tmp_path):
    """pre-commit itself (from PyPI) installs the hooks' environment from this repository
    (``language: python``) and runs them in a user's repository."""
    subprocess.run([str(venv / "pip"), "install", "-q", "pre-commit"], check=True, env=user_env,
                   cwd=tmp_path)
    env = {**user_env, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    _git(user_project, "init", "-q")
    _git(user_project, "add", "-A")
    _git(user_project, "commit", "-q", "-m", "profiles")

    def try_repo() -> subprocess.CompletedProcess:
        return subprocess.run(["pre-commit", "try-repo", str(ROOT), "--all-files"], cwd=user_project,
                              env=env, capture_output=True, text=True)

    res = try_repo()
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("Passed") == 2, res.stdout
    (user_project / "profiles" / "broken.yaml").write_text("extends: speed\nengine:\n  max_num_seqs: -3\n")
    _git(user_project, "add", "-A")
    res = try_repo()
    assert res.returncode != 0 and res.stdout.count("Failed") == 2, res.stdout
    assert "broken" in res.stdout
