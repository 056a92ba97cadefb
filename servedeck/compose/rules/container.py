"""Container-level rule families: ``image/*``, ``ports/*``, ``gpu/*``, ``restart/*``, ``paths/*``.

Sources: Compose Specification (``services.ports`` short/long syntax, ``volumes`` short/long
syntax, ``restart``, ``deploy.resources``); Docker size units for ``shm_size`` (b, k, m, g,
binary multiples); XPU container conventions (vLLM's Intel XPU installation docs: ``--device
/dev/dri`` and the render group; the exl3xpu image's compose example); vLLM CPU's /dev/shm
need (vLLM CPU installation docs).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from servedeck.compose import document
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import network_siblings, served_model
from servedeck.compose.rules._service import Ctx, Service

# ----------------------------------------------------------------------------- image


def _norm_repo(repo: str) -> str:
    r = repo.lower()
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if r.startswith(prefix):
            r = r[len(prefix):]
    if r.startswith("library/"):
        r = r[len("library/"):]
    return r


def check_image(ctx: Ctx, svc: Service) -> None:
    """``image/*``: digest pinning and catalog knowledge."""
    path = svc.path + ("image",)
    img = svc.image
    if img is None:
        return
    if "$" in img.text:
        ctx.warning("image/interpolated", path,
                    f"image {img.text!r} is interpolated; its pinning cannot be verified from the file",
                    "write the digest literally: repository@sha256:<digest>")
        return
    if img.digest is None:
        ctx.error("image/not-pinned", path,
                  f"image {img.text!r} is not pinned by digest; the tag can move, so two runs may use "
                  f"different images", "pin it: repository@sha256:<digest> "
                  "(`docker buildx imagetools inspect REF` shows the digest)")
        return
    problem = img.digest_problem()
    if problem:
        ctx.error("image/bad-digest", path, f"image digest {img.digest!r} is malformed: {problem}",
                  "copy the full digest, e.g. sha256:21412bdd...(64 hex digits)")
        return
    if img.tag:
        ctx.info("image/tag-and-digest", path,
                 f"image has both tag {img.tag!r} and a digest; Docker pulls by digest and ignores the "
                 f"tag, which may no longer point at this digest", "drop the tag to avoid confusion")
    if svc.facts is None or svc.facts.inferred:
        where = "the image catalog" if ctx.catalog is not None else "any catalog (none given)"
        if svc.facts is None:
            what = ("nothing in its repository name says which server it runs: device, entrypoint "
                    "and vLLM version-specific checks are skipped and launcher defaults are unknown")
        else:
            f = svc.facts
            known = f"vLLM {f.vllm_version}" if f.vllm_version != "unknown" else "vLLM version unknown"
            what = (f"facts are inferred from the repository and tag, not read from the image: "
                    f"{f.launcher} launcher ({' '.join(f.entrypoint)}), {f.device} device, {known}; "
                    f"device, entrypoint and version rules run on these")
        ctx.info("image/unknown-digest", path, f"digest {img.digest} is not in {where}; {what}",
                 "`invoke image-facts IMAGE` (or `invoke deploy`) records the image's own facts")
        if svc.facts is None:
            return
    if _norm_repo(svc.facts.repository) != _norm_repo(img.repository):
        ctx.warning("image/repository-mismatch", path,
                    f"the catalog records digest {img.digest[:19]}... for {svc.facts.repository}, "
                    f"not {img.repository}", "check the repository name")


# ----------------------------------------------------------------------------- ports


@dataclass(frozen=True)
class PortSpec:
    """Container side of one published port entry (a range when ``hi > lo``)."""

    lo: int | None
    hi: int | None
    text: str
    path: Path

    def covers(self, port: int) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= port <= self.hi


def _range(text: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if not m:
        return None, None
    lo = int(m[1])
    return lo, int(m[2]) if m[2] else lo


def port_specs(svc: Service) -> list[PortSpec]:
    """Parse ``ports`` (short ``[IP:][HOST:]CONTAINER[/proto]`` and long ``target:`` syntax)."""
    out: list[PortSpec] = []
    ports = svc.data.get("ports")
    if not isinstance(ports, list):
        return out
    for i, item in enumerate(ports):
        if isinstance(item, bool) or not isinstance(item, (int, str, dict)):
            continue
        try:
            port = document.Port.parse(item)  # the one ports grammar (short and long syntax)
        except ValueError:
            continue
        lo, hi = _range(port.target)
        out.append(PortSpec(lo, hi, item if isinstance(item, str) else port.target, svc.path + ("ports", i)))
    return out


def check_ports(ctx: Ctx, svc: Service) -> None:
    """``ports/*``: published container port vs the port the server listens on."""
    host_net = svc.data.get("network_mode") == "host"
    ports = svc.data.get("ports")
    path = svc.path + ("ports",)
    if host_net and ports:
        ctx.warning("ports/ignored-with-host-network", path,
                    "network_mode: host ignores `ports`; the server is reachable on its own port on "
                    "the host directly", "drop `ports`, or use the default bridge network")
        return
    if svc.launcher is None:
        return
    mode = str(svc.data.get("network_mode") or "")
    if not ports and not host_net and not svc.data.get("expose") \
            and not mode.startswith(("service:", "container:")) and not network_siblings(ctx, svc):
        ctx.warning("ports/none", svc.path,
                    "the server publishes no ports and does not use the host network; nothing outside "
                    "the container can reach it", "add ports: [\"PORT:PORT\"]", key=True)
        return
    port = svc.eff("port")
    if not isinstance(port, int) or isinstance(port, bool):
        return
    specs = port_specs(svc)
    if any(s.lo is None for s in specs) or not specs:
        return  # interpolated or unparsable: cannot judge
    if not any(s.covers(port) for s in specs):
        e = svc.effective.get("port")
        how = {"flag": f"--port {port}", "image": f"the image default port {port}",
               "launcher-config": f"the port of the image's launcher config, {port}"}.get(
            e.source if e else "image", str(port))
        published = ", ".join(s.text for s in specs)
        ctx.error("ports/mismatch", specs[0].path,
                  f"ports publish container port(s) {published} but the server listens on {port} ({how})",
                  f"publish \"{port}:{port}\" or change --port")


# ----------------------------------------------------------------------------- gpu

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


def _device_hosts(svc: Service) -> list[str]:
    return [document.Device.parse(d).source for d in svc.data.get("devices") or []
            if isinstance(d, str) or isinstance(d, dict) and isinstance(d.get("source"), str)]


def check_gpu(ctx: Ctx, svc: Service) -> None:
    """``gpu/*``: device access for xpu (/dev/dri, render group) and cpu (/dev/shm)."""
    device = svc.device
    data = svc.data
    privileged = data.get("privileged") is True
    if device == "xpu":
        hosts = _device_hosts(svc)
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
    # NVIDIA requests (deploy.resources, gpus:, CDI, runtime): rules/resources.py


# ----------------------------------------------------------------------------- restart

_LOOPING = {"always", "unless-stopped", "on-failure"}


def check_restart(ctx: Ctx, svc: Service) -> None:
    """``restart/*``: restart policies that turn a failed start into a loop."""
    path = svc.path + ("restart",)
    sc = ctx.doc.scalars.get(path)
    value = svc.data.get("restart")
    if sc is not None and sc.plain and sc.raw.lower() in ("no", "off", "n"):
        ctx.error("restart/no-unquoted", path,
                  f"unquoted `restart: {sc.raw}` is the boolean false for YAML 1.1 readers, not the "
                  f"policy \"no\"", "quote it: restart: \"no\"")
        return
    if isinstance(value, str) and value in _LOOPING:
        # servedeck's own deploy watches the restart count and rolls back a looping start, so
        # for a file it rendered the loop is caught: information, not a warning
        report = ctx.info if ctx.expect.rendered else ctx.warning
        caught = " (servedeck deploy detects the loop and rolls back)" if ctx.expect.rendered else ""
        report("restart/loops-on-failure", path,
               f"restart: {value} turns a startup failure into a restart loop that keeps the GPU "
               f"busy and hides the first error{caught}", "use restart: on-failure:3 or \"no\"")
    policy = ((svc.data.get("deploy") or {}).get("restart_policy") or {})
    if isinstance(policy, dict) and policy.get("condition") in ("any", "on-failure", None) and policy \
            and policy.get("max_attempts") is None:
        ctx.warning("restart/loops-on-failure", svc.path + ("deploy", "restart_policy"),
                    "deploy.restart_policy restarts without max_attempts: a startup failure loops",
                    "set max_attempts: 3 or condition: none")


# ----------------------------------------------------------------------------- paths


@dataclass(frozen=True)
class Mount:
    """One volume entry."""

    source: str | None
    target: str | None
    bind: bool
    read_only: bool
    selinux: str | None
    path: Path


def mounts(svc: Service) -> list[Mount]:
    """Parse ``volumes`` (short ``SRC:DST[:MODE]`` and long syntax)."""
    out: list[Mount] = []
    for i, v in enumerate(svc.data.get("volumes") or []):
        if not isinstance(v, (str, dict)):
            continue
        try:
            m = document.Mount.parse(v)  # the one volume grammar (short and long syntax)
        except ValueError:
            continue
        opts = set((m.mode or "").split(","))
        sel = ((m.extra.get("bind") or {}).get("selinux") if isinstance(m.extra.get("bind"), dict)
               else "Z" if "Z" in opts else "z" if "z" in opts else None)
        out.append(Mount(m.source if isinstance(m.source, str) else None, m.target,
                         m.type == "bind" and m.source is not None, m.read_only, sel,
                         svc.path + ("volumes", i)))
    return out


def mount_at(path: str, ms: list[Mount]) -> Mount | None:
    """The mount that holds container path ``path`` (an absolute, normalised path): the one with
    the deepest target that is ``path`` or one of its parents; None when no mount does."""
    p = posixpath.normpath(path)
    best: Mount | None = None
    for m in ms:
        t = posixpath.normpath(m.target) if m.target else None
        if t and (p == t or p.startswith(t.rstrip("/") + "/")) and (best is None or len(t) > len(best.target or "")):
            best = m
    return best


def host_mount_of(path: str, ms: list[Mount]) -> tuple[Mount, str] | None:
    """(the bind mount whose host source holds ``path``, where the container sees ``path``) for a
    path written as the host has it (``/srv/adapters/x`` of ``/srv/adapters:/adapters``:
    ``/adapters/x``); relative sources compare as written (``./adapters``). None when no bind
    source holds it."""
    p = posixpath.normpath(path)
    for m in ms:
        if not (m.bind and m.source and m.target):
            continue
        src = posixpath.normpath(m.source)
        if p == src or p.startswith(src.rstrip("/") + "/"):
            return m, posixpath.join(m.target, posixpath.relpath(p, src)) if p != src else m.target
    return None


def check_paths(ctx: Ctx, svc: Service) -> None:
    """``paths/*``: bind-mount sources that depend on the machine or are dangerous."""
    model = served_model(svc)
    for m in mounts(svc):
        src = m.source
        if m.bind and src:
            if re.match(r"^\$\{?HOME\b", src):
                ctx.warning("paths/home-variable", m.path,
                            f"bind source {src!r} uses $HOME, which Compose takes from whoever runs "
                            f"`docker compose` (another user or a CI job gets another path)",
                            "use an absolute path on the card host or a path relative to the compose file")
            elif src.startswith("~") or src.startswith(("/home/", "/Users/")):
                ctx.warning("paths/machine-specific", m.path,
                            f"bind source {src!r} is under a user's home directory; it exists only on "
                            f"the machine (and user) it was written on",
                            "use a host-wide path such as /srv/models, or a path relative to the compose file")
            elif src.rstrip("/") in ("", "/dev") or src == "/":
                ctx.error("paths/dangerous-bind", m.path,
                          f"bind-mounting {src!r} exposes the whole host {'root' if src == '/' else 'device tree'}"
                          f" to the container", "mount only what the server needs (e.g. /dev/dri via devices)")
            elif src.startswith("."):
                if ctx.expect.rendered:
                    msg = (f"relative bind source {src!r} resolves against the run's working directory on "
                           f"the card host")
                else:
                    msg = (f"relative bind source {src!r} resolves against the compose file's directory on "
                           f"the machine that runs `docker compose`")
                ctx.info("paths/relative", m.path, msg)
        if m.selinux:
            ctx.info("paths/selinux-relabel", m.path,
                     f":{m.selinux} relabels the host directory for SELinux "
                     f"({'private to this container' if m.selinux == 'Z' else 'shared'}); it is ignored on "
                     f"hosts without SELinux", "drop it unless the card host enforces SELinux")
        if model and m.target and not m.read_only and m.source and \
                (model == m.target or model.startswith(m.target.rstrip("/") + "/")):
            ctx.info("paths/weights-rw", m.path,
                     f"the weights mount ({m.target}) is read-write; the server never writes weights",
                     "append :ro to the volume")
