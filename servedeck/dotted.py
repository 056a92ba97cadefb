"""Nested mappings as dotted paths (``{"engine": {"max_model_len": 1}}`` →
``{"engine.max_model_len": 1}``): profile fields, run-record fields, compared settings.

Standard library only: ``show`` flattens run records without importing the YAML layer
(:mod:`servedeck.yamlio`, which re-exports :func:`flatten`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["flatten"]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings to dotted paths; lists, scalars and empty mappings are leaves.

    ``{"engine": {"max_model_len": 1}}`` → ``{"engine.max_model_len": 1}``.
    """
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
    elif prefix or not isinstance(value, dict):
        out[prefix] = value
    return out
