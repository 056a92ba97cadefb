"""Verification rules for compose files, one module per rule family (``ports/*`` in
``ports.py``, ...); the entry point is :mod:`servedeck.compose.check`."""
