"""``sequential.json`` (:mod:`servedeck.ab.sequential`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servedeck.runs.records.base import Record

__all__ = ["SequentialDesign", "Look", "SequentialRecord"]


class SequentialDesign(Record):
    """How a sequentially sampled experiment samples and when it stops (the decision rules:
    ``servedeck.ab.sequential``)."""

    alpha: float = Field(0.05, gt=0, lt=1, description="family-wise error rate of difference claims over all "
                                                       "looks (and, separately, of equivalence claims)")
    margin: float = Field(0.03, ge=0, lt=1, description="practical-equivalence margin, relative")
    spending: Literal["pocock", "obrien-fleming"] = Field(
        "pocock", description="the Lan-DeMets alpha-spending function over the information fraction")
    max_requests_a: int = Field(ge=1, description="arm A's sample budget, requests per phase (a recorded "
                                                  "baseline: the requests it has)")
    max_requests_b: int = Field(ge=1, description="arm B's sample budget, requests per phase")
    max_seconds: float | None = Field(None, gt=0, description="the time budget, or null")

    def fraction(self, n_a: int, n_b: int) -> float:
        """The information fraction of a look with ``n_a``/``n_b`` requests per phase:
        ``I(n_a, n_b) / I(max_a, max_b)`` with ``I = n_a·n_b/(n_a+n_b)``, at most 1."""
        def info(x: int, y: int) -> float:
            return x * y / (x + y) if x > 0 and y > 0 else 0.0
        full = info(self.max_requests_a, self.max_requests_b)
        return min(1.0, info(n_a, n_b) / full) if full else 1.0


class Look(Record):
    """One look of a sequential experiment: how many requests per phase each arm had, the levels
    it was held to, and what it decided."""

    requests_a: int = Field(description="arm A's requests per phase at this look (the first ones, in run "
                                        "and file order)")
    requests_b: int = Field(description="arm B's requests per phase at this look")
    final: bool = Field(False, description="the last look the budget allowed (it takes the alpha left)")
    fraction: float | None = Field(None, description="information fraction")
    level_difference: float | None = Field(None, description="family-wise level of difference claims at this look")
    level_equivalence: float | None = Field(None, description="family-wise level of equivalence claims")
    spent_difference: float | None = Field(None, description="what this look counted against the difference "
                                                             "budget (0 when its sample sizes could reject nothing)")
    spent_equivalence: float | None = Field(None, description="the same for equivalence claims")
    decided: dict[str, str] = Field(default_factory=dict, description="`phase metric` -> the verdict this look "
                                                                      "reached")


class SequentialRecord(Record):
    """``sequential.json``: the design of a sequentially sampled experiment, the runs of each arm,
    the looks taken and why sampling stopped; written into every run of the experiment."""

    design: SequentialDesign = Field(description="alpha, margin, spending, budgets")
    runs_a: list[str] = Field(description="run ids of arm A, in order")
    runs_b: list[str] = Field(description="run ids of arm B, in order")
    looks: list[Look] = Field(default_factory=list, description="the looks taken, in order")
    stopped: Literal["decided", "sample budget", "time budget", "interrupted"] | None = Field(
        None, description="why sampling stopped (null: still sampling)")
    started_at: str | None = Field(None, description="UTC, ISO 8601")
    updated_at: str | None = Field(None, description="UTC, ISO 8601, the last look")
    experiment: str | None = Field(None, description="an interleaved experiment's id (run.json `experiment`)")

    def matches(self, runs_a: list[str], runs_b: list[str]) -> bool:
        """True when this record's arms are exactly ``runs_a`` and ``runs_b`` (run ids)."""
        return list(runs_a) == self.runs_a and list(runs_b) == self.runs_b
