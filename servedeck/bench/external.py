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
from servedeck.runs.records import ExternalBench, RequestCounts

__all__ = ["ExternalBench", "RequestCounts", "import_vllm_bench", "import_guidellm", "import_file"]


# The mapped result is run-file content (``external-STEM.json``): its models live with the run
# store (servedeck.runs.records: ExternalBench, RequestCounts), imported here under their names.


def _load_json(path: str | Path, what: str) -> Any:
    from servedeck.fsutil import read_bounded
    from servedeck.jsonio import JSON_LIMITS, JsonRefused, parse
    try:  # JSON is UTF-8 (RFC 8259); a BOM some editors add is dropped
        text = read_bounded(path, JSON_LIMITS.max_bytes, what=f"{what} result")
    except FileNotFoundError as e:
        raise ServedeckError(f"cannot read {what} result: file not found", file=str(path)) from e
    try:
        return parse(text)
    except JsonRefused as first:
        if first.line is None:  # a bound, not a syntax error: no second reading
            raise ServedeckError(f"{what} result refused: {first.message}", file=str(path)) from None
        # --append-result writes newline-separated objects: take the last one
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:
            return parse(lines[-1])
        except (IndexError, JsonRefused) as e:
            raise ServedeckError(f"not a JSON {what} result", file=str(path)) from e


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


def import_vllm_bench(path: str | Path) -> ExternalBench:
    """Map a ``vllm bench serve --save-result`` JSON file onto servedeck's metric names.

    Format: see the module docstring. With ``--append-result`` the last object is used.

    Mapping: ``ttft_s`` median/mean from ``*_ttft_ms``/1000 (vLLM's own, over successes);
    ``decode_tok_s`` median = 1000 / ``median_tpot_ms`` (mean from ``mean_tpot_ms``; min/max
    None: vLLM reports no per-request TPOT extremes); ``e2e_s`` from ``*_e2el_ms`` when present.
    With ``--save-detailed`` arrays: ``ttft_s`` min/max, ``e2e_s`` min/max, ``prefill_tok_s``
    (input_len / ttft), ``prompt_tokens`` and ``output_tokens`` over the successful requests
    (``errors`` item empty); when the arrays cannot be matched to outcomes (no ``errors``
    array while requests failed, or arrays of different lengths) they are not used and a note
    says so.

    Raises:
        ServedeckError: the file is missing, not JSON, lacks ``median_ttft_ms``, or no request
            succeeded.
    """
    d = _load_json(path, "vllm bench serve")
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
    return ExternalBench(source="vllm-bench-serve", path=str(path), metrics=metrics, server=server,
                         raw_keys=sorted(d), requests=counts, partial=partial,
                         failure_reasons=reasons, notes=notes)


def import_guidellm(path: str | Path, *, benchmark_index: int = 0) -> ExternalBench:
    """Map one benchmark of a guidellm JSON report onto servedeck's metric names.

    Format: see the module docstring. Mapping (successful requests): ``ttft_s`` =
    ``time_to_first_token_ms``/1000; ``decode_tok_s`` = 1000 / ``inter_token_latency_ms``
    (guidellm's ITL = (last - first)/(output_tokens - 1), the figure vLLM bench calls TPOT;
    min/max swap accordingly); ``e2e_s`` = ``request_latency`` (seconds). No spec-decode
    fields exist in guidellm reports. Request counts from ``request_totals``, else from the
    per-status ``count`` of ``request_latency``.

    Raises:
        ServedeckError: unreadable file, no benchmark at ``benchmark_index``, or no request
            succeeded.
    """
    d = _load_json(path, "guidellm")
    try:
        bench = d["benchmarks"][benchmark_index]
        m = bench["metrics"]
    except (KeyError, IndexError, TypeError) as e:
        raise ServedeckError(f"no benchmark #{benchmark_index} with metrics in the guidellm report",
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
    return ExternalBench(source="guidellm", path=str(path), metrics=metrics, server={}, raw_keys=sorted(m),
                         requests=counts, partial=partial, notes=notes)


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


def import_file(path: str | Path) -> ExternalBench:
    """Read an external benchmark file of any supported format (guidellm when the top-level
    object has ``benchmarks``, else ``vllm bench serve``).

    Raises:
        ServedeckError: as :func:`import_guidellm` / :func:`import_vllm_bench`.
    """
    doc = _load_json(path, "benchmark")
    if isinstance(doc, dict) and "benchmarks" in doc:
        return import_guidellm(path)
    return import_vllm_bench(path)
