"""``flags/*``: ``vllm serve`` flags judged by the release's own argument surface
(:class:`servedeck.vllm.facts.VllmFacts`, read from vLLM's parser): flags the release does not
know (removed or renamed), abbreviations argparse expands (or finds ambiguous), option strings
it accepts without documenting them, deprecated flags, values its type functions or choices
reject, and a flag given twice; and ``json/*``: the values of JSON config flags judged against the
release's config model.

Every spelling vLLM reads is judged: a whole JSON value (``--compilation-config '{...}'``,
``--compilation-config={...}``), the dotted sub-key flags vLLM merges into one value that
replaces the whole one (``--compilation-config.mode 3``, ``vllm/utils/argparse_utils.py``
``FlexibleArgumentParser.parse_args``), and the exl3xpu launcher's ``--set
vllm.compilation_config.mode=3`` (one key: the rest comes from the image's model.yaml). The
judge is :func:`servedeck.vllm.config_values.judge_config` on the schema extracted with the
release's table; for facts extracted without schemas, the config's field names only.

Rules: ``json/unknown-key`` (a key the config has no field for, with the flag it belongs to
when another config has it), ``json/ignored-key`` (the same, for a release whose config drops
unknown keys silently: vLLM 0.10-0.11), ``json/bad-value`` (a value the model refuses, with the field
path), ``json/missing-key``, and ``json/key-of-another-flag`` (keys of a config flag given to a
flag that takes any dict and never reads them as that config: ``--additional-config``).

vLLM value syntax (``vllm/utils/argparse_utils.py``): ``human_readable_int`` takes ``16k``
(16000) and ``16K`` (16384), ``1m``/``1M``, decimals with a suffix (``25.6k``);
``human_readable_int_or_auto`` also ``-1``/``auto``; plain ``int`` takes none of these.
``FlexibleArgumentParser`` accepts ``--flag=value`` and underscores in flag names, and gathers
``--OPTION.KEY VALUE`` (``KEY+ A,B``: a list) into one JSON value of ``--OPTION``; argparse keeps
the last occurrence of a flag.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import judge, vllm_flags
from servedeck.compose.rules._context import Ctx, Flag, Service
from servedeck.vllm import argv
from servedeck.vllm.argv import convert_kind, kind_of_type, negative_option
from servedeck.vllm.config_values import ConfigProblem, judge_config, owners_of

#: dests whose names the ``vllm/unknown-*`` rules judge (with the bracketing releases)
_NAMED = {"tool_call_parser", "reasoning_parser", "kv_cache_dtype"}



_OPTIONAL = "_optional_type"
"""vLLM's ``optional_type`` wrapper (``vllm/engine/arg_utils.py``): ``""`` and ``"None"`` give
None; the shipped tables do not record the type it wraps."""


def _typed(type_name: str | None, text: str) -> Any:
    """``text`` converted by vLLM's type function ``type_name`` as argparse runs it
    (:func:`servedeck.vllm.argv.convert_kind`); ``text`` itself for a type it cannot run.

    Raises:
        ValueError: the type function refuses the text.
    """
    kind = kind_of_type(type_name)
    if kind == "json":
        return text  # the json/* rules judge JSON values
    return convert_kind(kind or "str", text, optional=type_name == _OPTIONAL)


def _value_ok(type_name: str | None, text: str) -> bool | None:
    """Whether vLLM's type function ``type_name`` accepts ``text`` (None: cannot tell)."""
    if type_name not in ("int", "float", "human_readable_int", "human_readable_int_or_auto"):
        return None
    try:
        _typed(type_name, text)
    except ValueError:
        return False
    return True


def _in_choices(action: Any, text: str) -> bool:
    """argparse's choice test: the converted value is one of the choices."""
    try:
        value = _typed(action.type, text)
    except ValueError:
        return True  # flags/bad-value says it
    return value in action.choices or (isinstance(value, str) and value in [str(c) for c in action.choices])


def _spelling(type_name: str | None) -> str:
    return {"int": "a plain integer (no k/K/M suffix, no 'auto')",
            "float": "a number",
            "human_readable_int": "an integer, optionally with k/m/g (x1000) or K/M/G (x1024)",
            "human_readable_int_or_auto": "an integer with optional k/K/m/M suffix, -1 or auto",
            }.get(type_name or "", "a value of its type")


