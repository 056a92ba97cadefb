"""The per-host command line the fleet layer runs for each host (the CLI boundary).

Everything the fleet does on one host (deploy, rollback, bench, ab) is servedeck's own CLI,
run as a subprocess by Ansible (``ansible.builtin.command`` delegated to the controller) or
by the sweep's experiment runner. :func:`servedeck_command` is the only place that spells
how that CLI is started.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: the directory holding servedeck's ``tasks.py`` (the repository root of this package)
TASKS_ROOT = Path(__file__).resolve().parents[2]


def servedeck_command(*args: str) -> list[str]:
    """argv that runs servedeck's CLI task ``args`` (e.g. ``("deploy", "--host", "b70", ...)``).

    Today the CLI is the invoke task collection in the repository's ``tasks.py``, run with
    this interpreter (``python -m invoke -r ROOT ...``), so that the current ``PYTHONPATH``
    and virtualenv apply to the subprocess too.

    Returns:
        a list of strings for :func:`subprocess.run` or Ansible's ``command: argv:``.
    """
    return [sys.executable, "-m", "invoke", "-r", str(TASKS_ROOT), *[str(a) for a in args]]
