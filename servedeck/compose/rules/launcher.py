"""``launcher/*``: a command that repeats the image's start, and the contract of a launcher that
wraps vLLM with a config of its own, as the service's launcher reads the command
(:mod:`servedeck.launchers`; the exl3xpu image's ``scripts/serve.py``, implemented in this
repository by ``deploy/images/cpu-vllm/serve.py``): its model config, its config edits (``--set
KEY.PATH=VALUE``, read by PyYAML ``safe_load``), abbreviated options, passthrough flags that
duplicate the config, environment it sets over the container's.
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.yamlio import launcher_value


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
    edits, abbreviated options, flags that duplicate the config, environment it overrides)."""
    launch = svc.launch
    if launch.repeated_entrypoint:
        first = launch.repeated_entrypoint[0]
        assert svc.launcher is not None  # the repeat is measured against the launcher's start (Service.read)
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
                option = "--" + target[1][0].replace("_", "-")
                ctx.warning("launcher/set-false-omits", s.path,
                            f"{edit} {s.key}=false only omits {option}; vLLM then uses its own default "
                            f"(which may be on), and a {option} passed through still wins",
                            f"pass --no-{option[2:]} as a passthrough flag to turn it off")
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
