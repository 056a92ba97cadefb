"""The host's deploy lock: one JSON file ``<workdir>/.servedeck/deploy.lock`` taken atomically.

Every command that changes what runs on a host (deploy, rollback, down) takes it; each one
recognises a stale lock (its owner process on this machine is gone, or it is older than
:data:`STALE_AFTER_H`) and offers the same ``force_unlock`` option.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket

from pydantic import BaseModel, ConfigDict

from servedeck.errors import ServedeckError

STALE_AFTER_H = 12.0
"""A lock older than this many hours is stale whoever holds it."""

# $1 lock path, $2 the JSON we wrote. Prints released | absent | other + holder's JSON.
RELEASE_SCRIPT = r"""
lock=$1; expect=$2
if [ ! -f "$lock" ]; then echo absent
elif [ "$(cat "$lock")" = "$expect" ]; then rm -f "$lock"; echo released
else echo other; cat "$lock"; fi
"""


class LockInfo(BaseModel):
    """Content of the deploy lock file on a host (JSON).

    ``owner``: who deploys (free text, e.g. ``alice: deploy speed-8192``); ``pid`` and
    ``host``: the servedeck process and the machine it runs on (not the card host);
    ``started_at``: UTC, ISO 8601.
    """

    model_config = ConfigDict(extra="forbid")

    owner: str
    pid: int
    host: str
    started_at: _dt.datetime

    def age_h(self, now: _dt.datetime | None = None) -> float:
        """Age of the lock in hours."""
        now = now or _dt.datetime.now(_dt.timezone.utc)
        started = self.started_at
        if started.tzinfo is None:
            started = started.replace(tzinfo=_dt.timezone.utc)
        return (now - started).total_seconds() / 3600.0

    def stale_reason(self, *, max_age_h: float = STALE_AFTER_H, now: _dt.datetime | None = None) -> str | None:
        """Why this lock looks stale, or None.

        Stale when older than ``max_age_h`` hours, or when it was taken on this machine
        (``host`` equals the local hostname) and process ``pid`` no longer exists (a client
        that was killed, or lost its connection and exited).
        """
        age = self.age_h(now)
        if age > max_age_h:
            return f"it is {age:.1f} h old (more than {max_age_h:g} h)"
        if self.host == socket.gethostname() and not _pid_alive(self.pid):
            return f"its process {self.pid} on {self.host} (this machine) is gone"
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def new_lock(owner: str) -> LockInfo:
    """A lock owned by this process on this machine, started now (UTC, whole seconds)."""
    return LockInfo(owner=owner, pid=os.getpid(), host=socket.gethostname(),
                    started_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0))


def parse_lock(host: str, path: str, data: bytes | str) -> LockInfo:
    """Lock file content → :class:`LockInfo`.

    Raises:
        ServedeckError: not valid lock JSON (hint: force-unlock).
    """
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        return LockInfo.model_validate_json(text)
    except ValueError as exc:
        raise ServedeckError(f"host {host}: deploy lock {path} is not valid: {text.strip()[:300]}",
                             hint="inspect it, then force-unlock (--force-unlock)") from exc


def unwritable_error(host: str, workdir: str, reason: str) -> ServedeckError:
    """The error for a working directory the lock could not be written to (a full or
    read-only disk), in the host's own words."""
    return ServedeckError(f"host {host}: the working directory {workdir} cannot be written ({reason.strip()}); "
                          "no lock was taken and nothing was changed",
                          hint=f"free space on the host (df -h {workdir}) or make the directory writable")


def held_error(host: str, held: LockInfo | None, *, stale_after_h: float = STALE_AFTER_H,
               raw: str = "") -> ServedeckError:
    """The error for a lock held by someone else: who, since when, whether it looks stale,
    and the one option that takes it over (``--force-unlock``). A lock file that is not a lock
    (``raw``: empty, or not lock JSON) is damage, not a holder: servedeck writes a lock whole or
    not at all, so no command holds it."""
    if held is None:
        what = "empty" if raw in ("", "(empty)") else f"not a lock: {raw[:120]!r}"
        return ServedeckError(f"host {host}: the deploy lock file is damaged ({what}; left by a write that "
                              "failed, e.g. on a full disk, or by hand): no command holds it",
                              hint="take it over with --force-unlock")
    stale = held.stale_reason(max_age_h=stale_after_h)
    msg = (f"host {host} is locked by {held.owner!r} (pid {held.pid} on {held.host}) "
           f"since {held.started_at.isoformat()}")
    if stale:
        return ServedeckError(f"{msg}; the lock looks stale: {stale}",
                              hint="no deploy is running: take it over with --force-unlock")
    return ServedeckError(msg, hint="wait for that command to finish; if it died, "
                                    "take the lock over with --force-unlock")
