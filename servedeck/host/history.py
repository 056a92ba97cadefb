"""The deployment history of a host: ``<workdir>/.servedeck/history.jsonl`` plus the compose files
of the last few deployments that served, kept by hash in ``<workdir>/.servedeck/good/``.

Format of ``history.jsonl`` (one JSON object per line, appended with ``>>``):

* every deploy, rollback and down is a **revision** (an increasing integer); it writes a line
  ``{"revision", "event": "deploy"|"rollback"|"down", "outcome": "started", "time", "who",
  "profile", "compose_sha256", "image_digest", "run_id", ...}`` before it changes anything and a
  final line with the same ``revision`` and its outcome (``ready``, ``failed``,
  ``interrupted``, ``down``, or ``abandoned`` when a later command finds the client died),
  ``reason`` and ``ended``;
* a deployment is **known good** when its final outcome is ``ready`` (it served and passed
  readiness) and its compose file is in ``good/<sha256>.yml``. Only known-good files are ever
  rollback targets.

Growth is bounded: the file keeps the last :data:`KEEP_LINES` lines, ``good/`` the newest
:data:`KEEP_GOOD` distinct known-good files. Files are readable by their owner only (0600).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

STATE_DIR = ".servedeck"
"""Directory under the host workdir holding servedeck's own state (lock, history, good/)."""
HISTORY_NAME = "history.jsonl"
LOCK_NAME = "deploy.lock"
GOOD_DIR = "good"
KEEP_GOOD = 5
"""Known-good compose files kept per host (newest first); older ones are pruned."""
KEEP_LINES = 400
"""History lines kept per host (about 200 deploys)."""

FINAL_OUTCOMES = ("ready", "failed", "interrupted", "down", "abandoned")


def history_records(data: bytes | None) -> list[dict[str, Any]]:
    """The records of a host's ``history.jsonl`` (one JSON object per line; unreadable lines
    are skipped), oldest first."""
    out = []
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


@dataclass(frozen=True)
class Revision:
    """One deploy, rollback or down as the history tells it (its lines merged).

    ``outcome`` is the final outcome, or ``started`` when no final line was written (the
    command still runs, or its client died).
    """

    number: int
    event: str
    outcome: str
    compose_sha256: str | None
    profile: str | None
    record: dict[str, Any]

    @property
    def good(self) -> bool:
        return self.outcome == "ready" and bool(self.compose_sha256)


def revisions(records: list[dict[str, Any]]) -> list[Revision]:
    """Merge history lines by ``revision`` (lines without one are skipped), oldest first."""
    merged: dict[int, dict[str, Any]] = {}
    for rec in records:
        n = rec.get("revision")
        if isinstance(n, int):
            merged.setdefault(n, {}).update({k: v for k, v in rec.items() if v is not None})
    return [Revision(n, str(r.get("event", "deploy")), str(r.get("outcome", "started")),
                     r.get("compose_sha256"), r.get("profile"), r)
            for n, r in sorted(merged.items())]


def next_revision(records: list[dict[str, Any]]) -> int:
    """The number the next revision gets (1 on a host with no history)."""
    return max((r.number for r in revisions(records)), default=0) + 1


def known_good(records: list[dict[str, Any]], stored: set[str] | None = None) -> list[Revision]:
    """Known-good revisions, newest first, one per compose file (its newest revision).

    Args:
        stored: the hashes present in ``good/`` (None: do not filter).
    """
    out: list[Revision] = []
    seen: set[str] = set()
    for rev in reversed(revisions(records)):
        sha = rev.compose_sha256
        if rev.good and sha and sha not in seen and (stored is None or sha in stored):
            seen.add(sha)
            out.append(rev)
    return out


def unfinished(records: list[dict[str, Any]]) -> list[Revision]:
    """Revisions that started but never wrote a final line, oldest first."""
    return [r for r in revisions(records) if r.outcome == "started"]


def keep_hashes(records: list[dict[str, Any]], keep: int = KEEP_GOOD) -> list[str]:
    """The compose hashes ``good/`` keeps: the newest ``keep`` known-good files."""
    return [r.compose_sha256 for r in known_good(records)[:keep] if r.compose_sha256]


def line(record: dict[str, Any]) -> bytes:
    """One history line (compact JSON + newline) for ``record``."""
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
