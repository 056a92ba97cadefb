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

The file is an append-only log that survives damage: a line is appended with one write, after
ending a torn last line (a line cut short by a full disk or a crash) with a line break of its
own (:data:`APPEND_SH`), so the next line is never glued onto it; a line that is not a JSON
object is skipped when read, and the revision number it still shows is never given again
(:func:`next_revision`). Values read back are checked before use (:func:`revisions`): a
``compose_sha256`` that is not a SHA-256 (it names a file under ``good/``), a ``run_id`` that is
not a run id, a port that is not a port are dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from servedeck.grammar import PROFILE_NAME_RE, RUN_ID_RE, SERVICE_NAME_RE, SHA256_RE

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

MAX_LINE_BYTES = 64 * 1024
"""A history line longer than this is damage (servedeck writes lines of a few hundred bytes)."""

APPEND_SH = r"""
sd_append() {
  # $1 file, $2 text (one or more lines without the last line break): a torn last line (no
  # final line break) is ended first, then the text is appended in one write; owner-only.
  if [ -s "$1" ] && [ -n "$(tail -c 1 "$1")" ]; then printf '\n' >> "$1"; fi
  printf '%s\n' "$2" >> "$1" && chmod 600 "$1"
}
"""
"""POSIX sh function ``sd_append FILE TEXT`` used by every script that writes the history."""

_REVISION_RE = re.compile(rb'"revision"\s*:\s*(\d{1,9})\b')


def history_records(data: bytes | None) -> list[dict[str, Any]]:
    """The records of a host's ``history.jsonl`` (one JSON object per line), oldest first. A
    damaged line (not a JSON object: torn, or empty) becomes ``{"damaged": <its first 200
    characters>, "revision_seen": N}`` with the revision number it still shows, if any, so
    that number is never given again; empty lines are skipped."""
    out: list[dict[str, Any]] = []
    for raw in (data or b"").split(b"\n"):
        if not raw.strip():
            continue
        rec: Any = None
        if len(raw) <= MAX_LINE_BYTES:
            try:
                rec = json.loads(raw)
            except ValueError:
                rec = None
        if isinstance(rec, dict):
            out.append(rec)
            continue
        seen = _REVISION_RE.search(raw[:MAX_LINE_BYTES])
        out.append({"damaged": raw[:200].decode("utf-8", "replace"),
                    "revision_seen": int(seen.group(1)) if seen else None})
    return out


def damaged(records: list[dict[str, Any]]) -> int:
    """How many lines of the history could not be read (:func:`history_records`)."""
    return sum(1 for r in records if "damaged" in r)


def _checked(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` without the values that fail their grammar (they come from a file on the host)."""
    out = {k: v for k, v in rec.items() if v is not None}
    for key, pattern in (("compose_sha256", SHA256_RE), ("run_id", RUN_ID_RE), ("profile", PROFILE_NAME_RE),
                         ("service", SERVICE_NAME_RE)):
        if key in out and not (isinstance(out[key], str) and pattern.match(out[key])):
            del out[key]
    port = out.get("port")
    if port is not None and not (isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535):
        del out["port"]
    for key in ("target_revision", "max_num_batched_tokens"):
        if key in out and not (isinstance(out[key], int) and not isinstance(out[key], bool)):
            del out[key]
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
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            merged.setdefault(n, {}).update(_checked(rec))
    return [Revision(n, str(r.get("event", "deploy")), str(r.get("outcome", "started")),
                     r.get("compose_sha256"), r.get("profile"), r)
            for n, r in sorted(merged.items())]


def next_revision(records: list[dict[str, Any]]) -> int:
    """The number the next revision gets: one more than any revision the history shows,
    damaged lines included (1 on a host with no history)."""
    seen = [n for r in records if isinstance(n := r.get("revision_seen"), int)]
    return max([r.number for r in revisions(records)] + seen, default=0) + 1


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