def check_flags(ctx: Ctx, svc: Service) -> None:
    """``flags/unknown``, ``flags/abbreviation``, ``flags/ambiguous-abbreviation``,
    ``flags/hidden``, ``flags/deprecated``, ``flags/bool-with-value``, ``flags/bad-value``,
    ``flags/bad-choice`` and ``flags/repeated`` (the ``json/*`` values: :func:`check_json_values`)."""
    flags = vllm_flags(svc)
    if not flags:
        return
    j = judge(ctx, svc, "serve_args")
    seen: dict[str, Flag] = {}
    for flag in flags:
        key = flag.name.replace("_", "-")
        prev = seen.get(key)
        if prev is not None and prev.value != flag.value:
            ctx.warning("flags/repeated", flag.token.path,
                        f"--{flag.name} is given twice ({prev.value!r}, then {flag.value!r}); argparse "
                        f"keeps the last one, {flag.value!r}", "keep one occurrence")
        seen[key] = flag
    if j is None:
        return
    facts = j.facts
    report = ctx.error if j.exact else ctx.warning
    for flag in flags:
        base, dot, _ = flag.name.partition(".")
        if dot and facts.option(base) is not None:
            continue  # --OPTION.KEY VALUE: vLLM gathers these into one JSON value of --OPTION (json/*)
        action = facts.option(flag.name)
        if action is None and j.maybe_added(lambda f: f.option(flag.name)):  # noqa: B023 - called at once
            continue  # known to the next newer release: may have been added in between
        if action is None and flag.token.s.startswith("--") and "." not in flag.name:
            full = facts.abbreviated(flag.name)
            if len(full) == 1:
                ctx.warning("flags/abbreviation", flag.token.path,
                            f"--{flag.name} is not a `vllm serve` option; argparse takes it as the "
                            f"abbreviation of {full[0]} in {j.basis} (allow_abbrev)",
                            f"write {full[0]} in full: an option added later that starts the same "
                            f"way makes the abbreviation ambiguous, and vLLM then exits")
                continue
            if len(full) > 1:
                report("flags/ambiguous-abbreviation", flag.token.path,
                       f"--{flag.name} abbreviates several `vllm serve` options in {j.basis} "
                       f"({', '.join(full[:6])}{' ...' if len(full) > 6 else ''}); vLLM exits with "
                       f"'ambiguous option: --{flag.name}'", "write the option in full")
                continue
        if action is None:
            options = sorted(o[2:] for o in facts.by_option if o.startswith("--"))
            hint = _rename_hint(flag.name, options, facts)
            report("flags/unknown", flag.token.path,
                   f"--{flag.name} is not a `vllm serve` flag in {j.basis}: vLLM exits with "
                   f"'unrecognized arguments: --{flag.name}' (removed or renamed)", hint)
            continue
        if f"--{flag.name}" in action.hidden and flag.token.s.startswith("--"):
            shown = negative_option(facts, action.dest) if action.stored(f"--{flag.name}") is False \
                else next((o for o in action.options if action.stored(o) is True), None)
            ctx.info("flags/hidden", flag.token.path,
                     f"--{flag.name} is accepted by {j.basis} but not shown in its help (kept for "
                     f"backwards compatibility)" + (f"; the release documents {shown}" if shown else ""),
                     f"write {shown}" if shown else None)
        if action.deprecated:
            ctx.warning("flags/deprecated", flag.token.path,
                        f"--{flag.name} is deprecated in {j.basis} and will be removed",
                        "see `vllm serve --help` for its replacement")
        if not action.takes_value and flag.inline is not None:
            # argparse (Python 3.11+ argparse.py, _parse_optional/consume_optional): an explicit
            # value for an action that takes none is an error, "ignored explicit argument"
            opposite = negative_option(facts, flag.name)
            report("flags/bool-with-value", flag.token.path,
                   f"--{flag.name}={flag.inline}: --{flag.name} takes no value in {j.basis}; vLLM "
                   f"exits with 'argument --{flag.name}: ignored explicit argument {flag.inline!r}'",
                   f"write --{flag.name} alone" + (f", or {opposite} to turn it off" if opposite else ""))
            continue
        if flag.value is None or not action.takes_value:
            continue
        text = flag.value
        ok = _value_ok(action.type, text)
        if ok is False:
            report("flags/bad-value", flag.value_path if flag.inline is None else flag.token.path,
                   f"--{flag.name} {text!r}: vLLM reads this flag with {action.type}, which needs "
                   f"{_spelling(action.type)}; vLLM exits with 'invalid {action.type} value'",
                   f"write e.g. --{flag.name} 8192")
        if action.choices and action.dest not in _NAMED and action.nargs in (None, "?") \
                and not _in_choices(action, text) \
                and not j.maybe_added(lambda f: _is_choice(f, flag.name, text)):  # noqa: B023 - called at once
            close = difflib.get_close_matches(text, [str(c) for c in action.choices], n=3)
            report("flags/bad-choice", flag.value_path if flag.inline is None else flag.token.path,
                   f"--{flag.name} {text!r} is not one of vLLM's choices in {j.basis}",
                   f"did you mean {', '.join(close)}?" if close else
                   f"choose from {', '.join(map(str, action.choices))}")


