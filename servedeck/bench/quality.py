"""Quality probes: what they measure, the typed results stored in a run, and the pure analysis of
outputs (degenerate text, tool calls, reasoning, structured output).

The probes themselves (HTTP to the server's OpenAI API) are in :mod:`servedeck.bench.probes`;
this module imports no HTTP client, so reading and comparing runs stays light. The comparison of
two arms (agreement, paired statistics, the quality gate) is :mod:`servedeck.ab.quality`.

Probes (inputs shipped in ``servedeck/bench/quality_texts.json``, its ``version`` recorded):

* **likelihood**: each fixed text is sent to ``/v1/completions`` with ``prompt_logprobs: 1``
  and ``max_tokens: 1`` (vLLM returns, for every prompt position after the first, the
  log-probability of the actual token and of the most likely token; ``None`` at position 0;
  ``vllm/entrypoints/openai/completion/protocol.py``, 0.10-0.33). Per text: the scored tokens,
  their summed natural-log likelihood, the prompt token ids' sha256 (the tokenizer's identity:
  two arms compare item by item only when it matches) and the most likely token at each
  position (next-token agreement between arms is computed from it).
* **generation**: fixed chat prompts at temperature 0 (greedy), ``max_tokens`` bounded; the
  output token ids (``return_token_ids``) and token strings (``logprobs``) are kept so that two
  arms' outputs compare token by token; each output is checked for degenerate text on its own.
* **features**, what the profile enables: with a tool-call parser, a tool-call request
  (``tool_choice: auto``) must come back as parsed ``tool_calls`` with JSON arguments matching
  the declared parameters; with a reasoning parser, reasoning must land in the reasoning field
  (``reasoning``; ``reasoning_content`` before vLLM 0.29) and no think markup in the answer;
  structured output (``response_format`` ``json_schema``) must give JSON valid for its schema.
* **needle**: a fact placed at several depths of a long context (up to ``max_model_len``),
  asked for afterwards: retrieved or not.

Degenerate output kinds (:func:`degenerate_kinds`): ``empty`` (no visible text, no tool call),
``reasoning_only`` (reasoning but no answer), ``repeated_char`` (one non-space character 16 or
more times in a row, the ``!!!!`` of intel/llm-scaler#647), ``repetition_loop`` (the output
ends in a unit of 1-32 tokens repeated at least 4 times, covering at least half the output).
"""

from __future__ import annotations

import functools
import json
import math
import re
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

QUALITY_TEXTS = "quality_texts.json"
"""The probes' fixed inputs (package data of ``servedeck.bench``)."""

#: The chat template switch for a direct answer (no thinking) used by the probes that want an
#: answer, not a reasoning trace: Qwen3's (and DeepSeek-R1 distills') ``enable_thinking``.
DIRECT_ANSWER_KWARGS: dict[str, Any] = {"enable_thinking": False}

REPEATED_CHAR_MIN = 16
"""A run of this many identical non-space characters is degenerate (``!!!!...``)."""
LOOP_MIN_REPEATS = 4
LOOP_MAX_PERIOD = 32
LOOP_MIN_COVERAGE = 0.5

#: Markup that means a tool call was generated but not parsed into ``tool_calls``
#: (Qwen/Hermes ``<tool_call>``, Qwen3-Coder/qwen3_xml ``<function=``, Mistral ``[TOOL_CALLS]``,
#: Llama 3 ``<|python_tag|>``, DeepSeek ``<｜tool▁calls▁begin｜>``).
TOOL_MARKUP = ("<tool_call>", "<function=", "[TOOL_CALLS]", "<|python_tag|>", "<｜tool▁calls▁begin｜>",
               "<|tool_call", "<tool_calls>")
#: Markup of a reasoning block (Qwen3, DeepSeek-R1 ``<think>``; ``<reasoning>``).
THINK_MARKUP = ("<think>", "</think>", "<reasoning>", "</reasoning>")

