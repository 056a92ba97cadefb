"""Benchmark result files written by other tools, mapped onto servedeck's metric names.

Formats:

* ``vllm bench serve --save-result [--save-detailed] [--append-result]`` JSON: vLLM
  ``vllm/benchmarks/serve.py`` (0.10.2-0.33). The summary keys (``completed``, ``failed``,
  ``median_ttft_ms``, ``mean_tpot_ms``, ...) are vLLM's own statistics over the *successful*
  requests. With ``--save-detailed`` the per-request arrays (``input_lens``, ``output_lens``,
  ``ttfts``, ``itls``, ``latencies``, ``errors``, ``generated_texts``) hold *every* request in
  send order; a failed request has an ``errors`` item (its text may be empty), ``ttft`` 0.0 and 0 output
  tokens (``RequestFuncOutput`` defaults in ``vllm/benchmarks/lib/endpoint_request_func.py``).
  Files before vLLM's ``failed`` key (added with vllm-project/vllm PR #26478) give the failed
  count as ``num_prompts - completed``.
* guidellm JSON report: guidellm (``src/guidellm/benchmark/``; 0.3 to main 2026-08, PyPI 0.8.1)
  ``{"benchmarks": [{"request_totals": {...}, "metrics": {name: {"successful": {mean, median,
  min, max, count, ...}, "errored": {...}, "incomplete": {...}, "total": {...}}}}]}``;
  ``request_totals`` (``successful``, ``incomplete``, ``errored``, ``total``) sits on the
  benchmark in 0.3-0.4 and inside ``metrics`` later; servedeck reads the ``successful``
  statistics only.

Files holding several benchmarks. A guidellm report holds one benchmark per strategy it ran (a
``--profile sweep`` runs synchronous, throughput, then constant-rate benchmarks; guidellm
``src/guidellm/scheduler/strategies.py`` names each ``synchronous``, ``concurrent@N``,
``throughput@N``, ``constant@R``, ``poisson@R``); a ``vllm bench serve --append-result`` file
holds one JSON object per line, one per run (``vllm/benchmarks/serve.py`` appends a newline
and the next result, each with its ``request_rate``, ``max_concurrency``, ``burstiness`` and
optional ``label``). They measure different loads: :func:`list_benchmarks` lists them
(:class:`BenchEntry`), :func:`choose` takes the one the user names and refuses otherwise; a
file of one benchmark needs no name. The result says which one it holds and how many the file
had.

Failed requests. Every per-request statistic is computed over the successful requests only.
The result says how many requests were sent, completed, failed (and, for guidellm,
incomplete); ``partial`` is True when any request did not succeed, and ``notes`` says so in
words ("4 of 10 requests failed ..."). A file in which no request succeeded is refused: there
is no measurement in it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.runs.records import BenchEntry, ExternalBench, RequestCounts

__all__ = ["BenchEntry", "ExternalBench", "RequestCounts", "choose", "import_file", "import_guidellm",
           "import_vllm_bench", "list_benchmarks"]


# The mapped result is run-file content (``external-STEM.json``): its models live with the run
# store (servedeck.runs.records: ExternalBench, RequestCounts, BenchEntry), imported here under
# their names.


def load_documents(path: str | Path, what: str) -> list[Any]:
    """The JSON documents of a result file: one, or, for ``vllm bench serve --append-result``,
    one per non-empty line (in file order).

    Raises:
        ServedeckError: unreadable, or neither JSON nor JSON lines (names the line).
    """
    from servedeck.fsutil import read_bounded
    from servedeck.jsonio import JSON_LIMITS, JsonRefused, parse
    try:  # JSON is UTF-8 (RFC 8259); a BOM some editors add is dropped
        text = read_bounded(path, JSON_LIMITS.max_bytes, what=f"{what} result")
    except FileNotFoundError as e:
        raise ServedeckError(f"cannot read {what} result: file not found", file=str(path)) from e
    try:
        return [parse(text)]
    except JsonRefused as first:
        if first.line is None:  # a bound, not a syntax error: no second reading
            raise ServedeckError(f"{what} result refused: {first.message}", file=str(path)) from None
    docs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            docs.append(parse(line))
        except JsonRefused as e:
            raise ServedeckError(f"not a JSON {what} result (line {number}: {e.message})", file=str(path),
                                 hint="a --append-result file holds one JSON object per line") from None
    if not docs:
        raise ServedeckError(f"not a JSON {what} result (empty)", file=str(path))
    return docs


def _load_json(path: str | Path, what: str) -> Any:
    """The one JSON document of a result file (see :func:`load_documents`).

    Raises:
        ServedeckError: unreadable, not JSON, or several documents (a caller that takes one
            must choose: :func:`choose`)."""
    docs = load_documents(path, what)
    if len(docs) > 1:
        raise ServedeckError(f"{len(docs)} results in this file (one per line): choose one", file=str(path))
    return docs[0]


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def guidellm_strategy(bench: Any) -> dict[str, Any]:
    """A guidellm benchmark's strategy as the report holds it (``config.strategy`` since 0.5,
    ``args.strategy`` before); {} when it has none."""
    if isinstance(bench, dict):
        for holder in (bench.get("config"), bench.get("args"), bench):
            if isinstance(holder, dict) and isinstance(holder.get("strategy"), dict):
                return holder["strategy"]
    return {}


def guidellm_entry(index: int, bench: Any) -> BenchEntry:
    """A guidellm benchmark's strategy (:func:`guidellm_strategy`) as a :class:`BenchEntry`,
    labelled as guidellm prints it."""
    strategy = guidellm_strategy(bench)
    kind = str(strategy.get("type_") or strategy.get("type") or "unknown")
    rate = _num(strategy.get("rate"))
    streams = strategy.get("streams") if kind == "concurrent" else strategy.get("max_concurrency")
    concurrency = int(streams) if isinstance(streams, int) and not isinstance(streams, bool) else None
    if kind == "synchronous":
        label, concurrency = "synchronous", 1
    elif kind == "concurrent":
        label = f"concurrent@{concurrency}"
    elif kind == "throughput":
        label = f"throughput@{concurrency or 'unlimited'}"
    elif kind in ("constant", "poisson") and rate is not None:
        label = f"{kind}@{rate:.2f}"
    elif kind == "trace":
        label = f"trace@{_num(strategy.get('time_scale')) or 1.0:.2f}"
    else:
        label = kind
    metrics = bench.get("metrics") if isinstance(bench, dict) else None
    counts = _guidellm_counts(bench, metrics) if isinstance(metrics, dict) else RequestCounts()
    return BenchEntry(index=index, label=label, strategy=kind, rate_rps=rate, concurrency=concurrency,
                      requests=counts.total)


def _vllm_entry(index: int, doc: Any) -> BenchEntry:
    """A ``vllm bench serve`` result's load (``request_rate``, ``max_concurrency``, ``label``)
    as a :class:`BenchEntry`."""
    doc = doc if isinstance(doc, dict) else {}
    rate = _num(doc.get("request_rate"))
    rate = None if rate is None or rate == float("inf") else rate
    conc = doc.get("max_concurrency")
    conc = int(conc) if isinstance(conc, int) and not isinstance(conc, bool) else None
    if rate is not None:
        strategy, label = "rate", f"rate@{rate:.2f}" + (f",concurrency@{conc}" if conc else "")
    elif conc is not None:
        strategy, label = "concurrency", f"concurrency@{conc}"
    else:
        strategy, label = "burst", "rate@inf"
    if doc.get("ramp_up_strategy"):
        label += f",ramp-up@{doc['ramp_up_strategy']}"
    name = doc.get("label") if isinstance(doc.get("label"), str) and doc.get("label") else None
    return BenchEntry(index=index, label=label, strategy=strategy, rate_rps=rate, concurrency=conc, name=name,
                      requests=_int(doc.get("num_prompts")))


def _is_guidellm(docs: list[Any]) -> bool:
    return len(docs) == 1 and isinstance(docs[0], dict) and "benchmarks" in docs[0]


def list_benchmarks(path: str | Path) -> list[BenchEntry]:
    """What a result file holds: one :class:`BenchEntry` per benchmark, in file order.

    Raises:
        ServedeckError: unreadable, or not a result file servedeck reads.
    """
    docs = load_documents(path, "benchmark")
    if _is_guidellm(docs):
        return _guidellm_entries(docs[0], path)
    return [_vllm_entry(i, d) for i, d in enumerate(docs, start=1)]


def _guidellm_entries(report: dict[str, Any], path: str | Path) -> list[BenchEntry]:
    benches = report.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise ServedeckError("the guidellm report holds no benchmark", file=str(path))
    return [guidellm_entry(i, b) for i, b in enumerate(benches, start=1)]


def choose(entries: list[BenchEntry], selector: str | None, *, path: str | Path = "") -> BenchEntry:
    """The benchmark of ``entries`` (:func:`list_benchmarks`) that ``selector`` names.

    ``selector``: a label as listed (``constant@1.55``, ``concurrency@8``; any case), its
    position (``3`` or ``#3``), the tool's own label (``vllm bench serve --label``), a strategy
    that only one benchmark has (``synchronous``, ``throughput``), or a strategy with a value
    (``constant@1.5500`` matches ``constant@1.55``). None: the only benchmark of a file of one.

    Raises:
        ServedeckError: several benchmarks and no selector (never silently the first), or a
            selector that names none or several; the message lists what the file holds.
    """
    listing = ", ".join(e.label for e in entries)
    hint = ("name one: --benchmark LABEL (" + "; ".join(e.describe() for e in entries) + "), "
            "or its position: --benchmark N")
    where = str(path) if path else None
    if selector is None or not str(selector).strip():
        if len(entries) == 1:
            return entries[0]
        raise ServedeckError(f"{len(entries)} benchmarks in this file ({listing}): they measure different "
                             f"loads; choose one", file=where,
                             hint=hint + "; or store them all as one load curve: --import-curve FILE")
    want = str(selector).strip()
    low = want.lower()
    found = [e for e in entries if e.label.lower() == low] or \
        [e for e in entries if want.lstrip("#").isdigit() and e.index == int(want.lstrip("#"))] or \
        [e for e in entries if e.name is not None and e.name == want] or \
        [e for e in entries if e.strategy.lower() == low] or _by_value(entries, low)
    if len(found) == 1:
        return found[0]
    if found:
        raise ServedeckError(f"--benchmark {want!r} names {len(found)} benchmarks of this file "
                             f"({', '.join(e.label for e in found)})", file=where, hint=hint)
    raise ServedeckError(f"--benchmark {want!r} names none of the {len(entries)} benchmarks in this file "
                         f"({listing})", file=where, hint=hint)


def _by_value(entries: list[BenchEntry], low: str) -> list[BenchEntry]:
    """``constant@1.5500`` / ``concurrent@4`` / ``rate@2``: a strategy and its rate or
    concurrency, compared as numbers (labels print rates to 2 decimals)."""
    kind, at, value = low.partition("@")
    number = _num(value) if at else None
    if number is None:
        return []
    out = []
    for e in entries:
        if kind not in (e.strategy.lower(), e.label.lower().split("@", 1)[0]):
            continue
        if e.rate_rps is not None and abs(e.rate_rps - number) < 0.005 or e.concurrency == number:
            out.append(e)
    return out


def _ext_stats(vals: list[float]) -> dict[str, float | int | None]:
    vals = [float(v) for v in vals]
    if not vals:
        return {"median": None, "mean": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "mean": statistics.fmean(vals), "min": min(vals),
            "max": max(vals), "n": len(vals)}


def _int(value: Any) -> int | None:
    return None if value is None or isinstance(value, bool) else int(value)


def _failure_note(counts: RequestCounts, reasons: list[dict[str, Any]], *, what: str) -> str:
    not_ok = (counts.failed or 0) + (counts.incomplete or 0)
    of = f" of {counts.total}" if counts.total is not None else ""
    parts = []
    if counts.failed:
        parts.append(f"{counts.failed}{of} requests failed")
    if counts.incomplete:
        parts.append(f"{counts.incomplete}{of} did not complete")
    text = " and ".join(parts)
    if reasons:
        text += " (" + "; ".join(f"{r['count']}x {r['text']}" for r in reasons[:3]) + ")"
    if counts.completed is not None:
        ok = str(counts.completed)
    elif counts.total is not None:
        ok = str(counts.total - not_ok)
    else:
        return f"{text}: {what} cover the successful requests only; the run is partial"
    return f"{text}: {what} cover the {ok} successful requests only; the run is partial"


def _unanswered(arrays: dict[str, list], i: int) -> bool:
    """Whether request ``i`` of a ``--save-detailed`` file got no first token and no output
    (``ttfts`` 0.0 and ``output_lens`` 0: a failed request's ``RequestFuncOutput`` defaults,
    whatever its error text; a successful request always has a positive TTFT)."""
    ttfts, outs = arrays.get("ttfts"), arrays.get("output_lens")
    if ttfts is None or i >= len(ttfts) or ttfts[i]:
        return False
    return outs is None or (i < len(outs) and not outs[i])


def _refuse_all_failed(path: str | Path, counts: RequestCounts, reasons: list[dict[str, Any]]) -> None:
    first = f": {reasons[0]['text']}" if reasons else ""
    raise ServedeckError(
        f"no request succeeded: all {counts.total} requests failed{first}", file=str(path),
        hint="nothing was measured; fix the cause and benchmark again")


def import_vllm_bench(path: str | Path, *, benchmark: str | None = None) -> ExternalBench:
    """Map a ``vllm bench serve --save-result`` JSON file onto servedeck's metric names.

    Format: see the module docstring. An ``--append-result`` file of several results needs
    ``benchmark`` (:func:`choose`); the result says which one it is.

    Mapping: ``ttft_s`` median/mean from ``*_ttft_ms``/1000 (vLLM's own, over successes);
    ``decode_tok_s`` median = 1000 / ``median_tpot_ms`` (mean from ``mean_tpot_ms``; min/max
    None: vLLM reports no per-request TPOT extremes); ``e2e_s`` from ``*_e2el_ms`` when present.
    With ``--save-detailed`` arrays: ``ttft_s`` min/max, ``e2e_s`` min/max, ``prefill_tok_s``
    (input_len / ttft), ``prompt_tokens`` and ``output_tokens`` over the successful requests
    (``errors`` item empty); when the arrays cannot be matched to outcomes (no ``errors``
    array while requests failed, or arrays of different lengths) they are not used and a note
    says so.

    Raises:
        ServedeckError: the file is missing, not JSON, lacks ``median_ttft_ms``, holds several
            results and ``benchmark`` names none of them, or no request succeeded.
    """
    docs = load_documents(path, "vllm bench serve")
    entries = [_vllm_entry(i, doc) for i, doc in enumerate(docs, start=1)]
    entry = choose(entries, benchmark, path=path)
    d = docs[entry.index - 1]
    if not isinstance(d, dict) or "median_ttft_ms" not in d:
        raise ServedeckError("not a `vllm bench serve --save-result` file (no median_ttft_ms)", file=str(path))

    notes: list[str] = []
    errors = d.get("errors")
    arrays = {k: d.get(k) for k in ("ttfts", "input_lens", "output_lens", "latencies")}
    present = {k: v for k, v in arrays.items() if isinstance(v, list) and v}
    ok_mask: list[bool] | None = None
    reasons: list[dict[str, Any]] = []
    unmatched = False
    if isinstance(errors, list) and errors:
        ok_mask = [not e and not _unanswered(present, i) for i, e in enumerate(errors)]
        reasons = [{"text": str(t), "count": c} for t, c in Counter(str(e) for e in errors if e).most_common()]
    completed, failed, num_prompts = _int(d.get("completed")), _int(d.get("failed")), _int(d.get("num_prompts"))
    if ok_mask is not None and failed is not None and failed > ok_mask.count(False) \
            and (completed is None or completed + failed == len(ok_mask)):
        # more failures than items marked failed: a failure with an empty error text (vLLM's
        # request functions write `response.reason or ""`) that answered something
        notes.append(f"the file says {failed} requests failed but only {ok_mask.count(False)} of its "
                     "per-request items show a failure (error text, or no first token and no output): "
                     "servedeck follows the file's counts and takes no per-request minima and maxima")
        completed = len(ok_mask) - failed if completed is None else completed
        ok_mask, unmatched = None, True
    if ok_mask is not None:
        if completed is not None and completed != sum(ok_mask):
            notes.append(f"the file says {completed} requests completed, its errors array {sum(ok_mask)}: "
                         "servedeck follows the errors array")
        completed, failed = sum(ok_mask), len(ok_mask) - sum(ok_mask)
    elif failed is None and completed is not None and num_prompts is not None:
        failed = max(num_prompts - completed, 0)
    total = completed + failed if completed is not None and failed is not None else num_prompts
    counts = RequestCounts(total=total, completed=completed, failed=failed)
    if completed == 0:
        _refuse_all_failed(path, counts, reasons)

    usable = bool(present) and not unmatched
    lengths = {len(v) for v in present.values()}
    if usable and (len(lengths) != 1 or (ok_mask is not None and lengths != {len(ok_mask)})):
        usable = False
        notes.append("the per-request arrays have different lengths: per-request minima and maxima "
                     "are not taken from them")
    if usable and ok_mask is None and failed:
        usable = False
        notes.append(f"{failed} requests failed but the file has no per-request errors array: "
                     "per-request minima and maxima are not taken from the arrays")
    if usable and ok_mask is None:
        ok_mask = [True] * lengths.pop()

    def ok(key: str) -> list[float] | None:
        values = present.get(key) if usable else None
        return None if values is None else [float(v) for v, good in zip(values, ok_mask or []) if good]

    def ms(key: str) -> float | None:
        v = d.get(key)
        return None if v is None else float(v) / 1000.0

    def inv(key: str) -> float | None:
        v = d.get(key)
        return None if not v else 1000.0 / float(v)

    n = completed if completed is not None else int(num_prompts or 0)
    def summary(median: float | None, mean: float | None) -> dict[str, float | int | None]:
        return {"median": median, "mean": mean, "min": None, "max": None, "n": n}

    metrics: dict[str, dict[str, float | int | None]] = {
        "ttft_s": summary(ms("median_ttft_ms"), ms("mean_ttft_ms")),
        "decode_tok_s": summary(inv("median_tpot_ms"), inv("mean_tpot_ms")),
    }
    if "median_e2el_ms" in d:
        metrics["e2e_s"] = summary(ms("median_e2el_ms"), ms("mean_e2el_ms"))
    ttfts, ins, outs, lats = ok("ttfts"), ok("input_lens"), ok("output_lens"), ok("latencies")
    if ttfts:
        metrics["ttft_s"].update(min=min(ttfts), max=max(ttfts))
    if lats and "e2e_s" in metrics:
        metrics["e2e_s"].update(min=min(lats), max=max(lats))
    if ttfts and ins:
        metrics["prefill_tok_s"] = _ext_stats([i / t for i, t in zip(ins, ttfts) if t])
        metrics["prompt_tokens"] = _ext_stats(ins)
    if outs:
        metrics["output_tokens"] = _ext_stats(outs)
    server: dict[str, Any] = {}
    if d.get("spec_decode_acceptance_length") is not None:
        server = {
            "spec_accept_len": d.get("spec_decode_acceptance_length"),
            "spec_per_position": list(d.get("spec_decode_per_position_acceptance_rates") or []),
            "spec_drafts": d.get("spec_decode_num_drafts"),
            "spec_accepted_tokens": d.get("spec_decode_accepted_tokens"),
            "spec_draft_tokens": d.get("spec_decode_draft_tokens"),
        }
    partial = bool(failed)
    if partial:
        notes.insert(0, _failure_note(counts, reasons, what="all statistics"))
    _note_choice(notes, entry, len(entries))
    return ExternalBench(source="vllm-bench-serve", path=str(path), metrics=metrics, server=server,
                         raw_keys=sorted(d), requests=counts, partial=partial,
                         failure_reasons=reasons, notes=notes, benchmark=entry, benchmarks_in_file=len(entries))


def _note_choice(notes: list[str], entry: BenchEntry, count: int) -> None:
    if count > 1:
        notes.append(f"benchmark {entry.describe()} of the {count} in this file: the others measure "
                     "other loads and are not part of this result")


def import_guidellm(path: str | Path, *, benchmark: str | None = None) -> ExternalBench:
    """Map one benchmark of a guidellm JSON report onto servedeck's metric names: the only one,
    or the one ``benchmark`` names (:func:`choose`; a report of several needs it).

    Format: see the module docstring. Mapping (successful requests): ``ttft_s`` =
    ``time_to_first_token_ms``/1000; ``decode_tok_s`` = 1000 / ``inter_token_latency_ms``
    (guidellm's ITL = (last - first)/(output_tokens - 1), the figure vLLM bench calls TPOT;
    min/max swap accordingly); ``e2e_s`` = ``request_latency`` (seconds). No spec-decode
    fields exist in guidellm reports. Request counts from ``request_totals``, else from the
    per-status ``count`` of ``request_latency``.

    Raises:
        ServedeckError: unreadable file, several benchmarks and ``benchmark`` names none of
            them, the chosen one has no metrics, or no request succeeded.
    """
    d = _load_json(path, "guidellm")
    if not isinstance(d, dict):
        raise ServedeckError("not a guidellm report (no benchmarks)", file=str(path))
    entries = _guidellm_entries(d, path)
    entry = choose(entries, benchmark, path=path)
    try:
        bench = d["benchmarks"][entry.index - 1]
        m = bench["metrics"]
    except (KeyError, IndexError, TypeError) as e:
        raise ServedeckError(f"benchmark {entry.describe()} of the guidellm report has no metrics",
                             file=str(path)) from e

    def succ(name: str) -> dict[str, Any] | None:
        v = m.get(name)
        return v.get("successful") if isinstance(v, dict) else None

    def scaled(name: str, f: float) -> dict[str, float | int | None] | None:
        s = succ(name)
        if not s:
            return None
        g = lambda k: None if s.get(k) is None else float(s[k]) * f  # noqa: E731
        return {"median": g("median"), "mean": g("mean"), "min": g("min"), "max": g("max"),
                "n": int(s.get("count") or 0)}

    counts = _guidellm_counts(bench, m)
    if counts.completed == 0:
        _refuse_all_failed(path, counts, [])
    metrics: dict[str, dict[str, float | int | None]] = {}
    if (t := scaled("time_to_first_token_ms", 1e-3)) is not None:
        metrics["ttft_s"] = t
    if (s := succ("inter_token_latency_ms")):
        inv = lambda k: (1000.0 / float(s[k])) if s.get(k) else None  # noqa: E731
        metrics["decode_tok_s"] = {"median": inv("median"), "mean": inv("mean"), "min": inv("max"),
                                   "max": inv("min"), "n": int(s.get("count") or 0)}
    if (t := scaled("request_latency", 1.0)) is not None:
        metrics["e2e_s"] = t
    partial = bool(counts.failed or counts.incomplete)
    notes = [_failure_note(counts, [], what="guidellm's successful statistics")] if partial else []
    _note_choice(notes, entry, len(entries))
    return ExternalBench(source="guidellm", path=str(path), metrics=metrics, server={}, raw_keys=sorted(m),
                         requests=counts, partial=partial, notes=notes, benchmark=entry,
                         benchmarks_in_file=len(entries))


def _guidellm_counts(bench: dict[str, Any], m: dict[str, Any]) -> RequestCounts:
    totals = bench.get("request_totals") or m.get("request_totals")
    if isinstance(totals, dict):
        ok, err, inc = (_int(totals.get(k)) for k in ("successful", "errored", "incomplete"))
        total = _int(totals.get("total"))
    else:
        lat = m.get("request_latency")
        if not isinstance(lat, dict):
            return RequestCounts()

        def count(status: str) -> int | None:
            part = lat.get(status)
            return _int(part.get("count")) if isinstance(part, dict) and part.get("count") is not None else None

        ok, err, inc = count("successful"), count("errored"), count("incomplete")
        total = None
    if total is None and ok is not None:
        total = ok + (err or 0) + (inc or 0)
    return RequestCounts(total=total, completed=ok, failed=err, incomplete=inc)


def import_file(path: str | Path, *, benchmark: str | None = None) -> ExternalBench:
    """Read an external benchmark file of any supported format (guidellm when the top-level
    object has ``benchmarks``, else ``vllm bench serve``): its only benchmark, or the one
    ``benchmark`` names (:func:`choose`).

    Raises:
        ServedeckError: as :func:`import_guidellm` / :func:`import_vllm_bench`.
    """
    if _is_guidellm(load_documents(path, "benchmark")):
        return import_guidellm(path, benchmark=benchmark)
    return import_vllm_bench(path, benchmark=benchmark)
