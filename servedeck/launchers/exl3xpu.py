"""The exl3xpu launcher: the image's ``scripts/serve.py`` (``ghcr.io/0xsero/exl3xpu``; the same
contract is implemented in this repository by ``deploy/images/cpu-vllm/serve.py``).

Contract (exl3xpu ``scripts/serve.py`` v3, ``0xSero/exl3xpu@9dfd6773``): argparse
``parse_known_args`` with ``allow_abbrev``; a positional model config (a directory holding
``model.yaml``, or a ``.yaml`` file, relative to the image's WORKDIR), its own options
(:data:`OPTIONS`), repeated ``--set KEY.PATH=VALUE`` (split at the first ``=``; the value read
by PyYAML ``safe_load``, :func:`servedeck.yamlio.launcher_value`) edits the config; every other
item, and everything after ``--`` (the ``--`` removed), is passed to vLLM after the flags the
config's ``vllm:`` mapping gives (``null`` drops a flag, ``false`` omits it). The server's
environment: the container's, then the config's ``env:`` over it (``null`` unsets), then
``ZE_AFFINITY_MASK=<--gpu>`` (always; ``--gpu`` defaults to 0). Default port 8100 (its
``parallel.base_port``).

Engine settings that live in model.yaml are edited with ``--set vllm.KEY=...`` (a bare
passthrough flag would duplicate the flag and win by position); the front-end flags
(:data:`FRONT_END`: tool calling, reasoning parser, port, served model name) are passed through.
The argv order is the one of the user's own compose file (the seed): config, ``--gpu``,
``--model-path``, ``--set vllm.*``, ``--set env.*``, the front-end flags, a false bool's
``--no-...`` flag, then ``--`` and the extra arguments.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterable

from servedeck.launchers.base import (ConfigEdit, DocPath, EnvItem, Launch, Launcher, LauncherDefaults,
                                      LaunchSettings, Setting, merge_nested, scalar)
from servedeck.vllm import argv as grammar
from servedeck.vllm.argv import FlagSpec
from servedeck.yaml11 import yaml11_type

#: ``scripts/serve.py`` options → spec (the rest goes to vLLM).
OPTIONS: dict[str, FlagSpec] = {
    "gpu": FlagSpec("gpu", "int"), "port": FlagSpec("port", "int"),
    "model-path": FlagSpec("model-path"), "set": FlagSpec("set"), "log-dir": FlagSpec("log-dir"),
    "print": FlagSpec("print", "bool"), "dp": FlagSpec("dp", "bool"), "help": FlagSpec("help", "bool"),
}

FRONT_END = ("enable_auto_tool_choice", "tool_call_parser", "port", "reasoning_parser", "served_model_name")
"""Settings passed through to vLLM as flags, not edited in model.yaml, in the order printed."""


def set_value(value: Any, *, env: bool = False) -> str:
    """Format ``value`` for ``--set KEY=VALUE`` so that PyYAML ``safe_load`` gives it back.

    ints/floats/bools/None → YAML scalars; dict/list → compact JSON (a YAML flow
    collection); strings plain when YAML 1.1 reads them as the same string, else JSON-quoted.
    For ``env.*`` keys a digit string stays plain (the launcher turns int 0 into env "0").
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (dict, list)):
        return grammar.compact_json(value)
    text = str(value)
    kind = yaml11_type(text)
    if kind == "str" and text.strip() == text and text[:1] not in "[{\"'!&*#|>%@`":
        return text
    if env and kind == "int" and text.isdigit() and (text == "0" or not text.startswith("0")):
        return text
    return json.dumps(text)


def _speculative_edits(wanted: dict[str, Any] | None, defaults: LauncherDefaults | None) -> list[str]:
    """``--set`` items for speculative decoding: off (``null``), a replacement (no shipped
    config, or another method), or per-key edits keeping the shipped method."""
    if wanted is None:
        return ["vllm.speculative_config=null"]
    default = defaults.vllm.get("speculative_config") if defaults else None
    default = default if isinstance(default, dict) else None
    if not default or (wanted.get("method") is not None and wanted["method"] != default.get("method")):
        return [f"vllm.speculative_config={set_value(wanted)}"]
    return [f"vllm.speculative_config.{k}={set_value(v)}" for k, v in wanted.items()]


