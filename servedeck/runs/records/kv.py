"""``kv.json``: the KV-capacity prediction made before the deploy beside what the server logged."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from servedeck.runs.records.base import Record

__all__ = ["KvMeasured", "KvError", "KvRecord"]


class KvMeasured(Record):
    """What the server logged of its KV pool (``startup.json``)."""

    kv_cache_tokens: int | None = Field(None, description="the pool in tokens")
    max_concurrency: float | None = Field(None, description="requests of max_model_len tokens the pool holds")
    available_kv_cache_gib: float | None = Field(None, description="memory of the pool, GiB")


class KvError(Record):
    """Prediction against measurement, percent."""

    kv_cache_tokens: float | None = Field(None, description="(predicted / logged - 1) x 100")
    max_concurrency: float | None = Field(None, description="(predicted / logged - 1) x 100")


class KvRecord(Record):
    """``kv.json``: the KV-capacity prediction made before the deploy beside what the server
    logged (``servedeck.vllm.kv.compare_with_measured``)."""

    prediction: dict[str, Any] | None = Field(
        None, description="`servedeck.vllm.kv.KvPrediction.to_dict()`: `pool_tokens` (`_low`, `_high`), "
                          "`max_concurrency` (`_low`, `_high`), `available_kv_gib`, `max_model_len`, ...; "
                          "null when nothing could be predicted")
    measured: KvMeasured = Field(default_factory=KvMeasured, description="what the server logged")
    error_pct: KvError = Field(default_factory=KvError, description="the prediction's error")
    within_interval: bool | None = Field(None, description="the logged pool lies in the predicted interval")
