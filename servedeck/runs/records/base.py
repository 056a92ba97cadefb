"""The base of the run-file models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Record"]


class Record(BaseModel):
    """Base of the run-file models: unknown fields are refused; the validation schema is built
    on first use (a command that reads one file does not pay for the others)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
