"""The one argv grammar (servedeck.vllm.argv): vLLM's value syntax, both flag forms, repeated
flags, JSON flags, printing, and the exl3xpu launcher's reading of its contract through it
(servedeck.launchers.exl3xpu) checked against a real argparse launcher (the CPU image's serve.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from servedeck.errors import ServedeckError
from servedeck.launchers import registry
from servedeck.launchers.base import Launch, Token
from servedeck.vllm.argv import (convert, dotted_replaces, flag_tokens, human_readable_int, parse_vllm, print_args,
                                 repeated, settings)

EXL3XPU, VLLM = registry.named("exl3xpu"), registry.named("vllm")


def read_exl3xpu(tokens: list[str]) -> Launch:
    """An exl3xpu command as its launcher reads it (tokens at ``command[i]``)."""
    return EXL3XPU.read([Token(t, ("command", i)) for i, t in enumerate(tokens)])

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text, auto, value", [
    ("16k", False, 16_000), ("16K", False, 16_384), ("128K", False, 131_072), ("1M", False, 1_048_576),
    ("1m", False, 1_000_000), ("25.6k", False, 25_600), ("2g", False, 2_000_000_000),
    ("1G", False, 1_073_741_824), ("8192", False, 8192), (" 4096 ", False, 4096),
    ("auto", True, -1), ("AUTO", True, -1), ("-1", True, -1), ("-1", False, -1),
])
def test_human_readable_int_as_vllm_reads_it(text, auto, value):
    assert human_readable_int(text, auto=auto) == value


@pytest.mark.parametrize("text, auto", [("1.5K", False), ("auto", False), ("12x", True), ("", True)])
def test_human_readable_int_refuses_what_vllm_refuses(text, auto):
    with pytest.raises(ValueError):
        human_readable_int(text, auto=auto)


def test_flag_value_conversion_follows_the_flag_table():
    assert convert("max-model-len", "auto") == -1
    assert convert("max-num-batched-tokens", "16K") == 16_384
    assert convert("gpu-memory-utilization", "0.90") == 0.9
    assert convert("speculative-config", '{"method":"mtp"}') == {"method": "mtp"}
    assert convert("tool-call-parser", "hermes") == "hermes"
    assert convert("enable-prefix-caching", None) is True
    assert convert("no-enable-prefix-caching", None) is False
    with pytest.raises(ServedeckError, match="max-num-batched-tokens") as exc:
        convert("max-num-batched-tokens", "auto")  # only --max-model-len takes auto
    assert "16K" in exc.value.hint
    with pytest.raises(ServedeckError, match="speculative-config"):
        convert("speculative-config", "{method: mtp}")


def test_equals_form_is_the_same_flag_as_two_tokens():
    a = settings(parse_vllm(["/m", "--served-model-name=chat", "--max-model-len=8192", "--port=8000",
                             "--gpu-memory-utilization=0.90"]))
    b = settings(parse_vllm(["/m", "--served-model-name", "chat", "--max-model-len", "8192", "--port",
                             "8000", "--gpu-memory-utilization", "0.90"]))
    assert a == b == {"served_model_name": ["chat"], "max_model_len": 8192, "port": 8000,
                      "gpu_memory_utilization": 0.9}


def test_underscores_aliases_and_negative_values():
    args = parse_vllm(["--max_model_len", "-1", "-tp", "2", "--no-enable-prefix-caching", "--seed=-3"])
    assert [a.name for a in args] == ["max-model-len", "tensor-parallel-size", "no-enable-prefix-caching", "seed"]
    assert settings(args) == {"max_model_len": -1, "tensor_parallel_size": 2,
                              "enable_prefix_caching": False, "seed": -3}


def test_a_flag_given_twice_keeps_the_last_and_is_reported():
    args = parse_vllm(["/m", "--served-model-name", "model", "--port", "8000",
                       "--served-model-name=chat", "--port=8001", "--enable-prefix-caching",
                       "--no-enable-prefix-caching"])
    assert settings(args)["served_model_name"] == ["chat"]
    assert settings(args)["port"] == 8001
    assert settings(args)["enable_prefix_caching"] is False
    twice = repeated(args)
    assert sorted(twice) == ["enable_prefix_caching", "port", "served_model_name"]
    assert [a.value for a in twice["port"]] == ["8000", "8001"]


def test_nargs_plus_json_and_dotted_json_keys():
    args = parse_vllm(["--served-model-name", "a", "b", "--speculative-config",
                       '{"method":"ngram","num_speculative_tokens":3}', "--speculative-config.prompt_lookup_max", "4",
                       "--compilation-config.mode=VLLM_COMPILE"])
    s = settings(args)
    assert s["served_model_name"] == ["a", "b"]
    # vLLM's FlexibleArgumentParser gathers the dotted keys into ONE value that replaces the whole
    # JSON one, in either order (vLLM 0.32's own make_arg_parser, run in the CPU image, gave
    # {'num_speculative_tokens': 5} for '{"method":"ngram",...}' + .num_speculative_tokens 5)
    assert s["speculative_config"] == {"prompt_lookup_max": 4}
    assert s["compilation_config"] == {"mode": "VLLM_COMPILE"}
    assert list(dotted_replaces(args)) == ["speculative_config"]
    both = parse_vllm(["--speculative-config.method", "ngram", "--speculative-config", '{"method":"mtp"}',
                       "--speculative-config.num_speculative_tokens", "2"])
    assert settings(both)["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 2}


def test_attached_short_option_value_does_not_swallow_the_next_token():
    args = parse_vllm(["/m", "-O3", "/other"])
    assert [(a.name, a.values) for a in args] == [(None, ["/m"]), ("compilation-config", ["3"]),
                                                  (None, ["/other"])]


def test_missing_value_is_flagged_not_swallowed():
    args = parse_vllm(["--max-model-len", "--enforce-eager"])
    assert args[0].missing_value and args[1].name == "enforce-eager" and not args[1].values


def test_print_then_parse_keeps_every_flag():
    tokens = ["/m", "--max-model-len=128K", "--served-model-name", "a", "b", "--no-enable-prefix-caching",
              "--speculative-config", '{"method":"mtp"}', "--", "--enforce-eager"]
    once = parse_vllm(tokens)
    printed = print_args(once)
    assert "--max-model-len" in printed and "--max-model-len=128K" not in printed
    assert settings(parse_vllm(printed)) == settings(once)


def test_flag_tokens_print_each_kind():
    assert flag_tokens("max_model_len", 8192) == ["--max-model-len", "8192"]
    assert flag_tokens("enable_prefix_caching", False) == ["--no-enable-prefix-caching"]
    assert flag_tokens("enable_auto_tool_choice", True) == ["--enable-auto-tool-choice"]
    assert flag_tokens("served_model_name", ["a", "b"]) == ["--served-model-name", "a", "b"]
    assert flag_tokens("speculative_config", {"method": "mtp", "n": 1}) == [
        "--speculative-config", '{"method":"mtp","n":1}']
    assert flag_tokens("tool_call_parser", None) == []


def test_meaning_ignores_spelling_and_applies_vllm_defaults():
    a = VLLM.meaning(["example/model-7b", "--max-model-len", "16K"])
    b = VLLM.meaning(["--model=example/model-7b", "--port=8000", "--max-model-len=16384",
                      "--served-model-name", "example/model-7b"])
    assert a == b
    assert VLLM.meaning(["x", "--max-model-len", "16k"]) != a


# ----------------------------------------------------------------- the launcher contract

def _cpu_launcher():
    path = ROOT / "deploy" / "images" / "cpu-vllm" / "serve.py"
    spec = importlib.util.spec_from_file_location("servedeck_cpu_launcher_argv", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


LAUNCHER_ARGVS = [
    ["models/m", "--gpu", "0", "--model-path", "/mnt/m", "--set", "vllm.max_model_len=8192",
     "--set", "env.X=a=b", "--port", "9932", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml"],
    ["models/m", "--gpu=1", "--model-path=/mnt/m", "--set=vllm.max_num_batched_tokens=4096", "--",
     "--max-model-len", "4096", "--enforce-eager"],
    ["models/m", "--model-p", "/mnt/m", "--served-model-name", "q", "--port", "8100"],
]


@pytest.mark.parametrize("tokens", LAUNCHER_ARGVS)
def test_launcher_parse_agrees_with_a_real_argparse_launcher(tokens):
    serve = _cpu_launcher()
    cut = tokens.index("--") if "--" in tokens else len(tokens)
    args, unknown = serve.build_parser().parse_known_args(tokens[:cut])
    mine = read_exl3xpu(tokens)
    assert mine.config.s == args.config
    assert [s.text for s in mine.edits] == args.overrides
    port = mine.option("port")
    assert (int(port.value) if port else None) == args.port
    gpu = mine.option("gpu")
    assert (int(gpu.value) if gpu else 0) == args.gpu
    mp = mine.option("model-path")
    assert (mp.value if mp else None) == args.model_path
    passthrough = [t for a in mine.args for t in print_args([a])]
    assert passthrough == unknown + tokens[cut + 1:]


def test_launcher_passthrough_is_parsed_as_vllm_flags_with_command_indices():
    tokens = ["models/m", "--set", "vllm.max_model_len=1", "--", "--max-model-len=16K", "--port", "1"]
    parsed = read_exl3xpu(tokens)
    assert parsed.option("port") is None  # after `--`, --port belongs to vLLM
    assert [(a.name, a.index) for a in parsed.args] == [("max-model-len", 4), ("port", 5)]
    assert settings(parsed.args) == {"max_model_len": 16_384, "port": 1}
    assert parsed.edits[0].index == 2


def test_ambiguous_abbreviation_is_reported():
    parsed = read_exl3xpu(["models/m", "--p", "1"])  # --port, --print
    assert [(t.path, t.s, opt) for t, opt in parsed.abbreviations] == [(("command", 1), "--p", None)]
    with pytest.raises(SystemExit) as exit_:  # the real launcher's parser errors on it too (exit 2)
        _cpu_launcher().build_parser().parse_known_args(["models/m", "--p", "1"])
    assert exit_.value.code == 2


def test_flag_table_from_a_recorded_vllm_argument_surface():
    import json
    from types import SimpleNamespace

    from servedeck.vllm.argv import table_from_serve_args

    rows = json.loads((ROOT / "tests" / "fixtures" / "vllm-0.32-cpu" / "serve-args-sample.json").read_text())
    flags, aliases = table_from_serve_args(SimpleNamespace(**r) for r in rows["serve_args"])
    assert flags["max-model-len"].kind == "human_int_auto"
    assert flags["max-num-batched-tokens"].kind == "human_int"
    assert flags["kv-cache-memory-bytes"].kind == "human_int"  # Optional[...]: servedeck's own table
    assert flags["speculative-config"].kind == "json"
    assert flags["allowed-origins"].kind == "json" and not flags["allowed-origins"].nargs_plus  # 0.32: JSON
    assert flags["served-model-name"].nargs_plus
    assert flags["enable-prefix-caching"].kind == flags["no-enable-prefix-caching"].kind == "bool"
    assert flags["device-memory-utilization"].kind == "float"
    assert aliases == {"tp": "tensor-parallel-size", "sc": "speculative-config"}


def test_every_shipped_profile_command_parses_back_to_its_settings():
    from servedeck.model.catalog import Catalog
    from servedeck.model.profile import ENGINE_FLAGS, ProfileStore
    from servedeck.yamlio import launcher_value

    store, catalog = ProfileStore(ROOT / "profiles"), Catalog(ROOT / "deploy" / "images.yaml")
    for name in store.names():
        p = store.load(name).profile
        facts = catalog.lookup(p.image_ref.digest)
        launcher = p.launcher.runs
        argv = launcher.build_argv(p.launch_settings(),
                                   launcher.defaults(facts.launcher_defaults, p.launcher.config) if facts else None)
        if launcher is EXL3XPU:
            parsed = read_exl3xpu(argv)
            assert parsed.config.s == p.launcher.config
            assert parsed.option("model-path").value == p.model.argument
            flags = settings(parsed.args)
            sets = {s.key: launcher_value(s.raw) for s in parsed.edits}
            for field in ENGINE_FLAGS:
                value = getattr(p.engine, field)
                if value is not None and value is not False:
                    assert sets[f"vllm.{field}"] == value, (name, field)
            assert int(parsed.option("port").value) == p.container.port
            assert repeated(parsed.args) == {}, name
        else:
            flags = settings(parse_vllm(argv))
            assert flags["port"] == p.container.port
            assert repeated(parse_vllm(argv)) == {}, name
        assert flags["served_model_name"] == p.model.served_model_name, name
