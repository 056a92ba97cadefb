"""Interleaved arms: alternate deployments of A and B on one host so drift spreads over both.

``invoke ab PROFILE_A PROFILE_B --interleave --host H`` deploys the two profiles in ABBA order
(``A B B A A B B A …``) or in randomised blocks (each pair of deployments in a seeded random
order), benchmarks every deployment with the same workload, tags the runs with one experiment
id (``run.json`` ``experiment``), pools each arm's samples for the verdicts, and reports the order
with each run's medians and the trend across positions: a Spearman rank correlation
(``scipy.stats.spearmanr``) of each run's median, divided by its arm's median, with its position.
A trend means the host drifted during the experiment (thermal, other load, a power cap).

Deploying and benchmarking go through the public stage functions
(:func:`servedeck.deploy.apply.deploy`, :func:`servedeck.bench.record.bench_deployed`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict

from servedeck.errors import ServedeckError
from servedeck.runs import store

Order = Literal["abba", "random"]
TREND_ALPHA = 0.05


def schedule(order: Order, repetitions: int, seed: int = 0) -> list[str]:
    """The arm of every deployment: ``repetitions`` deployments per arm.

    ``abba``: ``A B B A A B B A …`` (a linear drift cancels in each ABBA block);
    ``random``: each consecutive pair is ``A B`` or ``B A`` at random (seeded).

    Raises:
        ServedeckError: ``repetitions`` below 1 or an unknown order.
    """
    if repetitions < 1:
        raise ServedeckError(f"repetitions must be at least 1, got {repetitions}", field="repetitions")
    if order == "abba":
        return [arm for i in range(repetitions) for arm in (("A", "B") if i % 2 == 0 else ("B", "A"))]
    if order == "random":
        rng = random.Random(seed)
        return [arm for _ in range(repetitions) for arm in rng.sample(["A", "B"], 2)]
    raise ServedeckError(f"unknown order {order!r}", field="order", hint="use abba or random")


class Position(BaseModel):
    """One deployment of the experiment: its place, arm, run and per-metric medians."""

    model_config = ConfigDict(extra="forbid")
    position: int
    arm: str
    run_id: str
    medians: dict[str, float | None]


class Trend(BaseModel):
    """Drift of one metric across positions (both arms, each divided by its arm's median)."""

    model_config = ConfigDict(extra="forbid")
    metric: str
    rho: float | None
    p: float | None
    reading: str


class Interleaving(BaseModel):
    """What the report shows of an interleaved experiment."""

    model_config = ConfigDict(extra="forbid")
    experiment: str
    host: str
    order_name: str
    positions: list[Position]
    trend_metrics: list[str]
    trends: list[Trend]


#: Metrics whose per-run medians and trend the report shows.
TREND_METRICS = ("cold ttft_s", "cold prefill_tok_s", "warm decode_tok_s")


def _run_medians(run_dir: Path, metrics: Sequence[str]) -> dict[str, float | None]:
    import statistics
    samples = store.read(run_dir, store.BENCH_SAMPLES)
    out: dict[str, float | None] = {}
    for key in metrics:
        phase, name = key.split(" ", 1)
        values = store.phase_samples(samples, phase, name)
        out[key] = float(statistics.median(values)) if values else None
    return out


def trends(positions: Sequence[Position], metrics: Sequence[str]) -> list[Trend]:
    """Spearman correlation of normalised run medians with position, per metric."""
    import statistics

    from scipy.stats import spearmanr

    out = []
    for key in metrics:
        by_arm: dict[str, list[float]] = {}
        for p in positions:
            if (median := p.medians.get(key)) is not None:
                by_arm.setdefault(p.arm, []).append(median)
        centre = {arm: statistics.median(v) for arm, v in by_arm.items()}
        xs, ys = [], []
        for p in positions:
            v = p.medians.get(key)
            if v is not None and centre.get(p.arm):
                xs.append(p.position)
                ys.append(v / centre[p.arm])
        if len(xs) < 3 or len(set(ys)) < 2:
            out.append(Trend(metric=key, rho=None, p=None,
                             reading="too few distinct runs to see a trend"))
            continue
        res = spearmanr(xs, ys)
        rho, p_value = float(res.statistic), float(res.pvalue)
        if p_value <= TREND_ALPHA:
            reading = f"drift: the metric {'rises' if rho > 0 else 'falls'} across positions"
        else:
            reading = "no trend detected"
        out.append(Trend(metric=key, rho=rho, p=p_value, reading=reading))
    return out


def describe(experiment: str, host: str, order: str, arms: Sequence[str], runs: Sequence[Path],
             metrics: Sequence[str] = TREND_METRICS) -> Interleaving:
    """Build the report part of an experiment from its runs in deployment order."""
    positions = [Position(position=i + 1, arm=arm, run_id=Path(r).name, medians=_run_medians(Path(r), metrics))
                 for i, (arm, r) in enumerate(zip(arms, runs))]
    return Interleaving(experiment=experiment, host=host, order_name=order.upper() if order == "abba" else order,
                        positions=positions, trend_metrics=list(metrics), trends=trends(positions, metrics))


def run_interleaved(profiles: dict[str, str], order: Order, repetitions: int, *,
                    deploy_fn: Callable[[str], Path], bench_fn: Callable[[Path], None],
                    host: str, seed: int = 0, on_step: Callable[[int, str, str], None] | None = None,
                    go_on: Callable[[list[Path], list[Path], str], bool] | None = None,
                    ) -> tuple[list[Path], list[Path], Interleaving]:
    """Deploy and benchmark the arms in :func:`schedule` order.

    Args:
        profiles: ``{"A": profile name, "B": profile name}``.
        order, repetitions, seed: see :func:`schedule` (``repetitions``: the most deployments
            per arm, when ``go_on`` may stop earlier).
        deploy_fn: deploys a profile by name and returns its (ready) run directory; the CLI
            passes :func:`servedeck.deploy.apply.deploy` bound to the project and host.
        bench_fn: benchmarks a run directory (:func:`servedeck.bench.record.bench_deployed`).
        host: the host name (for the report).
        on_step: called with ``(position, arm, profile)`` before each deployment.
        go_on: sequential sampling: called with ``(runs of A, runs of B, experiment id)`` after
            each complete pair of deployments (one per arm); False stops the experiment
            (:class:`servedeck.ab.sequential.Monitor`). None: every deployment of the schedule.

    Returns:
        ``(runs of A, runs of B, Interleaving)``.

    Raises:
        ServedeckError: a deploy or benchmark failed (the runs recorded so far stay tagged).
    """
    arms = schedule(order, repetitions, seed)
    experiment = f"ilv-{store.utcnow().replace(':', '').replace('-', '')}"
    runs: list[Path] = []
    for i, arm in enumerate(arms, 1):
        if on_step:
            on_step(i, arm, profiles[arm])
        run_dir = Path(deploy_fn(profiles[arm]))
        store.open_run(run_dir).save_meta(experiment=experiment)
        bench_fn(run_dir)
        runs.append(run_dir)
        if go_on is not None and i % 2 == 0 and i < len(arms):
            if not go_on(*_split(arms, runs), experiment):
                break
    runs_a, runs_b = _split(arms, runs)
    if go_on is not None and len(runs) == len(arms):
        go_on(runs_a, runs_b, experiment)  # the last look (the budget's)
    return runs_a, runs_b, describe(experiment, host, order, arms[:len(runs)], runs)


def _split(arms: Sequence[str], runs: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    return ([r for arm, r in zip(arms, runs) if arm == "A"], [r for arm, r in zip(arms, runs) if arm == "B"])
