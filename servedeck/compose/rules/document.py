"""Whole-document rule families: ``schema/*``, ``yaml11/*`` and ``interpolation/*``.

* schema: the Compose Specification JSON Schema shipped in this package
  (``servedeck/compose/compose-spec.json``, source in :data:`COMPOSE_SPEC_SOURCE`), validated
  with the ``jsonschema`` validator class its ``$schema`` names.
* yaml11: plain scalars a YAML 1.1 reader (PyYAML, older tools, YAML 1.1 habits of Go YAML)
  reads differently from YAML 1.2 (type repository regexes, yaml.org/type, 2005).
* interpolation: Compose's ``$VAR`` / ``${VAR...}`` / ``$$`` syntax (compose-spec
  ``interpolation.md``; compose-go ``template`` rejects any other ``$``).
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

from servedeck.compose.document import interpolate, interpolation_refs, literal_values
from servedeck.compose.rules._doc import Path, Scalar
from servedeck.compose.rules._service import Ctx
from servedeck.yaml11 import is_sexagesimal, yaml11_type, yaml12_type
from servedeck.fsutil import atomic_write, cache_dir

# ----------------------------------------------------------------------------- schema


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
    origin = importlib.util.find_spec("jsonschema").origin
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
            message = message[:237] + "..."
        ctx.error(f"schema/{_kebab(keyword)}", path, message,
                  "see the Compose Specification (compose-spec.io) for this field", key=key)
    if valid:
        try:
            atomic_write(marker, b"")
        except OSError:
            pass  # a read-only cache only costs the next check its validation


# ----------------------------------------------------------------------------- yaml11

_OCTAL_LIKE = re.compile(r"^[-+]?0[0-9_]+$")
_FLOAT11 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.[0-9.]*(?:[eE][-+][0-9]+)?$")
_TIMESTAMP = re.compile(r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}.*)?$")


def _sexagesimal_value(text: str) -> float:
    sign = -1 if text.startswith("-") else 1
    total = 0.0
    for part in text.lstrip("+-").replace("_", "").split(":"):
        total = total * 60 + float(part)
    return sign * (int(total) if total.is_integer() else total)


def _context(path: Path) -> tuple[str, str | None]:
    """(service-level field, env key) of a scalar path, ignoring merge-key steps."""
    p = [x for x in path if x != "<<"]
    if len(p) >= 3 and p[0] == "services":
        env_key = p[3] if len(p) == 4 and p[2] == "environment" and isinstance(p[3], str) else None
        return str(p[2]), env_key
    return "", None


def check_yaml11(ctx: Ctx) -> None:
    """``yaml11/*``: plain scalars whose meaning differs between YAML 1.1 and YAML 1.2 readers."""
    for path, sc in ctx.doc.scalars.items():
        if not sc.plain:
            continue
        field_name, env_key = _context(path)
        if field_name == "restart" and len(path) == 3:
            continue  # restart/no-unquoted
        _one_scalar(ctx, path, sc, field_name, env_key)


def _one_scalar(ctx: Ctx, path: Path, sc: Scalar, field_name: str, env_key: str | None) -> None:
    raw = sc.raw
    quote = f"quote it: \"{raw}\""
    if is_sexagesimal(raw):
        rule = "yaml11/port-sexagesimal" if field_name in ("ports", "expose") else "yaml11/sexagesimal"
        ctx.error(rule, path,
                  f"unquoted {raw} is a base-60 number in YAML 1.1 ({_sexagesimal_value(raw):g}), "
                  f"a string in YAML 1.2", quote)
        return
    if yaml11_type(raw) == "bool" and yaml12_type(raw) != "bool":
        if env_key is not None:
            ctx.error("yaml11/env-boolean", path,
                      f"environment {env_key}: unquoted {raw} is a boolean, not a string, for YAML 1.1 "
                      f"readers (Compose environment values must be strings)", quote)
        else:
            ctx.warning("yaml11/boolean", path,
                        f"unquoted {raw} is a boolean in YAML 1.1 and a string in YAML 1.2", quote)
        return
    if _OCTAL_LIKE.match(raw) and sc.tag == "int":
        octal = raw.lstrip("+-").replace("_", "")
        as11 = str(int(octal, 8)) if re.fullmatch(r"0[0-7]+", octal) else f"the string {raw!r}"
        ctx.error("yaml11/octal", path,
                  f"unquoted {raw} is {as11} in YAML 1.1 (octal) but {int(octal)} in YAML 1.2", quote)
        return
    if sc.tag == "float" and not _FLOAT11.match(raw) and not raw.lower().lstrip("+-").startswith((".inf", ".nan")):
        ctx.warning("yaml11/float", path,
                    f"unquoted {raw} is a number in YAML 1.2 but the string {raw!r} in YAML 1.1", quote)
        return
    if sc.tag in ("int", "float") and "_" in raw:
        ctx.warning("yaml11/underscore-number", path,
                    f"unquoted {raw} is a number for some readers and a string for others", quote)
        return
    if sc.tag in ("str", "timestamp") and _TIMESTAMP.match(raw):
        ctx.warning("yaml11/timestamp", path, f"unquoted {raw} is a timestamp in YAML 1.1", quote)
        return
    if env_key is not None and sc.tag in ("int", "float", "bool"):
        value: Any = {"int": int, "float": float}.get(sc.tag, str)(raw.replace("_", "")) \
            if sc.tag != "bool" else raw.lower() == "true"
        canonical = str(value).lower() if sc.tag == "bool" else (
            str(value) if sc.tag == "int" else format(value, "g"))
        if canonical != raw:
            ctx.error("yaml11/env-number", path,
                      f"environment {env_key}: unquoted {raw} is a {sc.tag}; Compose passes it on as "
                      f"{canonical!r}, not {raw!r}", quote)
        else:
            kind = "boolean" if sc.tag == "bool" else "number"
            ctx.warning(f"yaml11/env-{'boolean' if sc.tag == 'bool' else 'number'}", path,
                        f"environment {env_key}: unquoted {raw} is a {kind}, not a string (Compose "
                        f"environment values are strings)", quote)
        return
    if field_name == "group_add" and sc.tag == "int":
        ctx.warning("yaml11/group-add-number", path,
                    f"unquoted group id {raw} is a number; group_add entries are strings", quote)


# ----------------------------------------------------------------------------- interpolation

def _literal_variable(ctx: Ctx, path: Path, value: str) -> None:
    """A profile's command or environment value holding ``${NAME}`` / ``$NAME``: the renderer
    wrote its ``$`` as ``$$``, so neither Compose nor vLLM (no shell runs the argv) substitutes
    it, and the server gets those characters."""
    names, _ = interpolation_refs(value)
    if names and _context(path)[0] in ("command", "entrypoint", "environment"):
        shown = ", ".join(f"${n}" for n in dict.fromkeys(names))
        ctx.warning("interpolation/literal", path,
                    f"{value!r} reaches the server as written: a profile value is literal "
                    f"(servedeck writes $ as $$), so {shown} is not substituted by Compose",
                    "write the value itself; to keep a secret out of the profile, put it in a file "
                    "on the host and name it in container.compose_extra: {env_file: [FILE]} "
                    "(relative to the host's working directory)")


def check_interpolation(ctx: Ctx) -> None:
    """``interpolation/invalid`` (error), ``interpolation/unintended`` (warning) and, in a file
    servedeck rendered, ``interpolation/literal`` (warning: a profile value that looks like a
    Compose variable reaches the server as it is written)."""
    seen: set[tuple[int, str]] = set()
    for path, sc in ctx.doc.scalars.items():
        if sc.tag != "str" or "$" not in sc.raw or "<<" in path:
            continue
        refs, bad = interpolation_refs(sc.raw)
        if (sc.line, sc.raw) in seen:
            continue
        seen.add((sc.line, sc.raw))
        if ctx.expect.rendered and not refs and bad is None and "$$" in sc.raw:
            _literal_variable(ctx, path, literal_values(sc.raw))
            continue
        if bad is not None:
            ctx.error("interpolation/invalid", path,
                      f"{bad!r} is not a valid Compose interpolation; `docker compose` refuses the file",
                      "write a literal $ as $$, or use ${NAME}")
            continue
        if not refs:
            continue
        field_name, _ = _context(path)
        argv_like = field_name in ("command", "entrypoint", "healthcheck")
        json_like = sc.raw.lstrip().startswith(("{", "["))
        # a bare $NAME inside an environment value (a key or password containing "$") is cut
        # out by Compose; ${NAME} or a value that is only $NAME passes a variable on purpose
        env_embedded = field_name == "environment" and re.search(r"\S\$[A-Za-z_]", sc.raw.split("=", 1)[-1]) \
            is not None and "${" not in sc.raw
        # every reference with a default (${VAR:-x}) or set by the file's .env: substitution
        # by Compose is what the author meant
        meant = interpolate(sc.raw, ctx.expect.variables) is not None
        if (argv_like or json_like or env_embedded) and not meant:
            names = ", ".join(f"${r}" for r in dict.fromkeys(refs))
            ctx.warning("interpolation/unintended", path,
                        f"Compose substitutes {names} from the environment of whoever runs "
                        f"`docker compose` (empty when unset), before the container sees it",
                        "write $$ for a literal $ (a shell in the container then expands it)")
