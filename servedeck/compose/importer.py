"""Import an existing docker-compose file as a profile (the user's way in).

The compose file is read by the compose document model (:mod:`servedeck.compose.document`,
YAML 1.2) and the service's ``command`` by its launcher (:mod:`servedeck.launchers`) through the
argv grammar (:mod:`servedeck.vllm.argv`), the way vLLM and the launcher read it:
``--flag=value`` is ``--flag value``, ``16K`` is 16384, a flag given twice keeps its last value
(noted); a launcher's config edits (exl3xpu ``--set vllm.*`` / ``--set env.*``, values YAML 1.1
as its PyYAML reads them) become the engine fields and environment overrides they set.

Nothing is dropped silently: a setting with a typed profile field goes there; other vLLM flags
stay verbatim in ``engine.extra_args``; service keys servedeck does not model (GPU device
requests, ``gpus``, healthcheck, ulimits, ...) are carried verbatim in
``container.compose_extra``; what cannot be kept at all is listed, one by one, in the notes.
A model given as a Hugging Face repo id (served from the HF cache) becomes ``model.repo_id``
plus ``model.hf_cache``.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servedeck.compose.document import (Mount, ServiceDefinition, interpolation_refs, literal_values,
                                        load_document)
from servedeck.compose.service import Service
from servedeck.errors import ServedeckError
from servedeck.launchers import registry
from servedeck.launchers.base import ConfigEdit, Launch, Launcher
from servedeck.launchers.server import of_arguments
from servedeck.model.catalog import Catalog, ImageRef, image_facts
from servedeck.model.profile import ENGINE_FLAGS, IMAGE_RE, Profile
from servedeck.vllm.argv import (Arg, ServerStyle, dotted_replaces, last_wins, model_argument, repeated, settings,
                                 spec_for)
from servedeck.yamlio import dump_yaml

#: Service keys with a typed :class:`~servedeck.model.profile.Container` field.
_CONTAINER_KEYS = ("container_name", "restart", "group_add", "shm_size", "ipc")


def hf_hub_cache(env: dict[str, str | None]) -> str:
    """The Hugging Face hub cache directory in the container, as ``huggingface_hub`` resolves it
    (``huggingface_hub/constants.py``): ``HF_HUB_CACHE`` (or the older ``HUGGINGFACE_HUB_CACHE``),
    else ``$HF_HOME/hub``, else ``${XDG_CACHE_HOME:-~/.cache}/huggingface/hub``; ``~`` is
    ``/root``, the user vLLM's images run as."""
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if hub:
        return hub.rstrip("/") or "/"
    home = env.get("HF_HOME") or f"{(env.get('XDG_CACHE_HOME') or '/root/.cache').rstrip('/')}/huggingface"
    return f"{home.rstrip('/')}/hub"


def _holds_hf_cache(target: str, hub: str) -> bool:
    """Whether a mount at ``target`` keeps the hub cache ``hub`` (at it or a directory above)."""
    t = target.rstrip("/")
    return bool(t) and (hub == t or hub.startswith(t + "/"))


