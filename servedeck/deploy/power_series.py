"""Power-cap experiments as a series: the card's original cap is read before the series and
put back at its end, after a failure and after an interrupt.

A series (``servedeck sweep --vary host.power_cap_w=...``, ``servedeck ab --interleave`` of two
capped profiles) deploys one capped profile after another; each deploy records the cap it
replaced (:mod:`servedeck.host.power`), so after the series the card would keep the last arm's
cap. :func:`power_series` reads each host's limit first (no write) and, whatever happened,
writes it back at the end and records on the host that the running deployment keeps it (a later
rollback or down then leaves the cap alone: ``previous_w = applied_w``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.host.power import apply_power_cap, keep_power_cap, read_power_limit
from servedeck.host.remote import RemoteHost
from servedeck.runs.store import utcnow

__all__ = ["OriginalCap", "power_series", "read_original_caps", "restore_original_caps", "varies_power_cap"]


@dataclass
class OriginalCap:
    """A host's limit before a series: ``watts`` None when it could not be read (``problem``)."""

    host: RemoteHost
    sysfs_root: str
    gpu: int
    watts: float | None
    interface: str | None = None
    problem: str | None = None


def varies_power_cap(profiles: list[Any]) -> bool:
    """True when any of the series' resolved profiles sets ``host.power_cap_w``."""
    return any(getattr(getattr(p, "host", None), "power_cap_w", None) is not None for p in profiles)


def read_original_caps(hosts: list[tuple[RemoteHost, Any]], *, gpu: int = 0) -> list[OriginalCap]:
    """Each host's limit in force now (read only; a host without an interface is skipped).

    ``hosts``: ``(RemoteHost, HostEntry)`` pairs (the entry's ``sysfs_root``)."""
    out = []
    for host, entry in hosts:
        root = getattr(entry, "sysfs_root", "/sys")
        try:
            limit = read_power_limit(host, sysfs_root=root, gpu=gpu, probe=False)
        except ServedeckError as exc:
            out.append(OriginalCap(host, root, gpu, None, problem=exc.message))
            continue
        if limit is None:
            continue
        out.append(OriginalCap(host, root, gpu, limit.current_w, limit.interface,
                               None if limit.current_w is not None else limit.problem))
    return out


def restore_original_caps(originals: list[OriginalCap], *, series: str,
                          report: Callable[[str], None] | None = None) -> list[str]:
    """Write each host's original limit back (where it changed) and mark it kept.

    Returns:
        one line per host: what was restored, left, or could not be done (also passed to
        ``report``). Never raises for one host's failure: every host is tried.
    """
    lines = []
    for o in originals:
        name = o.host.name
        if o.watts is None:
            lines.append(f"{name}: the original power limit was not readable ({o.problem}); left as it is")
            continue
        try:
            limit = read_power_limit(o.host, sysfs_root=o.sysfs_root, gpu=o.gpu, probe=True)
            if limit is None:
                lines.append(f"{name}: no power-limit interface any more; nothing restored")
                continue
            if limit.current_w is not None and abs(limit.current_w - o.watts) < 1.0:
                lines.append(f"{name}: power limit {o.watts:g} W as before the series")
                continue
            apply_power_cap(o.host, limit, o.watts, profile=f"(original cap restored after {series})",
                            now=utcnow(), sysfs_root=o.sysfs_root)
            keep_power_cap(o.host, profile=f"(original cap restored after {series})", now=utcnow())
            lines.append(f"{name}: power limit restored {limit.current_w:g} W -> {o.watts:g} W (as before the series)")
        except ServedeckError as exc:
            lines.append(f"{name}: could not restore the power limit {o.watts:g} W: {exc.message}")
    for line in lines:
        if report is not None:
            report(line)
    return lines


@contextmanager
def power_series(hosts: list[tuple[RemoteHost, Any]], *, series: str, enabled: bool = True, gpu: int = 0,
                 report: Callable[[str], None] | None = None) -> Iterator[list[OriginalCap]]:
    """Around a series of capped deploys: read the caps before, restore them after (also on an
    exception, Ctrl-C included, which is re-raised). ``enabled`` False does nothing."""
    originals = read_original_caps(hosts, gpu=gpu) if enabled else []
    try:
        yield originals
    finally:
        if originals:
            restore_original_caps(originals, series=series, report=report)
