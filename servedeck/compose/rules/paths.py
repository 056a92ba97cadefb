"""``paths/*``: bind-mount sources tied to one machine or user, dangerous binds, SELinux
relabels and read-write weights (Compose Specification ``volumes``, short and long syntax, read by
the document model's grammar: :class:`servedeck.compose.document.Mount`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servedeck.compose.document import Mount
from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import served_model


@dataclass(frozen=True)
class MountItem:
    """One ``volumes`` entry as the paths rules judge it, at its document path."""

    source: str | None
    target: str | None
    bind: bool
    read_only: bool
    selinux: str | None
    path: Path


def mounts(svc: Service) -> list[MountItem]:
    """Parse ``volumes`` (short ``SRC:DST[:MODE]`` and long syntax)."""
    out: list[MountItem] = []
    for i, v in enumerate(svc.data.get("volumes") or []):
        if not isinstance(v, (str, dict)):
            continue
        try:
            m = Mount.parse(v)  # the one volume grammar (short and long syntax)
        except ValueError:
            continue
        opts = set((m.mode or "").split(","))
        sel = ((m.extra.get("bind") or {}).get("selinux") if isinstance(m.extra.get("bind"), dict)
               else "Z" if "Z" in opts else "z" if "z" in opts else None)
        out.append(MountItem(m.source if isinstance(m.source, str) else None, m.target,
                         m.type == "bind" and m.source is not None, m.read_only, sel,
                         svc.path + ("volumes", i)))
    return out


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
