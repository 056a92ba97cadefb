"""Reading YAML the way each consumer needs it, and small helpers for loaded documents.

* :func:`read_yaml_file` — a user's file (profile, inventory) with ruamel.yaml, YAML 1.2
  (safe loader for plain data, round-trip otherwise); errors name the file and the line. Compose files are read by
  the compose document model (:mod:`servedeck.compose.document`).
* :func:`load_data` — YAML 1.2 text to plain data (catalog, inventories, local images): libyaml's
  parser through ``ruamel.yaml.clib`` when it is installed, ruamel's own YAML 1.2 parser otherwise
  and whenever libyaml refuses the text.
* :func:`launcher_value` — one ``--set KEY=VALUE`` value as the exl3xpu launcher reads it
  (PyYAML ``safe_load``: YAML 1.1; the raw string when it does not parse), as the exl3xpu
  image's ``scripts/serve.py`` does (in this repository: ``deploy/images/cpu-vllm/serve.py``
  ``parse_value``).
* :func:`to_plain` / :func:`flatten` — ruamel nodes → plain Python; nested mappings →
  dotted paths.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from servedeck.errors import ServedeckError

_YAML11 = YAML(typ="safe", pure=True)
_YAML11.version = (1, 1)


def load_data(text: str) -> Any:
    """Load YAML 1.2 ``text`` with ruamel.yaml's safe loader (plain dict/list/scalars).

    The parse runs in libyaml (``ruamel.yaml.clib``, about 5x faster than the pure-Python
    parser on servedeck's files) when it is installed; scalars are resolved by ruamel's YAML 1.2
    resolver either way. libyaml parses YAML 1.1, which refuses a few texts YAML 1.2 allows
    (a plain ``2122:22`` inside ``[...]``): any error from it is answered by ruamel's own
    parser, whose reading (and its error message, with the source line) is the one that counts.

    Raises:
        ruamel.yaml.error.YAMLError: the text is not valid YAML 1.2 (from the pure parser).
    """
    fast = YAML(typ="safe")
    if fast.Parser.__module__.startswith("ruamel.yaml.clib"):
        try:
            return fast.load(text)
        except YAMLError:
            pass
    return YAML(typ="safe", pure=True).load(text)


def read_yaml_file(path: str | Path, *, plain: bool = True) -> Any:
    """Load a YAML 1.2 file (ruamel round-trip loader).

    Args:
        path: the file.
        plain: convert ruamel's commented containers to plain dict/list/scalars.

    Raises:
        ServedeckError: missing file, or a syntax error (field = ``line N``).
    """
    path = Path(path)
    try:
        # plain data needs no round-trip (comment-keeping) loader: the safe one is faster
        text = path.read_text(encoding="utf-8")
        data = load_data(text) if plain else YAML(typ="rt").load(text)
    except FileNotFoundError:
        raise ServedeckError("file not found", file=str(path)) from None
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ServedeckError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", file=str(path),
                             field=f"line {mark.line + 1}" if mark else None,
                             hint="fix the YAML syntax") from None
    return to_plain(data) if plain else data


def launcher_value(text: str) -> Any:
    """Parse ``text`` as the exl3xpu launcher parses a ``--set`` value (YAML 1.1 safe load);
    the raw string when it is not valid YAML. Containers come back as plain dict/list (a new
    copy on every call; the parse itself is cached, values repeat across profiles)."""
    value = _launcher_value(text)
    return copy.deepcopy(value) if isinstance(value, (dict, list)) else value


@functools.lru_cache(maxsize=4096)
def _launcher_value(text: str) -> Any:
    try:
        return to_plain(_YAML11.load(text))
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


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings to dotted paths; lists, scalars and empty mappings are leaves.

    ``{"engine": {"max_model_len": 1}}`` → ``{"engine.max_model_len": 1}``.
    """
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
    elif prefix or not isinstance(value, dict):
        out[prefix] = value
    return out
