"""``gpu/*``: a service's access to its accelerator and the GPUs it asks for.

* Intel XPU: ``/dev/dri`` and the render group (vLLM's Intel XPU installation docs: ``--device
  /dev/dri`` and the render group; the exl3xpu image's compose example); CPU: ``/dev/shm`` of at
  least 1 GiB (vLLM CPU installation docs; Docker size units for ``shm_size``: b, k, m, g,
  binary multiples).
* GPU requests, NVIDIA and Intel (Compose Specification ``deploy.resources.reservations.devices``,
  ``gpus``, ``devices`` with CDI names ``vendor.com/class=name``; compose-go rejects a device
  request with both ``count`` and ``device_ids``: "count and device_ids are exclusive"; Docker
  Engine refuses it at create with "cannot set both Count and DeviceIDs on device request").
* vLLM needs ``tensor_parallel_size x pipeline_parallel_size`` GPUs per data-parallel rank, and
  its multi-GPU workers exchange tensors through ``/dev/shm`` (vLLM docs "Using Docker":
  ``--ipc=host`` or ``--shm-size``); services pinned to one GPU share its memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import int_setting, judge, server_environment
from servedeck.compose.rules.paths import mount_at, mounts


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*$", re.I)


_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


GIB = 1024**3


def parse_size(value: Any) -> int | None:
    """Docker byte size: an int (bytes) or ``"8g"``, ``"512m"``, ``"1gb"`` (binary units)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            return int(float(m[1]) * _UNITS[m[2].lower()])
    return None


def check_gpu(ctx: Ctx, svc: Service) -> None:
    """``gpu/*``: device access for xpu (/dev/dri, render group) and cpu (/dev/shm)."""
    device = svc.device
    data = svc.data
    privileged = data.get("privileged") is True
    if device == "xpu":
        hosts = [d.source for _, d in svc.devices]
        if not privileged and not any(h == "/dev/dri" or h.startswith("/dev/dri/") for h in hosts):
            ctx.error("gpu/no-device", svc.path + ("devices",) if "devices" in data else svc.path,
                      "the image needs an Intel GPU (xpu) but /dev/dri is not passed into the container",
                      "add devices: [/dev/dri] (or the card's /dev/dri/renderD* node)", key=True)
        groups = [str(g) for g in data.get("group_add") or [] if g is not None]
        gpath = svc.path + ("group_add",) if "group_add" in data else svc.path
        names = [g for g in groups if not g.isdigit()]
        for i, g in enumerate(data.get("group_add") or []):
            if str(g) in names:
                ctx.warning("gpu/group-name", svc.path + ("group_add", i),
                            f"group_add {g!r} is a name: it is resolved in the container's /etc/group, "
                            f"whose {g!r} gid may differ from the host's render group",
                            "use the host's numeric gid (`stat -c %g /dev/dri/renderD*`)")
        rgid = ctx.expect.render_gid
        if rgid is not None:
            if str(rgid) not in groups and not names:
                have = ", ".join(groups) if groups else "no group_add"
                ctx.error("gpu/render-gid-mismatch", gpath,
                          f"the host's render group id is {rgid} but the service has {have}; the server "
                          f"cannot open /dev/dri/renderD*", f"group_add: [\"{rgid}\"]", key=True)
        elif not groups and not privileged:
            ctx.warning("gpu/no-group-add", svc.path,
                        "no group_add: a non-root process in the container cannot open /dev/dri/renderD*",
                        "group_add: [\"<render gid>\"] (`stat -c %g /dev/dri/renderD*` on the host)",
                        key=True)
    elif device == "cpu":
        if data.get("ipc") == "host":
            return
        size = parse_size(data.get("shm_size")) if "shm_size" in data else None
        if size is None or size < GIB:
            shown = repr(data.get("shm_size")) if "shm_size" in data else "unset (Docker's 64 MiB default)"
            ctx.error("gpu/shm-too-small", svc.path + ("shm_size",) if "shm_size" in data else svc.path,
                      f"shm_size {shown}: vLLM CPU needs >= 1 GiB of /dev/shm", "shm_size: \"4g\"",
                      key=True)


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
    for path, req in svc.device_requests:
        if req.count is not None and req.device_ids is not None:
            sink.error("gpu/count-and-device-ids", path,
                       f"the GPU request sets both count ({req.count}) and device_ids "
                       f"({', '.join(req.device_ids)}); they are exclusive: Compose refuses the file "
                       f"(\"count\" and \"device_ids\" are exclusive) and older engines fail at "
                       f"container create (\"cannot set both Count and DeviceIDs on device request\")",
                       "keep device_ids to pin particular GPUs, or count to take any N; not both")
        via = "gpus" if path[len(svc.path)] == "gpus" else "deploy.resources"
        out.append(GpuRequest("nvidia" if req.is_nvidia else "any", req.gpu_count, via, path,
                              req.device_ids or []))
    for path, d in svc.devices:
        if d.long and not d.target:
            continue  # Compose refuses it: devices/missing-target
        if d.is_cdi:
            kind, _, name = d.source.partition("=")
            vendor: Vendor = "nvidia" if kind.startswith("nvidia.com/") else (
                "intel" if kind.startswith("intel.com/") else "any")
            out.append(GpuRequest(vendor, None if name == "all" else 1, "cdi", path, [name]))
        elif d.source == "/dev/dri" or d.source.startswith("/dev/dri/"):
            out.append(GpuRequest("intel", None if d.source == "/dev/dri" else _dri_count(d.source, svc), "dri",
                                  path))
    if data.get("runtime") == "nvidia":
        out.append(GpuRequest("nvidia", None, "runtime", svc.path + ("runtime",)))
    if data.get("privileged") is True:
        out.append(GpuRequest("any", None, "privileged", svc.path + ("privileged",)))
    return out


