"""The one exception family for user-facing errors.

The CLI (:mod:`servedeck.cli`) prints a :class:`ServedeckError` as one paragraph without a
traceback and exits non-zero; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class ServedeckError(Exception):
    """A problem the user can fix: bad input, an unreachable host, a failed deploy.

    Args:
        message: what is wrong, one sentence or a short paragraph.
        file: the file concerned (path as given by the user), if any.
        field: the field path inside that file (``engine.max_num_batched_tokens``,
            ``services.exl3xpu.command[7]``), if any.
        hint: what to do about it ("did you mean ...?", a command to run), if known.
        line: the 1-based line of ``file`` to edit, if known.
        rule: a stable id of the kind of problem (``profile/unknown-key``), as findings have.
        problems: several problems found at once (a profile with two bad fields); the error
            then reads as all of them, and its own fields are the first one's.
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 hint: str | None = None, line: int | None = None, rule: str | None = None,
                 problems: list[ServedeckError] | None = None) -> None:
        self.message = message
        self.file = file
        self.field = field
        self.hint = hint
        self.line = line
        self.rule = rule
        self.problems = problems or []
        super().__init__(self.render())

    @classmethod
    def several(cls, problems: list[ServedeckError]) -> ServedeckError:
        """One error standing for ``problems`` (one or more): the first one's fields, all of
        them in :meth:`render` and :meth:`findings`."""
        if len(problems) == 1:
            return problems[0]
        first = problems[0]
        return cls(first.message, file=first.file, field=first.field, hint=first.hint, line=first.line,
                   rule=first.rule, problems=problems)

    def render(self) -> str:
        """Return the one-paragraph text shown to the user (``file:line: field: message. hint``);
        several problems: one paragraph each."""
        if self.problems:
            return "\n".join(p.render() for p in self.problems)
        file = f"{self.file}:{self.line}" if self.file and self.line else self.file
        field = None if self.line and self.field == f"line {self.line}" else self.field
        where = ": ".join(str(p) for p in (file, field) if p)
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text = f"{text}\n  hint: {self.hint}"
        return text

    def findings(self, rule: str = "error") -> list:
        """The error as :class:`servedeck.findings.Finding` data (severity error), one per
        problem; ``rule`` names those without a rule of their own."""
        from servedeck.findings import Finding, Severity
        return [Finding(severity=Severity.error, rule=p.rule or rule, path=p.field or "", message=p.message,
                        hint=p.hint, line=p.line, file=p.file)
                for p in (self.problems or [self])]


class DeployError(ServedeckError):
    """A deploy phase failed; ``message`` says which phase and what was left on the host."""

    exit_code = 3