def _variables(value: Any, where: str):
    """``(field, text, variables, invalid)`` for each string under ``value`` (a service mapping as
    :meth:`ServiceDefinition.dump` gives it) that holds Compose interpolation."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _variables(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _variables(v, f"{where}[{i}]")
    elif isinstance(value, str) and "$" in value:
        refs, bad = interpolation_refs(value)
        if refs or bad:
            yield where, value, refs, bad


def _refuse_variables(svc: ServiceDefinition, file: str, base: str) -> None:
    """A profile's typed fields hold values, not Compose variables: the renderer writes every
    ``$`` of them as ``$$``, so ``${VLLM_API_KEY}`` kept there would reach the server as those
    characters instead of the value Compose substitutes on the host. The keys carried verbatim
    into ``container.compose_extra`` keep Compose's reading and are not refused.

    Raises:
        ServedeckError: the first field holding a variable (or an invalid ``$``), naming it.
    """
    carried = {k for k in svc.extra if k not in _CONTAINER_KEYS}
    typed = {k: v for k, v in svc.dump().items() if k not in carried}
    for where, text, refs, bad in _variables(typed, base):
        if bad is not None:
            raise ServedeckError(f"{bad!r} is not a valid Compose interpolation; `docker compose` "
                                 "refuses the file", file=file, field=where,
                                 hint="write a literal $ as $$")
        names = ", ".join(f"${r}" for r in dict.fromkeys(refs))
        raise ServedeckError(
            f"{text!r} uses the variable {names}: Compose substitutes it from the environment "
            "(and the project's .env file) of whoever runs `docker compose`; a profile holds the "
            "value itself, so the import would change what the server gets", file=file, field=where,
            hint="import the file as Compose reads it: run "
                 "`docker compose config --no-normalize > resolved.yml` "
                 "where the variables are set, then import resolved.yml")


def _is_path(text: str) -> bool:
    return text.startswith(("/", ".", "~"))


class _Reader:
    """State of one import: the profile pieces and the notes."""

    def __init__(self, file: str, base: str, launcher: Launcher) -> None:
        self.file, self.base, self.runs = file, base, launcher
        self.engine: dict[str, Any] = {}
        self.launcher: dict[str, Any] = {"kind": launcher.name}
        self.launcher_env: dict[str, Any] = {}
        self.served: list[str] = []
        self.port: int | None = None
        self.model_arg: str | None = None
        self.settings: dict[str, Any] = {}
        self.extra: list[str] = []
        self.speculative: dict[str, Any] | None | str = "unset"
        self.notes: list[str] = []

    def where(self, index: int) -> str:
        return f"{self.base}.command[{index}]"

    def value(self, arg: Arg, argv: list[str]) -> Any:
        try:
            return arg.typed()
        except ServedeckError as exc:
            raise ServedeckError(exc.message, file=self.file, field=self.where(arg.index),
                                 hint=exc.hint) from None

    def vllm_flags(self, args: list[Arg], argv: list[str]) -> None:
        """Typed fields for the flags servedeck models; the rest stays verbatim.

        Raises:
            ServedeckError: ``--config FILE`` is given: its settings are not read here, and vLLM
                puts them before the command line's (vLLM ``FlexibleArgumentParser``
                ``load_config_file``), so the rendered command's own ``--served-model-name``,
                ``--port`` and model would silently override them.
        """
        vllm_model = self.runs.style is not None  # vLLM reads the model from these arguments
        config = next((a for a in args if a.dest == "config" and vllm_model), None)
        if config is not None:
            raise ServedeckError(f"--config {config.value or ''}: the settings in that file are not read by the "
                                 "import, and the rendered command's own flags (served name, port, model) "
                                 "would override them, as vLLM puts a config file's settings before the "
                                 "command line", file=self.file, field=self.where(config.index),
                                 hint="write the file's settings as flags in the command, then import")
        for dest, occurrences in repeated(args).items():
            kept = occurrences[-1]
            self.notes.append(f"{self.where(kept.index)}: --{dest.replace('_', '-')} is given "
                              f"{len(occurrences)} times; vLLM uses the last ({kept.value!r})")
        last = {id(a) for a in last_wins(args).values()}
        for dest, (whole, subs) in dotted_replaces(args).items():
            self.notes.append(f"{self.where(whole.index)}: --{dest.replace('_', '-')} {whole.value} is "
                              f"dropped: vLLM builds one value from the {len(subs)} "
                              f"--{dest.replace('_', '-')}.KEY flags and it replaces the whole one")
        self.settings = settings(args)
        positional: Arg | None = None
        for a in args:
            if a.name is None:
                if vllm_model and positional is None:
                    positional = a  # the model: import_compose reads it with model_argument
                else:
                    self.extra.append(argv[a.index])
                continue
            if id(a) not in last and self._modelled(a):
                continue  # an earlier occurrence of a typed flag: the last one wins
            if not self._take(a, argv):
                self.extra += _tokens_of(a, argv)

    def _modelled(self, a: Arg) -> bool:
        return a.dest in {"served_model_name", "port", "model", "enable_auto_tool_choice",
                          "tool_call_parser", "reasoning_parser"} or (
            self.runs.types_flag(a) and (a.dest in ENGINE_FLAGS or a.dest == "speculative_config"))

    def _take(self, a: Arg, argv: list[str]) -> bool:
        dest = a.dest
        if a.missing_value:
            return False
        if a.inline and a.base and spec_for(a.base).kind == "bool":
            # argparse refuses an explicit value for a flag that takes none (vLLM exits 2)
            raise ServedeckError(f"{a.written}={a.value}: --{a.name} takes no value; vLLM exits with "
                                 f"'argument --{a.name}: ignored explicit argument {a.value!r}'",
                                 file=self.file, field=self.where(a.index),
                                 hint=f"write --{a.name} alone (or its --no- form to turn it off), then import")
        if dest == "served_model_name":
            self.served = [v for v in a.values]
        elif dest == "port":
            self.port = self.value(a, argv)
        elif dest == "model" and self.runs.style is not None:
            pass  # the model: import_compose reads it with model_argument (_served_model)
        elif dest == "enable_auto_tool_choice":
            self.engine["enable_auto_tool_choice"] = not a.negated
        elif dest in ("tool_call_parser", "reasoning_parser"):
            self.engine[dest] = a.value
        elif not self.runs.types_flag(a):
            return False  # the launcher edits it in its config: the flag stays as written
        elif dest == "enable_prefix_caching":
            self.engine[dest] = not a.negated
        elif dest in ENGINE_FLAGS:
            value = self.value(a, argv)
            if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
                why = ("auto: vLLM decides" if dest == "max_model_len" and value == -1 else
                       "not a positive size, which the profile field needs; vLLM's own config "
                       "checks judge it at start")
                self.notes.append(f"{self.where(a.index)}: {' '.join(_tokens_of(a, argv))} "
                                  f"({dest} {value}: {why}) kept as a passthrough flag")
                return False
            self.engine[dest] = value
        elif dest == "speculative_config":
            value = self.value(a, argv)
            if not isinstance(value, dict):
                raise ServedeckError(f"speculative_config value {a.value!r} is not a mapping",
                                     file=self.file, field=self.where(a.index))
            self.speculative = self.settings["speculative_config"]  # vLLM's one value (argv.settings)
        else:
            return False
        return True

    def launcher_items(self, launch: Launch, argv: list[str]) -> None:
        """The launcher's own items: its model config, its options (each with a profile field),
        its config edits; then the vLLM arguments."""
        runs = self.runs
        if runs.config_option:
            if launch.config is None:
                raise ServedeckError(f"the {runs.name} launcher needs {runs.config_option} as first item",
                                     file=self.file, field=self.where(0))
            self.launcher["config"] = launch.config.s
        for tok, resolved in launch.abbreviations:
            index = next(i for i, t in enumerate(launch.tokens) if t is tok)
            self.notes.append(f"{self.where(index)}: {tok.s} is an abbreviation of --{resolved}" if resolved
                              else f"{self.where(index)}: {tok.s} is ambiguous")
        edit = (runs.edit_option or "").lstrip("-")
        for opt in launch.options:
            if opt.name == edit:
                continue
            index = opt.arg.index if opt.arg is not None else 0
            if opt.missing_value:
                raise ServedeckError(f"--{opt.name} has no value", file=self.file, field=self.where(index))
            field = runs.option_fields.get(opt.name)
            if field in ("gpu", "port"):
                try:
                    value = runs.option_value(opt)
                except ServedeckError as exc:
                    raise ServedeckError(exc.message, file=self.file, field=self.where(index), hint=exc.hint) from None
                if field == "gpu":
                    self.launcher["gpu"] = value
                else:
                    self.port = value
            elif field == "model":
                self.model_arg = opt.value
            else:
                supported = [f"--{o}" for o in runs.option_fields] + ([runs.edit_option] if runs.edit_option else [])
                raise ServedeckError(f"no profile field for the launcher option --{opt.name}",
                                     file=self.file, field=self.where(index),
                                     hint=f"supported launcher options: {', '.join(supported)}")
        for item in launch.edits:
            self._edit(item)
        self.vllm_flags(launch.args, argv)

    def _edit(self, item: ConfigEdit) -> None:
        key, raw, index = item.key, item.raw, item.index
        edit = self.runs.edit_option or "the edit"
        if raw is None:
            raise ServedeckError(f"{edit} item {item.text!r} has no '='", file=self.file,
                                 field=self.where(index))
        value = item.value
        target = self.runs.edit_target(item)
        section, keys = target if target is not None else ("", [])
        if section == "env" and len(keys) == 1:
            self.launcher_env[keys[0]] = None if value is None else raw
        elif section == "engine" and len(keys) == 1 and keys[0] in ENGINE_FLAGS:
            if keys[0] == "enable_prefix_caching" and value is None:
                self.engine["enable_prefix_caching"] = False
            else:
                self.engine[keys[0]] = value
        elif section == "engine" and keys == ["speculative_config"]:
            if not (isinstance(value, dict) or value is None):
                raise ServedeckError(f"speculative_config value {raw!r} is not a mapping",
                                     file=self.file, field=self.where(index))
            self.speculative = value
        elif section == "engine" and len(keys) == 2 and keys[0] == "speculative_config":
            if not isinstance(self.speculative, dict):
                self.speculative = {}
            self.speculative[keys[1]] = value
        else:
            raise ServedeckError(f"no profile field for {edit} {key}", file=self.file,
                                 field=self.where(index),
                                 hint=f"supported: the engine settings {', '.join(ENGINE_FLAGS)}, "
                                      "speculative_config (whole or by key) and the environment")


def _tokens_of(a: Arg, argv: list[str]) -> list[str]:
    idx = sorted({a.index, *a.value_indices})
    return [argv[i] for i in idx]


def _refuse_invalid(path: Path, file: str) -> None:
    """Refuse a file that Compose itself refuses (:func:`~servedeck.compose.check.schema_findings`:
    the Compose Specification schema), e.g. ``command: [serve, --port, 8000]``:
    "services.s.command.2 must be a string".

    Raises:
        ServedeckError: the first violation, naming its field.
    """
    from servedeck.compose.check import schema_findings
    from servedeck.fsutil import read_bounded
    from servedeck.yamlio import LIMITS
    bad = [f for f in schema_findings(read_bounded(path, LIMITS.max_bytes, what="compose"), file=file)
           if f.rule.startswith("schema/") and f.severity.value == "error"]
    if bad:
        raise ServedeckError(f"Compose refuses this file: {bad[0].message}", file=file, field=bad[0].path,
                             hint=(bad[0].hint or "") + "; fix it (docker compose config says the same) "
                                  "and import again")


def _server_launch(svc: ServiceDefinition, argv: list[str], catalog: Catalog, file: str, base: str,
                   notes: list[str]) -> Launch:
    """The service's server command as its launcher reads it (the service as it will run,
    :class:`servedeck.compose.service.Service`: an ``entrypoint``'s start, else the image's
    launcher, else the command's shape; else the default launcher). Docker runs entrypoint +
    command as one argv: with an ``entrypoint`` it must start a server a launcher knows, whose
    arguments are kept and whose start words are left to the image's entrypoint (a note says
    so); without one, a command that repeats the image's own entrypoint (in the catalog) is
    refused, as vLLM would refuse the extra words, and one that starts a server on an image
    servedeck has no facts for is left to the image's entrypoint (a note says so).

    Raises:
        ServedeckError: an entrypoint that is not a known server start (a shell, a script),
            or a command repeating the image's entrypoint.
    """
    data: dict[str, Any] = {"image": svc.image, "command": argv}
    if svc.entrypoint is not None:
        data["entrypoint"] = [literal_values(t) for t in svc.entrypoint]
    launch = Service.read(svc.name, data, image_facts(catalog, ImageRef.of(svc.image))).launch
    fix = "write the server's own command as entrypoint + command items (no shell) and import again"
    if svc.entrypoint is not None:
        if launch.shell_script is not None and (not launch.shell_plain or launch.shell_split):
            raise ServedeckError(
                "the entrypoint's shell script " + ("is one word: the items after it become its $0, $1, ..."
                                                    if launch.shell_split else "uses shell syntax (expansions, "
                                                    "operators or several commands)")
                + ", so it cannot become profile fields", file=file, field=f"{base}.entrypoint", hint=fix)
        if launch.launcher is None:
            raise ServedeckError(
                f"entrypoint {svc.entrypoint!r} does not start a server servedeck knows "
                f"({registry.known_starts()}), so its command cannot become profile fields",
                file=file, field=f"{base}.entrypoint", hint=fix)
        if launch.shell_script is not None:
            notes.append(f"{base}.entrypoint: the shell's -c script is read as the command it runs")
        notes.append(f"{base}.entrypoint: {' '.join(t.s for t in launch.start_items)!r} is left out: the "
                     "profile runs the image's own entrypoint with the same arguments")
        return launch
    if launch.repeated_entrypoint:
        words = " ".join(t.s for t in launch.repeated_entrypoint)
        facts = catalog.lookup(ImageRef.parse(svc.image or "").digest)
        if facts is not None and facts.entrypoint:
            raise ServedeckError(
                f"command starts with {words!r}, which the image's entrypoint ({' '.join(facts.entrypoint)}) "
                "already runs: the server would get those words as arguments and refuse them",
                file=file, field=f"{base}.command[0]", hint=f"drop {words!r} from the command and import again")
        notes.append(f"{base}.command: {words!r} is left out: the profile passes the arguments to the "
                     "image's entrypoint, which must start the server")
    if launch.launcher is None:
        launcher = of_arguments(argv) or registry.default()
        return launcher.read(launch.tokens)
    return launch


def import_compose(path: str | Path, name: str, catalog: Catalog,
                   service: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Turn a compose file into a profile mapping.

    Args:
        path: the compose file.
        name: the new profile's name.
        catalog: to pick the launcher by image digest (else guessed from the command).
        service: the service to import when the file has several.

    Returns:
        ``(profile_mapping, notes)``: the mapping validates as a :class:`Profile`; notes
        say what was cleaned, carried verbatim, or could not be kept (one line each).

    Raises:
        ServedeckError: missing file, no/ambiguous service, a Compose variable (``${NAME}``)
            in a value, unpinned image, a value vLLM refuses, a launcher item without a profile
            field — naming the file and the field.
    """
    path = Path(path)
    file = str(path)
    doc = load_document(path)
    svc = doc.service(service)
    base = f"services.{svc.name}"
    _refuse_variables(svc, file, base)
    _refuse_invalid(path, file)
    notes: list[str] = []
    image = svc.image or ""
    m = IMAGE_RE.match(image)
    if not m:
        raise ServedeckError(f"image {image!r} is not pinned by digest", file=file,
                             field=f"{base}.image",
                             hint="pin it (repo@sha256:<digest>) before importing; "
                                  "`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`")
    facts = catalog.lookup(m["digest"])
    if svc.command_form == "string" and svc.command is not None:
        notes.append(f"{base}.command: a string, split shell-style as Compose does")
    argv: list[str] = []
    for i, tok in enumerate(svc.command or []):
        if tok != tok.strip():
            notes.append(f"{base}.command[{i}]: stripped whitespace from {tok!r}")
        argv.append(literal_values(tok.strip()))
    launch = _server_launch(svc, argv, catalog, file, base, notes)
    launcher = launch.launcher
    assert launcher is not None
    argv = [t.text for t in launch.tokens]

    r = _Reader(file, base, launcher)
    r.launcher_items(launch, argv)
    if launcher.style is not None:  # vLLM reads the model from the arguments, as the image's release does
        r.model_arg = _served_model(argv, launcher.style, facts, r.where, file, base, notes)
    if r.speculative != "unset":
        if r.speculative is None:
            r.engine["speculative"] = None
        else:
            assert isinstance(r.speculative, dict)
            spec = dict(r.speculative)
            r.engine["speculative"] = {k: spec.pop(k) for k in ("method", "num_speculative_tokens")
                                       if k in spec}
            if spec:
                r.engine["speculative"]["options"] = spec
    if r.extra:
        r.engine["extra_args"] = r.extra
    notes += r.notes

    download_dir = r.settings.get("download_dir") if launcher.style is not None else None
    working_dir = svc.extra.get("working_dir")
    model, other_volumes = _model_and_volumes(
        svc, r.model_arg, launcher, file, base, notes,
        download_dir=download_dir if isinstance(download_dir, str) else None,
        workdir=working_dir if isinstance(working_dir, str) else (facts.workdir if facts else None))
    model["served_model_name"] = r.served or [r.model_arg or "model"]
    if not r.served:
        notes.append(f"no --served-model-name: using {model['served_model_name'][0]!r} "
                     "(vLLM's default is the model argument)")

    container = _container(svc, r.port, other_volumes, base, notes)

    profile: dict[str, Any] = {"description": f"imported from {path.name}", "image": image,
                               "launcher": r.launcher, "model": model}
    if r.engine:
        profile["engine"] = r.engine
    if r.launcher_env:
        profile["launcher_env"] = r.launcher_env
    profile["container"] = container
    for other in doc.services:
        if other != svc.name:
            notes.append(f"services.{other}: not imported (a profile holds one service)")
    named = {v["source"] for v in other_volumes if Mount(v["target"], v["source"]).is_named}
    if isinstance(model.get("hf_cache"), dict) and Mount("/", model["hf_cache"]["source"]).is_named:
        named.add(model["hf_cache"]["source"])
    for key, value in doc.extra.items():
        if key == "volumes" and isinstance(value, dict):
            for vol, spec in value.items():
                if vol not in named or spec:
                    notes.append(f"volumes.{vol}: top-level volume definition not imported "
                                 "(servedeck declares the named volumes its services use)")
        elif key not in ("name", "version"):
            notes.append(f"{key}: top-level key not imported")
    try:
        Profile.model_validate({"name": name, **profile})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ServedeckError(f"the imported profile is not valid: {err['msg']}", file=file,
                             field=".".join(str(p) for p in err["loc"])) from None
    return profile, notes