class Exl3xpu(Launcher):
    """``python3 scripts/serve.py CONFIG --gpu N --model-path PATH --set ... [vLLM flags]``."""

    name = "exl3xpu"
    start = ("python3", "scripts/serve.py")
    default_port = 8100
    style = None
    model_option = "--model-path"
    hints = ((("exl3xpu",), "xpu"),)
    tag_is_vllm_version = False  # exl3xpu tags its own releases
    config_option = "the model config (the positional, e.g. models/qwen3.8-27b-exl3-4.00bpw)"
    options = OPTIONS
    gpu_option = "--gpu"
    edit_option = "--set"
    config_file = "model.yaml"
    option_fields = {"gpu": "gpu", "model-path": "model", "port": "port"}
    in_image = "print"
    serves_repo_id = False  # the weights are read from --model-path

    def start_length(self, argv: list[str]) -> int:
        _, script, n = grammar.python_start(argv)
        if script is not None and script.endswith("serve.py"):
            return n
        return 1 if argv[:1] and argv[0].endswith("serve.py") else 0

    def recognises_arguments(self, argv: list[str]) -> bool:
        """Its own start (``[python3] .../serve.py``), a model config first (``models/...``), or
        one of its own options (``--set``, ``--model-path``, ``--gpu``)."""
        own = ("--set", "--model-path", "--gpu")
        items = [t.strip() for t in argv]
        return bool(items) and (self.start_length(items) > 0 or items[0].startswith("models/") or any(
            t in own or t.startswith(tuple(o + "=" for o in own)) for t in items))

    # ------------------------------------------------------------------ build and read

    def build_argv(self, settings: LaunchSettings, defaults: LauncherDefaults | None = None,
                   table: Any = None) -> list[str]:
        e = settings.engine
        cmd = [settings.config or ""]
        if settings.gpu is not None:
            cmd += ["--gpu", str(settings.gpu)]
        cmd += ["--model-path", settings.model]
        edits: list[str] = []
        for dest, value in e.items():
            if dest in FRONT_END:
                continue
            if dest == "speculative_config":
                edits += _speculative_edits(value, defaults)
            elif value is None or value is False:
                # `false` only omits the flag: drop model.yaml's value and pass --no-... below
                edits.append(f"vllm.{dest}=null")
            else:
                edits.append(f"vllm.{dest}={set_value(value)}")
        edits += [f"env.{k}={set_value(v, env=True)}" for k, v in settings.env.items()]
        for item in edits:
            cmd += ["--set", item]
        front = {**e, "port": settings.port, "served_model_name": list(settings.served_model_name)}
        for dest in FRONT_END:
            cmd += grammar.flag_tokens(dest, front.get(dest))
        for dest, value in e.items():
            if value is False and dest not in FRONT_END:
                cmd += grammar.flag_tokens(dest, False, table=table)
        if settings.extra_args:
            cmd += ["--", *settings.extra_args]
        return cmd

    def edit_target(self, edit: ConfigEdit) -> tuple[str, list[str]] | None:
        """model.yaml's ``vllm.DEST[.KEY...]``, ``env.NAME`` and ``served_model_name``."""
        parts = edit.parts
        if parts[0] == "vllm" and len(parts) >= 2:
            return "engine", parts[1:]
        if parts[0] == "env" and len(parts) == 2:
            return "env", parts[1:]
        if parts == ["served_model_name"]:
            return "served_model_name", []
        return None

    def types_flag(self, arg: grammar.Arg) -> bool:
        """Front-end flags, and a ``--no-x`` (how a profile turns a model.yaml bool off); every
        other passthrough flag stays verbatim (rendered as ``--set`` it would change place)."""
        return arg.dest in FRONT_END or arg.negated

    # ------------------------------------------------------------------ defaults and environment

    def defaults(self, shipped: Iterable[LauncherDefaults], config: str | None) -> LauncherDefaults | None:
        return next((d for d in shipped if d.config == config), None)

    def config_path(self, config: str, workdir: str) -> str | None:
        """``CONFIG/model.yaml`` (or the ``.yaml`` file itself), under ``workdir`` when relative."""
        path = config if config.endswith((".yaml", ".yml")) else f"{config}/model.yaml"
        return path if path.startswith("/") else f"{workdir.rstrip('/')}/{path}"

    def read_config(self, config: str, text: str) -> LauncherDefaults | None:
        """model.yaml as the launcher reads it (PyYAML ``safe_load``)."""
        from servedeck.yamlio import launcher_value
        data = launcher_value(text)
        if not isinstance(data, dict):
            return None
        return LauncherDefaults(config=config, served_model_name=data.get("served_model_name"),
                                vllm=dict(data.get("vllm") or {}),
                                env={k: None if v is None else str(v) for k, v in (data.get("env") or {}).items()})

    def environment(self, launch: Launch, items: list[EnvItem], defaults: LauncherDefaults | None,
                    image_path: DocPath) -> list[EnvItem]:
        """The service's items, then model.yaml's ``env`` (``launcher-config``), then the
        ``--set env.NAME=V`` edits (``set``), then ``ZE_AFFINITY_MASK`` from ``--gpu``."""
        out = list(items)
        for k, v in (defaults.env if defaults else {}).items():
            out.append(EnvItem(k, v, image_path, source="launcher-config"))
        for edit in launch.edits:
            target = self.edit_target(edit)
            if target is not None and target[0] == "env" and target[1][0] and edit.raw is not None:
                value = edit.value
                out.append(EnvItem(target[1][0], None if value is None else edit.raw.strip(), edit.path,
                                   source="set"))
        gpu = launch.option("gpu")
        where = gpu.value_path if gpu is not None else (launch.config.path if launch.config else image_path)
        out.append(EnvItem("ZE_AFFINITY_MASK", gpu.value if gpu is not None and gpu.value is not None else "0",
                           where, source="flag"))
        return out

    # ------------------------------------------------------------------ effective settings

    def config_settings(self, defaults: LauncherDefaults | None, image_path: DocPath) -> dict[str, Setting]:
        """model.yaml's ``vllm:`` mapping and ``served_model_name``."""
        eff: dict[str, Setting] = {}
        if defaults is not None:
            for k, v in defaults.vllm.items():
                eff[k] = Setting(copy.deepcopy(v), "launcher-config", image_path)
            if defaults.served_model_name:
                eff["served_model_name"] = Setting([defaults.served_model_name], "launcher-config", image_path)
        return eff

    def edit_settings(self, launch: Launch, eff: dict[str, Setting]) -> None:
        """The ``--set vllm.*`` and ``--set served_model_name`` edits (a dotted key edits one
        key of a mapping)."""
        for edit in launch.edits:
            target = self.edit_target(edit) if edit.raw is not None and edit.key else None
            if target is None:
                continue
            section, keys = target
            if section == "served_model_name":
                value = edit.value
                eff["served_model_name"] = Setting([value] if isinstance(value, str) else value, "set", edit.path)
            if section != "engine" or not all(keys):
                continue
            if len(keys) == 1:
                eff[keys[0]] = Setting(edit.value, "set", edit.path)
            else:
                old = eff.get(keys[0])
                base = copy.deepcopy(old.value) if old and isinstance(old.value, dict) else {}
                merge_nested(base, keys[1:], edit.value)
                eff[keys[0]] = Setting(base, "set", edit.path)

    # ------------------------------------------------------------------ views

    def edit_view(self, launch: Launch) -> dict[str, Any]:
        """Each ``--set vllm.KEY=V`` as the vLLM dest ``KEY`` (other keys as written, e.g.
        ``env.NAME``), the value as PyYAML reads it."""
        from servedeck.yamlio import flatten
        out: dict[str, Any] = {}
        for edit in launch.edits:
            if edit.raw is not None:
                out.update(flatten(scalar(edit.raw), edit.key.strip().removeprefix("vllm.")))
        return out


LAUNCHER = Exl3xpu()
