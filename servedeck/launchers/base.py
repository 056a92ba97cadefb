"""The launcher interface: how an image turns settings into the server's argv, and back.

A *launcher* is what the container runs to start vLLM: ``vllm serve``, the
``vllm.entrypoints.openai.api_server`` module, or a program that wraps vLLM with its own options
(the exl3xpu image's ``scripts/serve.py``). Each launcher is one module of this package,
holding one :class:`Launcher` subclass; :mod:`servedeck.launchers.registry` holds the known ones
and is what every other module asks. A launcher:

* recognises itself: from an image's ENTRYPOINT (:meth:`Launcher.recognises_image`), from the
  start of a command (:meth:`Launcher.start_length`, after wrappers such as ``env`` or
  ``tini``), from the arguments given to an image servedeck knows nothing about
  (:meth:`Launcher.recognises_arguments`) and from a repository name (:attr:`Launcher.hints`);
* builds the argv from :class:`LaunchSettings` (:meth:`Launcher.build_argv`) and reads an argv
  back into a :class:`Launch` (:meth:`Launcher.read`), both through the one argv grammar
  (:mod:`servedeck.vllm.argv`);
* knows its default port, its shipped defaults (:class:`LauncherDefaults`, e.g. exl3xpu's
  ``model.yaml``), how environment overrides reach the server (:meth:`Launcher.environment`)
  and the effective settings with their provenance (:meth:`Launcher.effective`:
  :class:`Setting`, source ``image`` / ``launcher-config`` / ``set`` / ``flag`` /
  ``environment``).

This base class is a launcher whose command is vLLM's own argv (the model argument and vLLM
flags); a launcher that wraps vLLM overrides what differs.

vLLM facts used here: a flag given twice keeps its last value (argparse); the dotted sub-key
flags of a JSON flag build one value that replaces the whole one (``argv.settings``); the API
key comes from ``--api-key``, else ``VLLM_API_KEY`` (``vllm/entrypoints/openai/api_server.py``,
``vllm/envs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from servedeck.errors import ServedeckError
from servedeck.vllm import argv as grammar

DocPath = tuple[str | int, ...]
"""Where a value is written: the path of a compose document node, e.g.
``("services", "vllm", "command", 7)``."""

Source = Literal["image", "launcher-config", "set", "flag", "environment"]
"""Where an effective setting comes from: the image's own default (``image``), the launcher's
config shipped in the image (``launcher-config``: exl3xpu's ``model.yaml``), an edit of that
config in the command (``set``: ``--set vllm.KEY=VALUE``), a command-line flag (``flag``: a vLLM
flag, or a launcher option such as ``--port``), or the server's environment (``environment``)."""

ENV_SETTINGS: dict[str, str] = {"api_key": "VLLM_API_KEY"}
"""vLLM settings read from the environment when no flag gives them: dest → variable
(``vllm/entrypoints/openai/api_server.py``: ``args.api_key or envs.VLLM_API_KEY``)."""


@dataclass(frozen=True)
class Setting:
    """One effective engine setting and where it came from.

    Attributes:
        value: the value as vLLM holds it (None: the setting is turned off / dropped, vLLM's own
            default applies).
        source: :data:`Source`.
        path: document path of the item that gives it (the image reference for ``image`` and
            ``launcher-config``).
    """

    value: Any
    source: Source
    path: DocPath


class LauncherDefaults(BaseModel):
    """A launcher's model config as shipped in the image (exl3xpu ``model.yaml``).

    Attributes:
        config: the positional config the defaults belong to (``models/qwen3.8-27b-exl3-4.00bpw``).
        served_model_name: the config's ``served_model_name``.
        vllm: the ``vllm:`` mapping, vLLM dest names → values, in file order.
        env: the ``env:`` mapping the launcher applies over the container environment.
    """

    model_config = ConfigDict(extra="forbid")

    config: str
    served_model_name: str | None = None
    vllm: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str | None] = Field(default_factory=dict)


