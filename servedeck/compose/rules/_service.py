"""Per-service analysis shared by the rule families: the check context, the image reference,
the launcher, the server argv as parsed by the launcher and vLLM, and the effective engine
settings (image model.yaml defaults + ``--set vllm.*`` + passthrough flags, last wins).

Sources: exl3xpu ``scripts/serve.py`` contract (implemented in this repository by
``deploy/images/cpu-vllm/serve.py``: argparse ``parse_known_args``, ``--set`` split at the first ``=`` with the value read by
PyYAML ``safe_load``, passthrough appended after the model.yaml flags); vLLM's argparse
conventions (``vllm/engine/arg_utils.py``: ``--x`` / ``--no-x`` booleans, ``--flag=value``,
last occurrence wins).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servedeck.model.catalog import Catalog, ImageFacts, LauncherDefaults, infer_facts
from servedeck.findings import Finding, Severity
from servedeck.compose.rules._doc import Doc, Path, path_str
from servedeck.compose.document import shell_script, split_command
from servedeck.vllm import argv
from servedeck.vllm.names import release_of
from servedeck.vllm.argv import ALIASES, ASSIGNMENT, FLAGS, LAUNCHER_OPTIONS, looks_like_flag, server_prefix
from servedeck.yamlio import launcher_value

_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")


class CheckExpectations(BaseModel):
    """What the caller knows about the file beyond its text.

    Attributes:
        render_gid: the card host's ``render`` group id (from the host inventory), e.g. ``"992"``.
        rendered: True when the file was produced by servedeck's renderer (relative bind
            mounts then resolve against the run's working directory on the host).
        startup_seconds: measured time to ready (s) of the last run of this profile, if any.
        hf_config: the served model's Hugging Face ``config.json`` (as a dict), if known.
        gpu_memory_gib: memory of one GPU of the card host (GiB), if known.
        variables: the variables Compose substitutes (``${VAR}``) when it reads the file, as far
            as the file's own directory says: its ``.env``
            (:func:`servedeck.compose.document.dotenv_variables`). The service rules judge the
            values Compose would give (defaults of ``${VAR:-default}`` included); a value that
            needs the shell of whoever runs Compose is judged as written.
        env_files: the ``env_file`` files the services name, path as written → their variables
            (None: not readable), as :func:`servedeck.compose.document.env_file_variables`
            reads them beside the file; a file not listed here is not judged.
        extends_files: other compose documents that services ``extends`` (``file:``), by the
            path as written, parsed (:func:`servedeck.compose.document.extends_files` reads
            them beside the file); a base in a file not given here is not merged.
    """

    model_config = ConfigDict(extra="forbid")

    render_gid: str | None = None
    rendered: bool = False
    startup_seconds: float | None = None
    hf_config: dict[str, Any] | None = None
    gpu_memory_gib: float | None = None
    variables: dict[str, str] = Field(default_factory=dict)
    env_files: dict[str, dict[str, str] | None] = Field(default_factory=dict)
    extends_files: dict[str, Any] = Field(default_factory=dict)


@dataclass
class Ctx:
    """Everything a rule needs, and the list it appends findings to."""

    doc: Doc
    file: str | None
    catalog: Catalog | None
    expect: CheckExpectations
    findings: list[Finding] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict)  # per-check lookups shared by rules

    def add(self, severity: Severity, rule: str, path: Path, message: str, hint: str | None = None,
            line: int | None = None, key: bool = False) -> None:
        """Append one finding; the line defaults to the node (or key) line of ``path``."""
        if line is None:
            line = self.doc.key_line(path) if key else self.doc.line(path)
        self.findings.append(Finding(severity=severity, rule=rule, path=path_str(path), message=message,
                                     hint=hint, line=line, file=self.file))

    def error(self, rule: str, path: Path, message: str, hint: str | None = None, **kw: Any) -> None:
        self.add(Severity.error, rule, path, message, hint, **kw)

    def warning(self, rule: str, path: Path, message: str, hint: str | None = None, **kw: Any) -> None:
        self.add(Severity.warning, rule, path, message, hint, **kw)

    def info(self, rule: str, path: Path, message: str, hint: str | None = None, **kw: Any) -> None:
        self.add(Severity.info, rule, path, message, hint, **kw)


# --------------------------------------------------------------------------- image reference

_DIGEST_RE = re.compile(r"^(?P<algo>[a-z0-9]+(?:[+._-][a-z0-9]+)*):(?P<hex>.*)$")
_DIGEST_LEN = {"sha256": 64, "sha512": 128}


@dataclass(frozen=True)
class ImageRef:
    """``repository[:tag][@digest]`` split into parts (no registry lookup)."""

    text: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> "ImageRef":
        name, _, digest = text.partition("@")
        last = name.rsplit("/", 1)[-1]
        tag = None
        if ":" in last:
            tag = last.split(":", 1)[1]
            name = name[: len(name) - len(tag) - 1]
        return cls(text, name, tag, digest or None)

    def digest_problem(self) -> str | None:
        """Why the digest is malformed, or None when it is well formed (or absent)."""
        if self.digest is None:
            return None
        m = _DIGEST_RE.match(self.digest)
        if not m:
            return "a digest is ALGORITHM:HEX, e.g. sha256:<64 hex digits>"
        want = _DIGEST_LEN.get(m["algo"])
        if want is None:
            return f"unknown digest algorithm {m['algo']!r} (Docker uses sha256)"
        if not re.fullmatch(r"[0-9a-f]+", m["hex"]) or len(m["hex"]) != want:
            return f"{m['algo']} digest must be {want} lowercase hex digits, got {len(m['hex'])} characters"
        return None


# --------------------------------------------------------------------------- argv model

#: The flag table and argv grammar live in :mod:`servedeck.vllm.argv`; re-exported for rules.
SERVE_OPTIONS: dict[str, bool] = {name: spec.takes_value for name, spec in LAUNCHER_OPTIONS.items()}
JSON_FLAGS = {name for name, spec in FLAGS.items() if spec.kind == "json"}


def flag_dest(name: str) -> tuple[str, bool]:
    """``no-enable-chunked-prefill`` → (``enable_chunked_prefill``, negated=True); vLLM 0.33's
    ``disable-prefix-caching`` → (``enable_prefix_caching``, True)
    (:func:`servedeck.vllm.argv.bool_meaning`)."""
    name = ALIASES.get(name, name)
    if argv.is_bool_flag(name):
        dest, stored = argv.bool_meaning(name)
        return dest, stored is False
    return argv.spec_for(name).dest, False


@dataclass
class Token:
    """One argv item: its text as written and its document path."""

    text: str
    path: Path

    @property
    def s(self) -> str:
        return self.text.strip()


@dataclass
class Flag:
    """One flag occurrence as the receiving parser sees it."""

    name: str                    # without dashes, alias-resolved, e.g. "max-num-batched-tokens"
    token: Token
    values: list[Token] = field(default_factory=list)
    inline: str | None = None    # value given as --flag=value
    missing_value: bool = False

    @property
    def value(self) -> str | None:
        if self.inline is not None:
            return self.inline
        if self.values:
            return " ".join(v.s for v in self.values)
        return None

    @property
    def value_path(self) -> Path:
        return self.values[0].path if self.values else self.token.path


@dataclass
class SetArg:
    """One ``--set KEY.PATH=VALUE`` of the exl3xpu launcher."""

    text: str
    path: Path
    key: str
    value: str | None            # None when the text has no "="


@dataclass
class Launch:
    """The service's server command as the launcher reads it.

    Attributes:
        kind: ``exl3xpu`` (serve.py contract), ``vllm`` (``vllm serve`` flags) or None (unknown).
        tokens: command items (after a repeated entrypoint, when one was found).
        repeated_entrypoint: the items that repeat the entrypoint at the start of the command.
        config: the exl3xpu positional model config.
        serve_opts: serve.py options by name (last occurrence; ``--set`` is in ``sets``).
        serve_list: every serve.py option occurrence (``--set`` included), in order.
        abbreviations: (token, resolved option or None when ambiguous) for abbreviated options.
        sets: ``--set`` arguments in order.
        flags: vLLM flags (exl3xpu passthrough, or the whole command for ``vllm``), in order.
        positionals: non-flag items the server receives (vLLM: model path).
        string_form: True when the command was a string (Compose splits it shell-style).
        shell_script: the ``sh -c`` script item the server command was read from (None: the
            argv itself); ``shell_split``: the items after a one-word script, which the shell
            takes as ``$0``, ``$1``, ... (a string command split by Compose after ``sh -c``).
        shell_plain: the ``sh -c`` script is one plain command (read as its argv).
        entry_unknown: an ``entrypoint`` is set and the argv it starts is not a server command
            servedeck knows, so the command was not analysed.
        env_words: ``NAME=value`` words the argv sets for the server itself (``env NAME=v vllm
            serve``, ``sh -c "NAME=v exec vllm serve"``), in order: they add to (and override)
            the service's ``environment``.
        style: for ``vllm``, how the server is started (:data:`~servedeck.vllm.argv.ServerStyle`:
            ``serve`` or ``api_server``), from the start the container runs; None when unknown.
        model: for ``vllm``, the model argument as the image's release reads ``tokens``
            (:func:`~servedeck.vllm.argv.model_argument`; read as ``vllm serve`` when ``style``
            is unknown); None for other launchers.
    """

    kind: Literal["exl3xpu", "vllm"] | None
    tokens: list[Token] = field(default_factory=list)
    repeated_entrypoint: list[Token] = field(default_factory=list)
    config: Token | None = None
    serve_opts: dict[str, Flag] = field(default_factory=dict)
    serve_list: list[Flag] = field(default_factory=list)
    abbreviations: list[tuple[Token, str | None]] = field(default_factory=list)
    sets: list[SetArg] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    positionals: list[Token] = field(default_factory=list)
    string_form: bool = False
    shell_script: Token | None = None
    shell_split: list[Token] = field(default_factory=list)
    shell_plain: bool = False
    entry_unknown: bool = False
    env_words: list[Token] = field(default_factory=list)
    style: argv.ServerStyle | None = None
    model: argv.ModelArgument | None = None


def _flag(arg: argv.Arg, tokens: list[Token]) -> Flag:
    name = (arg.name or "") + (f".{arg.subkey}" if arg.subkey else "")
    return Flag(name=name, token=tokens[arg.index],
                values=[] if arg.inline else [tokens[j] for j in arg.value_indices],
                inline=arg.value if arg.inline else None, missing_value=arg.missing_value)


def parse_vllm_flags(tokens: list[Token]) -> tuple[list[Flag], list[Token]]:
    """Parse vLLM serve flags with the argv grammar (:func:`servedeck.vllm.argv.parse_vllm`)."""
    parsed = argv.parse_vllm([t.text for t in tokens])
    flags = [_flag(a, tokens) for a in parsed if a.name is not None]
    positionals = [tokens[a.index] for a in parsed if a.name is None]
    return flags, positionals


def parse_exl3xpu(tokens: list[Token]) -> Launch:
    """Split an exl3xpu command into config, serve.py options, ``--set`` and passthrough
    (:func:`servedeck.vllm.argv.parse_launcher`)."""
    parsed = argv.parse_launcher([t.text for t in tokens])
    launch = Launch(kind="exl3xpu", tokens=tokens)
    launch.config = tokens[parsed.config[1]] if parsed.config else None
    launch.abbreviations = [(tokens[i], opt) for i, _, opt in parsed.abbreviations]
    for opt in parsed.options:
        flag = _flag(opt, tokens)
        if opt.name != "set":
            launch.serve_opts[opt.name or ""] = flag
        launch.serve_list.append(flag)
    launch.sets = [SetArg(item.text, tokens[item.index].path, item.key, item.raw) for item in parsed.sets]
    launch.flags = [_flag(a, tokens) for a in parsed.passthrough if a.name is not None]
    launch.positionals = [tokens[a.index] for a in parsed.passthrough if a.name is None]
    return launch


# --------------------------------------------------------------------------- effective settings

def yaml_value(text: str) -> Any:
    """A ``--set`` value as serve.py reads it (see :func:`servedeck.yamlio.launcher_value`)."""
    return launcher_value(text)


def parse_max_model_len(text: str) -> int | None:
    """vLLM's human-readable ``--max-model-len`` (:func:`servedeck.vllm.argv.human_readable_int`)."""
    try:
        return argv.human_readable_int(text, auto=True)
    except ValueError:
        return None


