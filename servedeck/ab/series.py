"""The series as one document: a profile's runs and experiments in order, the way the user
numbers them (run #1 … #N), each experiment with its variable, verdict and cost; and its export
to MLflow.

``invoke series --profile P``: the runs of P and of its relatives (the profiles it extends and
those extending it: one line of experiments, as the user's run #2 → run #3), then every
experiment of which one arm ran such a profile, from the experiment records the reports left
(:mod:`servedeck.ab.history`), oldest first. ``--mlflow URI`` exports the same series to an
MLflow tracking server (``mlflow`` optional extra): one MLflow run per servedeck run (params: the
run's profile, host, image, and its effective engine settings; metrics: the medians of its bench
metrics and its startup facts; the compose file as an artifact; tags: sequence and outcome), and
one per experiment (params: the variable and its two values; metrics: each judged metric's ratio
B/A; tags: verdict, action, the arms' runs; the report as an artifact).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servedeck.ab.compare import fmt_value
from servedeck.ab.history import ExperimentRecord, load_experiments
from servedeck.ab.stats import BENCH_METRICS, BENCH_PHASES, STARTUP_FACTS
from servedeck.errors import ServedeckError
from servedeck.numfmt import fmt_num
from servedeck.runs import store


class SeriesRun(BaseModel):
    """One run of the series."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    sequence: int
    profile: str | None
    host: str | None
    started_at: str | None
    outcome: str | None
    image_digest: str | None = None
    medians: dict[str, float] = Field(default_factory=dict)
    startup: dict[str, float] = Field(default_factory=dict)
    time_to_ready_s: float | None = None


class Series(BaseModel):
    """A profile's runs and experiments in order."""

    model_config = ConfigDict(extra="forbid")
    profile: str
    profiles: list[str]
    runs: list[SeriesRun]
    experiments: list[ExperimentRecord]


def family(runs_dir: Path, profile: str) -> list[str]:
    """``profile``, the profiles it extends and those that extend it (as the run records name
    them: ``run.json`` ``parent_profile``), first the profile itself."""
    parents: dict[str, str | None] = {}
    for _, d in store.run_dirs(runs_dir):
        meta = store.meta_or_none(d)
        if meta is not None and meta.profile:
            parents.setdefault(meta.profile, meta.parent_profile)
    out = [profile]
    up = parents.get(profile)
    while up and up not in out:
        out.append(up)
        up = parents.get(up)
    changed = True
    while changed:
        changed = False
        for child, parent in parents.items():
            if parent in out and child not in out:
                out.append(child)
                changed = True
    return out


def _series_run(run_dir: Path, meta) -> SeriesRun:
    medians: dict[str, float] = {}
    try:
        samples = store.read(run_dir, store.BENCH_SAMPLES)
    except ServedeckError:
        samples = []
    for phase in BENCH_PHASES:
        for metric in BENCH_METRICS:
            values = store.phase_samples(samples, phase, metric)
            if values:
                medians[f"{phase} {metric}"] = float(statistics.median(values))
    try:
        stored = store.read(run_dir, store.STARTUP)
    except ServedeckError:
        stored = None
    startup = stored.to_dict() if stored is not None else {}
    facts = {k: float(startup[k]) for k in STARTUP_FACTS
             if isinstance(startup.get(k), (int, float)) and not isinstance(startup.get(k), bool)}
    return SeriesRun(run_id=run_dir.name, sequence=meta.sequence, profile=meta.profile, host=meta.host,
                     started_at=meta.started_at, outcome=meta.outcome,
                     image_digest=meta.image.digest if meta.image else None, medians=medians, startup=facts,
                     time_to_ready_s=(meta.timings_s or {}).get("container_start_to_ready_s"))


