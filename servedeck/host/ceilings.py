"""What the roofline reads on the host: its own ceilings, measured (memory read bandwidth and
dense matrix rate of the device the server runs on), and the model's files (``config.json`` and
the weight files' size, :func:`read_model_files`).

The measurement runs inside the host's **running server container** (``docker exec``, one
round trip): that container has the device mapped and a PyTorch that drives it (the CPU
image's ``/opt/venv/bin/python``, the exl3xpu image's XPU build), so the figure is the one the
server itself can reach. :data:`MEASURE_PY` (stdlib + torch) picks the device (``xpu``, else
``cuda``, else ``cpu``), then:

* **read bandwidth**: the best of ``repeats`` timed ``sum()`` passes over a ``buffer_mib`` float32
  tensor (every byte read once; the buffer is far larger than any cache), device synchronised
  around each pass: bytes / seconds;
* **matrix rate**: the best of ``repeats`` timed square matmuls (``2·n³`` FLOPs) in the server's
  compute dtype: float16 on a GPU; on a CPU the better of bfloat16 and float32. A CPU without
  bfloat16 arithmetic (AVX2 only: no AVX512-BF16 or AMX) computes a bfloat16 GEMM through
  float32 (oneDNN, vLLM's CPU kernels), while torch's own bfloat16 matmul there is emulated
  element by element: on an AMD EPYC with AVX2, 1.2 GFLOPS against 155 GFLOPS in float32
  (n = 512, torch 2.13 in the CPU image), and the real server's bfloat16 prefill reached
  5.5 GFLOPS, past the bfloat16 figure. Every rate is kept (``matrix_tflops_by_dtype``); the
  ceiling is the best (``matrix_tflops``, ``matrix_dtype``).

It prints one JSON object. The server should be idle (no benchmark running); on a GPU the
buffer must fit beside the server's KV pool, else the measurement says so. Results are kept per
host under ``runs/ceilings/<host>.json`` (:func:`servedeck.runs.store.write_host_ceilings`).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.host.remote import RemoteHost

__all__ = ["MEASURE_PY", "measure_ceilings", "parse_measurement", "read_model_files"]

MEASURE_PY = r"""
import json, os, sys, time
buffer_mib, repeats, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as exc:
    print(json.dumps({"error": f"no torch in the container: {exc}"})); sys.exit(0)
out["torch"] = torch.__version__
dev = "cpu"
if getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
    dev = "xpu"
elif torch.cuda.is_available():
    dev = "cuda"
sync = {"xpu": lambda: torch.xpu.synchronize(), "cuda": lambda: torch.cuda.synchronize()}.get(dev, lambda: None)
out["device"] = dev
if dev == "cpu":
    out["threads"] = torch.get_num_threads()
