"""``yaml11/*``: plain scalars a YAML 1.1 reader (PyYAML, older tools, YAML 1.1 habits of Go
YAML) reads differently from YAML 1.2 (the type repository's regexes, yaml.org/type, 2005:
:mod:`servedeck.yaml11`).
"""

from __future__ import annotations

import re
from typing import Any

from servedeck.compose.rules._context import Ctx
from servedeck.compose.rules._doc import Path, Scalar, field_context
from servedeck.yaml11 import is_sexagesimal, yaml11_type, yaml12_type


_OCTAL_LIKE = re.compile(r"^[-+]?0[0-9_]+$")


_FLOAT11 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.[0-9.]*(?:[eE][-+][0-9]+)?$")


_TIMESTAMP = re.compile(r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}.*)?$")


def _sexagesimal_value(text: str) -> float:
    sign = -1 if text.startswith("-") else 1
    total = 0.0
    for part in text.lstrip("+-").replace("_", "").split(":"):
        total = total * 60 + float(part)
    return sign * (int(total) if total.is_integer() else total)


def check_yaml11(ctx: Ctx) -> None:
    """``yaml11/*``: plain scalars whose meaning differs between YAML 1.1 and YAML 1.2 readers."""
    for path, sc in ctx.doc.scalars.items():
        if not sc.plain:
            continue
        field_name, env_key = field_context(path)
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
