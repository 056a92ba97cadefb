"""``resources/*``: the container limits a vLLM server needs (Compose Specification
``mem_limit``, ``mem_reservation``, ``memswap_limit``, ``pids_limit``, ``ulimits`` and
``deploy.resources``).

Facts used: vLLM allocates host memory of its own before any weights (``--cpu-offload-gb`` and
``--kv-offloading-size`` per GPU worker; the CPU build's KV cache, ``VLLM_CPU_KVCACHE_SPACE``
GiB), and each of its processes (API server, engine core, one worker per GPU) holds the torch
and device runtimes; a container over its memory limit has a process killed by the kernel
(SIGKILL: the engine exits -9 with no traceback, vllm-project/vllm PR #21443). Docker refuses a
``memswap_limit`` below the memory limit and a reservation above it (moby ``daemon/
daemon_unix.go``). vLLM raises its open-file limit to 65535 (``vllm/utils/system_utils.py``).
"""

from __future__ import annotations

from typing import Any

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import int_setting, server_environment
from servedeck.compose.rules.gpu import GIB, parse_size


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _limit(svc: Service, key: str, deploy_key: str) -> tuple[int | None, Path]:
    """(bytes, document path) of a memory setting: ``mem_limit`` / ``deploy.resources.limits
    .memory`` (``mem_reservation`` / ``...reservations.memory``); the deploy form wins, as
    Compose merges them. (None, the service's path) when it is not set."""
    part = _mapping(_mapping(_mapping(svc.data.get("deploy")).get("resources")).get(deploy_key))
    if part.get("memory") is not None:
        return parse_size(part["memory"]), svc.path + ("deploy", "resources", deploy_key, "memory")
    if svc.data.get(key) is not None:
        return parse_size(svc.data[key]), svc.path + (key,)
    return None, svc.path


#: host memory (GiB) each vLLM process holds before any weights (torch, the device runtime and
#: vLLM's imports): the API server, the engine core, one worker per GPU
PROCESS_GIB = 2.0


def check_limits(ctx: Ctx, svc: Service) -> None:
    """``resources/*``: the container limits a vLLM server needs.

    - ``resources/memory-below-host-buffers`` (error): a memory limit below the host memory vLLM
      allocates itself: ``--cpu-offload-gb`` and ``--kv-offloading-size`` per GPU, and on the
      CPU build its KV cache (``VLLM_CPU_KVCACHE_SPACE`` GiB); the engine is killed at start.
    - ``resources/memory-limit-low`` (warning): a memory limit below what vLLM's processes hold
      before any weights (:data:`PROCESS_GIB` each: API server, engine core, one worker per GPU)
      plus room to read a weight shard; loading then ends in SIGKILL (exit -9, no traceback).
    - ``resources/memswap-below-memory``, ``resources/reservation-above-limit`` (errors): limits
      Docker refuses at create ("Minimum memoryswap limit should be larger than memory limit",
      "Minimum memory limit can not be less than memory reservation limit").
    - ``resources/pids-limit-low``, ``resources/nofile-low`` (warnings): vLLM runs hundreds of
      threads (torch, tokenizers, one set per worker) and raises its open-file limit to 65535
      (``vllm/utils/system_utils.py``); lower limits fail with "can't start new thread" /
      "Too many open files" under load.
    """
    if svc.launcher is None:
        return
    limit, lpath = _limit(svc, "mem_limit", "limits")
    reservation, rpath = _limit(svc, "mem_reservation", "reservations")
    if limit is not None and reservation is not None and reservation > limit:
        ctx.error("resources/reservation-above-limit", rpath,
                  f"the memory reservation ({reservation / GIB:g} GiB) is above the limit ({limit / GIB:g} GiB): "
                  f"Docker refuses to create the container", "keep the reservation at or below the limit")
    swap = parse_size(svc.data.get("memswap_limit")) if svc.data.get("memswap_limit") not in (None, -1, "-1") else None
    if limit is not None and swap is not None and 0 < swap < limit:
        ctx.error("resources/memswap-below-memory", svc.path + ("memswap_limit",),
                  f"memswap_limit ({swap / GIB:g} GiB) is below the memory limit ({limit / GIB:g} GiB): Docker "
                  f"refuses to create the container (\"Minimum memoryswap limit should be larger than memory "
                  f"limit\")", "set memswap_limit to at least the memory limit, or leave it out")
    if limit is not None:
        gpus = max(int_setting(svc, "tensor_parallel_size") * int_setting(svc, "pipeline_parallel_size"), 1)
        env = server_environment(svc)
        buffers: list[str] = []
        need = 0.0
        for dest, label in (("cpu_offload_gb", "--cpu-offload-gb"), ("kv_offloading_size", "--kv-offloading-size")):
            v = svc.eff(dest)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                need += float(v) * gpus
                buffers.append(f"{label} {v:g} x {gpus} GPU(s)")
        kv = env.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
        if svc.device == "cpu" and kv.replace(".", "", 1).isdigit() and float(kv) > 0:
            need += float(kv)
            buffers.append(f"VLLM_CPU_KVCACHE_SPACE={kv} GiB")
        if buffers and need * GIB >= limit:
            ctx.error("resources/memory-below-host-buffers", lpath,
                      f"the memory limit ({limit / GIB:g} GiB) does not hold the host memory vLLM allocates "
                      f"itself ({' + '.join(buffers)} = {need:g} GiB), before its processes and the weights: "
                      f"the kernel kills the engine at start (SIGKILL, exit -9, no traceback)",
                      f"raise the limit well above {need:g} GiB, or lower those settings")
        else:
            processes = 2 + (gpus if gpus > 1 else 0)
            floor = PROCESS_GIB * processes + 4.0
            if limit < floor * GIB:
                ctx.warning("resources/memory-limit-low", lpath,
                            f"the memory limit ({limit / GIB:g} GiB) is below what vLLM's {processes} processes "
                            f"hold before any weights (about {PROCESS_GIB:g} GiB each) plus a weight shard being "
                            f"read (~4 GiB): loading the model ends with the kernel's OOM killer (the engine "
                            f"exits -9 with no traceback)",
                            f"raise mem_limit / deploy.resources.limits.memory to at least {floor:g} GiB (more "
                            f"for large checkpoints: vLLM reads each shard into host memory)")
    pids = svc.data.get("pids_limit")
    if isinstance(pids, int) and not isinstance(pids, bool) and 0 < pids < 1024:
        ctx.warning("resources/pids-limit-low", svc.path + ("pids_limit",),
                    f"pids_limit {pids} counts threads: vLLM's processes run hundreds of them (torch, "
                    f"tokenizers, one set per worker) and fail with \"can't start new thread\"",
                    "raise pids_limit to 4096 or more, or leave it out")
    nofile = _mapping(svc.data.get("ulimits")).get("nofile")
    hard = nofile.get("hard") if isinstance(nofile, dict) else nofile
    if isinstance(hard, int) and not isinstance(hard, bool) and 0 < hard < 65535:
        ctx.warning("resources/nofile-low", svc.path + ("ulimits", "nofile"),
                    f"ulimits.nofile {hard}: vLLM raises its open-file limit to 65535 and warns when the hard "
                    f"limit is lower; with many concurrent requests it fails with \"Too many open files\"",
                    "set ulimits.nofile to 65535 (soft and hard) or leave it out")
