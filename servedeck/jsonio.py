"""JSON read within bounds: every JSON file servedeck reads (run records, bench samples,
imported benchmark results, fleet result files, noise floors) goes through here.

The bounds (:class:`JsonLimits`) are those of :mod:`servedeck.yamlio` in JSON's terms: file
size (checked before reading), UTF-8 (RFC 8259), nesting depth and the number of values. The
values are bounded *before* parsing by counting the characters that open a value in a
container (``,`` ``[`` ``{``; a comma inside a string counts too, so the count is an upper
bound): the decoder's memory is then bounded by the count, whatever the text holds. Depth
beyond the decoder's own recursion limit is caught as the ``RecursionError`` CPython's decoder
raises (it never overflows the C stack), and a depth beyond ``max_depth`` is found by one
iterative walk of the result, so no recursive walk downstream (a dump, a diff) can fail on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.fsutil import read_bounded

__all__ = ["JsonLimits", "JSON_LIMITS", "JsonRefused", "parse", "loads", "read_json_file", "read_json_bytes",
           "read_json_lines"]


@dataclass(frozen=True)
class JsonLimits:
    """Bounds on one JSON document (or one JSON Lines file).

    Attributes:
        max_bytes: file (or text) size in bytes.
        max_depth: nesting of arrays and objects.
        max_values: values in the document (an upper bound counted from the text).
    """

    max_bytes: int = 16 * 1024 * 1024
    max_depth: int = 64
    max_values: int = 1_000_000


JSON_LIMITS = JsonLimits()
"""16 MiB, 64 levels, 1,000,000 values: a benchmark of 10,000 requests with per-token
latencies fits; what a file at each bound costs is measured by ``benchmarks/hostile_input.py``."""


class JsonRefused(ValueError):
    """A JSON text is not valid or exceeds its :class:`JsonLimits`; ``line`` is its 1-based
    line when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message, self.line = message, line


def _depth_over(value: Any, max_depth: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def parse(text: str | bytes, limits: JsonLimits = JSON_LIMITS) -> Any:
    """Parse one JSON document within ``limits``.

    Raises:
        JsonRefused: not valid JSON, not UTF-8, or a bound exceeded (``line`` when known).
    """
    if isinstance(text, bytes):
        data = text
        if len(data) > limits.max_bytes:
            raise JsonRefused(f"the text is {len(data):,} bytes, more than {limits.max_bytes:,}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRefused(f"not UTF-8 at byte {exc.start}",
                              line=data.count(b"\n", 0, exc.start) + 1) from None
    elif len(text) > limits.max_bytes // 4 and len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise JsonRefused(f"the text is larger than {limits.max_bytes:,} bytes")
    values = text.count(",") + text.count("[") + text.count("{") + 1
    if values > limits.max_values:
        raise JsonRefused(f"it holds up to {values:,} values, more than the {limits.max_values:,} "
                          "servedeck reads")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"not valid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
    except RecursionError:
        raise JsonRefused(f"nested deeper than {limits.max_depth} levels") from None
    if _depth_over(value, limits.max_depth):
        raise JsonRefused(f"nested deeper than {limits.max_depth} levels")
    return value


def loads(text: str | bytes, *, limits: JsonLimits = JSON_LIMITS, source: str | None = None,
          what: str = "JSON") -> Any:
    """:func:`parse` with errors as :class:`ServedeckError` naming ``source`` and the line.

    Raises:
        ServedeckError: not valid JSON, not UTF-8, or a bound exceeded.
    """
    try:
        return parse(text, limits)
    except JsonRefused as exc:
        raise ServedeckError(f"{what}: {exc.message}" if what != "JSON" else exc.message, file=source,
                             field=f"line {exc.line}" if exc.line else None) from None


def read_json_file(path: str | Path, *, limits: JsonLimits = JSON_LIMITS) -> Any:
    """The JSON document in ``path`` (a leading byte-order mark dropped), within ``limits``.

    Raises:
        FileNotFoundError: there is no such file.
        ServedeckError: unreadable, too large, not UTF-8, not valid JSON or a bound exceeded
            (file and line named).
    """
    text = read_bounded(path, limits.max_bytes, what="JSON")
    return loads(text, limits=limits, source=str(path))


def read_json_bytes(path: str | Path, *, limits: JsonLimits = JSON_LIMITS) -> bytes:
    """The bytes of the JSON file ``path``, checked against ``limits`` (size, UTF-8, values)
    but not parsed: for a parser of its own (pydantic's ``model_validate_json``, whose own
    nesting limit then applies).

    Raises:
        FileNotFoundError, ServedeckError: as :func:`read_json_file`.
    """
    from servedeck.fsutil import read_bounded_bytes
    data = read_bounded_bytes(path, limits.max_bytes, what="JSON")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ServedeckError(f"not UTF-8 at byte {exc.start}", file=str(path), field=f"line {line}") from None
    values = data.count(b",") + data.count(b"[") + data.count(b"{") + 1
    if values > limits.max_values:
        raise ServedeckError(f"it holds up to {values:,} values, more than the {limits.max_values:,} "
                             "servedeck reads", file=str(path))
    return data


def read_json_lines(path: str | Path, *, limits: JsonLimits = JSON_LIMITS) -> list[Any]:
    """The values of a JSON Lines file (one JSON document per line; blank lines skipped), the
    whole file within ``limits`` (``max_values`` over all lines).

    Raises:
        FileNotFoundError, ServedeckError: as :func:`read_json_file`, naming the line.
    """
    text = read_bounded(path, limits.max_bytes, what="JSON Lines")
    values = text.count(",") + text.count("[") + text.count("{") + text.count("\n") + 1
    if values > limits.max_values:
        raise ServedeckError(f"it holds up to {values:,} values, more than the {limits.max_values:,} "
                             "servedeck reads", file=str(path))
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(parse(line, limits))
        except JsonRefused as exc:
            raise ServedeckError(exc.message, file=str(path), field=f"line {lineno}") from None
    return out
