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
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 hint: str | None = None) -> None:
        self.message = message
        self.file = file
        self.field = field
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        """Return the one-paragraph text shown to the user (``file: field: message. hint``)."""
        where = ": ".join(str(p) for p in (self.file, self.field) if p)
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text = f"{text}\n  hint: {self.hint}"
        return text


class DeployError(ServedeckError):
    """A deploy phase failed; ``message`` says which phase and what was left on the host."""

    exit_code = 3
