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


def read_bounded_bytes(path: str | os.PathLike[str], max_bytes: int, *, what: str = "text") -> bytes:
    """The bytes of ``path``, refused when it holds more than ``max_bytes`` (found from its size
    before reading, and never reading more than ``max_bytes + 1`` bytes, so a file that grows or
    a device cannot make it read more).

    Raises:
        FileNotFoundError: there is no such file (callers say what it means).
        ServedeckError: unreadable or larger than ``max_bytes`` (naming the file).
    """
    from servedeck.errors import ServedeckError

    name = str(path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = b"" if size > max_bytes else fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise ServedeckError(f"is a directory, not a {what} file", file=name) from None
    except OSError as exc:
        raise ServedeckError(f"cannot read the file: {exc.strerror or exc}", file=name) from None
    if size > max_bytes or len(data) > max_bytes:
        raise ServedeckError(f"the file is {max(size, len(data)):,} bytes; servedeck reads {what} files of at most "
                             f"{max_bytes:,} bytes", file=name,
                             hint="is this the file you meant? split it if it really is this large")
    return data


def read_bounded(path: str | os.PathLike[str], max_bytes: int, *, what: str = "text") -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped), within ``max_bytes``
    (:func:`read_bounded_bytes`).

    Raises:
        FileNotFoundError: there is no such file (callers say what it means).
        ServedeckError: unreadable, larger than ``max_bytes`` or not UTF-8 (naming the file,
            and the line and column of the first bad byte).
    """
    from servedeck.errors import ServedeckError

    name = str(path)
    data = read_bounded_bytes(path, max_bytes, what=what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ServedeckError(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column} "
                             f"({exc.reason})", file=name, field=f"line {line}",
                             hint=f"save the file as UTF-8 (e.g. iconv -t UTF-8 {name})") from None
    return text[1:] if text.startswith("\ufeff") else text


#: The environment variable naming the per-user state directory.
STATE_ENV = "SERVEDECK_STATE_DIR"


def state_dir() -> Path:
    """The per-user state directory: ``$SERVEDECK_STATE_DIR``, else the platform's convention
    (``platformdirs.user_state_dir("servedeck")``: ``$XDG_STATE_HOME/servedeck`` or
    ``~/.local/state/servedeck`` on Linux). Holds the image catalog of a user who works
    without a project. Not created here."""
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    import platformdirs
    return Path(platformdirs.user_state_dir("servedeck", appauthor=False))
