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

import re

from dataclasses import dataclass, field
from typing import Literal

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


def _device_request(ctx: Ctx, item: dict, path: Path, via: str, out: list[GpuRequest]) -> None:
    count = item.get("count")
    ids = item.get("device_ids")
    if count is not None and ids is not None:
        ctx.error("gpu/count-and-device-ids", path,
                  f"the GPU request sets both count ({count}) and device_ids ({', '.join(map(str, ids)) if isinstance(ids, list) else ids}); "
                  f"they are exclusive: Compose refuses the file (\"count\" and \"device_ids\" are "
                  f"exclusive) and older engines fail at container create (\"cannot set both Count "
                  f"and DeviceIDs on device request\")",
                  "keep device_ids to pin particular GPUs, or count to take any N; not both")
    driver = str(item.get("driver") or "nvidia").lower()
    caps = item.get("capabilities") or []
    flat = {str(c) for c in caps} if isinstance(caps, list) else set()
    vendor: Vendor = "nvidia" if driver == "nvidia" or "gpu" in flat else "any"
    if isinstance(count, str) and re.fullmatch(r"\s*-?\d+\s*", count):
        count = int(count)  # compose-go reads a quoted number as the number ("1" -> count: 1)
    if isinstance(ids, list):
        names = [str(i) for i in ids]
        # driver: cdi takes CDI device names; VENDOR/CLASS=all is every device of the class
        every = any(_is_cdi(n) and n.endswith("=all") for n in names)
        out.append(GpuRequest(vendor, None if every else len(ids), via, path, names))
    elif isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        out.append(GpuRequest(vendor, count, via, path))
    else:  # "all", -1 (all), or not countable
        out.append(GpuRequest(vendor, None, via, path))


def gpu_requests(ctx: Ctx, svc: Service, report: bool = True) -> list[GpuRequest]:
    """Every GPU request of ``svc`` (reporting malformed device requests when ``report``)."""
    sink = ctx if report else _Silent()
    data = svc.data
    out: list[GpuRequest] = []
    res = ((data.get("deploy") or {}).get("resources") or {}).get("reservations") or {}
    devs = res.get("devices") if isinstance(res, dict) else None
    if isinstance(devs, list):
        for i, item in enumerate(devs):
            if isinstance(item, dict):
                _device_request(sink, item, svc.path + ("deploy", "resources", "reservations", "devices", i),
                                "deploy.resources", out)
    gpus = data.get("gpus")
    if gpus == "all":
        out.append(GpuRequest("nvidia", None, "gpus", svc.path + ("gpus",)))
    elif isinstance(gpus, list):
        for i, item in enumerate(gpus):
            if isinstance(item, dict):
                _device_request(sink, item, svc.path + ("gpus", i), "gpus", out)
    for i, d in enumerate(data.get("devices") or []):
        src = d if isinstance(d, str) else (d.get("source") if isinstance(d, dict) else None)
        if not isinstance(src, str):
            continue
        host = src.split(":", 1)[0] if not _is_cdi(src) else src
        path = svc.path + ("devices", i)
        if isinstance(d, dict) and not d.get("target"):
            # compose-go loader (v2.40): the long syntax needs a target, CDI names included
            sink.error("devices/missing-target", path,
                       f"device {src!r} in the long syntax has no target: Compose refuses the file "
                       f"(\"service device services.{svc.name}.devices.[{i}] is missing a mount target\")",
                       f"write it in the short syntax (devices: [\"{src}\"]) or add target:")
            continue
        if _is_cdi(src):
            kind, _, name = src.partition("=")
            vendor: Vendor = "nvidia" if kind.startswith("nvidia.com/") else (
                "intel" if kind.startswith("intel.com/") else "any")
            out.append(GpuRequest(vendor, None if name == "all" else 1, "cdi", path, [name]))
        elif host == "/dev/dri" or host.startswith("/dev/dri/"):
            out.append(GpuRequest("intel", None if host == "/dev/dri" else 1, "dri", path))
    if data.get("runtime") == "nvidia":
        out.append(GpuRequest("nvidia", None, "runtime", svc.path + ("runtime",)))
    if data.get("privileged") is True:
        out.append(GpuRequest("any", None, "privileged", svc.path + ("privileged",)))
    return out


class _Silent:
    def error(self, *a, **k) -> None:
        pass


def _is_cdi(text: str) -> bool:
    kind, eq, _ = text.partition("=")
    return bool(eq) and "/" in kind and "." in kind.split("/", 1)[0] and not text.startswith("/")


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
    if svc.launch.kind is None:
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
        if svc.launch.kind is None:
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
