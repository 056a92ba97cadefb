"""The one argv grammar: vLLM ``serve`` flags and the options of launchers that wrap vLLM, parse
and print.

Every module that reads or writes a server command (the launchers of :mod:`servedeck.launchers`,
and through them render, import, check rules, A/B views, deploy) goes through this module. Argv is a list of tokens;
parsing gives an ordered list of
:class:`Arg` items (flags and positionals, with the token indices they came from), printing
turns ``(flag, value)`` pairs back into tokens.

How vLLM reads argv (vllm-project/vllm ``vllm/utils/argparse_utils.py`` ``FlexibleArgumentParser``
and ``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args``, v0.10.2 to v0.11 and main):

* ``--flag=value`` is the same flag as ``--flag value`` (argparse);
* ``--flag_name`` is accepted for ``--flag-name`` (FlexibleArgumentParser rewrites ``_`` to ``-``
  before the first ``.``);
* boolean fields have ``--x`` and ``--no-x`` (``argparse.BooleanOptionalAction``);
* a flag given twice: argparse keeps the last occurrence (see :func:`repeated`);
* JSON-valued config flags (``--speculative-config '{...}'``) take JSON; since v0.11 also
  dotted keys (``--speculative-config.method mtp``), see :attr:`Arg.subkey`;
* human-readable integers (:func:`human_readable_int`): ``--max-num-batched-tokens`` and
  ``--kv-cache-memory-bytes`` take ``16k`` (16,000) / ``16K`` (16,384) / ``1M`` (1,048,576);
  ``--max-model-len`` also takes ``auto`` or ``-1`` (fit to KV memory,
  ``human_readable_int_or_auto``: the parser of vLLM 0.32.0 records it; earlier releases, around
  0.10, applied ``human_readable_int`` to ``max_model_len`` and ``max_num_batched_tokens`` only).

A launcher that wraps vLLM with its own argparse parser (``parse_known_args`` with
``allow_abbrev``: one positional, its own options, every other token and everything after ``--``
passed on to vLLM) is read by :func:`parse_known` with the launcher's option table (the launcher
modules hold their tables, e.g. :mod:`servedeck.launchers.exl3xpu`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from servedeck.errors import ServedeckError

Kind = Literal["bool", "str", "int", "float", "human_int", "human_int_auto", "json"]


@dataclass(frozen=True)
class FlagSpec:
    """One long option of the table.

    Attributes:
        name: long name without dashes (``max-num-batched-tokens``).
        kind: value type as vLLM converts it (``bool`` takes no value).
        nargs_plus: True when argparse takes one or more values (``nargs="+"``).
        optional: the type is vLLM's ``optional_type`` wrapper (``vllm/engine/arg_utils.py``):
            ``""`` and ``"None"`` give None, any other text goes to ``kind``'s conversion.
        action_dest: the argparse dest as the table records it, when the table knows the
            option (``enable_prefix_caching`` for ``--disable-prefix-caching``); None: the name's.
        stores: for a ``bool`` option the table knows, what the bare option stores (``False``
            for ``--disable-prefix-caching`` and ``--no-enable-prefix-caching``); None: argparse's
            convention (``no-`` stores False).
    """

    name: str
    kind: Kind = "str"
    nargs_plus: bool = False
    optional: bool = False
    action_dest: str | None = None
    stores: Any = None

    @property
    def dest(self) -> str:
        """argparse dest: ``max_num_batched_tokens``."""
        return self.action_dest or self.name.replace("-", "_")

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"


def _table(spec: dict[Kind, str], plus: str) -> dict[str, FlagSpec]:
    nplus = set(plus.split())
    return {name: FlagSpec(name, kind, name in nplus) for kind, names in spec.items()
            for name in names.split()}


#: vLLM ``serve`` flags servedeck knows by type (``vllm/engine/arg_utils.py``,
#: ``vllm/entrypoints/openai/cli_args.py``): the fallback under the argument surface recorded in
#: the shipped vLLM tables (see :func:`table_from_serve_args`). Flags in neither are parsed by
#: shape (see :func:`spec_for`).
FLAGS: dict[str, FlagSpec] = _table({
    "human_int_auto": "max-model-len",
    "human_int": "max-num-batched-tokens kv-cache-memory-bytes",
    "int": """port max-num-seqs tensor-parallel-size pipeline-parallel-size data-parallel-size
        block-size seed max-num-partial-prefills long-prefill-token-threshold num-gpu-blocks-override
        max-seq-len-to-capture max-logprobs max-log-len max-cudagraph-capture-size
        cudagraph-capture-sizes max-num-scheduled-tokens""",
    "float": "gpu-memory-utilization swap-space cpu-offload-gb",
    "json": """speculative-config compilation-config limit-mm-per-prompt hf-overrides
        kv-transfer-config kv-events-config mm-processor-kwargs override-generation-config
        structured-outputs-config model-loader-extra-config override-pooler-config pooler-config
        additional-config ec-transfer-config attention-config default-chat-template-kwargs
        media-io-kwargs""",
    "str": """host model served-model-name tokenizer revision code-revision tokenizer-revision dtype
        kv-cache-dtype tool-call-parser reasoning-parser chat-template api-key quantization
        mamba-cache-mode uvicorn-log-level tool-parser-plugin generation-config download-dir
        load-format root-path middleware allowed-origins chat-template-content-format
        response-role ssl-keyfile ssl-certfile lora-modules distributed-executor-backend
        performance-mode logits-processors tokenizer-mode config-format hf-config-path
        attention-backend scheduling-policy prefix-caching-hash-algo mm-encoder-tp-mode
        reasoning-parser-plugin tool-server""",
    "bool": """trust-remote-code enforce-eager async-scheduling headless skip-tokenizer-init
        fully-sharded-loras return-tokens-as-token-ids enable-auto-tool-choice
        enable-prefix-caching enable-chunked-prefill""",
}, plus="served-model-name cudagraph-capture-sizes lora-modules allowed-origins middleware api-key")

#: Single-dash aliases vLLM defines (``-tp 2``) → long names.
ALIASES: dict[str, str] = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size",
                           "dp": "data-parallel-size", "q": "quantization",
                           "O": "compilation-config", "sc": "speculative-config"}

_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
_PYTHON_OPT_WITH_VALUE = {"-X", "-W", "-Q"}


def python_start(argv: list[str]) -> tuple[str | None, str | None, int]:
    """``(module, script, n)`` of a Python interpreter call at the start of ``argv``
    (``python[3[.N]] [OPTIONS] -m MODULE`` / ``-mMODULE``, or ``python SCRIPT``): the module or
    the script run and the number of items up to and including it; ``(None, None, 0)`` when
    ``argv`` does not start with a Python interpreter running one (options that take a value:
    ``-X``, ``-W``, ``-Q``)."""
    base = argv[0].rsplit("/", 1)[-1] if argv else ""
    if not _PYTHON.fullmatch(base):
        return None, None, 0
    i = 1
    while i < len(argv) and argv[i].startswith("-") and not argv[i].startswith("-m") and argv[i] != "--":
        i += 2 if argv[i] in _PYTHON_OPT_WITH_VALUE else 1
    if i < len(argv) and len(argv[i]) > 2 and argv[i].startswith("-m"):
        return argv[i][2:], None, i + 1
    if argv[i:i + 1] == ["-m"] and i + 1 < len(argv):
        return argv[i + 1], None, i + 2
    if i < len(argv) and not argv[i].startswith("-"):
        return None, argv[i], i + 1
    return None, None, 0


def looks_like_flag(text: str) -> bool:
    """True for ``--x`` / ``-x`` tokens (not negative numbers such as ``-1``, not ``-``)."""
    t = text.strip()
    return t.startswith("-") and len(t) > 1 and not _NUMBER.match(t)


#: argparse type function names (as recorded in the shipped vLLM tables) → value kind.
_TYPE_KINDS: dict[str, Kind] = {
    "int": "int", "float": "float", "str": "str", "human_readable_int": "human_int",
    "human_readable_int_or_auto": "human_int_auto", "parse_dataclass": "json", "loads": "json",
    "union_dict_and_str": "json"}


def table_from_serve_args(serve_args: Iterable[Any]) -> tuple[dict[str, FlagSpec], dict[str, str]]:
    """Build flag specs and single-dash aliases from a recorded ``vllm serve`` argument surface.

    Args:
        serve_args: argparse actions with ``options`` (``["--max-model-len"]``), ``type`` (name
            of the type function), ``nargs`` and ``takes_value`` — the rows of the shipped vLLM
            tables (``servedeck.vllm.facts.ServeArg``, extracted from an image's parser).

    Returns:
        ``(flags, aliases)``: every option string the table records (hidden ones included),
        with the action's dest and, for options that take no value, what each stores. The kind
        of an ``optional_type`` comes from the type it wraps (``type_wraps``); a type the table
        cannot name keeps the kind of :data:`FLAGS`, else ``str``.
    """
    flags: dict[str, FlagSpec] = {}
    aliases: dict[str, str] = {}
    for a in serve_args:
        accepted = list(getattr(a, "accepted", a.options))
        longs = [o[2:] for o in accepted if o.startswith("--")]
        if not longs:
            continue
        wraps = list(getattr(a, "type_wraps", None) or [])
        kind: Kind | None = "bool" if not a.takes_value else (
            _TYPE_KINDS.get(a.type or "") or next((_TYPE_KINDS[w] for w in wraps if w in _TYPE_KINDS), None))
        for name in longs:
            base = FLAGS.get(name)
            stored = a.stored("--" + name) if kind == "bool" and hasattr(a, "stored") else None
            flags[name] = FlagSpec(name, kind or (base.kind if base else "str"), a.nargs == "+",
                                   optional=a.type == "_optional_type", action_dest=a.dest,
                                   stores=stored)
        for o in a.options:
            if o.startswith("-") and not o.startswith("--"):
                aliases[o[1:]] = longs[0]
    return flags, aliases


_SHIPPED: tuple[dict[str, FlagSpec], dict[str, str]] | None = None


def _shipped() -> tuple[dict[str, FlagSpec], dict[str, str]]:
    """The newest shipped vLLM table's argument surface (``servedeck.vllm.facts``), when the
    package has one; it overrides :data:`FLAGS` (which stays the fallback)."""
    global _SHIPPED
    if _SHIPPED is None:
        try:
            from servedeck.vllm.facts import newest_table
            newest = newest_table("serve_args")
            _SHIPPED = table_from_serve_args(newest.serve_args) if newest else ({}, {})
        except ImportError:
            _SHIPPED = ({}, {})
    return _SHIPPED


def spec_for(name: str) -> FlagSpec:
    """The table entry for vLLM flag ``name`` (no dashes; ``no-`` prefix removed by the caller).

    Unknown flags: ``enable-*``/``disable-*`` are booleans, everything else takes one value
    when one follows (argparse would know; servedeck errs on the side of keeping tokens
    together).
    """
    shipped = _shipped()[0]
    if name in shipped:
        return shipped[name]
    if name in FLAGS:
        return FLAGS[name]
    if name.startswith(("enable-", "disable-")):
        return FlagSpec(name, "bool")
    return FlagSpec(name, "str")


def is_bool_flag(name: str) -> bool:
    """True when vLLM flag ``name`` (no dashes) takes no value (``no-x`` included)."""
    return name.startswith("no-") or spec_for(name).kind == "bool"


def bool_meaning(name: str) -> tuple[str, bool]:
    """(argparse dest, the value the bare option stores) for a value-less vLLM option ``name``
    (no dashes), as the newest shipped table records it: ``disable-prefix-caching`` →
    (``enable_prefix_caching``, False) in vLLM 0.33; for an option no table knows, argparse's
    ``BooleanOptionalAction`` convention (``no-x`` → (``x``, False))."""
    spec = spec_for(name)
    if spec.action_dest is not None and spec.kind == "bool":
        return spec.action_dest, spec.stores is not False
    if name.startswith("no-"):
        return name[3:].replace("-", "_"), False
    return name.replace("-", "_"), True


# --------------------------------------------------------------------------- values

def human_readable_int(text: str, *, auto: bool = False) -> int:
    """An integer as vLLM's ``human_readable_int`` reads it (``vllm/engine/arg_utils.py``).

    ``k/m/g/t`` are decimal (``16k`` → 16,000; ``25.6k`` → 25,600), ``K/M/G/T`` binary
    (``16K`` → 16,384, ``1M`` → 1,048,576; decimals refused). With ``auto`` (vLLM's
    ``human_readable_int_or_auto``, used for ``--max-model-len``): ``auto`` (any case) and
    ``-1`` → -1.

    Raises:
        ValueError: text vLLM would refuse (argparse: "invalid ... value").
    """
    value = text.strip()
    if auto and (value == "-1" or value.lower() == "auto"):
        return -1
    m = _HUMAN.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(f"decimals are not allowed with the binary suffix {suffix} "
                             f"(did you mean {number}{suffix.lower()}?)")
        return int(number) * _BINARY[suffix]
    return int(value)


_JSON_STRING = re.compile(r'("(?:[^"\\]|\\.)*")')
_JSON_HUMAN = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b")


def config_json(text: str, *, human_numbers: bool = False) -> Any:
    """The value of a JSON config flag as the release reads it: ``json.loads``, after, when
    ``human_numbers`` (the release's ``parse_dataclass`` expands them: vLLM 0.32 and 0.33,
    ``VllmFacts.json_human_numbers``), each bare ``80m`` / ``16K`` outside JSON strings is
    replaced by its :func:`human_readable_int` (``{"cpu_bytes_to_use": 80m}`` → 80,000,000).

    Raises:
        ValueError: the text is not JSON (``json.JSONDecodeError``), or a suffix the release
            refuses (``1.5K``).
    """
    if human_numbers:
        parts = _JSON_STRING.split(text)
        parts[::2] = [_JSON_HUMAN.sub(lambda m: str(human_readable_int(m.group())), p) for p in parts[::2]]
        text = "".join(parts)
    return json.loads(text)


def convert(name: str, text: str | None) -> Any:
    """Convert a flag's text value the way vLLM does for flag ``name`` (no dashes).

    ``None`` text (a bare flag) → what the option stores (:func:`bool_meaning`: ``True``;
    ``False`` for ``no-x`` and, in vLLM 0.33, ``disable-x`` of an ``--enable-x`` pair). JSON
    flags → dict/list; human-readable ints → int (``auto`` → -1 for ``max-model-len``);
    ints/floats → numbers.

    Raises:
        ServedeckError: a value vLLM would refuse at start (names the flag and the value).
    """
    if text is None:
        return bool_meaning(name)[1]
    spec = spec_for(name)
    try:
        return convert_kind(spec.kind, text, optional=spec.optional)
    except ValueError as exc:
        raise ServedeckError(f"--{name} {text!r}: vLLM refuses this value ({exc})",
                             hint=_value_hint(spec)) from None


def convert_kind(kind: Kind, text: str, *, optional: bool = False) -> Any:
    """``text`` converted as argparse converts it with a type function of ``kind`` (argparse
    calls ``type(text)`` on the raw item: Python's ``int``/``float`` take ``" 8"``, ``"+8"`` and
    ``"8_000"``); ``optional`` (vLLM's ``optional_type``): ``""`` and ``"None"`` give None.
    Kinds without a conversion (``str``, ``bool``) give ``text``.

    Raises:
        ValueError: the type function refuses the text (``json.JSONDecodeError`` included).
    """
    if optional and text in ("", "None"):
        return None
    if kind == "json":
        return json.loads(text)
    if kind in ("human_int", "human_int_auto"):
        return human_readable_int(text, auto=kind == "human_int_auto")
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    return text


def kind_of_type(type_name: str | None) -> Kind | None:
    """The :data:`Kind` of the argparse type function a shipped vLLM table names (``int``,
    ``human_readable_int``, ``loads`` ...), or None for one it cannot name (``_optional_type``)."""
    return _TYPE_KINDS.get(type_name or "")


def _value_hint(spec: FlagSpec) -> str:
    return {"json": "write the value as JSON, e.g. '{\"method\":\"mtp\"}'",
            "human_int": "an integer, or with a suffix: 16k = 16000, 16K = 16384, 1M = 1048576",
            "human_int_auto": "an integer (16k = 16000, 16K = 16384), or auto / -1",
            "int": "an integer", "float": "a number"}.get(spec.kind, "")


def convert_lenient(name: str, text: str | None) -> Any:
    """:func:`convert`, but the text itself when vLLM would refuse it (for views and rules
    that report the problem elsewhere)."""
    try:
        return convert(name, text)
    except ServedeckError:
        return text


def format_value(value: Any) -> str:
    """One value as an argv token: bools ``true``/``false``, dict/list compact JSON (the form
    vLLM and the launcher read), numbers and strings as ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return compact_json(value)
    return str(value)


def compact_json(value: Any) -> str:
    """Compact JSON (no spaces), the form vLLM and the launcher use for dict/list flags."""
    return json.dumps(value, separators=(",", ":"))


def flag_tokens(dest_or_name: str, value: Any, *, table: Any = None) -> list[str]:
    """Print one vLLM flag: ``("max_model_len", 8192)`` → ``["--max-model-len", "8192"]``.

    Booleans of ``bool`` flags print ``--x`` / the false option as ``table`` (the image's
    argument table, :class:`servedeck.vllm.facts.VllmFacts`) spells it (:func:`negative_option`;
    without one, ``--no-x``: argparse's ``BooleanOptionalAction``); ``nargs="+"`` flags take a
    list (one token each); JSON flags take dict/list (compact JSON); ``None`` prints nothing.
    """
    name = dest_or_name.replace("_", "-")
    spec = spec_for(name)
    if value is None:
        return []
    if spec.kind == "bool" or isinstance(value, bool) and spec.kind != "json":
        if value:
            return [f"--{name}"]
        action = table.option(name) if table is not None else None
        if action is not None and not action.takes_value and not action.unsetting() and not action.default:
            return []  # a store_true flag: False is its default, and no option says it
        return [negative_option(table, name) or f"--no-{name}"]
    if spec.nargs_plus and isinstance(value, (list, tuple)):
        return [f"--{name}", *(format_value(v) for v in value)]
    return [f"--{name}", format_value(value)]


def negative_option(table: Any, name: str) -> str | None:
    """The option that sets bool flag ``name`` (no dashes) false, as a release's argument table
    (:class:`servedeck.vllm.facts.VllmFacts`) documents it: ``--no-enable-prefix-caching`` in
    vLLM 0.10-0.32, ``--disable-prefix-caching`` in 0.33 (their tables in
    ``servedeck/vllm/tables/``; hidden strings such as 0.33's ``--no-enable-prefix-caching``
    are never chosen). None when the table is None or shows no option that stores False."""
    action = table.option(name) if table is not None else None
    if action is None:
        return None
    unsetting = [o for o in action.unsetting() if o != f"--{name}"]
    return unsetting[0] if unsetting else None


def flag(dest: str) -> str:
    """vLLM flag for an argparse dest: ``max_num_batched_tokens`` → ``--max-num-batched-tokens``."""
    return "--" + dest.replace("_", "-")


# --------------------------------------------------------------------------- parsed items

@dataclass
class Arg:
    """One item of a parsed argv: a flag occurrence or a positional.

    Attributes:
        name: long name without dashes, alias- and underscore-resolved, ``no-`` kept
            (``max-model-len``, ``no-enable-prefix-caching``); None for a positional.
        index: index of the flag (or positional) token in the parsed token list.
        values: value texts (stripped), one for most flags, several for ``nargs="+"``.
        value_indices: token indices of ``values`` (the flag's own index for ``--x=v``).
        inline: True for the ``--flag=value`` form.
        written: the option as written (``--tp``, ``-tp``, ``--max_model_len``).
        missing_value: a value flag with no value after it.
        subkey: dotted sub-key of a JSON flag (``--speculative-config.method`` → ``method``).
    """

    name: str | None
    index: int
    values: list[str] = field(default_factory=list)
    value_indices: list[int] = field(default_factory=list)
    inline: bool = False
    written: str = ""
    missing_value: bool = False
    subkey: str | None = None

    @property
    def is_flag(self) -> bool:
        return self.name is not None

    @property
    def negated(self) -> bool:
        """A value-less option that stores False (``--no-enable-prefix-caching``; in vLLM 0.33
        also ``--disable-prefix-caching``, :func:`bool_meaning`)."""
        return bool(self.name) and is_bool_flag(self.name or "") and bool_meaning(self.name or "")[1] is False

    @property
    def base(self) -> str | None:
        """The option's action named by its dest, dashed (``enable-prefix-caching`` for
        ``--no-enable-prefix-caching`` and 0.33's ``--disable-prefix-caching``)."""
        if self.name is None:
            return None
        if is_bool_flag(self.name):
            return bool_meaning(self.name)[0].replace("_", "-")
        return self.name

    @property
    def dest(self) -> str | None:
        """argparse dest (``enable_prefix_caching`` for ``--no-enable-prefix-caching``)."""
        if self.base is None:
            return None
        spec = spec_for(self.base)
        return spec.dest if spec.action_dest else self.base.replace("-", "_")

    @property
    def value(self) -> str | None:
        """The value text (several values joined by a space), None for a bare flag."""
        return " ".join(self.values) if self.values else None

    def typed(self) -> Any:
        """The value as vLLM holds it (see :func:`convert`); ``nargs="+"`` → list.

        Raises:
            ServedeckError: a value vLLM refuses.
        """
        if self.name is None:
            return self.values[0] if self.values else None
        if self.negated and not self.values:
            return False
        if self.subkey:  # --json-flag.key value: the value is JSON when it parses, else text
            out: dict[str, Any] = {}
            cur = out
            parts = self.subkey.split(".")
            for p in parts[:-1]:
                cur = cur.setdefault(p, {})
            if parts[-1].endswith("+"):  # --json-flag.key+ A,B: the list of the texts
                cur[parts[-1][:-1]] = (self.value or "").split(",")
            else:
                cur[parts[-1]] = _json_or_text(self.value)
            return out
        spec = spec_for(self.base or "")
        if spec.nargs_plus and self.values:
            return [convert(self.base or "", v) for v in self.values]
        return convert(self.base or "", self.value)


def _json_or_text(text: str | None) -> Any:
    if text is None:
        return True
    try:
        return json.loads(text)
    except ValueError:
        return text


def _flag_name(token: str) -> tuple[str, str, bool, str | None]:
    """``--max_model_len=1`` → (name, written, has '=', inline value)."""
    t = token.strip()
    long = t.startswith("--")
    body = t[2:] if long else t[1:]
    written, eq, inline = body.partition("=")
    if long:  # FlexibleArgumentParser: underscores before the first "." only (JSON sub-keys keep theirs)
        head, dot, tail = written.partition(".")
        name = head.replace("_", "-") + dot + tail
    elif re.fullmatch(r"O\d+", written) and not eq:
        # -O3: the compilation level attached to the option (``-O3`` = ``-O 3``)
        return ALIASES["O"], "-O", True, written[1:]
    else:
        name = _shipped()[1].get(written) or ALIASES.get(written, written)
    return name, ("--" if long else "-") + written, bool(eq), inline if eq else None


def _known_with_value(token: str) -> bool:
    """``--name=VALUE`` with a known option before the ``=``: argparse reads it as that option
    with VALUE even when VALUE has spaces (Python ``argparse.py`` ``_parse_optional`` tests the
    ``=`` split before its "a space means a positional" rule)."""
    if "=" not in token:
        return False
    name = _flag_name(token)[0]
    base = name.partition(".")[0]
    return name in _shipped()[0] or name in FLAGS or (base != name and spec_for(base).kind == "json")


def parse_vllm(tokens: Iterable[str], offset: int = 0) -> list[Arg]:
    """Parse ``vllm serve`` argv the way vLLM's argparse does.

    Args:
        tokens: argv items (text as written; surrounding whitespace ignored).
        offset: added to every index (for a slice of a longer command).

    Returns:
        items in order: flags and positionals (the model). ``--`` separators are dropped.
        A token containing a space is a positional (argparse would not read it as a flag),
        unless it is ``--known-option=VALUE`` (:func:`_known_with_value`).
    """
    toks = [str(t) for t in tokens]
    out: list[Arg] = []
    i, n = 0, len(toks)
    while i < n:
        t = toks[i].strip()
        if t == "--":
            i += 1
            continue
        if not looks_like_flag(t) or (" " in t and not _known_with_value(t)):
            out.append(Arg(None, offset + i, [t], [offset + i], written=t))
            i += 1
            continue
        name, written, has_eq, inline = _flag_name(t)
        subkey = None
        base, dot, rest = name.partition(".")
        if dot and spec_for(base).kind == "json":
            name, subkey = base, rest
        arg = Arg(name, offset + i, written=written, subkey=subkey)
        i += 1
        if has_eq:
            arg.values, arg.value_indices, arg.inline = [inline or ""], [offset + i - 1], True
        elif not is_bool_flag(name):
            spec = spec_for(name)
            if spec.nargs_plus:
                while i < n and not looks_like_flag(toks[i]):
                    arg.values.append(toks[i].strip())
                    arg.value_indices.append(offset + i)
                    i += 1
            elif i < n and not looks_like_flag(toks[i]):
                arg.values.append(toks[i].strip())
                arg.value_indices.append(offset + i)
                i += 1
            if not arg.values and (name in FLAGS or subkey):
                arg.missing_value = True
        out.append(arg)
    return out


def print_args(args: Iterable[Arg | tuple[str, Any]]) -> list[str]:
    """Print items back to argv: :class:`Arg` items in the separate-token form
    (``--flag value``), ``(dest, value)`` pairs through :func:`flag_tokens`; positionals as is.
    ``parse_vllm(print_args(parse_vllm(x)))`` keeps every flag and value."""
    out: list[str] = []
    for a in args:
        if isinstance(a, tuple):
            out += flag_tokens(*a)
        elif a.name is None:
            out += a.values
        else:
            written = f"--{a.name}" + (f".{a.subkey}" if a.subkey else "")
            out += [written, *a.values]
    return out


def last_wins(args: Iterable[Arg]) -> dict[str, Arg]:
    """The occurrence argparse keeps for each dest (the last one), in first-seen order.
    ``--x`` and ``--no-x`` share a dest; JSON sub-key flags keep their own entry."""
    out: dict[str, Arg] = {}
    for a in args:
        if a.dest is None:
            continue
        key = a.dest + (f".{a.subkey}" if a.subkey else "")
        out.pop(key, None)
        out[key] = a
    return out


def repeated(args: Iterable[Arg]) -> dict[str, list[Arg]]:
    """Dests given more than once (argparse silently keeps the last): dest → occurrences."""
    seen: dict[str, list[Arg]] = {}
    for a in args:
        if a.dest is not None:
            seen.setdefault(a.dest + (f".{a.subkey}" if a.subkey else ""), []).append(a)
    return {k: v for k, v in seen.items() if len(v) > 1}


def settings(args: Iterable[Arg], *, strict: bool = False) -> dict[str, Any]:
    """Flags → ``{dest: value}`` as vLLM holds them, last occurrence winning. The JSON sub-key
    flags of one dest (``--speculative-config.KEY V``) merge into one dict, and that dict
    *replaces* a whole JSON value of the same flag wherever it stands: vLLM's
    ``FlexibleArgumentParser`` gathers the dotted keys into one value placed after the others
    (seen with vLLM 0.32's own parser: ``--speculative-config '{"method":"ngram",...}'
    --speculative-config.num_speculative_tokens 5`` gives ``{"num_speculative_tokens": 5}``).
    ``strict`` raises on values vLLM refuses (else the text)."""
    out: dict[str, Any] = {}
    dotted: dict[str, dict[str, Any]] = {}
    for key, a in last_wins(args).items():
        if a.missing_value:
            continue
        try:
            value = a.typed()
        except ServedeckError:
            if strict:
                raise
            value = a.value
        if a.subkey:
            _merge(dotted.setdefault(a.dest or "", {}), value)
        else:
            out[key] = value
    out.update(dotted)
    return out


def setting_value(arg: Arg) -> Any:
    """The value vLLM holds for one flag occurrence, leniently (for views and rules that report
    a refused value elsewhere): ``--no-x`` → False, a bare bool flag → True, ``nargs="+"`` →
    a list, a value vLLM refuses → its text (``--max-model-len`` → None), an unknown flag's
    numeric text → a number."""
    try:
        value = arg.typed()
    except ServedeckError:
        value = arg.value
        if arg.base == "max-model-len":
            return None
    if isinstance(value, str) and (arg.base or "") not in FLAGS and _NUMBER.match(value):
        return float(value) if any(c in value for c in ".eE") else int(value)
    return value


def flag_settings(args: Iterable[Arg]) -> dict[str, tuple[Any, Arg]]:
    """The settings vLLM holds from its flags, leniently (:func:`setting_value`), each with the
    occurrence that gives it: ``{dest: (value, occurrence)}``. As :func:`settings`: the last
    occurrence of a flag wins (:func:`last_wins`), a flag whose value is missing gives nothing,
    and the JSON sub-key flags of one dest merge into one dict (a sub-key value that is not an
    object adds nothing to it) that replaces a whole value of that flag and stands after the
    other settings; its occurrence is the first sub-key flag."""
    out: dict[str, tuple[Any, Arg]] = {}
    dotted: dict[str, tuple[dict[str, Any], Arg]] = {}
    for key, a in last_wins(args).items():
        if a.missing_value:
            continue
        value = setting_value(a)
        if a.subkey:
            into, _ = dotted.setdefault(a.dest or "", ({}, a))
            if isinstance(value, dict):
                _merge(into, value)
            continue
        out[key] = (value, a)
    for dest, given in dotted.items():
        out.pop(dest, None)
        out[dest] = given
    return out


def dotted_replaces(args: Iterable[Arg]) -> dict[str, tuple[Arg, list[Arg]]]:
    """JSON flags given both whole and by sub-keys: dest → (the whole value's last occurrence,
    the sub-key occurrences). vLLM keeps only the sub-keys' dict (:func:`settings`)."""
    whole: dict[str, Arg] = {}
    subs: dict[str, list[Arg]] = {}
    for a in args:
        if a.dest is None or a.missing_value:
            continue
        if a.subkey:
            subs.setdefault(a.dest, []).append(a)
        elif spec_for(a.base or "").kind == "json":
            whole[a.dest] = a
    return {d: (whole[d], subs[d]) for d in whole if d in subs}


def _merge(base: dict[str, Any], new: dict[str, Any]) -> None:
    """Merge JSON object ``new`` into ``base`` in place, nested objects key by key (how vLLM
    combines the dotted sub-key flags of one JSON flag)."""
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


# --------------------------------------------------------------------------- launchers wrapping vLLM

@dataclass
class KnownArgv:
    """A command as a launcher's argparse ``parse_known_args`` reads it (:func:`parse_known`).

    Attributes:
        positional: the launcher's one positional (its text and index; None when absent).
        options: every occurrence of the launcher's own options in order, as :class:`Arg`
            named by the full option (abbreviations resolved).
        abbreviations: (index, written, resolved option or None when ambiguous).
        passthrough: the items handed to vLLM (indices kept), parsed as vLLM flags.
    """

    positional: tuple[str, int] | None = None
    options: list[Arg] = field(default_factory=list)
    abbreviations: list[tuple[int, str, str | None]] = field(default_factory=list)
    passthrough: list[Arg] = field(default_factory=list)

    def option(self, name: str) -> Arg | None:
        """The last occurrence of option ``name``."""
        found = [a for a in self.options if a.name == name]
        return found[-1] if found else None


def _known_option(name: str, options: dict[str, FlagSpec]) -> tuple[str | None, bool]:
    """argparse ``allow_abbrev``: (option or "" when ambiguous or None, abbreviated)."""
    if name in options:
        return name, False
    matches = [o for o in options if o.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0], True
    if len(matches) > 1:
        return "", True
    return None, False


def parse_known(tokens: Iterable[str], options: dict[str, FlagSpec], offset: int = 0, *,
                positional: bool = True) -> KnownArgv:
    """Parse a command the way a launcher's argparse ``parse_known_args`` does (Python
    ``argparse``: ``allow_abbrev`` on, ``--opt=value`` and ``--opt value``, ``-h`` taken as help):
    with ``positional``, the first item that is not a flag is the launcher's positional;
    ``options`` (long names without dashes) are the launcher's own; every other item and
    everything after ``--`` (the ``--`` removed) is handed to vLLM and parsed by
    :func:`parse_vllm` with indices into ``tokens`` (+ ``offset``)."""
    toks = [str(t) for t in tokens]
    out = KnownArgv()
    passthrough: list[tuple[str, int]] = []
    i, n = 0, len(toks)
    after_dd = False
    while i < n:
        t = toks[i].strip()
        if after_dd:
            passthrough.append((toks[i], i))
            i += 1
            continue
        if t == "--":
            after_dd = True
            i += 1
            continue
        if t.startswith("--") and len(t) > 2 and " " not in t:
            written, eq, inline = t[2:].partition("=")
            opt, abbreviated = _known_option(written, options)
            if opt is not None:
                if abbreviated:
                    out.abbreviations.append((offset + i, t, opt or None))
                i += 1
                if opt == "":
                    continue
                arg = Arg(opt, offset + i - 1, written="--" + written)
                if eq:
                    arg.values, arg.value_indices, arg.inline = [inline], [offset + i - 1], True
                elif options[opt].takes_value:
                    if i < n and not looks_like_flag(toks[i]):
                        arg.values, arg.value_indices = [toks[i].strip()], [offset + i]
                        i += 1
                    else:
                        arg.missing_value = True
                out.options.append(arg)
                continue
            passthrough.append((toks[i], i))
            i += 1
            continue
        if t == "-h":
            i += 1
            continue
        if positional and out.positional is None and not looks_like_flag(t):
            out.positional = (t, offset + i)
        else:
            passthrough.append((toks[i], i))
        i += 1
    # parse the passthrough as one vLLM argv, then map indices back to the command
    parsed = parse_vllm([t for t, _ in passthrough])
    index = [offset + j for _, j in passthrough]
    for a in parsed:
        a.index = index[a.index]
        a.value_indices = [index[j] for j in a.value_indices]
    out.passthrough = parsed
    return out


# --------------------------------------------------------------------------- the model argument

ServerStyle = Literal["serve", "api_server"]
"""How a vLLM server is started: ``serve`` is the ``vllm`` console script's ``serve``
subcommand (``vllm serve``, ``python -m vllm.entrypoints.cli.main serve``); ``api_server`` is
``python -m vllm.entrypoints.openai.api_server``."""

MODEL_OPTION_REFUSED_UNTIL = (0, 11, 0)
"""Up to vLLM 0.11.0, ``vllm serve`` refuses a ``--model`` item anywhere in its argv
(``vllm/utils/__init__.py`` ``FlexibleArgumentParser.parse_args``, 0.10.2 and 0.11.0: "With
`vllm serve`, you should provide the model as a positional argument or in a config file instead
of via the `--model` option."); ``--model=X`` is not that item and sets the model."""

MODEL_MOVED_SINCE = (0, 11, 1)
"""From vLLM 0.11.1, ``vllm serve`` moves the first ``--model X`` / ``--model=X`` to the front as
the positional model, with a warning (``vllm/utils/argparse_utils.py``
``FlexibleArgumentParser.parse_args``, 0.11.1 to 0.32.0): a positional model beside it is then
an extra item, "unrecognized arguments"."""

MODEL_FIRST_SINCE = (0, 17, 0)
"""From vLLM 0.17.0, after that move, ``vllm serve`` refuses ``--served-model-name`` when the
first item is not the model and no ``--config`` is given (same function, 0.17.0 to 0.32.0:
"`model` should be provided as the first positional argument when using `vllm serve`")."""

_MODEL_RE = re.compile(r"^--model(=.+|$)")
_SERVED_RE = re.compile(r"^--served[-_]model[-_]name(=.+|$)")
_CONFIG_RE = re.compile(r"^--config(=.+|$)")


@dataclass(frozen=True)
class ModelArgument:
    """The model a vLLM server start serves, read as vLLM reads its argv.

    Attributes:
        model: the model vLLM serves (a repo id or path as written); None: vLLM's default
            model (the ``--model`` default of its release), or the ``--config`` file's.
        index: token index of the item that gives ``model`` (None when none does).
        fault: None, or why the server does not serve what the argv means:
            ``model-option-refused`` (``--model`` with ``vllm serve`` up to 0.11.0: vLLM exits),
            ``model-twice`` (a positional model and ``--model``, from 0.11.1: vLLM exits),
            ``model-not-first`` (``--served-model-name`` with the model not first, from 0.17.0:
            vLLM exits), ``extra-positional`` (a second positional: "unrecognized arguments",
            vLLM exits), ``positional-ignored`` (the api_server module parses a positional model
            and never uses it), ``no-model`` (vLLM serves its default model).
        fault_index: token index the fault is about (None for ``no-model``).
        from_config: a ``--config`` file is given (it may hold the model).
        ignored: token indices of model items vLLM parses and does not serve.
    """

    model: str | None
    index: int | None
    fault: str | None = None
    fault_index: int | None = None
    from_config: bool = False
    ignored: tuple[int, ...] = ()


def model_argument(tokens: list[str], style: ServerStyle,
                   version: tuple[int, int, int] | None = None) -> ModelArgument:
    """Which model a vLLM server start serves, and whether vLLM accepts the argv's way of
    giving it.

    Args:
        tokens: the server's arguments after the start (``vllm serve`` / the module).
        style: :data:`ServerStyle`.
        version: the image's vLLM release; None when unknown (the newest release's rules
            then apply; callers say so with less certainty).

    Returns:
        :class:`ModelArgument`. The ``serve`` rules are vLLM's ``FlexibleArgumentParser.
        parse_args`` pre-pass (:data:`MODEL_OPTION_REFUSED_UNTIL`, :data:`MODEL_MOVED_SINCE`,
        :data:`MODEL_FIRST_SINCE`), then argparse on the reordered items (one positional,
        ``model_tag``: a further one is "unrecognized arguments", ``extra-positional``), then
        ``vllm/entrypoints/cli/serve.py`` (``args.model = args.model_tag`` when a positional is
        given); the ``api_server`` module's ``main`` parses the same ``model_tag`` (every release
        from 0.10.2 to 0.32.0, ``make_arg_parser``) and reads only ``--model``.
    """
    toks = [str(t).strip() for t in tokens]
    config = any(_CONFIG_RE.match(t) for t in toks)
    old = style == "serve" and version is not None and version <= MODEL_OPTION_REFUSED_UNTIL
    if old:
        bare = next((i for i, t in enumerate(toks) if t == "--model"), None)
        if bare is not None:
            return ModelArgument(None, None, "model-option-refused", bare, config)
    # the items argparse sees, with their indices in ``tokens``: vllm serve (0.11.1+) first
    # moves the first --model X / --model=X to the front as the positional model
    items = list(enumerate(toks))
    moved = None
    if style == "serve" and not old:
        moved = next((i for i, t in enumerate(toks) if _MODEL_RE.match(t)), None)
        if moved is not None:
            inline = toks[moved].startswith("--model=")
            value_at = moved if inline else moved + 1
            value = toks[moved].removeprefix("--model=") if inline else (
                toks[value_at] if value_at < len(toks) else "")
            taken = {moved, value_at}
            items = [(value_at, value)] + [(i, t) for i, t in items if i not in taken]
        elif (toks and toks[0].startswith("-") and not config and any(_SERVED_RE.match(t) for t in toks)
              and (version is None or version >= MODEL_FIRST_SINCE)):
            return _model_not_first(toks, config)
    parsed = parse_vllm([t for _, t in items])
    where = [i for i, _ in items]
    positionals = [(where[a.index], a.values[0]) for a in parsed if a.name is None]
    options = [a for a in parsed if a.name == "model" and a.values and not a.missing_value]
    if len(positionals) > 1:  # argparse: one model_tag; the next is "unrecognized arguments"
        return ModelArgument(positionals[0][1], positionals[0][0],
                             "model-twice" if moved is not None else "extra-positional",
                             positionals[1][0], config)
    positional = positionals[0] if positionals else None
    if style == "api_server":
        if options:
            m = options[-1]
            return ModelArgument(m.values[0], where[m.value_indices[0]],
                                 "positional-ignored" if positional else None,
                                 positional[0] if positional else None, config,
                                 (positional[0],) if positional else ())
        if positional:
            return ModelArgument(None, None, "positional-ignored" if config else "no-model",
                                 positional[0], config, (positional[0],))
        return ModelArgument(None, None, None if config else "no-model", None, config)
    if positional:  # serve.py: the positional model wins over --model=X (up to 0.11.0)
        return ModelArgument(positional[1], positional[0], None, None, config,
                             tuple(where[a.index] for a in options))
    if options:
        m = options[-1]
        return ModelArgument(m.values[0], where[m.value_indices[0]], None, None, config)
    return ModelArgument(None, None, None if config else "no-model", None, config)


def _model_not_first(toks: list[str], config: bool) -> ModelArgument:
    """The ``model-not-first`` fault (:data:`MODEL_FIRST_SINCE`): at the first positional, else
    at the last value a list flag took (``--served-model-name x MODEL``), else at the flag."""
    parsed = parse_vllm(toks)
    positionals = [a for a in parsed if a.name is None]
    if positionals:
        return ModelArgument(positionals[0].values[0], positionals[0].index, "model-not-first",
                             positionals[0].index, config)
    taken = next((a for a in parsed if a.name and not a.inline and len(a.values) > 1
                  and spec_for(a.name).nargs_plus), None)
    served = next(i for i, t in enumerate(toks) if _SERVED_RE.match(t))
    return ModelArgument(None, None, "model-not-first", taken.value_indices[-1] if taken else served, config)


__all__ = ["FlagSpec", "FLAGS", "ALIASES", "Arg", "KnownArgv", "looks_like_flag", "spec_for", "is_bool_flag",
           "human_readable_int", "convert", "convert_lenient", "table_from_serve_args", "format_value", "compact_json",
           "flag_tokens", "flag", "parse_vllm", "parse_known", "print_args", "last_wins", "repeated", "settings",
           "ServerStyle", "ModelArgument", "model_argument", "python_start", "convert_kind",
           "kind_of_type", "negative_option", "dotted_replaces", "bool_meaning", "config_json", "setting_value",
           "flag_settings"]