def _dri_count(node: str, svc: Service) -> int:
    """GPUs one ``/dev/dri/NODE`` entry gives: Level Zero computes through a card's render node
    (``renderD*``), so with render nodes listed each counts one and ``card*`` nodes none;
    without any, each ``card*`` counts one (the render-node rule judges them)."""
    base = node.rstrip("/").rsplit("/", 1)[-1]
    if base.startswith("renderD"):
        return 1
    if any(d.source.rsplit("/", 1)[-1].startswith("renderD") for _, d in svc.devices):
        return 0
    return 1 if base.startswith("card") else 0


def visible_gpus(svc: Service, env: dict[str, str]) -> tuple[int, str] | None:
    """(how many GPUs the server's runtime may use, the variable that says so) when a variable of
    the server's environment narrows them: ``CUDA_VISIBLE_DEVICES`` (cuda), ``ZE_AFFINITY_MASK``
    and ``ONEAPI_DEVICE_SELECTOR``'s ``level_zero:`` list (xpu; Intel oneAPI Level Zero and DPC++
    documentation); None when nothing narrows them or a wildcard keeps them all."""
    names = {"cuda": ("CUDA_VISIBLE_DEVICES",), "xpu": ("ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR")}
    counts: list[tuple[int, str]] = []
    for var in names.get(svc.device or "", ()):
        text = env.get(var)
        if text is None:
            continue
        if var == "ONEAPI_DEVICE_SELECTOR":
            lists = [sel.split(":", 1)[1] for sel in text.split(";") if sel.strip().lower().startswith(
                ("level_zero:", "ext_oneapi_level_zero:", "*:")) and ":" in sel]
            if not lists or any(x.strip() in ("*", "gpu") for lst in lists for x in lst.split(",")):
                continue
            items = sorted({x.strip().split(".")[0] for lst in lists for x in lst.split(",") if x.strip()})
        else:
            if text.strip() in ("", "-1") and var == "CUDA_VISIBLE_DEVICES":
                counts.append((0, f"{var}={text!r}"))
                continue
            items = [x.strip() for x in text.split(",") if x.strip()]
            if var == "CUDA_VISIBLE_DEVICES" and "-1" in items:  # CUDA stops at the first invalid id
                items = items[:items.index("-1")]
        counts.append((len(items), f"{var}={text}"))
    return min(counts) if counts else None


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
        mine = [r for r in reqs if r.vendor in (vendor, "any")]
        if have is not None and have < need:
            ctx.error("gpu/fewer-than-parallel", mine[0].path if mine else reqs[0].path,
                      f"the service requests {have} GPU(s) but tensor_parallel_size x "
                      f"pipeline_parallel_size = {tp} x {pp} = {need}; vLLM fails to start its workers",
                      f"request {need} GPUs or lower the parallel sizes"
                      + (" (Level Zero computes through render nodes: pass one /dev/dri/renderD* per GPU, "
                         "or all of /dev/dri)" if vendor == "intel" else ""))
        else:
            visible = visible_gpus(svc, server_environment(svc))
            if visible is not None and visible[0] < need:
                ctx.error("gpu/fewer-than-parallel", svc.path + ("environment",) if "environment" in svc.data
                          else svc.path,
                          f"{visible[1]} leaves the server {visible[0]} GPU(s) but tensor_parallel_size x "
                          f"pipeline_parallel_size = {tp} x {pp} = {need}; vLLM fails to start its workers",
                          f"make {need} GPUs visible or lower the parallel sizes")
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
