"""Two arms' run records judged into one :class:`~servedeck.ab.stats.Comparison`.

:func:`compare_metrics` reads each arm's startup facts, bench samples, load benchmark and
quality probes through :mod:`servedeck.runs.store` and hands them to the statistics that judge
them: :mod:`servedeck.ab.stats` (startup facts, bench metrics, warnings, the compile-cache
state), :mod:`servedeck.ab.load` (the curves and the capacity verdict), :mod:`servedeck.ab.quality`
(the quality gate) and, for arms sampled sequentially, :func:`servedeck.ab.sequential.replay`.
It sits above all of them: each of them imports the statistics, none imports this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from servedeck.ab.load import compare_load, load_metrics
from servedeck.ab.quality import compare_quality
from servedeck.ab.sequential import replay
from servedeck.ab import stats
from servedeck.ab.stats import (ALPHA, COMPILE_TIMED_FACTS, DEFAULT_MARGIN, STARTUP_FACTS, Comparison, as_runs,
                                bench_metrics, compare_startup_fact, compare_warnings, compile_cache_comparable,
                                compile_cache_state, judge_bench, not_comparable_bench, startup_facts)
from servedeck.bench.limits import limit_metrics
from servedeck.runs import store


def compare_metrics(runs_a: Path | Sequence[Path], runs_b: Path | Sequence[Path], *,
                    alpha: float = ALPHA, margin: float = DEFAULT_MARGIN, sequential=None,
                    quality: Any = None) -> Comparison:
    """Compare startup facts, bench metrics and warnings of two arms.

    Args:
        runs_a, runs_b: one run directory per arm, or several (an interleaved experiment: their
            samples are pooled per arm; startup facts come from each arm's first run).
        alpha, margin: see :func:`servedeck.ab.stats.judge_bench`.
        sequential: the :class:`servedeck.ab.sequential.SequentialRecord` the arms were sampled
            under: the bench verdicts are then those of its looks (its design's alpha and
            margin replace ``alpha`` and ``margin``); None: fixed n.
        quality: the quality gate's margins and reference arm
            (:class:`servedeck.ab.quality.QualityGateSettings`; default when None).

    Reads ``startup.json`` (gaps filled from ``startup.log`` when the run keeps it) and
    ``bench.jsonl`` through :mod:`servedeck.runs.store`; a missing
    file gives ``missing`` verdicts rather than an error. Bench metrics are compared for the
    ``cold`` and ``warm`` phases (``warmup`` samples are excluded) whenever either arm has
    samples. Startup timings are ``not comparable`` when the arms' compile caches differed
    (:func:`servedeck.ab.stats.compile_cache_state`). When both arms ran a load benchmark
    (``load.jsonl``), each level's per-request ``ttft_s``/``tpot_s``/``e2e_s`` join the judged metrics (phase = the
    level, ``c=4``; a level delivered late in either arm is ``not comparable``, out of the family) and
    ``load`` holds the curves and the capacity verdict
    (:func:`servedeck.ab.load.compare_load`). Metrics of registered sources
    (:func:`servedeck.ab.stats.register_metric_source`) are judged beside the bench metrics.

    Raises:
        ServedeckError: a JSON file is invalid, or the sequential record does not fit the runs.
        ValueError: alpha or margin out of range.
    """
    la, lb = as_runs(runs_a), as_runs(runs_b)
    sa, sb = startup_facts(la[0]), startup_facts(lb[0])
    cache_a, cache_b = compile_cache_state(la[0], sa), compile_cache_state(lb[0], sb)
    differ = compile_cache_comparable(cache_a, cache_b)
    startup = [compare_startup_fact(n, sa.get(n), sb.get(n),
                                    not_comparable=differ if n in COMPILE_TIMED_FACTS else None)
               for n in STARTUP_FACTS]
    samples_a = [s for r in la for s in store.read(r, store.BENCH_SAMPLES)]
    samples_b = [s for r in lb for s in store.read(r, store.BENCH_SAMPLES)]
    load_judged, load_held = load_metrics(la, lb)
    extra = [*load_judged, *limit_metrics(la, lb),  # roofline share and energy per token (bench.limits)
             *(m for source in stats.METRIC_SOURCES for m in source(la, lb))]  # the registry as it is now
    if sequential is not None:
        alpha, margin = sequential.design.alpha, sequential.design.margin
        bench = replay(sequential, samples_a, samples_b, extra=extra)
    else:
        bench = judge_bench([*bench_metrics(samples_a, samples_b), *extra], alpha=alpha, margin=margin)
    bench += [not_comparable_bench(*metric, reason=why) for metric, why in load_held]

    def label(runs: list[Path]) -> str:
        return runs[0].name if len(runs) == 1 else f"{runs[0].name} (+{len(runs) - 1})"
    return Comparison(arm_a=label(la), arm_b=label(lb), startup=startup, bench=bench,
                      warnings=compare_warnings(sa, sb), startup_a=sa, startup_b=sb,
                      alpha=alpha, margin=margin, runs_a=[r.name for r in la], runs_b=[r.name for r in lb],
                      compile_cache_a=cache_a, compile_cache_b=cache_b, sequential=sequential,
                      load=compare_load(la, lb, alpha=alpha), quality=compare_quality(la, lb, quality))
