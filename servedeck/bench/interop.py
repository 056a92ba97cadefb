"""Load results to and from other tools: ``vllm bench serve`` JSON out, sweeps and curves in.

**Export** (:func:`vllm_bench_result`, :func:`export_vllm_bench`): each level of a run's load
benchmark as one ``vllm bench serve --save-result --save-detailed`` object (vLLM
``vllm/benchmarks/serve.py``, 0.32: the keys of ``result_json`` and ``benchmark_result``),
newline-separated as ``--append-result`` writes several, so vLLM's own tooling and
:func:`servedeck.bench.external.import_vllm_bench` read it. vLLM's definitions are followed:
``latency`` = send to the last output chunk, TPOT = ``(latency − ttft) / (output_len − 1)`` for
requests of more than one output token, ITL = every gap between output chunks; statistics over
the successful requests; percentiles by ``numpy.percentile``; a failed request has ``ttft`` 0,
``output_len`` 0 and its error text. servedeck adds ``servedeck_load`` (the level) and
``servedeck_run``.

**Import** of load curves measured by other tools (:func:`import_curve`), each benchmark a
level of an :class:`ExternalCurve`:

* ``vllm bench sweep serve`` output directory (vLLM ``vllm/benchmarks/sweep/serve.py``, 0.32):
  ``<experiment>/<SERVE-…-BENCH-…>/run=N.json`` (one ``vllm bench serve`` result each, with the
  sweep's parameters merged in, e.g. ``max_concurrency``, ``request_rate``) and
  ``summary.json`` (the list of them); runs of one combination are separate levels. A sweep
  over server settings (``SERVE-`` parts) holds several servers: one must be chosen
  (``serve``), since a run record holds one server.
* a ``vllm bench serve --append-result`` file with several objects (one level each);
* a GuideLLM report with several benchmarks (guidellm 0.8.1 ``GenerativeBenchmark``: each
  benchmark's ``config.strategy`` ``type_`` = ``synchronous`` / ``concurrent`` (``streams``) /
  ``throughput`` / ``constant`` / ``poisson`` (``rate``), ``metrics.requests_per_second``,
  ``output_tokens_per_second``, ``time_to_first_token_ms``, ``time_per_output_token_ms``,
  ``request_latency`` (s), successful requests' ``median`` and ``p99``).

Failed requests: every statistic is over the successful requests; a level says how many failed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from servedeck.bench.external import guidellm_entry, guidellm_strategy, load_documents, number
from servedeck.errors import ServedeckError
from servedeck.runs.records import ExternalCurve, ExternalLevel, LevelResult, LoadSummary, RequestRecord

#: ``vllm bench serve --metric-percentiles`` written by the export.
EXPORT_PERCENTILES = (50, 90, 99)


# --------------------------------------------------------------------------------------- export


def _stats_ms(values: list[float]) -> dict[str, float]:
    import numpy as np
    arr = np.asarray(values or [0.0], float) * 1000.0
    out = {"mean": float(np.mean(arr)), "median": float(np.median(arr)), "std": float(np.std(arr))}
    for p in EXPORT_PERCENTILES:
        out[f"p{p}"] = float(np.percentile(arr, p))
    return out


def vllm_bench_result(summary: LoadSummary, level: LevelResult, records: list[RequestRecord],
                      run_id: str | None = None) -> dict[str, Any]:
    """One level of a load benchmark as a ``vllm bench serve`` result object (module docstring).

    Args:
        summary: the run's ``load.json``; level: one of its ``levels``; records: that level's
            ``load.jsonl`` records (send order).
    """
    lv = level.level
    ok = [r for r in records if r.success]
    chat = summary.workload.get("endpoint") == "/v1/chat/completions"
    backend = "openai-chat" if chat else "openai"
    out: dict[str, Any] = {
        "date": level.started_at.replace("-", "").replace(":", "").replace("T", "-").rstrip("Z")[:15],
        "endpoint_type": backend, "backend": backend, "label": None, "model_id": summary.served_model,
        "tokenizer_id": None, "num_prompts": level.requests,
        "request_rate": "inf" if lv.kind == "concurrency" else lv.value,
        "burstiness": 1.0 if lv.kind == "poisson" else None,
        "max_concurrency": int(lv.value) if lv.kind == "concurrency" else lv.max_concurrency,
    }
    if lv.kind == "ramp":
        out.update(ramp_up_strategy="linear", ramp_up_start_rps=lv.start_rps, ramp_up_end_rps=lv.value)
    in_tok = [(r.prompt_tokens or r.prompt_tokens_requested) if r.success else r.prompt_tokens_requested
              for r in records]
    out_tok = [r.output_tokens if r.success else 0 for r in records]
    in_ok = sum(i for i, r in zip(in_tok, records) if r.success)
    duration = level.duration_s
    out.update({
        "duration": duration, "completed": len(ok), "failed": len(records) - len(ok),
        "total_input_tokens": in_ok, "total_output_tokens": sum(out_tok),
        "request_throughput": len(ok) / duration,
        "request_goodput": level.slo.goodput_rps if level.slo else None,
        "output_throughput": sum(out_tok) / duration, "total_token_throughput": (sum(out_tok) + in_ok) / duration,
        "input_lens": in_tok, "output_lens": out_tok,
        "ttfts": [r.ttft_s if r.success else 0.0 for r in records],
        "itls": [list(r.itl_s) if r.success else [] for r in records],
        "latencies": [r.last_token_s if r.success and r.last_token_s is not None else 0.0 for r in records],
        "start_times": [r.sent_unix_s for r in records],
        "generated_texts": ["" for _ in records],
        "errors": ["" if r.success else (r.error or "failed") for r in records],
    })
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    lat_ok = [r.last_token_s for r in ok if r.last_token_s is not None]
    tpots = [(r.last_token_s - r.ttft_s) / (r.output_tokens - 1) for r in ok
             if r.output_tokens > 1 and r.last_token_s is not None and r.ttft_s is not None]
    itls = [g for r in ok for g in r.itl_s]
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", lat_ok)):
        st = _stats_ms(values)
        out[f"mean_{name}_ms"], out[f"median_{name}_ms"], out[f"std_{name}_ms"] = st["mean"], st["median"], st["std"]
        for p in EXPORT_PERCENTILES:
            out[f"p{p}_{name}_ms"] = st[f"p{p}"]
    out["servedeck_load"] = lv.label
    if run_id:
        out["servedeck_run"] = run_id
    return out


def export_vllm_bench(run_dir: Path, path: Path) -> Path:
    """Write every level of ``run_dir``'s load benchmark to ``path`` as ``vllm bench serve``
    result objects, one per line (atomically).

    Raises:
        ServedeckError: the run has no load benchmark.
    """
    from servedeck.fsutil import atomic_write
    from servedeck.runs import store
    summary, records = store.read_load(run_dir)
    if summary is None:
        raise ServedeckError(f"run {Path(run_dir).name} has no load benchmark to export",
                             hint="run invoke bench --workload chat --load concurrency:1,2,4 first")
    lines = [json.dumps(vllm_bench_result(summary, level, [r for r in records if r.level == level.index],
                                          Path(run_dir).name))
             for level in summary.levels]
    return atomic_write(Path(path), "\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------- import


def _count(value: Any, file: Path, key: str) -> int | None:
    """A request count of a level (:func:`servedeck.bench.external.number`, whole).

    Raises:
        ServedeckError: naming ``file`` and ``key``: not a whole, finite, non-negative number."""
    v = number(value, file=file, key=key)
    if v is not None and not v.is_integer():
        raise ServedeckError(f"{key} is {value}, not a whole number of requests", file=str(file), field=key,
                             hint="fix that value, or write the file again with the tool")
    return None if v is None else int(v)


def _vllm_level(d: dict[str, Any], file: Path, where: str = "") -> ExternalLevel:
    """One ``vllm bench serve`` result as a level; ``where``: its place in ``file`` as the
    prefix of its keys in messages (``#2.``: the second result, as ``--benchmark #2`` names it).

    A rate level's label keeps its ``max_concurrency`` cap (``2 req/s @ c=4``). The failed
    count is the larger of ``failed`` and ``num_prompts - completed``.

    Raises:
        ServedeckError: naming ``file`` and the key: a statistic or count is not a number, not
            finite, or negative; or no request of the level succeeded (naming the level).
    """
    def val(key: str) -> float | None:
        return number(d.get(key), file=file, key=f"{where}{key}")

    def ms(key: str) -> float | None:
        v = val(key)
        return None if v is None else v / 1000.0

    rate = d.get("request_rate")
    conc = _count(d.get("max_concurrency"), file, f"{where}max_concurrency")
    if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
        kind, value = ("concurrency", float(conc)) if conc else ("throughput", None)
    else:
        kind = "poisson" if (d.get("burstiness") or 1.0) == 1.0 else "gamma"
        value = val("request_rate")
    completed = _count(d.get("completed"), file, f"{where}completed")
    failed = _count(d.get("failed"), file, f"{where}failed")
    prompts = _count(d.get("num_prompts"), file, f"{where}num_prompts")
    if completed is not None and prompts is not None and prompts - completed > (failed or 0):
        failed = prompts - completed  # the larger failure count the file's own counts tell
    params = {k: d[k] for k in ("max_concurrency", "request_rate", "burstiness", "num_prompts", "run_number",
                                "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps") if k in d}
    if kind == "concurrency" and value is not None:
        label = f"c={int(value)}"
    elif value:
        label = f"{value:g} req/s" + (f" @ c={conc}" if conc else "")
    else:
        label = kind
    if completed == 0:
        raise ServedeckError(f"level {label}{f' (result {where[:-1]})' if where else ''} has no successful request: "
                             f"{failed if failed is not None else 'all'} requests failed, nothing was measured",
                             file=str(file), field=f"{where}completed",
                             hint="remove that result from the input (or benchmark it again), then import the curve")
    ttft = {"median": ms("median_ttft_ms"), "p99": ms("p99_ttft_ms")}
    if ttft["median"] == 0:
        raise ServedeckError(f"level {label}: median_ttft_ms is 0 although requests succeeded (abnormal median TTFT "
                             "0.00, vllm-project/vllm issue 5895)", file=str(file), field=f"{where}median_ttft_ms",
                             hint="benchmark that level again; check that the requests got answers")
    return ExternalLevel(
        label=label, kind=kind, value=value, requests=prompts, completed=completed, failed=failed,
        request_rps=val("request_throughput"), output_tok_s=val("output_throughput"),
        goodput_rps=val("request_goodput"), ttft_s=ttft,
        tpot_s={"median": ms("median_tpot_ms"), "p99": ms("p99_tpot_ms")},
        e2e_s={"median": ms("median_e2el_ms"), "p99": ms("p99_e2el_ms")}, parameters=params)


def _level_notes(levels: list[ExternalLevel]) -> list[str]:
    """One sentence per level in which requests failed (or whose counts are unknown), and
    distinct labels: a label two levels share gets ``#N`` (the level's place) appended."""
    seen: dict[str, int] = {}
    for lv in levels:
        seen[lv.label] = seen.get(lv.label, 0) + 1
    for i, lv in enumerate(levels, start=1):
        if seen[lv.label] > 1:
            lv.label = f"{lv.label} #{i}"
    notes = []
    for lv in levels:
        if lv.failed:
            of = f" of {lv.requests}" if lv.requests is not None else ""
            ok = f" {lv.completed}" if lv.completed is not None else ""
            notes.append(f"level {lv.label}: {lv.failed}{of} requests failed: its statistics cover the{ok} "
                         "successful requests only; the level is partial")
        elif lv.completed is None:
            notes.append(f"level {lv.label}: the input does not say how many requests succeeded or failed")
    return notes


def _sort(levels: list[ExternalLevel]) -> list[ExternalLevel]:
    return sorted(levels, key=lambda lv: (lv.kind, lv.value if lv.value is not None else math.inf,
                                          lv.parameters.get("run_number", 0)))


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ServedeckError(f"the {what} is not UTF-8 text (byte {exc.start})", file=str(path),
                             hint="JSON is UTF-8: write the file again with the tool, or remove it from the "
                                  "directory") from None
    except OSError as exc:
        raise ServedeckError(f"cannot read the {what}: {exc.strerror}", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ServedeckError(f"not valid JSON ({exc.msg}, line {exc.lineno})", file=str(path)) from None


_SERVE_PART = re.compile(r"^SERVE-(?P<serve>.*?)(?:-BENCH-.*)?$")


def import_vllm_sweep(path: str | Path, *, serve: str | None = None) -> ExternalCurve:
    """Read a ``vllm bench sweep serve`` experiment directory (module docstring).

    Args:
        serve: the server combination to take (the ``SERVE-<name>`` part of its directories)
            when the sweep varied server settings.

    Raises:
        ServedeckError: not a directory of sweep results, several server combinations and no
            (or an unknown) ``serve``, a result file is not UTF-8 JSON, or a level is refused
            (:func:`_vllm_level`: a wrongly typed or impossible value, no successful request).
    """
    root = Path(path)
    files = sorted(root.glob("*/run=*.json"))
    if not root.is_dir() or not files:
        raise ServedeckError("not a `vllm bench sweep serve` output directory (no */run=N.json files)",
                             file=str(root), hint="give the experiment directory the sweep wrote")
    by_serve: dict[str, list[Path]] = {}
    for f in files:
        m = _SERVE_PART.match(f.parent.name)
        by_serve.setdefault(m["serve"] if m else "", []).append(f)
    if len(by_serve) > 1 and serve is None:
        raise ServedeckError(f"the sweep holds {len(by_serve)} server settings: {', '.join(sorted(by_serve))}",
                             file=str(root), hint="a run record holds one server: choose one with --serve NAME")
    key = serve if serve is not None else next(iter(by_serve))
    if key not in by_serve:
        raise ServedeckError(f"no server setting {key!r} in the sweep", file=str(root),
                             hint=f"choose one of {', '.join(sorted(by_serve))}")
    levels = []
    for f in by_serve[key]:
        d = _read_json(f, "sweep result")
        if not isinstance(d, dict) or "median_ttft_ms" not in d:
            raise ServedeckError("not a `vllm bench serve` result (no median_ttft_ms)", file=str(f))
        levels.append(_vllm_level(d, f))
    notes = [f"{sum(lv.failed or 0 for lv in levels)} requests failed across the sweep; statistics cover the "
             "successful ones"] if any(lv.failed for lv in levels) else []
    levels = _sort(levels)
    notes += _level_notes(levels)
    return ExternalCurve(source="vllm-bench-sweep", path=str(root), server={"name": key} if key else {},
                         levels=levels, notes=notes)


def _guidellm_level(bench: Any, index: int, file: Path) -> ExternalLevel:
    """``benchmarks[index]`` of a GuideLLM report as a level.

    Raises:
        ServedeckError: naming ``file`` and the key: the benchmark or its ``metrics`` is not an
            object, a statistic or count is wrongly typed, not finite or negative, the benchmark
            has no TTFT, inter-token or latency statistics, or none of its requests succeeded.
    """
    where = f"benchmarks[{index}]"
    if not isinstance(bench, dict):
        raise ServedeckError(f"{where} is {type(bench).__name__} {str(bench)[:40]!r}, not a benchmark object",
                             file=str(file), field=where, hint="give the JSON report guidellm wrote")
    entry = guidellm_entry(index + 1, bench, file)  # the strategy as the single-benchmark import reads it
    kind = entry.strategy
    value = entry.rate_rps if kind in ("constant", "poisson") else entry.concurrency
    m = bench.get("metrics")
    if m is None:
        m = {}
    if not isinstance(m, dict):
        raise ServedeckError(f"{where}.metrics is {type(m).__name__}, not an object of statistics", file=str(file),
                             field=f"{where}.metrics", hint="give the JSON report guidellm wrote")

    def succ(name: str, key: str, scale: float = 1.0) -> float | None:
        stat = m.get(name)
        s = stat.get("successful") if isinstance(stat, dict) else None
        if stat is not None and not isinstance(stat, dict) or s is not None and not isinstance(s, dict):
            raise ServedeckError(f"{where}.metrics.{name} is not an object of statistics", file=str(file),
                                 field=f"{where}.metrics.{name}", hint="give the JSON report guidellm wrote")
        st: dict[str, Any] = s or {}
        pct: dict[str, Any] = st["percentiles"] if isinstance(st.get("percentiles"), dict) else {}
        v = st.get(key) if key in ("median", "mean") else pct.get(key)
        at = f"{where}.metrics.{name}.successful.{key if key in ('median', 'mean') else 'percentiles.' + key}"
        n = number(v, file=file, key=at)
        return None if n is None else n * scale
    totals = m.get("request_totals") or bench.get("request_totals") or {}
    tot_at = f"{where}.metrics.request_totals" if m.get("request_totals") else f"{where}.request_totals"
    if not isinstance(totals, dict):
        raise ServedeckError(f"{tot_at} is not an object of counts", file=str(file), field=tot_at,
                             hint="give the JSON report guidellm wrote")
    total, ok, errored = (_count(totals.get(k), file, f"{tot_at}.{k}") for k in ("total", "successful", "errored"))
    kind_name = {"concurrent": "concurrency", "synchronous": "concurrency"}.get(kind, kind)
    label = (f"c={int(value)}" if kind_name == "concurrency" and value else
             f"{kind} {value:g} req/s" + (f" @ c={entry.concurrency}" if entry.concurrency else "")
             if value and kind in ("constant", "poisson") else f"{kind} #{index}")
    if ok == 0:
        raise ServedeckError(f"level {label} ({where}) has no successful request: "
                             f"{errored if errored is not None else 'all'} requests failed, nothing was measured",
                             file=str(file), field=f"{tot_at}.successful",
                             hint="benchmark that load again, or import the report's other benchmarks one by one "
                                  "with --import-file --benchmark")
    ttft = {"median": succ("time_to_first_token_ms", "median", 1e-3),
            "p99": succ("time_to_first_token_ms", "p99", 1e-3)}
    tpot = {"median": succ("time_per_output_token_ms", "median", 1e-3),
            "p99": succ("time_per_output_token_ms", "p99", 1e-3)}
    e2e = {"median": succ("request_latency", "median"), "p99": succ("request_latency", "p99")}
    itl = succ("inter_token_latency_ms", "median")
    if all(v is None for v in (*ttft.values(), *tpot.values(), *e2e.values(), itl)):
        raise ServedeckError(f"level {label} ({where}) has no TTFT, inter-token or latency statistics: there is no "
                             "measurement in it", file=str(file), field=f"{where}.metrics",
                             hint="give the full JSON report guidellm wrote")
    if ttft["median"] == 0:
        raise ServedeckError(f"level {label}: the TTFT median is 0 although requests succeeded", file=str(file),
                             field=f"{where}.metrics.time_to_first_token_ms.successful.median",
                             hint="benchmark that load again; check that the requests got answers")
    return ExternalLevel(
        label=label, kind=kind_name, value=float(value) if value else None, requests=total,
        completed=ok, failed=errored,
        request_rps=succ("requests_per_second", "mean"), output_tok_s=succ("output_tokens_per_second", "mean"),
        ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, parameters={"strategy": guidellm_strategy(bench)})


def import_curve(path: str | Path, *, serve: str | None = None) -> ExternalCurve:
    """Read an external load curve of any supported kind (module docstring): a sweep directory,
    a GuideLLM report, or a ``vllm bench serve`` file of one or more (appended) results.

    Every level in which requests failed gets a note (``level c=4: 2 of 10 requests failed
    ...``); levels that would share a label get their place appended (``c=4 #2``).

    Raises:
        ServedeckError: unreadable or unknown input, or a level refused (no successful request,
            no statistics, a wrongly typed, non-finite or negative value; the message names the
            level and the key).
    """
    p = Path(path)
    if p.is_dir():
        return import_vllm_sweep(p, serve=serve)
    docs = load_documents(p, "benchmark")  # one JSON document, or one per line (--append-result)
    if len(docs) == 1 and isinstance(docs[0], dict) and isinstance(docs[0].get("benchmarks"), list):
        benches = docs[0]["benchmarks"]
        if not benches:
            raise ServedeckError("the GuideLLM report holds no benchmark", file=str(p))
        levels = [_guidellm_level(b, i, p) for i, b in enumerate(benches)]
        return ExternalCurve(source="guidellm", path=str(p), levels=levels, notes=_level_notes(levels))
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]  # a sweep's summary.json: the list of its results
    if not docs or not all(isinstance(d, dict) and "median_ttft_ms" in d for d in docs):
        raise ServedeckError("not a GuideLLM report, a sweep directory or `vllm bench serve` results",
                             file=str(p), hint="give a sweep's experiment directory, a guidellm JSON report, or a "
                                               "vllm bench serve --save-result/--append-result file")
    many = len(docs) > 1
    levels = _sort([_vllm_level(d, p, f"#{i}." if many else "") for i, d in enumerate(docs, start=1)])
    return ExternalCurve(source="vllm-bench-serve", path=str(p), levels=levels, notes=_level_notes(levels))
