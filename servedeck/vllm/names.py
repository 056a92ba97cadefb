"""Valid vLLM names per version: tool-call parsers, reasoning parsers, speculative methods,
KV-cache dtypes, and vLLM's defaults for the flags servedeck sets.

Source: ``shared/reference/vllm-serving-facts.md`` §6–§7, read from vLLM's
``vllm/tool_parsers/__init__.py``, ``vllm/reasoning/__init__.py``, ``vllm/config/speculative.py``,
``vllm/config/cache.py`` and ``vllm/engine/arg_utils.py`` at tags v0.10.2, v0.11.0 and v0.33.0.
Versions between checked ones are judged by the checked versions that bracket them.
"""

from __future__ import annotations

from dataclasses import dataclass

from servedeck.errors import ServedeckError

_TOOL_0_10_2 = (
    "deepseek_v3 deepseek_v31 glm45 granite granite-20b-fc hermes hunyuan_a13b internlm jamba "
    "kimi_k2 llama3_json llama4_json llama4_pythonic minimax mistral openai phi4_mini_json pythonic "
    "qwen3_coder seed_oss step3 xlam"
).split()
_TOOL_0_11_0 = _TOOL_0_10_2 + ["qwen3_xml", "longcat"]
_TOOL_0_33_0 = (
    "dots deepseek_v3 deepseek_v31 deepseek_v32 deepseek_v4 deepseek_v41 cohere_command3 "
    "cohere_command4 ernie45 glm45 glm47 ling3 granite-20b-fc granite granite4 hermes hf beam "
    "poolside_v1 hunyuan_a13b hy_v3 hy_v4 internlm jamba lfm2 kimi_k2 kimi_k3 k2_horizon llama3_json "
    "llama4_json llama4_pythonic longcat mimo minimax_m2 minimax_m3 minicpm5 mistral olmo3 plamo3 "
    "muse muse_glimmer musespark1x openai phi4_mini_json pythonic qwen3_coder qwen3_json qwen3_xml "
    "seed_oss step3 step3p5 step5 inkling xlam gigachat3 functiongemma gemma4 apertus"
).split()

_REASONING_0_10_2 = "deepseek_r1 glm45 granite hunyuan_a13b mistral openai_gptoss qwen3 step3".split()
_REASONING_0_11_0 = _REASONING_0_10_2 + ["seed_oss"]
_REASONING_0_33_0 = (
    "beam cohere_command3 cohere_command4 deepseek_r1 deepseek_v3 deepseek_v4 deepseek_v41 ernie45 "
    "gemma4 glm45 glm47 granite granite_thinking_parser hf holo2 hunyuan_a13b hy_v3 hy_v4 inkling "
    "k2_horizon kimi_k2 kimi_k3 ling3 mimo minicpmv minimax_m2 minimax_m2_append_think minimax_m3 "
    "mistral muse muse_glimmer musespark1x nemotron_v3 olmo3 openai_gptoss plamo3 poolside_v1 qwen3 "
    "seed_oss step3 step3p5 step5"
).split()

_SPEC_0_10_2 = (
    "ngram eagle eagle3 medusa mlp_speculator draft_model deepseek_mtp ernie_mtp qwen3_next_mtp"
).split()
_SPEC_0_11_0 = _SPEC_0_10_2 + "mimo_mtp longcat_flash_mtp glm4_moe_mtp mtp".split()
_SPEC_0_33_0 = (
    "deepseek_mtp dots3_note_mtp mimo_mtp mimo_v2_mtp glm4_moe_mtp glm4_moe_lite_mtp glm_ocr_mtp "
    "ernie_mtp nemotron_h_mtp exaone_moe_mtp exaone4_5_mtp qwen3_next_mtp qwen4_exp_mtp qwen3_5_mtp "
    "longcat_flash_mtp bailing_hybrid_v3_mtp minimax_m3_mtp bailing_hybrid_mtp mtp kimi_k3_mtp "
    "pangu_ultra_moe_mtp step3p5_mtp step5_mtp hy_v3_mtp hy_v4_mtp gemma4_mtp inkling_mtp "
    "glm5_next_mtp ngram draft_model suffix custom_class eagle eagle3 extract_hidden_states dflash "
    "ngram_gpu dspark"
).split()

_KV_0_10_2 = "auto fp8 fp8_e4m3 fp8_e5m2 fp8_inc".split()
_KV_0_33_0 = _KV_0_10_2 + (
    "float16 bfloat16 fp8_ds_mla nvfp4 int8_per_token_head fp8_per_token_head").split()


@dataclass(frozen=True)
class NameSet:
    """Names one vLLM release accepts for one option.

    Attributes:
        version: the checked vLLM release, as a tuple (0, 33, 0).
        names: the accepted names.
    """

    version: tuple[int, int, int]
    names: frozenset[str]


KINDS: dict[str, list[NameSet]] = {
    "tool_call_parser": [NameSet((0, 10, 2), frozenset(_TOOL_0_10_2)),
                         NameSet((0, 11, 0), frozenset(_TOOL_0_11_0)),
                         NameSet((0, 33, 0), frozenset(_TOOL_0_33_0))],
    "reasoning_parser": [NameSet((0, 10, 2), frozenset(_REASONING_0_10_2)),
                         NameSet((0, 11, 0), frozenset(_REASONING_0_11_0)),
                         NameSet((0, 33, 0), frozenset(_REASONING_0_33_0))],
    "speculative_method": [NameSet((0, 10, 2), frozenset(_SPEC_0_10_2)),
                           NameSet((0, 11, 0), frozenset(_SPEC_0_11_0)),
                           NameSet((0, 33, 0), frozenset(_SPEC_0_33_0))],
    "kv_cache_dtype": [NameSet((0, 10, 2), frozenset(_KV_0_10_2)),
                       NameSet((0, 33, 0), frozenset(_KV_0_33_0))],
}

#: vLLM defaults (0.24–0.33 unless noted) for the settings servedeck renders; ``None`` = decided
#: at run time by vLLM (device size, model support).
VLLM_DEFAULTS: dict[str, object] = {
    "gpu_memory_utilization": 0.92,
    "max_model_len": None,
    "max_num_batched_tokens": None,
    "max_num_seqs": None,
    "enable_prefix_caching": None,
    "kv_cache_dtype": "auto",
    "speculative_config": None,
    "enable_auto_tool_choice": False,
    "tool_call_parser": None,
    "reasoning_parser": None,
    "port": 8000,
}


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
    """Judge ``name`` for option ``kind`` (a key of :data:`KINDS`) in ``vllm_version``.

    Raises:
        KeyError: for an unknown ``kind`` (a bug, not user input).
        ServedeckError: when ``vllm_version`` cannot be parsed.
    """
    sets = KINDS[kind]
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
