"""Run history: list runs, resolve run references (``latest:PROFILE``, ``newest``, ``3``, ...).

Listing 10,000 runs must not read 30,000 files: :func:`list_runs` keeps a cache of one summary
row per run in ``runs/.index.json`` (:func:`cached_rows`, which the KV calibration's
``runs/.kv-index.json`` uses too) keyed by the run directory's modification time (every
atomic write into a run directory renames a file into it, which moves that time). A row is
recomputed whenever its directory changed; rows of directories changed in the last
:data:`HOT_S` seconds are never cached (file-system timestamps are coarser than a burst of
writes). The index is a cache, not a source of truth: deleting it loses nothing, and a listing
rewrites it atomically when a row changed. A listing imports no pydantic: the rows it must
recompute read the run's files through the store, typed, only then. Resolving a reference reads
only ``run.json`` files, newest first, and stops at the first match.

Reference forms (:func:`resolve_run`):

* ``latest`` / ``latest:PROFILE``: the newest run (of PROFILE) that **served and was
  benchmarked**: what an A/B compares;
* ``newest`` / ``newest:PROFILE``: the newest run (of PROFILE) whatever its state;
* a run id (``0003-batch-8192-b70``), a sequence number (``3`` or ``0003``), or a path to a run
  directory.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.jsonio import parse
from servedeck.runs import store

if TYPE_CHECKING:
    from servedeck.runs.records import RunMeta

INDEX_FORMAT = 3
HOT_S = 2.0
"""Rows of run directories modified this recently are recomputed on every listing."""

REF_FORMS = "a run id, a sequence number, latest[:PROFILE] (served and benchmarked) or newest[:PROFILE] (any state)"


@dataclass(slots=True)
class RunSummary:
    """One line of run history (a plain dataclass: listings build ten thousand of them).

    Attributes:
        run_id: directory name (``0003-batch-8192-b70``); sequence: its counter.
        kind: ``deploy`` or ``rollback``; started_at, host, profile, outcome: from run.json
            (None when run.json is unreadable); image_digest: ``sha256:…``.
        benchmarked: the run holds bench samples.
        kv_cache_tokens: from startup.json; warm_decode_tok_s: median of warm ``decode_tok_s``
            samples; cold_ttft_s: median of cold ``ttft_s`` samples (None when not benchmarked).
        start_to_ready_s: run.json ``timings_s.container_start_to_ready_s`` (seconds).
        runs_dir: the runs directory (``path`` is ``runs_dir / run_id``).
    """

    run_id: str
    sequence: int
    kind: str | None
    started_at: str | None
    host: str | None
    profile: str | None
    outcome: str | None
    image_digest: str | None
    benchmarked: bool
    kv_cache_tokens: int | None
    warm_decode_tok_s: float | None
    cold_ttft_s: float | None
    start_to_ready_s: float | None
    runs_dir: Path

    @property
    def path(self) -> Path:
        """The run directory."""
        return self.runs_dir / self.run_id

    @property
    def comparable(self) -> bool:
        """Served and benchmarked: what ``latest`` selects."""
        return self.outcome == "ready" and self.benchmarked

    def cached(self) -> list:
        """The row as stored in the index (every field but ``runs_dir``, in field order)."""
        return [getattr(self, f) for f in _CACHED_FIELDS]


_CACHED_FIELDS = [f for f in RunSummary.__slots__ if f != "runs_dir"]


def _existing_dir(runs_dir: Path) -> Path:
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise ServedeckError("runs directory does not exist", file=str(runs_dir),
                             hint="deploy once (invoke deploy) to create the first run record")
    return runs_dir


def _median(values: list[float]) -> float | None:
    import statistics  # here: `runs` and `show` do not need it
    return float(statistics.median(values)) if values else None


def _profile_from_name(run_dir: Path) -> str | None:
    parts = Path(run_dir).name.split("-", 1)
    if len(parts) == 2 and "-" in parts[1]:
        return parts[1].rsplit("-", 1)[0]
    return None


def summarize_run(run_dir: Path) -> RunSummary:
    """Build the history line of one run directory (unreadable files give None fields)."""
    run_dir = Path(run_dir)
    meta = store.meta_or_none(run_dir)
    try:
        startup = store.read(run_dir, store.STARTUP)
    except ServedeckError:
        startup = None
    try:
        samples = store.read(run_dir, store.BENCH_SAMPLES)
    except ServedeckError:
        samples = []
    kv = startup.kv_cache_tokens if startup else None
    return RunSummary(
        run_id=run_dir.name, sequence=meta.sequence if meta else store.sequence_of(run_dir) or 0,
        kind=meta.kind if meta else None,
        started_at=meta.started_at if meta else None, host=meta.host if meta else None,
        profile=meta.profile if meta else _profile_from_name(run_dir),
        outcome=meta.outcome if meta else None,
        image_digest=meta.image.digest if meta and meta.image else None,
        benchmarked=bool(samples),
        kv_cache_tokens=int(kv) if isinstance(kv, (int, float)) and not isinstance(kv, bool) else None,
        warm_decode_tok_s=_median(store.phase_samples(samples, "warm", "decode_tok_s")),
        cold_ttft_s=_median(store.phase_samples(samples, "cold", "ttft_s")),
        start_to_ready_s=meta.timings_s.get("container_start_to_ready_s") if meta else None,
        runs_dir=run_dir.parent)


def _load_index(path: Path, fmt: int | str) -> dict:
    try:
        doc = parse(path.read_bytes())
    except (OSError, ValueError):  # missing, unreadable or refused: the cache is rebuilt
        return {}
    if not isinstance(doc, dict) or doc.get("format") != fmt or not isinstance(doc.get("runs"), dict):
        return {}
    return doc["runs"]


def _scan(runs_dir: Path) -> list[tuple[int, str, int]]:
    """``(sequence, name, directory mtime_ns)`` of every run directory, oldest first."""
    out = []
    match = store.RUN_DIR_RE.match
    with os.scandir(runs_dir) as it:
        for e in it:
            m = match(e.name)
            if m and e.is_dir():
                out.append((int(m["seq"]), e.name, e.stat().st_mtime_ns))
    out.sort()
    return out


def cached_rows(runs_dir: Path, index: str, fmt: int | str, width: int,
                row_of: Callable[[Path], list]) -> list[tuple[int, str, list]]:
    """``(sequence, run name, row)`` of every run directory of ``runs_dir``, oldest first:
    ``row_of(run_dir)`` (a JSON list of ``width`` values), kept in ``runs_dir / index`` (format
    ``fmt``) as the module docstring says. A runs directory that cannot be written gives its rows
    all the same, only slower."""
    cached = _load_index(runs_dir / index, fmt)
    fresh: dict[str, list] = {}
    out: list[tuple[int, str, list]] = []
    changed = False
    hot_after = (time.time() - HOT_S) * 1e9
    for seq, name, mtime in _scan(runs_dir):
        hit = cached.get(name)
        if hit and hit[0] == mtime and isinstance(hit[1], list) and len(hit[1]) == width:
            row = hit[1]
            fresh[name] = hit
        else:
            row = row_of(runs_dir / name)
            if mtime < hot_after:
                fresh[name] = [mtime, row]
                changed = True
        out.append((seq, name, row))
    if changed or len(fresh) != len(cached):
        try:
            atomic_write(runs_dir / index, json.dumps({"format": fmt, "runs": fresh}, separators=(",", ":")))
        except OSError:
            pass  # a read-only runs directory lists fine, only slower
    return out


def list_runs(runs_dir: Path, profile: str | None = None) -> list[RunSummary]:
    """Run history, oldest first, optionally only runs of ``profile``.

    Uses and refreshes the ``runs/.index.json`` cache (:func:`cached_rows`).

    Raises:
        ServedeckError: ``runs_dir`` does not exist.
    """
    runs_dir = _existing_dir(runs_dir)
    rows = cached_rows(runs_dir, store.INDEX, INDEX_FORMAT, len(_CACHED_FIELDS),
                       lambda d: summarize_run(d).cached())
    out = [RunSummary(*row + [runs_dir]) for _, _, row in rows]  # the cached fields in their order, then runs_dir
    return out if profile is None else [r for r in out if r.profile == profile]


def _newest_first(runs_dir: Path, profile: str | None) -> Iterator[tuple[Path, RunMeta | None]]:
    """Run directories, newest first, with their run.json (None when it is missing or invalid);
    with ``profile`` only directories whose name can belong to it (``NNNN-PROFILE-HOST``) and
    whose run.json says so. Only the names are listed up front; run.json is read one directory
    at a time. A runs directory not made yet (no run recorded) has none."""
    if not runs_dir.is_dir():
        return
    match = store.RUN_DIR_RE.match
    # newest first without parsing every name: a run name's sequence is its digits before the
    # first "-", zero-padded, so (digit count, name) orders them; the rest (not a run name, not
    # a directory) is passed over one at a time as the walk reaches it
    for name in sorted(os.listdir(runs_dir), key=lambda n: (n.find("-"), n), reverse=True):
        if not match(name) or (profile is not None and not name.split("-", 1)[-1].startswith(profile + "-")):
            continue
        d = runs_dir / name
        if not d.is_dir():
            continue
        meta = store.meta_or_none(d)
        if profile is not None and (meta.profile if meta else _profile_from_name(d)) != profile:
            continue
        yield d, meta


def _served(meta: RunMeta | None) -> bool:
    return meta is not None and meta.served


def _comparable(d: Path, meta: RunMeta | None) -> bool:
    return meta is not None and meta.served and (meta.benched_at is not None or meta.load_benched_at is not None
                                                 or store.is_benchmarked(d) or store.is_load_benchmarked(d))


def newest_served(runs_dir: Path, host: str) -> Path:
    """The newest run of ``host`` that became ready (a deploy or a rollback): what is
    serving there now if nothing else deployed since.

    Raises:
        ServedeckError: when there is none.
    """
    for d, meta in _newest_first(Path(runs_dir), None):
        if meta is not None and meta.served and meta.host == host:
            return d
    raise ServedeckError(f"no ready run of host {host!r} under {runs_dir}",
                         hint=f"deploy first: invoke deploy --host {host} --profile NAME")


def startup_seconds_by_profile(runs_dir: Path) -> dict[str, float]:
    """``{profile: seconds}``: container start to ready of each profile's newest ready run that
    recorded it (run.json ``timings_s.container_start_to_ready_s``, from the listing), what the
    check's start-up rules take as that profile's measured start-up."""
    found: dict[str, float] = {}
    for row in reversed(list_runs(runs_dir)):
        if (row.outcome == store.SERVED and row.profile is not None and row.profile not in found
                and row.start_to_ready_s is not None):
            found[row.profile] = float(row.start_to_ready_s)
    return found


TIMING_RUNS = 5
"""How many of a host's newest served runs a time estimate reads (:func:`host_timings`)."""