def _is_choice(facts: Any, name: str, text: str) -> bool:
    """True when ``text`` is one of ``--name``'s choices in ``facts``."""
    action = facts.option(name)
    return action is not None and bool(action.choices) and _in_choices(action, text)


def _rename_hint(name: str, options: list[str], facts: Any) -> str:
    if name.startswith(("disable-", "no-disable-")) and f"enable-{name.split('disable-', 1)[1]}" in options:
        positive = f"enable-{name.split('disable-', 1)[1]}"
        if name.startswith("no-"):
            return f"use --{positive}"
        return f"use {negative_option(facts, positive) or '--no-' + positive}"
    key = name.replace("-", "_")
    owners = [dest for dest, cfg in (facts.json_configs or {}).items() if key in cfg.fields]
    if owners:
        flag = "--" + owners[0].replace("_", "-")
        return (f"{key} is a key of {flag}: write {flag} '{{\"{key}\": VALUE}}' "
                f"(or {flag}.{key} VALUE)")
    if name.startswith("enable-") and f"no-{name}" not in options and name == "enable-reasoning":
        return "drop it: --reasoning-parser NAME alone turns reasoning output on"
    close = difflib.get_close_matches(name, options, n=3, cutoff=0.7)
    return f"did you mean {', '.join('--' + c for c in close)}?" if close else "drop it"


# ----------------------------------------------------------------------------- json/*

#: config fields other rules judge (``vllm/unknown-speculative-method`` judges method names
#: against the releases bracketing the image's; ``vllm/num-speculative-tokens`` the count)
_JUDGED_ELSEWHERE = {("speculative_config", "method"), ("speculative_config", "num_speculative_tokens")}

#: flags that take any dict and hand it on without reading it as one of vLLM's configs
#: (``additional_config``: for platform plugins, ``vllm/config/vllm.py``)
_FREE_DICTS = ("additional_config",)


