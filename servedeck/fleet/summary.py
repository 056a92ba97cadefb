"""Summary tables (rich) and the sweep chart (matplotlib) of fleet commands."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from servedeck.fleet.rollout import RolloutResult

_STYLE = {"ready": "green", "rolled-back": "yellow", "rolled-back (policy)": "yellow",
          "failed": "red", "rollback failed": "red", "untouched": "dim"}


def render_table(table: Table, width: int = 140) -> str:
    """A rich table as plain text (no colour codes), for printing and for files."""
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False).print(table)
    return buf.getvalue()


def rollout_table(result: "RolloutResult") -> Table:
    """host | outcome | run | time (s) | note -- one row per host, in inventory order."""
    table = Table(title=f"rollout of {result.profile} to {result.pattern} (serial {result.serial}, "
                        f"max fail {result.max_fail_percentage} %, policy {result.policy})")
    for col in ("host", "outcome", "run", "time (s)", "note"):
        table.add_column(col, justify="right" if col == "time (s)" else "left")
    for h in result.hosts:
        table.add_row(h.host, f"[{_STYLE.get(h.outcome, '')}]{h.outcome}" if h.outcome in _STYLE else h.outcome,
                      h.run_id or "-", "-" if h.duration_s is None else f"{h.duration_s:.1f}",
                      h.message[:90])
    return table


def hosts_table(fleet: Any) -> Table:
    """Inventory listing: host | ssh target | workdir | port | container | groups."""
    table = Table(title=f"{fleet.kind} inventory {fleet.source}")
    for col in ("host", "ssh", "workdir", "port", "container", "groups"):
        table.add_column(col)
    member_of = {h: [g for g, m in fleet.groups.items() if h in m and g not in ("all", "ungrouped")]
                 for h in fleet.hosts}
    for name, e in fleet.hosts.items():
        t = e.ssh
        ssh = t.alias or f"{t.user + '@' if t.user else ''}{t.hostname}{':' + str(t.port) if t.port else ''}"
        table.add_row(name, ssh, e.workdir, str(e.port), e.container_name or "(profile's)",
                      ", ".join(member_of[name]) or "-")
    return table
