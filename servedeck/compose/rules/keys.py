"""``keys/*``: mapping keys that are not what they appear to be.

A key holding a line break, ``": "`` or ``" #"`` (quoted, or in a block scalar) is one key, but
its text reads as more YAML: more keys, or a comment, than the document has. A name servedeck
writes is checked before it is rendered (:mod:`servedeck.grammar`) and written as one scalar;
this family finds such keys in a compose file written or changed by hand.
"""

from __future__ import annotations

import re
from typing import Any

from servedeck.compose.rules._context import Ctx
from servedeck.compose.rules._doc import Path


_DECEPTIVE_KEY_RE = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]|: |\s#|^\s|\s$")
"""What a mapping key must not hold: a line break or other control character, ``": "`` or
``" #"`` (YAML syntax when the key is read as text: a reader of the file sees more keys, or a
comment, than the document has), white space at either end."""


def check_keys(ctx: Ctx) -> None:
    """``keys/deceptive``: a mapping key (at any depth) that is not what it appears to be:
    it holds a line break, ``": "`` or ``" #"`` (quoted, or written in a block scalar), so the file
    reads as more keys than the document has: ``"X: 1\\n    pid: host"`` is one environment name,
    not a ``pid: host`` setting."""
    stack: list[tuple[Path, Any]] = [((), ctx.doc.data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, sub in value.items():
                here = path + (key,)
                if isinstance(key, str) and _DECEPTIVE_KEY_RE.search(key):
                    ctx.error("keys/deceptive", here,
                              f"mapping key {key!r} holds {_what_deceives(key)}: it is ONE key, not the "
                              f"YAML it reads as", "rename the key; if more keys were meant, write them as "
                                                   "keys", key=True)
                stack.append((here, sub))
        elif isinstance(value, list):
            stack.extend((path + (i,), sub) for i, sub in enumerate(value))


def _what_deceives(key: str) -> str:
    if re.search(r"[\n\r\x85\u2028\u2029]", key):
        return "a line break"
    if re.search(r"[\x00-\x1f\x7f]", key):
        return "a control character"
    if ": " in key:
        return "': '"
    if re.search(r"\s#", key):
        return "' #'"
    return "white space at an end"
