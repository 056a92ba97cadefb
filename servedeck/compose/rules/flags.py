"""``flags/*``: ``vllm serve`` flags judged by the release's own argument surface
(:class:`servedeck.vllm.facts.VllmFacts`, read from vLLM's parser): flags the release does not
know (removed or renamed), abbreviations argparse expands (or finds ambiguous), option strings
it accepts without documenting them, deprecated flags, values its type functions or choices
reject, and a flag given twice.

vLLM value syntax (``vllm/utils/argparse_utils.py``): ``human_readable_int`` takes ``16k``
(16000) and ``16K`` (16384), ``1m``/``1M``, decimals with a suffix (``25.6k``);
``human_readable_int_or_auto`` also ``-1``/``auto``; plain ``int`` takes none of these.
``FlexibleArgumentParser`` accepts ``--flag=value`` and underscores in flag names; argparse
keeps the last occurrence of a flag.
"""

from __future__ import annotations

import difflib
from typing import Any

from servedeck.compose.rules._facts import judge, vllm_flags
from servedeck.compose.rules._service import Ctx, Flag, Service
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
    """``flags/unknown``, ``flags/abbreviation``, ``flags/ambiguous-abbreviation``,
    ``flags/hidden``, ``flags/deprecated``, ``flags/bool-with-value``, ``flags/bad-value``,
    ``flags/bad-choice`` and ``flags/repeated`` (the ``json/*`` values: :mod:`.config_json`)."""
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
        if action is None and j.maybe_added(lambda f: f.option(flag.name)):
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
                and not j.maybe_added(lambda f: _is_choice(f, flag.name, text)):
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
