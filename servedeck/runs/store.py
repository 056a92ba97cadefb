"""The run store: the only code that knows how a run record is laid out on disk, and the only
code that writes or reads its files.

A run is one deploy (or rollback) recorded under ``runs/<sequence>-<profile>-<host>/``; the
layout is documented in ``docs/run-record.md``, which :mod:`servedeck.runs.doc` generates from
:data:`RUN_FILES` and the models of :mod:`servedeck.runs.records` (a unit test keeps the two equal).

Every file is a :class:`RunFile`: its name, the model of its content (a class of
:mod:`servedeck.runs.records`), its form (one JSON document, JSON lines, text, bytes) and a line
for the document. :meth:`RunRecord.write` validates what it is given against that model and
writes it atomically (secrets redacted); :func:`read` returns the model (a ``list`` of models for
JSON lines), or None when the run has no such file. A writer that passes an unknown field or a
wrong type gets an error at once and nothing is written; a file that does not match its model is
an error naming the file and the field. The models are named, not imported, here: listing runs
(:mod:`servedeck.runs.history`) and the check's measured start-ups never import pydantic.

A run directory is created with the next sequence number (``0001-base-b70``) by an atomic
``mkdir``, so two deploys never share one.

Adding a run file: its model in :mod:`servedeck.runs.records`, a :class:`RunFile` constant below
and its place in :data:`RUN_FILES`, and its writer calling :meth:`RunRecord.write`. ``invoke show``
displays it and ``docs/run-record.md`` lists it with its fields (regenerate the document).

API used by the deploy, rollback, bench and comparison stages (names are stable):

* :func:`create_run` (``runs_dir, profile, host, **meta``) -> :class:`RunRecord`;
* :meth:`RunRecord.write` (a :class:`RunFile`, its content), :meth:`RunRecord.save_meta`
  (``**updates``: :class:`~servedeck.runs.records.RunMeta` fields), :meth:`RunRecord.finish`
  (a final state and its reason), :meth:`RunRecord.save_compose`;
* :func:`read`, :func:`read_meta`, :func:`open_run`, :func:`present_files`,
  :func:`write_bench_files`, :func:`phase_samples`, :func:`run_dirs`; listing and references:
  :mod:`servedeck.runs.history`.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import math
import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from servedeck import __version__
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.grammar import HOST_NAME_RE, RUN_ID_RE

if TYPE_CHECKING:  # the models (pydantic) are imported when a file is written or read
    from servedeck.runs.records import (ArgsVerification, ArgvRecord, BenchSummary, CapacityResult, CurveSummary,
                                        EffectiveSettings, ExternalSummary, FactsRecord, FailurePhase, KvRecord,
                                        LmEvalResult, LoadSummary, MeasuredCeilings, Outcome, ProfileDiff,
                                        ProfileSnapshot, QualityResult, RequestRecord, Roofline, RunMeta, Sample,
                                        SequentialRecord, StartupFacts, TelemetryRecord, Workload)

M = TypeVar("M")

Form = Literal["json", "jsonl", "text", "bytes"]


class RunFile(str, Generic[M]):
    """One file of a run directory: its name (this string itself, so ``run_dir / FACTS`` is its
    path) and what it holds.

    Attributes:
        model: the name of the content's model in :mod:`servedeck.runs.records` (None for text
            and bytes): named, not imported, so that a listing never imports pydantic.
        form: ``json`` (one document), ``jsonl`` (one model per line), ``text`` or ``bytes``.
        about: what the file is, one line of ``docs/run-record.md``.
        shown: ``invoke show`` prints it (False for the bulky views kept for comparison:
            the resolved profile, the effective settings, the argv, the workload).
        pattern: the name stands for many files (``external-STEM.json``); :meth:`named` gives one.
    """

    model: str | None
    form: Form
    about: str
    shown: bool
    pattern: bool

    def __new__(cls, name: str, model: str | None, about: str, *, form: Form = "json",
                shown: bool = True, pattern: bool = False) -> "RunFile[M]":
        self = super().__new__(cls, name)
        self.model, self.form, self.about, self.shown, self.pattern = model, form, about, shown, pattern
        return self

    def named(self, name: str) -> "RunFile[M]":
        """This file kind under a concrete ``name`` (one file of a pattern)."""
        return RunFile(name, self.model, self.about, form=self.form, shown=self.shown)

    def model_class(self) -> Any:
        """The content's model class (imports the module of :mod:`servedeck.runs.records` that holds it)."""
        from servedeck.runs import records
        return getattr(records, self.model) if self.model else None


