"""Server-command rule families: ``argv/*``, ``launcher/*`` and ``vllm/*``.

Sources: exl3xpu launcher contract (the image's ``scripts/serve.py``; in this repository
``deploy/images/cpu-vllm/serve.py`` implements it); vLLM flag constraints and names (vLLM's
``vllm/engine/arg_utils.py``, ``vllm/config/scheduler.py``, ``vllm/config/speculative.py``);
names per version from :mod:`servedeck.vllm.names`.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import judge, version_tuple
from servedeck.compose.rules._service import Ctx, Service, Token
from servedeck.launchers.registry import known_starts
from servedeck.vllm import argv
from servedeck.vllm.argv import FLAGS, looks_like_flag, spec_for
from servedeck.yamlio import launcher_value

#: vLLM flags whose value is JSON (servedeck's own flag table, :data:`servedeck.vllm.argv.FLAGS`).
JSON_FLAGS = {name for name, spec in FLAGS.items() if spec.kind == "json"}
from servedeck.vllm.names import check_name, parse_version

_QUOTES = ("'", '"')


def _leaked_quotes(text: str) -> bool:
    return len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]


# ----------------------------------------------------------------------------- argv


def _item_checks(ctx: Ctx, tok: Token) -> None:
    text = tok.text
    s = tok.s
    sc = ctx.doc.scalars.get(tok.path)
    if text == s and sc is not None and sc.plain and 0 < sc.line <= len(ctx.doc.source_lines):
        src = ctx.doc.source_lines[sc.line - 1]
        if src.rstrip() != src and src.rstrip().endswith(sc.raw):
            ctx.warning("argv/whitespace", tok.path,
                        f"the line of argv item {s!r} ends in whitespace; YAML drops it from an unquoted "
                        f"item (harmless here), but a quoted or copied {text + ' '!r} would reach the "
                        f"program verbatim and not match the flag",
                        "delete the trailing whitespace")
    if text != s:
        ctx.error("argv/whitespace", tok.path,
                  f"argv item {text!r} has leading/trailing whitespace; the program receives it "
                  f"verbatim (a flag {s!r} with a space is not recognised as that flag)",
                  f"write {s!r}")
    if looks_like_flag(s):
        name, eq, value = s.partition("=")
        if any(c.isspace() for c in name):
            flag, _, rest = name.partition(" ")
            ctx.error("argv/flag-value-joined", tok.path,
                      f"argv item {s!r} holds a flag and its value in one item; the parser sees one "
                      f"unknown token, not {flag} with value {rest.strip()!r}",
                      f"split it into two items: {flag!r}, {rest.strip()!r} (or write {flag}={rest.strip()})")
            return
        candidates = [value] if eq else []
    else:
        candidates = [s]
        if "=" in s:
            candidates.append(s.split("=", 1)[1])
    for cand in candidates:
        if _leaked_quotes(cand):
            ctx.error("argv/leaked-quotes", tok.path,
                      f"value {cand!r} keeps its shell quotes: in a list-form command no shell removes "
                      f"them, so the program receives the quote characters",
                      f"drop the quotes: {cand[1:-1]!r}")
            return


def _json_checks(ctx: Ctx, svc: Service) -> None:
    launch = svc.launch
    whole = {f.name: f for f in launch.flags if f.name in JSON_FLAGS}
    keyed = {}
    for f in launch.flags:
        base, dot, _ = f.name.partition(".")
        if dot and base in whole:
            keyed.setdefault(base, f)
    for base, first in keyed.items():  # vLLM: the sub-keys form one value replacing the whole one
        ctx.warning("argv/json-replaced", whole[base].token.path,
                    f"--{base} {whole[base].value} is dropped: vLLM builds one value from the "
                    f"--{base}.KEY flags (from {first.token.s!r} on) and it replaces the whole JSON "
                    f"value, wherever each stands", f"put every key in one --{base} JSON value, or "
                    f"give them all as --{base}.KEY flags")
    j = judge(ctx, svc, "serve_args")
    for flag in launch.flags:
        if flag.name not in JSON_FLAGS or flag.value is None:
            continue
        value = flag.value
        if _leaked_quotes(value):
            continue  # argv/leaked-quotes
        action = j.facts.option(flag.name) if j is not None else None
        if action is not None and (action.type == "union_dict_and_str"  # a non-JSON text is a string
                                   or action.type == "_optional_type" and value in ("", "None")):
            continue
        human = j is not None and j.facts.json_human_numbers and action is not None \
            and action.type == "parse_dataclass"
        try:
            argv.config_json(value, human_numbers=human)
        except ValueError as exc:
            ctx.error("argv/invalid-json", flag.value_path if flag.inline is None else flag.token.path,
                      f"--{flag.name} value {value!r} is not valid JSON ({exc}); vLLM refuses to start",
                      'write JSON with double quotes, e.g. {"method":"ngram","num_speculative_tokens":3}')
    for s in launch.edits:
        if s.raw is None:
            continue
        v = s.raw.strip()
        if v.startswith(("{", "[")) and not _leaked_quotes(v):
            parsed = launcher_value(v)
            if isinstance(parsed, str):
                ctx.error("argv/invalid-json", s.path,
                          f"{svc.launcher.edit_option} {s.key} value {v!r} looks like a JSON/flow mapping "
                          f"but does not parse; the launcher then keeps it as a plain string",
                          'write it as JSON, e.g. {"image":1,"video":1}')


def check_argv(ctx: Ctx, svc: Service) -> None:
    """``argv/*``: per-item problems in ``command``/``entrypoint`` and flag values."""
    for key in ("command", "entrypoint"):
        value = svc.data.get(key)
        path = svc.path + (key,)
        if isinstance(value, str):
            ctx.warning("argv/string-command", path,
                        f"{key} is a string: Compose splits it shell-style (quotes removed, no shell, "
                        f"no $VAR expansion by a shell); item-level checks are skipped",
                        f"write {key} as a YAML list, one argv item per entry")
        elif isinstance(value, list):
            script = svc.launch.shell_script
            for i, item in enumerate(value):
                if isinstance(item, str) and not (script is not None and script.path == path + (i,)):
                    _item_checks(ctx, Token(item, path + (i,)))  # a shell script is the shell's to read
    launch = svc.launch
    if svc.launcher is None:
        return
    for flag in launch.flags + launch.options:
        if flag.missing_value:
            nxt = "the end of the command"
            toks = launch.tokens
            idx = next((k for k, t in enumerate(toks) if t is flag.token), None)
            if idx is not None and idx + 1 < len(toks):
                nxt = repr(toks[idx + 1].s)
            ctx.error("argv/missing-value", flag.token.path,
                      f"--{flag.name} needs a value but is followed by {nxt}; the parser fails",
                      f"put the value right after --{flag.name}")
    check_model_argument(ctx, svc)
    _json_checks(ctx, svc)


def check_model_argument(ctx: Ctx, svc: Service) -> None:
    """The model a ``vllm serve`` / api_server start serves, as vLLM reads its argv
    (:func:`servedeck.vllm.argv.model_argument`): ``argv/model-option-refused``,
    ``argv/model-twice``, ``argv/model-not-first``, ``argv/extra-positional`` (vLLM exits), ``argv/model-taken-by-flag``
    and ``argv/no-model`` (vLLM serves its default model), and
    ``entrypoint/api-server-positional`` (the api_server module ignores a positional model).
    The version-bound faults are errors when the image's vLLM release is known, warnings
    otherwise."""
    launch = svc.launch
    found = launch.model
    if svc.launcher is None or not launch.start_known or found is None or found.fault is None:
        return
    toks = launch.tokens
    version = version_tuple(svc)
    at = toks[found.fault_index] if found.fault_index is not None else None
    sure = version is not None
    release = f"vLLM {svc.facts.vllm_version}" if sure and svc.facts else "recent vLLM releases"
    report = ctx.error if sure else ctx.warning
    if found.fault == "model-option-refused":
        report("argv/model-option-refused", at.path,
               f"`vllm serve` in {release} refuses --model and exits (\"With `vllm serve`, you should "
               f"provide the model as a positional argument or in a config file instead of via the "
               f"`--model` option\"; up to vLLM 0.11.0)", "give the model as the first item: "
               "vllm serve MODEL --flags ...")
    elif found.fault == "model-twice":
        model = toks[found.index].s if found.index is not None and found.index < len(toks) else "--model's value"
        report("argv/model-twice", at.path,
               f"the command gives the model twice: {at.s!r} and --model {model!r}; `vllm serve` "
               f"({release}, since 0.11.1) moves --model to the front, so {at.s!r} becomes an extra "
               f"item and vLLM exits with 'unrecognized arguments: {at.s}'",
               "keep one: the model as the first item (vllm serve MODEL ...), without --model")
    elif found.fault == "extra-positional":
        if not looks_like_flag(at.s):  # a flag and its value in one item: argv/flag-value-joined says it
            first = toks[found.index].s if found.index is not None else ""
            ctx.error("argv/extra-positional", at.path,
                      f"{at.s!r} is a second positional item after the model {first!r}: vLLM takes one "
                      f"and exits with 'unrecognized arguments: {at.s}'",
                      f"drop {at.s!r}, or give it to the flag it belongs to")
    elif found.fault == "model-not-first":
        what = (f"the model {at.s!r} comes after flags" if found.model else "no model is given"
                if looks_like_flag(at.s) else f"{at.s!r}, the model it seems, comes after flags (a value of "
                f"the list flag before it)")
        report("argv/model-not-first", at.path,
               f"{what} while --served-model-name is set: `vllm serve` ({release}, since 0.17.0) exits "
               f"with \"`model` should be provided as the first positional argument when using `vllm "
               f"serve`\"", "put the model first: vllm serve MODEL --served-model-name NAME ...")
    elif found.fault == "positional-ignored":
        ctx.warning("entrypoint/api-server-positional", at.path,
                    f"python -m vllm.entrypoints.openai.api_server parses the positional {at.s!r} and "
                    f"never uses it: it serves the --model value", f"drop {at.s!r}")
    elif found.fault == "no-model":
        default = _default_model(ctx, svc)
        serves = f"its default model ({default})" if default else "its default model"
        if at is not None:  # api_server: the positional is parsed and ignored
            ctx.error("entrypoint/api-server-positional", at.path,
                      f"python -m vllm.entrypoints.openai.api_server takes the model only as --model: "
                      f"it parses the positional {at.s!r} and never uses it, and serves {serves}",
                      f"write --model {at.s}, or use the `vllm serve` entrypoint")
            return
        for flag in launch.flags:
            if flag.inline is None and len(flag.values) > 1 and spec_for(flag.name).nargs_plus:
                last = flag.values[-1]
                ctx.error("argv/model-taken-by-flag", last.path,
                          f"--{flag.name} takes every item up to the next flag, so {last.s!r} becomes one "
                          f"of its values and the server gets no model: it serves {serves} instead",
                          f"put the model first in the command ({last.s!r} before the flags)")
                return
        how = "vllm serve MODEL ..." if svc.launcher.style == "serve" else "--model MODEL"
        ctx.error("argv/no-model", svc.path + ("command",) if "command" in svc.data else svc.path,
                  f"the server command gives no model (no positional, no --model, no --config): vLLM "
                  f"serves {serves}", f"give the model: {how}")


def _default_model(ctx: Ctx, svc: Service) -> str | None:
    j = judge(ctx, svc, "serve_args")
    opt = j.facts.option("model") if j is not None else None
    return opt.default if opt is not None and isinstance(opt.default, str) else None


# ----------------------------------------------------------------------------- launcher


def _env_keys(svc: Service) -> dict[str, Path]:
    env = svc.data.get("environment")
    path = svc.path + ("environment",)
    out: dict[str, Path] = {}
    if isinstance(env, dict):
        for k in env:
            out[str(k)] = path + (str(k),)
    elif isinstance(env, list):
        for i, item in enumerate(env):
            if isinstance(item, str):
                out[item.split("=", 1)[0]] = path + (i,)
    return out


def check_launcher(ctx: Ctx, svc: Service) -> None:
    """``launcher/*``: a command that repeats the image's start, and misuse of a launcher that
    wraps vLLM with a config of its own (exl3xpu ``scripts/serve.py``: its config, its ``--set``
    edits, abbreviated options, flags that duplicate the config, environment it overrides); and an
    entrypoint that hides the server command (``argv/shell-c-split``, ``argv/not-analysed``)."""
    launch = svc.launch
    if launch.shell_split and launch.shell_script is not None:
        rest = " ".join(t.s for t in launch.shell_split[:4]) + (" ..." if len(launch.shell_split) > 4 else "")
        ctx.error("argv/shell-c-split", launch.shell_split[0].path,
                  f"the shell's -c runs only {launch.shell_script.s!r}; the items after it ({rest}) "
                  f"become the script's $0, $1, ... and never reach the program (a string command "
                  f"is split into items by Compose before the shell sees it)",
                  "give the whole command as the one item after -c, or drop the shell: "
                  "entrypoint: [vllm, serve] with the flags in command")
    elif launch.entry_unknown:
        entry = svc.data.get("entrypoint")
        why = ("its shell script uses shell syntax (expansions, operators or several commands)"
               if launch.shell_script is not None and not launch.shell_plain else
               f"it does not start a server servedeck knows ({known_starts()})")
        ctx.info("argv/not-analysed", svc.path + ("entrypoint",),
                 f"entrypoint {entry!r}: {why}, so the server's flags, environment and port were not "
                 f"checked against vLLM", "run vLLM's own command as entrypoint + command items")
    if launch.repeated_entrypoint:
        first = launch.repeated_entrypoint[0]
        words = " ".join(t.s for t in launch.repeated_entrypoint)
        entry = " ".join(svc.facts.entrypoint if svc.facts else svc.launcher.start)
        ctx.error("launcher/entrypoint-repeated", first.path,
                  f"command starts with {words!r}, which the image's entrypoint ({entry}) already runs; "
                  f"the launcher receives it as its arguments",
                  f"drop {words!r} from the command")
    launcher = svc.launcher
    if launcher is None:
        return
    for tok, opt in launch.abbreviations:
        if opt is None:
            ctx.error("launcher/abbreviation-ambiguous", tok.path,
                      f"{tok.s!r} is an ambiguous abbreviation of several {launcher.name} launcher options; "
                      "the launcher exits", "write the full option name, or put vLLM flags after --")
        else:
            ctx.warning("launcher/abbreviation", tok.path,
                        f"{tok.s!r} is not a {launcher.name} launcher option but argparse takes it as the "
                        f"abbreviation --{opt}, so vLLM never sees it",
                        f"write --{opt} if that is meant, or put the vLLM flag after --")
    if launcher.config_option and svc.data.get("command") is not None and launch.config is None:
        ctx.error("launcher/no-config", svc.path + ("command",),
                  f"the command has no model config ({launcher.config_option}); the {launcher.name} "
                  "launcher requires it", "start the command with the model config path")
    elif launch.config is not None and svc.facts is not None and svc.defaults is None \
            and svc.facts.launcher_defaults:
        known = ", ".join(d.config for d in svc.facts.launcher_defaults)
        ctx.info("launcher/unknown-config", launch.config.path,
                 f"model config {launch.config.s!r} is not in the image catalog ({known}); effective "
                 f"settings use vLLM defaults plus the flags given here")
    _check_edits(ctx, svc)
    _check_overridden_env(ctx, svc)


def _check_edits(ctx: Ctx, svc: Service) -> None:
    """``launcher/set-*``: the launcher's config edits (exl3xpu ``--set KEY.PATH=VALUE``, read by
    PyYAML ``safe_load``), and passthrough flags beside them or beside the shipped config."""
    launch, launcher = svc.launch, svc.launcher
    assert launcher is not None
    edit, config = launcher.edit_option or "--set", launcher.config_file or "the launcher's config"
    set_dests: dict[str, Path] = {}
    for s in launch.edits:
        if s.raw is None:
            ctx.error("launcher/set-malformed", s.path, f"{edit} {s.text!r} has no '='; the launcher exits",
                      f"write {edit} KEY.PATH=VALUE")
            continue
        if not s.key or any(not p for p in s.key.split(".")):
            ctx.error("launcher/set-malformed", s.path,
                      f"{edit} {s.text!r} has an empty key or key segment; the launcher fails or writes the "
                      f"wrong place", f"write {edit} KEY.PATH=VALUE")
            continue
        target = launcher.edit_target(s)
        raw = s.raw.strip()
        parsed = launcher_value(raw)
        if raw.lower() in ("yes", "no", "on", "off", "y", "n"):
            ctx.warning("launcher/set-yaml11-bool", s.path,
                        f"{edit} value {raw!r} is read by PyYAML (YAML 1.1) as the boolean {parsed}",
                        "write true/false, or quote a string value: KEY='no'")
        if target is not None and target[0] == "engine":
            set_dests[target[1][0]] = s.path
            if len(target[1]) == 1 and parsed is False:
                flag = "--" + target[1][0].replace("_", "-")
                ctx.warning("launcher/set-false-omits", s.path,
                            f"{edit} {s.key}=false only omits {flag}; vLLM then uses its own default "
                            f"(which may be on), and a {flag} passed through still wins",
                            f"pass --no-{flag[2:]} as a passthrough flag to turn it off")
        elif target is not None and target[0] == "served_model_name":
            set_dests["served_model_name"] = s.path
    defaults_vllm = svc.defaults.vllm if svc.defaults else {}
    for flag in launch.flags:
        dest = flag.arg.dest if flag.arg is not None else None
        if dest is None:
            continue
        if dest in set_dests:
            ctx.warning("launcher/set-and-passthrough", flag.token.path,
                        f"{dest} is set both with {edit} (line {ctx.doc.line(set_dests[dest])}) and as the "
                        f"passthrough flag --{flag.name}; the passthrough flag comes later and wins",
                        f"keep one of them (prefer the {edit} edit)")
        elif dest in defaults_vllm:
            ctx.info("launcher/passthrough-duplicates-config", flag.token.path,
                     f"--{flag.name} duplicates {config}'s {dest}; vLLM gets the flag twice and "
                     f"the passthrough one wins by position",
                     f"use {edit} to edit the config instead")
        elif dest == "served_model_name" and svc.defaults and svc.defaults.served_model_name:
            ctx.info("launcher/passthrough-duplicates-config", flag.token.path,
                     f"--served-model-name duplicates {config}'s served_model_name "
                     f"({svc.defaults.served_model_name!r}); the passthrough one wins by position",
                     f"use {edit} served_model_name=NAME instead")


def _check_overridden_env(ctx: Ctx, svc: Service) -> None:
    """``launcher/env-overridden``: a variable of the service's ``environment`` that the launcher
    sets again over it, from its shipped config or from one of its options."""
    launcher = svc.launcher
    assert launcher is not None
    edit, config = launcher.edit_option or "--set", launcher.config_file or "the launcher's config"
    over = {e.key: e for e in svc.environment if e.source in ("launcher-config", "flag")}
    for key, path in _env_keys(svc).items():
        e = over.get(key)
        if e is None:
            continue
        if e.source == "launcher-config":
            ctx.warning("launcher/env-overridden", path,
                        f"{config} env overrides compose environment: {key} is set to "
                        f"{e.value!r} by the launcher, so this value is ignored",
                        f"use `{edit} env.{key}=VALUE` in the command")
        else:
            ctx.warning("launcher/env-overridden", path,
                        f"the {launcher.name} launcher always sets {key} from {launcher.gpu_option or 'its options'}, "
                        "so this value is ignored",
                        f"select the card with {launcher.gpu_option} N" if launcher.gpu_option else None)


# ----------------------------------------------------------------------------- vllm

_NAME_KINDS = {"tool_call_parser": "tool-call parser", "reasoning_parser": "reasoning parser",
               "speculative_method": "speculative method", "kv_cache_dtype": "KV-cache dtype"}


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _where(svc: Service, dest: str) -> str:
    e = svc.effective.get(dest)
    if e is None:
        return "vLLM default"
    launcher = svc.launcher
    config = (launcher.config_file if launcher else None) or "launcher config"
    return {"image": "the image's default", "launcher-config": f"the image's {config}",
            "set": (launcher.edit_option if launcher else None) or "a config edit", "flag": "a flag",
            "environment": "the environment"}[e.source]


def check_vllm(ctx: Ctx, svc: Service) -> None:
    """``vllm/*``: vLLM constraints and names on the effective settings."""
    launch = svc.launch
    if svc.launcher is None:
        return
    eff = svc.effective
    version = svc.facts.vllm_version if svc.facts else None

    def path_of(dest: str) -> Path:
        e = eff.get(dest)
        return e.path if e else svc.path + ("command",)

    if svc.eff("enable_auto_tool_choice") is True and not svc.eff("tool_call_parser"):
        ctx.error("vllm/auto-tool-choice-needs-parser", path_of("enable_auto_tool_choice"),
                  "--enable-auto-tool-choice without --tool-call-parser: vLLM exits with "
                  "'--enable-auto-tool-choice requires --tool-call-parser'",
                  "add --tool-call-parser NAME (e.g. qwen3_coder or qwen3_xml for Qwen3)")

    spec = svc.eff("speculative_config")
    names: list[tuple[str, str, Path]] = []
    for dest in ("tool_call_parser", "reasoning_parser", "kv_cache_dtype"):
        e = eff.get(dest)
        if e and e.source in ("set", "flag") and isinstance(e.value, str):
            names.append((dest, e.value, e.path))
    e_spec = eff.get("speculative_config")
    method_given = any(f.name == "speculative-config" for f in launch.flags) or any(
        svc.launcher.edit_target(s) in (("engine", ["speculative_config"]), ("engine", ["speculative_config", "method"]))
        for s in launch.edits)
    if e_spec and method_given and isinstance(spec, dict) and isinstance(spec.get("method"), str):
        names.append(("speculative_method", spec["method"], e_spec.path))
    if version is not None:
        from servedeck.compose.rules._facts import own_facts
        own = own_facts(ctx, svc)
        for kind, name, path in names:
            try:
                res = check_name(kind, name, version, own)
            except ServedeckError:
                break
            label = _NAME_KINDS[kind]
            if res is None or res.status == "valid":
                continue
            close = difflib.get_close_matches(name, sorted(res.valid_names), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else \
                f"valid: {', '.join(sorted(res.valid_names))}"
            if res.status == "invalid":
                ctx.error(f"vllm/unknown-{kind.replace('_', '-')}", path,
                          f"{label} {name!r} is not accepted by vLLM {version} (checked against "
                          f"vLLM {res.basis})", hint)
            else:
                ctx.warning(f"vllm/uncertain-{kind.replace('_', '-')}", path,
                            f"{label} {name!r} is accepted by only one of the checked vLLM releases "
                            f"bracketing {version} ({res.basis})", hint)

    gmu = eff.get("gpu_memory_utilization")
    if gmu is not None and gmu.value is not None:
        x = _num(gmu.value)
        if x is None or not (0 < x <= 1):
            ctx.error("vllm/gpu-memory-utilization-range", gmu.path,
                      f"gpu_memory_utilization {gmu.value!r} (from {_where(svc, 'gpu_memory_utilization')}) "
                      f"must be a fraction in (0, 1]", "e.g. 0.90")

    mnbt = _num(svc.eff("max_num_batched_tokens"))
    seqs = _num(svc.eff("max_num_seqs"))
    mml = _num(svc.eff("max_model_len"))
    if mnbt is not None and seqs is not None and mnbt < seqs:
        ctx.error("vllm/batched-tokens-below-max-num-seqs", path_of("max_num_batched_tokens"),
                  f"max_num_batched_tokens ({mnbt:g}) is smaller than max_num_seqs ({seqs:g}); "
                  f"vLLM refuses to start", "raise max_num_batched_tokens or lower max_num_seqs")
    if mnbt is not None and mml is not None and mml > 0 and mnbt < mml \
            and svc.eff("enable_chunked_prefill") is False:
        ctx.error("vllm/batched-tokens-below-max-model-len", path_of("enable_chunked_prefill"),
                  f"with chunked prefill off, max_num_batched_tokens ({mnbt:g}) must be >= "
                  f"max_model_len ({mml:g}); vLLM refuses to start",
                  "enable chunked prefill or raise max_num_batched_tokens")
    if isinstance(spec, dict):
        k = spec.get("num_speculative_tokens")
        kn = _num(k)
        if k is not None and (kn is None or kn <= 0):
            ctx.error("vllm/num-speculative-tokens", path_of("speculative_config"),
                      f"speculative num_speculative_tokens {k!r} must be a positive integer",
                      "use 1..4, or drop speculative_config to turn speculation off")
        touched = any(eff[d].source in ("set", "flag") for d in ("speculative_config", "max_num_batched_tokens")
                      if d in eff)
        if mnbt is not None and mnbt < 8192 and touched:
            ctx.info("vllm/spec-scheduled-tokens", path_of("max_num_batched_tokens"),
                     f"speculative decoding with max_num_batched_tokens {mnbt:g} < 8192: vLLM will warn "
                     f"'max_num_scheduled_tokens is set to ... suboptimal performance' (usually cosmetic)")

    j = judge(ctx, svc, "serve_args")
    if j is not None and j.exact:
        return  # flags/unknown judges every flag with the release's own parser facts
    # no facts of this release: what is known of the removal by version judges, unless the
    # nearest older release's facts have the flag as a live option (0.33 took it back as the
    # --disable- half of --enable-log-requests)
    for flag in launch.flags:
        action = j.facts.option(flag.name) if j is not None else None
        live = action is not None and not action.deprecated
        if flag.name == "disable-log-requests" and not live:
            if version is not None and parse_version(version) >= (0, 26, 0):
                ctx.error("vllm/disable-log-requests-removed", flag.token.path,
                          f"vLLM {version} rejects --disable-log-requests "
                          f"('vllm: error: unrecognized arguments')", "use --no-enable-log-requests")
            elif version is None:
                ctx.warning("vllm/disable-log-requests-removed", flag.token.path,
                            "--disable-log-requests is rejected by vLLM 0.26 and later",
                            "use --no-enable-log-requests")