def check_json_values(ctx: Ctx, svc: Service) -> None:
    """``json/unknown-key``, ``json/ignored-key``, ``json/bad-value``, ``json/missing-key``,
    ``json/key-of-another-flag``."""
    flags = vllm_flags(svc)
    j = judge(ctx, svc, "serve_args")
    if j is None or not j.facts.json_configs:
        return
    configs = j.facts.json_configs
    dotted: dict[str, list[tuple[Flag, str]]] = {}
    for flag in flags:
        base, dot, sub = flag.name.partition(".")
        action = j.facts.option(base)
        if action is None or flag.value is None:
            continue
        if dot:
            dotted.setdefault(action.dest, []).append((flag, sub))
            continue
        try:
            value = argv.config_json(flag.value, human_numbers=j.facts.json_human_numbers
                                     and action.type == "parse_dataclass")
        except ValueError:
            continue  # argv/invalid-json
        where = flag.value_path if flag.inline is None else flag.token.path
        if action.dest in _FREE_DICTS and isinstance(value, dict):
            _foreign_keys(ctx, f"--{base}", action.dest, value, configs, where)
        elif action.dest in configs and isinstance(value, dict):
            _judge(ctx, j, action.dest, value, lambda p, at=where: at, f"--{base}", partial=False)
    for dest, items in dotted.items():
        gathered: dict[str, Any] = {}
        for flag, sub in items:
            if sub.endswith("+"):  # KEY+ A,B: a list of the texts, appended to a list given before
                _merge(gathered, _nested(sub[:-1].split("."), (flag.value or "").split(",")))
            else:
                _merge(gathered, _nested(sub.split("."), _dotted_value(flag.value or "")))
        first = {sub.rstrip("+").split(".")[0]: flag.token.path for flag, sub in reversed(items)}
        name, at = "--" + dest.replace("_", "-"), items[0][0].token.path
        if dest in _FREE_DICTS:
            _foreign_keys(ctx, name, dest, gathered, configs, at)
        elif dest in configs:
            _judge(ctx, j, dest, gathered, lambda p, by=first, at=at: by.get(str(p[0]) if p else "", at),
                   f"{name}.KEY flags", partial=False)
    for s in svc.launch.edits:  # exl3xpu --set vllm.DEST[.KEY...]=VALUE
        parts = s.key.split(".")
        if parts[0] != "vllm" or len(parts) < 2 or s.raw is None:
            continue
        dest, value = parts[1], s.value
        nested = _nested(parts[2:], value) if len(parts) > 2 else value
        if not isinstance(nested, dict):
            continue
        if dest in _FREE_DICTS:
            _foreign_keys(ctx, f"--set vllm.{dest}", dest, nested, configs, s.path)
        elif dest in configs:
            _judge(ctx, j, dest, nested, lambda p, at=s.path: at, f"--set {s.key}", partial=True)