# --------------------------------------------------------------------------------------------
# The files (the only place their names are spelled), in the order a deploy writes them
# --------------------------------------------------------------------------------------------

COMPOSE: RunFile[str] = RunFile(
    "docker-compose.yml", None, "byte-for-byte the compose file that was deployed (redacted only if it held a "
    "secret; `compose_sha256` in run.json is the sha256 of what was deployed)", form="text", shown=False)
RUN_META: RunFile[RunMeta] = RunFile("run.json", "RunMeta", "what the run is and how it ended")
PROFILE_RESOLVED: RunFile[ProfileSnapshot] = RunFile(
    "profile.resolved.json", "ProfileSnapshot", "the resolved profile as deployed", shown=False)
EFFECTIVE: RunFile[EffectiveSettings] = RunFile(
    "effective.json", "EffectiveSettings", "the settings vLLM runs with, keyed by vLLM dest names", shown=False)
ARGV: RunFile[ArgvRecord] = RunFile("argv.json", "ArgvRecord", "the server's command and the image's entrypoint",
                                    shown=False)
PROFILE_DIFF: RunFile[ProfileDiff] = RunFile("profile.diff.json", "ProfileDiff",
                                             "what the profile changes against its parent")
FACTS: RunFile[FactsRecord] = RunFile("facts.json", "FactsRecord", "host and image facts gathered during preflight")
STARTUP_LOG: RunFile[str] = RunFile("startup.log", None, "container log from start until ready (or failure), "
                                    "secrets redacted", form="text", shown=False)
STARTUP: RunFile[StartupFacts] = RunFile("startup.json", "StartupFacts", "what the startup log said")
ARGS_VERIFICATION: RunFile[ArgsVerification] = RunFile(
    "args_verification.json", "ArgsVerification", "each setting the server confirmed, or not")
KV: RunFile[KvRecord] = RunFile("kv.json", "KvRecord", "the KV-capacity prediction made before the deploy "
                                "beside what the server logged")
WORKLOAD: RunFile[Workload] = RunFile("workload.json", "Workload", "the benchmark workload definition",
                                      shown=False)
BENCH_SAMPLES: RunFile[Sample] = RunFile("bench.jsonl", "Sample", "one line per request sample", form="jsonl",
                                         shown=False)
BENCH_SUMMARY: RunFile[BenchSummary] = RunFile("bench.json", "BenchSummary", "summary per phase and metric")
SEQUENTIAL: RunFile[SequentialRecord] = RunFile(
    "sequential.json", "SequentialRecord", "sequential sampling (`bench --against`, `ab --interleave`): the design, "
    "the runs of each arm, each look's requests, levels and decisions, why sampling stopped; in every run of the "
    "experiment")
LOAD_SAMPLES: RunFile[RequestRecord] = RunFile(
    "load.jsonl", "RequestRecord", "a load benchmark: one line per request of every level (warm-up: level -1)",
    form="jsonl", shown=False)
LOAD_SUMMARY: RunFile[LoadSummary] = RunFile(
    "load.json", "LoadSummary", "a load benchmark: workload, load profile, SLO and per level the throughput, "
    "goodput, percentiles with intervals and what the server's /metrics said")
CAPACITY: RunFile[CapacityResult] = RunFile(
    "capacity.json", "CapacityResult", "a capacity search: the highest load meeting the SLO, its bracket, "
    "saturation, knee and KV check")
QUALITY: RunFile[QualityResult] = RunFile(
    "quality.json", "QualityResult", "the quality probes run after the benchmark: the likelihood of the shipped "
    "texts, greedy generations, the checks of what the profile enables, the needle")
LM_EVAL: RunFile[LmEvalResult] = RunFile(
    "lm_eval.json", "LmEvalResult", "lm-evaluation-harness scores on the user's tasks, each document's score kept")
TELEMETRY: RunFile[TelemetryRecord] = RunFile(
    "telemetry.json", "TelemetryRecord", "energy, power, GPU clocks and throttling of each bench window, from the "
    "host's counters sampled during the bench, with the raw samples")
LOAD_TELEMETRY: RunFile[TelemetryRecord] = RunFile(
    "load_telemetry.json", "TelemetryRecord", "a load benchmark: energy, power, GPU clocks and throttling of each "
    "load level (one window per level, phase `load`), from the host's counters sampled during it")
