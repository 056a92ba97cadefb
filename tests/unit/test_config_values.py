"""JSON config values judged against each release's config model (issue 30, item 2).

The model is the config's JSON Schema as pydantic gives it, extracted with the shipped table,
with the verdicts of vLLM's own field validators on probe values. The facts these tests rely
on were seen with vLLM 0.32's own classes in the CPU image: ``CompilationConfig(mode="3")`` is
refused ("Invalid compilation mode: 3"), ``mode="vllm_compile"`` and ``mode=3`` are taken,
``num_speculative_tokens="3"`` and ``max_cudagraph_capture_size="512"`` are taken (pydantic's
lax mode), ``cudagraph_mode="bad"`` is refused (``CUDAGraphMode["BAD"]``).
"""

from __future__ import annotations

import pytest

from servedeck.compose.check import check_compose_text
from servedeck.model.catalog import Catalog, ImageFacts
from servedeck.vllm.config_values import judge_config
from servedeck.vllm.facts import shipped_tables

DIGESTS = {"0.11.0": "sha256:" + "1" * 64, "0.32.0": "sha256:" + "2" * 64, "0.33.0": "sha256:" + "3" * 64}
XPU = "sha256:" + "4" * 64


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    cat = Catalog(tmp_path_factory.mktemp("cat") / "images.yaml")
    for version, digest in DIGESTS.items():
        cat.add(digest, ImageFacts(repository="example/llm", launcher="vllm", vllm_version=version,
                                   device="cuda", entrypoint=["vllm", "serve"]))
    cat.add(XPU, ImageFacts(repository="example/exl3xpu", launcher="exl3xpu", vllm_version="0.32.0",
                            device="xpu", entrypoint=["/opt/venv/bin/python", "scripts/serve.py"],
                            default_port=8100))
    return cat


def found(catalog: Catalog, command: list[str], version: str = "0.32.0") -> list[tuple[str, str, str]]:
    items = "".join(f"      - '{c}'\n" for c in command)
    text = f"services:\n  llm:\n    image: example/llm@{DIGESTS[version]}\n    command:\n      - m\n{items}"
    return [(f.rule, f.severity.value, f"{f.message} | {f.hint}")
            for f in check_compose_text(text, file="t.yml", catalog=catalog)
            if f.rule.startswith(("json/", "argv/invalid-json"))]


def rules(items) -> set[tuple[str, str]]:
    return {(r, s) for r, s, _ in items}


# ----------------------------------------------------------------------------- the case and its spellings

@pytest.mark.parametrize("command", [
    ["--compilation-config", '{"mode":"3"}'],
    ['--compilation-config={"mode": "3"}'],
    ["--compilation_config", '{"mode":"3"}'],
    ["--compilation-config.mode", '"3"'],                       # dotted: the value is JSON text "3"
    ["--compilation-config", '{"mode":"compile"}'],             # no such mode name
    ["--compilation-config", '{"mode": 5}'],                    # no such mode number
    ["--compilation-config", '{"cudagraph_mode":"full_and_piecewis"}'],
])
def test_a_compilation_mode_vllm_refuses_is_an_error_with_its_field(catalog, command):
    got = found(catalog, command)
    assert ("json/bad-value", "error") in rules(got), got
    text = next(t for r, _, t in got if r == "json/bad-value")
    assert "CompilationConfig." in text and ("mode" in text)


def test_the_message_names_what_the_field_takes(catalog):
    text = next(t for r, _, t in found(catalog, ["--compilation-config", '{"mode":"3"}']) if r == "json/bad-value")
    assert "'3'" in text and "VLLM_COMPILE" in text and "any case" in text and "0, 1, 2, 3" in text


