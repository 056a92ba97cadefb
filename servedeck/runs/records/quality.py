"""``quality.json``: the quality probes (:mod:`servedeck.bench.probes` runs them,
:mod:`servedeck.bench.quality` judges outputs, :mod:`servedeck.ab.quality` compares two arms)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from servedeck.runs.records.base import Record

__all__ = ["DIRECT_ANSWER_KWARGS", "QualitySettings", "LikelihoodItem", "Likelihood", "GenerationItem",
           "FeatureCheck", "NeedleItem", "QualityResult"]


DIRECT_ANSWER_KWARGS: dict[str, Any] = {"enable_thinking": False}
"""The chat template switch for a direct answer (no thinking) used by the probes that want an
answer, not a reasoning trace: Qwen3's (and DeepSeek-R1 distills') ``enable_thinking``."""


class QualitySettings(Record):
    """What the quality probes send. Token counts are the server's; the defaults cost a small
    share of a benchmark run (``benchmarks/quality_overhead.py``) and are capped by the deployed
    ``max_model_len`` when the probes run."""

    likelihood_texts: int = Field(8, ge=0, description="shipped texts scored for likelihood (0: the probe is skipped)")
    generation_prompts: int = Field(3, ge=0, description="shipped prompts generated from, greedy (0: skipped)")
    generation_max_tokens: int = Field(16, ge=1, description="output tokens per greedy generation")
    feature_max_tokens: int = Field(40, ge=8, description="output tokens of the tool-call and structured-output "
                                                          "requests")
    reasoning_max_tokens: int = Field(32, ge=8, description="output tokens of the reasoning request")
    needle_depths: list[float] = Field(default_factory=lambda: [0.1, 0.5, 0.9],
                                       description="where the needle's fact is placed, fractions of the context")
    needle_max_tokens: int | None = Field(32768, ge=64, description="the needle context at most (null: up to the "
                                                                     "deployed max_model_len less the answer)")
    needle_answer_tokens: int = Field(8, ge=2, description="output tokens of a needle answer")
    features: bool = Field(True, description="run the tool-call, reasoning and structured-output checks")
    answer_template_kwargs: dict[str, Any] = Field(
        default_factory=lambda: dict(DIRECT_ANSWER_KWARGS),
        description="`chat_template_kwargs` of the requests that want a direct answer")
    request_timeout_s: float = Field(600.0, gt=0, description="per request")

    @field_validator("needle_depths")
    @classmethod
    def _depths(cls, v: list[float]) -> list[float]:
        for d in v:
            if not 0.0 <= d <= 1.0:
                raise ValueError(f"needle depth {d} is not a fraction between 0 and 1")
        return v


class LikelihoodItem(Record):
    """One shipped text scored by the server's prompt log-probabilities."""

    id: str = Field(description="the text's id in `servedeck/bench/quality_texts.json`")
    tokens: int = Field(description="scored tokens (the prompt's tokens after the first)")
    sum_logprob: float = Field(description="their summed log-likelihood, natural log (nats)")
    token_ids_sha256: str = Field(description="sha256 of the prompt token ids (JSON list): the tokenizer's identity")
    truncated: bool = Field(False, description="the text was cut to fit max_model_len")
    logprobs: list[float] = Field(description="each scored token's log-likelihood (nats)")
    top1_ids: list[int] = Field(description="the most likely token id at each scored position")
    token_text: list[str] = Field(description="each prompt token as the server decoded it (index 0: the first)")
    top1_text: list[str] = Field(description="the most likely token at each scored position, decoded")

    @property
    def mean_logprob(self) -> float:
        """Mean log-likelihood per token (nats)."""
        return self.sum_logprob / self.tokens if self.tokens else float("nan")


