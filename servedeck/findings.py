"""Verification findings as data: severity, rule id, path, message, hint.

The CLI renders them; tests assert on rule ids. Paths use Compose-document notation
(``services.exl3xpu.command[7]``) or profile-field notation (``engine.max_model_len``).
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict


class Severity(str, Enum):
    """How bad a finding is; ``error`` makes ``invoke check`` exit non-zero."""

    error = "error"
    warning = "warning"
    info = "info"


class Finding(BaseModel):
    """One result of a verification rule.

    Attributes:
        severity: error / warning / info.
        rule: stable rule id, ``family/name`` (e.g. ``yaml11/port-sexagesimal``).
        path: where in the document (``services.x.ports[0]``), or ``""`` for the whole file.
        message: what is wrong, with the offending value.
        hint: what to do about it.
        line: 1-based line in the source file when known.
        file: the file checked, when known.
        profile_file, profile_line, profile_field: for a finding of a rendered profile, the
            profile file, 1-based line and field whose value produced the rendered item (where
            to edit; :mod:`servedeck.compose.positions`); ``file``/``line``/``path`` are then
            the rendered compose file's.
    """

    model_config = ConfigDict(extra="forbid")

    severity: Severity
    rule: str
    path: str = ""
    message: str
    hint: str | None = None
    line: int | None = None
    file: str | None = None
    profile_file: str | None = None
    profile_line: int | None = None
    profile_field: str | None = None

    def render(self) -> str:
        """One line (plus an indented hint line) for terminal output."""
        loc = self.file or ""
        if self.line is not None:
            loc = f"{loc}:{self.line}" if loc else f"line {self.line}"
        path = self.path
        rendered = ""
        if self.profile_file is not None:  # where to edit first, the rendered item after
            rendered = f"\n        rendered: {loc} {self.path}".rstrip()
            loc, path = f"{self.profile_file}:{self.profile_line}", self.profile_field or ""
        head = f"{self.severity.value.upper():7} {self.rule:34} {loc + ' ' if loc else ''}{path}".rstrip()
        text = f"{head}{rendered}\n        {self.message}"
        if self.hint:
            text += f"\n        hint: {self.hint}"
        return text


def has_errors(findings: list[Finding]) -> bool:
    """True when any finding is an error."""
    return any(f.severity is Severity.error for f in findings)
