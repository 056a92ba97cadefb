"""Quality probes: what they measure and the pure analysis of outputs (degenerate text, tool calls,
reasoning, structured output). The results' models (``quality.json``) are the run store's
(:mod:`servedeck.runs.records`: :class:`QualityResult` and its parts), re-exported here.

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
import re
from importlib import resources
from typing import Any, Literal

from servedeck.runs.records import (
    DIRECT_ANSWER_KWARGS,
    FeatureCheck,
    GenerationItem,
    Likelihood,
    LikelihoodItem,
    NeedleItem,
    QualityResult,
    QualitySettings,
)

__all__ = ["DIRECT_ANSWER_KWARGS", "FeatureCheck", "GenerationItem", "Likelihood", "LikelihoodItem", "NeedleItem",
           "QualityResult", "QualitySettings", "quality_texts", "degenerate_kinds", "repetition_loop",
           "classify_tool_call", "classify_reasoning", "classify_structured_output"]

QUALITY_TEXTS = "quality_texts.json"
"""The probes' fixed inputs (package data of ``servedeck.bench``)."""

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


#: Feature statuses that mean the feature is broken.
BROKEN = {"tool_call": {"malformed", "unparsed"}, "reasoning": {"leaked"},
          "structured_output": {"invalid", "truncated"}}


# --------------------------------------------------------------------------- analysis


def _visible(text: str | None) -> str:
    return (text or "").strip()


def repetition_loop(units: list[Any], *, min_repeats: int = LOOP_MIN_REPEATS, max_period: int = LOOP_MAX_PERIOD,
                    min_coverage: float = LOOP_MIN_COVERAGE) -> tuple[int, int] | None:
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
    except json.JSONDecodeError as exc:
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