ProbeName = Literal["likelihood", "generation", "tool_call", "reasoning", "structured_output", "needle"]


@functools.lru_cache(maxsize=1)
def quality_texts() -> dict[str, Any]:
    """The shipped probe inputs (``quality_texts.json``): ``version``, ``likelihood`` (``id``,
    ``text``), ``prompts`` (``id``, ``text``), ``tool_call``, ``reasoning``,
    ``structured_output`` and ``needle``."""
    return json.loads(resources.files("servedeck.bench").joinpath(QUALITY_TEXTS).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- settings


class QualitySettings(BaseModel):
    """What the probes send; saved in ``quality.json``. Token counts are the server's.

    Defaults are sized to cost a small share of a benchmark run (``benchmarks/quality_overhead.py``)
    and are capped by the deployed ``max_model_len`` when the probes run.

    Attributes:
        likelihood_texts: how many of the shipped texts to score (0 skips the probe).
        generation_prompts: how many of the shipped prompts to generate from (0 skips).
        generation_max_tokens: output tokens per greedy generation.
        feature_max_tokens: output tokens of the tool-call and structured-output requests.
        reasoning_max_tokens: output tokens of the reasoning request (reasoning plus answer).
        needle_depths: where the fact is placed, as fractions of the context (empty skips).
        needle_max_tokens: the needle context, in tokens, at most this (None: up to the
            deployed ``max_model_len``, less the answer).
        needle_answer_tokens: output tokens of a needle answer.
        features: run the tool-call / reasoning / structured-output checks.
        answer_template_kwargs: ``chat_template_kwargs`` of the requests that want a direct
            answer (generation, tool call, structured output, needle).
        request_timeout_s: per request.
    """

    model_config = ConfigDict(extra="forbid")

    likelihood_texts: int = Field(12, ge=0)
    generation_prompts: int = Field(4, ge=0)
    generation_max_tokens: int = Field(24, ge=1)
    feature_max_tokens: int = Field(48, ge=8)
    reasoning_max_tokens: int = Field(48, ge=8)
    needle_depths: list[float] = Field(default_factory=lambda: [0.1, 0.5, 0.9])
    needle_max_tokens: int | None = Field(32768, ge=64)
    needle_answer_tokens: int = Field(8, ge=2)
    features: bool = True
    answer_template_kwargs: dict[str, Any] = Field(default_factory=lambda: dict(DIRECT_ANSWER_KWARGS))
    request_timeout_s: float = Field(600.0, gt=0)

    @field_validator("needle_depths")
    @classmethod
    def _depths(cls, v: list[float]) -> list[float]:
        for d in v:
            if not 0.0 <= d <= 1.0:
                raise ValueError(f"needle depth {d} is not a fraction between 0 and 1")
        return v


# --------------------------------------------------------------------------- results


class LikelihoodItem(BaseModel):
    """One fixed text scored by the server.

    Attributes:
        id: the text's id in ``quality_texts.json``.
        tokens: scored tokens (the prompt's tokens after the first).
        sum_logprob: their summed log-likelihood, natural log (nats).
        token_ids_sha256: sha256 of the prompt token ids (JSON list): the tokenizer's identity.
        truncated: the text was cut to fit ``max_model_len``.
        logprobs: log-likelihood of each scored token (nats).
        top1_ids: the most likely token id at each scored position (the server's rank 1).
        token_text: each prompt token as the server decoded it (index 0: the first token).
        top1_text: the most likely token at each scored position, decoded.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    tokens: int
    sum_logprob: float
    token_ids_sha256: str
    truncated: bool = False
    logprobs: list[float]
    top1_ids: list[int]
    token_text: list[str]
    top1_text: list[str]

    @property
    def mean_logprob(self) -> float:
        """Mean log-likelihood per token (nats)."""
        return self.sum_logprob / self.tokens if self.tokens else float("nan")


class Likelihood(BaseModel):
    """The likelihood probe: the items, or why it could not run."""

    model_config = ConfigDict(extra="forbid")

    items: list[LikelihoodItem] = Field(default_factory=list)
    error: str | None = None

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
        m = self.mean_logprob
        return math.exp(-m) if m is not None else None


class GenerationItem(BaseModel):
    """One greedy generation.

    Attributes:
        id: the prompt's id in ``quality_texts.json``.
        token_ids: output token ids (reasoning and answer), None when the server did not return them.
        tokens: output tokens as text (from ``logprobs``), None when not returned.
        content, reasoning: the answer and the reasoning field of the message.
        finish_reason: ``stop`` / ``length`` / ...
        degenerate: :func:`degenerate_kinds` of this output.
        error: why the request failed (then the other fields are empty).
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    token_ids: list[int] | None = None
    tokens: list[str] | None = None
    content: str | None = None
    reasoning: str | None = None
    finish_reason: str | None = None
    degenerate: list[str] = Field(default_factory=list)
    error: str | None = None


FeatureName = Literal["tool_call", "reasoning", "structured_output"]


class FeatureCheck(BaseModel):
    """One check of a feature the profile enables.

    Attributes:
        name: ``tool_call``, ``reasoning`` or ``structured_output``.
        setting: what enables it (``tool_call_parser=qwen3_xml``, ``reasoning_parser=qwen3``,
            ``response_format=json_schema``).
        status: tool_call: ``parsed`` | ``malformed`` | ``unparsed`` | ``no_call``; reasoning:
            ``separated`` | ``leaked`` | ``no_reasoning`` | ``unfinished`` | ``empty``;
            structured_output: ``valid`` | ``invalid`` | ``truncated`` | ``unsupported``; any:
            ``error`` (the request failed).
        broken: the output shows the feature not working (see :data:`BROKEN`).
        detail: one clause saying what was seen.
        excerpt: the start of the output (for the report).
    """

    model_config = ConfigDict(extra="forbid")

    name: FeatureName
    setting: str
    status: str
    broken: bool
    detail: str = ""
    excerpt: str = ""


#: Feature statuses that mean the feature is broken.
BROKEN = {"tool_call": {"malformed", "unparsed"}, "reasoning": {"leaked"},
          "structured_output": {"invalid", "truncated"}}


class NeedleItem(BaseModel):
    """A fact placed at ``depth`` of a context of ``context_tokens`` tokens, asked for."""

    model_config = ConfigDict(extra="forbid")

    depth: float
    context_tokens: int
    retrieved: bool
    answer: str = ""
    error: str | None = None


class QualityResult(BaseModel):
    """The ``quality.json`` document of a run (see ``docs/run-record.md``).

    Attributes:
        texts_version: version of the shipped inputs (``quality_texts.json``).
        settings: what was sent.
        served_model, base_url, max_model_len: the server probed.
        started_at, finished_at: UTC ISO-8601; duration_s: wall time of the probes;
            durations_s: per phase (``likelihood``, ``generation``, ``checks``).
        likelihood, generation, features, needle: the probes' results (an empty list or a
            None likelihood: the probe did not run).
        skipped: ``{probe: why}`` for probes not run (``tool_call``: no tool-call parser).
    """

    model_config = ConfigDict(extra="forbid")

    texts_version: int
    settings: QualitySettings
    served_model: str
    base_url: str
    max_model_len: int | None = None
    started_at: str = ""
    finished_at: str = ""
    duration_s: float | None = None
    durations_s: dict[str, float] = Field(default_factory=dict)
    likelihood: Likelihood | None = None
    generation: list[GenerationItem] = Field(default_factory=list)
    features: list[FeatureCheck] = Field(default_factory=list)
    needle: list[NeedleItem] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)

    def feature(self, name: str) -> FeatureCheck | None:
        """The check ``name`` (``tool_call``, ...), or None when it did not run."""
        return next((f for f in self.features if f.name == name), None)


