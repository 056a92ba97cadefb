"""The per-host command line the fleet layer runs for each host (the CLI boundary).

Everything the fleet does on one host (deploy, rollback, bench, ab) is servedeck's own CLI,
run on the controller by Ansible (``ansible.builtin.raw`` delegated to localhost, the argv
shell-quoted by the role) or by the sweep's experiment runner. :func:`servedeck_command` is the only place that spells
how that CLI is started.
"""

from __future__ import annotations

import sys

def servedeck_command(*args: str) -> list[str]:
    """argv that runs servedeck's CLI task ``args`` (e.g. ``("deploy", "--host", "b70", ...)``).

    The ``servedeck`` command line (:mod:`servedeck.cli`) run with this interpreter
    (``python -m servedeck ...``), so that the current virtualenv and ``PYTHONPATH`` apply to
    the subprocess too; the project is found as in the parent (``$SERVEDECK_PROJECT`` or the
    working directory).

    Returns:
        a list of strings for :func:`subprocess.run` or the role's ``servedeck_cli``.
    """
    return [sys.executable, "-m", "servedeck", *[str(a) for a in args]]
