"""Imported results of other tools (:mod:`servedeck.bench.external` maps them):
``external-STEM.json``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from servedeck.runs.records.base import Record

__all__ = ["RequestCounts", "BenchEntry", "ExternalBench", "ExternalSummary"]


class RequestCounts(Record):
    """How many requests an external benchmark sent and how they ended (``None``: the file
    does not say). ``total`` = ``completed`` + ``failed`` (+ ``incomplete``)."""

    total: int | None = Field(None, description="requests sent")
    completed: int | None = Field(None, description="requests that succeeded")
    failed: int | None = Field(None, description="requests that failed")
    incomplete: int | None = Field(None, description="requests cut off (guidellm)")


class BenchEntry(Record):
    """One benchmark of a result file (a guidellm report's ``benchmarks[i]``, a line of a
    ``vllm bench serve --append-result`` file), :func:`servedeck.bench.external.list_benchmarks`."""

    index: int = Field(description="1-based position in the file")
    label: str = Field(description="guidellm's own name (`synchronous`, `concurrent@4`, `throughput@512`, "
                                   "`constant@1.55`, `poisson@2.00`); for vLLM `concurrency@8`, `rate@2.00` "
                                   "(`rate@2.00,concurrency@8` with both), `rate@inf`")
    strategy: str = Field(description="the load's kind: guidellm's strategy type, or `concurrency` / `rate` / "
                                      "`burst` for vLLM")
    rate_rps: float | None = Field(None, description="requests per second asked for (None: unlimited)")
    concurrency: int | None = Field(None, description="concurrent requests asked for (streams, max_concurrency)")
    name: str | None = Field(None, description="the tool's own label for the run (`vllm bench serve --label`)")
    requests: int | None = Field(None, description="requests the benchmark sent")

    def describe(self) -> str:
        """``#3 constant@1.55 (1.55 req/s, 186 requests)``."""
        parts = []
        if self.rate_rps is not None:
            parts.append(f"{self.rate_rps:g} req/s")
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} concurrent")
        if self.requests is not None:
            parts.append(f"{self.requests} requests")
        return f"#{self.index} {self.label}" + (f" ({', '.join(parts)})" if parts else "")


class ExternalBench(Record):
    """An external benchmark result mapped onto servedeck's metric names.

    ``metrics[name]`` = ``{"median", "mean", "min", "max", "n"}`` (missing statistics None;
    ``n`` = successful requests) for ``ttft_s``, ``decode_tok_s``, ``e2e_s``,
    ``prefill_tok_s``, ``output_tokens``, ``prompt_tokens`` where the source has them;
    ``server`` holds ``spec_accept_len``, ``spec_per_position``, ``spec_drafts`` when reported.
    ``requests``: :class:`RequestCounts`; ``partial``: some request did not succeed;
    ``failure_reasons``: ``[{"text", "count"}]``, the distinct error messages of failed requests
    (most frequent first) where the file keeps them; ``notes``: sentences for the user.
    """

    source: Literal["vllm-bench-serve", "guidellm"] = Field(description="the tool that wrote the file")
    path: str = Field(description="the file as given")
    metrics: dict[str, dict[str, float | int | None]] = Field(
        description="`metrics[name]`: `median`, `mean`, `min`, `max`, `n` over the successful requests")
    server: dict[str, Any] = Field(default_factory=dict,
                                   description="`spec_accept_len`, `spec_per_position`, `spec_drafts` when reported")
    raw_keys: list[str] = Field(default_factory=list, description="the file's own top-level keys")
    requests: RequestCounts = Field(default_factory=RequestCounts, description="how the requests ended")
    partial: bool = Field(False, description="some request did not succeed")
    failure_reasons: list[dict[str, Any]] = Field(
        default_factory=list, description="`[{\"text\", \"count\"}]`, most frequent first")
    notes: list[str] = Field(default_factory=list, description="sentences for the user")
    benchmark: BenchEntry | None = Field(None, description="which benchmark of the file this is (a file may "
                                                           "hold several: a guidellm sweep, an --append-result file)")
    benchmarks_in_file: int = Field(1, description="how many benchmarks the file holds")


class ExternalSummary(ExternalBench):
    """``external-STEM.json``: an imported external result's metrics
    (:class:`ExternalBench`) with the raw file's ``sha256``."""

    sha256: str = Field(description="sha256 of the raw file stored as `external/NAME`")