def flag_value(name: str, text: str | None) -> Any:
    """Convert a flag's text value to what vLLM would hold (best effort; unknown flags with a
    numeric value become numbers)."""
    value = argv.convert_lenient(name, text)
    if isinstance(value, str) and name not in argv.FLAGS and _NUMBER.match(value):
        return float(value) if any(c in value for c in ".eE") else int(value)
    if name == "max-model-len" and isinstance(value, str):
        return None
    return value


@dataclass
class Eff:
    """One effective engine setting and where it came from."""

    value: Any
    source: Literal["image", "set", "flag", "launcher"]
    path: Path


@dataclass
class Service:
    """One compose service as the rules see it.

    ``env_files``: the variables of the ``env_file`` files it names, as (document path of the
    entry, name, value) in file order, from ``CheckExpectations.env_files`` (empty when the
    caller read none)."""

    name: str
    data: dict[str, Any]
    path: Path
    image: ImageRef | None
    facts: ImageFacts | None
    launch: Launch
    defaults: LauncherDefaults | None = None
    effective: dict[str, Eff] = field(default_factory=dict)
    env_files: list[tuple[Path, str, str]] = field(default_factory=list)

    @property
    def device(self) -> str | None:
        return self.facts.device if self.facts else None

    def eff(self, dest: str) -> Any:
        e = self.effective.get(dest)
        return None if e is None else e.value


