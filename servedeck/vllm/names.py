"""Valid vLLM names per version (tool-call parsers, reasoning parsers, speculative methods,
KV-cache dtypes) and vLLM's defaults for the settings servedeck renders.

Nothing here is typed by hand: the names come from the shipped tables
``servedeck/vllm/tables/vllm-<version>.json`` (:mod:`servedeck.vllm.facts`), each produced by
:mod:`servedeck.vllm.introspect` and naming its source: an image (``invoke image-facts IMAGE
--table``) or a release's own wheel (``python -m devtools.release_tables``). Versions between
tables are judged by the tables that bracket them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from servedeck.vllm.facts import bracket, newest_table, parse_version, release_of  # noqa: F401 (names here too)

_KIND_FIELDS = {"tool_call_parser": "tool_call_parsers", "reasoning_parser": "reasoning_parsers",
                "speculative_method": "speculative_methods", "kv_cache_dtype": "kv_cache_dtypes"}
"""Name kind → the :class:`servedeck.vllm.facts.VllmFacts` registry field that lists its names."""


#: the settings servedeck renders (vLLM dests) whose defaults :func:`vllm_defaults` gives
RENDERED_SETTINGS = ("gpu_memory_utilization", "max_model_len", "max_num_batched_tokens", "max_num_seqs",
                     "enable_prefix_caching", "kv_cache_dtype", "dtype", "speculative_config",
                     "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "port")


@functools.lru_cache(maxsize=None)
def vllm_defaults() -> dict[str, Any]:
    """vLLM's argparse defaults for :data:`RENDERED_SETTINGS` from the newest shipped table with
    an argument surface (``""`` read as None); None = decided at run time by vLLM."""
    newest = newest_table("serve_args")
    if newest is None:
        return {}
    by_dest = {a.dest: a.default for a in newest.serve_args}
    return {d: None if by_dest.get(d) == "" else by_dest.get(d) for d in RENDERED_SETTINGS}


def __getattr__(name: str) -> Any:
    """``VLLM_DEFAULTS`` is computed from the tables on first use."""
    if name == "VLLM_DEFAULTS":
        return vllm_defaults()
    raise AttributeError(name)


@dataclass(frozen=True)
class NameCheck:
    """Outcome of :func:`check_name`.

    Attributes:
        status: ``"valid"`` (accepted by the image's own registry, or by every checked release
            bracketing its version), ``"uncertain"`` (accepted by only one of them), or
            ``"invalid"``.
        valid_names: the names of the image's own registry, else of the nearest newer checked
            release (for hints).
        basis: human-readable releases used, e.g. ``"0.11.0..0.33.0"``, or the image's facts.
    """

    status: str
    valid_names: frozenset[str]
    basis: str


def check_name(kind: str, name: str, vllm_version: str, own: Any = None) -> NameCheck | None:
    """Judge ``name`` for option ``kind`` (a key of :data:`_KIND_FIELDS`) in ``vllm_version``:
    by the image's own facts ``own`` (:class:`servedeck.vllm.facts.VllmFacts`, per digest) when
    they list that registry, else by the shipped tables that bracket the version
    (:func:`servedeck.vllm.facts.bracket`). None when no table lists the registry.

    Raises:
        KeyError: for an unknown ``kind`` (a bug, not user input).
        ServedeckError: when ``vllm_version`` cannot be parsed.
    """
    need = _KIND_FIELDS[kind]
    if own is not None and getattr(own, need):
        names = frozenset(getattr(own, need))
        return NameCheck("valid" if name in names else "invalid", names,
                         f"{own.vllm_version} ({own.source})")
    want = parse_version(vllm_version)
    lo, hi = bracket(want, need)
    if lo is not None and parse_version(lo.vllm_version) == want:
        hi = None  # the release's own table decides
    found = [f for f in (lo, hi) if f is not None]
    if not found:
        return None
    ok = [name in getattr(f, need) for f in found]
    basis = "..".join(dict.fromkeys(f.vllm_version for f in found))
    names = frozenset(getattr(hi or lo, need))
    status = "valid" if all(ok) else "uncertain" if any(ok) else "invalid"
    return NameCheck(status, names, basis)
