"""``gpu/*`` requests for NVIDIA and Intel GPUs, and the shared-memory settings multi-GPU
workers need.

How Compose requests GPUs (Compose Specification ``deploy.resources.reservations.devices``,
``gpus``, ``devices`` with CDI names ``vendor.com/class=name``; compose-go rejects a device
request with both ``count`` and ``device_ids``: "count and device_ids are exclusive"; Docker
Engine refuses it at create with "cannot set both Count and DeviceIDs on device request").
vLLM needs ``tensor_parallel_size x pipeline_parallel_size`` GPUs per data-parallel rank and
its multi-GPU workers exchange tensors through ``/dev/shm`` (vLLM docs "Using Docker":
``--ipc=host`` or ``--shm-size``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from servedeck.compose.document import Device, device_requests
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import int_setting, judge, server_environment
from servedeck.compose.rules._service import Ctx, Service

Vendor = Literal["nvidia", "intel", "any"]


@dataclass
class GpuRequest:
    """One way a service asks for GPUs.

    Attributes:
        vendor: ``nvidia``, ``intel``, or ``any`` (privileged: every host device).
        count: number of GPUs, or None for "all" / not countable.
        ids: explicit device ids / CDI names.
        via: ``deploy.resources``, ``gpus``, ``cdi``, ``runtime``, ``dri`` or ``privileged``.
        path: document path of the request.
    """

    vendor: Vendor
    count: int | None
    via: str
    path: Path
    ids: list[str] = field(default_factory=list)


def gpu_requests(ctx: Ctx, svc: Service, report: bool = True) -> list[GpuRequest]:
    """Every GPU request of ``svc`` (reporting malformed device requests when ``report``)."""
    sink = ctx if report else _Silent()
    data = svc.data
    out: list[GpuRequest] = []
    for sub, req in device_requests(data):
        path = svc.path + sub
        if req.count is not None and req.device_ids is not None:
            sink.error("gpu/count-and-device-ids", path,
                       f"the GPU request sets both count ({req.count}) and device_ids "
                       f"({', '.join(req.device_ids)}); they are exclusive: Compose refuses the file "
                       f"(\"count\" and \"device_ids\" are exclusive) and older engines fail at "
                       f"container create (\"cannot set both Count and DeviceIDs on device request\")",
                       "keep device_ids to pin particular GPUs, or count to take any N; not both")
        via = "gpus" if sub[0] == "gpus" else "deploy.resources"
        out.append(GpuRequest("nvidia" if req.is_nvidia else "any", req.gpu_count, via, path,
                              req.device_ids or []))
    for i, item in enumerate(data.get("devices") or []):
        if not isinstance(item, (str, dict)) or (isinstance(item, dict) and not isinstance(item.get("source"), str)):
            continue
        d = Device.parse(item)
        path = svc.path + ("devices", i)
        if d.long and not d.target:
            # compose-go loader (v2.40): the long syntax needs a target, CDI names included
            sink.error("devices/missing-target", path,
                       f"device {d.source!r} in the long syntax has no target: Compose refuses the file "
                       f"(\"service device services.{svc.name}.devices.[{i}] is missing a mount target\")",
                       f"write it in the short syntax (devices: [\"{d.source}\"]) or add target:")
            continue
        if d.is_cdi:
            kind, _, name = d.source.partition("=")
            vendor: Vendor = "nvidia" if kind.startswith("nvidia.com/") else (
                "intel" if kind.startswith("intel.com/") else "any")
            out.append(GpuRequest(vendor, None if name == "all" else 1, "cdi", path, [name]))
        elif d.source == "/dev/dri" or d.source.startswith("/dev/dri/"):
            out.append(GpuRequest("intel", None if d.source == "/dev/dri" else 1, "dri", path))
    if data.get("runtime") == "nvidia":
        out.append(GpuRequest("nvidia", None, "runtime", svc.path + ("runtime",)))
    if data.get("privileged") is True:
        out.append(GpuRequest("any", None, "privileged", svc.path + ("privileged",)))
    return out


class _Silent:
    def error(self, *a, **k) -> None:
        pass


def requested_count(reqs: list[GpuRequest], vendor: str) -> int | None:
    """GPUs requested for ``vendor`` (sum of countable requests); None when any is "all"/unknown
    or nothing matches."""
    mine = [r for r in reqs if r.vendor in (vendor, "any")]
    if not mine or any(r.count is None for r in mine):
        return None
    return sum(r.count or 0 for r in mine)


def check_gpu_requests(ctx: Ctx, svc: Service) -> None:
    """``gpu/count-and-device-ids``, ``gpu/no-device`` (NVIDIA), ``gpu/fewer-than-parallel``,
    ``gpu/multi-gpu-shm`` and ``gpu/shm-size-with-ipc-host``."""
    reqs = gpu_requests(ctx, svc)
    vendor = {"cuda": "nvidia", "xpu": "intel"}.get(svc.device or "")
    if svc.device == "cuda" and not any(r.vendor in ("nvidia", "any") for r in reqs):
        ctx.error("gpu/no-device", svc.path,
                  "the image needs an NVIDIA GPU but the service requests none",
                  "add deploy.resources.reservations.devices: [{driver: nvidia, capabilities: [gpu]}], "
                  "gpus: all, or a CDI device (devices: [nvidia.com/gpu=all])", key=True)
    if svc.launcher is None:
        return
    tp = int_setting(svc, "tensor_parallel_size")
    pp = int_setting(svc, "pipeline_parallel_size")
    need = tp * pp
    if vendor is not None:
        have = requested_count(reqs, vendor)
        if have is not None and have < need:
            ctx.error("gpu/fewer-than-parallel", reqs[0].path,
                      f"the service requests {have} GPU(s) but tensor_parallel_size x "
                      f"pipeline_parallel_size = {tp} x {pp} = {need}; vLLM fails to start its workers",
                      f"request {need} GPUs or lower the parallel sizes")
    ipc = svc.data.get("ipc")
    if ipc == "host" and "shm_size" in svc.data:
        ctx.warning("gpu/shm-size-with-ipc-host", svc.path + ("shm_size",),
                    f"shm_size {svc.data['shm_size']!r} has no effect: ipc: host shares the host's "
                    f"/dev/shm with the container", "drop shm_size (or drop ipc: host and keep it)",
                    key=True)
    if need > 1 and ipc != "host" and "shm_size" not in svc.data and svc.device != "cpu":
        ctx.warning("gpu/multi-gpu-shm", svc.path,
                    f"{need} GPU workers (tensor x pipeline parallel) exchange data through /dev/shm, "
                    f"but the container has Docker's 64 MiB default: NCCL/oneCCL fail or hang",
                    "add ipc: host, or shm_size: \"16g\"", key=True)


#: oneCCL's IPC exchange modes that do not open /dev/dri/by-path (``CCL_ZE_IPC_EXCHANGE``;
#: ``drmfd``, the default for Intel GPUs, does)
_CCL_EXCHANGE_WITHOUT_BY_PATH = {"sockets", "pidfd"}


def check_xpu_by_path(ctx: Ctx, svc: Service) -> None:
    """``gpu/xpu-dri-by-path``: an Intel GPU engine that runs several GPU workers (tensor or
    pipeline parallel, or data parallel with expert parallel) exchanges device buffers through
    oneCCL, whose ``drmfd`` mode opendir()s ``/dev/dri/by-path`` and matches its ``*-render``
    links (``CCL_DRMFD_DEV_RENDER_DIR_PATH``, oneCCL ``ze_fd_manager.cpp``): Docker's ``devices:
    [/dev/dri]`` (or ``privileged``) creates the device nodes but not udev's by-path links, so
    the engine dies at startup ("init_device_fds: EXCEPTION: opendir failed: could not open
    device directory", uxlfoundation/oneCCL#121) while a one-card start of the same file works.
    Intel's run commands add ``-v /dev/dri/by-path:/dev/dri/by-path``."""
    if svc.device != "xpu" or svc.launcher is None:
        return
    tp = int_setting(svc, "tensor_parallel_size")
    pp = int_setting(svc, "pipeline_parallel_size")
    dp = int_setting(svc, "data_parallel_size")
    ep = svc.eff("enable_expert_parallel") is True
    workers = tp * pp * (dp if ep else 1)
    if workers < 2:
        return
    from servedeck.compose.rules.container import mount_at, mounts
    env = server_environment(svc)
    if env.get("CCL_ZE_IPC_EXCHANGE", "").strip().lower() in _CCL_EXCHANGE_WITHOUT_BY_PATH:
        return
    by_path = env.get("CCL_DRMFD_DEV_RENDER_DIR_PATH") or "/dev/dri/by-path"
    if mount_at(by_path, mounts(svc)) is not None:
        return
    how = " x ".join(f"{n} {v}" for n, v in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp),
                                            ("data_parallel_size", dp if ep else 1)) if v > 1)
    devices = [r for r in gpu_requests(ctx, svc, report=False) if r.vendor in ("intel", "any")]
    path = devices[0].path if devices else svc.path
    ctx.error("gpu/xpu-dri-by-path", path,
              f"{workers} Intel GPU workers ({how}) exchange device buffers through oneCCL, which opens "
              f"{by_path} to match each card's render node; the devices give the container the /dev/dri "
              f"nodes but not udev's by-path links, so the engine dies at startup (oneCCL: \"opendir "
              f"failed: could not open device directory\") while one card works",
              f"mount the links read-only beside the devices: volumes: [\"{by_path}:{by_path}:ro\"] "
              f"(or set CCL_ZE_IPC_EXCHANGE=sockets)")


