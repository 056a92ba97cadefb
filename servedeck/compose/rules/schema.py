"""``schema/*``: the Compose Specification JSON Schema shipped in this package
(``servedeck/compose/compose-spec.json``, source in :data:`COMPOSE_SPEC_SOURCE`), validated with
the ``jsonschema`` validator class its ``$schema`` names.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.resources
import json
import os
import re
from pathlib import Path as Path_
from typing import Any

from servedeck.compose.rules._context import Ctx
from servedeck.compose.rules._doc import Path
from servedeck.fsutil import atomic_write, cache_dir


COMPOSE_SPEC_SOURCE = {
    "project": "compose-spec/compose-spec",
    "file": "schema/compose-spec.json",
    "version": "as vendored by check-jsonschema 0.39.0",
    "sha256": "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64",
}
"""Where ``servedeck/compose/compose-spec.json`` comes from (also in COMPOSE-SPEC-SOURCE.md)."""


@functools.lru_cache(maxsize=1)
def compose_validator() -> Any:
    """The validator for the Compose Specification schema, built once per process.

    Source: :data:`COMPOSE_SPEC_SOURCE` (its ``$schema`` picks the validator class: Draft
    2020-12). ``jsonschema`` is imported here, on first use, not when the module loads.
    """
    import jsonschema
    from jsonschema.validators import validator_for
    res = importlib.resources.files("servedeck.compose").joinpath("compose-spec.json")
    schema = json.loads(res.read_text(encoding="utf-8"))
    cls = validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def _allowed_keys(schema: dict[str, Any], root: dict[str, Any], depth: int = 0) -> set[str]:
    """Property names a (sub)schema allows, following local ``$ref`` and ``allOf``."""
    if depth > 8 or not isinstance(schema, dict):
        return set()
    keys = set((schema.get("properties") or {}).keys())
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        keys |= _allowed_keys(node, root, depth + 1)
    for sub in schema.get("allOf") or []:
        keys |= _allowed_keys(sub, root, depth + 1)
    return keys


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _typed(value: Any) -> Any:
    """JSON for a non-JSON scalar that keeps its type apart from a string of the same text."""
    return {"__type__": type(value).__name__, "text": str(value)}


def _valid_marker(data: Any) -> Path_:
    """The cache file that says "``data`` is valid against :data:`COMPOSE_SPEC_SOURCE`".

    Keyed by the schema's sha256, the installed jsonschema (its module file and modification
    time: an upgrade or reinstall changes it; found without importing it) and the document as
    type-preserving canonical JSON, so any change to one of them misses the cache.
    """
    import importlib.util
    spec = importlib.util.find_spec("jsonschema")
    origin = spec.origin if spec is not None else None
    assert origin is not None  # a dependency of servedeck, installed as a package of files
    validator = f"{origin}:{os.stat(origin).st_mtime_ns}"
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=_typed)
    key = hashlib.sha256(f"{COMPOSE_SPEC_SOURCE['sha256']}\0{validator}\0{canonical}".encode()).hexdigest()
    return cache_dir() / "compose-valid" / key


def check_schema(ctx: Ctx) -> None:
    """``schema/<keyword>``: one error per Compose Specification violation (``schema/unknown-key``
    for keys the schema does not allow, else the kebab-cased JSON Schema keyword: ``schema/type``,
    ``schema/one-of``, ``schema/required``, ...).

    A document found valid once is remembered in the user cache (``fsutil.cache_dir()``, one empty
    file per document): checking it again, as a pre-commit hook does for unchanged profiles, then
    needs neither jsonschema (about a sixth of a check process's start-up) nor the validation.
    Only valid verdicts are cached; a document with errors is validated every time.
    """
    marker = _valid_marker(ctx.doc.data)
    if marker.exists():
        return
    validator = compose_validator()
    valid = True
    for err in validator.iter_errors(ctx.doc.data):
        valid = False
        path: Path = tuple(err.absolute_path)
        keyword = str(err.validator)
        message = err.message
        key = False
        if keyword in ("additionalProperties", "unevaluatedProperties") and isinstance(err.instance, dict):
            names = re.findall(r"'([^']+)'", message)
            allowed = sorted(_allowed_keys(err.schema, validator.schema))
            # unevaluatedProperties also lists known keys whose value failed (a failed subschema
            # evaluates nothing): their own error says what is wrong, so only unknown keys count
            extra = [n for n in names if n in err.instance and n not in allowed]
            if keyword == "unevaluatedProperties" and allowed and not extra:
                continue
            if extra:
                path = path + (extra[0],)
                key = True
                close = difflib.get_close_matches(extra[0], allowed, n=1)
                message = f"unknown key {extra[0]!r}"
                hint = f"did you mean {close[0]!r}?" if close else "remove it or prefix it with x-"
                ctx.error("schema/unknown-key", path, message, hint, key=True)
                continue
        if keyword in ("oneOf", "anyOf") and err.context:
            # the branch that got furthest into the value says what is wrong (an item of a
            # list, not "is not of type 'null'"), and where
            from jsonschema.exceptions import best_match
            deepest = max(err.context, key=lambda e: len(e.absolute_path))
            sub = deepest if len(deepest.absolute_path) > len(err.absolute_path) else best_match(err.context)
            path = tuple(sub.absolute_path)
            message = f"{_short(err.instance)} is not valid here: {sub.message}"
        elif len(message) > 240:
            from servedeck.textfmt import clip
            message = clip(message, 240)
        ctx.error(f"schema/{_kebab(keyword)}", path, message,
                  "see the Compose Specification (compose-spec.io) for this field", key=key)
    if valid:
        try:
            atomic_write(marker, b"")
        except OSError:
            pass  # a read-only cache only costs the next check its validation
