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

import math
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

    A file that is not one JSON document is read as JSON lines only when its first non-empty
    line is a JSON object on its own; otherwise the whole-file syntax error is reported at its
    line and column.

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
        if text.strip() and not _first_line_is_object(text):  # one pretty-printed document: its own error and place
            raise ServedeckError(f"not a JSON {what} result (line {first.line}: {first.message})",
                                 file=str(path), line=first.line,
                                 hint="fix the file there, or write it again with the tool") from None
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


def _first_line_is_object(text: str) -> bool:
    """Whether the first non-empty line of ``text`` is a JSON object by itself (the shape of a
    ``--append-result`` file)."""
    from servedeck.jsonio import JsonRefused, parse
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    try:
        return isinstance(parse(line), dict)
    except JsonRefused:
        return False


_FIX_HINT = "the tool writes a number there: fix that value, or write the file again with the tool"


def number(value: Any, *, file: str | Path, key: str, negative: bool = False) -> float | None:
    """A statistic of an imported file as a float (None when absent, i.e. null).

    Args:
        negative: whether a negative value is allowed (latencies, throughputs, counts: no).

    Raises:
        ServedeckError: naming ``file`` and ``key``: the value is not a number (a string, a
            list, true/false), not finite (NaN, Infinity), or negative when it may not be.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ServedeckError(f"{key} is {_shown(value)}, not a number", file=str(file), field=key, hint=_FIX_HINT)
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v):
        raise ServedeckError(f"{key} is {v}, not a finite number: no measurement gives it", file=str(file),
                             field=key, hint=_FIX_HINT)
    if v < 0 and not negative:
        raise ServedeckError(f"{key} is {value}: a latency, throughput or count is never negative",
                             file=str(file), field=key, hint=_FIX_HINT)
    return v


def _item(value: Any, file: str | Path, key: str) -> float:
    """One item of a per-request array (:func:`number`; null is refused too).

    Raises:
        ServedeckError: as :func:`number`, or the item is null."""
    v = number(value, file=file, key=key)
    if v is None:
        raise ServedeckError(f"{key} is null, not a number", file=str(file), field=key, hint=_FIX_HINT)
    return v


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


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


def guidellm_entry(index: int, bench: Any, path: str | Path = "") -> BenchEntry:
    """A guidellm benchmark's strategy (:func:`guidellm_strategy`) as a :class:`BenchEntry`,
    labelled as guidellm prints it.

    Raises:
        ServedeckError: a request count of the benchmark is not a whole number (names ``path``
            and ``benchmarks[index-1]...``)."""
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
    counts = _guidellm_counts(bench, metrics, path, f"benchmarks[{index - 1}]") if isinstance(metrics, dict) \
        else RequestCounts()
    return BenchEntry(index=index, label=label, strategy=kind, rate_rps=rate, concurrency=concurrency,
                      requests=counts.total)


def _vllm_entry(index: int, doc: Any, path: str | Path = "") -> BenchEntry:
    """A ``vllm bench serve`` result's load (``request_rate``, ``max_concurrency``, ``label``)
    as a :class:`BenchEntry`.

    Raises:
        ServedeckError: ``num_prompts`` is not a whole number (names ``path``)."""
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
                      requests=_int(doc.get("num_prompts"), file=path, key="num_prompts"))


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
    return [_vllm_entry(i, d, path) for i, d in enumerate(docs, start=1)]


def _guidellm_entries(report: dict[str, Any], path: str | Path) -> list[BenchEntry]:
    benches = report.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise ServedeckError("the guidellm report holds no benchmark", file=str(path))
    return [guidellm_entry(i, b, path) for i, b in enumerate(benches, start=1)]


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
    concurrency, compared as numbers (labels print rates to 2 decimals). A rate kind
    (``rate``, ``constant``, ``poisson``) compares only the rate, a concurrency kind
    (``concurrency``, ``concurrent``, ``throughput``) only the concurrency; no match: []."""
    kind, at, value = low.partition("@")
    number = _num(value) if at else None
    if number is None:
        return []
    out = []
    for e in entries:
        if kind not in (e.strategy.lower(), e.label.lower().split("@", 1)[0]):
            continue
        same_rate = e.rate_rps is not None and abs(e.rate_rps - number) < 0.005
        same_concurrency = e.concurrency is not None and e.concurrency == number
        if kind in _RATE_KINDS:  # rate@4 of `rate@1.00,concurrency@4` is not rate 4
            match = same_rate
        elif kind in _CONCURRENCY_KINDS:
            match = same_concurrency
        else:
            match = same_rate or same_concurrency
        if match:
            out.append(e)
    return out


#: selector kinds whose value is a request rate, and those whose value is a concurrency
_RATE_KINDS = frozenset({"rate", "constant", "poisson"})
_CONCURRENCY_KINDS = frozenset({"concurrency", "concurrent", "throughput", "synchronous"})