def build_series(runs_dir: Path, profile: str, *, host: str | None = None) -> Series:
    """The series of ``profile`` (module docstring), optionally on one host.

    Raises:
        ServedeckError: the runs directory does not exist, or no run of the profile's family is
            recorded.
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise ServedeckError("runs directory does not exist", file=str(runs_dir),
                             hint="deploy once (invoke deploy) to create the first run record")
    names = family(runs_dir, profile)
    runs = []
    for _, d in store.run_dirs(runs_dir):
        meta = store.meta_or_none(d)
        if meta is not None and meta.profile in names and (host is None or meta.host == host):
            runs.append(_series_run(d, meta))
    if not runs:
        raise ServedeckError(f"no run of profile {profile!r} (or its relatives) is recorded"
                             + (f" on host {host}" if host else ""), file=str(runs_dir),
                             hint="invoke runs lists the recorded runs and their profiles")
    experiments = [e for e in load_experiments(runs_dir, host=host)
                   if e.profile_a in names or e.profile_b in names]
    return Series(profile=profile, profiles=names, runs=runs, experiments=experiments)


def _cost(rec: ExperimentRecord) -> str:
    parts = []
    for key, label in (("time_to_ready_s", "ready"), ("compile_s", "compile"), ("bench_s", "bench")):
        v = rec.costs_s.get(key)
        if v is not None:
            parts.append(f"{label} {fmt_num(v)} s")
    return ", ".join(parts) or "–"


def render_series(series: Series) -> str:
    """The series as markdown: the runs (run #N: profile, outcome, headline numbers), then the
    experiments (variable, verdict, the metric that moved most, cost), then each verdict."""
    lines = [f"# Series of {series.profile}", "",
             f"Profiles: {', '.join(series.profiles)}. {len(series.runs)} runs, {len(series.experiments)} experiments.",
             "", "## Runs", "",
             "| run | profile | host | started | outcome | warm decode tok/s | cold TTFT s | KV pool tokens "
             "| ready s |",
             "|---|---|---|---|---|---:|---:|---:|---:|"]
    for r in series.runs:
        lines.append(f"| #{r.sequence} `{r.run_id}` | {r.profile or '–'} | {r.host or '–'} | {r.started_at or '–'} | "
                     f"{r.outcome or '–'} | {fmt_num(r.medians.get('warm decode_tok_s'))} | "
                     f"{fmt_num(r.medians.get('cold ttft_s'))} | {fmt_num(r.startup.get('kv_cache_tokens'))} | "
                     f"{fmt_num(r.time_to_ready_s)} |")
    lines += ["", "## Experiments", ""]
    if not series.experiments:
        lines.append("_No experiment recorded yet (`invoke ab A B --out FILE` writes one)._")
    else:
        lines += ["| # | A → B | variable | verdict | largest decided change | cost (B) | report |",
                  "|---|---|---|---|---|---|---|"]
        for i, e in enumerate(series.experiments, 1):
            seq_a, seq_b = store.sequence_of(Path(e.runs_a[0])), store.sequence_of(Path(e.runs_b[0]))
            var = (f"`{e.variable}` {fmt_value(e.a)} → {fmt_value(e.b)}" if e.variable
                   else f"{len(e.variables)} variables" if e.variables else "none (A/A)")
            moved = [(k, m.ratio, m.verdict) for k, m in e.metrics.items()
                     if m.ratio and m.verdict in ("faster", "slower", "higher", "lower")]
            big = max(moved, key=lambda kr: abs(kr[1] - 1), default=None)
            change = f"{big[0]} {(big[1] - 1) * 100:+.1f} % ({big[2]})" if big else "none decided"
            lines.append(f"| {i} | #{seq_a} → #{seq_b} | {var} | {e.action}{' (user)' if e.user_verdict else ''} | "
                         f"{change} | {_cost(e)} | {e.report} |")
        lines += ["", "## Verdicts", ""]
        for i, e in enumerate(series.experiments, 1):
            lines.append(f"{i}. **#{store.sequence_of(Path(e.runs_a[0]))} → #{store.sequence_of(Path(e.runs_b[0]))}**: "
                         f"{e.verdict}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# MLflow
# --------------------------------------------------------------------------------------------

def _mlflow():
    try:
        import mlflow
    except ImportError:
        raise ServedeckError("the MLflow export needs the mlflow extra",
                             hint="pip install 'servedeck[mlflow]' (mlflow-skinny)") from None
    return mlflow


def _param(value: Any) -> str:
    text = fmt_value(value)
    return text if len(text) <= 6000 else text[:5997] + "..."  # MLflow's limit on a param value


def _metric_key(key: str) -> str:
    return key.replace(" ", "_")


def export_mlflow(series: Series, runs_dir: Path, tracking_uri: str, *,
                  experiment: str | None = None) -> dict[str, str]:
    """Export the series to MLflow (module docstring).

    Args:
        tracking_uri: an MLflow tracking URI (``http://…``, ``sqlite:///…``, or a local
            ``file:`` path: MLflow 3 keeps its file store in maintenance mode behind
            ``MLFLOW_ALLOW_FILE_STORE``, which is set for this process when the URI is one).
        experiment: the MLflow experiment name (default ``servedeck <profile>``).

    Returns:
        ``{servedeck run id or experiment label: MLflow run id}``. Exporting again adds new MLflow
        runs (MLflow runs are not updated in place).

    Raises:
        ServedeckError: mlflow is not installed, or the tracking server refuses the export.
    """
    mlflow = _mlflow()
    from mlflow.exceptions import MlflowException
    if tracking_uri.startswith("file:") or "://" not in tracking_uri:
        if not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    out: dict[str, str] = {}
    try:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment or f"servedeck {series.profile}")
        for r in series.runs:
            run_dir = Path(runs_dir) / r.run_id
            with mlflow.start_run(run_name=r.run_id) as active:
                params = {"profile": r.profile, "host": r.host, "image_digest": r.image_digest}
                effective = store.read(run_dir, store.EFFECTIVE)
                params.update({f"engine.{k}": v for k, v in (effective.root if effective is not None else {}).items()})
                mlflow.log_params({k: _param(v) for k, v in params.items() if v is not None})
                metrics = {_metric_key(k): v for k, v in r.medians.items()}
                metrics.update({f"startup_{k}": v for k, v in r.startup.items()})
                if r.time_to_ready_s is not None:
                    metrics["time_to_ready_s"] = r.time_to_ready_s
                if metrics:
                    mlflow.log_metrics(metrics)
                mlflow.set_tags({"servedeck.kind": "run", "servedeck.sequence": str(r.sequence),
                                 "servedeck.outcome": r.outcome or "", "servedeck.started_at": r.started_at or ""})
                compose = run_dir / store.COMPOSE
                if compose.exists():
                    mlflow.log_artifact(str(compose))
                out[r.run_id] = active.info.run_id
        for e in series.experiments:
            label = f"{e.runs_a[0]} vs {e.runs_b[0]}"
            with mlflow.start_run(run_name=label) as active:
                mlflow.log_params({k: _param(v) for k, v in {"variable": e.variable, "a": e.a, "b": e.b,
                                                             "knob": e.knob, "host": e.host}.items() if v is not None})
                ratios = {f"ratio_{_metric_key(k)}": m.ratio for k, m in e.metrics.items() if m.ratio is not None}
                if ratios:
                    mlflow.log_metrics(ratios)
                mlflow.set_tags({"servedeck.kind": "experiment", "servedeck.action": e.action,
                                 "servedeck.verdict": e.verdict[:5000], "servedeck.runs_a": ",".join(e.runs_a),
                                 "servedeck.runs_b": ",".join(e.runs_b)})
                report = Path(runs_dir) / e.report
                if report.exists():
                    mlflow.log_artifact(str(report))
                out[label] = active.info.run_id
    except MlflowException as exc:
        raise ServedeckError(f"MLflow refused the export: {exc}", field="--mlflow") from None
    return out
