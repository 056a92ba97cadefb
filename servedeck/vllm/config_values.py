"""Values of JSON config flags (``--compilation-config``, ``--speculative-config``, ...) judged
against the release's own config model, without vLLM.

The judge is the config's JSON Schema as pydantic gives it, extracted with the release's table
(:attr:`servedeck.vllm.facts.JsonConfig.schema_`, :func:`servedeck.vllm.introspect.config_schema`),
turned back into pydantic types here, so values are validated by pydantic's own rules in the
mode vLLM uses (lax: ``"512"`` is an integer, ``"yes"`` a boolean): ``json`` for the
``parse_dataclass`` flags (``TypeAdapter(cls).validate_json``, ``vllm/engine/arg_utils.py``),
``python`` for a dict given to the class (``SpeculativeConfig(**value)``).

What a schema cannot say: a field validator of vLLM's that sees the value before the type
(``CompilationConfig.mode`` takes mode names in any case, and refuses ``"3"`` that the enum
type alone would take). The extraction records vLLM's verdicts on probe values for each such
field (``x-probes``); the judge decides from them where they decide, and calls the rest
uncertain. Problems are data (:class:`ConfigProblem`): the field path, the message, whether
vLLM refuses the value for certain. The in-image dry run (``check --in-image``) stays the last
judge: ``__post_init__`` checks that need a model or a device are not run here.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (ConfigDict, Field, PlainValidator, StringConstraints, TypeAdapter,
                      ValidationError, with_config)
from pydantic_core import PydanticCustomError
from typing_extensions import NotRequired, Required, TypedDict

ProblemKind = Literal["unknown-key", "ignored-key", "bad-value", "missing"]


@dataclass(frozen=True)
class ConfigProblem:
    """One thing the config model refuses (or may refuse) in a value.

    Attributes:
        path: field path inside the config value, e.g. ``("pass_config", "fuse_norm_quant")``;
            list items by index.
        kind: ``unknown-key`` (the config has no such field and refuses it), ``ignored-key``
            (no such field, and the config drops it without a word: a pydantic class without
            ``extra="forbid"``, as vLLM 0.10-0.11's configs were), ``missing`` (a required field
            is absent) or ``bad-value``.
        message: what the model says, with the value given.
        certain: True when vLLM refuses it for certain; False when only the schema says so and
            a validator of vLLM's sees the value first (the dry run decides).
        takes: for a field vLLM's own validator reads, the spellings it takes (for a hint), or
            None.
    """

    path: tuple[str | int, ...]
    kind: ProblemKind
    message: str
    certain: bool = True
    takes: str | None = None

    @property
    def where(self) -> str:
        """``pass_config.fuse_norm_quant``, ``sizes[2]``."""
        out = ""
        for p in self.path:
            out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
        return out


_TAG = "_sd_object_"
"""Name prefix of the object types made here (pydantic names union members by them in error
locations, where :func:`_path` leaves them out)."""
_CERTAIN = "vllm_refuses"
_UNCERTAIN = "vllm_may_refuse"
_NONSENSE = "servedeck-probe"
_MAX_DEPTH = 40


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object"


def _same(a: Any, b: Any) -> bool:
    return _json_kind(a) == _json_kind(b) and a == b


class _Compiler:
    """A JSON Schema of pydantic's (draft 2020-12 as ``json_schema()`` writes it) turned into
    pydantic types: objects with listed properties into ``TypedDict`` (``extra="forbid"`` when
    ``additionalProperties`` is false), enums into ``Enum`` classes (an enum of the schema's
    ``x-enum`` kind validates like the class vLLM has: an ``IntEnum`` takes ``"3"``), literals
    into ``Literal``, unions into ``Union``, constraints into ``Field`` constraints. A field a
    validator of vLLM's sees first (``x-probes``) is judged by :meth:`_probed`."""

    def __init__(self, root: dict[str, Any], mode: str, *, forbid_ignored: bool = False) -> None:
        self.root = root
        self.defs: dict[str, Any] = root.get("$defs") or {}
        self.mode = mode
        self.forbid_ignored = forbid_ignored  # refuse the extra keys such a class drops, to name them
        self.refs: dict[str, Any] = {}
        self.count = 0

    def compile(self, node: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH or node is True or not isinstance(node, dict) or not node:
            return Any
        if "x-probes" in node:
            return Annotated[Any, PlainValidator(self._probed(node, depth))]
        if node.get("x-validator") == "model":
            return Annotated[Any, PlainValidator(self._uncertain(node, depth))]
        if "$ref" in node:
            return self._ref(node["$ref"], depth)
        if "const" in node:
            return Literal[node["const"]]
        if "enum" in node:
            return self._enum(node)
        for key in ("anyOf", "oneOf"):
            if key in node:
                members = tuple(self.compile(n, depth + 1) for n in node[key])
                return Union[members] if len(members) > 1 else members[0]
        if "allOf" in node:
            parts = node["allOf"]
            return self.compile(parts[0], depth + 1) if len(parts) == 1 else Any
        kind = node.get("type")
        if isinstance(kind, list):
            members = tuple(self.compile({**node, "type": k}, depth + 1) for k in kind)
            return Union[members] if len(members) > 1 else members[0]
        if kind is None and "properties" in node:
            kind = "object"
        return self._typed(kind, node, depth)

    def _typed(self, kind: str | None, node: dict[str, Any], depth: int) -> Any:
        if kind == "null":
            return None
        if kind == "boolean":
            return bool
        if kind == "string":
            return Annotated[str, StringConstraints(min_length=node.get("minLength"), max_length=node.get("maxLength"),
                                                    pattern=node.get("pattern"))]
        if kind in ("integer", "number"):
            number: type = int if kind == "integer" else float
            return Annotated[number,
                             Field(ge=node.get("minimum"), le=node.get("maximum"), gt=node.get("exclusiveMinimum"),
                                   lt=node.get("exclusiveMaximum"), multiple_of=node.get("multipleOf"))]
        if kind == "array":
            return self._array(node, depth)
        if kind == "object":
            return self._object(node, depth)
        return Any

    def _array(self, node: dict[str, Any], depth: int) -> Any:
        limits = Field(min_length=node.get("minItems"), max_length=node.get("maxItems"))
        if "prefixItems" in node:
            items = [self.compile(n, depth + 1) for n in node["prefixItems"]]
            if node.get("items") is False or "items" not in node:
                return Annotated[tuple[tuple(items)], limits]  # type: ignore[misc]
            return Annotated[list[Any], limits]
        return Annotated[list[self.compile(node.get("items", {}), depth + 1)], limits]  # type: ignore[misc]

    def _object(self, node: dict[str, Any], depth: int) -> Any:
        props: dict[str, Any] = node.get("properties") or {}
        extra = node.get("additionalProperties", True)
        if not props:
            if isinstance(extra, dict):
                return dict[str, self.compile(extra, depth + 1)]  # type: ignore[misc]
            return dict[str, Any]
        required = set(node.get("required") or [])
        fields = {name: (Required if name in required else NotRequired)[self.compile(sub, depth + 1)]
                  for name, sub in props.items()}
        self.count += 1
        td = TypedDict(f"{_TAG}{self.count}", fields)  # type: ignore[misc]
        forbid = extra is False or self.forbid_ignored and "additionalProperties" not in node
        return with_config(ConfigDict(extra="forbid" if forbid else "ignore"))(td)

    def _enum(self, node: dict[str, Any]) -> Any:
        values = node["enum"]
        info = node.get("x-enum")
        if info and len(info.get("names", [])) == len(values):
            base = {"int": enum.IntEnum, "str": str}.get(info.get("base"), None)
            members = dict(zip(info["names"], values, strict=True))
            if base is enum.IntEnum and all(isinstance(v, int) for v in values):
                return enum.IntEnum("E", members)
            if base is str and all(isinstance(v, str) for v in values):
                return enum.Enum("E", members, type=str)
            return enum.Enum("E", members)
        return Literal[tuple(values)]

    def _ref(self, ref: str, depth: int) -> Any:
        name = ref.rsplit("/", 1)[-1]
        if name not in self.refs:
            self.refs[name] = Any  # a recursive definition is taken as it comes
            self.refs[name] = self.compile(self.defs.get(name, {}), depth + 1)
        return self.refs[name]

    def adapter(self, node: dict[str, Any], depth: int) -> TypeAdapter[Any]:
        return TypeAdapter(self.compile(node, depth + 1))

    def validate(self, adapter: TypeAdapter[Any], value: Any) -> Any:
        if self.mode == "json":
            return adapter.validate_json(json.dumps(value))
        return adapter.validate_python(value)

    def _uncertain(self, node: dict[str, Any], depth: int) -> Any:
        """A class whose own validator of vLLM's reads its input first: the schema's verdict
        on it is not certain."""
        adapter = self.adapter({k: v for k, v in node.items() if k != "x-validator"}, depth)

        def judge(value: Any) -> Any:
            try:
                self.validate(adapter, value)
            except ValidationError as exc:
                raise _as_uncertain(exc) from None
            return value
        return judge

    def _probed(self, node: dict[str, Any], depth: int) -> Any:
        """A field a validator of vLLM's sees first: decided by vLLM's verdicts on probe values
        (``x-probes``) where they decide; else by the schema when, for values of the same JSON
        kind, the probes showed the validator agreeing with it; else a string the validator
        refuses every other spelling of; else uncertain."""
        probes = [(p, ok) for p, ok in node["x-probes"]]
        inner = {k: v for k, v in node.items() if k not in ("x-probes", "x-validator")}
        adapter = self.adapter(inner, depth)
        names = _enum_names(inner, self.defs)
        values = _enum_values(inner, self.defs)

        def schema_ok(value: Any) -> bool:
            try:
                self.validate(adapter, value)
            except ValidationError:
                return False
            return True

        sampled = [(p, ok) for p, ok in probes if isinstance(p, str) and p in names]
        lowered = [(p, ok) for p, ok in probes if isinstance(p, str) and p in {n.lower() for n in names} - set(names)]
        names_ok = bool(sampled) and all(ok for _, ok in sampled)
        any_case = names_ok and bool(lowered) and all(ok for _, ok in lowered)
        nonsense = next((ok for p, ok in probes if p == _NONSENSE), None)
        takes = _takes(probes, names if names_ok else [], any_case, values) if names or values else None

        def judge(value: Any) -> Any:
            exact = [ok for p, ok in probes if _same(p, value)]
            if exact:
                if exact[0]:
                    return value
                raise PydanticCustomError(_CERTAIN, "{msg}", {"msg": f"vLLM's validator refuses {value!r}",
                                                             "takes": takes})
            kind = _json_kind(value)
            same = [(p, ok) for p, ok in probes if _json_kind(p) == kind]
            if same and all(schema_ok(p) == ok for p, ok in same):
                self.validate(adapter, value)  # its errors, at their own paths below the field
                return value
            if kind == "str":
                if names_ok and (value in names or any_case and value.upper() in {n.upper() for n in names}):
                    return value
                if nonsense is False:
                    raise PydanticCustomError(_CERTAIN, "{msg}", {"msg": f"vLLM's validator refuses {value!r}",
                                                                 "takes": takes})
                return value
            if not schema_ok(value):
                raise PydanticCustomError(_UNCERTAIN, "{msg}", {"msg": f"the field's type refuses {value!r}",
                                                               "takes": takes})
            return value
        return judge


def _as_uncertain(exc: ValidationError) -> ValidationError:
    """``exc``'s errors, each at its own location, marked as the schema's verdict only."""
    return ValidationError.from_exception_data("uncertain", [
        {"type": PydanticCustomError(_UNCERTAIN, "{msg}", {"msg": e["msg"]}), "loc": tuple(e.get("loc") or ()),
         "input": e.get("input")} for e in exc.errors()])


def _walk_enums(node: Any, defs: dict[str, Any], depth: int = 0) -> list[dict[str, Any]]:
    if depth > 8 or not isinstance(node, dict):
        return []
    out = []
    ref = node.get("$ref")
    if isinstance(ref, str):
        out += _walk_enums(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1)
    if "enum" in node:
        out.append(node)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(key) or []:
            out += _walk_enums(sub, defs, depth + 1)
    return out


def _enum_names(node: Any, defs: dict[str, Any]) -> list[str]:
    return [n for e in _walk_enums(node, defs) for n in (e.get("x-enum") or {}).get("names", [])]


def _enum_values(node: Any, defs: dict[str, Any]) -> list[Any]:
    return [v for e in _walk_enums(node, defs) for v in e.get("enum", [])]


def _takes(probes: list[tuple[Any, bool]], names: list[str], any_case: bool, values: list[Any]) -> str:
    """The spellings a probed field takes, for a hint: ``0, 1, 2, 3 or NONE, VLLM_COMPILE (any
    case), None``."""
    taken = [p for p, ok in probes if ok and isinstance(p, (int, float)) and not isinstance(p, bool)]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    parts = [", ".join(map(str, dict.fromkeys(numbers or taken)))] if (numbers or taken) else []
    if names:
        parts.append(", ".join(names) + (" (any case)" if any_case else ""))
    words = [repr(p) for p, ok in probes if ok and isinstance(p, str) and p not in names
             and (not any_case or p.upper() not in {n.upper() for n in names})]
    if words:
        parts.append(", ".join(words))
    if any(p is None and ok for p, ok in probes):
        parts.append("null")
    return " or ".join(p for p in parts if p)


_ADAPTERS: dict[tuple[int, str, bool], tuple[dict[str, Any], TypeAdapter[Any]]] = {}


def _root_adapter(schema: dict[str, Any], mode: str, forbid_ignored: bool = False) -> TypeAdapter[Any]:
    """The compiled schema, cached for the schema object (held, so its id stays its own)."""
    key = (id(schema), mode, forbid_ignored)
    if key not in _ADAPTERS:
        _ADAPTERS[key] = (schema, TypeAdapter(_Compiler(schema, mode, forbid_ignored=forbid_ignored).compile(schema)))
    return _ADAPTERS[key][1]


def _errors(adapter: TypeAdapter[Any], value: Any, mode: str | None) -> list[Any]:
    try:
        if mode == "json":
            adapter.validate_json(json.dumps(value))
        else:
            adapter.validate_python(value)
    except ValidationError as exc:
        return exc.errors()
    return []


def _path(loc: tuple[Any, ...], value: Any) -> tuple[str | int, ...]:
    """The field path of an error location: the keys and indexes ``loc`` takes through
    ``value`` (pydantic puts union-member and type tags between them, which are left out)."""
    out: list[str | int] = []
    cur = value
    for part in loc:
        if isinstance(cur, dict) and part in cur:
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, (list, tuple)) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, dict) and isinstance(part, str) and not part.startswith(_TAG) \
                and "[" not in part and part not in ("int", "str", "float", "bool", "none"):
            out.append(part)  # a missing key: nothing below it
            cur = None
    return tuple(out)


