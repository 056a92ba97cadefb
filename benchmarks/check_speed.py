#!/usr/bin/env python3
"""How fast are ``servedeck check --profile P`` and ``invoke check --profile P``, against
``docker compose config -q`` in the same run?

Measured in one invocation, alternating the commands so that machine load hits all alike, on
the interpreter of a plain virtualenv holding the wheel built from this checkout (as a user
installs servedeck: :func:`devtools.wheelenv.wheel_venv`; ``--python current`` runs the
development interpreter instead, with its editable-install finder and whatever ``.pth`` start-up
hooks the base interpreter has):

* ``servedeck check --profile P`` as a whole process (the console script; ``python -m
  servedeck`` when the script is not on PATH, the same code), wall time,
* ``invoke check --profile P`` as a whole process (render + full verification), wall time,
* ``invoke render --profile P`` as a whole process, wall time,
* ``docker compose -f FILE config -q`` on the very file ``invoke render`` wrote, wall time,
* in-process: ``render_profile`` (which parses the file it wrote and reads its services) +
  ``check_rendered`` after loading profile, catalog and
  templates once (median of N calls), so the share of Python start-up and imports is visible,
* when the ``invoke check`` process misses the 0.5 s target: ``python -X importtime`` of what
  the check task imports, summarised by top-level package (self time summed over the package's
  modules) and by the slowest single top-level imports.

Printed figures are medians of ``-n`` runs (min and max beside them). Targets (printed with
pass/miss; nothing is asserted): each check process under 0.5 s and under 4x ``docker compose
config -q``.

Usage::

    python benchmarks/check_speed.py [--profile speed] [-n 7] [--importtime always|auto|never]
                                     [--python wheel|current]

Runs from the repository root (where ``tasks.py`` is); needs ``invoke`` on PATH and Compose v2
(``docker compose``); no Docker engine is needed for ``config -q``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import resource
import time
from collections import defaultdict
from pathlib import Path

from common import byte_compile  # noqa: E402  (benchmarks/common.py)

ROOT = Path(__file__).resolve().parents[1]
TARGET_CHECK_S = 0.5
TARGET_RATIO = 4.0
CPU: defaultdict[str, list[float]] = defaultdict(list)
"""CPU seconds (user + system) of each run, by command line: less sensitive to other load than wall time."""
SUMMARY = " errors, "  # the check's last line: "N errors, N warnings, N infos"


def wall(cmd: list[str], *, ok_codes: tuple[int, ...] = (0,), must_print: str | None = None) -> float:
    """Wall seconds of one run of ``cmd`` (cwd = repo root).

    Exits on an unexpected exit code, or when ``must_print`` is given and stdout lacks it (exit
    code 1 means "error findings" for a check, but also a crash before checking: the summary line
    tells the two apart).
    """
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[" ".join(cmd)].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if proc.returncode not in ok_codes or (must_print and must_print not in proc.stdout.decode()):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr.decode()[-2000:]}")
    return dt


def stats(xs: list[float]) -> str:
    return (f"median {statistics.median(xs) * 1000:8.1f} ms  (min {min(xs) * 1000:7.1f}, "
            f"max {max(xs) * 1000:7.1f}, n={len(xs)})")


def in_process(profile: str, n: int) -> tuple[float, list[float], list[float]]:
    """(load seconds, render seconds per call, check seconds per call), imports included in load."""
    t = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    from servedeck.compose.check import check_rendered
    from servedeck.model.profile import ProfileStore
    from servedeck.model.project import Project
    from servedeck.compose.render import render_profile
    project = Project(ROOT)
    loaded = ProfileStore(project.profiles_dir).load(profile)
    catalog = project.catalog()
    load_s = time.perf_counter() - t
    render_s, check_s = [], []
    for _ in range(n + 1):  # the first call is a warm-up (template compile, rule tables)
        t = time.perf_counter()
        rendered = render_profile(loaded, catalog, project.templates_dir)
        t1 = time.perf_counter()
        check_rendered(rendered, catalog)
        t2 = time.perf_counter()
        render_s.append(t1 - t)
        check_s.append(t2 - t1)
    return load_s, render_s[1:], check_s[1:]


IMPORT_RE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_profile(python: str, top: int = 12) -> None:
    """Print what dominates import time of the check task's imports (``-X importtime``)."""
    code = ("import invoke, servedeck.cli\n"
            "from servedeck.compose.check import check_rendered, format_findings\n"
            "from servedeck.findings import has_errors\n"
            "from servedeck.model.profile import ProfileStore\n"
            "from servedeck.compose.render import render_profile\n"
            "from servedeck.model.catalog import Catalog\n")
    proc = subprocess.run([python, "-X", "importtime", "-c", code], cwd=ROOT,
                          capture_output=True, text=True)
    by_pkg: dict[str, int] = defaultdict(int)
    first_level: list[tuple[int, str]] = []
    any_level: list[tuple[int, int, str]] = []
    total = 0
    for line in proc.stderr.splitlines():
        m = IMPORT_RE.match(line)
        if not m:
            continue
        self_us, cum_us, indent, name = int(m[1]), int(m[2]), len(m[3]), m[4]
        by_pkg[name.split(".")[0]] += self_us
        total += self_us
        if indent == 1:  # imported directly by the -c code (nesting level 0)
            first_level.append((cum_us, name))
        any_level.append((cum_us, indent, name))
    print(f"\nimport time of the check task's imports (python -X importtime), total self time "
          f"{total / 1000:.1f} ms:")
    print("  by top-level package (sum of self times):")
    for pkg, us in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {pkg:<28} {us / 1000:8.1f} ms  {100 * us / max(total, 1):5.1f} %")
    print("  slowest top-level imports (cumulative, including what they import):")
    for cum_us, name in sorted(first_level, reverse=True)[:6]:
        print(f"    {name:<40} {cum_us / 1000:8.1f} ms")
    print("  heaviest imports at any depth (cumulative; indentation = nesting, children are "
          "included in their parents):")
    for cum_us, indent, name in sorted(any_level, reverse=True)[:top + 8]:
        print(f"    {' ' * (indent - 1) + name:<48} {cum_us / 1000:8.1f} ms")