@dataclass(frozen=True)
class LaunchSettings:
    """What a launcher turns into a server argv (built from a profile by
    :meth:`servedeck.model.profile.Profile.launch_settings`).

    Attributes:
        model: the model argument (a container path or a Hugging Face repo id).
        served_model_name: the served names (the API uses the first).
        port: the port the server listens on.
        engine: vLLM dest → value, in printing order; ``speculative_config`` None turns it off,
            a dict without ``method`` edits the image's speculative config key by key.
        extra_args: further vLLM argv items, verbatim, last.
        config: the launcher's model config (exl3xpu's positional), when it takes one.
        gpu: the launcher's GPU index option, when it takes one.
        env: environment overrides applied by the launcher (``None`` unsets).
    """

    model: str
    served_model_name: tuple[str, ...]
    port: int
    engine: dict[str, Any] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    config: str | None = None
    gpu: int | None = None
    env: dict[str, str | None] = field(default_factory=dict)


# --------------------------------------------------------------------------- the command read


@dataclass
class Token:
    """One argv item: its text as written and its document path."""

    text: str
    path: DocPath

    @property
    def s(self) -> str:
        return self.text.strip()


@dataclass
class Flag:
    """One option occurrence as the receiving parser sees it (a vLLM flag, or a launcher's own
    option).

    Attributes:
        name: without dashes, alias- and underscore-resolved (``max-num-batched-tokens``); a
            JSON sub-key flag keeps its key (``speculative-config.method``).
        token: the option item. values: the value items. inline: the value of ``--flag=value``.
        missing_value: a value option with no value after it.
        arg: the grammar's item (:class:`servedeck.vllm.argv.Arg`, indices into the command).
    """

    name: str
    token: Token
    values: list[Token] = field(default_factory=list)
    inline: str | None = None
    missing_value: bool = False
    arg: grammar.Arg | None = None

    @property
    def value(self) -> str | None:
        if self.inline is not None:
            return self.inline
        if self.values:
            return " ".join(v.s for v in self.values)
        return None

    @property
    def value_path(self) -> DocPath:
        return self.values[0].path if self.values else self.token.path


@dataclass
class ConfigEdit:
    """One edit of the launcher's config in the command (exl3xpu ``--set KEY.PATH=VALUE``).

    Attributes:
        text: the item as written. path: its document path. key: ``vllm.max_model_len``.
        raw: the text after the first ``=`` (None without ``=``). index: token index of the item.
    """

    text: str
    path: DocPath
    key: str
    raw: str | None
    index: int = 0

    @property
    def parts(self) -> list[str]:
        return self.key.split(".")

    @property
    def value(self) -> Any:
        """The value as the launcher reads it (YAML 1.1, :func:`servedeck.yamlio.launcher_value`);
        None without ``=``."""
        from servedeck.yamlio import launcher_value
        return None if self.raw is None else launcher_value(self.raw)


