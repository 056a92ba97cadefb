"""Profile → container command (argv) and effective engine settings, per launcher.

Two launchers:

* ``exl3xpu`` — the image's ``scripts/serve.py`` (ghcr.io/0xsero/exl3xpu; the same contract
  is implemented in this repository by ``deploy/images/cpu-vllm/serve.py``): positional model config, ``--gpu``, ``--model-path``, repeated
  ``--set KEY.PATH=VALUE`` (value parsed as YAML 1.1 by PyYAML ``safe_load``), and
  passthrough flags appended verbatim after the model.yaml-derived vLLM flags. Engine
  settings that live in model.yaml are edited with ``--set vllm.KEY=...`` (a bare passthrough
  flag would duplicate the flag and win by position); front-end flags (tool calling,
  reasoning parser, served model name) are passed through.
* ``vllm`` — the image's entrypoint is ``vllm serve``; the command is the model path plus
  plain flags.

Tokens are printed by the one argv grammar (:mod:`servedeck.vllm.argv`).

The canonical argv order for exl3xpu is the one of the user's own compose file (the seed):
config, ``--gpu``, ``--model-path``, ``--set vllm.*``, ``--set env.*``, then
``--enable-auto-tool-choice``, ``--tool-call-parser``, ``--port``, ``--reasoning-parser``,
``--served-model-name``, and ``--`` + ``engine.extra_args`` last.
"""

from __future__ import annotations

import json
from copy import deepcopy
from typing import Any

from servedeck.model.catalog import ImageFacts
from servedeck.model.profile import Profile
from servedeck.compose.yaml11 import yaml11_type
from servedeck.vllm.argv import compact_json, flag_tokens, set_item

#: Engine fields edited with ``--set vllm.<name>=`` for exl3xpu, in rendering order.
SET_FIELDS = ("gpu_memory_utilization", "max_model_len", "max_num_batched_tokens",
              "max_num_seqs", "kv_cache_dtype", "enable_prefix_caching", "dtype")


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
        return compact_json(value)
    text = str(value)
    kind = yaml11_type(text)
    if kind == "str" and text.strip() == text and not text[:1] in "[{\"'!&*#|>%@`":
        return text
    if env and kind == "int" and text.isdigit() and (text == "0" or not text.startswith("0")):
        return text
    return json.dumps(text)


def _spec_sets(profile: Profile, default: dict[str, Any] | None) -> list[str]:
    state = profile.engine.speculative_state
    if state == "default":
        return []
    if state == "off":
        return ["vllm.speculative_config=null"]
    spec = profile.engine.speculative
    assert spec is not None
    wanted = spec.as_config()
    replace = (not default or (spec.method is not None and spec.method != default.get("method")))
    if replace:
        return [f"vllm.speculative_config={set_value(wanted)}"]
    return [f"vllm.speculative_config.{k}={set_value(v)}" for k, v in wanted.items()]


