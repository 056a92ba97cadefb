"""What the benchmark scripts share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def byte_compile() -> None:
    """Byte-compile ``servedeck/``, ``devtools/`` and ``tasks.py``, as ``pip install`` leaves a
    package: this machine's environment sets ``PYTHONDONTWRITEBYTECODE=1`` and invoke runs tasks
    with ``sys.dont_write_bytecode``, so a module edited since its last ``.pyc`` would otherwise
    be compiled again in every measured process (about 0.1 s of a deploy)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "servedeck"),
                    str(ROOT / "devtools"), str(ROOT / "tasks.py")], check=True)


def clear_bench(run_dir: Path) -> None:
    """Remove what a bench wrote into ``run_dir`` (so the same run is benchmarked again)."""
    from servedeck.runs import store
    for name in (store.WORKLOAD, store.BENCH_SAMPLES, store.BENCH_SUMMARY, store.TELEMETRY, store.ROOFLINE,
                 store.QUALITY):
        (run_dir / name).unlink(missing_ok=True)


def tear_down(host, workdir: str, tmp: Path) -> None:
    """Bring down what a benchmark deployed in ``workdir`` on ``host``, remove that directory,
    close the host's session and remove the local project copy ``tmp``."""
    import shutil
    host.run(f"cd {workdir} 2>/dev/null && docker compose down --remove-orphans -t 1; rm -rf {workdir}",
             check=False)
    host.close()
    shutil.rmtree(tmp, ignore_errors=True)