ROOFLINE: RunFile[Roofline] = RunFile(
    "roofline.json", "Roofline", "each request against the card's ceilings: decode against memory bandwidth, "
    "prefill against the matrix rate, with every figure's source")
EXTERNAL_RAW: RunFile[bytes] = RunFile(
    "external/NAME", None, "an imported external benchmark result, byte for byte (`vllm bench serve "
    "--save-result`, guidellm)", form="bytes", shown=False, pattern=True)
EXTERNAL_SUMMARY: RunFile[ExternalSummary] = RunFile(
    "external-STEM.json", "ExternalSummary", "its metrics mapped to servedeck's names, with the raw file's sha256 "
    "(`external-STEM@N-LABEL.json` for benchmark N of a file holding several)",
    pattern=True)
EXTERNAL_CURVE: RunFile[CurveSummary] = RunFile(
    "curve-STEM.json", "CurveSummary", "an imported external load curve (a `vllm bench sweep serve` directory, a "
    "GuideLLM report's benchmarks, appended `vllm bench serve` results), its files kept under `external/` with "
    "their sha256", pattern=True)

#: Every file of a run directory, in the order a deploy writes them (``docs/run-record.md``,
#: ``invoke show``).
RUN_FILES: tuple[RunFile[Any], ...] = (
    COMPOSE, RUN_META, PROFILE_RESOLVED, EFFECTIVE, ARGV, PROFILE_DIFF, FACTS, STARTUP_LOG, STARTUP,
    ARGS_VERIFICATION, KV, WORKLOAD, BENCH_SAMPLES, BENCH_SUMMARY, SEQUENTIAL, LOAD_SAMPLES, LOAD_SUMMARY,
    CAPACITY, QUALITY, LM_EVAL, TELEMETRY, LOAD_TELEMETRY, ROOFLINE, EXTERNAL_RAW, EXTERNAL_SUMMARY, EXTERNAL_CURVE)

EXTERNAL_DIR = "external"
INDEX = ".index.json"
"""The listing cache at the top of the runs directory (see :mod:`servedeck.runs.history`)."""
KV_INDEX = ".kv-index.json"
"""The KV calibration cache beside it (:func:`servedeck.runs.kv_history.kv_history`), kept the same way."""
REPORTS_DIR = "reports"
"""A/B reports live under ``runs/reports/<A>_vs_<B>/``."""
NOISE_DIR = "noise"
"""A/A noise floors live under ``runs/noise/<host>-<image digest>.json``."""
CEILINGS_DIR = "ceilings"
"""Ceilings measured on a host live under ``runs/ceilings/<host>.json`` (:mod:`servedeck.host.ceilings`)."""


def external_raw(name: str) -> RunFile[bytes]:
    """The stored copy of an imported external result file ``name`` (``external/NAME``)."""
    return EXTERNAL_RAW.named(f"{EXTERNAL_DIR}/{Path(name).name}")


def external_summary(name: str) -> RunFile[ExternalSummary]:
    """The mapped metrics of an imported external result ``name`` (``external-STEM.json``)."""
    return EXTERNAL_SUMMARY.named(f"external-{Path(name).stem}.json")


def external_curve(name: str) -> RunFile[CurveSummary]:
    """The imported external load curve ``name`` (a sweep directory or a result file): ``curve-STEM.json``."""
    return EXTERNAL_CURVE.named(f"curve-{Path(name).stem}.json")


RUN_DIR_RE = re.compile(r"^(?P<seq>\d{4,})-(?P<rest>.+)$")


def run_path(runs_dir: str | Path, run_id: Any) -> Path:
    """``runs_dir / run_id`` for a run id read from outside (a host's history, a fleet host's
    result file, the command line), checked against :data:`servedeck.grammar.RUN_ID_RE` before
    any file is opened.

    Raises:
        ServedeckError: ``run_id`` is not a run id (a path, ``..``, empty, not a string).
    """
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise ServedeckError(f"{str(run_id)[:120]!r} is not a run id (<sequence>-<profile>-<host>, "
                             "one name without '/')", hint="is the host's history or result file damaged?")
    return Path(runs_dir) / run_id


