"""Run INSIDE an image, with the image's own python: dump vLLM's facts, or judge one argv.

This file is self-contained (standard library + the vLLM installed in the image); servedeck
copies it into a throw-away container (``servedeck.host.inimage``) and runs::

    python3 -c "$(cat introspect.py)" facts                         -> JSON facts
    python3 -c "$(cat introspect.py)" dryrun VLLM_ARGV_JSON         -> JSON verdict
    python3 -c "$(cat introspect.py)" launch-dryrun-each ENTRY_JSON CMDS_JSON MODE
        -> {"verdicts": [...]}: for each command of the JSON list, the image's launcher gives the
           final command (MODE ``print``: the launcher's ``--print``; ``serve`` / ``api_server``:
           the command as is), then the verdict (one process, one vLLM import)
    PYTHONPATH=RELEASE python3 -c "$(cat introspect.py)" --platform-cpu facts
        -> the facts of the vLLM release whose files are at RELEASE (unpacked from its wheel),
           read with this image's python and libraries on vLLM's CPU platform

``facts`` reads, from vLLM itself (names as of vLLM 0.32; older releases are read defensively):

* ``vllm.__version__``;
* the ``vllm serve`` argument surface: the ``make_arg_parser`` that
  ``vllm/entrypoints/cli/serve.py`` imports, on a ``FlexibleArgumentParser`` -- per action its option strings, dest,
  type name, choices, default, nargs, whether it takes a value and whether it is deprecated;
* for each JSON-valued flag whose value is a vLLM config dataclass (``vllm/config/*.py``), the
  config's field names and annotation text (``dataclasses.fields``);
* the tool-call and reasoning parser registries (``ToolParserManager`` /
  ``ReasoningParserManager`` ``list_registered``), the speculative methods (the
  ``SpeculativeMethod`` literal of ``vllm/config/speculative.py``) and the KV-cache dtypes
  (``CacheDType`` of ``vllm/config/cache.py``);
* the ``VLLM_*`` variables that release reads (keys of ``vllm.envs.environment_variables``).

``dryrun`` parses the argv with the same parser (for a ``vllm serve`` start, under the ``vllm``
console script's own top-level parser, whose ``serve`` pre-pass reorders or refuses the model
argument), runs ``validate_parsed_serve_args`` and builds each JSON-valued config from its dict
(unknown keys and wrong types are rejected by the config's own constructor), all without a GPU
and without loading a model; the verdict names the model vLLM would serve.
"""

import json
import sys

_MAX_DEFAULT_LEN = 200


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    text = repr(value)
    return text if len(text) <= _MAX_DEFAULT_LEN else text[:_MAX_DEFAULT_LEN] + "..."


def _literal_args(tp):
    import typing
    out = []
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out.extend(_literal_args(arg))
    return out


def _parser():
    """The parser and validation ``vllm serve`` itself uses (the names
    ``vllm/entrypoints/cli/serve.py`` imports), from their home: ``entrypoints/common/cli_args.py``
    in 0.33, ``entrypoints/launchers/cli_args.py`` in 0.32, ``entrypoints/openai/cli_args.py`` up
    to 0.2x; else from ``cli/serve.py`` itself (it imports the whole server: slower)."""
    import importlib
    first = None
    for mod in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                "vllm.entrypoints.openai.cli_args", "vllm.entrypoints.cli.serve"):
        try:
            m = importlib.import_module(mod)
            make_arg_parser, validate = m.make_arg_parser, m.validate_parsed_serve_args
            break
        except (ImportError, AttributeError) as exc:
            first = first or exc
    else:
        raise first
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    return parser, validate, make_arg_parser, FlexibleArgumentParser


def _cli_parser(make_arg_parser, flexible):
    """The ``vllm`` console script's parser with its ``serve`` subcommand, built as
    ``vllm/entrypoints/cli/main.py`` builds it: a top-level ``FlexibleArgumentParser`` whose
    ``parse_args`` does the ``serve`` pre-pass (``--model`` moved to the front, or refused up to
    0.11.0; the model-first rule of 0.17+), and ``make_arg_parser`` on the ``serve`` subparser."""
    top = flexible(prog="vllm")
    sub = top.add_subparsers(dest="subparser")
    serve = sub.add_parser("serve", usage="vllm serve [model_tag] [options]")
    make_arg_parser(serve)
    return top, serve


def _literal(name, modules):
    """The string values of the Literal ``name`` in the first of ``modules`` that has it
    (``SpeculativeMethod`` lived in ``vllm/config/__init__.py`` up to 0.10)."""
    import importlib
    for mod in modules:
        try:
            return list(dict.fromkeys(_literal_args(getattr(importlib.import_module(mod), name))))
        except (ImportError, AttributeError):
            continue
    return []