def _volume_entry(v: Mount, where: str, notes: list[str]) -> dict[str, Any] | None:
    if v.source is None:
        notes.append(f"{where}: anonymous volume at {v.target} not imported (give it a source)")
        return None
    if v.extra or (v.long and v.type not in (None, "bind", "volume")):
        notes.append(f"{where}: long-syntax options {sorted(v.extra)} not imported; "
                     f"kept as {v.short()!r}")
    options = v.mode if v.mode is not None else ("ro" if v.read_only else None)
    return {"source": literal_values(v.source), "target": v.target, **({"options": options} if options else {})}


def _served_model(argv: list[str], style: ServerStyle, facts, where, file: str, base: str,
                  notes: list[str]) -> str | None:
    """The model the command makes vLLM serve (:func:`~servedeck.vllm.argv.model_argument`,
    read for the image's release); a note when the file as written would not start that way
    and the profile, which renders the model first, fixes it.

    Raises:
        ServedeckError: the model is given twice, a second positional item follows it, or the
            model is only a positional the api_server module never uses.
    """
    version = facts.release if facts is not None else None
    release = f"vLLM {facts.vllm_version}" if version else "vLLM"
    found = model_argument(argv, style, version)
    refused = found.fault == "model-option-refused"
    if refused:
        found = model_argument(argv, style, None)  # what the file means: --model's value
    at = where(found.fault_index) if found.fault_index is not None else f"{base}.command"
    bad = argv[found.fault_index] if found.fault_index is not None else ""
    if found.fault == "model-twice":
        raise ServedeckError(f"the command gives the model twice ({bad!r} and --model {found.model!r}); "
                             f"`vllm serve` ({release}) moves --model to the front and exits with "
                             f"'unrecognized arguments: {bad}'", file=file, field=at,
                             hint="keep one model, as the first item, and import again")
    if found.fault == "extra-positional":
        raise ServedeckError(f"{bad!r} is a second positional item after the model {found.model!r}: vLLM "
                             f"takes one and exits with 'unrecognized arguments: {bad}'", file=file, field=at,
                             hint=(f"write {bad!r} as two items, flag and value," if bad.startswith("-")
                                   else f"drop {bad!r} (or give it to its flag)") + " and import again")
    if found.fault == "no-model" and found.fault_index is not None:
        raise ServedeckError(f"python -m vllm.entrypoints.openai.api_server parses the positional {bad!r} "
                             "and never uses it: it serves its default model", file=file, field=at,
                             hint=f"give the model as --model {bad} and import again")
    if found.fault == "positional-ignored":
        notes.append(f"{at}: {bad!r} is left out: the api_server module parses it and never uses it; "
                     f"the profile serves --model {found.model!r}, as the file does")
    elif refused:
        notes.append(f"{at}: `vllm serve` in {release} refuses --model and would exit; the profile "
                     f"gives {found.model!r} as the model argument, which it accepts")
    elif found.fault == "model-not-first" and found.model is not None:
        notes.append(f"{at}: `vllm serve` in {release} refuses --served-model-name unless the model "
                     f"comes first and would exit; the profile renders {found.model!r} first")
    return found.model


