"""Benchmark a deployed server and store the numbers in the run record that deployed it.

The guard: numbers are never stored beside a compose file that did not produce them. Before
benchmarking, the server's served model (``/v1/models``) and the running container's image
digest and compose file (on the host) must match the run record, and the host's newest history
revision must be this run's (a redeploy or rollback of the same compose file is another run).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.model.inventory import HostEntry
from servedeck.host.remote import RemoteHost
from servedeck.runs import store
from servedeck.runs.history import newest_served as latest_ready_run  # noqa: F401 (stable name)
from servedeck.runs.store import RunRecord, open_run


def guard_run_matches_host(run: RunRecord, host: RemoteHost, entry: HostEntry) -> str:
    """Check the host still runs what ``run`` recorded; return the API base URL.

    Raises:
        ServedeckError: the compose file on the host or the running image digest differs
            from the run record, another run started the server (the host history's newest
            revision names it), or nothing runs.
    """
    from servedeck.deploy.ops import status
    from servedeck.deploy.plan import api_base_url
    st = status(host, entry)
    want_sha = run.meta.compose_sha256
    if st["compose_sha256"] != want_sha:
        raise ServedeckError(
            f"run {run.run_id} recorded compose sha256 {str(want_sha)[:12]}…, but host {host.name} has "
            f"{str(st['compose_sha256'])[:12]}…: the server there was not deployed by this run",
            hint="benchmark the latest run of this host, or redeploy the run's profile")
    last = st.get("last_deploy") or {}
    if _restarted_by_another_run(run, last):
        # the same compose file, started again by another run (a redeploy or a rollback) that
        # can hold its own numbers: they belong to that start, not to this record
        raise ServedeckError(
            f"the server on host {host.name} was started by run {last['run_id']} (revision "
            f"{last.get('revision')}), not by run {run.run_id}, although both deployed the same compose file",
            hint=f"benchmark run {last['run_id']} (invoke bench --host {host.name} --run {last['run_id']})")
    container = st.get("container")
    if not container or not container.get("running"):
        raise ServedeckError(f"nothing is running on host {host.name}", hint=f"invoke status --host {host.name}")
    digest = run.meta.image.digest if run.meta.image else None
    if digest and not any(d.endswith("@" + digest) for d in container.get("image_digests") or []):
        raise ServedeckError(f"the running container's image {container.get('image_digests')} is not "
                             f"{digest} recorded in run {run.run_id}")
    return api_base_url(host, entry, run.meta.port or entry.port)


def served_service(run: RunRecord) -> str | None:
    """The compose service of ``run``'s server (its resolved profile's ``container.service``),
    None when the record does not say."""
    snap = store.read(run.path, store.PROFILE_RESOLVED)
    data = snap.root if snap is not None else {}
    service = (data.get("container") or {}).get("service") if isinstance(data, dict) else None
    return service if isinstance(service, str) else None


def _restarted_by_another_run(run: RunRecord, last: dict[str, Any]) -> bool:
    """The host history's newest revision (``last``) restarted ``run``'s compose file for
    another run of this runs directory that served with that same file (a redeploy of the
    profile, ``invoke rollback``). An automatic rollback after a failed deploy is not one: its
    run recorded the failed file, so the numbers still go to the run that deployed this one."""
    other = last.get("run_id")
    if not other or other == run.run_id or last.get("compose_sha256") != run.meta.compose_sha256:
        return False
    other_dir = run.path.parent / other
    if not store.is_run_dir(other_dir):
        return False
    try:
        meta = store.read_meta(other_dir)
    except ServedeckError:
        return False
    return meta.served and meta.compose_sha256 == run.meta.compose_sha256


def _served_model(run: RunRecord) -> str:
    """The served model name the requests of a benchmark of ``run`` carry (``run.json``).

    Raises:
        ServedeckError: the record names none (a rollback to a revision whose history line
            predates it): the server cannot be asked for a model nobody named.
    """
    name = run.meta.served_model_name
    if not name:
        raise ServedeckError(f"run {run.run_id} names no served model, so its server cannot be benchmarked",
                             file=str(run.path / store.RUN_META),
                             hint="redeploy the profile (a new run records the name it serves under)")
    return name


def bench_deployed(run_dir: Path, host: RemoteHost, entry: HostEntry, workload, *, progress=None,
                   probes: bool = True, quality_settings=None, lm_eval=None, telemetry: bool = True,
                   telemetry_period_s: float | None = None, catalog=None, runs_dir: Path | None = None,
                   more=None):
    """Benchmark the server ``run_dir`` deployed and write the results into ``run_dir``.

    Besides the samples, the run gets ``telemetry.json`` (energy, power, clocks and throttling
    of each request, sampled on the host; ``telemetry=False`` skips it) and ``roofline.json``
    (each request against the card's ceilings), see :mod:`servedeck.bench.limits`. After the
    speed benchmark, the quality probes (:func:`servedeck.bench.probes.run_probes`, sized by the
    run's effective settings and ``max_model_len``) write ``quality.json``, and with ``lm_eval``
    (:class:`servedeck.bench.lmeval.LmEvalSettings`) lm-evaluation-harness writes
    ``lm_eval.json``; ``benched_at`` is set once all of it is stored.

    Args:
        probes: run the quality probes (default on); quality_settings: their
            :class:`servedeck.bench.quality.QualitySettings` (default sizes when None).
        catalog: the project's image catalog (the image's device and launcher defaults), when known.
        runs_dir: the project's runs directory (a host's measured ceilings are kept there);
            default: the run's parent directory.
        more: sequential sampling (:mod:`servedeck.ab.sequential`): called with the results
            so far (already written into ``run_dir``) after each batch; returns the workload of
            the next batch (its requests are added to the same run: ``rep`` numbers continue,
            no warm-up) or None to stop. None: one batch, ``workload``. Telemetry spans every
            batch; the roofline and the probes follow the last.

    Returns:
        the :class:`servedeck.bench.client.BenchResult` (every batch's samples).

    Raises:
        ServedeckError: the guard fails, or the server misbehaves (the batches finished before
            stay recorded), or lm-eval fails (the speed and probe results are stored before).
    """
    from servedeck.bench.client import run_bench
    from servedeck.bench.limits import BenchTelemetry, record_roofline
    from servedeck.bench.windows import RequestWindows
    run = open_run(run_dir)
    base_url = guard_run_matches_host(run, host, entry)
    if store.is_benchmarked(run.path):
        raise ServedeckError(f"run {run.run_id} already holds benchmark results",
                             file=str(run.path / store.BENCH_SAMPLES),
                             hint="redeploy to measure again (a new run), so each run keeps its own numbers")
    import httpx

    from servedeck.deploy.secrets import deployed_secrets
    key = deployed_secrets(host, served_service(run)).api_key  # the key the deployed server wants; never recorded
    timed = RequestWindows({workload.endpoint})
    client = httpx.Client(timeout=httpx.Timeout(60.0, connect=30.0), transport=timed,
                          headers={"Authorization": f"Bearer {key}"} if key else None)
    tel = BenchTelemetry(host, entry, gpu=_gpu_of(run), period_s=telemetry_period_s, enabled=telemetry)
    tel.start()
    try:
        result = run_bench(base_url, workload, served_model=_served_model(run),
                           progress=progress, client=client)
        result.write(run.path)
        while more is not None:
            batch = more(result)
            if batch is None:
                break
            result = append_result(result, run_bench(base_url, batch, served_model=_served_model(run),
                                                     progress=progress, client=client))
            result.write(run.path)
    finally:
        tel.stop()
        client.close()
    samples = [s.model_dump(mode="json") for s in result.samples]
    tel.record(run, samples, timed.windows)
    record_roofline(run, host, entry, catalog=catalog, runs_dir=runs_dir or run.path.parent, gpu_name=tel.gpu_name)
    judge_output(run, base_url, key, probes=probes, quality_settings=quality_settings, lm_eval=lm_eval,
                 progress=progress)
    run.save_meta(benched_at=result.finished_at)
    return result


def judge_output(run: RunRecord, base_url: str, api_key: str | None, *, probes: bool = True,
                 quality_settings=None, lm_eval=None, progress=None) -> None:
    """After a benchmark of either kind (single stream or load): the quality probes
    (:func:`probe_run`, ``quality.json``) and, with ``lm_eval``
    (:class:`servedeck.bench.lmeval.LmEvalSettings`), lm-evaluation-harness (``lm_eval.json``).

    Raises:
        ServedeckError: the server is unreachable or serves another model, or lm-eval fails
            (the probes' results are stored before).
    """
    if probes:
        probe_run(run, base_url, quality_settings, api_key=api_key, progress=progress)
    if lm_eval is not None:
        from servedeck.bench.lmeval import run_lm_eval
        run.write(store.LM_EVAL, run_lm_eval(base_url, _served_model(run), lm_eval, api_key=api_key))


def append_result(first, extra):
    """One :class:`~servedeck.bench.client.BenchResult` of two batches on the same server:
    ``extra``'s samples after ``first``'s, their ``rep`` numbers continued per phase, the
    workload's ``repetitions`` the total per phase, the times spanning both."""
    counts: dict[str, int] = {}
    for s in first.samples:
        counts[s.phase] = max(counts.get(s.phase, 0), s.rep + 1)
    moved = [s.model_copy(update={"rep": s.rep + counts.get(s.phase, 0)}) if s.phase != "warmup" else s
             for s in extra.samples]
    total = max((sum(1 for s in [*first.samples, *moved] if s.phase == ph) for ph in ("cold", "warm")),
                default=first.workload.repetitions)
    return type(first)(workload=first.workload.model_copy(update={"repetitions": total}),
                       served_model=first.served_model, base_url=first.base_url,
                       samples=[*first.samples, *moved], started_at=first.started_at,
                       finished_at=extra.finished_at)


def _gpu_of(run: RunRecord) -> int:
    """The device index the run's profile names (``launcher.gpu``; 0 when unset), for ``nvidia-smi``."""
    profile = store.read(run.path, store.PROFILE_RESOLVED)
    return int(((profile.root if profile is not None else {}).get("launcher") or {}).get("gpu") or 0)


def load_deployed(run_dir: Path, host: RemoteHost, entry: HostEntry, workload, *, profile=None, slo=None,
                  capacity: dict[str, Any] | None = None, progress=None, probes: bool = True,
                  quality_settings=None, lm_eval=None, telemetry: bool = True,
                  telemetry_period_s: float | None = None):
    """Run a load benchmark (``profile``) or a capacity search (``capacity``) against the server
    ``run_dir`` deployed and store it in ``run_dir`` (``load.jsonl``, ``load.json``,
    ``capacity.json``), behind the same guard as :func:`bench_deployed`; then, as after a
    single-stream benchmark, the quality probes and lm-eval (:func:`judge_output`; the probes
    only when the run holds none yet: a single-stream benchmark of the same deployment probed it).
    Energy, power, clocks and throttling are sampled on the host during the load and written per
    level into ``load_telemetry.json`` (:meth:`servedeck.bench.limits.BenchTelemetry.record_load`;
    ``telemetry=False`` skips it; ``telemetry_period_s`` as for :func:`bench_deployed`).

    Args:
        workload: a :class:`servedeck.bench.workload.RequestWorkload`.
        profile: a :class:`servedeck.bench.load.LoadProfile` (a load benchmark).
        slo: a :class:`servedeck.runs.records.Slo` (judged per level; required for ``capacity``).
        capacity: ``{"start": LoadLevel, "precision", "max_levels"}`` for a capacity search; the
            run's KV prediction (``kv.json``) is checked against the levels.
        probes, quality_settings, lm_eval: as for :func:`bench_deployed`.

    Returns:
        the :class:`servedeck.bench.loadclient.LoadRun`.

    Raises:
        ServedeckError: the guard fails, the run already holds a load benchmark, or the server
            misbehaves (failed requests are recorded, not raised), or lm-eval fails.
    """
    from servedeck.bench.loadclient import run_capacity, run_load
    from servedeck.deploy.secrets import deployed_secrets
    run = open_run(run_dir)
    base_url = guard_run_matches_host(run, host, entry)
    if store.is_load_benchmarked(run.path):
        raise ServedeckError(f"run {run.run_id} already holds load results", file=str(run.path / store.LOAD_SUMMARY),
                             hint="redeploy to measure again (a new run), so each run keeps its own numbers")
    key = deployed_secrets(host, served_service(run)).api_key  # the key the deployed server wants; never recorded
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    model = _served_model(run)
    from servedeck.bench.limits import BenchTelemetry
    tel = BenchTelemetry(host, entry, gpu=_gpu_of(run), period_s=telemetry_period_s, enabled=telemetry)
    tel.start()
    try:
        if capacity is not None:
            from servedeck.runs.kv_history import read_kv
            kv_doc = read_kv(run.path)
            kv = kv_doc.prediction if kv_doc is not None else None
            result = run_capacity(base_url, workload, capacity["start"], slo, served_model=model,
                                  precision=capacity.get("precision"), max_levels=capacity.get("max_levels"),
                                  kv_prediction=kv, headers=headers, progress=progress)
        else:
            result = run_load(base_url, workload, profile, served_model=model, slo=slo, headers=headers,
                              progress=progress)
    finally:
        tel.stop()
    result.write(run.path)
    tel.record_load(run, result.summary.levels, result.records)
    judge_output(run, base_url, key, probes=probes and store.read(run.path, store.QUALITY) is None,
                 quality_settings=quality_settings, lm_eval=lm_eval, progress=progress)
    run.save_meta(load_benched_at=result.summary.finished_at)
    return result


def probe_run(run: RunRecord, base_url: str, settings=None, *, api_key: str | None = None, progress=None):
    """Run the quality probes against the server of ``run`` and write ``quality.json``.

    What the profile enables (tool-call and reasoning parsers) comes from the run's
    ``effective.json``, the context length from its startup log (:func:`servedeck.bench.sizing.max_model_len_of`).

    Returns:
        the :class:`servedeck.bench.quality.QualityResult`.

    Raises:
        ServedeckError: the server is unreachable or serves another model.
    """
    import httpx

    from servedeck.bench.probes import ServerFeatures, run_probes
    from servedeck.bench.sizing import max_model_len_of
    effective = store.read(run.path, store.EFFECTIVE)
    features = ServerFeatures.from_effective(effective.root if effective is not None else None,
                                             max_model_len_of(run.path))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    with httpx.Client(timeout=httpx.Timeout(60.0, connect=30.0), headers=headers) as client:
        quality = run_probes(base_url, _served_model(run), settings=settings, features=features,
                             client=client, progress=progress)
    run.write(store.QUALITY, quality)
    return quality


def import_external(run_dir: Path, path: Path, benchmark: str | None = None) -> dict[str, Any]:
    """Store an external benchmark result (``vllm bench serve --save-result`` JSON or a guidellm
    report, see :mod:`servedeck.bench.external`) beside a run as ``external/<name>`` plus the
    mapped metrics in ``external-<name>.json``.

    A file holding several benchmarks (a guidellm sweep, a ``--append-result`` file) needs
    ``benchmark``, the one to take (:func:`servedeck.bench.external.choose`); its mapped
    metrics go to ``external-<name>@<position>-<label>.json`` and say which benchmark they hold and how
    many the file has. A result in which some requests failed is stored with
    ``"partial": true``, the request counts and a note; its statistics cover the successful
    requests only.

    Returns:
        the mapped metrics document (:class:`servedeck.runs.records.ExternalSummary`:
        :class:`~servedeck.runs.records.ExternalBench` fields plus ``sha256`` of the file).

    Raises:
        ServedeckError: unreadable or unknown file, several benchmarks and none (or no single
            one) named, or no request in the chosen one succeeded (nothing is written then).
    """
    from servedeck.bench.external import import_file
    from servedeck.runs.records import ExternalSummary
    run = open_run(run_dir)
    ext = import_file(path, benchmark=benchmark)
    raw = path.read_bytes()
    name = path.name
    _not_another_file(run_dir, store.external_raw(name), raw)
    run.write(store.external_raw(name), raw)
    mapped = ExternalSummary(**dict(ext), sha256=hashlib.sha256(raw).hexdigest())
    summary = name
    if ext.benchmarks_in_file > 1 and ext.benchmark is not None:
        label = re.sub(r"[^\w@,-]", "_", ext.benchmark.label)
        summary = f"{Path(name).stem}@{ext.benchmark.index}-{label}{Path(name).suffix}"
    run.write(store.external_summary(summary), mapped)
    return mapped.model_dump(mode="json")


def _not_another_file(run_dir: Path, file: "store.RunFile[bytes]", raw: bytes) -> None:
    """Refuse to store ``raw`` as ``file`` of the run when the run holds another file under that
    name (an import of a file of the same name from elsewhere): its summary would no longer match
    the stored file. The same bytes again are fine (an import repeated).

    Raises:
        ServedeckError: the run holds different bytes under that name (nothing is written).
    """
    held = Path(run_dir) / file
    try:
        old = held.read_bytes()
    except OSError:
        return
    if old != raw:
        raise ServedeckError(f"run {Path(run_dir).name} already holds another imported file named {file} "
                             f"(sha256 {hashlib.sha256(old).hexdigest()[:12]}, this one "
                             f"{hashlib.sha256(raw).hexdigest()[:12]}); nothing was written",
                             file=str(held), hint="import a copy under another name")


def import_external_curve(run_dir: Path, path: Path, *, serve: str | None = None) -> dict[str, Any]:
    """Store an external load curve (:func:`servedeck.bench.interop.import_curve`: a ``vllm bench
    sweep serve`` directory, a GuideLLM report, appended ``vllm bench serve`` results) beside a
    run: the files read under ``external/<name>/`` (a directory keeps its layout; a file is
    ``external/<name>``), the curve in ``curve-<stem>.json`` with each file's sha256.

    Returns:
        the stored curve (:class:`servedeck.runs.records.CurveSummary`) as JSON data.

    Raises:
        ServedeckError: unreadable or unknown input (nothing is written then).
    """
    from servedeck.bench.interop import import_curve
    from servedeck.runs.records import CurveSummary
    run = open_run(run_dir)
    path = Path(path)
    curve = import_curve(path, serve=serve)
    files = sorted(f for f in path.rglob("*.json") if f.is_file()) if path.is_dir() else [path]
    digests, raws = {}, {}
    for f in files:
        raw = f.read_bytes()
        rel = f"{path.name}/{f.relative_to(path)}" if path.is_dir() else path.name
        _not_another_file(run_dir, store.EXTERNAL_RAW.named(f"{store.EXTERNAL_DIR}/{rel}"), raw)
        raws[rel] = raw
    for rel, raw in raws.items():  # each file judged before any is written
        run.write(store.EXTERNAL_RAW.named(f"{store.EXTERNAL_DIR}/{rel}"), raw)
        digests[rel] = hashlib.sha256(raw).hexdigest()
    mapped = CurveSummary(**dict(curve), sha256=digests)
    run.write(store.external_curve(path.name), mapped)
    return mapped.model_dump(mode="json")