class Likelihood(Record):
    """The likelihood probe: its items, or why it could not run."""

    items: list[LikelihoodItem] = Field(default_factory=list, description="one per text")
    error: str | None = Field(None, description="why the probe failed (then no items)")

    @property
    def tokens(self) -> int:
        return sum(i.tokens for i in self.items)

    @property
    def mean_logprob(self) -> float | None:
        """Token-weighted mean log-likelihood (nats per token), None without items."""
        n = self.tokens
        return sum(i.sum_logprob for i in self.items) / n if n else None

    @property
    def perplexity(self) -> float | None:
        """``exp(-mean log-likelihood)`` over all scored tokens."""
        import math
        m = self.mean_logprob
        return math.exp(-m) if m is not None else None


class GenerationItem(Record):
    """One greedy generation from a shipped prompt."""

    id: str = Field(description="the prompt's id in `servedeck/bench/quality_texts.json`")
    token_ids: list[int] | None = Field(None, description="output token ids, reasoning and answer (null: not returned)")
    tokens: list[str] | None = Field(None, description="output tokens as text (from `logprobs`; null: not returned)")
    content: str | None = Field(None, description="the answer")
    reasoning: str | None = Field(None, description="the reasoning field of the message")
    finish_reason: str | None = Field(None, description="`stop`, `length`, ...")
    degenerate: list[str] = Field(default_factory=list, description="`empty`, `reasoning_only`, `repeated_char`, "
                                                                    "`repetition_loop` (servedeck.bench.quality)")
    error: str | None = Field(None, description="why the request failed")


class FeatureCheck(Record):
    """One check of a feature the profile enables."""

    name: Literal["tool_call", "reasoning", "structured_output"] = Field(description="the feature")
    setting: str = Field(description="what enables it (`tool_call_parser=qwen3_xml`, ...)")
    status: str = Field(description="tool_call: `parsed` | `malformed` | `unparsed` | `no_call`; reasoning: "
                                    "`separated` | `leaked` | `unfinished` | `no_answer` | `no_reasoning` | `empty`; "
                                    "structured_output: `valid` | `invalid` | `truncated` | `unsupported`; "
                                    "any: `error`")
    broken: bool = Field(description="the output shows the feature not working")
    detail: str = Field("", description="what was seen, one clause")
    excerpt: str = Field("", description="the start of the output")


class NeedleItem(Record):
    """A fact placed at ``depth`` of a long context, asked for."""

    depth: float = Field(description="where the fact is, a fraction of the context")
    context_tokens: int = Field(description="the request's prompt tokens (the server's count)")
    retrieved: bool = Field(description="the answer (or the reasoning) holds the fact's value")
    answer: str = Field("", description="the start of the answer")
    error: str | None = Field(None, description="why the request failed")


class QualityResult(Record):
    """``quality.json``: the quality probes run after the benchmark (servedeck.bench.probes)."""

    texts_version: int = Field(description="version of `servedeck/bench/quality_texts.json`")
    settings: QualitySettings = Field(description="what was sent")
    served_model: str = Field(description="the model name the requests named")
    base_url: str = Field(description="`http://host:port` of the server")
    max_model_len: int | None = Field(None, description="the context length the probes were sized to")
    started_at: str = Field("", description="UTC, ISO 8601")
    finished_at: str = Field("", description="UTC, ISO 8601")
    duration_s: float | None = Field(None, description="wall time of the probes")
    durations_s: dict[str, float] = Field(default_factory=dict,
                                          description="per phase: `likelihood`, `generation`, `checks`")
    likelihood: Likelihood | None = Field(None, description="null: the probe did not run")
    generation: list[GenerationItem] = Field(default_factory=list, description="one per prompt")
    features: list[FeatureCheck] = Field(default_factory=list, description="the checks that ran")
    needle: list[NeedleItem] = Field(default_factory=list, description="one per depth")
    skipped: dict[str, str] = Field(default_factory=dict, description="`{probe: why it did not run}`")

    def feature(self, name: str) -> FeatureCheck | None:
        """The check ``name`` (``tool_call``, ...), or None when it did not run."""
        return next((f for f in self.features if f.name == name), None)