def host_timings(runs_dir: Path, hosts: list[str], limit: int = TIMING_RUNS
                 ) -> tuple[dict[str, dict[str, list[float]]], dict[str, float]]:
    """What the run records say of each host's deploys and benchmarks, newest first.

    Returns:
        ``({host: {"ready_s": [...], "bench_s": [...]}}, {run id: ready s})``: per host, the
        times to ready (run.json ``timings_s.deploy_total_s``) and bench durations (bench.json
        ``finished_at - started_at``, seconds) of its last ``limit`` served runs; and the time to
        ready of every served run of those hosts. Unreadable records are passed over.
    """
    out: dict[str, dict[str, list[float]]] = {h: {"ready_s": [], "bench_s": []} for h in hosts}
    ready_by_run: dict[str, float] = {}
    if not runs_dir.exists():
        return out, ready_by_run
    for _, path in sorted(store.run_dirs(runs_dir), reverse=True):
        meta = store.meta_or_none(path)
        if meta is None or meta.host not in out or not meta.served:
            continue
        host = meta.host
        ready = meta.timings_s.get("deploy_total_s")
        if ready is not None:
            ready_by_run[path.name] = float(ready)
        if ready is not None and len(out[host]["ready_s"]) < limit:
            out[host]["ready_s"].append(float(ready))
        if len(out[host]["bench_s"]) < limit:
            try:
                bench = store.read(path, store.BENCH_SUMMARY)
            except ServedeckError:
                continue
            if bench is None:
                continue
            start, end = store.iso_seconds(bench.started_at), store.iso_seconds(bench.finished_at)
            if start is not None and end is not None and end >= start:
                out[host]["bench_s"].append(end - start)
    return out, ready_by_run