def _limit(svc: Service, key: str, deploy_key: str) -> tuple[int | None, Path | None]:
    """(bytes, document path) of a memory setting: ``mem_limit`` / ``deploy.resources.limits
    .memory`` (``mem_reservation`` / ``...reservations.memory``); the deploy form wins, as
    Compose merges them."""
    from servedeck.compose.rules.container import parse_size
    deploy = svc.data.get("deploy") if isinstance(svc.data.get("deploy"), dict) else {}
    res = deploy.get("resources") if isinstance(deploy.get("resources"), dict) else {}
    part = res.get(deploy_key) if isinstance(res.get(deploy_key), dict) else {}
    if part.get("memory") is not None:
        return parse_size(part["memory"]), svc.path + ("deploy", "resources", deploy_key, "memory")
    if svc.data.get(key) is not None:
        return parse_size(svc.data[key]), svc.path + (key,)
    return None, None


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
    from servedeck.compose.rules.container import GIB, parse_size
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
    ulimits = svc.data.get("ulimits") if isinstance(svc.data.get("ulimits"), dict) else {}
    nofile = ulimits.get("nofile")
    hard = nofile.get("hard") if isinstance(nofile, dict) else nofile
    if isinstance(hard, int) and not isinstance(hard, bool) and 0 < hard < 65535:
        ctx.warning("resources/nofile-low", svc.path + ("ulimits", "nofile"),
                    f"ulimits.nofile {hard}: vLLM raises its open-file limit to 65535 and warns when the hard "
                    f"limit is lower; with many concurrent requests it fails with \"Too many open files\"",
                    "set ulimits.nofile to 65535 (soft and hard) or leave it out")


