"""Text from outside made safe to print and to record: a container's log, a host's error
output, a name from a file.

A terminal acts on control characters (ESC starts a sequence that can move the cursor, retitle
the window, rewrite what is on screen or, on some terminals, answer back as if typed; CR
returns to the start of the line and so hides what came before; BiDi overrides reorder what is
shown). :func:`printable` writes each such character as a visible escape (``\\x1b``,
``\\u202e``), so a log line is shown and recorded as the text it is.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and line feed, DEL, C1 controls, and the Unicode BiDi controls
(Unicode TR#9: LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI, LRM, RLM, ALM)."""


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but tab and line feed, and every BiDi control,
    written as a visible escape (``\\x1b``, ``\\u202e``); ``\\r\\n`` becomes ``\\n`` and a lone
    ``\\r`` a line break (a progress bar's redraws, one per line)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _UNSAFE.sub(_escape, text)


def one_line(text: str) -> str:
    """:func:`printable` with line breaks and tabs escaped too: a value shown inside a line."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")
