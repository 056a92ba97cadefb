"""Verification rule families for compose files; the entry point is :mod:`servedeck.compose.check`."""
