"""YAML in and out of servedeck: the only module that makes a ruamel.yaml loader or dumper.

Every read is **bounded** (:class:`Limits`): a file larger than ``max_bytes`` is refused before
it is read, text that is not UTF-8 is refused naming the line, and while the document is
composed its nesting depth, its number of aliases and its size *after alias expansion* (nodes,
each alias counting as the whole node it names) are counted, so a "billion laughs" file of a
few hundred bytes, 50,000 levels of ``[``, or an alias to its own enclosing node (a recursive
structure) is refused at the event where it exceeds a bound, as a :class:`LimitError` (a
``MarkedYAMLError``: its message names the line), before anything downstream walks the tree.
libyaml's own composer (``ruamel.yaml.clib``) is recursive C code that overflows the stack on
deep input; it is never used: libyaml parses into events, the bounded composer below composes.

* :func:`load_data` — YAML text → plain data (catalog, inventories, local images, profiles):
  libyaml's parser through ``ruamel.yaml.clib`` when it is installed, ruamel's own YAML 1.2
  parser otherwise and whenever libyaml refuses the text; scalars resolved by ruamel's YAML 1.2
  resolver either way (YAML 1.1 with ``version=(1, 1)``: an exl3xpu ``model.yaml``).
* :func:`read_yaml_file` — a user's file (profile, inventory, compose ``extends``); errors name
  the file and the line.
* :func:`load_roundtrip` / :func:`roundtrip` — ruamel's round-trip loader/dumper (comments and
  styles kept: the catalog edited in place, compose files with their styles).
* :func:`compose_nodes` — the node graph with marks and styles (the check's compose parser).
* :func:`dump_data` / :func:`dump_block` — plain data → YAML text.
* :func:`scalar_style` — the one quoting policy for strings servedeck writes into YAML (plain
  only where every YAML 1.1 and 1.2 reader reads the same string back): :func:`scalar_text`
  for a template's lines, :func:`dump_yaml` for data dumped whole.
* :func:`launcher_value` — one ``--set KEY=VALUE`` value as the exl3xpu launcher reads it
  (PyYAML ``safe_load``: YAML 1.1; the raw string when it does not parse), as the exl3xpu
  image's ``scripts/serve.py`` does (in this repository: ``deploy/images/cpu-vllm/serve.py``
  ``parse_value``).
* :func:`to_plain` / :func:`flatten` — ruamel nodes → plain Python; nested mappings →
  dotted paths (:func:`servedeck.dotted.flatten`, re-exported here).
"""

from __future__ import annotations

import copy
import functools
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.resolver import VersionedResolver

from servedeck.dotted import flatten
from servedeck.errors import ServedeckError
from servedeck.fsutil import read_bounded
from servedeck.yaml11 import plain_is_string

__all__ = ["YAMLError", "Limits", "LIMITS", "CATALOG_LIMITS", "LimitError", "load_data", "read_yaml_file",
           "load_roundtrip", "roundtrip", "compose_nodes", "dump_data", "dump_block", "launcher_value",
           "to_plain", "flatten", "yaml_error_line", "syntax_error_at", "file_error", "scalar_style",
           "scalar_text", "dump_yaml", "rewrite_scalars"]


@dataclass(frozen=True)
class Limits:
    """Bounds on one YAML document.

    Attributes:
        max_bytes: file size in bytes (checked before reading; text given directly is
            measured in UTF-8 bytes).
        max_depth: nesting of collections (``a: {b: [c]}`` is 3 levels with the scalar).
        max_nodes: nodes after alias expansion (each alias counts as the size of the node it
            names): what any walk of the loaded data visits.
        max_aliases: alias occurrences (``*name``).
    """

    max_bytes: int = 1024 * 1024
    max_depth: int = 64
    max_nodes: int = 10_000
    max_aliases: int = 1_000


LIMITS = Limits()
"""The bounds of every YAML file a person writes (profiles, inventories, compose files and
the files they include): 1 MiB, 64 levels, 10,000 nodes expanded, 1,000 aliases. Real files
are a few hundred nodes (a fleet inventory of 500 hosts is about 5,000);
``benchmarks/hostile_input.py`` measures what a file at each bound costs."""

