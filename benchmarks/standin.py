"""The vLLM stand-in (``deploy/images/standin/standin.py``) as a local process, for the load
benchmarks: the program of the ``servedeck/vllm-standin`` image, started without Docker so that
nothing but the stand-in and the client share the machine's cores."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "deploy" / "images" / "standin" / "standin.py"
MODEL = "Qwen3.8-27B"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standin:
    """``with Standin(STANDIN_MAX_NUM_SEQS="4", ...) as s: s.url`` starts the stand-in with those
    ``STANDIN_*`` variables on a free loopback port and stops it on exit."""

    def __init__(self, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "STANDIN_STARTUP_S": "0.1", "STANDIN_PREFILL_S_PER_TOKEN": "0.00001",
                    "STANDIN_FIXTURES": str(ROOT / "tests" / "fixtures" / "vllm-0.32-cpu"), **env}
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Standin":
        self.proc = subprocess.Popen([sys.executable, str(STANDIN), "models/qwen3-tiny", "--port", str(self.port),
                                      "--served-model-name", MODEL], env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.__exit__()
        raise SystemExit("the stand-in did not start")

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the stand-in process used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
