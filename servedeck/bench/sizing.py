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
    values = []
    try:
        startup = store.read(run_dir, store.STARTUP)
        values.append(startup.max_model_len if startup else None)
    except ServedeckError:
        pass
    try:
        effective = store.read(run_dir, store.EFFECTIVE)
        values.append(effective.root.get("max_model_len") if effective else None)
    except ServedeckError:
        pass
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


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
