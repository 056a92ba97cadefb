"""servedeck installed as a user installs it: a wheel built from a checkout, in a plain
virtualenv (no system site-packages, so none of the base interpreter's ``.pth`` start-up hooks,
no editable-install finder). Shared by ``tests/integration/test_wheel.py`` and
``benchmarks/deploy_overhead.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

_LEFT_OUT = {".git", "runs", "build", "dist", ".pytest_cache", ".demo"}


def clean_env(*, compile_bytecode: bool) -> dict[str, str]:
    """This process's environment without ``PYTHONPATH``/``PYTHONHOME`` (an egg-info on a path
    would make pip think servedeck is installed already); ``PIP_COMPILE=0`` unless
    ``compile_bytecode`` (pip's default, byte-compiling what it installs, costs a third of an
    install's time here)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    if not compile_bytecode:
        env["PIP_COMPILE"] = "0"
    return env


def wheel_venv(root: Path, base: Path, *, compile_bytecode: bool = False) -> Path:
    """Build the wheel of the checkout ``root`` and install it (with its dependencies, from pip's
    configured index) into a new virtualenv under ``base``; returns the virtualenv's ``bin/``.

    The wheel is built from a copy of ``root`` (setuptools leaves ``build/`` and ``*.egg-info``
    beside the sources), without ``.git``, ``runs/`` or bytecode.

    Raises:
        subprocess.CalledProcessError: the build or an install failed.
    """
    src, dist, env_dir = base / "src", base / "dist", base / "venv"

    def ignore(directory: str, names: list[str]) -> list[str]:
        top = _LEFT_OUT if Path(directory) == root else set()
        return [n for n in names if n in top or n == "__pycache__" or n.endswith(".egg-info")]

    shutil.copytree(root, src, ignore=ignore)
    env = clean_env(compile_bytecode=compile_bytecode)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
                   check=True, cwd=base, env=env)
    wheels = list(dist.glob("servedeck-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one servedeck wheel in {dist}, found {wheels}")
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    bin_dir = env_dir / "bin"
    subprocess.run([str(bin_dir / "pip"), "install", "-q", str(wheels[0])], check=True, cwd=base, env=env)
    return bin_dir