def _model_mount(model_arg: str, entries: list[tuple[int, Mount, dict[str, Any]]]) -> tuple[int, str] | None:
    """(index, path of the model inside it: ``""`` for the mount itself) of the mount that holds
    local model path ``model_arg``: its target, else the deepest bind mount of a host path above
    it (Docker cleans the paths: a trailing ``/`` or ``//`` does not matter); None when none does.
    A named volume's subdirectory has no host path, so only the exact target counts for it."""
    if not model_arg.startswith("/"):
        return None
    want = posixpath.normpath(model_arg)
    best: tuple[int, str] | None = None
    depth = -1
    for j, v, entry in entries:
        target = posixpath.normpath(v.target or "")
        if target == want:
            return j, ""
        bind = isinstance(entry["source"], str) and _is_path(entry["source"])
        if bind and want.startswith(target.rstrip("/") + "/") and target.count("/") > depth:
            best, depth = (j, posixpath.relpath(want, target)), target.count("/")
    return best


def _model_and_volumes(svc: ServiceDefinition, model_arg: str | None, launcher: Launcher, file: str, base: str,
                       notes: list[str], *, download_dir: str | None = None, workdir: str | None = None
                       ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    model: dict[str, Any] = {}
    others: list[dict[str, Any]] = []
    cache = hf_hub_cache(svc.environment.values)
    read = [(j, v, _volume_entry(v, f"{base}.volumes[{j}]", notes)) for j, v in enumerate(svc.volumes)]
    entries = [(j, v, e) for j, v, e in read if e is not None]
    if model_arg is not None and not model_arg.startswith(("/", "~")):
        # a relative path is read from the server's working directory: vLLM (transformers) takes
        # the model as a local directory when one exists there, else as a Hugging Face repo id
        inside = posixpath.normpath(posixpath.join(workdir or "/", model_arg))
        if _model_mount(inside, entries) is not None:
            notes.append(f"{base}.command: the model {model_arg!r} is {inside} in the container (working "
                         f"directory {workdir or '/'}), which a volume mounts: a local path, not a repo id")
            model_arg = inside
        elif model_arg.startswith("."):
            model_arg = inside
    hub = model_arg is not None and not _is_path(model_arg) and launcher.serves_repo_id
    holder = None if hub or model_arg is None else _model_mount(model_arg, entries)
    for j, v, entry in entries:
        if holder is not None and j == holder[0]:
            assert model_arg is not None  # a holder is looked for only for a model argument
            rel = holder[1]
            model_dir = posixpath.normpath(model_arg) if rel else entry["target"]
            model.update(weights_dir=posixpath.join(entry["source"], rel) if rel else entry["source"],
                         mount=model_dir)
            if entry.get("options"):
                model["mount_options"] = entry["options"]
            if rel:  # the whole mount stays too: other files, and links out of the model's directory
                others.append(entry)  # (a Hugging Face snapshot links into ../../blobs), resolve as before
                notes.append(f"{base}.volumes[{j}]: the model {model_arg!r} is {rel!r} inside the mount "
                             f"{entry['source']}:{entry['target']}; imported as the weights "
                             f"{model['weights_dir']} at {model_dir}, and the whole mount is kept")
        elif hub and _holds_hf_cache(v.target, cache) and "hf_cache" not in model:
            model["hf_cache"] = entry
        else:
            others.append(entry)
    if hub:
        model = {"repo_id": model_arg, **model}
        if download_dir is not None:  # vLLM downloads into --download-dir instead of the cache
            if not any(_holds_hf_cache(e["target"], download_dir) for e in others):
                notes.append(f"{base}.volumes: no mount keeps --download-dir {download_dir}; vLLM "
                             f"downloads {model_arg} inside the container at every start")
        elif "hf_cache" not in model:
            notes.append(f"{base}.volumes: no mount keeps the Hugging Face cache ({cache}); "
                         f"vLLM downloads {model_arg} inside the container at every start")
        return model, others
    if model_arg is None:
        raise ServedeckError("no model in the command", file=file, field=f"{base}.command",
                             hint=f"give the model as {launcher.model_option}")
    if "weights_dir" not in model:
        flag = launcher.model_option
        raise ServedeckError(f"no volume is mounted at the model path {model_arg!r}", file=file,
                             field=f"{base}.volumes",
                             hint=f"mount the weights at {flag} ({model_arg}), or give the model "
                                  "as a Hugging Face repo id with the cache mounted")
    return model, others


def _container(svc: ServiceDefinition, port: int | None, volumes: list[dict[str, Any]], base: str,
               notes: list[str]) -> dict[str, Any]:
    container: dict[str, Any] = {"service": svc.name}
    x = svc.extra
    if x.get("container_name"):
        container["container_name"] = str(x["container_name"])
    if x.get("restart") is not None:
        container["restart"] = "no" if x["restart"] is False else str(x["restart"])
    ports = svc.ports
    if port is None and ports:
        port = int(ports[0].target)
    if port is not None:
        container["port"] = port
    if ports:
        p = ports[0]
        if p.published is not None and p.published != str(port):
            container["host_port"] = int(p.published)
        if p.host_ip:
            container["host_ip"] = p.host_ip
        if p.published is None:
            notes.append(f"{base}.ports[0]: no published port; the profile publishes {port} on {port}")
        if p.protocol not in (None, "tcp") or p.extra:
            notes.append(f"{base}.ports[0]: protocol/options of {p.dump()!r} not imported")
        for j, extra_port in enumerate(ports[1:], 1):
            notes.append(f"{base}.ports[{j}]: {extra_port.short()!r} not imported "
                         "(a profile publishes the server port only)")
    if svc.devices:
        container["devices"] = [d.short() for d in svc.devices]
    if x.get("group_add"):
        container["group_add"] = [str(v) for v in x["group_add"]]
    env: dict[str, str] = {}
    for k, v in svc.environment.values.items():
        if v is None:
            notes.append(f"{base}.environment.{k}: no value (taken from the shell running Compose); "
                         "not imported")
            continue
        env[k] = literal_values(v)
    if env:
        container["environment"] = env
    if volumes:
        container["volumes"] = volumes
    for key in ("shm_size", "ipc"):
        if x.get(key) is not None:
            container[key] = str(x[key])
    carried = {k: v for k, v in x.items() if k not in _CONTAINER_KEYS}
    if carried:
        container["compose_extra"] = carried
        notes.append(f"{base}: carried verbatim in container.compose_extra: {', '.join(carried)}")
    return container


def dump_profile_yaml(profile: dict[str, Any], header: str | None = None) -> str:
    """Profile mapping → YAML 1.2 text (block style, key order kept, strings quoted when a
    YAML 1.1 reader would misread them)."""
    head = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
    return head + dump_yaml(profile)