def recorded_run(runs_dir: str | Path, run_id: Any) -> Path | None:
    """The local run directory a value read from outside names (a host history line's
    ``run_id``), or None when it is not a run id (:data:`servedeck.grammar.RUN_ID_RE`) or no such run is
    recorded here. Never a path outside ``runs_dir``."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        return None
    path = Path(runs_dir) / run_id
    return path if (path / RUN_META).is_file() else None


RUN_FILE_MODE = 0o600
"""Run files are readable by their owner only (a record is redacted, but it names hosts, paths and
settings); run directories are 0700."""

TEXT_MAX_BYTES = 64 * 1024 * 1024
"""The largest text file of a run (compose file, startup log) servedeck reads back."""


SERVED = "ready"
"""The outcome of a run whose server became ready (``RunMeta.served``)."""

# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

_CREDENTIAL = r"(?P<v>(?!\*\*\*)(?![<$({\[])[^\s'\",}\]]{6,})"
"""A value that looks like a credential: 6 characters or more, not ``***``, not a placeholder
(``<key>``, ``$VAR``, ``{...}``): never a word of servedeck's own text ("--api-key or ...")."""

_SECRET_PATTERNS = [
    # --api-key VALUE / --api_key=VALUE / api_key: VALUE / 'api_key': 'VALUE'
    re.compile(r"(?P<k>--(?:api|hf)[-_](?:key|token)(?:=|[ \t]+)|['\"]?(?:api_key|hf_token|HF_TOKEN"
               r"|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_TOKEN|OPENAI_API_KEY|VLLM_API_KEY)['\"]?[ \t]*[:=][ \t]*['\"]?)"
               + _CREDENTIAL),
    re.compile(r"(?P<k>Authorization:\s*Bearer\s+)" + _CREDENTIAL, re.I),
    re.compile(r"(?P<k>)(?P<v>\bhf_[A-Za-z0-9]{20,}\b)"),
    re.compile(r"(?P<k>)(?P<v>\bsk-[A-Za-z0-9_\-]{20,}\b)"),
]


def redact(text: str) -> str:
    """Replace what looks like a secret value in ``text`` with ``***`` (keys and structure are
    kept): the second net behind the deployment's own secrets, which are scrubbed by value."""
    for pat in _SECRET_PATTERNS:
        text = pat.sub(lambda m: m.group("k") + "***", text)
    return text


def redact_yaml(text: str) -> str:
    """:func:`redact` of YAML text that stays the same YAML document (a scalar that held a
    secret is written again double-quoted, :func:`servedeck.yamlio.rewrite_scalars`)."""
    from servedeck.yamlio import rewrite_scalars
    return redact(rewrite_scalars(text, redact))