def use_cpu_platform():
    """Make vLLM's current platform its CPU platform (``vllm/platforms/cpu.py``) before anything
    asks for it: for reading a release's own files with another image's python, where vLLM's
    platform detection (by its distribution's version string) finds none."""
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform
    platforms._current_platform = CpuPlatform()


def _config_classes():
    """dest -> vLLM config dataclass for JSON-valued flags."""
    import dataclasses
    import typing
    out = {}
    try:
        from vllm.config import VllmConfig
        hints = typing.get_type_hints(VllmConfig)
    except Exception:  # noqa: BLE001 - older releases: no such class or unresolvable hints
        return out
    for name, tp in hints.items():
        cands = [tp] + list(typing.get_args(tp))
        for c in cands:
            if isinstance(c, type) and dataclasses.is_dataclass(c):
                out[name] = c
                break
    return out


def _fields(cls):
    import dataclasses
    out = {}
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or not f.init:
            continue
        tp = f.type
        text = tp if isinstance(tp, str) else (tp.__name__ if isinstance(tp, type) else str(tp))
        out[f.name] = text.replace("typing.", "")
    return out


def facts():
    import os
    import shutil
    import vllm
    parser = _parser()[0]
    deprecated = getattr(parser, "_deprecated", set())
    args = []
    for action in parser._actions:
        if action.dest == "help":
            continue
        tname = getattr(action.type, "__name__", None) if action.type is not None else None
        args.append({
            "options": list(action.option_strings),
            "dest": action.dest,
            "type": tname,
            "choices": _jsonable(list(action.choices)) if action.choices is not None else None,
            "default": _jsonable(action.default),
            "nargs": action.nargs if isinstance(action.nargs, (int, str)) or action.nargs is None
            else str(action.nargs),
            "takes_value": action.nargs != 0,
            "deprecated": action in deprecated or bool(getattr(action, "deprecated", False)),
        })
    configs = {}
    classes = _config_classes()
    try:
        from vllm.config import SpeculativeConfig
        classes.setdefault("speculative_config", SpeculativeConfig)
    except ImportError:
        pass
    dests = {a["dest"] for a in args}
    for dest, cls in classes.items():
        if dest in dests:
            configs[dest] = {"class": cls.__module__ + "." + cls.__qualname__, "fields": _fields(cls)}
    tool = reasoning = []
    try:
        from vllm.tool_parsers import ToolParserManager
        tool = ToolParserManager.list_registered()
    except ImportError:
        from vllm.entrypoints.openai.tool_parsers import ToolParserManager
        tool = sorted(ToolParserManager.tool_parsers)
    from vllm.reasoning import ReasoningParserManager
    if hasattr(ReasoningParserManager, "list_registered"):
        reasoning = ReasoningParserManager.list_registered()
    else:
        reasoning = sorted(ReasoningParserManager.reasoning_parsers)
    spec = sorted(set(_literal("SpeculativeMethod", ["vllm.config.speculative", "vllm.config"])))
    kv = _literal("CacheDType", ["vllm.config.cache", "vllm.config"])
    import vllm.envs as envs
    env_vars = sorted(getattr(envs, "environment_variables", {}))
    return {
        "vllm_version": vllm.__version__,
        "serve_args": args,
        "json_configs": configs,
        "tool_call_parsers": sorted(tool),
        "reasoning_parsers": sorted(reasoning),
        "speculative_methods": spec,
        "kv_cache_dtypes": kv,
        "env_vars": env_vars,
        "python": sys.executable,
        "binaries": {b: shutil.which(b) is not None for b in ("curl", "wget", "python3", "bash")},
        "cwd": os.getcwd(),
        "launcher_configs": _launcher_configs(),
    }


def _launcher_configs():
    """exl3xpu launcher model configs: ``models/<name>/model.yaml`` under the working
    directory, as text (parsed by servedeck on the host)."""
    import glob
    import os
    out = {}
    for path in sorted(glob.glob(os.path.join("models", "*", "model.yaml"))):
        try:
            with open(path, encoding="utf-8") as fh:
                out[os.path.dirname(path)] = fh.read()
        except OSError:
            pass
    return out


class _Reject(Exception):
    pass