def _ext_stats(vals: list[float]) -> dict[str, float | int | None]:
    vals = [float(v) for v in vals]
    if not vals:
        return {"median": None, "mean": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "mean": statistics.fmean(vals), "min": min(vals),
            "max": max(vals), "n": len(vals)}


def _int(value: Any, *, file: str | Path = "", key: str = "count") -> int | None:
    """A request count of an imported file (None when absent).

    Raises:
        ServedeckError: naming ``file`` and ``key``: not a whole number (a string, a list,
            true/false, 9.5), not finite, or negative.
    """
    v = number(value, file=file, key=key)
    if v is None:
        return None
    if not v.is_integer():
        raise ServedeckError(f"{key} is {value}, not a whole number of requests", file=str(file), field=key,
                             hint=_FIX_HINT)
    return int(v)


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
    entries = [_vllm_entry(i, doc, path) for i, doc in enumerate(docs, start=1)]
    entry = choose(entries, benchmark, path=path)
    d = docs[entry.index - 1]
    if not isinstance(d, dict) or "median_ttft_ms" not in d:
        raise ServedeckError("not a `vllm bench serve --save-result` file (no median_ttft_ms)", file=str(path))

    notes: list[str] = []
    errors = d.get("errors")
    present: dict[str, list[float]] = {}
    for k in ("ttfts", "input_lens", "output_lens", "latencies"):
        v = d.get(k)
        if v is not None and not isinstance(v, list):
            raise ServedeckError(f"{k} is {_shown(v)}, not a list of per-request values", file=str(path), field=k,
                                 hint="--save-detailed writes one number per request there; fix the file or "
                                      "write it again")
        if v:
            present[k] = [_item(x, path, f"{k}[{i}]") for i, x in enumerate(v)]
    ok_mask: list[bool] | None = None
    reasons: list[dict[str, Any]] = []
    unmatched = False
    if isinstance(errors, list) and errors:
        ok_mask = [not e and not _unanswered(present, i) for i, e in enumerate(errors)]
        reasons = [{"text": str(t), "count": c} for t, c in Counter(str(e) for e in errors if e).most_common()]
    completed = _int(d.get("completed"), file=path, key="completed")
    failed = _int(d.get("failed"), file=path, key="failed")
    num_prompts = _int(d.get("num_prompts"), file=path, key="num_prompts")
    # the failures the file's own counts tell (the largest): `failed`, the prompts that did not
    # complete (with no `num_prompts`: the errors array's items beyond `completed`)
    sent = num_prompts if num_prompts is not None else len(ok_mask) if ok_mask is not None else None
    claims = [c for c in (failed, sent - completed if sent is not None and completed is not None else None)
              if c is not None and c >= 0]
    said_failed = max(claims) if claims else None
    if ok_mask is not None and said_failed is not None and said_failed > ok_mask.count(False):
        # more failures than items marked failed: a failure with an empty error text (vLLM's
        # request functions write `response.reason or ""`) that answered something, or an
        # array that does not match the counts
        notes.append(f"the file says {said_failed} requests failed but only {ok_mask.count(False)} of its "
                     "per-request items show a failure (error text, or no first token and no output): "
                     "servedeck follows the file's counts and takes no per-request minima and maxima")
        failed = said_failed
        completed = max(len(ok_mask) - failed, 0) if completed is None else completed
        ok_mask, unmatched = None, True
    if ok_mask is not None:
        if completed is not None and completed != sum(ok_mask):
            notes.append(f"the file says {completed} requests completed, its errors array {sum(ok_mask)}: "
                         "servedeck follows the errors array")
        completed, failed = sum(ok_mask), len(ok_mask) - sum(ok_mask)
    elif said_failed is not None and completed is not None:
        failed = said_failed
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
        return None if values is None else [v for v, good in zip(values, ok_mask or []) if good]

    def ms(key: str) -> float | None:
        v = number(d.get(key), file=path, key=key)
        return None if v is None else v / 1000.0

    def inv(key: str) -> float | None:
        v = number(d.get(key), file=path, key=key)
        return None if not v else 1000.0 / v

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
    _check_ttft(metrics, path, "median_ttft_ms", "mean_ttft_ms")
    _check_within(metrics, "ttft_s", path, "median_ttft_ms", "ttfts", 1000.0)
    _check_within(metrics, "e2e_s", path, "median_e2el_ms", "latencies", 1000.0)
    if ttfts and ins:
        metrics["prefill_tok_s"] = _ext_stats([i / t for i, t in zip(ins, ttfts) if t])
        metrics["prompt_tokens"] = _ext_stats(ins)
    if outs:
        metrics["output_tokens"] = _ext_stats(outs)
    server: dict[str, Any] = {}
    if d.get("spec_decode_acceptance_length") is not None:
        rates = d.get("spec_decode_per_position_acceptance_rates") or []
        if not isinstance(rates, list):
            raise ServedeckError(f"spec_decode_per_position_acceptance_rates is {_shown(rates)}, not a list",
                                 file=str(path), field="spec_decode_per_position_acceptance_rates", hint=_FIX_HINT)
        server = {
            "spec_accept_len": number(d.get("spec_decode_acceptance_length"), file=path,
                                      key="spec_decode_acceptance_length"),
            "spec_per_position": [number(r, file=path, key=f"spec_decode_per_position_acceptance_rates[{i}]")
                                  for i, r in enumerate(rates)],
            "spec_drafts": _int(d.get("spec_decode_num_drafts"), file=path, key="spec_decode_num_drafts"),
            "spec_accepted_tokens": _int(d.get("spec_decode_accepted_tokens"), file=path,
                                         key="spec_decode_accepted_tokens"),
            "spec_draft_tokens": _int(d.get("spec_decode_draft_tokens"), file=path, key="spec_decode_draft_tokens"),
        }
    partial = bool(failed)
    if partial:
        notes.insert(0, _failure_note(counts, reasons, what="all statistics"))
    _note_choice(notes, entry, len(entries))
    return ExternalBench(source="vllm-bench-serve", path=str(path), metrics=metrics, server=server,
                         raw_keys=sorted(d), requests=counts, partial=partial,
                         failure_reasons=reasons, notes=notes, benchmark=entry, benchmarks_in_file=len(entries))


