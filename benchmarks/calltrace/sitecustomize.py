"""Call timeline of a servedeck process, for ``deploy_overhead.py --trace`` (not part of servedeck).

On ``PYTHONPATH``, Python imports this module at start-up (``site``). With ``SD_CALLTRACE=FILE``
in the environment it appends one line per event to FILE: ``PID MS THREAD EVENT``, where MS
counts milliseconds from the process's own start (``/proc/self/stat`` field 22, so the
interpreter's start-up shows too) and EVENT is ``import M`` / ``imported M`` around the import
of each module of :data:`CALLS`, or ``> NAME`` / ``< NAME`` around each call of the functions
named there (wrapped as their module finishes importing, so nothing is imported earlier than
servedeck would import it), and ``gc generation G: MS ms`` for each pause of the garbage
collector of 1 ms or more. When a deploy is about to switch (the call of
``servedeck.host.docker.preload``, made right before ``docker compose up`` and before it imports
anything more) it writes the names of every module imported by then, in import order, one per
line, to ``FILE.imports`` (not ``__main__`` nor this module): the deploy's import set before its
switch. Without ``SD_CALLTRACE`` it does nothing.
"""

from __future__ import annotations

import functools
import gc
import importlib.abc
import os
import sys
import threading
import time

CALLS = {
    "servedeck.cli": ["_host", "_load"],
    "servedeck.deploy.apply": ["deploy", "_preflight_and_lock", "render_and_check", "preflight_kv_power",
                               "start_run", "resolve_image", "build_plan", "record_plan", "judge_in_image",
                               "apply_power", "wait_ready", "record_startup", "record_kv"],
    "servedeck.host.remote": ["RemoteHost.preflight", "RemoteHost.switch", "RemoteHost.finish"],
    "servedeck.host.ssh": ["SshTransport.open_session_soon", "SshTransport._ensure_session"],
    "servedeck.model.catalog": ["Catalog.__init__"],
    "servedeck.deploy.record": ["startup_facts", "RunWriter.write", "RunWriter.save_meta"],
    "servedeck.host.docker": ["preload"],
}
"""Module → the functions (``name`` or ``Class.name``) whose calls are timed."""


def _process_start() -> float:
    """This process's start as ``time.time()`` (Linux ``/proc``: start time in clock ticks after boot)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))


def _install(path: str) -> None:
    t0 = _process_start()
    out = open(path, "a", buffering=1)
    lock = threading.Lock()

    def log(event: str) -> None:
        with lock:
            out.write(f"{os.getpid()} {(time.time() - t0) * 1000:.0f} "
                      f"{threading.current_thread().name} {event}\n")

    def timed(fn, name):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if name == "preload" and not os.path.exists(path + ".imports"):
                with open(path + ".imports", "w") as imports:
                    imports.write("".join(m + "\n" for m in list(sys.modules)
                                          if m not in ("__main__", __name__)))  # not the tracer
            log(f"> {name}")
            try:
                return fn(*args, **kwargs)
            finally:
                log(f"< {name}")
        return call

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname not in CALLS:
                return None
            for finder in sys.meta_path:
                spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
            exec_module = spec.loader.exec_module

            def exec_and_wrap(module):
                log(f"import {fullname}")
                exec_module(module)
                log(f"imported {fullname}")
                for name in CALLS[fullname]:
                    owner_name, _, attr = name.rpartition(".")
                    owner = getattr(module, owner_name) if owner_name else module
                    if hasattr(owner, attr):
                        setattr(owner, attr, timed(getattr(owner, attr), name))

            spec.loader.exec_module = exec_and_wrap
            return spec

    sys.meta_path.insert(0, Finder())
    started: list[float] = []

    def collection(phase, info):  # the collector's pauses of 1 ms or more
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started and (ms := (time.perf_counter() - started[0]) * 1000) >= 1:
            log(f"gc generation {info['generation']}: {ms:.0f} ms, {info['collected']} collected")

    gc.callbacks.append(collection)
    log("site")


if os.environ.get("SD_CALLTRACE"):
    _install(os.environ["SD_CALLTRACE"])
