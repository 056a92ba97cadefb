"""The checked document: a compose file read by ruamel.yaml (YAML 1.2) with per-node facts.

The text is *composed* (ruamel round-trip composer, YAML 1.2 resolver) into nodes, and the
node graph is turned into plain Python data (dict / list / str / int / float / bool / None,
merge keys ``<<`` applied, aliases resolved) plus an index from each node's path to its
1-based line and, for scalars, the raw text, the scalar style (plain / quoted / block) and the
YAML 1.2 tag. Rules read the data for meaning and the index for line numbers and quoting.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from servedeck.findings import Finding, Severity
from servedeck.yamlio import LimitError, compose_nodes, syntax_error_at

Path = tuple[str | int, ...]

_T = "tag:yaml.org,2002:"


@dataclass(frozen=True)
class Scalar:
    """Facts about one scalar node.

    Attributes:
        line: 1-based line of the scalar.
        raw: the scalar's text as written (without quotes).
        style: ``None`` for plain, ``"'"``/``'"'`` for quoted, ``"|"``/``">"`` for block.
        tag: the YAML 1.2 resolved short tag: ``str``, ``int``, ``float``, ``bool``, ``null``.
    """

    line: int
    raw: str
    style: str | None
    tag: str

    @property
    def plain(self) -> bool:
        """True when the scalar was written without quotes (and not as a block scalar)."""
        return self.style is None


@dataclass
class Doc:
    """A composed compose document.

    Attributes:
        data: the document as plain Python data (YAML 1.2 meaning).
        lines: path → 1-based line of the node (for a mapping value: the value's line).
        key_lines: path → 1-based line of the mapping key that leads to it.
        scalars: path → :class:`Scalar` for every scalar value (not keys).
        source_lines: the text split into lines (index 0 = line 1).
    """

    data: Any
    lines: dict[Path, int] = field(default_factory=dict)
    key_lines: dict[Path, int] = field(default_factory=dict)
    scalars: dict[Path, Scalar] = field(default_factory=dict)
    source_lines: list[str] = field(default_factory=list)

    def line(self, path: Path) -> int | None:
        """Line of ``path`` or of its nearest ancestor that has one."""
        p = tuple(path)
        while p:
            if p in self.key_lines and p not in self.lines:
                return self.key_lines[p]
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)

    def key_line(self, path: Path) -> int | None:
        """Line of the mapping key leading to ``path`` (falls back to :meth:`line`)."""
        return self.key_lines.get(tuple(path)) or self.line(path)


def path_str(path: Path) -> str:
    """``("services", "x", "command", 7)`` → ``services.x.command[7]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


class DocError(Exception):
    """The text is not a YAML document servedeck can check; carries one finding."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


def _tag(node: Node) -> str:
    tag = node.tag
    tag = str(getattr(tag, "value", tag) or "")
    return tag[len(_T):] if tag.startswith(_T) else tag


def _int(raw: str) -> int:
    text = raw.replace("_", "")
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body.startswith(("0o", "0O")):
        return sign * int(body[2:], 8)
    if body.startswith(("0x", "0X")):
        return sign * int(body[2:], 16)
    if body.startswith(("0b", "0B")):
        return sign * int(body[2:], 2)
    return sign * int(body, 10)


def _float(raw: str) -> float:
    text = raw.replace("_", "").lower()
    if text.endswith(".inf"):
        return -math.inf if text.startswith("-") else math.inf
    if text.endswith(".nan"):
        return math.nan
    return float(text)


def scalar_value(tag: str, raw: str) -> Any:
    """The Python value of a scalar with YAML 1.2 short tag ``tag`` and text ``raw``."""
    try:
        if tag == "null":
            return None
        if tag == "bool":
            return raw.lower() == "true"
        if tag == "int":
            return _int(raw)
        if tag == "float":
            return _float(raw)
    except ValueError:
        return raw
    return raw


class _Builder:
    def __init__(self, doc: Doc, file: str | None) -> None:
        self.doc = doc
        self.file = file

    def build(self, node: Node, path: Path) -> Any:
        self.doc.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, ScalarNode):
            tag = _tag(node)
            if node.style is not None and tag in ("int", "float", "bool", "null"):
                tag = "str"
            self.doc.scalars[path] = Scalar(node.start_mark.line + 1, node.value, node.style, tag)
            return scalar_value(tag, node.value)
        if isinstance(node, SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            out: dict[Any, Any] = {}
            merged: dict[Any, Any] = {}
            for knode, vnode in node.value:
                if _tag(knode) == "merge":
                    sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                    for src in sources:
                        val = self.build(src, path + ("<<",))
                        if isinstance(val, dict):
                            for k, v in val.items():
                                merged.setdefault(k, v)
                    continue
                key = scalar_value(_tag(knode), knode.value) if isinstance(knode, ScalarNode) \
                    else str(knode.value)
                key = key if isinstance(key, str) else str(key)
                if key in out:
                    raise DocError(Finding(
                        severity=Severity.error, rule="yaml/duplicate-key", path=path_str(path + (key,)),
                        message=f"mapping key {key!r} is defined twice; Compose refuses the file "
                                f"(ruamel and PyYAML would silently keep one)",
                        hint="remove one of the two entries", line=knode.start_mark.line + 1,
                        file=self.file))
                self.doc.key_lines[path + (key,)] = knode.start_mark.line + 1
                out[key] = self.build(vnode, path + (key,))
            for k, v in merged.items():
                out.setdefault(k, v)
            return out
        return None


def parse(text: str, file: str | None = None) -> Doc:
    """Compose ``text`` (YAML 1.2) into a :class:`Doc`.

    Raises:
        DocError: on a YAML syntax error (rule ``yaml/syntax``), a document beyond servedeck's
            bounds (``yaml/limits``: depth, aliases, size after alias expansion,
            :data:`servedeck.yamlio.LIMITS`), a duplicate key (``yaml/duplicate-key``) or an
            empty document (``yaml/empty``).
    """
    try:  # marks and styles as written; libyaml's parse, ruamel's pure one where libyaml refuses
        node = compose_nodes(text)
    except LimitError as exc:
        mark = exc.problem_mark
        raise DocError(Finding(severity=Severity.error, rule="yaml/limits", message=f"refused: {exc.problem}",
                               line=mark.line + 1 if mark is not None else None, file=file,
                               hint="a compose file this deep or this repetitive is not one servedeck "
                                    "checks; simplify it")) from None
    except MarkedYAMLError as exc:
        line, problem = syntax_error_at(exc)
        raise DocError(Finding(severity=Severity.error, rule="yaml/syntax", message=f"not valid YAML: {problem}",
                               line=line, file=file, hint="fix the YAML syntax at this line")) from None
    except YAMLError as exc:
        detail = re.sub(r"\s+", " ", str(exc))
        raise DocError(Finding(severity=Severity.error, rule="yaml/syntax",
                               message=f"not valid YAML: {detail}", file=file)) from None
    if node is None:
        raise DocError(Finding(severity=Severity.error, rule="yaml/empty", message="the file is empty",
                               file=file, hint="a compose file needs at least `services:`"))
    doc = Doc(data=None, source_lines=text.splitlines())
    doc.data = _Builder(doc, file).build(node, ())
    return doc


def field_context(path: Path) -> tuple[str, str | None]:
    """(service-level field, env key) of a scalar path, ignoring merge-key steps."""
    p = [x for x in path if x != "<<"]
    if len(p) >= 3 and p[0] == "services":
        env_key = p[3] if len(p) == 4 and p[2] == "environment" and isinstance(p[3], str) else None
        return str(p[2]), env_key
    return "", None