def _check_ttft(metrics: dict[str, dict[str, float | int | None]], path: str | Path, *keys: str) -> None:
    """Refuse a zero TTFT median or mean of successful requests (``keys``: the file's own keys
    of ``metrics["ttft_s"]`` median and mean): a request that succeeded got its first token
    after some time; 0.00 is the figure of failed requests (vllm-project/vllm issue 5895).

    Raises:
        ServedeckError: naming the key."""
    ttft = metrics.get("ttft_s") or {}
    for stat, key in zip(("median", "mean"), keys):
        if ttft.get(stat) == 0:
            raise ServedeckError(f"{key} is 0 although requests succeeded: a successful request takes time to "
                                 "its first token, so this figure does not measure them (abnormal median TTFT "
                                 "0.00, vllm-project/vllm issue 5895)", file=str(path), field=key,
                                 hint="benchmark again; check that the requests got answers")


def _check_within(metrics: dict[str, dict[str, float | int | None]], name: str, path: str | Path,
                  key: str, range_key: str, scale: float) -> None:
    """Refuse a median of ``metrics[name]`` outside its own minimum and maximum when both are
    known (``key``: the file's key of the median, ``range_key`` where the extremes come from,
    ``scale``: file units per stored unit, for the message).

    Raises:
        ServedeckError: naming ``key``."""
    st = metrics.get(name) or {}
    med, lo, hi = st.get("median"), st.get("min"), st.get("max")
    if med is None or lo is None or hi is None:
        return
    slack = 1e-6 * max(abs(lo), abs(hi), 1e-9)
    if not lo - slack <= med <= hi + slack:
        raise ServedeckError(f"{key} is {med * scale:g}, outside the {range_key} of the successful requests "
                             f"({lo * scale:g} to {hi * scale:g}): the file contradicts itself",
                             file=str(path), field=key, hint="write the file again with the tool")


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
    where = f"benchmarks[{entry.index - 1}]"
    bench = d["benchmarks"][entry.index - 1]
    if not isinstance(bench, dict):
        raise ServedeckError(f"{where} is {_shown(bench)}, not a benchmark object", file=str(path), field=where,
                             hint="give the JSON report guidellm wrote (--output-path ...json)")
    m = bench.get("metrics")
    if not isinstance(m, dict):
        raise ServedeckError(f"benchmark {entry.describe()} of the guidellm report has no metrics"
                             + (f" ({where}.metrics is {_shown(m)}, not an object)" if m is not None else ""),
                             file=str(path), field=f"{where}.metrics",
                             hint="give the JSON report guidellm wrote (--output-path ...json)")
    metrics = guidellm_metrics(m, path, f"{where}.metrics")
    counts = _guidellm_counts(bench, m, path, where)
    if counts.completed == 0:
        _refuse_all_failed(path, counts, [])
    if not {"ttft_s", "decode_tok_s", "e2e_s"} & set(metrics):
        raise ServedeckError(f"benchmark {entry.describe()} of the guidellm report has no statistics of its "
                             "successful requests (no time_to_first_token_ms, inter_token_latency_ms or "
                             "request_latency): there is no measurement in it", file=str(path),
                             field=f"{where}.metrics", hint="give the full JSON report guidellm wrote")
    partial = bool(counts.failed or counts.incomplete)
    notes = [_failure_note(counts, [], what="guidellm's successful statistics")] if partial else []
    if counts.completed is None:
        notes.append("the report does not say how many requests succeeded or failed (no request_totals and "
                     "no request_latency counts): failures cannot be ruled out")
    _note_choice(notes, entry, len(entries))
    return ExternalBench(source="guidellm", path=str(path), metrics=metrics, server={}, raw_keys=sorted(m),
                         requests=counts, partial=partial, notes=notes, benchmark=entry,
                         benchmarks_in_file=len(entries))


