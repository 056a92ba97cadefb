"""``argv/*``: the items of ``command``/``entrypoint`` (a flag and its value in one item,
whitespace, shell quotes that reach the program, a string command, a value missing, JSON that
does not parse, a whole JSON flag beside its sub-key flags) and the model a vLLM start serves as
the image's release reads its argv (:func:`servedeck.vllm.argv.model_argument`: the model twice,
a refused ``--model``, the model not first, a second positional, a list flag that takes the
model, none; and ``entrypoint/api-server-positional``: a positional model the api_server module
parses and never uses).

Sources: vLLM's argparse conventions (``vllm/engine/arg_utils.py``); the model argument per
release (:mod:`servedeck.vllm.argv`); a launcher's config edits as its PyYAML reads them
(:func:`servedeck.yamlio.launcher_value`).
"""

from __future__ import annotations


from servedeck.compose.rules._context import Ctx, Flag, Service, Token
from servedeck.compose.rules._facts import judge
from servedeck.launchers.registry import known_starts
from servedeck.vllm import argv
from servedeck.vllm.argv import FLAGS, looks_like_flag, spec_for
from servedeck.yamlio import launcher_value


_QUOTES = ("'", '"')


def _leaked_quotes(text: str) -> bool:
    return len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]


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


#: vLLM flags whose value is JSON (servedeck's own flag table, :data:`servedeck.vllm.argv.FLAGS`).
JSON_FLAGS = {name for name, spec in FLAGS.items() if spec.kind == "json"}


def _json_checks(ctx: Ctx, svc: Service) -> None:
    launch = svc.launch
    whole = {f.name: f for f in launch.flags if f.name in JSON_FLAGS}
    keyed: dict[str, Flag] = {}
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
                assert svc.launcher is not None  # an edit is read by its launcher's edit option
                ctx.error("argv/invalid-json", s.path,
                          f"{svc.launcher.edit_option} {s.key} value {v!r} looks like a JSON/flow mapping "
                          f"but does not parse; the launcher then keeps it as a plain string",
                          'write it as JSON, e.g. {"image":1,"video":1}')


def check_argv(ctx: Ctx, svc: Service) -> None:
    """``argv/*``: per-item problems in ``command``/``entrypoint``, an entrypoint that hides the
    server command, flag values, the model argument."""
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
        _check_hidden_command(ctx, svc)
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


def _check_hidden_command(ctx: Ctx, svc: Service) -> None:
    """``argv/shell-c-split`` and ``argv/not-analysed``: an ``entrypoint`` that hides the server
    command (the items after a one-word ``sh -c`` script, a script with shell syntax, a start no
    launcher knows)."""
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
    version = svc.release
    at = toks[found.fault_index] if found.fault_index is not None else None
    sure = version is not None
    release = f"vLLM {svc.facts.vllm_version}" if sure and svc.facts else "recent vLLM releases"
    report = ctx.error if sure else ctx.warning
    if found.fault == "no-model":
        _no_model(ctx, svc, at)
        return
    assert at is not None  # every fault but no-model points at an item (ModelArgument.fault_index)
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


def _no_model(ctx: Ctx, svc: Service, at: Token | None) -> None:
    """``argv/model-taken-by-flag``, ``argv/no-model`` or, for an api_server positional ``at``
    (parsed and ignored by that module), ``entrypoint/api-server-positional``."""
    launch = svc.launch
    assert svc.launcher is not None  # check_model_argument returns for a start it does not know
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