def _tokens(value: Any, path: Path) -> tuple[list[Token], bool]:
    if isinstance(value, str):
        return [Token(p, path) for p in split_command(value) or []], True
    if isinstance(value, list):
        return [Token("" if v is None else str(v), path + (i,)) for i, v in enumerate(value)], False
    return [], False


def _is_serve_py(tokens: list[str]) -> bool:
    return bool(tokens) and any(t.strip().endswith("serve.py") for t in tokens[:2])


def _shell_script(argv: list[Token]) -> tuple[Token | None, list[Token], list[Token] | None, list[Token]]:
    """:func:`~servedeck.compose.document.shell_script` on argv items: (the SCRIPT item, the
    items after a one-word SCRIPT, the SCRIPT's argv as items at the SCRIPT's path, or None, its
    leading ``NAME=value`` words as items at the SCRIPT's path)."""
    found = shell_script([t.s for t in argv])
    if found is None:
        return None, [], None, []
    i, split, words, assignments = found
    script = argv[i]
    return (script, argv[i + 1:i + 1 + split], None if words is None else [Token(w, script.path) for w in words],
            [Token(w, script.path) for w in assignments])


def _repeat_length(cmd: list[Token], entry: list[str]) -> int:
    """Number of leading command items that repeat an entrypoint (0 if none): a server start
    servedeck knows (:func:`~servedeck.vllm.argv.server_prefix`), or the effective entrypoint
    itself."""
    s = [t.s for t in cmd]
    n, kind = server_prefix(s)
    if kind is not None:
        return n
    if entry and s[: len(entry)] == entry:
        return len(entry)
    return 0


