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

from servedeck.errors import ServedeckError

_KIND_NAMES = ("tool_call_parser", "reasoning_parser", "speculative_method", "kv_cache_dtype")


@dataclass(frozen=True)
class NameSet:
    """Names one vLLM release accepts for one option.

    Attributes:
        version: the checked vLLM release, as a tuple (0, 33, 0).
        names: the accepted names.
    """

    version: tuple[int, int, int]
    names: frozenset[str]


@functools.lru_cache(maxsize=None)
def kinds() -> dict[str, list[NameSet]]:
    """Kind → the releases whose table lists names of that kind, oldest first."""
    from servedeck.vllm.facts import shipped_tables
    out: dict[str, list[NameSet]] = {k: [] for k in _KIND_NAMES}
    for version, facts in shipped_tables().items():
        for kind in _KIND_NAMES:
            names = facts.names(kind)
            if names:
                out[kind].append(NameSet(version, frozenset(names)))
    return out


#: the settings servedeck renders (vLLM dests) whose defaults :func:`vllm_defaults` gives
RENDERED_SETTINGS = ("gpu_memory_utilization", "max_model_len", "max_num_batched_tokens", "max_num_seqs",
                     "enable_prefix_caching", "kv_cache_dtype", "speculative_config",
                     "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "port")


@functools.lru_cache(maxsize=None)
def vllm_defaults() -> dict[str, Any]:
    """vLLM's argparse defaults for :data:`RENDERED_SETTINGS` from the newest shipped table with
    an argument surface (``""`` read as None); None = decided at run time by vLLM."""
    from servedeck.vllm.facts import newest_table
    newest = newest_table("serve_args")
    if newest is None:
        return {}
    by_dest = {a.dest: a.default for a in newest.serve_args}
    return {d: None if by_dest.get(d) == "" else by_dest.get(d) for d in RENDERED_SETTINGS}


def __getattr__(name: str) -> Any:
    """``VLLM_DEFAULTS`` and ``KINDS`` are computed from the tables on first use."""
    if name == "VLLM_DEFAULTS":
        return vllm_defaults()
    if name == "KINDS":
        return kinds()
    raise AttributeError(name)


def parse_version(text: str) -> tuple[int, int, int]:
    """Parse ``"0.26.1.dev0+g568afb3a1.d20260907.xpu"`` → ``(0, 26, 1)``.

    Raises:
        ServedeckError: when the text does not start with ``MAJOR.MINOR``.
    """
    parts = []
    for piece in text.split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if len(parts) < 2:
        raise ServedeckError(f"cannot read a vLLM version from {text!r}",
                             hint="write it as MAJOR.MINOR[.PATCH], e.g. 0.26.1")
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


@dataclass(frozen=True)
class NameCheck:
    """Outcome of :func:`check_name`.

    Attributes:
        status: ``"valid"`` (accepted by the bracketing checked releases), ``"uncertain"``
            (accepted by only one of them), or ``"invalid"``.
        valid_names: the names of the nearest newer checked release (for hints).
        basis: human-readable releases used, e.g. ``"0.11.0..0.33.0"``.
    """

    status: str
    valid_names: frozenset[str]
    basis: str


def check_name(kind: str, name: str, vllm_version: str) -> NameCheck:
    """Judge ``name`` for option ``kind`` (a key of :func:`kinds`) in ``vllm_version``.

    Raises:
        KeyError: for an unknown ``kind`` (a bug, not user input).
        ServedeckError: when ``vllm_version`` cannot be parsed.
    """
    sets = kinds()[kind]
    version = parse_version(vllm_version)
    older = [s for s in sets if s.version <= version]
    newer = [s for s in sets if s.version >= version]
    lo = older[-1] if older else None
    hi = newer[0] if newer else None
    bracket = [s for s in (lo, hi) if s is not None]
    ok = [name in s.names for s in bracket]
    basis = "..".join(".".join(map(str, s.version)) for s in dict.fromkeys(bracket))
    names = (hi or lo).names  # type: ignore[union-attr]
    if all(ok):
        return NameCheck("valid", names, basis)
    if any(ok):
        return NameCheck("uncertain", names, basis)
    return NameCheck("invalid", names, basis)