# --------------------------------------------------------------------------- analysis


def _visible(text: str | None) -> str:
    return (text or "").strip()


def repetition_loop(units: list[Any], *, min_repeats: int = LOOP_MIN_REPEATS,
                    max_period: int = LOOP_MAX_PERIOD, min_coverage: float = LOOP_MIN_COVERAGE) -> tuple[int, int] | None:
    """The loop at the end of ``units`` (token ids, or words): ``(period, repeats)`` of the
    shortest unit of 1..``max_period`` items that the output ends in at least ``min_repeats``
    times, covering at least ``min_coverage`` of the output; None when there is none."""
    n = len(units)
    for p in range(1, min(max_period, n // min_repeats) + 1):
        run = 0
        i = n - 1
        while i - p >= 0 and units[i] == units[i - p]:
            run += 1
            i -= 1
        span = run + p
        repeats = span // p
        if repeats >= min_repeats and span >= min_coverage * n:
            return p, repeats
    return None


def degenerate_kinds(content: str | None, reasoning: str | None, token_ids: list[int] | None = None,
                     *, tool_calls: bool = False) -> list[str]:
    """The degenerate-output kinds of one answer (module docstring), in a fixed order.

    Args:
        content: the answer text; reasoning: the reasoning field (None: none).
        token_ids: output token ids (reasoning and answer); None: the words of the text are used
            for the loop test.
        tool_calls: the message carried parsed tool calls (an empty answer is then fine).
    """
    kinds: list[str] = []
    answer, thought = _visible(content), _visible(reasoning)
    if not answer and not tool_calls:
        kinds.append("reasoning_only" if thought else "empty")
    text = (reasoning or "") + (content or "")
    if re.search(rf"(\S)\1{{{REPEATED_CHAR_MIN - 1},}}", text):
        kinds.append("repeated_char")
    units: list[Any] = list(token_ids) if token_ids else text.split()
    if repetition_loop(units):
        kinds.append("repetition_loop")
    return kinds


def _excerpt(text: str | None, n: int = 160) -> str:
    t = (text or "").replace("\n", "\\n")
    return t if len(t) <= n else t[: n - 1] + "…"


def classify_tool_call(message: dict[str, Any], tools: list[dict[str, Any]], setting: str) -> FeatureCheck:
    """Judge the answer to a tool-call request (``tool_choice: auto``).

    ``parsed``: ``tool_calls`` name declared functions and their ``arguments`` are JSON objects
    valid for the function's ``parameters`` schema (``jsonschema``); ``malformed``: tool calls
    whose name is unknown or whose arguments are not such JSON; ``unparsed``: no tool calls, but
    tool-call markup (:data:`TOOL_MARKUP`) in the answer or reasoning (the parser did not
    extract it); ``no_call``: the model answered in text.
    """
    import jsonschema

    declared = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    calls = message.get("tool_calls") or []
    content, reasoning = message.get("content"), _reasoning_of(message)
    if calls:
        problems = []
        for call in calls:
            fn = call.get("function") or {}
            name, raw = fn.get("name"), fn.get("arguments")
            if name not in declared:
                problems.append(f"unknown function {name!r}")
                continue
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except (TypeError, ValueError):
                problems.append(f"{name}: arguments are not JSON: {_excerpt(str(raw), 80)}")
                continue
            if not isinstance(args, dict):
                problems.append(f"{name}: arguments are not a JSON object")
                continue
            try:
                jsonschema.validate(args, declared[name])
            except jsonschema.ValidationError as exc:
                problems.append(f"{name}: arguments do not match its parameters: {exc.message}")
        shown = "; ".join(f"{(c.get('function') or {}).get('name')}({(c.get('function') or {}).get('arguments')})"
                          for c in calls)
        if problems:
            return FeatureCheck(name="tool_call", setting=setting, status="malformed", broken=True,
                                detail="; ".join(problems), excerpt=_excerpt(shown))
        return FeatureCheck(name="tool_call", setting=setting, status="parsed", broken=False,
                            detail=f"{len(calls)} call(s): " + ", ".join(
                                str((c.get("function") or {}).get("name")) for c in calls),
                            excerpt=_excerpt(shown))
    text = (content or "") + "\n" + (reasoning or "")
    marks = [m for m in TOOL_MARKUP if m in text]
    if marks:
        return FeatureCheck(name="tool_call", setting=setting, status="unparsed", broken=True,
                            detail=f"tool-call markup {marks[0]!r} in the text, no parsed tool_calls",
                            excerpt=_excerpt(content or reasoning))
    return FeatureCheck(name="tool_call", setting=setting, status="no_call", broken=False,
                        detail="answered in text without a tool call", excerpt=_excerpt(content or reasoning))


def _reasoning_of(message: dict[str, Any]) -> str | None:
    """The reasoning field of a chat message: ``reasoning`` (vLLM 0.29+) or ``reasoning_content``."""
    value = message.get("reasoning")
    return value if value is not None else message.get("reasoning_content")


def classify_reasoning(message: dict[str, Any], finish_reason: str | None, setting: str) -> FeatureCheck:
    """Judge the answer to a request with thinking on.

    ``leaked``: think markup (:data:`THINK_MARKUP`) in the answer (the reasoning parser did not
    take it out); ``separated``: reasoning in the reasoning field and an answer without markup;
    ``unfinished``: reasoning only, cut at the length limit; ``no_reasoning``: an answer, no
    reasoning; ``empty``: neither.
    """
    content, reasoning = message.get("content"), _reasoning_of(message)
    marks = [m for m in THINK_MARKUP if m in (content or "")]
    if marks:
        return FeatureCheck(name="reasoning", setting=setting, status="leaked", broken=True,
                            detail=f"{marks[0]!r} in the answer: reasoning landed in the content",
                            excerpt=_excerpt(content))
    answer, thought = _visible(content), _visible(reasoning)
    if thought and answer:
        status, detail = "separated", "reasoning in the reasoning field, answer in the content"
    elif thought:
        status = "unfinished" if finish_reason == "length" else "no_answer"
        detail = ("reasoning only, cut at the length limit" if finish_reason == "length"
                  else "reasoning only, no answer")
    elif answer:
        status, detail = "no_reasoning", "an answer without reasoning"
    else:
        status, detail = "empty", "no reasoning and no answer"
    return FeatureCheck(name="reasoning", setting=setting, status=status, broken=False, detail=detail,
                        excerpt=_excerpt(content or reasoning))


def classify_structured_output(message: dict[str, Any], finish_reason: str | None,
                               schema: dict[str, Any]) -> FeatureCheck:
    """Judge the answer to a ``response_format: json_schema`` request: ``valid`` JSON for the
    schema, ``invalid``, or ``truncated`` (not JSON and cut at the length limit)."""
    import jsonschema

    setting = "response_format=json_schema"
    content = message.get("content") or ""
    try:
        doc = json.loads(content)
    except ValueError as exc:
        status = "truncated" if finish_reason == "length" else "invalid"
        return FeatureCheck(name="structured_output", setting=setting, status=status, broken=True,
                            detail=f"not JSON ({exc.msg} at char {exc.pos})"
                                   + (", cut at the length limit" if status == "truncated" else ""),
                            excerpt=_excerpt(content))
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as exc:
        return FeatureCheck(name="structured_output", setting=setting, status="invalid", broken=True,
                            detail=f"JSON that does not match the schema: {exc.message}", excerpt=_excerpt(content))
    return FeatureCheck(name="structured_output", setting=setting, status="valid", broken=False,
                        detail="JSON valid for the schema", excerpt=_excerpt(content))
