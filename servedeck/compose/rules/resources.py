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
from servedeck.compose.rules._facts import int_setting, judge
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