def utcnow() -> str:
    """Current UTC time, ISO 8601 with seconds and ``Z``."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def iso_seconds(text: str | None) -> float | None:
    """A record's ISO 8601 time (:func:`utcnow`'s ``Z`` form, or with an offset) as Unix
    seconds; None when absent or not a time."""
    if not text:
        return None
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def git_commit(path: Path) -> str | None:
    """The git commit of the repository holding ``path`` (``+dirty`` when profiles changed),
    or None outside a git repository."""
    try:
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


# --------------------------------------------------------------------------------------------
# Content: validation against the file's model
# --------------------------------------------------------------------------------------------

_adapters: dict[str, Any] = {}
_adapters_lock = threading.Lock()


def _adapter(file: RunFile[Any]) -> Any:
    """The pydantic ``TypeAdapter`` of ``file``'s model (one per model and process; built
    once even when two threads ask at the same time)."""
    adapter = _adapters.get(file.model or "")
    if adapter is None:
        with _adapters_lock:
            adapter = _adapters.get(file.model or "")
            if adapter is None:
                from pydantic import TypeAdapter
                adapter = _adapters[file.model or ""] = TypeAdapter(file.model_class())
    return adapter


def prepare(*files: RunFile[Any]) -> None:
    """Build the validators of ``files``' models in a daemon thread, for a writer that waits on
    something else first (a deploy waiting for its server to serve): pydantic builds a model's
    schema at its first use (the records are ``defer_build``; ``StartupFacts`` takes ~35 ms), and
    the write after the wait then finds it built. A failure here is left to the write that
    meets it (:func:`encode` raises it there)."""
    def _build() -> None:
        for file in files:
            if file.model is not None:
                try:
                    _adapter(file)
                except Exception:  # noqa: BLE001 - the write builds it again and raises
                    pass
        gc.collect()  # the objects the build made are collected now, not in the write after the wait

    threading.Thread(target=_build, daemon=True, name="servedeck-prepare-records").start()


def _invalid(file: RunFile[Any], path: Path, exc: Any, verb: str, line: int | None = None) -> ServedeckError:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    if line is not None:
        loc = f"line {line}" + (f": {loc}" if loc else "")
    return ServedeckError(f"{verb} {file}: {first['msg']}", file=str(path), field=loc or None,
                          hint=f"its fields are documented in docs/run-record.md "
                               f"(servedeck.runs.records.{file.model})")


def encode(file: RunFile[M], value: Any, *, path: Path | None = None) -> Any:
    """``value`` (the file's model, or data that validates as it) as JSON data, validated
    against ``file``'s model (for ``jsonl``: a list of such items; for ``run.json``: the fields
    that were set).

    Raises:
        ServedeckError: an unknown field or a value of the wrong type (the first error, with the
            field's dotted path).
    """
    from pydantic import ValidationError
    adapter = _adapter(file)
    items = list(value) if file.form == "jsonl" else [value]
    out = []
    for item in items:
        try:
            out.append(adapter.dump_python(adapter.validate_python(item), mode="json",
                                           exclude_unset=file == RUN_META))
        except ValidationError as exc:
            raise _invalid(file, path or Path(file), exc, "invalid content of") from None
    return out if file.form == "jsonl" else out[0]


def _json_text(file: RunFile[Any], data: Any) -> str:
    if file.form == "jsonl":
        return "".join(json.dumps(item) + "\n" for item in data)
    return json.dumps(data, indent=2) + "\n"


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

@dataclass
class RunRecord:
    """An open run directory.

    Attributes:
        path: ``runs/<sequence>-<profile>-<host>``.
        sequence: the run's sequence number.
        meta: the content of ``run.json`` (written by :meth:`save_meta`).
    """

    path: Path
    sequence: int
    meta: RunMeta

    @property
    def run_id(self) -> str:
        return self.path.name

    def write(self, file: RunFile[M], value: Any, *, scrub: Any = None) -> Path:
        """Write ``file`` atomically: for a JSON file ``value`` validated against its model
        (:func:`encode`), ``scrub`` (a function over the JSON data, e.g. a deployment's
        :meth:`~servedeck.deploy.secrets.Secrets.scrub`) applied, and secrets redacted; text is
        redacted too (``scrub`` may be a function over the text), bytes are written as given.
        ``run.json`` is written by :meth:`save_meta` only.

        Raises:
            ServedeckError: ``value`` does not validate (nothing is written).
            OSError: the directory is not writable.
        """
        if file == RUN_META:
            raise ServedeckError("run.json is written through RunRecord.save_meta")
        target = self.path / file
        if file.form == "bytes":
            return atomic_write(target, value, mode=RUN_FILE_MODE)
        if file.form == "text":
            text = scrub(value) if scrub else value
        else:
            data = encode(file, value, path=target)
            text = _json_text(file, scrub(data) if scrub else data)
        return atomic_write(target, redact_yaml(text) if file == COMPOSE else redact(text), mode=RUN_FILE_MODE)

    def save_meta(self, **updates: Any) -> None:
        """Merge ``updates`` (:class:`~servedeck.runs.records.RunMeta` fields) into ``run.json``
        and write it (fields never set are left out of the file).

        Raises:
            ServedeckError: an unknown field or a value of the wrong type (nothing is written).
        """
        self.meta = _validate_meta({**self.meta.model_dump(exclude_unset=True), **updates}, self.path / RUN_META)
        atomic_write(self.path / RUN_META, redact(self.meta.model_dump_json(indent=2, exclude_unset=True) + "\n"),
                     mode=RUN_FILE_MODE)

    def finish(self, outcome: Outcome, reason: str | None = None, *,
               phase: FailurePhase | None = None, **updates: Any) -> None:
        """Record how the run ended: ``outcome`` with ``reason`` and the failed ``phase``
        (``ready_at`` for ``ready``, ``ended_at`` otherwise, now).

        Raises:
            ServedeckError: ``outcome`` is ``started`` (not an ending) or a field is invalid.
        """
        if outcome == "started":
            raise ServedeckError("a run cannot finish as 'started'")
        stamp = {"ready_at": utcnow()} if outcome == "ready" else {"ended_at": utcnow()}
        extra = {"failure": reason} if reason is not None else {}
        if phase is not None:
            extra["failure_phase"] = phase
        self.save_meta(outcome=outcome, **stamp, **extra, **updates)

    def save_compose(self, compose_text: str) -> str:
        """Store the deployed compose file verbatim (redacted only if it holds a secret).

        Returns:
            the hex sha256 of the bytes deployed.
        """
        data = compose_text.encode()
        import hashlib  # here: OpenSSL's start-up costs commands that only read runs
        digest = hashlib.sha256(data).hexdigest()
        clean = redact_yaml(compose_text)
        atomic_write(self.path / COMPOSE, clean.encode(), mode=RUN_FILE_MODE)
        self.save_meta(compose_sha256=digest, compose_redacted=clean != compose_text)
        return digest


def _validate_meta(data: dict[str, Any], file: Path) -> RunMeta:
    from pydantic import ValidationError
    try:
        return _adapter(RUN_META).validate_python(data)
    except ValidationError as exc:
        raise _invalid(RUN_META, file, exc, "invalid run metadata in") from None


def write_bench_files(run_dir: str | Path, workload: Workload | dict[str, Any], samples: list[Any],
                      summary: BenchSummary | dict[str, Any]) -> dict[str, Path]:
    """Write a benchmark's ``workload.json``, ``bench.jsonl`` (one sample per line) and
    ``bench.json`` atomically into ``run_dir``, each validated against its model; the caller
    then sets ``benched_at`` in run.json.

    Returns:
        ``{file name: path}``.

    Raises:
        ServedeckError: a value does not validate (nothing is written).
        OSError: the directory is not writable.
    """
    return _write_validated(run_dir, ((WORKLOAD, workload), (BENCH_SAMPLES, samples), (BENCH_SUMMARY, summary)))


def _write_validated(run_dir: str | Path, values: Any) -> dict[str, Path]:
    """Validate every ``(file, value)`` against its file's model first, then write them all
    atomically (nothing is written when one does not validate)."""
    run_dir = Path(run_dir)
    texts = {file: _json_text(file, encode(file, value, path=run_dir / file)) for file, value in values}
    return {str(file): atomic_write(run_dir / file, text, mode=RUN_FILE_MODE) for file, text in texts.items()}


def write_load_files(run_dir: str | Path, summary: LoadSummary | dict[str, Any], records: list[Any],
                     capacity: CapacityResult | dict[str, Any] | None = None) -> dict[str, Path]:
    """Write a load benchmark's ``load.jsonl`` (one record per line), ``load.json`` and, for a
    capacity search, ``capacity.json`` atomically into ``run_dir``, each validated against its
    model; the caller then sets ``load_benched_at`` in run.json.

    Returns:
        ``{file name: path}``.

    Raises:
        ServedeckError: a value does not validate (nothing is written).
        OSError: the directory is not writable.
    """
    values: list[tuple[RunFile[Any], Any]] = [(LOAD_SAMPLES, records), (LOAD_SUMMARY, summary)]
    if capacity is not None:
        values.append((CAPACITY, capacity))
    return _write_validated(run_dir, values)


def read_load(run_dir: Path) -> tuple[LoadSummary | None, list[RequestRecord]]:
    """``(load.json, load.jsonl records)`` of a run; ``(None, [])`` when it has no load benchmark.

    Raises:
        ServedeckError: a file is not valid JSON or does not match its model.
    """
    summary = read(run_dir, LOAD_SUMMARY)
    if summary is None:
        return None, []
    return summary, read(run_dir, LOAD_SAMPLES)


def is_load_benchmarked(run_dir: Path) -> bool:
    """True when the run holds a load benchmark (``load.json``)."""
    return (Path(run_dir) / LOAD_SUMMARY).is_file()


def host_ceilings_path(runs_dir: Path, host: str) -> Path:
    """``runs/ceilings/<host>.json``: the ceilings last measured on ``host``."""
    return Path(runs_dir) / CEILINGS_DIR / f"{host}.json"


def write_host_ceilings(runs_dir: Path, measured: MeasuredCeilings | dict[str, Any]) -> Path:
    """Keep a host's measured ceilings (:class:`~servedeck.runs.records.MeasuredCeilings`,
    validated) atomically; returns the file.

    Raises:
        ServedeckError: the measurement does not validate (nothing is written).
    """
    from pydantic import ValidationError

    from servedeck.runs.records import MeasuredCeilings
    try:
        doc = MeasuredCeilings.model_validate(measured)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ServedeckError(f"invalid measurement: {err['msg']}", field=".".join(str(x) for x in err["loc"])) from None
    return atomic_write(host_ceilings_path(runs_dir, doc.host), doc.model_dump_json(indent=2) + "\n",
                        mode=RUN_FILE_MODE)


def read_host_ceilings(runs_dir: Path, host: str) -> MeasuredCeilings | None:
    """The ceilings last measured on ``host``, or None.

    Raises:
        ServedeckError: the file is not valid JSON or not a measurement (file and field).
    """
    from pydantic import ValidationError

    from servedeck.jsonio import read_json_bytes
    from servedeck.runs.records import MeasuredCeilings
    path = host_ceilings_path(runs_dir, host)
    try:
        return MeasuredCeilings.model_validate_json(read_json_bytes(path))
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ServedeckError(f"invalid: {err['msg']}", file=str(path),
                             field=".".join(str(x) for x in err["loc"]) or None) from None


def sequence_of(run_dir: Path) -> int | None:
    """The sequence number in a run directory's name (``0003-batch-8192-b70`` → 3), or None."""
    m = RUN_DIR_RE.match(Path(run_dir).name)
    return int(m["seq"]) if m else None


