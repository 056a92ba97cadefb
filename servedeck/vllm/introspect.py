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
    python3 -c "$(cat introspect.py)" facts ARGVS_JSON
        -> the facts, and under "parsed" what the parser makes of each argv of the JSON list

``facts`` reads, from vLLM itself (names as of vLLM 0.32; older releases are read defensively):

* ``vllm.__version__``;
* the ``vllm serve`` argument surface: the ``make_arg_parser`` that
  ``vllm/entrypoints/cli/serve.py`` imports, on a ``FlexibleArgumentParser`` -- per action the
  option strings its help shows and the ones it accepts without showing them (argparse's
  ``_option_string_actions``), what each string of a value-less action stores (found by running
  the action), dest, type name (and the types vLLM's ``optional_type``/``parse_type`` wrappers
  hold), choices, default, nargs, whether it takes a value and whether it is deprecated; whether
  the parser takes abbreviations and whether the release expands ``80m``-style numbers in JSON;
* for each JSON-valued flag whose value is a vLLM config (``vllm/config/*.py``), the config's
  field names and annotation text (``dataclasses.fields``), how vLLM validates the value, and
  its JSON Schema as pydantic gives it, with the verdicts of vLLM's own field validators on
  probe values (:func:`config_schema`);
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


def _type_name(fn):
    return getattr(fn, "__name__", None) if fn is not None else None


def _wrapped(fn):
    """The type functions vLLM's wrappers hold, outermost first: ``optional_type(json.loads)``
    and ``parse_type(int)`` (``vllm/engine/arg_utils.py``) are closures over ``return_type``;
    ``["loads"]`` for the first. Empty for a plain type function."""
    out = []
    seen = 0
    while fn is not None and seen < 4:
        seen += 1
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
        if code is None or not cells or "return_type" not in code.co_freevars:
            break
        try:
            fn = cells[code.co_freevars.index("return_type")].cell_contents
        except ValueError:
            break
        name = _type_name(fn)
        if name is None:
            break
        out.append(name)
    return out


def _stores(parser, action, options):
    """What each option string of an action that takes no value stores in its dest, found by
    running the action as argparse does (``action(parser, namespace, [], option_string)``):
    ``{"--enable-x": true, "--disable-x": false, "--no-enable-x": false}``. Empty for actions
    that take values."""
    import argparse
    if action.nargs != 0 or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
        return {}
    out = {}
    for opt in options:
        ns = argparse.Namespace(**{action.dest: action.default})
        try:
            action(parser, ns, [], opt)
        except Exception:  # noqa: BLE001 - an action that needs more than argparse gives it
            continue
        out[opt] = _jsonable(getattr(ns, action.dest, None))
    return out


def serve_args(parser):
    """Every action of the ``vllm serve`` parser: the option strings its help shows
    (``options``), the ones it accepts without showing them (``hidden``: argparse's
    ``_option_string_actions`` holds every accepted string; vLLM 0.33's ``EnableDisableAction``
    keeps ``--no-enable-x`` there and out of help), what each string of a value-less action
    stores (``stores``), and the type function, with the ones a wrapper holds (``type_wraps``)."""
    deprecated = getattr(parser, "_deprecated", set())
    accepted = {}
    for opt, action in parser._option_string_actions.items():
        accepted.setdefault(id(action), []).append(opt)
    args = []
    for action in parser._actions:
        if action.dest == "help":
            continue
        shown = list(action.option_strings)
        every = accepted.get(id(action), [])
        hidden = [o for o in every if o not in shown]
        args.append({
            "options": shown,
            "hidden": hidden,
            "dest": action.dest,
            "type": _type_name(action.type),
            "type_wraps": _wrapped(action.type),
            "choices": _jsonable(list(action.choices)) if action.choices is not None else None,
            "default": _jsonable(action.default),
            "nargs": action.nargs if isinstance(action.nargs, (int, str)) or action.nargs is None
            else str(action.nargs),
            "takes_value": action.nargs != 0,
            "stores": _stores(parser, action, shown + hidden),
            "deprecated": action in deprecated or bool(getattr(action, "deprecated", False)),
        })
    return args


def _dataclass_of(action):
    """The config class a ``parse_dataclass`` type function validates into (its ``cls``
    default, ``vllm/engine/arg_utils.py`` ``_compute_kwargs``), or None."""
    fn = action.type
    if _type_name(fn) != "parse_dataclass":
        return None
    defaults = getattr(fn, "__defaults__", None) or ()
    return defaults[0] if defaults and isinstance(defaults[0], type) else None


def _classes_in(tp, out):
    """Config classes (dataclasses, pydantic models) reachable from annotation ``tp``."""
    import dataclasses
    import typing
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or hasattr(tp, "model_fields")):
        if tp in out:
            return
        out.append(tp)
        try:
            hints = typing.get_type_hints(tp)
        except Exception:  # noqa: BLE001 - unresolvable forward references
            hints = {}
        for h in hints.values():
            _classes_in(h, out)
        return
    for arg in typing.get_args(tp):
        _classes_in(arg, out)


def _schema_generator():
    from pydantic.json_schema import GenerateJsonSchema

    class Gen(GenerateJsonSchema):
        """pydantic's JSON Schema with what a judge of values needs and nothing else: no
        defaults or descriptions; ``x-enum`` (member names, int/str base) on enums, whose lax
        validation differs from a literal's; ``x-validator`` on values a field validator of
        vLLM's sees first (``before``/``wrap``/``plain``) or after (``after``); ``{}`` (any)
        for what JSON Schema cannot express (callables, arbitrary classes)."""

        def handle_invalid_for_json_schema(self, schema, error_info):
            return {}

        def default_schema(self, schema):
            return self.generate_inner(schema["schema"])

        def enum_schema(self, schema):
            out = super().enum_schema(schema)
            cls = schema["cls"]
            base = "int" if issubclass(cls, int) else "str" if issubclass(cls, str) else "other"
            out["x-enum"] = {"names": [m.name for m in cls], "base": base}
            return out

        def _marked(self, out, mode):
            out = dict(out)
            out["x-validator"] = mode
            return out

        def function_before_schema(self, schema):
            return self._marked(super().function_before_schema(schema), "before")

        def function_wrap_schema(self, schema):
            return self._marked(super().function_wrap_schema(schema), "wrap")

        def function_plain_schema(self, schema):
            return self._marked(super().function_plain_schema(schema), "plain")

        def function_after_schema(self, schema):
            return self._marked(super().function_after_schema(schema), "after")

    return Gen


def _strip(node):
    """Drop ``title``/``description``/``examples`` below the top of a schema (keeps it small)."""
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items()
                if k not in ("description", "examples") and not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


_PROBE_STRINGS = ("auto", "none", "None", "", "servedeck-probe")
_PROBE_OTHERS: tuple = (0, 1, -1, 2 ** 31, 0.5, True, False, None, [], {})


def _probe_values(field_schema, defs):
    """Values to try on a field a validator of vLLM's sees: a few words (``auto``, ``none``,
    ``""``, a nonsense word), one value or two of each JSON type, and the first few enum names
    (as written and lowercase) and values (and their text) its schema holds."""
    names, values = [], []

    def walk(node, depth=0):
        if depth > 6 or not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            walk(defs.get(ref[8:], {}), depth + 1)
        if "x-enum" in node:
            names.extend(node["x-enum"]["names"])
        for key in ("enum",):
            values.extend(v for v in node.get(key) or [] if isinstance(v, (str, int, float)))
        if "const" in node and isinstance(node["const"], (str, int, float)):
            values.append(node["const"])
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(key) or []:
                walk(sub, depth + 1)
    walk(field_schema)
    out = []
    sample = 4  # enough to see a rule (names as written, lowercase, values as text), not the list
    for v in (list(_PROBE_STRINGS) + list(_PROBE_OTHERS) + names[:sample] + [n.lower() for n in names[:sample]]
              + [str(v) for v in values[:sample]] + values[:sample]):
        if not any(type(v) is type(o) and v == o for o in out):
            out.append(v)
    return out


def _probe(cls, field, values, mode):
    """vLLM's own verdict on ``{field: value}`` for each value, validated as vLLM validates the
    flag's value (``mode``: ``json``, ``TypeAdapter(cls).validate_json`` as ``parse_dataclass``
    does; ``python``, ``validate_python`` of the parsed dict as ``Config(**dict)`` does), with
    ``__post_init__`` switched off by the caller (it may need a model, a device or the network):
    ``[[value, accepted], ...]``. An error at the field refuses the value; errors elsewhere only
    (other fields' checks) accept it; an exception other than a validation error
    (``CUDAGraphMode[...]``'s ``KeyError``) refuses it too, as neither argparse nor vLLM catches
    it. Empty when ``{}`` itself is refused at the field (the probe would not be faithful)."""
    import json as _json
    from pydantic import TypeAdapter, ValidationError
    adapter = TypeAdapter(cls)

    def accepted(present, value):
        data = {field: value} if present else {}
        try:
            if mode == "json":
                adapter.validate_json(_json.dumps(data))
            else:
                adapter.validate_python(data)
        except ValidationError as exc:
            return not any(tuple(e.get("loc") or ())[:1] == (field,) for e in exc.errors())
        except Exception:  # noqa: BLE001 - see above
            return False if present else None
        return True

    if accepted(False, None) is not True:
        return []
    return [[v, accepted(True, v)] for v in values]


class _NoPostInit:
    """Switch ``__post_init__`` off on ``classes`` while probing (restored on exit)."""

    def __init__(self, classes):
        self.saved = [(c, c.__dict__["__post_init__"]) for c in classes if "__post_init__" in c.__dict__]

    def __enter__(self):
        for c, _ in self.saved:
            c.__post_init__ = lambda self, *args: None
        return self

    def __exit__(self, *exc):
        for c, fn in self.saved:
            c.__post_init__ = fn
        return False


def config_schema(cls, mode):
    """``cls``'s JSON Schema as pydantic gives it (:func:`_schema_generator`), with, on each
    field a validator of vLLM's sees, ``x-probes``: the verdicts of vLLM's own validation on
    probe values (:func:`_probe_values`, :func:`_probe` in ``mode``), so a judge without vLLM
    knows what the validator takes beyond the schema (``CompilationConfig.mode`` takes mode
    names in any case and refuses ``"3"``); ``x-validator: model`` on a class whose own
    validator sees its input first. None when pydantic cannot give a schema for ``cls``."""
    import logging
    import warnings
    from pydantic import TypeAdapter
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            schema = _strip(TypeAdapter(cls).json_schema(mode="validation",
                                                         schema_generator=_schema_generator()))
    except Exception:  # noqa: BLE001 - a class pydantic cannot describe
        return None
    defs = schema.get("$defs", {})
    classes = []
    _classes_in(cls, classes)
    logging.disable(logging.WARNING)
    try:
        with _NoPostInit(classes), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for c in classes:
                node = schema if c is cls else defs.get(c.__name__)
                decorators = getattr(c, "__pydantic_decorators__", None)
                if isinstance(node, dict) and decorators is not None:
                    _mark_validated(c, node, decorators, defs, mode)
    finally:
        logging.disable(logging.NOTSET)
    return schema


def _mark_validated(cls, node, decorators, defs, mode):
    """Add ``x-validator: model`` and each validated field's ``x-probes`` to ``node``, the
    schema of ``cls``."""
    if any(d.info.mode in ("before", "wrap") for d in decorators.model_validators.values()):
        node["x-validator"] = "model"
    props = node.get("properties") or {}
    fields = set()
    for d in decorators.field_validators.values():
        fields.update(props if "*" in d.info.fields else d.info.fields)
    for name in sorted(fields):
        if name in props:
            props[name]["x-probes"] = _probe(cls, name, _probe_values(props[name], defs), mode)


def json_configs(parser, args):
    """dest → config class, fields, schema and validation mode for each JSON-valued flag whose
    value is a vLLM config: the ``parse_dataclass`` flags (the class their type function
    validates, from JSON: ``json``) and the fields of ``VllmConfig`` that are config
    dataclasses (``--speculative-config``: ``json.loads``, then the class built from the dict:
    ``python``)."""
    classes = {dest: (cls, "python") for dest, cls in _config_classes().items()}
    try:
        from vllm.config import SpeculativeConfig
        classes.setdefault("speculative_config", (SpeculativeConfig, "python"))
    except ImportError:
        pass
    for action in parser._actions:
        cls = _dataclass_of(action)
        if cls is not None:
            classes[action.dest] = (cls, "json")
    dests = {a["dest"] for a in args}
    out = {}
    for dest, (cls, mode) in classes.items():
        if dest in dests:
            out[dest] = {"class": cls.__module__ + "." + cls.__qualname__, "fields": _fields(cls),
                         "validation": mode, "schema": config_schema(cls, mode)}
    return out


def facts():
    import os
    import shutil
    import vllm
    parser = _parser()[0]
    args = serve_args(parser)
    configs = json_configs(parser, args)
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
    import vllm.engine.arg_utils as arg_utils
    env_vars = sorted(getattr(envs, "environment_variables", {}))
    return {
        "vllm_version": vllm.__version__,
        "allow_abbrev": bool(getattr(parser, "allow_abbrev", True)),
        "json_human_numbers": hasattr(arg_utils, "_expand_json_human_readable_numbers"),
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


def parsed(argvs):
    """What the ``vllm serve`` parser makes of each argv of ``argvs`` (no model, no
    validation): ``{"ok": true, "args": {dest: value}}`` for the dests the argv's options set,
    or ``{"ok": false, "message": ...}`` with argparse's message."""
    parser = _parser()[0]

    def _error(message):
        raise _Reject(message)

    parser.error = _error
    out = []
    for argv in argvs:
        try:
            ns = parser.parse_args(list(argv))
        except _Reject as exc:
            out.append({"ok": False, "message": str(exc)})
            continue
        dests = set()
        for w in argv:
            if not w.startswith("--"):
                continue
            head = w.split("=", 1)[0]
            head = head.split(".", 1)[0].replace("_", "-")  # as FlexibleArgumentParser rewrites it
            hits = [head] if head in parser._option_string_actions else \
                [o for o in parser._option_string_actions if o.startswith(head)]  # an abbreviation
            if len(hits) == 1:
                dests.add(parser._option_string_actions[hits[0]].dest)
        out.append({"ok": True, "args": {d: _jsonable(getattr(ns, d, None)) for d in sorted(dests)}})
    return out


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
        # a pydantic class judges its keys itself (vLLM 0.10-0.11's configs drop unknown keys,
        # later ones refuse them); a plain dataclass built from the dict refuses them (TypeError)
        unknown = [] if hasattr(cls, "__pydantic_validator__") else sorted(set(value) - set(_fields(cls)))
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
        if len(argv) > 1:  # facts ARGVS_JSON: also what the parser makes of each argv
            out["parsed"] = parsed(json.loads(argv[1]))
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