def build_command(profile: Profile, facts: ImageFacts | None = None, table: Any = None) -> list[str]:
    """The container ``command`` for ``profile``, one argv token per item.

    Args:
        profile: the resolved profile.
        facts: catalog facts of the profile's image digest (exl3xpu: its model.yaml
            speculative default decides between per-key ``--set`` edits and a replacement).
        table: the image's vLLM argument table (:class:`servedeck.vllm.facts.VllmFacts`), for
            the spelling of a false bool flag (:func:`~servedeck.vllm.argv.negative_option`);
            None: ``--no-x``.

    Returns:
        argv tokens (strings), e.g. ``["models/...", "--gpu", "0", "--model-path", ...]``.
    """
    e = profile.engine
    frontend: list[str] = []
    if e.enable_auto_tool_choice:
        frontend += flag_tokens("enable_auto_tool_choice", True)
    frontend += flag_tokens("tool_call_parser", e.tool_call_parser or None)
    port = flag_tokens("port", profile.container.port)
    reasoning = flag_tokens("reasoning_parser", e.reasoning_parser or None)
    names = flag_tokens("served_model_name", list(profile.model.served_model_name))

    if profile.launcher.kind == "exl3xpu":
        defaults = facts.defaults_for(profile.launcher.config) if facts else None
        cmd = [profile.launcher.config or ""]
        if profile.launcher.gpu is not None:
            cmd += ["--gpu", str(profile.launcher.gpu)]
        cmd += ["--model-path", profile.model.argument]
        sets: list[str] = []
        for name in SET_FIELDS:
            value = getattr(e, name)
            if value is None:
                continue
            if name == "enable_prefix_caching" and value is False:
                # `false` only omits the flag; drop model.yaml's true and pass --no-... below
                sets.append("vllm.enable_prefix_caching=null")
                continue
            sets.append(f"vllm.{name}={set_value(value)}")
        spec_default = (defaults.vllm.get("speculative_config") if defaults else None)
        sets += _spec_sets(profile, spec_default if isinstance(spec_default, dict) else None)
        sets += [f"env.{k}={set_value(v, env=True)}" for k, v in profile.launcher_env.items()]
        for item in sets:
            cmd += set_item(*item.split("=", 1))
        cmd += frontend + port + reasoning + names
        if e.enable_prefix_caching is False:
            cmd += flag_tokens("enable_prefix_caching", False, table=table)
        if e.extra_args:
            cmd += ["--", *e.extra_args]
        return cmd

    cmd = [profile.model.argument, *names, *port]
    for name in SET_FIELDS:
        cmd += flag_tokens(name, getattr(e, name), table=table)
    if e.speculative_state == "set":
        assert e.speculative is not None
        cmd += flag_tokens("speculative_config", e.speculative.as_config())
    cmd += frontend + reasoning + list(e.extra_args)
    return cmd


def effective_settings(profile: Profile, facts: ImageFacts | None) -> dict[str, Any]:
    """The engine settings vLLM will run with: image defaults overlaid by the profile.

    Keys are vLLM argparse dest names (``max_num_batched_tokens``, ``speculative_config``,
    ``served_model_name``, ``port``, ...). Values the image decides and servedeck does not
    know (unknown digest) are absent. ``speculative_config`` is ``None`` when turned off.

    Returns:
        a flat dict, insertion-ordered: image defaults first, then overrides.
    """
    out: dict[str, Any] = {}
    defaults = facts.defaults_for(profile.launcher.config) if (
        facts and profile.launcher.kind == "exl3xpu") else None
    if defaults is not None:
        out.update(deepcopy(defaults.vllm))
        if defaults.served_model_name:
            out["served_model_name"] = [defaults.served_model_name]
    if facts is not None:
        out["port"] = facts.default_port
    e = profile.engine
    for name in SET_FIELDS:
        value = getattr(e, name)
        if value is not None:
            out[name] = value
    if e.speculative_state == "off":
        out["speculative_config"] = None
    elif e.speculative_state == "set":
        assert e.speculative is not None
        wanted = e.speculative.as_config()
        current = out.get("speculative_config")
        if (isinstance(current, dict) and (e.speculative.method is None
                                           or e.speculative.method == current.get("method"))):
            out["speculative_config"] = {**current, **wanted}
        else:
            out["speculative_config"] = wanted
    if e.enable_auto_tool_choice is not None:
        out["enable_auto_tool_choice"] = e.enable_auto_tool_choice
    for name in ("tool_call_parser", "reasoning_parser"):
        if getattr(e, name):
            out[name] = getattr(e, name)
    out["served_model_name"] = list(profile.model.served_model_name)
    out["port"] = profile.container.port
    return out


def launcher_env(profile: Profile, facts: ImageFacts | None) -> dict[str, str]:
    """The environment the server process gets (exl3xpu: container env, then model.yaml env,
    then ``--set env.*`` overrides; ``None`` unsets). Unknown image: container env only."""
    env = dict(profile.container.environment)
    if profile.launcher.kind != "exl3xpu":
        return env
    defaults = facts.defaults_for(profile.launcher.config) if facts else None
    merged: dict[str, str | None] = dict(defaults.env) if defaults else {}
    merged.update(profile.launcher_env)
    for k, v in merged.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    if profile.launcher.gpu is not None:
        env["ZE_AFFINITY_MASK"] = str(profile.launcher.gpu)
    return env