@pytest.mark.parametrize("command", [
    ["--compilation-config", '{"mode":3}'],
    ["--compilation-config", '{"mode":"VLLM_COMPILE"}'],
    ["--compilation-config", '{"mode":"vllm_compile"}'],       # the validator upper-cases names
    ["--compilation-config.mode", "3"],                         # dotted: JSON 3
    ["--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE","max_cudagraph_capture_size":"512"}'],
    ["--compilation-config", '{"max_cudagraph_capture_size": 1k}'],   # 0.32 expands 1k (= 1000) in JSON
    ["--speculative-config", '{"method":"ngram","num_speculative_tokens":"3"}'],  # lax: "3" is 3
    ["--compilation-config", '{"pass_config":{"fuse_norm_quant":true}}'],
])
def test_clean_twins_give_nothing(catalog, command):
    assert found(catalog, command) == []


def test_a_nested_unknown_key_is_named_by_its_path_with_the_close_field(catalog):
    got = found(catalog, ["--compilation-config", '{"pass_config":{"fuse_norm_qunt":true}}'])
    (rule, sev, text), = got
    assert (rule, sev) == ("json/unknown-key", "error")
    assert "pass_config.fuse_norm_qunt" in text and "fuse_norm_quant" in text.split("|")[1]


def test_a_list_item_is_named_by_its_index(catalog):
    got = found(catalog, ["--compilation-config", '{"cudagraph_capture_sizes":[1,2,"z"]}'])
    assert any("cudagraph_capture_sizes[2]" in t for r, _, t in got if r == "json/bad-value"), got


def test_a_choice_outside_the_literal_gets_a_did_you_mean(catalog):
    got = found(catalog, ["--compilation-config", '{"compile_cache_save_format":"unpack"}'])
    text = next(t for r, _, t in got if r == "json/bad-value")
    assert "unpacked" in text.split("|")[1]


def test_human_numbers_in_json_follow_the_release(catalog):
    """0.32 and 0.33 expand bare 1k/16K in a parse_dataclass flag's JSON; 0.11 does not."""
    command = ["--compilation-config", '{"max_cudagraph_capture_size": 16K}']
    assert found(catalog, command, "0.33.0") == []
    assert ("argv/invalid-json", "error") in rules(found(catalog, command, "0.11.0"))


def test_keys_of_the_speculative_config_inside_additional_config_are_named(catalog):
    got = found(catalog, ["--additional-config", '{"method":"mtp","num_speculative_tokens":2}'])
    (rule, sev, text), = got
    assert (rule, sev) == ("json/key-of-another-flag", "warning")
    assert "--speculative-config" in text and "num_speculative_tokens" in text


@pytest.mark.parametrize("command", [
    ["--additional-config", '{"ascend_scheduler_config":{"enabled":true}}'],   # a plugin's own keys
    ["--additional-config", "{}"],
])
def test_plugin_keys_in_additional_config_stay_clean(catalog, command):
    assert found(catalog, command) == []


def test_the_dotted_form_of_additional_config_is_read_too(catalog):
    got = found(catalog, ["--additional-config.num_speculative_tokens", "2"])
    assert ("json/key-of-another-flag", "warning") in rules(got)


@pytest.mark.parametrize("version", sorted(DIGESTS))
def test_dotted_sub_key_flags_are_options_of_the_release(catalog, version):
    """vLLM's FlexibleArgumentParser gathers ``--OPTION.KEY VALUE`` into one JSON value of
    --OPTION (``vllm/utils/__init__.py`` in 0.11, ``vllm/utils/argparse_utils.py`` later): not
    an unknown flag; a base option the release lacks still is one."""
    command = ["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens=3",
               "--compilation-config.cudagraph_capture_sizes+", "1,2,4", "--speculative-confg.method", "ngram"]
    items = "".join(f"      - '{c}'\n" for c in command)
    text = f"services:\n  llm:\n    image: example/llm@{DIGESTS[version]}\n    command:\n      - m\n{items}"
    flagged = [f.message for f in check_compose_text(text, file="t.yml", catalog=catalog)
               if f.rule.startswith("flags/")]
    assert len(flagged) == 1 and "--speculative-confg.method" in flagged[0]


