"""``flags/*``: ``vllm serve`` flags judged by the release's own argument surface
(:class:`servedeck.vllm.facts.VllmFacts`, read from vLLM's parser): flags the release does not
know (removed or renamed), deprecated flags, values its type functions or choices reject,
a flag given twice, and keys of JSON-valued flags checked against the config's fields.

vLLM value syntax (``vllm/utils/argparse_utils.py``): ``human_readable_int`` takes ``16k``
(16000) and ``16K`` (16384), ``1m``/``1M``, decimals with a suffix (``25.6k``);
``human_readable_int_or_auto`` also ``-1``/``auto``; plain ``int`` takes none of these.
``FlexibleArgumentParser`` accepts ``--flag=value`` and underscores in flag names; argparse
keeps the last occurrence of a flag.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from servedeck.compose.rules._facts import judge, vllm_flags
from servedeck.compose.rules._context import Ctx, Flag, Service
from servedeck.vllm.argv import convert_kind, kind_of_type, negative_option

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
    """``flags/unknown``, ``flags/deprecated``, ``flags/bool-with-value``, ``flags/bad-value``, ``flags/bad-choice``,
    ``flags/repeated`` and the ``json/*`` key checks."""
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
        action = facts.option(flag.name)
        if action is None and j.maybe_added(lambda f: f.option(flag.name)):  # noqa: B023 - called at once
            continue  # known to the next newer release: may have been added in between
        if action is None:
            options = sorted(o[2:] for o in facts.by_option if o.startswith("--"))
            hint = _rename_hint(flag.name, options)
            report("flags/unknown", flag.token.path,
                   f"--{flag.name} is not a `vllm serve` flag in {j.basis}: vLLM exits with "
                   f"'unrecognized arguments: --{flag.name}' (removed or renamed)", hint)
            continue
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
    _json_keys(ctx, svc, j, flags)


def _is_choice(facts: Any, name: str, text: str) -> bool:
    """True when ``text`` is one of ``--name``'s choices in ``facts``."""
    action = facts.option(name)
    return action is not None and bool(action.choices) and _in_choices(action, text)


def _rename_hint(name: str, options: list[str]) -> str:
    if name.startswith("disable-") and f"enable-{name[8:]}" in options:
        return f"use --no-enable-{name[8:]}"
    if name.startswith("enable-") and f"no-{name}" not in options and name == "enable-reasoning":
        return "drop it: --reasoning-parser NAME alone turns reasoning output on"
    close = difflib.get_close_matches(name, options, n=3, cutoff=0.7)
    return f"did you mean {', '.join('--' + c for c in close)}?" if close else "drop it"


_BASIC = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,), "dict": (dict,),
          "list": (list,), "None": (type(None),)}


def _type_ok(annotation: str, value: Any) -> bool:
    """Loose check of a JSON value against a field annotation text (unknown parts accept all)."""
    names = re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", annotation)
    if any(n.split(".")[-1] not in _BASIC and n not in ("Optional", "Union") for n in names):
        return True  # Literal[...], Any, enums, nested configs: no loose judgement
    kinds = [_BASIC[n] for n in names if n in _BASIC]
    if not kinds:
        return True
    if isinstance(value, bool) and not any(bool in k for k in kinds):
        return False
    return any(isinstance(value, k) for k in kinds)


def _json_keys(ctx: Ctx, svc: Service, j: Any, flags: list[Flag]) -> None:
    configs = j.facts.json_configs
    if not configs:
        return
    owner: dict[str, list[str]] = {}
    for dest, cfg in configs.items():
        for f in cfg.fields:
            owner.setdefault(f, []).append(dest)
    report = ctx.error if j.exact else ctx.warning
    for flag in flags:
        action = j.facts.option(flag.name)
        if action is None or action.dest not in configs or flag.value is None:
            continue
        try:
            value = json.loads(flag.value)
        except ValueError:
            continue  # argv/invalid-json
        if not isinstance(value, dict):
            continue
        cfg = configs[action.dest]
        cls = cfg.class_.rsplit(".", 1)[-1]
        path = flag.value_path if flag.inline is None else flag.token.path
        for key, v in value.items():
            if key not in cfg.fields and j.maybe_added(
                    lambda f: key in getattr((f.json_configs or {}).get(action.dest), "fields", {})):  # noqa: B023
                continue  # a field of the next newer release's config
            if key not in cfg.fields:
                elsewhere = [d for d in owner.get(key, []) if d != action.dest]
                if elsewhere:
                    hint = f"{key!r} belongs to --{elsewhere[0].replace('_', '-')}; move it there"
                else:
                    close = difflib.get_close_matches(key, sorted(cfg.fields), n=3)
                    hint = f"did you mean {', '.join(close)}?" if close else \
                        f"known keys: {', '.join(sorted(cfg.fields))}"
                report("json/unknown-key", path,
                       f"--{flag.name} key {key!r} is not a field of {cls} in {j.basis}; vLLM rejects "
                       f"the config", hint)
            elif not _type_ok(cfg.fields[key], v):
                report("json/wrong-type", path,
                       f"--{flag.name} key {key!r} is {json.dumps(v)} but {cls}.{key} is "
                       f"{cfg.fields[key]}", f"give {key} a value of type {cfg.fields[key]}")
