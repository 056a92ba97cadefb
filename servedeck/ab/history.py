"""Experiment history: what each A/B report decided, kept as data beside the report.

Every report written by ``invoke ab`` (and every step of ``invoke tune``) leaves
``runs/reports/<A>_vs_<B>/experiment.json`` (:class:`ExperimentRecord`): the arms' runs,
profiles and host, the changed variable with both values, the drafted (or the user's) verdict,
each judged metric's medians, ratio, verdict and noise, and what the experiment cost (time to
ready, compile, bench). ``invoke next`` reads a host's records for its verdicts, noise and
measured costs; the series document and the MLflow export list a profile's records in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.jsonio import read_json_file
from servedeck.runs import store

EXPERIMENT_FILE = "experiment.json"


class MetricRecord(BaseModel):
    """One judged metric of an experiment (medians of each arm, ``ratio`` = B/A)."""

    model_config = ConfigDict(extra="forbid")
    a: float | None
    b: float | None
    ratio: float | None
    verdict: str
    noise: float | None = None
    n_a: int = 0
    n_b: int = 0


class ExperimentRecord(BaseModel):
    """``experiment.json``: one A/B experiment as data.

    Attributes:
        report: the report's path relative to the runs directory.
        runs_a, runs_b: run ids of each arm (several for an interleaved experiment).
        host, profile_a, profile_b: where and what.
        variable, a, b: the one changed variable and its values (None: several or none changed,
            ``variables`` lists them).
        knob: the knowledge base's knob of the variable (:mod:`servedeck.ab.knowledge`).
        action: the verdict's action (``keep``, ``revert``, ``trade-off``, ``undecided``,
            ``no change``, ``none``); verdict: its sentence; user_verdict: the user's text won.
        metrics: judged bench metrics keyed ``phase name``; startup: startup facts of both arms.
        costs_s: B's measured costs in seconds (``time_to_ready_s``, ``compile_s``, ``bench_s``).
        sequential: the sequential design's stop, when sampled sequentially.
        written_at: UTC.
    """

    model_config = ConfigDict(extra="forbid")
    report: str
    runs_a: list[str]
    runs_b: list[str]
    host: str | None
    profile_a: str | None
    profile_b: str | None
    variable: str | None
    a: Any = None
    b: Any = None
    variables: list[str] = Field(default_factory=list)
    knob: str | None = None
    action: str
    verdict: str
    user_verdict: bool = False
    metrics: dict[str, MetricRecord] = Field(default_factory=dict)
    startup: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    costs_s: dict[str, float | None] = Field(default_factory=dict)
    sequential: str | None = None
    written_at: str

    @property
    def sequence(self) -> int:
        """B's (first) run sequence: the experiment's place in the series."""
        return store.sequence_of(Path(self.runs_b[0])) or 0


def save_experiment(report_dir: Path, record: ExperimentRecord) -> Path:
    """Write ``record`` as ``experiment.json`` into the report's directory (atomically)."""
    return atomic_write(Path(report_dir) / EXPERIMENT_FILE, record.model_dump_json(indent=2) + "\n",
                        mode=store.RUN_FILE_MODE)


def load_experiments(runs_dir: Path, *, host: str | None = None, profile: str | None = None) -> list[ExperimentRecord]:
    """Every experiment record under ``runs/reports/`` (and tune's reports under
    ``runs/tune/*/reports/``), oldest B run first; with ``host``, that host's; with ``profile``,
    those where either arm ran it. Unreadable records are skipped (history is context)."""
    runs_dir = Path(runs_dir)
    paths = [*runs_dir.glob(f"{store.REPORTS_DIR}/*/{EXPERIMENT_FILE}"),
             *runs_dir.glob(f"tune/*/{store.REPORTS_DIR}/*/{EXPERIMENT_FILE}")]
    out = []
    for path in paths:
        try:
            rec = ExperimentRecord.model_validate(read_json_file(path))
        except (OSError, ValueError, ValidationError, ServedeckError):
            continue
        if host is not None and rec.host != host:
            continue
        if profile is not None and profile not in (rec.profile_a, rec.profile_b):
            continue
        out.append(rec)
    seen: set[tuple[str, ...]] = set()
    unique = []
    for rec in sorted(out, key=lambda r: (r.sequence, r.written_at)):
        key = (*r_ids(rec),)
        if key in seen:
            continue
        seen.add(key)
        unique.append(rec)
    return unique


def r_ids(rec: ExperimentRecord) -> tuple[str, ...]:
    """The runs of both arms: what identifies an experiment."""
    return (*rec.runs_a, "|", *rec.runs_b)


def bench_seconds(run_dir: Path) -> float | None:
    """Wall time of a run's benchmark (``bench.json`` ``finished_at - started_at``), or None."""
    from servedeck.errors import ServedeckError
    try:
        doc = store.read(run_dir, store.BENCH_SUMMARY)
    except ServedeckError:  # a cost is context
        return None
    if doc is None:
        return None
    start, end = store.iso_seconds(doc.started_at), store.iso_seconds(doc.finished_at)
    return end - start if start is not None and end is not None and end >= start else None