def analyse_service(ctx: Ctx, name: str, data: dict[str, Any]) -> Service:
    """Build the :class:`Service` view: image, facts, launcher, parsed argv, effective settings."""
    path: Path = ("services", name)
    image_text = data.get("image")
    image = ImageRef.parse(image_text) if isinstance(image_text, str) else None
    facts = ctx.catalog.lookup(image.digest) if (ctx.catalog and image and image.digest) else None
    if facts is None and image is not None:
        facts = infer_facts(image.repository, image.tag)  # first contact: hints, marked inferred

    entry_tokens, _ = _tokens(data.get("entrypoint"), path + ("entrypoint",))
    entry = [t.s for t in entry_tokens]
    cmd, string_form = _tokens(data.get("command"), path + ("command",))
    image_entry = list(facts.entrypoint) if facts else []
    effective_entry = entry if data.get("entrypoint") is not None else image_entry

    kind: Literal["exl3xpu", "vllm"] | None = None
    script: Token | None = None
    split: list[Token] = []
    inner: list[Token] | None = None
    env_words: list[Token] = []
    if data.get("entrypoint") is not None:
        # Docker runs entrypoint + command as one argv; a shell's -c script is read as its argv
        argv_tokens = entry_tokens + cmd
        script, split, inner, env_words = _shell_script(argv_tokens)
        if inner is not None:
            argv_tokens = inner
        n, kind = server_prefix([t.s for t in argv_tokens])
        if kind is not None:
            effective_entry = [t.s for t in argv_tokens[:n]]
            cmd = argv_tokens[n:]
            env_words += [t for t in argv_tokens[:n] if ASSIGNMENT.fullmatch(t.s)]  # env NAME=v
    elif facts is not None and not facts.inferred:
        kind = facts.launcher
    elif cmd and (cmd[0].s.startswith("models/") or _is_serve_py([t.s for t in cmd])):
        kind = "exl3xpu"
    elif facts is not None:
        kind = facts.launcher
    elif image and "vllm" in image.repository.rsplit("/", 1)[-1]:
        kind = "vllm"

    repeat = _repeat_length(cmd, effective_entry) if kind else 0
    rest = cmd[repeat:]
    if kind == "exl3xpu":
        launch = parse_exl3xpu(rest)
    elif kind == "vllm":
        launch = Launch(kind="vllm", tokens=rest)
        launch.flags, launch.positionals = parse_vllm_flags(rest)
    else:
        launch = Launch(kind=None, tokens=cmd)
    launch.repeated_entrypoint = cmd[:repeat]
    launch.string_form = string_form
    launch.shell_script, launch.shell_split = script, split
    launch.entry_unknown = data.get("entrypoint") is not None and kind is None
    launch.shell_plain = script is not None and inner is not None
    launch.env_words = env_words
    if kind == "vllm":
        if data.get("entrypoint") is not None or repeat or (facts and not facts.inferred):
            # the start is known: written in the file, or the image's own (not guessed from its name)
            launch.style = argv.server_style([t.s for t in cmd[:repeat]] if repeat else effective_entry)
        launch.model = argv.model_argument([t.s for t in launch.tokens], launch.style or "serve",
                                           release_of(facts.vllm_version) if facts else None)

    from servedeck.compose.document import env_file_paths
    env_files = [(path + where, k, v) for where, file, _ in env_file_paths(data.get("env_file"))
                 for k, v in (ctx.expect.env_files.get(file) or {}).items()]
    svc = Service(name, data, path, image, facts, launch, env_files=env_files)
    _effective(svc)
    return svc