def test_a_dotted_list_key_with_plus_is_the_list_of_its_texts(catalog):
    """``--compilation-config.cudagraph_capture_sizes+ 1,2,4``: vLLM splits the text at commas
    into a list (of strings, which pydantic's lax mode reads as integers)."""
    assert found(catalog, ["--compilation-config.cudagraph_capture_sizes+", "1,2,4"]) == []
    got = found(catalog, ["--compilation-config.cudagraph_capture_sizes+", "1,x"])
    assert rules(got) == {("json/bad-value", "error")} and "cudagraph_capture_sizes[1]" in got[0][2]


def test_a_key_the_011_config_drops_silently_is_a_warning_not_an_error(catalog):
    """vLLM 0.11's configs are pydantic dataclasses without extra="forbid": an unknown key is
    dropped without a word (it has no effect); 0.32's refuse it."""
    command = ["--speculative-config", '{"method":"ngram","num_speculative_tokens":2,"num_speculative_tokenz":3}']
    assert rules(found(catalog, command, "0.11.0")) == {("json/ignored-key", "warning")}
    assert rules(found(catalog, command, "0.32.0")) == {("json/unknown-key", "error")}


def test_the_launchers_set_is_judged_as_one_key(catalog):
    def check(item: str) -> set:
        text = (f"services:\n  llm:\n    image: example/exl3xpu@{XPU}\n"
                f"    command: [models/m, --set, '{item}']\n")
        return {f.rule for f in check_compose_text(text, catalog=catalog) if f.rule.startswith("json/")}
    assert check('vllm.compilation_config.mode="3"') == {"json/bad-value"}
    assert check("vllm.compilation_config.mode=3") == set()
    assert check("vllm.compilation_config.pass_config.fuse_norm_qunt=true") == {"json/unknown-key"}


def test_a_top_level_flag_that_is_a_config_key_gets_the_hint(catalog):
    items = "".join(f"      - '{c}'\n" for c in ["m", "--num-speculative-tokens", "3"])
    text = f"services:\n  llm:\n    image: example/llm@{DIGESTS['0.32.0']}\n    command:\n{items}"
    f = next(f for f in check_compose_text(text, catalog=catalog) if f.rule == "flags/unknown")
    assert "--speculative-config" in f.hint and "num_speculative_tokens" in f.hint


# ----------------------------------------------------------------------------- the judge itself

def test_probes_decide_where_the_schema_alone_would_be_wrong():
    """The enum type alone takes "3" (an IntEnum in lax mode); vLLM's validator refuses it,
    and takes names the type alone refuses: the probes carry both."""
    cfg = shipped_tables()[(0, 32, 0)].json_configs["compilation_config"]
    assert [p.path for p in judge_config(cfg.schema_, {"mode": "3"}, mode=cfg.validation)] == [("mode",)]
    assert judge_config(cfg.schema_, {"mode": "Dynamo_Trace_Once"}, mode=cfg.validation) == []


SYNTHETIC = {"type": "object", "additionalProperties": False, "properties": {
    "n": {"type": "integer", "minimum": 1},
    "x": {"type": "integer", "x-validator": "before",
          "x-probes": [["a", True], ["servedeck-probe", True], [1, True], [None, True], [[], False]]},
    "y": {"type": "integer", "x-validator": "before", "x-probes": [[0, True], [1, True], [[], True]]},
    "sub": {"$ref": "#/$defs/Sub"}},
    "$defs": {"Sub": {"type": "object", "properties": {"k": {"type": "boolean"}}}}}


@pytest.mark.parametrize("value,expected", [
    ({"n": 0}, [(("n",), "bad-value", True)]),
    ({"n": "2"}, []),                                   # lax: numeric text is an integer
    ({"x": "anything"}, []),                            # the validator takes any text (probes)
    ({"x": []}, [(("x",), "bad-value", True)]),         # a probe it refused
    ({"y": {"a": 1}}, [(("y",), "bad-value", False)]),  # objects: no probe decides, the type refuses
    ({"sub": {"k": True, "z": 1}}, [(("sub", "z"), "ignored-key", True)]),
    ({"m": 1}, [(("m",), "unknown-key", True)]),
])
def test_the_judge_on_a_synthetic_schema(value, expected):
    got = [(p.path, p.kind, p.certain) for p in judge_config(SYNTHETIC, value)]
    assert got == expected
