"""KV calibration history from run records, and the run record's ``kv.json``.

The layout of a run directory belongs to :mod:`servedeck.runs.store`; this module only reads
``run.json``, ``startup.json`` and ``effective.json`` through it and writes one file,
``kv.json`` (:class:`~servedeck.runs.records.KvRecord`: prediction beside measurement,
:func:`servedeck.vllm.kv.compare_with_measured`).
"""

from __future__ import annotations

from dataclasses import astuple, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from servedeck.errors import ServedeckError
from servedeck.runs import store
from servedeck.runs.store import RunFile, RunRecord
from servedeck.vllm.kv import CalibrationPoint, calibration_from_startup, compare_with_measured

if TYPE_CHECKING:
    from servedeck.runs.records import KvRecord

M = TypeVar("M")


def _read(run_dir: Path, file: RunFile[M]) -> M | None:
    """A run file's content, or None when it is missing or unreadable."""
    try:
        return store.read(Path(run_dir), file)
    except ServedeckError:
        return None


KV_INDEX_FORMAT = "calibration:" + ",".join(f.name for f in fields(CalibrationPoint))
"""The ``.kv-index.json`` format: a row holds a point's fields in this order, so a change to
:class:`~servedeck.vllm.kv.CalibrationPoint`'s fields is a new format (the cache is rebuilt)."""


def kv_history(runs_dir: Path, *, host: str | None, image_digest: str | None,
               up_to: Path | None = None) -> list[CalibrationPoint]:
    """Calibration points of the recorded runs on ``host`` with ``image_digest``, oldest
    first, that logged a KV pool (runs without ``startup.json`` or a KV size are skipped).

    A deploy reads this before it changes anything, so each run's point is kept in the
    ``runs/.kv-index.json`` cache (:func:`servedeck.runs.history.cached_rows`, keyed by the run
    directory's modification time): a run's files are read once, not at every deploy.

    Args:
        runs_dir: the project's runs directory.
        host, image_digest: what a run must match (``run.json`` ``host`` and
            ``image.digest``); None matches any.
        up_to: only runs up to this run directory's sequence (inclusive): "from what was
            known when that run was the newest".
    """
    from servedeck.runs.history import cached_rows
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    rows = cached_rows(runs_dir, store.KV_INDEX, KV_INDEX_FORMAT, 3, _calibration_row)
    limit = None
    if up_to is not None:
        limit = next((seq for seq, name, _ in rows if (runs_dir / name).resolve() == Path(up_to).resolve()), None)
    out = []
    for seq, _, (run_host, digest, point) in rows:
        if limit is not None and seq > limit:
            continue
        if (host is not None and run_host != host) or (image_digest is not None and digest != image_digest):
            continue
        if point is not None:
            out.append(CalibrationPoint(*point))
    return out


def _calibration_row(run_dir: Path) -> list:
    """``[host, image digest, the run's calibration point's fields or None]`` (the
    ``.kv-index.json`` row of one run)."""
    host, digest = run_identity(run_dir)
    startup = _read(run_dir, store.STARTUP)
    if startup is None or not startup.kv_cache_tokens:
        return [host, digest, None]
    effective = _read(run_dir, store.EFFECTIVE)
    point = calibration_from_startup(run_dir.name, startup.to_dict(), effective.root if effective else None)
    return [host, digest, list(astuple(point))]


def run_identity(run_dir: Path) -> tuple[str | None, str | None]:
    """``(host, image digest)`` of a recorded run (from its ``run.json``)."""
    meta = _read(run_dir, store.RUN_META)
    if meta is None:
        return None, None
    return meta.host, meta.image.digest if meta.image else None


def record_kv(run: RunRecord, prediction: dict[str, Any] | None,
              startup: dict[str, Any] | None) -> KvRecord:
    """Write ``kv.json`` into the run: the prediction made before the deploy beside what the
    server logged (``startup`` None: prediction only, e.g. before the server started).

    Returns:
        the written record (see :func:`servedeck.vllm.kv.compare_with_measured`).
    """
    from servedeck.runs.records import KvRecord
    doc = KvRecord.model_validate(compare_with_measured(prediction, startup or {}))
    run.write(store.KV, doc)
    return doc


def read_kv(run_dir: Path) -> KvRecord | None:
    """A run's ``kv.json``, or None when it has none (or it cannot be read)."""
    return _read(run_dir, store.KV)


def format_kv(doc: KvRecord | None) -> str | None:
    """One line for a run's ``kv.json``: ``predicted 238,931 tokens / 1.82x, logged 236,470 /
    1.80x (+1.0 %, inside the interval)``; None without a prediction."""
    if doc is None or not doc.prediction:
        return None
    p, m, e = doc.prediction, doc.measured, doc.error_pct
    text = f"predicted {p['pool_tokens']:,} tokens"
    if p.get("max_concurrency") is not None:
        text += f" / {p['max_concurrency']:.2f}x"
    if m.kv_cache_tokens is not None:
        text += f", logged {m.kv_cache_tokens:,}"
        if m.max_concurrency is not None:
            text += f" / {m.max_concurrency:.2f}x"
        if e.kv_cache_tokens is not None:
            text += f" ({e.kv_cache_tokens:+.1f} %"
            text += ", inside the interval)" if doc.within_interval else ", OUTSIDE the interval)"
    return text


def plan_kv(profile, service, runs_dir: Path, against: Path, *, shape=None,
            change_threshold_pct: float = 10.0):
    """The KV part of ``invoke plan``: predict ``profile``'s rendered ``service``
    (:class:`servedeck.compose.service.Service`: its effective settings, environment and image
    facts) from the recorded runs on the host of run ``against`` with the profile's image, up to
    and including ``against``.

    Returns:
        ``(KvPrediction or None, findings)`` (see :func:`servedeck.vllm.kv.judge_kv`).
    """
    from servedeck.findings import Finding, Severity
    from servedeck.vllm.kv import judge_kv
    host, _ = run_identity(against)
    history = kv_history(runs_dir, host=host, image_digest=profile.image_ref.digest, up_to=against)
    try:
        settings = service.kv_settings(profile.container.device)
    except ValueError as exc:
        return None, [Finding(severity=Severity.error, rule="kv/bad-setting", path="launcher_env", message=str(exc))]
    return judge_kv(settings, shape, history, change_threshold_pct=change_threshold_pct)
