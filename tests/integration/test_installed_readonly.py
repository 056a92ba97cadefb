"""The installed tool as a user meets it (issue 29): the wheel installed into a location nobody
may write (a virtualenv made read-only after the install), run by an unprivileged user (root
ignores file permissions) from a directory of the user's own that holds only ``profiles/``.

``image-facts`` reads the stand-in image (the Docker engine of scripts/test-services: run under
the services lock), ``render`` and ``check --all`` work, nothing is written under the installed
package, image facts land in the user's project (or, with no project, in the per-user state
directory), and ``speed`` renders byte for byte as the packaged default. One wheel build and
install for the module (about a minute, pip's cache warm).
"""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_UID = USER_GID = 65534  # nobody / nogroup

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="switches to an unprivileged user: needs root and setpriv")


def _tree(top: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``top``: (mode, size, mtime_ns), to prove nothing changed."""
    out = {}
    for p in sorted(top.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(top))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def installed():
    """(the read-only virtualenv's bin/, the installed package directory)."""
    from devtools.wheelenv import wheel_venv
    base = Path(tempfile.mkdtemp(prefix="servedeck-ro-"))
    base.chmod(0o755)  # the unprivileged user reaches the interpreter and the package
    try:
        bin_dir = wheel_venv(ROOT, base)
        venv = bin_dir.parent
        package = next(venv.glob("lib/python*/site-packages/servedeck"))
        for p in [venv, *venv.rglob("*")]:  # the location forbids writing
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        yield bin_dir, package
    finally:
        for p in [base, *base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def home(tmp_path) -> Path:
    """A home directory of the unprivileged user, with a working directory holding only a copy
    of ``profiles/`` and an empty one (both theirs)."""
    top = Path(tempfile.mkdtemp(prefix="servedeck-user-"))
    top.chmod(0o755)
    (top / "home").mkdir()
    shutil.copytree(ROOT / "profiles", top / "mine" / "profiles")
    (top / "empty").mkdir()
    for p in [top, *top.rglob("*")]:
        os.chown(p, USER_UID, USER_GID)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def run_as_user(installed, home: Path, cwd: str, *args: str) -> subprocess.CompletedProcess:
    """``servedeck ARGS`` as the unprivileged user (in the docker group, for image-facts)."""
    bin_dir, _ = installed
    groups = str(grp.getgrnam("docker").gr_gid) if _has_group("docker") else str(USER_GID)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home / "home"), "LANG": "C.UTF-8",
           "VIRTUAL_ENV": str(bin_dir.parent)}
    if os.environ.get("DOCKER_HOST"):
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    return subprocess.run(["setpriv", f"--reuid={USER_UID}", f"--regid={USER_GID}", f"--groups={groups}",
                           "--", str(bin_dir / "servedeck"), *args],
                          cwd=home / cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def _has_group(name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def standin_ref() -> str:
    from devtools import imagebuild
    return imagebuild.build_standin_image(progress=False)


def test_the_package_location_is_read_only_for_the_user(installed, home):
    _, package = installed
    probe = subprocess.run(["setpriv", f"--reuid={USER_UID}", f"--regid={USER_GID}", "--clear-groups", "--",
                            "touch", str(package / "probe")], capture_output=True, text=True, check=False)
    assert probe.returncode != 0 and "Permission denied" in probe.stderr


def test_render_and_check_all_from_a_directory_with_only_profiles(installed, home):
    _, package = installed
    before = _tree(package)
    mine = run_as_user(installed, home, "mine", "render", "--profile", "speed")
    packaged = run_as_user(installed, home, "empty", "render", "--profile", "speed")  # the embedded default
    assert mine.returncode == 0 and packaged.returncode == 0, mine.stderr + packaged.stderr
    assert "- vllm.speculative_config.num_speculative_tokens=3" in packaged.stdout
    assert mine.stdout == packaged.stdout
    checked = run_as_user(installed, home, "mine", "check", "--all")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr
    # hints name commands this installed tool has: no development task, no `invoke`
    assert "invoke " not in checked.stdout + checked.stderr + mine.stderr
    assert "the shipped catalog" in checked.stderr
    assert _tree(package) == before
    assert sorted(p.name for p in (home / "mine").iterdir()) == ["profiles"]


def test_image_facts_record_beside_the_users_project_or_in_the_state_dir(installed, home, standin_ref):
    _, package = installed
    before = _tree(package)
    digest = standin_ref.split("@", 1)[1]
    res = run_as_user(installed, home, "mine", "image-facts", standin_ref)
    assert res.returncode == 0, res.stdout + res.stderr
    catalog = home / "mine" / "deploy" / "images.yaml"
    assert f"recorded {digest} in {catalog}" in res.stderr
    assert digest in catalog.read_text()
    # the stand-in has no vLLM: its own facts are recorded, and it says why there is no vLLM surface
    assert res.stdout.startswith(f"{digest}  127.0.0.1:5000/servedeck/vllm-standin")
    # the project's catalog adds to the shipped one: the shipped profiles still render the same
    again = run_as_user(installed, home, "mine", "render", "--profile", "speed")
    packaged = run_as_user(installed, home, "empty", "render", "--profile", "speed")
    assert again.returncode == 0 and again.stdout == packaged.stdout
    # no project: the per-user state directory (the platform's: ~/.local/state/servedeck)
    res = run_as_user(installed, home, "empty", "image-facts", standin_ref, "--no-record")
    assert res.returncode == 0, res.stderr
    res = run_as_user(installed, home, "empty", "image-facts", standin_ref)
    assert res.returncode == 0, res.stderr
    state = home / "home" / ".local" / "state" / "servedeck"
    assert f"recorded {digest} in {state / 'images.yaml'}" in res.stderr
    assert digest in (state / "images.yaml").read_text()
    assert list((home / "empty").iterdir()) == []
    # the recorded facts are read back: check names the catalog they came from
    (home / "mine" / "profiles" / "on-standin.yaml").write_text(
        f"extends: cpu-4096\nimage: {standin_ref}\n")
    os.chown(home / "mine" / "profiles" / "on-standin.yaml", USER_UID, USER_GID)
    res = run_as_user(installed, home, "mine", "check", "--profile", "on-standin")
    assert f"the project's catalog ({catalog})" in res.stderr, res.stdout + res.stderr
    # --table writes servedeck's own tables: refused by an installed servedeck, nothing written
    res = run_as_user(installed, home, "mine", "image-facts", standin_ref, "--table")
    assert res.returncode == 2 and "never writes inside its package" in res.stderr
    assert _tree(package) == before