def resolve_run(runs_dir: Path, ref: str) -> Path:
    """Resolve a run reference (forms: module docstring) to its run directory.

    Raises:
        ServedeckError: the reference matches no run; the message lists what exists, and for
            ``latest`` names the newest runs that were skipped and why.
    """
    ref = str(ref).strip()
    runs_dir = _existing_dir(runs_dir)
    kind, _, profile = ref.partition(":")
    if kind in ("latest", "newest"):
        profile_or_none = profile or None
        skipped: list[str] = []
        for d, meta in _newest_first(runs_dir, profile_or_none):
            if kind == "newest" or _comparable(d, meta):
                return d
            if len(skipped) < 3:
                why = ("unreadable run.json" if meta is None else
                       f"outcome {meta.outcome}" if not meta.served else "not benchmarked")
                skipped.append(f"{d.name} ({why})")
        of = f" of profile {profile!r}" if profile else ""
        if skipped:
            raise ServedeckError(
                f"no run{of} that served and was benchmarked ({kind} means that); newest: "
                f"{', '.join(skipped)}",
                hint=f"benchmark one (invoke bench --host HOST --run {skipped[0].split(' ')[0]}) "
                     f"or use newest{':' + profile if profile else ''} for the newest in any state")
        known = sorted({r.profile for r in list_runs(runs_dir) if r.profile})
        raise ServedeckError(f"no run{of} recorded; profiles with runs: {', '.join(known) or '(none)'}",
                             file=str(runs_dir), hint=f"use {REF_FORMS}")
    dirs = store.run_dirs(runs_dir)
    if ref.isdigit():
        for s, d in dirs:
            if s == int(ref):
                return d
    for _, d in dirs:
        if d.name == ref:
            return d
    as_path = Path(ref)
    if as_path.is_dir() and store.is_run_dir(as_path):
        return as_path
    existing = ", ".join(d.name for _, d in dirs[-8:]) or "(none)"
    more = f" (last {min(8, len(dirs))} of {len(dirs)})" if len(dirs) > 8 else ""
    what = f"no run with sequence {int(ref)}" if ref.isdigit() else f"unknown run {ref!r}"
    raise ServedeckError(f"{what}; runs in {runs_dir}{more}: {existing}", hint=f"use {REF_FORMS}")


def run_document(run_dir: Path) -> dict[str, Any]:
    """What ``invoke show --json`` prints: ``{"run", "startup", "args_verification", "bench",
    "diff", "path"}`` (each file's content as JSON, None when missing) and ``"files"``: every other
    JSON run file the run holds (``facts.json``, ``kv.json``, ``external-*.json``, ...) by name.

    Raises:
        ServedeckError: a file is not valid JSON or does not match its model.
    """
    run_dir = Path(run_dir)
    named: dict[str, store.RunFile[Any]] = {
        "run": store.RUN_META, "startup": store.STARTUP, "args_verification": store.ARGS_VERIFICATION,
        "bench": store.BENCH_SUMMARY, "diff": store.PROFILE_DIFF}
    doc: dict[str, Any] = {key: _as_json(run_dir, file) for key, file in named.items()}
    doc["files"] = {str(f): _as_json(run_dir, f) for f in store.present_files(run_dir)
                    if f.form == "json" and f not in named.values()}
    doc["path"] = str(run_dir)
    return doc


def _as_json(run_dir: Path, file: store.RunFile[Any]) -> Any:
    value = store.read(run_dir, file)
    return None if value is None else store.encode(file, value)