def _set_nested(base: dict[str, Any], parts: list[str], value: Any) -> None:
    cur = base
    for p in parts[:-1]:
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


def _effective(svc: Service) -> None:
    launch = svc.launch
    eff = svc.effective
    image_path = svc.path + ("image",)
    if launch.kind == "exl3xpu":
        if svc.facts and launch.config:
            svc.defaults = svc.facts.defaults_for(launch.config.s)
        if svc.defaults:
            for k, v in svc.defaults.vllm.items():
                eff[k] = Eff(copy.deepcopy(v), "image", image_path)
            if svc.defaults.served_model_name:
                eff["served_model_name"] = Eff(svc.defaults.served_model_name, "image", image_path)
        port_flag = launch.serve_opts.get("port")
        default_port = svc.facts.default_port if svc.facts and svc.facts.launcher == "exl3xpu" else 8100
        if port_flag and port_flag.value is not None:
            eff["port"] = Eff(flag_value("port", port_flag.value), "launcher", port_flag.value_path)
        else:
            eff["port"] = Eff(default_port, "image", image_path)
        for s in launch.sets:
            if s.value is None or not s.key:
                continue
            parts = s.key.split(".")
            if parts[0] == "served_model_name" and len(parts) == 1:
                eff["served_model_name"] = Eff(yaml_value(s.value), "set", s.path)
            if parts[0] != "vllm" or len(parts) < 2 or not all(parts[1:]):
                continue
            value = yaml_value(s.value)
            dest = parts[1]
            if len(parts) == 2:
                eff[dest] = Eff(value, "set", s.path)
            else:
                old = eff.get(dest)
                base = copy.deepcopy(old.value) if old and isinstance(old.value, dict) else {}
                _set_nested(base, parts[2:], value)
                eff[dest] = Eff(base, "set", s.path)
    elif launch.kind == "vllm":
        eff["port"] = Eff(svc.facts.default_port if svc.facts else 8000, "image", image_path)
    for flag in launch.flags:
        dest, negated = flag_dest(flag.name)
        if flag.missing_value:
            continue
        value = False if negated else flag_value(ALIASES.get(flag.name, flag.name), flag.value)
        eff[dest] = Eff(value, "flag", flag.token.path if flag.inline is not None else flag.value_path)
    # launcher "null"/false semantics: None drops the flag (v3); False omits it
    for dest in [d for d, e in eff.items() if e.value is None]:
        del eff[dest]


def services(ctx: Ctx) -> list[Service]:
    """Analyse every service of the document (services that are not mappings are skipped)."""
    data = ctx.doc.data
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        return []
    from servedeck.compose.document import interpolated, resolve_extends
    variables = ctx.expect.variables
    # the service as Compose reads it: its extends merged in, then the values interpolation
    # gives; the image is judged as written (its pinning must not depend on a variable:
    # image/interpolated)
    resolved = resolve_extends(data["services"], ctx.expect.extends_files)
    return [analyse_service(ctx, name, {k: v if k == "image" else interpolated(v, variables)
                                        for k, v in svc.items()})
            for name, svc in resolved.items() if isinstance(svc, dict)]


__all__ = ["CheckExpectations", "Ctx", "ImageRef", "Launch", "Flag", "SetArg", "Token", "Service",
           "Eff", "services", "analyse_service", "parse_vllm_flags", "parse_exl3xpu", "yaml_value",
           "flag_value", "JSON_FLAGS", "SERVE_OPTIONS", "looks_like_flag", "path_str"]
