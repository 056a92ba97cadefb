"""``python -m servedeck``: the ``servedeck`` command line (see :mod:`servedeck.cli`)."""

from servedeck.cli import main

main()
