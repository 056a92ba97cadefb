"""Text shown to the user cut to a width without cutting a word.

A log line, an error message or a schema message longer than its room is kept from its start
(where a line says what it is about) and cut at the last space that fits, with ``…`` appended;
a single word longer than the room is the only thing cut inside.
"""

from __future__ import annotations


def clip(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters: whitespace runs folded to one
    space; when longer, cut at the last word boundary that fits and ended with ``…``.

    Example: ``clip("s can cause fd limit errors like", 20)`` → ``"s can cause fd…"``.

    Raises:
        ValueError: ``width`` < 2.
    """
    if width < 2:
        raise ValueError("clip needs a width of at least 2")
    one = " ".join(text.split())
    if len(one) <= width:
        return one
    room = one[: width - 1]
    cut = room.rsplit(" ", 1)[0] if " " in room else room
    return cut.rstrip(" ,;:") + "…"
