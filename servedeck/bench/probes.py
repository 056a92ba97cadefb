"""Quality probes against a running vLLM OpenAI-compatible server (what they measure and the
result models: :mod:`servedeck.bench.quality`).

Every request is sent alone, one after the other, at temperature 0 with a fixed seed, so that two
deployments of one configuration see the same batch shapes and give the same numbers (an A/A
agrees 100 %). A probe that fails records its error instead of raising: the benchmark's numbers
are already stored when the probes run, and the comparison says which probe is missing.

Request shapes: vLLM's OpenAI server (``vllm/entrypoints/openai/completion/protocol.py`` and
``chat_completion/protocol.py``, 0.32): ``prompt_logprobs`` (an int; ``1`` returns the actual
token and the rank-1 token at each prompt position), ``return_token_ids``, ``chat_template_kwargs``,
``response_format`` ``json_schema``; ``POST /tokenize`` counts tokens as the server does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from servedeck.bench.quality import (
    FeatureCheck,
    GenerationItem,
    Likelihood,
    LikelihoodItem,
    NeedleItem,
    QualityResult,
    QualitySettings,
    classify_reasoning,
    classify_structured_output,
    classify_tool_call,
    degenerate_kinds,
    quality_texts,
)
from servedeck.runs.store import utcnow

ProgressCallback = Callable[[int, int, str], None]
NEEDLE_SLACK_TOKENS = 16
"""Room left beside a needle context for the depths whose insertion tokenizes a little longer."""
MIN_NEEDLE_CONTEXT = 64


@dataclass(frozen=True)
class ServerFeatures:
    """What the deployed profile enables (from the run's effective settings).

    Attributes:
        tool_call_parser: ``--tool-call-parser`` (None: off).
        enable_auto_tool_choice: ``--enable-auto-tool-choice`` (``tool_choice: auto`` needs it).
        reasoning_parser: ``--reasoning-parser`` (None: off).
        max_model_len: the deployed context length (None: read from ``/v1/models``).
    """

    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    reasoning_parser: str | None = None
    max_model_len: int | None = None

    @classmethod
    def from_effective(cls, effective: dict[str, Any] | None, max_model_len: int | None = None) -> ServerFeatures:
        """From ``effective.json`` (keys: vLLM dest names)."""
        eff = effective or {}
        return cls(tool_call_parser=eff.get("tool_call_parser") or None,
                   enable_auto_tool_choice=bool(eff.get("enable_auto_tool_choice")),
                   reasoning_parser=eff.get("reasoning_parser") or None,
                   max_model_len=max_model_len or (eff.get("max_model_len") if isinstance(
                       eff.get("max_model_len"), int) else None))


class _ProbeError(Exception):
    """One request failed (recorded in the result, not raised to the caller)."""


class _Api:
    """The few requests the probes send, with one error shape."""

    def __init__(self, client: httpx.Client, base_url: str, model: str, timeout_s: float):
        self.client, self.base, self.model = client, base_url.rstrip("/"), model
        self.timeout = httpx.Timeout(timeout_s, connect=30.0)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self.client.post(self.base + path, json={"model": self.model, **body}, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise _ProbeError(f"POST {path}: {type(exc).__name__}: {exc}") from None
        if r.status_code != 200:
            raise _ProbeError(f"POST {path} answered HTTP {r.status_code}: {r.text[:300]}")
        try:
            return r.json()
        except ValueError:
            raise _ProbeError(f"POST {path} did not answer JSON: {r.text[:200]}") from None

    def count_completion(self, text: str) -> tuple[int, list[int]]:
        """Tokens of ``text`` as a ``/v1/completions`` prompt: (count, ids)."""
        doc = self.post("/tokenize", {"prompt": text})
        return int(doc["count"]), list(doc.get("tokens") or [])

    def count_chat(self, text: str, template_kwargs: dict[str, Any]) -> int:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        return int(self.post("/tokenize", body)["count"])

    def chat_doc(self, text: str, *, max_tokens: int, template_kwargs: dict[str, Any] | None = None,
                 **extra: Any) -> dict[str, Any]:
        """One user message, greedy; the whole answer document (``choices``, ``usage``)."""
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                                "temperature": 0.0, "seed": 0, **extra}
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        doc = self.post("/v1/chat/completions", body)
        if not doc.get("choices"):
            raise _ProbeError("the chat answer has no choices")
        return doc

    def chat(self, text: str, **kwargs: Any) -> dict[str, Any]:
        """:meth:`chat_doc`'s first choice."""
        return self.chat_doc(text, **kwargs)["choices"][0]


def _sha(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


# --------------------------------------------------------------------------- likelihood


def _fit_text(api: _Api, text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut by words until the server counts at most ``limit`` prompt tokens (not counted
    when its UTF-8 bytes, plus room for special tokens, fit: a byte-level tokenizer gives at most
    one token per byte)."""
    if len(text.encode()) + 8 <= limit:
        return text, False
    count, _ = api.count_completion(text)
    if count <= limit:
        return text, False
    words = text.split(" ")
    while count > limit and len(words) > 1:
        keep = max(1, min(len(words) - 1, int(len(words) * limit / count) - 1))
        words = words[:keep]
        count, _ = api.count_completion(" ".join(words))
    return " ".join(words), True


def score_text(api: _Api, item_id: str, text: str, max_model_len: int | None) -> LikelihoodItem:
    """Score one text with ``prompt_logprobs: 1`` (module docstring of :mod:`servedeck.bench.quality`).

    Raises:
        _ProbeError: the request failed or the answer carries no prompt log-probabilities.
    """
    truncated = False
    if max_model_len:
        text, truncated = _fit_text(api, text, max_model_len - 1)
    doc = api.post("/v1/completions", {"prompt": text, "max_tokens": 1, "temperature": 0.0, "seed": 0,
                                       "prompt_logprobs": 1, "return_token_ids": True})
    choice = (doc.get("choices") or [{}])[0]
    plp = choice.get("prompt_logprobs") or doc.get("prompt_logprobs")
    ids = choice.get("prompt_token_ids") or doc.get("prompt_token_ids")
    if not plp or not ids or len(plp) != len(ids):
        raise _ProbeError("the server returned no prompt_logprobs (vLLM's prompt_logprobs request "
                          "field; a server without it cannot be probed for likelihood)")
    logprobs: list[float] = []
    top1_ids: list[int] = []
    top1_text: list[str] = []
    token_text: list[str] = []
    for pos, (tok, entry) in enumerate(zip(ids, plp)):
        if pos == 0 or entry is None:
            if pos == 0:
                token_text.append("")
            continue
        actual = entry.get(str(tok))
        if actual is None:
            raise _ProbeError(f"prompt_logprobs at position {pos} lacks the prompt token {tok}")
        logprobs.append(float(actual["logprob"]))
        token_text.append(str(actual.get("decoded_token") or ""))
        best_id, best = min(entry.items(), key=lambda kv: kv[1].get("rank") or 1 << 30)
        top1_ids.append(int(best_id))
        top1_text.append(str(best.get("decoded_token") or ""))
    return LikelihoodItem(id=item_id, tokens=len(logprobs), sum_logprob=sum(logprobs), token_ids_sha256=_sha(list(ids)),
                          truncated=truncated, logprobs=logprobs, top1_ids=top1_ids,
                          token_text=token_text, top1_text=top1_text)


# --------------------------------------------------------------------------- generation


def _message_tokens(choice: dict[str, Any]) -> tuple[list[int] | None, list[str] | None]:
    ids = choice.get("token_ids")
    content = ((choice.get("logprobs") or {}).get("content")) or None
    tokens = [str(t.get("token", "")) for t in content] if content else None
    return (list(ids) if ids is not None else None), tokens


def generate(api: _Api, item_id: str, prompt: str, settings: QualitySettings) -> GenerationItem:
    """One greedy generation (reasoning kept apart by the server's parser, if any)."""
    try:
        choice = api.chat(prompt, max_tokens=settings.generation_max_tokens,
                          template_kwargs=settings.answer_template_kwargs, return_token_ids=True,
                          logprobs=True, top_logprobs=0)
    except _ProbeError as exc:
        return GenerationItem(id=item_id, error=str(exc))
    msg = choice.get("message") or {}
    ids, tokens = _message_tokens(choice)
    reasoning = msg.get("reasoning") if msg.get("reasoning") is not None else msg.get("reasoning_content")
    return GenerationItem(id=item_id, token_ids=ids, tokens=tokens, content=msg.get("content"),
                          reasoning=reasoning, finish_reason=choice.get("finish_reason"),
                          degenerate=degenerate_kinds(msg.get("content"), reasoning, ids,
                                                      tool_calls=bool(msg.get("tool_calls"))))


# --------------------------------------------------------------------------- features


def check_tool_call(api: _Api, features: ServerFeatures, settings: QualitySettings) -> FeatureCheck:
    spec = quality_texts()["tool_call"]
    setting = f"tool_call_parser={features.tool_call_parser}"
    try:
        choice = api.chat(spec["prompt"], max_tokens=settings.feature_max_tokens,
                          template_kwargs=settings.answer_template_kwargs, tools=spec["tools"], tool_choice="auto")
    except _ProbeError as exc:
        return FeatureCheck(name="tool_call", setting=setting, status="error", broken=False, detail=str(exc))
    return classify_tool_call(choice.get("message") or {}, spec["tools"], setting)


def check_reasoning(api: _Api, features: ServerFeatures, settings: QualitySettings) -> FeatureCheck:
    setting = f"reasoning_parser={features.reasoning_parser}"
    try:
        choice = api.chat(quality_texts()["reasoning"]["prompt"], max_tokens=settings.reasoning_max_tokens)
    except _ProbeError as exc:
        return FeatureCheck(name="reasoning", setting=setting, status="error", broken=False, detail=str(exc))
    return classify_reasoning(choice.get("message") or {}, choice.get("finish_reason"), setting)


def check_structured_output(api: _Api, settings: QualitySettings) -> FeatureCheck:
    spec = quality_texts()["structured_output"]
    fmt = {"type": "json_schema", "json_schema": {"name": "probe", "schema": spec["schema"], "strict": True}}
    try:
        choice = api.chat(spec["prompt"], max_tokens=settings.feature_max_tokens,
                          template_kwargs=settings.answer_template_kwargs, response_format=fmt)
    except _ProbeError as exc:
        status = "unsupported" if "HTTP 400" in str(exc) else "error"
        return FeatureCheck(name="structured_output", setting="response_format=json_schema", status=status,
                            broken=False, detail=str(exc))
    return classify_structured_output(choice.get("message") or {}, choice.get("finish_reason"), spec["schema"])


# --------------------------------------------------------------------------- needle


def _haystack_sentences() -> list[str]:
    """The sentences of the shipped likelihood texts (prose only), the needle probe's filler."""
    out = []
    for item in quality_texts()["likelihood"]:
        if "def " in item["text"]:
            continue
        out += [s.strip().rstrip(".") + "." for s in item["text"].split(". ") if s.strip()]
    return out


def needle_prompt(sentences: list[str], depth: float) -> str:
    """The needle request's text: ``sentences`` with the fact inserted at ``depth``, then the question."""
    spec = quality_texts()["needle"]
    at = round(depth * len(sentences))
    body = " ".join([*sentences[:at], spec["fact"], *sentences[at:]])
    return f"{body}\n\n{spec['question']}"


def size_haystack(count: Callable[[str], int], target_tokens: int,
                  chars_per_token: float | None = None) -> tuple[list[str], int]:
    """Filler sentences (cycled) such that the needle request at depth 0.5 counts at most
    ``target_tokens`` tokens and about one sentence less at the most: (sentences, that count).
    ``count`` is the server's count of the whole request; ``chars_per_token`` (known from the
    likelihood texts, the same prose) makes the first guess, so one or two counts usually do."""
    base = _haystack_sentences()
    per_sentence = sum(len(x) + 1 for x in base) / len(base)

    def take(n: int) -> list[str]:
        return [base[i % len(base)] for i in range(n)]
    n = max(1, int(0.97 * target_tokens * chars_per_token / per_sentence)) if chars_per_token else len(base)
    used = count(needle_prompt(take(n), 0.5))
    for _ in range(8):  # secant steps on the tokens-per-sentence rate
        rate = max(used / n, 1.0)
        if used <= target_tokens and target_tokens - used < 2 * rate:
            break
        guess = max(1, int(n + (target_tokens - used) / rate))
        if guess == n:
            break
        n, used = guess, count(needle_prompt(take(guess), 0.5))
    while used > target_tokens and n > 1:
        n = max(1, n - max(1, int((used - target_tokens) / max(used / n, 1.0))))
        used = count(needle_prompt(take(n), 0.5))
    return take(n), used


def plan_needle(api: _Api, settings: QualitySettings, max_model_len: int | None,
                chars_per_token: float | None = None) -> tuple[list[str], int, str | None]:
    """Size the needle's context: (filler sentences, the request's tokens at depth 0.5, why the
    probe is skipped or None).

    Raises:
        _ProbeError: the server could not count tokens.
    """
    cap = settings.needle_max_tokens
    if max_model_len:
        room = max_model_len - settings.needle_answer_tokens - NEEDLE_SLACK_TOKENS
        cap = room if cap is None else min(cap, room)
    if cap is None:
        return [], 0, "the server's max_model_len is unknown and needle_max_tokens is unset"
    if cap < MIN_NEEDLE_CONTEXT:
        return [], 0, f"max_model_len {max_model_len} leaves no room for a needle context"
    kwargs = settings.answer_template_kwargs
    sentences, tokens = size_haystack(lambda text: api.count_chat(text, kwargs), cap, chars_per_token)
    return sentences, tokens, None


def ask_needle(api: _Api, sentences: list[str], depth: float, settings: QualitySettings) -> NeedleItem:
    """One needle request: the fact at ``depth``, asked for; retrieved when the answer (or the
    reasoning) holds it."""
    try:
        doc = api.chat_doc(needle_prompt(sentences, depth), max_tokens=settings.needle_answer_tokens,
                           template_kwargs=settings.answer_template_kwargs)
    except _ProbeError as exc:
        return NeedleItem(depth=depth, context_tokens=0, retrieved=False, error=str(exc))
    msg = doc["choices"][0].get("message") or {}
    said = (msg.get("content") or "") + " " + (msg.get("reasoning") or msg.get("reasoning_content") or "")
    tokens = int((doc.get("usage") or {}).get("prompt_tokens") or 0)
    return NeedleItem(depth=depth, context_tokens=tokens, retrieved=quality_texts()["needle"]["answer"] in said,
                      answer=said.strip()[:200])


# --------------------------------------------------------------------------- run


def run_probes(base_url: str, served_model: str, *, settings: QualitySettings | None = None,
               features: ServerFeatures | None = None, client: httpx.Client | None = None,
               progress: ProgressCallback | None = None) -> QualityResult:
    """Run the quality probes against the server at ``base_url``.

    The likelihood texts and the greedy generations are sent one at a time (their numbers must
    come out identical from two deployments of one configuration, so every request sees the same
    batch: itself); the pass/fail checks (tool call, reasoning, structured output, the needle
    depths) are then sent together, and the server batches them.

    Args:
        base_url: ``http://host:port``.
        served_model: the served model name requests name.
        settings: what to send (default :class:`QualitySettings`).
        features: what the profile enables (tool-call / reasoning parsers, ``max_model_len``);
            unknown ``max_model_len`` is read from ``/v1/models``.
        client: an ``httpx.Client`` (carrying the API key, if the server wants one).
        progress: ``progress(done, total, label)`` before each phase and at the end.

    Returns:
        the :class:`QualityResult`; failed requests are recorded in it, not raised.

    Raises:
        ServedeckError: the server is unreachable or does not serve ``served_model``.
    """
    from concurrent.futures import ThreadPoolExecutor

    from servedeck.bench.client import check_server_identity

    settings = settings or QualitySettings()
    features = features or ServerFeatures()
    own = client is None
    c = client or httpx.Client(timeout=httpx.Timeout(60.0, connect=30.0))
    texts = quality_texts()
    t0 = time.perf_counter()
    result = QualityResult(texts_version=int(texts["version"]), settings=settings, served_model=served_model,
                           base_url=base_url, started_at=utcnow())
    try:
        entry = check_server_identity(base_url, served_model, client=c)
        max_len = features.max_model_len or (int(entry["max_model_len"]) if entry.get("max_model_len") else None)
        result.max_model_len = max_len
        api = _Api(c, base_url, served_model, settings.request_timeout_s)
        lik_items = texts["likelihood"][: settings.likelihood_texts]
        prompts = texts["prompts"][: settings.generation_prompts]

        def likelihood() -> None:
            lik = Likelihood()
            for item in lik_items:
                try:
                    lik.items.append(score_text(api, item["id"], item["text"], max_len))
                except _ProbeError as exc:
                    lik.error, lik.items = str(exc), []
                    break
            result.likelihood = lik

        def generation() -> None:
            result.generation = [generate(api, p["id"], p["text"], settings) for p in prompts]

        def checks() -> None:
            jobs: list[Callable[[], Any]] = []
            if settings.features:
                if features.tool_call_parser and features.enable_auto_tool_choice:
                    jobs.append(lambda: check_tool_call(api, features, settings))
                else:
                    result.skipped["tool_call"] = ("no tool-call parser" if not features.tool_call_parser
                                                   else "tool_choice auto needs --enable-auto-tool-choice")
                if features.reasoning_parser:
                    jobs.append(lambda: check_reasoning(api, features, settings))
                else:
                    result.skipped["reasoning"] = "no reasoning parser"
                jobs.append(lambda: check_structured_output(api, settings))
            else:
                result.skipped.update({k: "features off" for k in ("tool_call", "reasoning", "structured_output")})
            if settings.needle_depths:
                lik = result.likelihood
                cpt = None
                if lik is not None and lik.tokens:
                    chars = sum(len(t["text"]) for t in lik_items if t["id"] in {i.id for i in lik.items})
                    cpt = chars / lik.tokens
                try:
                    sentences, _, why = plan_needle(api, settings, max_len, cpt)
                except _ProbeError as exc:
                    sentences, why = [], None
                    result.needle = [NeedleItem(depth=d, context_tokens=0, retrieved=False, error=str(exc))
                                     for d in settings.needle_depths]
                if why:
                    result.skipped["needle"] = why
                elif sentences:
                    jobs += [functools.partial(ask_needle, api, sentences, d, settings) for d in settings.needle_depths]
            else:
                result.skipped["needle"] = "no needle depths"
            if not jobs:
                return
            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                done = list(pool.map(lambda job: job(), jobs))
            result.features = [d for d in done if isinstance(d, FeatureCheck)]
            result.needle += [d for d in done if isinstance(d, NeedleItem)]

        steps: list[tuple[str, Callable[[], None]]] = []
        if lik_items:
            steps.append(("likelihood", likelihood))
        else:
            result.skipped["likelihood"] = "likelihood_texts is 0"
        if prompts:
            steps.append(("generation", generation))
        else:
            result.skipped["generation"] = "generation_prompts is 0"
        steps.append(("checks", checks))
        for done_steps, (label, step) in enumerate(steps):
            if progress:
                progress(done_steps, len(steps), label)
            t_step = time.perf_counter()
            step()
            result.durations_s[label] = round(time.perf_counter() - t_step, 3)
        if progress:
            progress(len(steps), len(steps), "done")
    finally:
        if own:
            c.close()
    result.finished_at = utcnow()
    result.duration_s = round(time.perf_counter() - t0, 3)
    return result
