"""Console output of deploy, rollback and down: phases, warnings, and a live status line
(phase, elapsed seconds, the server's latest log line) while waiting.

The deploy code reports through a :class:`Reporter`; the CLI passes :class:`ConsoleReporter`
(rich), tests and benchmarks :class:`QuietReporter`.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Callable, TextIO

if TYPE_CHECKING:
    from rich.status import Status

from servedeck.safetext import printable


class Reporter:
    """Where deploy phases report. The default prints plain lines; the CLI passes a rich one.

    Methods receive short human text; ``waiting`` is called repeatedly during the readiness
    wait with (phase, elapsed seconds, last server log line). Text may carry what a host or a
    container said: the printing reporters write its control characters as visible escapes
    (:func:`servedeck.safetext.printable`).
    """

    #: the reader of the output has gone (see :func:`shown`): later lines are dropped
    lost = False

    def _show(self, show: Callable[[], object], stream: TextIO) -> None:
        """``show`` (writing to ``stream``) unless the reader has gone; marks it gone when it goes."""
        if not self.lost and not shown(show, stream):
            self.lost = True

    def _line(self, line: str, stream: TextIO | None = None) -> None:
        out = stream or sys.stdout
        self._show(lambda: (out.write(line + "\n"), out.flush()), out)

    def phase(self, name: str, text: str) -> None:
        self._line(printable(f"[{name}] {text}"))

    def info(self, text: str) -> None:
        self._line(printable(f"  {text}"))

    def warn(self, text: str) -> None:
        self._line(printable(f"  warning: {text}"))

    def recorded(self, run_dir) -> None:
        """The run record of this deploy or rollback was created in ``run_dir``."""
        self.info(f"run record {run_dir}")

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        pass

    def done_waiting(self) -> None:
        pass


def shown(show: Callable[[], object], stream: TextIO) -> bool:
    """Run ``show`` (which writes to ``stream``); return whether the reader is still there.

    A reader that has gone — a closed pipe (the fleet's Ansible task running this command was
    stopped, a ``| head``), a terminal that hung up — costs the line and every later one, never
    the work being reported: an interrupted deploy still waits for its switch, rolls back and
    gives its lock back. The stream's descriptor is pointed at ``/dev/null`` so that the lines
    still buffered, and the interpreter's last flush, go nowhere instead of raising again.
    """
    try:
        show()
        return True
    except OSError:  # BrokenPipeError (EPIPE; Python ignores SIGPIPE), EIO from a hung-up terminal
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, stream.fileno())
            finally:
                os.close(null)
        except (OSError, ValueError, AttributeError):  # no descriptor (a StringIO): nothing buffered to lose
            pass
        return False


class ConsoleReporter(Reporter):
    """Prints phases with rich on a terminal, where during waits a live status line shows
    phase, elapsed time and the server's latest log line; into a pipe or a file, the same lines
    plain, and a status line every 10 s (rich is then not imported: its ~25 ms would sit on a
    deploy's path to the switch). ``stderr``: print there (stdout then carries a
    machine-readable result, ``deploy --json``).

    Attributes:
        run_dir: the run record's directory once :meth:`recorded` told it, else None.
    """

    def __init__(self, *, stderr: bool = False) -> None:
        self._console = None  # made at the first line on a terminal
        self._stderr = stderr
        self._lock = threading.Lock()
        self._status: Status | None = None
        self._last_plain = 0.0
        self._terminal: bool | None = None
        self.run_dir = None

    @property
    def terminal(self) -> bool:
        """Whether the lines go to a terminal (rich's styles and live status)."""
        if self._terminal is None:
            stream = sys.stderr if self._stderr else sys.stdout
            self._terminal = bool(getattr(stream, "isatty", lambda: False)())
        return self._terminal

    @property
    def _stream(self) -> TextIO:
        return sys.stderr if self._stderr else sys.stdout

    def _plain(self, line: str) -> None:
        with self._lock:
            self._line(line, self._stream)

    def _rich(self, markup: str, *, escaped: bool = True) -> None:
        self._show(lambda: self.console.print(markup, markup=escaped), self._stream)

    @property
    def console(self):
        """The rich ``Console`` (stdout or stderr), made at first use (by whichever thread prints
        first)."""
        with self._lock:
            if self._console is None:
                from rich.console import Console
                self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True)
            return self._console

    def recorded(self, run_dir) -> None:
        self.run_dir = run_dir
        super().recorded(run_dir)

    def phase(self, name: str, text: str) -> None:
        self.done_waiting()
        if self.terminal:
            from rich.markup import escape
            self._rich(f"[bold cyan]{name:>9}[/] {escape(printable(text))}")
        else:
            self._plain(f"{name:>9} {printable(text)}")

    def info(self, text: str) -> None:
        if self.terminal:
            self._rich(f"          {printable(text)}", escaped=False)
        else:
            self._plain(f"          {printable(text)}")

    def warn(self, text: str) -> None:
        if self.terminal:
            from rich.markup import escape
            self._rich(f"[yellow]  warning[/] {escape(printable(text))}")
        else:
            self._plain(f"  warning {printable(text)}")

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        from servedeck.safetext import clip
        line = printable(f"{phase} {elapsed_s:6.1f} s | {clip(last_line, 110)}")  # from its start, cut between words
        if self.terminal:
            self._show(lambda: self._status_line(line), self._stream)
        elif elapsed_s - self._last_plain >= 10:
            self._last_plain = elapsed_s
            self._plain(f"          {line}")

    def _status_line(self, line: str) -> None:
        from rich.markup import escape
        if self._status is None:
            self._status = self.console.status(escape(line))
            self._status.start()
        else:
            self._status.update(escape(line))

    def done_waiting(self) -> None:
        if self._status is not None:
            status, self._status = self._status, None
            if not shown(status.stop, self._stream):  # stopped even when lost: its refresh thread ends
                self.lost = True
        self._last_plain = 0.0


class QuietReporter(Reporter):
    """Collects messages instead of printing (tests, benchmarks)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def phase(self, name: str, text: str) -> None:
        self.lines.append(f"[{name}] {text}")

    def info(self, text: str) -> None:
        self.lines.append(text)

    def warn(self, text: str) -> None:
        self.lines.append(f"warning: {text}")


class Scrubbed(Reporter):
    """A reporter passing every text through ``scrub`` (a deployment's
    :meth:`~servedeck.deploy.secrets.Secrets.scrub_text`, looked up at each call: the secrets
    grow as the deploy reads them) before ``inner`` shows it: a server log line or an error that
    quotes a key never reaches the terminal with it."""

    def __init__(self, inner: Reporter, scrub) -> None:
        self.inner, self.scrub = inner, scrub

    def phase(self, name: str, text: str) -> None:
        self.inner.phase(name, self.scrub(text))

    def info(self, text: str) -> None:
        self.inner.info(self.scrub(text))

    def warn(self, text: str) -> None:
        self.inner.warn(self.scrub(text))

    def recorded(self, run_dir) -> None:
        self.inner.recorded(run_dir)

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        self.inner.waiting(phase, elapsed_s, self.scrub(last_line))

    def done_waiting(self) -> None:
        self.inner.done_waiting()