def guidellm_metrics(m: dict[str, Any], path: str | Path, where: str) -> dict[str, dict[str, float | int | None]]:
    """The successful requests' statistics of a guidellm benchmark's ``metrics`` (``where``:
    its key path, ``benchmarks[0].metrics``) on servedeck's names (:func:`import_guidellm`).

    Raises:
        ServedeckError: naming ``path`` and the key: a statistic is not an object, not a
            number, not finite, negative, a TTFT median of 0, or a median outside its min and max.
    """
    def succ(name: str) -> dict[str, Any] | None:
        v = m.get(name)
        if v is None:
            return None
        if not isinstance(v, dict):
            raise ServedeckError(f"{where}.{name} is {_shown(v)}, not an object of statistics", file=str(path),
                                 field=f"{where}.{name}", hint=_FIX_HINT)
        s = v.get("successful")
        if s is not None and not isinstance(s, dict):
            raise ServedeckError(f"{where}.{name}.successful is {_shown(s)}, not an object of statistics",
                                 file=str(path), field=f"{where}.{name}.successful", hint=_FIX_HINT)
        return s or None

    def stats(name: str) -> dict[str, Any] | None:
        s = succ(name)
        if s is None:
            return None
        at = f"{where}.{name}.successful"
        out: dict[str, Any] = {k: number(s.get(k), file=path, key=f"{at}.{k}")
                               for k in ("median", "mean", "min", "max")}
        out["n"] = _int(s.get("count"), file=path, key=f"{at}.count") or 0
        return out

    metrics: dict[str, dict[str, float | int | None]] = {}
    if (t := stats("time_to_first_token_ms")) is not None:
        metrics["ttft_s"] = {k: (v * 1e-3 if v is not None and k != "n" else v) for k, v in t.items()}
        _check_ttft(metrics, path, f"{where}.time_to_first_token_ms.successful.median",
                    f"{where}.time_to_first_token_ms.successful.mean")
        _check_within(metrics, "ttft_s", path, f"{where}.time_to_first_token_ms.successful.median",
                      "time_to_first_token_ms min and max", 1000.0)
    if (t := stats("inter_token_latency_ms")) is not None:
        inv = lambda v: (1000.0 / v) if v else None  # noqa: E731
        metrics["decode_tok_s"] = {"median": inv(t["median"]), "mean": inv(t["mean"]), "min": inv(t["max"]),
                                   "max": inv(t["min"]), "n": t["n"]}
        _check_within(metrics, "decode_tok_s", path, f"{where}.inter_token_latency_ms.successful.median",
                      "inter_token_latency_ms min and max (as tokens/s)", 1.0)
    if (t := stats("request_latency")) is not None:
        metrics["e2e_s"] = t
        _check_within(metrics, "e2e_s", path, f"{where}.request_latency.successful.median",
                      "request_latency min and max", 1.0)
    return metrics


def _guidellm_counts(bench: dict[str, Any], m: dict[str, Any], path: str | Path = "",
                     where: str = "benchmarks[0]") -> RequestCounts:
    """A guidellm benchmark's request counts (``request_totals``, else the per-status
    ``count`` of ``request_latency``); unknown counts are None.

    Raises:
        ServedeckError: a count is not a whole number, naming ``path`` and the key under
            ``where`` (``benchmarks[0].metrics.request_totals.successful``).
    """
    if isinstance(bench.get("request_totals"), dict) and bench["request_totals"]:
        totals, at = bench["request_totals"], f"{where}.request_totals"
    else:
        totals, at = m.get("request_totals"), f"{where}.metrics.request_totals"
    if isinstance(totals, dict):
        ok, err, inc = (_int(totals.get(k), file=path, key=f"{at}.{k}")
                        for k in ("successful", "errored", "incomplete"))
        total = _int(totals.get("total"), file=path, key=f"{at}.total")
    else:
        lat = m.get("request_latency")
        if not isinstance(lat, dict):
            return RequestCounts()

        def count(status: str) -> int | None:
            part = lat.get(status)
            return _int(part.get("count"), file=path, key=f"{where}.metrics.request_latency.{status}.count") \
                if isinstance(part, dict) else None

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
