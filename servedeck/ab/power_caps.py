"""Power-cap series in words and numbers: tokens/s and energy per token per cap, and the knee.

The runs of a series (a sweep over ``host.power_cap_w``, or any runs the caller groups by cap)
are pooled per cap: warm decode tok/s (the median of every warm request), warm energy per output
token (the runs' telemetry: energy over tokens of their warm windows), mean power and the share
of time throttled. The **knee** is the lowest cap whose decode stays within the margin (default
3 %, the A/B report's practical-equivalence margin) of the best cap's: lowering the cap below it
costs more decode than the margin, above it the card draws power for nothing. The lowest energy
per token is named beside it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from servedeck.numfmt import fmt_num

__all__ = ["CapRow", "cap_rows", "knee", "caps_markdown"]


@dataclass
class CapRow:
    """One cap's pooled figures (None where not measured)."""

    cap_w: float
    runs: list[str] = field(default_factory=list)
    decode_samples: list[float] = field(default_factory=list)
    decode_tok_s: float | None = None
    j_per_token: float | None = None
    mean_power_w: float | None = None
    throttled_fraction: float | None = None


def cap_rows(runs_dir: Path, runs_by_cap: dict[float, list[str]]) -> list[CapRow]:
    """Pool each cap's runs (``{cap W: [run ids]}``), caps ascending."""
    from servedeck.bench.limits import read_telemetry
    from servedeck.runs import store
    out = []
    for cap in sorted(runs_by_cap):
        row = CapRow(cap_w=float(cap), runs=list(dict.fromkeys(runs_by_cap[cap])))
        energy = tokens = dur = thr = 0.0
        have_energy = have_thr = True
        for run_id in row.runs:
            d = Path(runs_dir) / run_id
            row.decode_samples += store.phase_samples(store.read(d, store.BENCH_SAMPLES), "warm", "decode_tok_s")
            tel = read_telemetry(d)
            warm = tel.phases.get("warm") if tel else None
            if warm is None or warm.energy_j is None:
                have_energy = False
            else:
                energy += warm.energy_j
                tokens += warm.output_tokens
                dur += warm.duration_s
            if warm is None or warm.throttled_s is None:
                have_thr = False
            else:
                thr += warm.throttled_s
        row.decode_tok_s = statistics.median(row.decode_samples) if row.decode_samples else None
        if have_energy and row.runs and tokens:
            row.j_per_token, row.mean_power_w = energy / tokens, energy / dur if dur else None
        if have_thr and row.runs and dur:
            row.throttled_fraction = thr / dur
        out.append(row)
    return out


def knee(rows: list[CapRow], margin: float = 0.03) -> tuple[CapRow | None, str]:
    """``(knee row, sentence)``: the lowest cap within ``margin`` of the best decode (module
    docstring); None when no cap has decode figures."""
    with_decode = [r for r in rows if r.decode_tok_s is not None]
    if not with_decode:
        return None, "no cap has warm decode figures: no knee"
    best = max(with_decode, key=lambda r: r.decode_tok_s)  # type: ignore[arg-type,return-value]
    within = [r for r in with_decode if r.decode_tok_s >= best.decode_tok_s * (1 - margin)]  # type: ignore[operator]
    k = min(within, key=lambda r: r.cap_w)
    text = (f"knee at {k.cap_w:g} W: the lowest cap whose warm decode ({fmt_num(k.decode_tok_s)} tok/s) stays "
            f"within {margin:.0%} of the best ({fmt_num(best.decode_tok_s)} tok/s at {best.cap_w:g} W)")
    below = [r for r in with_decode if r.cap_w < k.cap_w]
    if below:
        nxt = max(below, key=lambda r: r.cap_w)
        text += (f"; at {nxt.cap_w:g} W decode falls to {fmt_num(nxt.decode_tok_s)} tok/s "
                 f"({(nxt.decode_tok_s / best.decode_tok_s - 1):+.1%})")  # type: ignore[operator]
    else:
        text += "; no lower cap was tested"
    energies = [r for r in rows if r.j_per_token is not None]
    if energies:
        low = min(energies, key=lambda r: r.j_per_token)  # type: ignore[arg-type,return-value]
        text += f". Lowest energy per token: {fmt_num(low.j_per_token)} J at {low.cap_w:g} W"
    return k, text


def caps_markdown(rows: list[CapRow], margin: float = 0.03) -> list[str]:
    """The per-cap table and the knee sentence as Markdown lines."""
    _, sentence = knee(rows, margin)
    lines = [("| power cap (W) | runs | warm decode tok/s (median, n) | J per output token (warm) | "
              "mean power (W) | time throttled |"), "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        thr = "–" if r.throttled_fraction is None else f"{r.throttled_fraction:.0%}"
        lines.append(f"| {r.cap_w:g} | {', '.join(r.runs)} | {fmt_num(r.decode_tok_s)} ({len(r.decode_samples)}) | "
                     f"{fmt_num(r.j_per_token)} | {fmt_num(r.mean_power_w)} | {thr} |")
    return lines + ["", sentence + "."]
