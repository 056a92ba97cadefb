"""``lm_eval.json``: lm-evaluation-harness on the user's tasks (:mod:`servedeck.bench.lmeval`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servedeck.runs.records.base import Record

__all__ = ["LmEvalSettings", "TaskMetric", "LmEvalResult"]


class LmEvalSettings(Record):
    """What lm-evaluation-harness evaluated (``invoke bench --lm-eval TASKS``)."""

    tasks: list[str] = Field(min_length=1, description="lm-eval task (or group) names")
    include_path: str | None = Field(None, description="a directory of the user's task YAML files")
    limit: int | None = Field(None, ge=1, description="documents per task (null: all)")
    num_fewshot: int | None = Field(None, ge=0, description="few-shot examples (null: the task's default)")
    backend: Literal["local-chat-completions", "local-completions"] = Field(
        "local-chat-completions", description="lm-eval's OpenAI-compatible backend")
    tokenizer_backend: Literal["none", "remote", "huggingface"] | None = Field(
        None, description="null: `none` for chat, `remote` (the server's /tokenize) for completions")
    tokenizer: str | None = Field(None, description="a local tokenizer directory for `huggingface`")
    max_gen_toks: int = Field(256, ge=1, description="output tokens per generation at most")
    timeout_s: int = Field(600, ge=1, description="per request")


class TaskMetric(Record):
    """One task metric over the documents, and each document's score."""

    task: str = Field(description="lm-eval's task name")
    metric: str = Field(description="lm-eval's metric name (`exact_match`, `acc`, ...)")
    filter: str = Field("none", description="lm-eval's filter name")
    value: float | None = Field(description="the task's aggregate")
    stderr: float | None = Field(None, description="lm-eval's standard error")
    higher_is_better: bool = Field(True, description="the metric's direction")
    per_doc: dict[str, float] = Field(default_factory=dict, description="`{doc_id: score}`")

    @property
    def key(self) -> str:
        """``task/metric`` (``task/metric [filter]`` for a filter other than ``none``)."""
        return f"{self.task}/{self.metric}" + ("" if self.filter == "none" else f" [{self.filter}]")


class LmEvalResult(Record):
    """``lm_eval.json``: lm-evaluation-harness scores on the user's tasks."""

    lm_eval_version: str = Field(description="the lm-eval release that ran")
    settings: LmEvalSettings = Field(description="what was evaluated")
    served_model: str = Field(description="the model name the requests named")
    base_url: str = Field(description="`http://host:port` of the server")
    started_at: str = Field(description="UTC, ISO 8601")
    finished_at: str = Field(description="UTC, ISO 8601")
    duration_s: float = Field(description="wall time")
    task_metrics: list[TaskMetric] = Field(description="one per task, metric and filter")

    def metrics(self) -> dict[str, TaskMetric]:
        """The metrics by :attr:`TaskMetric.key`."""
        return {m.key: m for m in self.task_metrics}
