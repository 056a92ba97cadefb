"""Benchmark workloads sized to the deployed server: prompt plus output must fit its
``max_model_len`` (vLLM rejects a longer request with a 400)."""

from __future__ import annotations

from pathlib import Path

from servedeck.errors import ServedeckError
from servedeck.runs import store

DEFAULT_PROMPT_TOKENS = 32768
"""The seed's long-context single stream (B70 card)."""
DEFAULT_MAX_TOKENS = 256
MIN_PROMPT_TOKENS = 16

FIT_HINT = ("pass smaller --prompt-tokens/--max-tokens to invoke bench, or raise engine.max_model_len "
            "in the profile and redeploy")


def max_model_len_of(run_dir: Path) -> int | None:
    """The deployed ``max_model_len`` of a run: the server's own log (startup.json) first, else
    the effective settings (effective.json); None when neither says."""
    for name, keys in ((store.STARTUP, ("max_model_len",)), (store.EFFECTIVE, ("max_model_len",))):
        try:
            doc = store.read_json(run_dir, name) or {}
        except ServedeckError:
            continue
        value = doc.get(keys[0]) if isinstance(doc, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def size_workload(max_model_len: int | None, prompt_tokens: int | None = None,
                  max_tokens: int | None = None) -> tuple[int, int]:
    """``(prompt_tokens, max_tokens)`` that fit ``max_model_len``.

    Unset values default to 32,768 prompt and 256 output tokens when they fit; otherwise the
    output is 256 or an eighth of the context, whichever is smaller, and the prompt takes the rest.

    Raises:
        ServedeckError: values given explicitly do not fit (the hint names the options).
    """
    if max_model_len is None:
        return prompt_tokens or DEFAULT_PROMPT_TOKENS, max_tokens or DEFAULT_MAX_TOKENS
    out = max_tokens if max_tokens is not None else min(DEFAULT_MAX_TOKENS, max(2, max_model_len // 8))
    if prompt_tokens is None:
        prompt = min(DEFAULT_PROMPT_TOKENS, max_model_len - out)
    else:
        prompt = prompt_tokens
    if prompt + out > max_model_len or prompt < MIN_PROMPT_TOKENS:
        raise ServedeckError(f"prompt_tokens {prompt} + max_tokens {out} = {prompt + out} does not fit the "
                             f"deployed max_model_len {max_model_len}", field="workload.prompt_tokens",
                             hint=FIT_HINT)
    return prompt, out