def resolve_servedeck() -> list[str]:
    """The ``servedeck`` console script, else ``python -m servedeck`` (same entry point)."""
    found = shutil.which("servedeck")
    return [found] if found else [sys.executable, "-m", "servedeck"]


def resolve_invoke() -> tuple[list[str], list[str] | None]:
    """(the ``invoke`` the user types, the real script behind a pyenv shim or None)."""
    found = shutil.which("invoke")
    if not found:
        raise SystemExit("invoke is not on PATH (pip install -e '.[test]')")
    real = None
    if "/shims/" in found and shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "which", "invoke"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            real = [out.stdout.strip()]
    return [found], real


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="speed")
    ap.add_argument("-n", type=int, default=7, help="runs per command (median)")
    ap.add_argument("--importtime", choices=("auto", "always", "never"), default="auto",
                    help="profile import time: when the check process misses 0.5 s (auto)")
    ap.add_argument("--python", choices=("wheel", "current"), default="wheel",
                    help="the commands' interpreter: a plain virtualenv holding the wheel built from this "
                         "checkout, as a user installs servedeck (default), or the development one (its "
                         "editable-install finder and the base interpreter's .pth start-up hooks included)")
    args = ap.parse_args()

    byte_compile()  # as pip install leaves the package
    with tempfile.TemporaryDirectory(prefix="check-speed-") as tmp:
        if args.python == "wheel":
            sys.path.insert(0, str(ROOT))
            from devtools.wheelenv import wheel_venv
            bin_dir = wheel_venv(ROOT, Path(tmp) / "wheel", compile_bytecode=True)
            invoke, real_invoke = [str(bin_dir / "invoke")], None
            servedeck = [str(bin_dir / "servedeck")]
        else:
            invoke, real_invoke = resolve_invoke()
            servedeck = resolve_servedeck()
        compose = Path(tmp) / "docker-compose.yml"
        # the rendered file is made by the same command whose time is measured
        render_cmd = [*invoke, "render", "--profile", args.profile, "--out", str(compose)]
        check_cmd = [*invoke, "check", "--profile", args.profile]
        sd_cmd = [*servedeck, "check", "--profile", args.profile]
        config_cmd = ["docker", "compose", "-f", str(compose), "config", "-q"]
        direct_cmd = [*real_invoke, "check", "--profile", args.profile] if real_invoke else None
        wall(render_cmd)  # warm caches (.pyc, page cache) before measuring
        wall(check_cmd, ok_codes=(0, 1), must_print=SUMMARY)
        wall(sd_cmd, ok_codes=(0, 1), must_print=SUMMARY)
        wall(config_cmd)
        t_check, t_render, t_config, t_direct, t_sd = [], [], [], [], []
        for _ in range(args.n):
            t_sd.append(wall(sd_cmd, ok_codes=(0, 1), must_print=SUMMARY))
            # exit 1 = error findings: still a full check
            t_check.append(wall(check_cmd, ok_codes=(0, 1), must_print=SUMMARY))
            t_render.append(wall(render_cmd))
            t_config.append(wall(config_cmd))
            if direct_cmd:
                t_direct.append(wall(direct_cmd, ok_codes=(0, 1)))
        compose_bytes = compose.stat().st_size

    load_s, r_s, c_s = in_process(args.profile, args.n)
    check_med, config_med = statistics.median(t_check), statistics.median(t_config)
    sd_med = statistics.median(t_sd)
    ratio = check_med / config_med
    sd_ratio = sd_med / config_med
    cores = os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    print(f"profile {args.profile}, rendered compose {compose_bytes} bytes; {cores} cores, "
          f"load average {load:.2f}; {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(f"  servedeck check --profile {args.profile:<7} {stats(t_sd)}   [{' '.join(servedeck)}]")
    print(f"  invoke check --profile {args.profile:<10} {stats(t_check)}   [{invoke[0]}]")
    if t_direct:
        print(f"  same, without the pyenv shim     {stats(t_direct)}   [{real_invoke[0]}]")
    print(f"  invoke render --profile {args.profile:<9} {stats(t_render)}")
    print(f"  docker compose config -q         {stats(t_config)}")
    print(f"  in-process render_profile        {stats(r_s)}")
    print(f"  in-process check_rendered        {stats(c_s)}")
    in_proc = statistics.median(r_s) + statistics.median(c_s)
    print(f"  in-process render + check        median {in_proc * 1000:8.1f} ms  "
          f"(one-time imports + load of profile/catalog: {load_s * 1000:.1f} ms)")
    print(f"  => start-up, imports and invoke's own work: "
          f"{(check_med - in_proc) * 1000:.1f} ms of the {check_med * 1000:.1f} ms check process "
          f"({100 * (check_med - in_proc) / check_med:.0f} %)")
    print()
    cpu = {name: statistics.median(CPU[" ".join(cmd)][1:]) for name, cmd in
           (("servedeck check", sd_cmd), ("invoke check", check_cmd), ("compose config", config_cmd))}
    print(f"CPU time (user + system, median): servedeck check {cpu['servedeck check'] * 1000:.0f} ms, "
          f"invoke check {cpu['invoke check'] * 1000:.0f} ms, docker compose config -q "
          f"{cpu['compose config'] * 1000:.0f} ms: ratios {cpu['servedeck check'] / cpu['compose config']:.2f}x and "
          f"{cpu['invoke check'] / cpu['compose config']:.2f}x (less sensitive to other load than wall time)")
    print(f"ratio servedeck check / docker compose config -q: {sd_ratio:.2f}x")
    print(f"ratio invoke check    / docker compose config -q: {ratio:.2f}x")
    ok1 = max(check_med, sd_med) < TARGET_CHECK_S
    for label, med, r in (("servedeck check", sd_med, sd_ratio), ("invoke check", check_med, ratio)):
        print(f"target {label:<15} < {TARGET_CHECK_S} s: {med:.3f} s  "
              f"{'pass' if med < TARGET_CHECK_S else 'MISS'};  < {TARGET_RATIO:g}x compose config -q: "
              f"{r:.2f}x  {'pass' if r < TARGET_RATIO else 'MISS'}")
    if args.importtime == "always" or (args.importtime == "auto" and not ok1):
        python = sys.executable  # (the wheel's virtualenv is gone by now: its modules are the checkout's)
        if real_invoke:  # the interpreter behind the invoke script
            first = Path(real_invoke[0]).read_text(errors="replace").splitlines()[0]
            if first.startswith("#!") and "python" in first:
                python = first[2:].strip().split()[0]
        import_profile(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
