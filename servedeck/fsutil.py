"""Atomic file writes (a temp file in the same directory, fsync, then rename) and the user cache
directory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically and return the path.

    Text is written as UTF-8 with no newline translation, so the bytes on disk are exactly
    ``data.encode()``. Parent directories are created. On any error the temp file is
    removed and the previous file at ``path`` (if any) is left untouched.

    Raises:
        OSError: when the directory cannot be written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def cache_dir() -> Path:
    """servedeck's cache directory: ``$SERVEDECK_CACHE_HOME``, else ``$XDG_CACHE_HOME/servedeck``
    (``~/.cache/servedeck``). Everything in it can be deleted at any time."""
    base = os.environ.get("SERVEDECK_CACHE_HOME")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "servedeck"