CATALOG_LIMITS = Limits(max_bytes=4 * 1024 * 1024, max_nodes=25_000, max_aliases=1_000)
"""The bounds of the image catalogs servedeck itself grows (``deploy/images.yaml``,
``.servedeck/images.yaml``): about 120 nodes per image, so some 200 images."""


class LimitError(MarkedYAMLError):
    """A YAML document exceeds a :class:`Limits` bound (a ``YAMLError``: handlers of YAML
    syntax errors report it with its line)."""


class NotTextError(MarkedYAMLError):
    """A scalar holds a lone UTF-16 surrogate (a ``"\\uD800"`` escape): no Unicode text, so no
    file can hold it (a ``YAMLError``: handlers of YAML syntax errors report it with its line)."""


_SURROGATE = re.compile("[\ud800-\udfff]")


class _BoundedComposer(Composer):
    """ruamel's composer with the bounds of ``limits`` counted as it composes (depth, aliases,
    nodes after alias expansion) and aliases to an enclosing node refused."""

    limits: Limits = LIMITS

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self._sizes: dict[int, int] = {}   # id(anchored node) -> its size after expansion
        self._acc = [0]                    # per open collection: its children's expanded sizes
        self._nodes = 0
        self._aliases = 0
        self._level = 0

    def _refuse(self, problem: str, mark: Any) -> LimitError:
        return LimitError(problem=f"{problem} (servedeck refuses such YAML: it reads at most "
                                  f"{self.limits.max_depth} levels, {self.limits.max_nodes:,} nodes "
                                  f"after alias expansion and {self.limits.max_aliases:,} aliases)",
                          problem_mark=mark)

    def _count(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > self.limits.max_nodes:
            raise self._refuse(f"the document grows past {self.limits.max_nodes:,} nodes"
                               + (" through its aliases" if n > 1 else ""), mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.parser.check_event(AliasEvent):
            event = self.parser.peek_event()
            self._aliases += 1
            if self._aliases > self.limits.max_aliases:
                raise self._refuse(f"more than {self.limits.max_aliases:,} aliases", event.start_mark)
            target = self.anchors.get(event.anchor)
            if target is not None:
                size = self._sizes.get(id(target))
                if size is None:
                    raise self._refuse(f"alias *{event.anchor} refers to a node that contains it "
                                       "(a recursive structure)", event.start_mark)
                self._count(size, event.start_mark)
                self._acc[-1] += size
            return super().compose_node(parent, index)  # an undefined alias: ruamel's own error
        event = self.parser.peek_event()
        self._level += 1
        if self._level > self.limits.max_depth:
            raise self._refuse(f"nesting deeper than {self.limits.max_depth} levels", event.start_mark)
        self._count(1, event.start_mark)
        self._acc.append(0)
        node = super().compose_node(parent, index)
        if getattr(node, "style", None) == "":  # libyaml's events say "" for plain, ruamel's parser None
            node.style = None
        value = node.value
        half = _SURROGATE.search(value) if isinstance(value, str) and not value.isascii() else None
        if half is not None:
            raise NotTextError(problem=f"\\u{ord(half[0]):04X} is half of a UTF-16 surrogate pair, not a "
                                       "character: no file can hold this text", problem_mark=node.start_mark)
        size = 1 + self._acc.pop()
        self._acc[-1] += size
        if getattr(node, "anchor", None) is not None or event.anchor is not None:
            self._sizes[id(node)] = size
        self._level -= 1
        return node


@functools.lru_cache(maxsize=None)
def _composer(limits: Limits) -> type[_BoundedComposer]:
    return type("BoundedComposer", (_BoundedComposer,), {"limits": limits})


def _c_parser() -> Any:
    """libyaml's parser class (``ruamel.yaml.clib``), or None when it is not installed."""
    parser = YAML(typ="safe").Parser
    return parser if parser.__module__.startswith("ruamel.yaml.clib") else None


_CPARSER = _c_parser()


class _FastLoader:
    """libyaml's events → :class:`_BoundedComposer` → ruamel's safe constructor and resolver
    (ruamel's loader protocol: ``_parser``, ``_resolver``, ``_composer``, ``_constructor``)."""

    def __init__(self, text: str, limits: Limits, version: tuple[int, int] | None) -> None:
        self._parser = _CPARSER(text)
        self._resolver = VersionedResolver(version=version, loader=self)
        self._composer = _composer(limits)(loader=self)
        self._constructor = SafeConstructor(loader=self)
        self.max_depth = None  # ruamel 0.19's own depth check; the composer's bound is the one
        self._constructor.allow_duplicate_keys = False

    def load(self) -> Any:
        try:
            return self._constructor.get_single_data()
        finally:
            self._parser.dispose()

    def compose(self) -> Any:
        try:
            return self._composer.get_single_node()
        finally:
            self._parser.dispose()


def _pure(typ: str, limits: Limits, version: tuple[int, int] | None = None) -> YAML:
    y = YAML(typ=typ, pure=True)
    y.Composer = _composer(limits)
    if version is not None:
        y.version = version
    return y


def _check_size(text: str, limits: Limits) -> None:
    # a str can be larger in UTF-8 than in characters: count bytes only when it might matter
    if len(text) * 4 > limits.max_bytes and len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise LimitError(problem=f"the text is larger than {limits.max_bytes:,} bytes, the most "
                                 "servedeck reads as YAML")


def load_data(text: str, *, limits: Limits = LIMITS, version: tuple[int, int] | None = None) -> Any:
    """Load YAML ``text`` (1.2; ``version=(1, 1)`` for YAML 1.1) with ruamel.yaml's safe
    constructor (plain dict/list/scalars), within ``limits``.

    The parse runs in libyaml (``ruamel.yaml.clib``, several times faster than the pure-Python
    parser on servedeck's files) when it is installed; scalars are resolved by ruamel's
    resolver either way. libyaml parses YAML 1.1, which refuses a few texts YAML 1.2 allows (a
    plain ``2122:22`` inside ``[...]``): any error from it except a bound is answered by
    ruamel's own parser, whose reading (and its error message, with the source line) counts.

    Raises:
        LimitError: the text exceeds ``limits`` (a ``YAMLError`` naming the line).
        NotTextError: a scalar holds a lone surrogate (a ``YAMLError`` naming the line).
        ruamel.yaml.error.YAMLError: the text is not valid YAML (from the pure parser).
    """
    return _parse(text, limits, version, "load")


def load_roundtrip(text: str, *, limits: Limits = LIMITS) -> Any:
    """Load YAML 1.2 ``text`` with ruamel's round-trip loader (``CommentedMap``/``CommentedSeq``
    keeping comments, styles and marks), within ``limits``.

    Raises:
        LimitError, ruamel.yaml.error.YAMLError: as :func:`load_data`.
    """
    _check_size(text, limits)
    return _pure("rt", limits).load(text)


def compose_nodes(text: str, *, limits: Limits = LIMITS) -> Any:
    """The node graph of YAML 1.2 ``text`` (scalar styles as written, marks with line, column
    and character index), within ``limits``; None for an empty document. Aliases are the same
    node object more than once. Parsed as :func:`load_data` parses: libyaml's events when it
    accepts the text (the same nodes, styles and marks as ruamel's own parser gives), else
    ruamel's pure YAML 1.2 parser.

    Raises:
        LimitError, ruamel.yaml.error.YAMLError: as :func:`load_data`.
    """
    return _parse(text, limits, None, "compose")


def _parse(text: str, limits: Limits, version: tuple[int, int] | None, step: str) -> Any:
    """``step`` (``load`` or ``compose``) of ``text``: libyaml's events through the bounded
    composer, else (libyaml refused the text, or is not installed) ruamel's pure parser."""
    _check_size(text, limits)
    if _CPARSER is not None:
        try:
            return getattr(_FastLoader(text, limits, version), step)()
        except (LimitError, NotTextError):
            raise
        except (YAMLError, UnicodeEncodeError):  # libyaml takes UTF-8: a lone surrogate is for ruamel's to name
            pass
    return getattr(_pure("safe", limits, version), step)(text)


def syntax_error_at(exc: Exception) -> tuple[int | None, str]:
    """Where a YAML syntax error must be edited and what it is: (1-based line or None, text).

    ruamel's scanner reports an unterminated construct (a quoted scalar, a flow ``[``/``{``)
    where it gave up, often the end of the file; the line to edit is the one where it opened
    (the error's ``context_mark``). Every other error is at its ``problem_mark``. The text
    names both when they differ: ``a quoted scalar opened on line 3 is never closed (found
    unexpected end of stream at line 8)``.
    """
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    context = getattr(exc, "context", None) or ""
    unterminated = context_mark is not None and (
        "end of stream" in problem or "document" in problem or context.startswith("while scanning a quoted"))
    if unterminated and context_mark is not None and (problem_mark is None or context_mark.line != problem_mark.line):
        what = context.removeprefix("while scanning ").removeprefix("while parsing ") or "a construct"
        where = f" at line {problem_mark.line + 1}" if problem_mark is not None else ""
        return (context_mark.line + 1,
                f"{what} opened on line {context_mark.line + 1} is never closed ({problem}{where})")
    mark = problem_mark or context_mark
    if context:
        problem = f"{context}; {problem}"
    return (mark.line + 1 if mark is not None else None), problem


def rewrite_scalars(text: str, fn: Any, *, limits: Limits = LIMITS) -> str:
    """``text`` with every scalar (keys included) whose value ``fn(value)`` changes written
    again: as a double-quoted scalar of the new value (a block scalar ``|``/``>``: ``fn`` applied
    to its text in place); every other byte as it was. Text that is not one YAML document
    within ``limits`` comes back unchanged.

    For a record that must stay the document it was after a value in it is replaced (a
    redacted secret: ``- ***`` would read as an alias)."""
    import json

    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
    try:
        root = compose_nodes(text, limits=limits)
    except YAMLError:
        return text
    edits: list[tuple[int, int, str]] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ScalarNode):
            new = fn(node.value)
            if new != node.value:
                start, end = node.start_mark.index, node.end_mark.index
                if node.style in ("|", ">"):
                    edits.append((start, end, fn(text[start:end])))
                else:
                    edits.append((start, end, json.dumps(new, ensure_ascii=False).replace("\x7f", "\\x7f")))
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            stack.extend(part for pair in node.value for part in pair)
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def yaml_error_line(exc: YAMLError) -> int | None:
    """The 1-based line to edit for a YAML error (:func:`syntax_error_at`: where an
    unterminated quote opened, else the problem mark, else the context mark)."""
    return syntax_error_at(exc)[0]


def file_error(exc: YAMLError, path: str | Path) -> ServedeckError:
    """The user-facing error for a YAML error ``exc`` in file ``path``: the problem, the file
    and ``line N`` (a bound exceeded says "refused" and hints at simplifying the file)."""
    refused = isinstance(exc, LimitError)
    line, problem = syntax_error_at(exc)
    if refused:
        problem = getattr(exc, 'problem', None) or str(exc)
    return ServedeckError(f"{'refused' if refused else 'not valid YAML'}: {problem}", file=str(path),
                          field=f"line {line}" if line else None, line=line, rule="yaml/syntax",
                          hint="split or simplify the file" if refused else "fix the YAML syntax at this line")


def read_yaml_file(path: str | Path, *, plain: bool = True, limits: Limits = LIMITS) -> Any:
    """Load a YAML 1.2 file within ``limits`` (:func:`load_data`; with ``plain=False`` the
    round-trip loader's containers, :func:`load_roundtrip`).

    Raises:
        ServedeckError: missing (message ``file not found``) or unreadable file, larger than
            ``limits.max_bytes``, not UTF-8, a syntax error or a bound exceeded (``line`` and field
            ``line N``: where to edit, :func:`syntax_error_at`).
    """
    path = Path(path)
    try:
        text = read_bounded(path, limits.max_bytes, what="YAML")
    except FileNotFoundError:
        raise ServedeckError("file not found", file=str(path)) from None
    try:
        # plain data needs no round-trip (comment-keeping) loader: the safe one is faster
        data = load_data(text, limits=limits) if plain else load_roundtrip(text, limits=limits)
    except YAMLError as exc:
        raise file_error(exc, path) from None
    return to_plain(data) if plain else data


def roundtrip(*, width: int = 4096, indent: tuple[int, int, int] | None = None,
              preserve_quotes: bool = False, limits: Limits = LIMITS) -> YAML:
    """A ruamel round-trip YAML object (load and dump keep comments and styles) whose loads
    are bounded by ``limits``; ``indent`` = (mapping, sequence, offset)."""
    y = _pure("rt", limits)
    y.width = width
    y.preserve_quotes = preserve_quotes
    if indent is not None:
        y.indent(mapping=indent[0], sequence=indent[1], offset=indent[2])
    return y


def dump_data(value: Any) -> str:
    """Plain data → YAML 1.2 text (ruamel's safe dumper: block style, plain scalars where
    they read back the same)."""
    buf = io.StringIO()
    YAML(typ="safe", pure=True).dump(value, buf)
    return buf.getvalue()


def dump_block(value: Any, *, indent: tuple[int, int, int] | None = None, width: int = 4096) -> str:
    """Data (plain or ruamel's round-trip containers and scalar strings) → YAML 1.2 block text
    with the round-trip dumper (ruamel scalar string styles kept)."""
    y = roundtrip(width=width, indent=indent)
    y.default_flow_style = False
    buf = io.StringIO()
    y.dump(value, buf)
    return buf.getvalue()


def scalar_style(text: str, force: bool = False) -> str:
    """The one quoting policy for strings servedeck writes into YAML: ``plain`` when every
    YAML 1.1 and 1.2 reader reads it back as the same string
    (:func:`servedeck.yaml11.plain_is_string`), else ``single`` when it holds ``"``
    and no ``'`` (nor a newline), else ``double``; ``force`` never gives ``plain``."""
    if not force and plain_is_string(text):
        return "plain"
    if '"' in text and "'" not in text and "\n" not in text:
        return "single"
    return "double"


def scalar_text(text: str, force: bool = False) -> str:
    """``text`` as YAML scalar text styled by :func:`scalar_style` (for templates that write
    lines): a double-quoted scalar is JSON string syntax, which YAML reads the same way."""
    style = scalar_style(text, force)
    if style == "plain":
        return text
    if style == "single":
        return f"'{text}'"
    return json.dumps(text, ensure_ascii=False)


def dump_yaml(value: Any, indent: int = 0) -> str:
    """Plain data → YAML 1.2 block text (the round-trip dumper; sequences indented under their
    key; every string styled by :func:`scalar_style` unless it is already a ruamel scalar
    string, which keeps its own style), each line prefixed by ``indent`` spaces."""
    text = dump_block(_styled(value), indent=(2, 4, 2))
    if indent:
        text = "".join(" " * indent + line if line.strip() else line
                       for line in text.splitlines(keepends=True))
    return text


def _styled(value: Any) -> Any:
    """``value`` with every string that has no style of its own (not a ruamel scalar string)
    made one in its :func:`scalar_style` (dicts and lists copied; other values as they are)."""
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, ScalarString, SingleQuotedScalarString
    if isinstance(value, dict):
        return {k: _styled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_styled(v) for v in value]
    if isinstance(value, str) and not isinstance(value, ScalarString):
        style = scalar_style(value)
        return (value if style == "plain" else SingleQuotedScalarString(value) if style == "single"
                else DoubleQuotedScalarString(value))
    return value


def launcher_value(text: str) -> Any:
    """Parse ``text`` as the exl3xpu launcher parses a ``--set`` value (YAML 1.1 safe load);
    the raw string when it is not valid YAML (or exceeds :data:`LIMITS`): a ``--set`` value, or
    an exl3xpu ``model.yaml``.
    Containers come back as plain dict/list (a new copy on every call; the parse itself is
    cached, values repeat across profiles)."""
    value = _launcher_value(text)
    return copy.deepcopy(value) if isinstance(value, (dict, list)) else value


@functools.lru_cache(maxsize=4096)
def _launcher_value(text: str) -> Any:
    try:
        return to_plain(_pure("safe", LIMITS, (1, 1)).load(text))
    except YAMLError:
        return text


def to_plain(node: Any) -> Any:
    """ruamel containers and scalar subclasses → plain dict/list/str/int/float/bool/None
    (mapping order kept; keys become strings)."""
    if isinstance(node, dict):
        return {str(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [to_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node