def _gmu(ctx: Ctx, svc: Service) -> float:
    v = svc.eff("gpu_memory_utilization")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    j = judge(ctx, svc, "serve_args")
    if j is not None:
        a = j.facts.option("gpu-memory-utilization")
        if a is not None and isinstance(a.default, (int, float)):
            return float(a.default)
    return 0.9


def check_shared_gpus(ctx: Ctx, svcs: list[Service]) -> None:
    """``gpu/shared-memory-over-1``: services pinned to the same GPU id whose
    gpu_memory_utilization fractions add up past 1 (each vLLM takes its fraction of the
    whole card's memory, so the second one cannot allocate its KV cache)."""
    users: dict[str, list[Service]] = {}
    for svc in svcs:
        if svc.launcher is None:
            continue
        for r in gpu_requests(ctx, svc, report=False):
            for gid in r.ids:
                users.setdefault(gid, [])
                if svc not in users[gid]:
                    users[gid].append(svc)
    for gid, group in users.items():
        if len(group) < 2:
            continue
        fractions = [(_gmu(ctx, s), s) for s in group]
        total = sum(f for f, _ in fractions)
        if total > 1.0 + 1e-9:
            parts = " + ".join(f"{s.name} {f:g}" for f, s in fractions)
            ctx.error("gpu/shared-memory-over-1", group[-1].path,
                      f"GPU {gid} is shared by {len(group)} services whose gpu_memory_utilization adds up "
                      f"to {total:g} ({parts}); each fraction is of the whole card, so the last one to "
                      f"start cannot allocate its memory",
                      "give each service its own GPU, or lower the fractions so they sum to <= 1",
                      key=True)