def judge_config(schema: dict[str, Any], value: Any, *, mode: str | None = None,
                 partial: bool = False) -> list[ConfigProblem]:
    """What the config model of ``schema`` refuses in ``value``.

    Args:
        schema: a config's JSON Schema with vLLM's probe verdicts
            (:attr:`servedeck.vllm.facts.JsonConfig.schema_`).
        value: the flag's value as vLLM reads it (a dict, after ``json.loads``).
        mode: ``json`` or ``python`` (:attr:`~servedeck.vllm.facts.JsonConfig.validation`;
            None: ``python``).
        partial: the value holds some keys only (a ``--set`` of one key): required fields
            that are absent are not problems.

    Returns:
        One :class:`ConfigProblem` per field path, in the order pydantic reports them (the
        messages of a union's members joined with "or"); empty when the model takes the value.
    """
    problems = _problems(_errors(_root_adapter(schema, mode or "python"), value, mode), value, partial)
    seen = {p.path for p in problems}
    for e in _errors(_root_adapter(schema, mode or "python", True), value, mode):
        path = _path(tuple(e.get("loc") or ()), value)
        if e["type"] == "extra_forbidden" and path not in seen:
            seen.add(path)
            problems.append(ConfigProblem(path, "ignored-key", "not a field of the config, dropped without a word"))
    return problems


