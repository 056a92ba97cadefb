"""Run records: one directory per deploy under ``runs/`` (layout: ``docs/run-record.md``).

A run directory is created with the next sequence number (``0001-base-b70``) by an atomic
``mkdir``, so two deploys never share one. Every file is written atomically. Secrets (API
keys, Hugging Face tokens, bearer tokens) are redacted before anything is written.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servedeck import __version__
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write

RUN_DIR_RE = re.compile(r"^(?P<seq>\d{4,})-(?P<rest>.+)$")

_SECRET_PATTERNS = [
    # --api-key VALUE / --api-key=VALUE / api_key: VALUE / 'api_key': 'VALUE'
    re.compile(r"(?P<k>--api-key[= ]|--hf-token[= ]|['\"]?(?:api_key|hf_token|HF_TOKEN|HUGGING_FACE_HUB_TOKEN"
               r"|HUGGINGFACE_TOKEN|OPENAI_API_KEY|VLLM_API_KEY)['\"]?\s*[:=]\s*['\"]?)"
               r"(?P<v>(?!\*\*\*)[^\s'\",}]+)"),
    re.compile(r"(?P<k>Authorization:\s*Bearer\s+)(?P<v>\S+)", re.I),
    re.compile(r"(?P<k>)(?P<v>\bhf_[A-Za-z0-9]{20,}\b)"),
    re.compile(r"(?P<k>)(?P<v>\bsk-[A-Za-z0-9_\-]{20,}\b)"),
]


def redact(text: str) -> str:
    """Replace secret values in ``text`` with ``***`` (keys and structure are kept)."""
    for pat in _SECRET_PATTERNS:
        text = pat.sub(lambda m: m.group("k") + "***", text)
    return text


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
    meta: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.path.name

    def write_text(self, name: str, text: str, *, secret_safe: bool = False) -> Path:
        """Write ``name`` (redacted unless ``secret_safe``) atomically."""
        return atomic_write(self.path / name, text if secret_safe else redact(text))

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write raw bytes atomically (no redaction: callers redact first)."""
        return atomic_write(self.path / name, data)

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as indented JSON (redacted) atomically."""
        return self.write_text(name, json.dumps(obj, indent=2, default=str) + "\n")

    def save_meta(self, **updates: Any) -> None:
        """Merge ``updates`` into ``run.json`` and write it."""
        self.meta.update(updates)
        self.write_json("run.json", self.meta)

    def save_compose(self, compose_text: str) -> str:
        """Store the deployed compose file verbatim (redacted only if it holds a secret).

        Returns:
            the hex sha256 of the bytes deployed.
        """
        data = compose_text.encode()
        digest = hashlib.sha256(data).hexdigest()
        clean = redact(compose_text)
        self.write_bytes("docker-compose.yml", clean.encode())
        self.save_meta(compose_sha256=digest, compose_redacted=clean != compose_text)
        return digest


def sequence_of(run_dir: Path) -> int | None:
    """The sequence number in a run directory's name (``0003-batch-8192-b70`` → 3), or None."""
    m = RUN_DIR_RE.match(Path(run_dir).name)
    return int(m["seq"]) if m else None


def run_dirs(runs_dir: Path) -> list[tuple[int, Path]]:
    """``(sequence, directory)`` of every run directory under ``runs_dir``, oldest first
    (``[]`` when the directory does not exist; other entries such as ``reports/`` are skipped)."""
    out = []
    if Path(runs_dir).is_dir():
        for child in Path(runs_dir).iterdir():
            seq = sequence_of(child)
            if seq is not None and child.is_dir():
                out.append((seq, child))
    return sorted(out)


def create_run(runs_dir: Path, profile: str, host: str, **meta: Any) -> RunRecord:
    """Create the next run directory and its initial ``run.json``.

    Raises:
        ServedeckError: when the runs directory cannot be created.
    """
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServedeckError(f"cannot create the runs directory: {exc}", file=str(runs_dir)) from None
    seq = max((n for n, _ in run_dirs(runs_dir)), default=0) + 1
    while True:
        path = runs_dir / f"{seq:04d}-{profile}-{host}"
        try:
            path.mkdir()
            break
        except FileExistsError:
            seq += 1
    record = RunRecord(path=path, sequence=seq, meta={
        "run_id": path.name, "sequence": seq, "profile": profile, "host": host,
        "started_at": utcnow(), "ready_at": None, "outcome": "started",
        "servedeck_version": __version__, **meta})
    record.save_meta()
    return record


def open_run(path: Path) -> RunRecord:
    """Open an existing run directory (``run.json`` must exist).

    Raises:
        ServedeckError: when ``path`` is not a run directory.
    """
    meta_path = path / "run.json"
    if not meta_path.exists():
        raise ServedeckError("not a run directory (no run.json)", file=str(path))
    meta = json.loads(meta_path.read_text())
    return RunRecord(path=path, sequence=int(meta.get("sequence", 0)), meta=meta)
