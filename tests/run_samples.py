"""Benchmark samples for tests that write run files (``tests/conftest.py`` hands it out as the
``bench_sample`` fixture; helpers outside a test import it from here: a module named
``conftest`` is one of several in a whole-suite run)."""

from __future__ import annotations


def make_sample(phase: str, rep: int, **fields):
    """One ``bench.jsonl`` sample (:class:`servedeck.runs.records.Sample`): ``fields`` over
    plausible values of every other field (a 64-token prompt, 16 output tokens)."""
    from servedeck.runs.records import Sample, ServerDelta
    base = {"phase": phase, "rep": rep, "tag": f"[req {phase}{rep:030d}]", "prompt_tokens": 64,
            "prompt_tokens_requested": 64, "output_tokens": 16, "first_chunk_tokens": 1, "ttft_s": 0.5,
            "prefill_tok_s": 128.0, "decode_tok_s": 50.0, "decode_s": 0.3, "e2e_s": 0.8,
            "finish_reason": "length", "chunks": 16, "server": ServerDelta()}
    return Sample(**{**base, **fields})