@dataclass
class Launch:
    """A service's server command as its launcher reads it.

    Attributes:
        launcher: the launcher (None: the start is not one servedeck knows; nothing else is read).
        tokens: the server's arguments (after a repeated entrypoint, when one was found).
        config: the launcher's positional model config (exl3xpu), when it takes one.
        options: the launcher's own option occurrences in order (its config edits included).
        abbreviations: (item, resolved option or None when ambiguous) of abbreviated options.
        edits: the config edits in order (:class:`ConfigEdit`).
        flags: the vLLM flags the server receives, in order.
        positionals: the items vLLM receives that are not flags (its model argument).
        args: the grammar's items vLLM receives (flags and positionals, in order), indices into
            :attr:`tokens`.
        model: the model argument as the image's vLLM release reads the command
            (:func:`servedeck.vllm.argv.model_argument`), or, for a launcher that takes the
            model by its own option, that option's value (no fault).
        start_known: the start is written in the file or is the image's own, not guessed from
            the image's name (model-argument faults are reported only then).

    Filled by :func:`servedeck.launchers.server.read_server` from the compose service:
        start_items: the ``entrypoint`` (+ command) items that start the launcher, when an
            ``entrypoint`` is given (wrappers included).
        repeated_entrypoint: leading command items that repeat the entrypoint.
        string_form: the command was a string (Compose splits it shell-style).
        shell_script / shell_split / shell_plain: the ``sh -c`` script the command was read from
            (None: the argv itself), the items after a one-word script (its ``$0``, ``$1``...),
            whether the script is one plain command.
        entry_unknown: an ``entrypoint`` is set and starts no server servedeck knows.
        env_words: ``NAME=value`` words the argv sets for the server itself.
    """

    launcher: Launcher | None
    tokens: list[Token] = field(default_factory=list)
    config: Token | None = None
    options: list[Flag] = field(default_factory=list)
    abbreviations: list[tuple[Token, str | None]] = field(default_factory=list)
    edits: list[ConfigEdit] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    positionals: list[Token] = field(default_factory=list)
    args: list[grammar.Arg] = field(default_factory=list)
    model: grammar.ModelArgument | None = None
    start_known: bool = False
    start_items: list[Token] = field(default_factory=list)
    repeated_entrypoint: list[Token] = field(default_factory=list)
    string_form: bool = False
    shell_script: Token | None = None
    shell_split: list[Token] = field(default_factory=list)
    shell_plain: bool = False
    entry_unknown: bool = False
    env_words: list[Token] = field(default_factory=list)

    def set_args(self, args: list[grammar.Arg]) -> None:
        """Set :attr:`args` and the :attr:`flags` and :attr:`positionals` they give."""
        self.args = args
        self.flags = [flag_of(a, self.tokens) for a in args if a.name is not None]
        self.positionals = [self.tokens[a.index] for a in args if a.name is None]

    def option(self, name: str) -> Flag | None:
        """The last occurrence of the launcher's own option ``name``."""
        found = [f for f in self.options if f.name == name]
        return found[-1] if found else None

    @property
    def served_model(self) -> str | None:
        """The model (path or repo id, as written) the server serves; None when none is given."""
        return self.model.model if self.model is not None else None


@dataclass(frozen=True)
class EnvItem:
    """One variable of the server's environment.

    Attributes:
        key: variable name.
        value: the value the server gets (None: taken from the shell / unset).
        path: document path of the entry that gives it.
        list_form: True for ``- KEY=VALUE`` items (no quote removal), False for mappings.
        source: :data:`Source` (``environment`` for the service's own ``environment``,
            ``env_file`` and argv words; ``launcher-config``, ``set`` or ``flag`` for what a
            launcher sets over them).
    """

    key: str
    value: str | None
    path: DocPath
    list_form: bool = True
    source: Source = "environment"