def run_dirs(runs_dir: Path) -> list[tuple[int, Path]]:
    """``(sequence, directory)`` of every run directory under ``runs_dir``, oldest first
    (``[]`` when the directory does not exist; other entries such as ``reports/`` are skipped)."""
    out = []
    try:
        entries = list(os.scandir(runs_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        m = RUN_DIR_RE.match(entry.name)
        if m and entry.is_dir():
            out.append((int(m["seq"]), Path(entry.path)))
    return sorted(out)


def create_run(runs_dir: Path, profile: str, host: str, **meta: Any) -> RunRecord:
    """Create the next run directory and its initial ``run.json``.

    Args:
        runs_dir: the project's ``runs/``.
        profile, host: profile and inventory host names (part of the directory name).
        **meta: further :class:`~servedeck.runs.records.RunMeta` fields (``kind="rollback"``,
            ``restores``, ``image``, ...).

    Raises:
        ServedeckError: when the runs directory cannot be created, or a field is invalid
            (then the directory is removed again).
    """
    runs_dir = Path(runs_dir)
    for what, name in (("profile", profile), ("host", host)):
        if not HOST_NAME_RE.match(name):  # a profile name is one too
            raise ServedeckError(f"{what} name {name[:120]!r} cannot name a run: letters, digits, '.', "
                                 "'_' and '-' only, starting with a letter or digit")
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServedeckError(f"cannot create the runs directory: {exc}", file=str(runs_dir)) from None
    seq = max((n for n, _ in run_dirs(runs_dir)), default=0) + 1
    while True:
        path = runs_dir / f"{seq:04d}-{profile}-{host}"
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            seq += 1
    try:
        initial = _validate_meta({"run_id": path.name, "sequence": seq, "profile": profile, "host": host,
                                  "started_at": utcnow(), "outcome": "started",
                                  "servedeck_version": __version__, **meta}, path / RUN_META)
    except ServedeckError:
        path.rmdir()
        raise
    record = RunRecord(path=path, sequence=seq, meta=initial)
    record.save_meta()
    return record


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

@overload
def read(run_dir: Path, file: RunFile[str], *, required: Literal[True]) -> str: ...
@overload
def read(run_dir: Path, file: RunFile[str], *, required: bool = False) -> str | None: ...
@overload
def read(run_dir: Path, file: RunFile[bytes], *, required: bool = False) -> bytes | None: ...
@overload
def read(run_dir: Path, file: RunFile[Sample], *, required: bool = False) -> list[Sample]: ...
@overload
def read(run_dir: Path, file: RunFile[RequestRecord], *, required: bool = False) -> list[RequestRecord]: ...
@overload
def read(run_dir: Path, file: RunFile[M], *, required: Literal[True]) -> M: ...
@overload
def read(run_dir: Path, file: RunFile[M], *, required: bool = False) -> M | None: ...
def read(run_dir: Path, file: RunFile[Any], *, required: bool = False) -> Any:  # noqa: E302
    """The content of ``file`` in a run directory: its model (JSON), a list of models (JSON
    lines; ``[]`` when missing), the text or the bytes; None when the file is missing and not
    ``required``.

    Every file is read within bounds: JSON within :data:`servedeck.jsonio.JSON_LIMITS` (size,
    UTF-8, values; pydantic's parser bounds the nesting), text and bytes within
    :data:`TEXT_MAX_BYTES`.

    Raises:
        ServedeckError: the file is required and missing, it is beyond its bounds, it is not
            valid JSON (file and line), or it does not match its model (file and field).
    """
    path = Path(run_dir) / file
    try:
        if file.form in ("json", "jsonl"):
            from servedeck.jsonio import read_json_bytes
            data = read_json_bytes(path)
        else:
            from servedeck.fsutil import read_bounded_bytes
            data = read_bounded_bytes(path, TEXT_MAX_BYTES, what="run record")
    except (FileNotFoundError, NotADirectoryError):
        if required:
            raise ServedeckError(f"run record file {file} is missing", file=str(path),
                                 hint="is this a servedeck run directory (docs/run-record.md)?") from None
        return [] if file.form == "jsonl" else None
    if file.form == "bytes":
        return data
    if file.form == "text":
        return data.decode("utf-8", "replace")
    from pydantic import ValidationError
    adapter = _adapter(file)
    if file.form == "json":
        try:
            return adapter.validate_json(data)
        except ValidationError as exc:
            raise _invalid(file, path, exc, "invalid JSON" if _is_json_error(exc) else "invalid") from None
    out = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(adapter.validate_json(line))
        except ValidationError as exc:
            raise _invalid(file, path, exc, "invalid JSON" if _is_json_error(exc) else "invalid",
                           line=lineno) from None
    return out


def _is_json_error(exc: Any) -> bool:
    return any(e.get("type") == "json_invalid" for e in exc.errors())


def read_meta(run_dir: Path) -> RunMeta:
    """``run.json`` of a run directory.

    Raises:
        ServedeckError: no run.json (not a run directory), invalid JSON, or invalid fields.
    """
    if not (Path(run_dir) / RUN_META).is_file():
        raise ServedeckError("not a run directory (no run.json)", file=str(run_dir))
    return read(run_dir, RUN_META, required=True)


def meta_or_none(run_dir: Path) -> RunMeta | None:
    """``run.json`` of a run directory, or None when it is missing or invalid (context that must
    not fail a listing or a decision)."""
    try:
        return read_meta(run_dir)
    except ServedeckError:
        return None


def open_run(path: Path) -> RunRecord:
    """Open an existing run directory (``run.json`` must exist).

    Raises:
        ServedeckError: when ``path`` is not a run directory or its run.json is invalid.
    """
    meta = read_meta(path)
    return RunRecord(path=Path(path), sequence=meta.sequence, meta=meta)


def present_files(run_dir: Path) -> list[RunFile[Any]]:
    """The run files ``run_dir`` holds, in :data:`RUN_FILES` order (a pattern's files by name)."""
    run_dir = Path(run_dir)
    out: list[RunFile[Any]] = []
    for file in RUN_FILES:
        if file == EXTERNAL_RAW:
            out += [external_raw(p.name) for p in sorted((run_dir / EXTERNAL_DIR).glob("*")) if p.is_file()]
        elif file == EXTERNAL_SUMMARY:
            out += [EXTERNAL_SUMMARY.named(p.name) for p in sorted(run_dir.glob("external-*.json"))]
        elif file == EXTERNAL_CURVE:
            out += [EXTERNAL_CURVE.named(p.name) for p in sorted(run_dir.glob("curve-*.json"))]
        elif (run_dir / file).is_file():
            out.append(file)
    return out


def is_run_dir(path: Path) -> bool:
    """True when ``path`` holds a recorded deployment (a ``docker-compose.yml``)."""
    return (Path(path) / COMPOSE).is_file()


def is_benchmarked(run_dir: Path) -> bool:
    """True when the run holds benchmark samples."""
    return (Path(run_dir) / BENCH_SAMPLES).is_file()


def phase_samples(samples: list[Sample], phase: str, metric: str) -> list[float]:
    """Values of ``metric`` for ``phase`` (``cold``, ``warm``, ``warmup``) in file order
    (:meth:`~servedeck.runs.records.Sample.value`: the sample's own field, else its ``server``
    block's). Missing, None and non-finite values are skipped."""
    out = []
    for s in samples:
        if s.phase == phase:
            value = s.value(metric)
            if value is not None and math.isfinite(value):
                out.append(float(value))
    return out