def _dotted_value(text: str) -> Any:
    """A dotted sub-key flag's value as vLLM reads it: JSON when it parses, else a
    human-readable integer (``80g``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        try:
            return argv.human_readable_int(text)
        except ValueError:
            return text


def _nested(keys: list[str], value: Any) -> Any:
    for k in reversed(keys):
        value = {k: value}
    return value


def _merge(base: dict[str, Any], new: Any) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        elif isinstance(v, list) and isinstance(base.get(k), list):
            base[k] = base[k] + v  # vLLM's recursive_dict_update extends a list
        else:
            base[k] = v


def _judge(ctx: Ctx, j: Any, dest: str, value: dict[str, Any], path_of: Any, given: str,
           *, partial: bool) -> None:
    """Report what ``dest``'s config model refuses in ``value`` (given as ``given``);
    ``path_of(field path)`` is the document path to report at."""
    cfg = j.facts.json_configs[dest]
    cls = cfg.class_.rsplit(".", 1)[-1]
    flag = "--" + dest.replace("_", "-")
    report = ctx.error if j.exact else ctx.warning
    if cfg.schema_ is None:
        problems = _by_fields(cfg, value)
    else:
        problems = judge_config(cfg.schema_, value, mode=cfg.validation, partial=partial)
    for p in problems:
        if (dest, p.path[0] if p.path else "") in _JUDGED_ELSEWHERE:
            continue
        top = str(p.path[0]) if p.path else ""
        where: Path = path_of(p.path)
        if p.kind == "unknown-key":
            if j.maybe_added(lambda f, k=top: k in getattr((f.json_configs or {}).get(dest), "fields", {})):
                continue  # a field of the next newer release's config
            report("json/unknown-key", where,
                   f"{given}: key {p.where!r} is not a field of {cls} in {j.basis}; vLLM rejects the config",
                   _key_hint(p, cfg, dest, j.facts.json_configs))
        elif p.kind == "ignored-key":
            if j.maybe_added(lambda f, k=top: k in getattr((f.json_configs or {}).get(dest), "fields", {})):
                continue
            ctx.warning("json/ignored-key", where,
                        f"{given}: key {p.where!r} is not a field of {cls} in {j.basis}; this release "
                        f"drops it without a word, so it has no effect",
                        _key_hint(p, cfg, dest, j.facts.json_configs))
        elif p.kind == "missing":
            report("json/missing-key", where,
                   f"{given}: {cls} needs {p.where!r} in {j.basis}; vLLM rejects the config without it",
                   f"add {p.where} to the {flag} value")
        elif p.certain:
            report("json/bad-value", where,
                   f"{given}: {cls}.{p.where}: {p.message}, in {j.basis}; vLLM refuses the config and exits",
                   _value_hint(p, flag))
        else:
            ctx.warning("json/bad-value", where,
                        f"{given}: {cls}.{p.where}: {p.message}; vLLM's own validator reads this value first "
                        f"in {j.basis}, so it may still take it",
                        "check it in the image: servedeck check --in-image")


def _value_hint(p: ConfigProblem, flag: str) -> str:
    if p.takes:
        return f"{p.where} takes {p.takes}"
    choices = re.findall(r"'([^']*)'", p.message)
    got = re.search(r'\(got "([^"]*)"\)', p.message)
    if choices and got:
        close = difflib.get_close_matches(got.group(1), choices, n=3)
        if close:
            return f"did you mean {', '.join(close)}?"
    return f"give {p.where} a value its type takes, or leave it out of {flag}"


def _key_hint(p: ConfigProblem, cfg: Any, dest: str, configs: dict[str, Any]) -> str:
    key = str(p.path[-1]) if p.path else ""
    if len(p.path) == 1:
        elsewhere = owners_of(key, configs, besides=dest)
        if elsewhere:
            return f"{key!r} belongs to --{elsewhere[0].replace('_', '-')}; move it there"
    known = _fields_at(cfg.schema_, p.path[:-1]) if cfg.schema_ is not None else sorted(cfg.fields)
    close = difflib.get_close_matches(key, known, n=3)
    return f"did you mean {', '.join(close)}?" if close else f"known keys: {', '.join(known)}"


def _fields_at(schema: dict[str, Any], path: tuple[Any, ...]) -> list[str]:
    """The property names of the object at ``path`` in ``schema`` (following ``$ref``s and
    unions)."""
    defs = schema.get("$defs") or {}

    def objects(node: Any, depth: int = 0) -> list[dict[str, Any]]:
        if not isinstance(node, dict) or depth > 10:
            return []
        if "$ref" in node:
            return objects(defs.get(node["$ref"].rsplit("/", 1)[-1]), depth + 1)
        out = [node] if "properties" in node else []
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(key) or []:
                out += objects(sub, depth + 1)
        return out

    nodes = objects(schema)
    for part in path:
        nodes = [o for n in nodes for o in objects((n.get("properties") or {}).get(part))]
    return sorted({k for n in nodes for k in n.get("properties") or {}})


def _by_fields(cfg: Any, value: dict[str, Any]) -> list[ConfigProblem]:
    """Facts extracted without a schema: unknown keys only (the field annotations are text)."""
    return [ConfigProblem((key,), "unknown-key", "not a field of the config")
            for key in value if key not in cfg.fields]


def _foreign_keys(ctx: Ctx, given: str, dest: str, value: dict[str, Any], configs: dict[str, Any],
                  where: Path) -> None:
    """``json/key-of-another-flag``: keys of vLLM's config flags inside a dict vLLM does not
    read as one of them."""
    by_flag: dict[str, list[str]] = {}
    for key in value:
        owners = owners_of(str(key), configs, besides=dest)
        if owners and len(owners) <= 2:
            by_flag.setdefault(owners[0], []).append(str(key))
    for owner, keys in by_flag.items():
        flag = "--" + owner.replace("_", "-")
        ctx.warning("json/key-of-another-flag", where,
                    f"{given} holds {', '.join(repr(k) for k in keys)}, which "
                    f"{'are keys' if len(keys) > 1 else 'is a key'} "
                    f"of {flag}; vLLM hands {dest} to platform plugins as it is and never reads "
                    f"{'them' if len(keys) > 1 else 'it'} as {flag} settings",
                    f"move {', '.join(keys)} into {flag}")