def dryrun(argv, style="api_server"):
    """vLLM's verdict on ``argv``, the arguments after the server start; ``style`` is how the
    server is started: ``serve`` (the ``vllm`` console script: its ``serve`` pre-pass applies and a
    positional model wins, ``vllm/entrypoints/cli/serve.py``) or ``api_server`` (the module, whose
    ``main`` parses the same arguments and reads only ``--model``). The verdict's ``model`` is the
    model vLLM would serve."""
    parser, validate, make_arg_parser, flexible = _parser()

    def _error(message):
        raise _Reject(message)

    parsers = [parser]
    if style == "serve":
        top, serve = _cli_parser(make_arg_parser, flexible)
        parsers = [top, serve]
    for p in parsers:
        p.error = _error  # argparse would print and exit(2); keep vLLM's message instead
    try:
        args = parsers[0].parse_args(["serve", *argv] if style == "serve" else argv)
        if style == "serve" and getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
    except _Reject as exc:
        return {"ok": False, "stage": "parse", "message": str(exc)}
    except SystemExit as exc:
        return {"ok": False, "stage": "parse", "message": f"argparse exited {exc.code}"}
    except Exception as exc:  # noqa: BLE001 - vLLM's type functions raise their own errors
        return {"ok": False, "stage": "parse", "message": f"{type(exc).__name__}: {exc}"}
    try:
        validate(args)
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "stage": "validate", "message": f"{type(exc).__name__}: {exc}"}
    classes = _config_classes()
    try:
        from vllm.config import SpeculativeConfig
        classes["speculative_config"] = SpeculativeConfig
    except ImportError:
        pass
    for dest, cls in classes.items():
        value = getattr(args, dest, None)
        if not isinstance(value, dict):
            continue
        known = set(_fields(cls))
        unknown = sorted(set(value) - known)
        if unknown:
            return {"ok": False, "stage": "config", "dest": dest,
                    "message": f"{cls.__name__} has no field(s) {', '.join(unknown)} "
                               f"(--{dest.replace('_', '-')})"}
        try:
            from pydantic import TypeAdapter
            TypeAdapter(cls).validate_python(value)
        except Exception as exc:  # noqa: BLE001
            kind = type(exc).__name__
            if kind == "ValidationError":
                errs = [e for e in exc.errors() if e.get("loc") and e["loc"][0] in value]
                if errs:
                    e = errs[0]
                    return {"ok": False, "stage": "config", "dest": dest,
                            "message": f"{cls.__name__}.{e['loc'][0]}: {e['msg']} "
                                       f"(got {e.get('input')!r})"}
            # other errors need the model/device context that a dry run does not have
    return {"ok": True, "stage": "done", "model": getattr(args, "model", None),
            "message": "accepted by vLLM's parser and serve-args validation"}


def vllm_argv_from_print(line):
    """The vLLM arguments in an exl3xpu launcher ``--print`` line
    (``ZE_AFFINITY_MASK=0 /opt/venv/bin/python -m vllm.entrypoints.openai.api_server --model ...``
    or ``... vllm serve MODEL ...``): the words after ``serve`` / the api_server module."""
    import shlex
    words = shlex.split(line)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]  # leading VAR=value assignments
    for i, w in enumerate(words):
        if w == "serve" or w.endswith("api_server") or w.endswith("api_server.py"):
            return words[i + 1:]
    return words


def launch_and_dryrun(entrypoint, command, mode):
    """vLLM's verdict on one server command, by ``mode`` (the image's launcher, as servedeck's
    launcher registry recognised it): ``print`` asks the launcher (``entrypoint``) for its final
    command with ``--print`` and judges the vLLM arguments it prints; ``serve`` / ``api_server``
    judge ``command`` as the arguments after that start. Then :func:`dryrun`."""
    import subprocess
    if mode == "print":
        proc = subprocess.run(list(entrypoint) + ["--print"] + list(command), capture_output=True,
                              text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ZE_AFFINITY_MASK=")]
        if proc.returncode != 0 or not lines:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            return {"ok": False, "stage": "launcher", "argv": [],
                    "message": f"the launcher refused the command (exit {proc.returncode}): {tail}"}
        argv = vllm_argv_from_print(lines[-1])
        style = "serve" if _starts_serve(lines[-1]) else "api_server"
    else:
        argv, style = list(command), mode
    out = dryrun(argv, style)
    out["argv"], out["style"] = argv, style
    return out


def _starts_serve(line):
    """True when a launcher's printed command runs ``vllm serve`` (not the api_server module)."""
    import shlex
    for i, w in enumerate(shlex.split(line)):
        if w.endswith("api_server") or w.endswith("api_server.py"):
            return False
        if w == "serve" and i > 0:
            return True
    return False


def main(argv):
    if argv[:1] == ["--platform-cpu"]:
        use_cpu_platform()
        argv = argv[1:]
    mode = argv[0] if argv else "facts"
    if mode == "facts":
        out = facts()
    elif mode == "dryrun":
        out = dryrun(json.loads(argv[1]))
    elif mode == "launch-dryrun-each":
        entrypoint, how = json.loads(argv[1]), argv[3]
        out = {"verdicts": [launch_and_dryrun(entrypoint, command, how) for command in json.loads(argv[2])]}
    else:
        out = {"error": f"unknown mode {mode!r}"}
    sys.stdout.write("\n@@SERVEDECK@@" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
