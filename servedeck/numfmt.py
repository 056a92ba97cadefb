"""Numbers as reports and tables print them: measured values, signed differences, B/A ratios
and relative spreads (the A/B report, the sweep summary)."""

from __future__ import annotations


def fmt_num(x: float | int | None) -> str:
    """Format a measured value: integers with thousands separators (``264,846``), other values
    with up to 3 decimals below 10, 2 below 1000 and 1 above, trailing zeros dropped
    (``2.548``, ``56.6``, ``170.98``, ``6,438.6``)."""
    if x is None:
        return "–"
    if isinstance(x, float) and x.is_integer() and abs(x) >= 100:
        x = int(x)
    if isinstance(x, int):
        return f"{x:,}"
    decimals = 3 if abs(x) < 10 else 2 if abs(x) < 1000 else 1
    text = f"{x:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0")
        if text.endswith("."):
            text += "0"
    return text


def fmt_signed(x: float | None) -> str:
    """A difference with its sign; the minus is U+2212 (``−28,376``)."""
    if x is None:
        return "–"
    text = fmt_num(abs(x))
    if x > 0:
        return f"+{text}"
    if x < 0:
        return f"\u2212{text}"
    return text


def fmt_ratio(x: float | None) -> str:
    """Ratio B/A with 3 decimals."""
    return "–" if x is None else f"{x:.3f}"


def fmt_pct(x: float | None) -> str:
    """A relative spread as a percentage (``0.0213`` → ``2.1 %``)."""
    return "–" if x is None else f"{x * 100:.2g} %" if x < 0.1 else f"{x * 100:.0f} %"


def fmt_load(x: float | None) -> str:
    """A load level as levels are named (concurrency ``4``, a rate ``2.5`` requests/s)."""
    return "\u2013" if x is None else f"{x:g}"


def unit(name: str) -> str:
    """The unit of a metric from its name (its suffix): ``tok/s``, ``s``, ``GiB``, ``tokens``, or nothing."""
    for suffix, u in (("_tok_s", " tok/s"), ("_gib", " GiB"), ("_tokens", " tokens"), ("_s", " s")):
        if name.endswith(suffix):
            return u
    return ""
