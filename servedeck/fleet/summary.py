"""Summary tables (rich) and the sweep chart (matplotlib) of fleet commands."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Callable

from rich.console import Console
from rich.table import Table

from servedeck.numfmt import fmt_load, fmt_num, fmt_ratio

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
        table.add_row(h.host, f"[{_STYLE[h.outcome]}]{h.outcome}[/]" if h.outcome in _STYLE else h.outcome,
                      h.run_id or "-", "-" if h.duration_s is None else f"{h.duration_s:.1f}",
                      h.message[:400])
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


def sweep_plan_table(plan: Any) -> Table:
    """host | experiments (ids) | est. per experiment (s) | est. total (s) | basis."""
    table = Table(title=f"sweep {plan.name}: {len(plan.experiments)} experiment(s), "
                        f"{len(plan.done)} done, estimated {plan.estimate_s:.0f} s for the rest")
    for col in ("host", "experiments", "per experiment (s)", "total (s)", "estimate from"):
        table.add_column(col, justify="right" if "(s)" in col else "left")
    for host in plan.hosts:
        est = plan.estimates[host]
        ids = plan.assignments.get(host, [])
        table.add_row(host, ", ".join(ids) or "-", f"{est.experiment_s(plan.bench):.0f}",
                      f"{plan.host_estimate_s(host):.0f}",
                      f"{est.source}: ready {est.ready_s:.1f} s + {est.command_s:.1f} s"
                      + (f", bench {est.bench_s:.1f} s + {est.bench_command_s:.1f} s" if plan.bench else "")
                      + f", ab {est.ab_s:.1f} s, Ansible {est.experiment_overhead_s:.1f} s")
    return table


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _cell(fmt: Callable[[Any], str], v: Any) -> str:
    """``fmt(v)``, or ``-`` (this table's mark for a missing value)."""
    return "-" if v is None else fmt(v)


def sweep_table_from_rows(plan: Any, rows: list[dict[str, Any]]) -> Table:
    """experiment | change | host | status | runs A/B | kv tokens A->B | warm decode B/A |
    (under load: capacity A -> B) | quality gate | time."""
    table = Table(title=f"sweep {plan.name} (base {plan.base})")
    load = any(r.get("capacity_verdict") for r in rows)
    for col in ("experiment", "change", "host", "status", "run A", "run B", "KV tokens A -> B",
                "warm decode B/A", *(("capacity A -> B",) if load else ()), "quality gate", "time (s)", "note"):
        table.add_column(col)
    for r in rows:
        cap = (f"{_cell(fmt_load, r['capacity_a'])} -> {_cell(fmt_load, r['capacity_b'])}",) if load else ()
        table.add_row(r["id"], f"{r['variable']}: {_fmt(r['value_a'])} -> {_fmt(r['value_b'])}",
                      r["host"] or "-", r["status"], r["run_a"] or "-", r["run_b"] or "-",
                      f"{_cell(fmt_num, r['kv_a'])} -> {_cell(fmt_num, r['kv_b'])}"
                      if r["kv_a"] or r["kv_b"] else "-",
                      _cell(fmt_ratio, r["decode_ratio"]), *cap, r.get("gate") or "-", _fmt(r["seconds"]),
                      r["note"])
    return table


def sweep_table(result: Any) -> Table:
    """The summary table of a finished (or partly finished) sweep run."""
    return sweep_table_from_rows(result.plan, result.rows)


def sweep_chart_png(plan: Any, rows: list[dict[str, Any]]) -> bytes | None:
    """PNG bar chart: per finished experiment, arm B vs arm A in percent -- warm decode tok/s
    when benchmarked, KV cache tokens otherwise. None when no experiment is finished."""
    done = [r for r in rows if r["status"] == "done"]
    points = []
    for r in done:
        if r["decode_ratio"] is not None:
            points.append((r, 100.0 * (r["decode_ratio"] - 1.0), "warm decode tok/s"))
        elif r["kv_a"] and r["kv_b"] is not None:
            points.append((r, 100.0 * (r["kv_b"] / r["kv_a"] - 1.0), "KV cache tokens"))
    if not points:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(points) + 1.5))
    labels = [f"{r['variable'].rsplit('.', 1)[-1]} {_fmt(r['value_a'])}->{_fmt(r['value_b'])} "
              f"(r{r['id'].rsplit('-r', 1)[-1]}, {r['host']})" for r, _, _ in points]
    values = [v for _, v, _ in points]
    ax.barh(range(len(points)), values, color=["tab:green" if v >= 0 else "tab:red" for v in values])
    ax.set_yticks(range(len(points)), labels)
    ax.axvline(0, color="black", linewidth=0.8)
    metrics = sorted({m for _, _, m in points})
    ax.set_xlabel(f"arm B vs arm A (%): {', '.join(metrics)}")
    ax.set_title(f"sweep {plan.name} (base {plan.base})")
    ax.invert_yaxis()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