def _problems(errors: list[Any], value: Any, partial: bool) -> list[ConfigProblem]:
    grouped: dict[tuple[str | int, ...], list[Any]] = {}
    for e in errors:
        if e["type"] == "missing" and partial:
            continue
        grouped.setdefault(_path(tuple(e.get("loc") or ()), value), []).append(e)
    out = []
    for path, errs in grouped.items():
        kinds = {e["type"] for e in errs}
        ctx = next((e.get("ctx") or {} for e in errs if (e.get("ctx") or {}).get("takes")), {})
        if "extra_forbidden" in kinds:
            out.append(ConfigProblem(path, "unknown-key", "not a field of the config"))
            continue
        if kinds == {"missing"}:
            out.append(ConfigProblem(path, "missing", "a required field is missing"))
            continue
        certain = _UNCERTAIN not in kinds  # a union fails only if every member does
        messages = list(dict.fromkeys(e["msg"] for e in errs if e["type"] != "missing"))
        if len(messages) > 1:  # "Input should be None" says nothing when another member speaks
            messages = [m for m in messages if m != "Input should be None"] or messages
        got = errs[0].get("input")
        text = " or ".join(messages)
        if not any("refuses" in m for m in messages):
            text += f" (got {json.dumps(got) if _jsonable(got) else repr(got)})"
        out.append(ConfigProblem(path, "bad-value", text, certain, ctx.get("takes") or None))
    return out


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def owners_of(key: str, configs: dict[str, Any], *, besides: str | None = None) -> list[str]:
    """The JSON config flags (dests) whose config has a field ``key``, except ``besides``:
    ``num_speculative_tokens`` → ``["speculative_config"]``."""
    return [dest for dest, cfg in configs.items() if dest != besides and key in cfg.fields]


__all__ = ["ConfigProblem", "judge_config", "owners_of"]