class ArgvError(ServedeckError):
    """A command item a launcher cannot read into settings: ``index`` is its token index."""

    def __init__(self, message: str, index: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.index = index


def flag_of(arg: grammar.Arg, tokens: Sequence[Token]) -> Flag:
    """:class:`Flag` of a grammar item whose indices point into ``tokens``."""
    name = (arg.name or "") + (f".{arg.subkey}" if arg.subkey else "")
    return Flag(name=name, token=tokens[arg.index],
                values=[] if arg.inline else [tokens[j] for j in arg.value_indices],
                inline=arg.value if arg.inline else None, missing_value=arg.missing_value, arg=arg)


def merge_nested(base: dict[str, Any], parts: Sequence[str], value: Any) -> None:
    """Set ``base[parts[0]][parts[1]]...`` to ``value``, making mappings on the way (replacing a
    non-mapping), in place."""
    cur = base
    for p in parts[:-1]:
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


def env_settings(environment: Sequence[EnvItem]) -> dict[str, Setting]:
    """The :data:`ENV_SETTINGS` the server's ``environment`` gives (dest → :class:`Setting`,
    source ``environment``, at the item's path): the last value of each variable, when it is
    set and not empty. :meth:`Launcher.effective` takes them for what no flag gives."""
    out: dict[str, Setting] = {}
    for dest, var in ENV_SETTINGS.items():
        item = next((e for e in reversed(environment) if e.key == var), None)
        if item is not None and item.value:
            out[dest] = Setting(item.value, "environment", item.path)
    return out


class Launcher:
    """One launcher (see the module docstring). Subclasses set the class attributes and
    override what differs from vLLM's own argv.

    Attributes:
        name: the name profiles and the image catalog use (``launcher.kind``).
        start: the ENTRYPOINT words that start it in an image (``("vllm", "serve")``).
        default_port: the port the server listens on without a port option.
        style: how vLLM reads the model from the command (:data:`~servedeck.vllm.argv.
            ServerStyle`); None when the launcher takes the model by its own option.
        model_option: how messages name the model item (``the model argument``).
        hints: repository hints for an image servedeck has no facts for: (what the repository
            must contain, the device) — every one of a tuple of substrings, or ``=owner/name``
            for that exact repository on any registry.
        tag_is_vllm_version: an image's tag names the vLLM release it holds.
        options: the launcher's own options, long names without dashes → spec (empty: the
            command is vLLM's own argv); read as its argparse ``parse_known_args`` reads them
            (:func:`servedeck.vllm.argv.parse_known`), every other item goes to vLLM.
        config_option: what the launcher's model config is called (None: it takes none); the
            command's positional, and a profile must give ``launcher.config`` then.
        gpu_option: the launcher's GPU index option (None: it takes none).
        edit_option: the option that edits the launcher's config (``--set``; None: none).
        config_file: the launcher's config file, as messages name it (``model.yaml``).
        option_fields: the launcher's own options → the :class:`LaunchSettings` field each sets
            (``model``, ``port``, ``gpu``).
        in_image: how the in-image dry run judges its commands: ``serve`` / ``api_server``
            (vLLM parses the command as that start), ``print`` (the launcher prints its final
            command, vLLM judges that), None (not judged: skipped).
        serves_repo_id: the model may be a Hugging Face repo id.
    """

    name: ClassVar[str] = ""
    start: ClassVar[tuple[str, ...]] = ()
    default_port: ClassVar[int] = 8000
    style: ClassVar[grammar.ServerStyle | None] = None
    model_option: ClassVar[str] = "the model argument"
    hints: ClassVar[tuple[tuple[tuple[str, ...] | str, str], ...]] = ()
    tag_is_vllm_version: ClassVar[bool] = True
    options: ClassVar[dict[str, grammar.FlagSpec]] = {}
    config_option: ClassVar[str | None] = None
    gpu_option: ClassVar[str | None] = None
    edit_option: ClassVar[str | None] = None
    config_file: ClassVar[str | None] = None
    option_fields: ClassVar[dict[str, str]] = {}
    in_image: ClassVar[str | None] = None
    serves_repo_id: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"<launcher {self.name}>"

    # ------------------------------------------------------------------ recognition

    def start_length(self, argv: list[str]) -> int:
        """Number of leading items of ``argv`` (wrappers already removed) that start this
        launcher; 0 when they do not."""
        return 0

    def recognises_image(self, entrypoint: list[str]) -> bool:
        """True when an image ENTRYPOINT starts this launcher (its whole start, no wrapper)."""
        return bool(entrypoint) and self.start_length(list(entrypoint)) == len(entrypoint)

    def recognises_arguments(self, argv: list[str]) -> bool:
        """True when ``argv``, the arguments given to an image servedeck has no facts for, has
        a shape only this launcher's commands have."""
        return False

    def hint_device(self, repository: str) -> str | None:
        """The device of the first of :attr:`hints` that ``repository`` (lower case) matches,
        else None."""
        repo = repository.lower()
        for hint, device in self.hints:
            if isinstance(hint, str):
                exact = hint.removeprefix("=")
                if repo == exact or repo.endswith("/" + exact):
                    return device
            elif all(part in repo for part in hint):
                return device
        return None

    # ------------------------------------------------------------------ build and read

    def build_argv(self, settings: LaunchSettings, defaults: LauncherDefaults | None = None,
                   table: Any = None) -> list[str]:
        """The container ``command`` for ``settings``: the model argument, the served names,
        the port, the engine settings in order, the extra arguments.

        Args:
            defaults: the launcher config shipped in the image (unused here).
            table: the image's vLLM argument table (:class:`servedeck.vllm.facts.VllmFacts`),
                for the spelling of a false bool flag; None: ``--no-x``.
        """
        cmd = self.model_items(settings.model)
        cmd += grammar.flag_tokens("served_model_name", list(settings.served_model_name))
        cmd += grammar.flag_tokens("port", settings.port)
        for dest, value in settings.engine.items():
            cmd += grammar.flag_tokens(dest, value, table=table)
        return cmd + list(settings.extra_args)

    def model_items(self, model: str) -> list[str]:
        """The command items that give the model (``vllm serve``: the positional)."""
        return [model]

    def read(self, tokens: Sequence[Token], version: tuple[int, int, int] | None = None) -> Launch:
        """Read the server's arguments (after the start) as the launcher and vLLM do: vLLM's
        argv when the launcher has no options of its own; else the launcher's positional config,
        its options, its config edits (:attr:`edit_option`) and the rest as vLLM's argv.

        Args:
            tokens: the arguments, each with its document path.
            version: the image's vLLM release (for the model argument's rules), None when unknown.
        """
        texts = [t.text for t in tokens]
        launch = Launch(launcher=self, tokens=list(tokens))
        if not self.options:
            launch.set_args(grammar.parse_vllm(texts))
            launch.model = grammar.model_argument([t.s for t in tokens], self.style or "serve", version)
            return launch
        known = grammar.parse_known(texts, self.options, positional=self.config_option is not None)
        launch.config = tokens[known.positional[1]] if known.positional else None
        launch.abbreviations = [(tokens[i], opt) for i, _, opt in known.abbreviations]
        edit = (self.edit_option or "").lstrip("-")
        for opt in known.options:
            launch.options.append(flag_of(opt, tokens))
            if opt.name == edit and opt.values:
                key, eq, raw = opt.values[0].partition("=")
                at = opt.value_indices[0]
                launch.edits.append(ConfigEdit(opt.values[0], tokens[at].path, key, raw if eq else None, at))
        launch.set_args(known.passthrough)
        model = self.option_of("model", launch)
        if model is not None and model.value is not None and model.arg is not None:
            at = model.arg.value_indices[0] if model.arg.value_indices else model.arg.index
            launch.model = grammar.ModelArgument(model.value, at)
        else:
            launch.model = grammar.ModelArgument(None, None)
        return launch

    def option_value(self, option: Flag) -> Any:
        """The value of one of the launcher's own options, converted as its parser converts it
        (:attr:`options`: ``int`` options give ints); a bare option gives True.

        Raises:
            ServedeckError: the launcher's parser refuses the value (names the option).
        """
        spec = self.options.get(option.name)
        text = option.value
        if text is None:
            return True
        try:
            return grammar.convert_kind(spec.kind, text) if spec is not None and spec.kind != "bool" else text
        except ValueError as exc:
            raise ServedeckError(f"--{option.name} {text!r}: the {self.name} launcher refuses this value ({exc})",
                                 hint=f"give --{option.name} a value of type {spec.kind if spec else 'str'}") from None

    def option_of(self, field_name: str, launch: Launch) -> Flag | None:
        """The last occurrence of the launcher option that sets :class:`LaunchSettings` field
        ``field_name`` (:attr:`option_fields`), or None."""
        name = next((o for o, f in self.option_fields.items() if f == field_name), None)
        return launch.option(name) if name else None

    def edit_target(self, edit: ConfigEdit) -> tuple[str, list[str]] | None:
        """What a config edit changes: ``("engine", [dest, key...])`` (a vLLM setting, or keys of
        a JSON one), ``("env", [name])`` (the server's environment), ``("served_model_name",
        [])``; None for anything else (here: the launcher edits no config)."""
        return None

    def types_flag(self, arg: grammar.Arg) -> bool:
        """Whether a vLLM flag of the command may become a typed profile field on import (False:
        it stays a verbatim extra argument, e.g. a setting the launcher edits in its config)."""
        return True

    # ------------------------------------------------------------------ defaults and environment

    def defaults(self, shipped: Iterable[LauncherDefaults], config: str | None) -> LauncherDefaults | None:
        """The shipped config ``config`` names (exact match), when the launcher has configs."""
        return None

    def config_path(self, config: str, workdir: str) -> str | None:
        """The file in the image that holds config ``config`` (None: the launcher has none)."""
        return None

    def read_config(self, config: str, text: str) -> LauncherDefaults | None:
        """The defaults in config file text ``text`` (as the launcher reads it), or None when it
        is not one."""
        return None

    def environment(self, launch: Launch, items: list[EnvItem], defaults: LauncherDefaults | None,
                    image_path: DocPath) -> list[EnvItem]:
        """The server's environment: the service's own ``items`` (env_file, environment, argv
        words), then what the launcher sets over them, in order (a later item wins; value None
        unsets). Here: the items as they are."""
        return list(items)

    # ------------------------------------------------------------------ effective settings

    def effective(self, launch: Launch, defaults: LauncherDefaults | None, environment: list[EnvItem],
                  image_port: int | None, image_path: DocPath) -> dict[str, Setting]:
        """The settings vLLM runs with, each with its :class:`Setting` provenance, in the order
        they apply: the launcher's shipped config (:meth:`config_settings`), the port (the
        launcher's port option, else the image's default), the command's config edits
        (:meth:`edit_settings`), the vLLM flags (last occurrence wins; sub-key flags of a JSON
        flag form one value that replaces the whole one), then :data:`ENV_SETTINGS` from the
        environment where no flag gives them (:func:`env_settings`).

        Args:
            image_port: the image's default port from its facts (None: :attr:`default_port`).
            image_path: the document path of the image reference.
        """
        from_env = env_settings(environment)
        eff = self.config_settings(defaults, image_path)
        port = self.option_of("port", launch)
        if port is not None and port.value is not None:
            try:
                value = self.option_value(port)
            except ServedeckError:
                value = port.value  # the argv rules report a refused value
            eff["port"] = Setting(value, "flag", port.value_path)
        else:
            eff["port"] = Setting(image_port if image_port is not None else self.default_port, "image", image_path)
        self.edit_settings(launch, eff)
        # the settings vLLM holds from its flags (servedeck.vllm.argv.flag_settings), each at the
        # path of the item that gives its value
        by_arg = {id(f.arg): f for f in launch.flags}
        for dest, (value, a) in grammar.flag_settings([f.arg for f in launch.flags if f.arg is not None]).items():
            f = by_arg[id(a)]
            eff.pop(dest, None)
            eff[dest] = Setting(value, "flag", f.token.path if f.inline is not None else f.value_path)
        for dest, setting in from_env.items():  # what no flag gives
            if eff.get(dest) is None or eff[dest].value is None:
                eff[dest] = setting
        return eff

    def config_settings(self, defaults: LauncherDefaults | None, image_path: DocPath) -> dict[str, Setting]:
        """The settings of the launcher's shipped config (``launcher-config``); none here."""
        return {}

    def edit_settings(self, launch: Launch, eff: dict[str, Setting]) -> None:
        """Overlay the command's config edits on ``eff`` (in place); none here."""

    # ------------------------------------------------------------------ views

    def argv_view(self, launch: Launch) -> dict[str, Any]:
        """The command as comparable variables (A/B views): positionals (the launcher's config
        first) as ``command.positional[i]``, the launcher's own options as ``launcher.<option>``
        (its port option as ``port``), its config edits (:meth:`edit_view`), then the vLLM flags
        by dest name, a repeated flag's last value (a bare flag True, ``--no-x`` False, several
        values a list, one value as vLLM converts it, then as a YAML 1.1 scalar; JSON values
        flattened to dotted paths, a sub-key flag under ``DEST.KEY``)."""
        from servedeck.yamlio import flatten
        out: dict[str, Any] = {}
        positionals = ([launch.config] if launch.config is not None else []) + launch.positionals
        for i, t in enumerate(positionals):
            out[f"command.positional[{i}]"] = scalar(t.s)
        edit = (self.edit_option or "").lstrip("-")
        for opt in launch.options:
            if opt.name != edit:
                own = self.option_fields.get(opt.name) == "port"
                name = "port" if own else "launcher." + opt.name.replace("-", "_")
                out[name] = scalar(opt.value) if opt.value is not None else True
        out.update(self.edit_view(launch))
        for a in grammar.last_wins([f.arg for f in launch.flags if f.arg is not None]).values():
            name = (a.dest or "") + (f".{a.subkey}" if a.subkey else "")
            if not a.values:
                out[name] = not a.negated
            elif len(a.values) > 1:
                out[name] = [scalar(v) for v in a.values]
            else:
                value = grammar.convert_lenient(a.name or "", a.value)
                out.update(flatten(scalar(value) if isinstance(value, str) else value, name))
        return out

    def edit_view(self, launch: Launch) -> dict[str, Any]:
        """The command's config edits as comparable variables; none here."""
        return {}

    def meaning(self, tokens: Iterable[str]) -> dict[str, Any]:
        """What a command means, independent of how it is spelled (flag order, ``--x=v`` versus
        ``--x v``, ``16K`` versus ``16384``, a repeated flag). vLLM's argv: ``{"model",
        "positionals", "flags"}`` with vLLM's defaults applied for the served name (the model) and
        the port. A launcher with options of its own: ``{"config", "options" (last wins),
        "edits" ({key: value as the launcher reads it}, last wins), "flags" (what vLLM gets)}``."""
        toks = [str(t) for t in tokens]
        if self.options:
            launch = self.read([Token(t, ("command", i)) for i, t in enumerate(toks)])
            edit = (self.edit_option or "").lstrip("-")
            return {"config": launch.config.s if launch.config else None,
                    "options": {f.name: grammar.convert_lenient(f.name, f.value) for f in launch.options
                                if f.name != edit},
                    "edits": {e.key: e.value for e in launch.edits}, "flags": grammar.settings(launch.args)}
        args = grammar.parse_vllm(toks)
        positionals = [a.values[0] for a in args if a.name is None]
        flags = grammar.settings(args)
        model = flags.pop("model", None) or (positionals[0] if positionals else None)
        flags.setdefault("served_model_name", [model])
        if isinstance(flags["served_model_name"], str):
            flags["served_model_name"] = [flags["served_model_name"]]
        flags.setdefault("port", self.default_port)
        return {"model": model, "positionals": positionals[1:] if positionals and positionals[0] == model
                else positionals, "flags": flags}


def scalar(text: str) -> Any:
    """A command-line item as a comparable value (YAML 1.1 scalar as the exl3xpu launcher reads
    it; the stripped text when it is a string)."""
    from servedeck.yamlio import launcher_value
    value = launcher_value(text.strip())
    return text.strip() if isinstance(value, str) else value


__all__ = ["DocPath", "Source", "ENV_SETTINGS", "Setting", "LauncherDefaults", "LaunchSettings", "Token", "Flag",
           "ConfigEdit", "Launch", "EnvItem", "ArgvError", "Launcher", "env_settings", "flag_of", "merge_nested",
           "scalar"]
