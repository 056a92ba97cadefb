"""Console output of deploy, rollback and down: phases, warnings, and a live status line
(phase, elapsed seconds, the server's latest log line) while waiting.

The deploy code reports through a :class:`Reporter`; the CLI passes :class:`ConsoleReporter`
(rich), tests and benchmarks :class:`QuietReporter`.
"""

from __future__ import annotations

import threading

from servedeck.safetext import printable


class Reporter:
    """Where deploy phases report. The default prints plain lines; the CLI passes a rich one.

    Methods receive short human text; ``waiting`` is called repeatedly during the readiness
    wait with (phase, elapsed seconds, last server log line). Text may carry what a host or a
    container said: the printing reporters write its control characters as visible escapes
    (:func:`servedeck.safetext.printable`).
    """

    def phase(self, name: str, text: str) -> None:
        print(printable(f"[{name}] {text}"), flush=True)

    def info(self, text: str) -> None:
        print(printable(f"  {text}"), flush=True)

    def warn(self, text: str) -> None:
        print(printable(f"  warning: {text}"), flush=True)

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        pass

    def done_waiting(self) -> None:
        pass


class ConsoleReporter(Reporter):
    """Prints phases with rich; during waits a live status line shows phase, elapsed time and
    the server's latest log line (plain lines when the output is not a terminal)."""

    def __init__(self) -> None:
        self._console = None  # made at the first line: importing rich is off a deploy's start
        self._lock = threading.Lock()
        self._status = None
        self._last_plain = 0.0

    @property
    def console(self):
        """The rich ``Console`` (stdout), made at first use (by whichever thread prints first)."""
        with self._lock:
            if self._console is None:
                from rich.console import Console
                self._console = Console(stderr=False, highlight=False, soft_wrap=True)
            return self._console

    def phase(self, name: str, text: str) -> None:
        from rich.markup import escape
        self.done_waiting()
        self.console.print(f"[bold cyan]{name:>9}[/] {escape(printable(text))}", markup=True)

    def info(self, text: str) -> None:
        self.console.print(f"          {printable(text)}", markup=False)

    def warn(self, text: str) -> None:
        from rich.markup import escape
        self.console.print(f"[yellow]  warning[/] {escape(printable(text))}", markup=True)

    def waiting(self, phase: str, elapsed_s: float, last_line: str) -> None:
        from rich.markup import escape
        line = escape(printable(f"{phase} {elapsed_s:6.1f} s | {last_line[-110:]}"))
        if self.console.is_terminal:
            if self._status is None:
                self._status = self.console.status(line)
                self._status.start()
            else:
                self._status.update(line)
        elif elapsed_s - self._last_plain >= 10:
            self._last_plain = elapsed_s
            print(f"          {line}", flush=True)

    def done_waiting(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
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
