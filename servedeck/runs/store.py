"""The run store: the only code that knows how a run record is laid out on disk.

A run is one deploy (or rollback) recorded under ``runs/<sequence>-<profile>-<host>/``; the
layout is documented in ``docs/run-record.md``, which :mod:`servedeck.runs.doc` generates from
the names below and the :class:`~servedeck.runs.meta.RunMeta` model (a unit test keeps the two equal).

A run directory is created with the next sequence number (``0001-base-b70``) by an atomic
``mkdir``, so two deploys never share one. Every file is written atomically. Secrets (API
keys, Hugging Face tokens, bearer tokens) are redacted before anything is written.
``run.json`` is typed (:class:`servedeck.runs.meta.RunMeta`, pydantic, ``extra="forbid"``): a writer that passes an
unknown field or a wrong type gets an error at once instead of a record that drifts from the
documentation.

API used by the deploy, rollback and bench stages (names are stable):

* :func:`create_run` (``runs_dir, profile, host, **meta``) -> :class:`RunRecord`;
* :meth:`RunRecord.save_meta` (``**updates``: :class:`RunMeta` fields), :meth:`RunRecord.finish`
  (a final state and its reason), :meth:`RunRecord.save_compose`, :meth:`RunRecord.write_json`,
  :meth:`RunRecord.write_text`, :meth:`RunRecord.write_bytes` (file names: the constants below);
* :func:`write_bench_files`, :func:`open_run`, :func:`read_meta`, :func:`read_json`,
  :func:`read_samples`, :func:`run_dirs`; listing and references: :mod:`servedeck.runs.history`.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servedeck import __version__
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write, read_bounded
from servedeck.grammar import HOST_NAME_RE, RUN_ID_RE

if TYPE_CHECKING:  # the typed model lives in servedeck.runs.meta (pydantic), imported when used
    from servedeck.runs.meta import FailurePhase, Outcome, RunMeta

# --------------------------------------------------------------------------------------------
# File names (the only place they are spelled)
# --------------------------------------------------------------------------------------------

RUN_META = "run.json"
COMPOSE = "docker-compose.yml"
PROFILE_RESOLVED = "profile.resolved.json"
EFFECTIVE = "effective.json"
ARGV = "argv.json"
PROFILE_DIFF = "profile.diff.json"
FACTS = "facts.json"
STARTUP_LOG = "startup.log"
STARTUP = "startup.json"
ARGS_VERIFICATION = "args_verification.json"
WORKLOAD = "workload.json"
BENCH_SAMPLES = "bench.jsonl"
BENCH_SUMMARY = "bench.json"
KV = "kv.json"
EXTERNAL_DIR = "external"
INDEX = ".index.json"
"""The listing cache at the top of the runs directory (see :mod:`servedeck.runs.history`)."""
REPORTS_DIR = "reports"
"""A/B reports live under ``runs/reports/<A>_vs_<B>/``."""
NOISE_DIR = "noise"
"""A/A noise floors live under ``runs/noise/<host>-<image digest>.json``."""


def external_raw(name: str) -> str:
    """Path (relative to the run directory) of an imported external result file ``name``."""
    return f"{EXTERNAL_DIR}/{Path(name).name}"


def external_summary(name: str) -> str:
    """File name of the mapped metrics of an imported external result ``name``."""
    return f"external-{Path(name).stem}.json"


#: Every file of a run directory with what it holds, in the order a deploy writes them
#: (rendered into ``docs/run-record.md``).
RUN_FILES: dict[str, str] = {
    COMPOSE: "byte-for-byte the compose file that was deployed (redacted only if it held a secret; "
             "`compose_sha256` in run.json is the sha256 of what was deployed)",
    RUN_META: "metadata (`servedeck.runs.meta.RunMeta`), see below",
    PROFILE_RESOLVED: "the resolved profile (`Profile.model_dump(mode=\"json\")`)",
    EFFECTIVE: "effective engine settings: image defaults + profile overrides, flat dict keyed by "
               "vLLM dest names (`max_num_batched_tokens`, `speculative_config`, ...)",
    ARGV: "`{\"command\": [...container command tokens...], \"entrypoint\": [...image entrypoint...]}`",
    PROFILE_DIFF: "list of `{\"path\": \"engine.max_num_batched_tokens\", \"parent\": 4096, \"value\": 8192}` "
                  "against the profile's parent (empty list when no parent)",
    FACTS: "`{\"host\": {...}, \"image\": {...}}` gathered during preflight (host: name, kernel, "
           "docker_version, compose_version, gpu_devices, gpu_power_cap_w (the xe card's sustained "
           "limit `power1_max` in W, as preflight found it: before this deploy's own cap), "
           "disk_free_gib; image: "
           "reference, digest, created, entrypoint, vllm_version, labels)",
    STARTUP_LOG: "container log from start until ready (or failure), secrets redacted",
    STARTUP: "parsed startup facts (`servedeck.vllm.startup_facts.StartupFacts.to_dict()`)",
    ARGS_VERIFICATION: "list of `{\"setting\", \"expected\", \"reported\", \"status\", \"source\"}`; "
                       "status `confirmed` | `differs` | `not reported`",
    WORKLOAD: "the benchmark workload definition",
    KV: "the KV-capacity prediction made before the deploy beside what the server logged "
        "(`servedeck.vllm.kv.compare_with_measured`)",
    BENCH_SAMPLES: "one JSON object per request sample",
    BENCH_SUMMARY: "summary per phase and metric",
    f"{EXTERNAL_DIR}/NAME": "an imported external benchmark result, byte for byte "
                            "(`vllm bench serve --save-result`, guidellm)",
    "external-STEM.json": "its metrics mapped to servedeck's names, with the raw file's sha256",
}

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

    def write_text(self, name: str, text: str, *, secret_safe: bool = False) -> Path:
        """Write ``name`` (one of this module's file names; redacted unless ``secret_safe``)
        atomically."""
        return atomic_write(self.path / name, text if secret_safe else redact(text), mode=RUN_FILE_MODE)

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write raw bytes atomically (no redaction: callers redact first)."""
        return atomic_write(self.path / name, data, mode=RUN_FILE_MODE)

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as indented JSON (redacted) atomically."""
        return self.write_text(name, json.dumps(obj, indent=2, default=str) + "\n")

    def save_meta(self, **updates: Any) -> None:
        """Merge ``updates`` (:class:`RunMeta` fields) into ``run.json`` and write it.

        Raises:
            ServedeckError: an unknown field or a value of the wrong type (nothing is written).
        """
        from servedeck.runs.meta import validate_meta
        self.meta = validate_meta({**self.meta.model_dump(exclude_unset=True), **updates}, self.path / RUN_META)
        self.write_text(RUN_META, self.meta.model_dump_json(indent=2, exclude_unset=True) + "\n")

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
        self.write_bytes(COMPOSE, clean.encode())
        self.save_meta(compose_sha256=digest, compose_redacted=clean != compose_text)
        return digest


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

def write_bench_files(run_dir: str | Path, workload: dict, samples: list[dict], summary: dict) -> dict[str, Path]:
    """Write a benchmark's ``workload.json``, ``bench.jsonl`` (one sample per line) and
    ``bench.json`` atomically into ``run_dir``; the caller then sets ``benched_at`` in run.json.

    Returns:
        ``{file name: path}``.

    Raises:
        OSError: the directory is not writable.
    """
    run_dir = Path(run_dir)
    return {
        WORKLOAD: atomic_write(run_dir / WORKLOAD, json.dumps(workload, indent=2) + "\n", mode=RUN_FILE_MODE),
        BENCH_SAMPLES: atomic_write(run_dir / BENCH_SAMPLES, "".join(json.dumps(s) + "\n" for s in samples),
                                    mode=RUN_FILE_MODE),
        BENCH_SUMMARY: atomic_write(run_dir / BENCH_SUMMARY, json.dumps(summary, indent=2) + "\n",
                                    mode=RUN_FILE_MODE),
    }


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
        **meta: further :class:`RunMeta` fields (``kind="rollback"``, ``restores``, ``image``, ...).

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
    from servedeck.runs.meta import validate_meta
    try:
        initial = validate_meta({"run_id": path.name, "sequence": seq, "profile": profile, "host": host,
                                 "started_at": utcnow(), "outcome": "started",
                                 "servedeck_version": __version__, **meta}, path / RUN_META)
    except ServedeckError:
        path.rmdir()
        raise
    record = RunRecord(path=path, sequence=seq, meta=initial)
    record.save_meta()
    return record


def read_json(run_dir: Path, name: str, *, required: bool = False) -> Any:
    """The JSON file ``name`` of a run directory, or None when it is missing and not ``required``.

    Raises:
        ServedeckError: the file is required and missing, or it is not valid JSON or beyond
            :data:`servedeck.jsonio.JSON_LIMITS` (file and line).
    """
    from servedeck.jsonio import read_json_file
    path = Path(run_dir) / name
    try:
        return read_json_file(path)
    except FileNotFoundError:
        if required:
            raise ServedeckError("run record file is missing", file=str(path),
                                 hint="is this a servedeck run directory (docs/run-record.md)?") from None
        return None


def read_text(run_dir: Path, name: str) -> str:
    """A text file of a run directory (the compose file, the startup log).

    Raises:
        ServedeckError: the file is missing, larger than :data:`TEXT_MAX_BYTES` or not UTF-8.
    """
    path = Path(run_dir) / name
    try:
        return read_bounded(path, TEXT_MAX_BYTES, what="run record")
    except FileNotFoundError:
        raise ServedeckError("run record file is missing", file=str(path),
                             hint="every run records the deployed compose file verbatim") from None


def read_meta(run_dir: Path) -> RunMeta:
    """``run.json`` of a run directory, typed.

    Raises:
        ServedeckError: no run.json (not a run directory), invalid JSON, or invalid fields.
    """
    from servedeck.runs.meta import validate_meta
    path = Path(run_dir) / RUN_META
    from servedeck.jsonio import read_json_bytes
    try:
        data = read_json_bytes(path)
    except FileNotFoundError:
        raise ServedeckError("not a run directory (no run.json)", file=str(run_dir)) from None
    return validate_meta(data, path)


def peek_meta(run_dir: Path) -> dict[str, Any] | None:
    """``run.json`` as plain JSON, not validated (None when missing or unreadable): for
    listings that need a few fields of many runs fast (no pydantic import). Fields as in
    :class:`servedeck.runs.meta.RunMeta`; a run *served* when ``outcome == SERVED``."""
    try:
        doc = read_json(run_dir, RUN_META)
    except (ServedeckError, OSError, ValueError):  # missing dir, invalid JSON, not UTF-8
        return None
    return doc if isinstance(doc, dict) else None


def open_run(path: Path) -> RunRecord:
    """Open an existing run directory (``run.json`` must exist).

    Raises:
        ServedeckError: when ``path`` is not a run directory or its run.json is invalid.
    """
    meta = read_meta(path)
    return RunRecord(path=Path(path), sequence=meta.sequence, meta=meta)


def is_run_dir(path: Path) -> bool:
    """True when ``path`` holds a recorded deployment (a ``docker-compose.yml``)."""
    return (Path(path) / COMPOSE).is_file()


def is_benchmarked(run_dir: Path) -> bool:
    """True when the run holds benchmark samples."""
    return (Path(run_dir) / BENCH_SAMPLES).is_file()


def read_samples(run_dir: Path) -> list[dict]:
    """Read ``bench.jsonl`` (one JSON sample per line); [] when the run was not benchmarked.

    Raises:
        ServedeckError: a line is not valid JSON or the file is beyond
            :data:`servedeck.jsonio.JSON_LIMITS` (file and line number given).
    """
    from servedeck.jsonio import read_json_lines
    try:
        return read_json_lines(Path(run_dir) / BENCH_SAMPLES)
    except FileNotFoundError:
        return []


def phase_samples(samples: list[dict], phase: str, metric: str) -> list[float]:
    """Values of ``metric`` for ``phase`` (``cold``, ``warm``, ``warmup``) in file order;
    ``spec_accept_len`` (and any metric missing at the top level) come from each sample's
    ``server`` block. Missing, None and non-finite values are skipped."""
    out = []
    for s in samples:
        if s.get("phase") != phase:
            continue
        value = s.get(metric)
        if metric == "spec_accept_len" or value is None:
            value = (s.get("server") or {}).get(metric, value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append(float(value))
    return out