try:
    x = torch.ones(buffer_mib * 1024 * 1024 // 4, dtype=torch.float32, device=dev)
    x.sum(); sync()
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter(); x.sum(); sync(); dt = time.perf_counter() - t
        best = max(best, x.numel() * 4 / dt / 1e9)
    out["memory_bandwidth_gb_s"] = best
    del x
except Exception as exc:
    out["error"] = f"bandwidth: {type(exc).__name__}: {exc}"
rates = {}
for dtype in ((torch.bfloat16, torch.float32) if dev == "cpu" else (torch.float16,)):
    try:
        a = torch.randn(n, n, device=dev).to(dtype); b = torch.randn(n, n, device=dev).to(dtype)
        a @ b; sync()
        best = 0.0
        for _ in range(repeats):
            t = time.perf_counter(); a @ b; sync(); dt = time.perf_counter() - t
            best = max(best, 2 * n ** 3 / dt / 1e12)
        rates[str(dtype).replace("torch.", "")] = best
        del a, b
    except Exception as exc:
        out.setdefault("error", f"matmul: {type(exc).__name__}: {exc}")
if rates:
    out["matrix_tflops_by_dtype"] = rates
    out["matrix_dtype"] = max(rates, key=rates.get)
    out["matrix_tflops"] = rates[out["matrix_dtype"]]
print(json.dumps(out))
"""
"""The measurement: ``argv`` buffer MiB, repeats, matmul size; prints one JSON object
(``device``, ``memory_bandwidth_gb_s``, ``matrix_tflops``, ``matrix_dtype``,
``matrix_tflops_by_dtype``, ``torch``, ``threads``; ``error`` when a part failed)."""

_EXEC_SCRIPT = r"""
c=$1; shift
for p in "$@"; do
  if docker exec "$c" sh -c "command -v $p" >/dev/null 2>&1; then
    exec docker exec -i "$c" "$p" - "$BUF" "$REP" "$N"
  fi
done
echo "no python found in container $c (tried: $*)" >&2
exit 9
"""


def parse_measurement(text: str) -> dict[str, Any]:
    """The measurement's JSON line → dict.

    Raises:
        ServedeckError: not JSON, or the measurement reports an error and no bandwidth.
    """
    line = next((ln for ln in reversed(text.strip().splitlines()) if ln.startswith("{")), "")
    try:
        doc = json.loads(line)
    except ValueError:
        raise ServedeckError(f"the ceiling measurement printed no result: {text.strip()[-300:]!r}") from None
    if doc.get("error") and not doc.get("memory_bandwidth_gb_s"):
        raise ServedeckError(f"the ceiling measurement failed: {doc['error']}",
                             hint="run it while the server is idle; on a GPU a smaller --buffer-mib may fit")
    return doc


def measure_ceilings(host: RemoteHost, container: str, *, pythons: list[str] | None = None,
                     buffer_mib: int = 256, repeats: int = 5, matmul_n: int | None = None,
                     timeout_s: float = 300.0) -> dict[str, Any]:
    """Measure the device's read bandwidth and matrix rate inside ``container`` (module
    docstring); one round trip.

    Args:
        container: the running server container's name.
        pythons: interpreters to try in the container, first found wins (default: the image's
            ``/opt/venv/bin/python``, ``python3``, ``python``).
        buffer_mib: the bandwidth buffer (MiB).
        repeats: timed passes of each kind (the best counts).
        matmul_n: the matmul's size (default 2048).

    Returns:
        the measurement's JSON object plus ``buffer_mib``, ``repeats``, ``matmul_n``, ``method``.

    Raises:
        ServedeckError: the container is not running, has no python with torch, or the
            measurement failed.
    """
    if buffer_mib < 16 or repeats < 1:
        raise ServedeckError("the ceiling measurement needs --buffer-mib >= 16 and --repeats >= 1")
    n = matmul_n or 2048
    pys = pythons or ["/opt/venv/bin/python", "python3", "python"]
    script = f"BUF={int(buffer_mib)} REP={int(repeats)} N={int(n)}\n" + _EXEC_SCRIPT
    res = host.run_script(script, [container, *pys], input=MEASURE_PY.encode(), check=False,
                          timeout=timeout_s)
    if res.returncode != 0:
        raise ServedeckError(f"host {host.name}: measuring in container {shlex.quote(container)} failed "
                             f"(exit {res.returncode}): {res.stderr.strip()[-300:]}",
                             hint=f"is the server running? (servedeck status --host {host.name})")
    doc = parse_measurement(res.stdout)
    doc.update(buffer_mib=buffer_mib, repeats=repeats, matmul_n=n,
               method=f"best of {repeats} torch sum() passes over {buffer_mib} MiB float32 on {doc.get('device')}")
    return doc


_MODEL_FILES_SCRIPT = r"""
d=$1
T=$(printf '\t')
if [ -f "$d/config.json" ]; then
  if b=$(base64 -w0 -- "$d/config.json" 2>/dev/null); then echo "config$T$b"; else echo "problem${T}$d/config.json cannot be read"; fi
else
  echo "problem${T}$d/config.json does not exist"
fi
n=0; total=0
for f in "$d"/*.safetensors "$d"/*.bin "$d"/*.pt "$d"/*.pth "$d"/*.gguf; do
  [ -f "$f" ] || continue
  s=$(stat -L -c %s -- "$f" 2>/dev/null) || continue
  total=$((total + s)); n=$((n + 1))
done
echo "weights$T$n$T$total"
"""  # noqa: E501 - a shell program: its lines are the script's


def read_model_files(host: RemoteHost, weights_dir: str) -> tuple[dict[str, Any] | None, int | None, list[str]]:
    """The model's ``config.json`` and the total size of its weight files (``*.safetensors``,
    ``*.bin``, ``*.pt``, ``*.pth``, ``*.gguf`` directly in the directory) on the host, in one
    round trip; ``weights_dir`` relative to the workdir or absolute.

    Returns:
        ``(config or None, bytes or None, problems)``.

    Raises:
        ServedeckError: the host is unreachable.
    """
    import base64
    path = host.abspath(weights_dir.rstrip("/") or "/")
    res = host.run_script(_MODEL_FILES_SCRIPT, [path], timeout=60)
    config, size, problems = None, None, []
    for line in res.stdout.splitlines():
        key, _, rest = line.partition("\t")
        if key == "config":
            try:
                doc = json.loads(base64.b64decode(rest))
                config = doc if isinstance(doc, dict) else None
                if config is None:
                    problems.append(f"{path}/config.json is not a JSON object")
            except ValueError as exc:
                problems.append(f"{path}/config.json is not JSON: {exc}")
        elif key == "problem":
            problems.append(rest)
        elif key == "weights":
            n, _, total = rest.partition("\t")
            if n.isdigit() and int(n) > 0 and total.isdigit():
                size = int(total)
            else:
                problems.append(f"no weight files (*.safetensors, *.bin, *.pt, *.pth, *.gguf) in {path}")
    return config, size, problems
