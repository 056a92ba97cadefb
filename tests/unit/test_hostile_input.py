"""Hostile files of every kind servedeck reads are refused with an error naming the file, within
1 s of CPU and 100 MB of memory.

Each case runs in a forked child of this process (servedeck already imported) with two resource
limits set in the child: ``RLIMIT_CPU`` 1 s (the kernel stops it with SIGXCPU beyond that) and
``RLIMIT_AS`` its address space at the fork plus 100 MB (an allocation beyond fails with
MemoryError). The child reports what servedeck raised through a pipe; a child killed by a
signal (SIGXCPU, SIGSEGV) or out of memory fails the case. CPU time, not wall time: the limit
holds on a loaded machine. The figures are printed by ``benchmarks/hostile_input.py``.
"""

from __future__ import annotations

import gc
import json
import os
import re
import resource
import signal
from pathlib import Path

import pytest

from devtools import hostile
# every reader's modules imported here, before the forks: the limits measure the reading
from servedeck.bench import external  # noqa: F401
from servedeck.compose import check, document  # noqa: F401
from servedeck.model import catalog, inventory, profile  # noqa: F401
from servedeck.runs import records, store  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CPU_S = 1
MEMORY_BYTES = 100 * 1024 * 1024


def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _in_limited_child(kind: str, path: Path) -> dict:
    """Read ``path`` as servedeck reads a ``kind`` file in a forked child under the limits;
    return ``{"error": type, "message": rendered, "file": ...}`` or ``{"accepted": ...}``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: limits, the read, one JSON line, exit
        os.close(read_fd)
        code = 0
        try:
            # the test process's own objects out of the child's garbage collections (a collection
            # would walk, and copy on write, the whole inherited heap of this long test session)
            gc.freeze()
            resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 1))
            resource.setrlimit(resource.RLIMIT_AS, (_address_space() + MEMORY_BYTES,) * 2)
            try:
                value = hostile.read_case(kind, path)
                out = {"accepted": str(value)[:200]}
            except MemoryError:
                out, code = {"error": "MemoryError"}, 3
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                render = getattr(exc, "render", None)
                out = {"error": type(exc).__name__, "message": render() if render else str(exc),
                       "file": getattr(exc, "file", None)}
            os.write(write_fd, json.dumps(out).encode()[:60_000])
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        pytest.fail(f"{kind} {path.name}: the reader was killed by {sig} "
                    f"({'over the 1 s CPU limit' if sig == 'SIGXCPU' else 'a crash'})")
    return json.loads(data or b'{"error": "no answer"}')


@pytest.mark.parametrize("kind,case", hostile.cases(), ids=lambda v: v)
def test_a_hostile_file_is_refused_naming_it_within_1s_cpu_and_100mb(tmp_path, kind, case):
    hostile.setup_project(tmp_path, ROOT)
    path = hostile.write_case(tmp_path, kind, case)
    out = _in_limited_child(kind, path)
    assert "accepted" not in out, out
    assert out["error"] == "ServedeckError", out  # a clear error, never a traceback
    assert str(path) in out["message"], out
    if case == "50MB":
        assert "bytes" in out["message"] and "at most" in out["message"]
    elif case == "not-utf8":
        assert "UTF-8" in out["message"]
    elif kind not in ("bench.jsonl", "external-result", "fleet-result", "facts.json", "run.json"):
        # YAML errors name the line: "FILE:LINE: ..." (or "line N" where no file leads the message)
        assert re.search(rf"{re.escape(str(path))}:\d+:|line \d+", out["message"]), out


def test_the_limits_are_real_an_unbounded_reader_fails_them(tmp_path):
    """The child's limits do stop a reader without bounds: ruamel's plain loader on the alias
    bomb, walked to plain data, runs out of memory or CPU (the test above could not pass by
    accident)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(hostile.BOMB)
    hostile.KINDS["unbounded"] = (lambda d: d, _unbounded, {})
    try:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                gc.freeze()
                resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 1))
                resource.setrlimit(resource.RLIMIT_AS, (_address_space() + MEMORY_BYTES,) * 2)
                _unbounded(path)
                os.write(write_fd, b"finished")
            except MemoryError:
                os.write(write_fd, b"MemoryError")
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as fh:
            said = fh.read()
        _, status = os.waitpid(pid, 0)
        stopped = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)
        assert stopped or said == b"MemoryError", (status, said)
    finally:
        hostile.KINDS.pop("unbounded")


def _unbounded(path: Path) -> int:
    from ruamel.yaml import YAML
    data = YAML(typ="safe", pure=True).load(path.read_text())

    def count(v) -> int:
        return 1 + sum(count(x) for x in v) if isinstance(v, list) else 1

    return sum(count(v) for v in data.values())
