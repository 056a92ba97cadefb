"""A/B quality: two arms' probe results (``quality.json``) and standard-task scores
(``lm_eval.json``) compared item by item, and the quality gate.

One arm is the **reference** (A by default; ``--quality-reference B`` when B is the
higher-precision arm); the other is the **candidate**, the arm the gate judges.

Statistics (the items are the same in both arms, so every test is paired):

* **Likelihood**: per shipped text, the summed log-likelihood of its tokens in each arm (the
  same tokens: the prompt token ids' sha256 must match, else the texts are not compared item by
  item). The effect is the token-weighted mean difference ``D = Σ(ℓB_i − ℓA_i) / Σ n_i`` (nats
  per token), reported as the perplexity ratio ``exp(−D)`` = ppl(B)/ppl(A). Test: the paired
  sign-flip permutation test of ``D`` (each text's difference may change sign under "no
  difference"; exact over all 2^n sign patterns up to 2^16, else 9,999 seeded random patterns),
  two-sided. Interval: 95 % paired
  bootstrap over texts (``scipy.stats.bootstrap``, percentile). Equivalence within the
  perplexity margin ``±ppl_margin``: two one-sided sign-flip tests against the margin's edges
  (TOST). Verdicts as for speed metrics (:mod:`servedeck.ab.stats`): ``better`` / ``worse``
  need the Holm-adjusted p ≤ alpha, the interval excluding 1 and the ratio beyond the margin;
  ``within margin``, ``equivalent``, ``no verdict``; ``identical`` when every text scored the
  same in both arms (nothing to test).
* **Standard tasks** (lm-evaluation-harness): per task and metric, the per-document scores
  paired by document; the same sign-flip test and bootstrap on the mean difference, with an
  absolute margin ``task_margin`` (scores are fractions); for 0/1 scores the sign-flip test is
  the exact McNemar test.
* Holm's adjustment runs over the quality tests of one report (likelihood and task metrics),
  a family of its own, apart from the speed metrics' family.
* **Agreement** is descriptive: next-token agreement (at each position of the shipped texts,
  do both arms rank the same token first) and greedy generation agreement (positional token
  matches over the longer output), each with a 95 % bootstrap interval over items, the first
  divergence and the diverging text.

The **gate**: the candidate cannot be called better when, against the reference, its
perplexity rises beyond ``ppl_margin`` (point estimate, shown with its interval and test), its
next-token agreement is below ``min_agreement`` or its generation agreement below
``min_generation_agreement``, an output is degenerate in a way the reference's output for the
same prompt is not, it stops at the length limit where the reference stopped, a feature the
reference passes is broken (tool call, reasoning, structured output) or it does not call the
tool the reference called, it misses a needle the reference retrieved, a probe failed that ran
in the reference, or a task score is ``worse``. What is broken in the reference too is noted,
not gated: the gate judges the difference the experiment made. The simulation tests
(``tests/unit/test_quality_stats.py``) check the tests' error rates.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servedeck.ab.stats import (
    ALPHA,
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE_LEVEL,
    PERMUTATION_RESAMPLES,
    SEED,
    MetricComparison,
    holm,
)
from servedeck.bench.quality import GenerationItem, Likelihood, QualityResult
from servedeck.runs import store

DEFAULT_PPL_MARGIN = 0.01
DEFAULT_MIN_AGREEMENT = 0.95
DEFAULT_MIN_GENERATION_AGREEMENT = 0.5
DEFAULT_TASK_MARGIN = 0.01
EXACT_SIGN_FLIP_LIMIT = 16
"""Up to this many items the sign-flip test enumerates every sign pattern."""
DIVERGENCE_CONTEXT = 8
"""Tokens of context shown before a divergence, and of each continuation after it."""

METHOD_SIGN_FLIP = "paired sign-flip permutation test"


class QualityGateSettings(BaseModel):
    """The user's margins and thresholds (``invoke ab --ppl-margin --min-agreement ...``).

    Attributes:
        reference: the reference arm (``A`` or ``B``); the other arm is gated.
        ppl_margin: relative perplexity rise tolerated (0.01 = +1 %); also the equivalence margin.
        min_agreement: next-token agreement below this gates (0-1).
        min_generation_agreement: greedy generation agreement below this gates (0-1).
        task_margin: absolute task-score margin (0.01 = 1 point of accuracy).
        alpha: family-wise error rate of the quality tests.
    """

    model_config = ConfigDict(extra="forbid")

    reference: Literal["A", "B"] = "A"
    ppl_margin: float = Field(DEFAULT_PPL_MARGIN, ge=0, lt=1)
    min_agreement: float = Field(DEFAULT_MIN_AGREEMENT, ge=0, le=1)
    min_generation_agreement: float = Field(DEFAULT_MIN_GENERATION_AGREEMENT, ge=0, le=1)
    task_margin: float = Field(DEFAULT_TASK_MARGIN, ge=0, lt=1)
    alpha: float = Field(ALPHA, gt=0, lt=1)

    @property
    def candidate(self) -> str:
        return "B" if self.reference == "A" else "A"


class Divergence(BaseModel):
    """Where two token sequences first differ: ``context`` (the tokens before), what each arm
    has from there (``reference``, ``candidate``), and for next-token agreement the text's own
    token there (``actual``)."""

    model_config = ConfigDict(extra="forbid")
    item: str
    position: int
    context: str
    reference: str
    candidate: str
    actual: str | None = None


class AgreementItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    matches: int
    positions: int
    divergence: Divergence | None = None

    @property
    def rate(self) -> float:
        return self.matches / self.positions if self.positions else 1.0


class Agreement(BaseModel):
    """Token agreement of the candidate with the reference over items.

    Attributes:
        kind: ``next_token`` (teacher-forced, the shipped texts) or ``generation`` (greedy).
        rate: Σ matches / Σ positions; ci_low, ci_high: 95 % bootstrap interval over items.
        identical: items without any divergence.
        threshold: the gate's minimum.
    """

    model_config = ConfigDict(extra="forbid")
    kind: Literal["next_token", "generation"]
    items: list[AgreementItem]
    rate: float
    ci_low: float
    ci_high: float
    identical: int
    threshold: float

    @property
    def first(self) -> Divergence | None:
        """The earliest divergence (by item order)."""
        return next((i.divergence for i in self.items if i.divergence is not None), None)


class OutputCheck(BaseModel):
    """One row of the quality table beside the likelihood and agreement: both arms' outcome
    and what is new in the candidate.

    Attributes:
        name: ``degenerate``, ``length_stop``, ``tool_call``, ``reasoning``,
            ``structured_output``, ``needle``.
        a, b: each arm's outcome in a few words.
        new: what the candidate shows that the reference does not, one item each (gates when
            non-empty); summary: all of it in one clause.
        shared: what is wrong in both (noted, not gated).
    """

    model_config = ConfigDict(extra="forbid")
    name: str
    a: str
    b: str
    new: list[str] = Field(default_factory=list)
    summary: str = ""
    shared: list[str] = Field(default_factory=list)


class GateReason(BaseModel):
    """Why the gate holds the candidate back: ``rule`` (``likelihood``, ``agreement``,
    ``generation_agreement``, ``degenerate``, ``length_stop``, ``tool_call``, ``reasoning``,
    ``structured_output``, ``needle``, ``probe``, ``task``), one clause, and the items behind it."""

    model_config = ConfigDict(extra="forbid")
    rule: str
    text: str
    details: list[str] = Field(default_factory=list)


class QualityGate(BaseModel):
    """The gate's decision on the candidate arm.

    Attributes:
        arm, reference: the gated arm and the reference (``A``/``B``).
        status: ``pass``, ``gated`` (reasons say why) or ``not checked`` (``notes`` say why).
        reasons: one per rule that fired; notes: what did not gate (shared faults, missing data).
    """

    model_config = ConfigDict(extra="forbid")
    arm: str
    reference: str
    status: Literal["pass", "gated", "not checked"]
    reasons: list[GateReason] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def blocks(self) -> bool:
        """True when the gated arm cannot be called better."""
        return self.status == "gated"

    def summary(self) -> str:
        """One sentence: ``B cannot be called better: ...`` / ``passed`` / ``not checked: ...``."""
        if self.status == "gated":
            return f"{self.arm} cannot be called better: " + "; ".join(r.text for r in self.reasons)
        if self.status == "pass":
            return f"passed: {self.arm} shows no quality loss against {self.reference} beyond the margins"
        return "not checked: " + ("; ".join(self.notes) or "no quality probes")


class QualityComparison(BaseModel):
    """Quality of two arms: the ``quality`` field of :class:`servedeck.ab.stats.Comparison`.

    Attributes:
        run_a, run_b: the runs whose probes were compared (an arm's first run with probes).
        settings: margins and thresholds used.
        likelihood: perplexity B vs A (a :class:`MetricComparison`, phase ``quality``), None
            when either arm has no likelihood.
        next_token, generation: agreement of the candidate with the reference.
        checks: degenerate output, length stops, features, needle.
        tasks: lm-evaluation-harness metrics B vs A (phase ``task``).
        gate: the decision.
        texts: ``{"tokens": n, "items": k}`` of the likelihood probe; notes: comparability remarks.
    """

    model_config = ConfigDict(extra="forbid")
    run_a: str | None
    run_b: str | None
    settings: QualityGateSettings
    likelihood: MetricComparison | None = None
    next_token: Agreement | None = None
    generation: Agreement | None = None
    checks: list[OutputCheck] = Field(default_factory=list)
    tasks: list[MetricComparison] = Field(default_factory=list)
    gate: QualityGate
    texts: dict[str, int] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

def read_quality(run_dir: Path) -> QualityResult | None:
    """``quality.json`` of a run, typed; None when the run has none.

    Raises:
        ServedeckError: the file is not valid JSON or not a quality result (file and field named).
    """
    return store.read(run_dir, store.QUALITY)


def _first_with(runs: Sequence[Path], reader) -> tuple[Path | None, Any]:
    for r in runs:
        doc = reader(r)
        if doc is not None:
            return r, doc
    return None, None


# --------------------------------------------------------------------------------------------
# Paired statistics
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=32)
def _sign_patterns(n: int) -> np.ndarray:
    """Every ±1 pattern over ``n`` items (2^n × n) up to :data:`EXACT_SIGN_FLIP_LIMIT`, else
    :data:`PERMUTATION_RESAMPLES` seeded random patterns with the identity first."""
    if n <= EXACT_SIGN_FLIP_LIMIT:
        bits = (np.arange(2 ** n)[:, None] >> np.arange(n)) & 1
        return 1 - 2 * bits.astype(float)
    rng = np.random.default_rng(SEED)
    return np.vstack([np.ones(n), rng.choice((-1.0, 1.0), size=(PERMUTATION_RESAMPLES, n))])


def sign_flip_test(diffs: Sequence[float] | np.ndarray, alternative: str = "two-sided") -> float:
    """p of the paired sign-flip permutation test of ``sum(diffs)`` (H0: each item's difference
    is as likely positive as negative). Exact over all 2^n sign patterns up to
    :data:`EXACT_SIGN_FLIP_LIMIT` items, else 9,999 seeded random patterns plus the observed one.
    ``alternative``: ``two-sided``, ``greater`` (the differences tend to be positive) or ``less``.
    The p counts patterns at least as extreme as the observed sum (a relative tolerance of 1e-9
    keeps ties of floating sums together)."""
    d = np.asarray(diffs, float)
    if d.size == 0 or not np.any(d):
        return 1.0
    sums = _sign_patterns(d.size) @ d
    observed = float(d.sum())
    tol = 1e-9 * max(1.0, float(np.abs(d).sum()))
    if alternative == "greater":
        hits = sums >= observed - tol
    elif alternative == "less":
        hits = sums <= observed + tol
    else:
        hits = np.abs(sums) >= abs(observed) - tol
    return float(min(1.0, hits.mean()))


def paired_interval(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
                    w: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """95 % paired bootstrap interval (percentile, items resampled) of ``Σ(y − x) / Σ w``."""
    from scipy.stats import bootstrap

    xa, ya, wa = (np.asarray(v, float) for v in (x, y, w))
    point = float(np.sum(ya - xa) / np.sum(wa))
    if xa.size < 2 or np.all(ya - xa == (ya - xa)[0] * wa / wa[0]):
        return point, point

    def stat(x_, y_, w_, axis=-1):
        return np.sum(y_ - x_, axis=axis) / np.sum(w_, axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap((xa, ya, wa), stat, paired=True, vectorized=True, confidence_level=CONFIDENCE_LEVEL,
                        n_resamples=BOOTSTRAP_RESAMPLES, method="percentile", random_state=SEED)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return point, point
    return low, high


def smallest_sign_flip_p(n: int) -> float:
    """The smallest two-sided p a sign-flip test over ``n`` items can give (``2 / 2^n``)."""
    return min(1.0, 2.0 / 2 ** n) if n < 1024 else 0.0


def _judge_paired(m: MetricComparison, diffs: np.ndarray, edge_diffs: tuple[np.ndarray, np.ndarray],
                  better_when_higher: bool) -> None:
    """Fill the test fields of ``m`` (p, equivalence p) from per-item ``diffs`` (B − A, in the
    metric's test scale) and the TOST-shifted differences ``(upper, lower)``."""
    m.p = sign_flip_test(diffs)
    m.method = METHOD_SIGN_FLIP + (", exact" if diffs.size <= EXACT_SIGN_FLIP_LIMIT else ", 9,999 resamples")
    up, low = edge_diffs
    # H0 upper: B is worse by the margin or more; H0 lower: B is better by the margin or more
    m.p_equivalence = max(sign_flip_test(up, "greater" if better_when_higher else "less"),
                          sign_flip_test(low, "less" if better_when_higher else "greater"))


def _decide(m: MetricComparison, family: int, beyond: bool, excludes: bool, positive_is_better: bool,
            effect_positive: bool, n_items: int) -> None:
    """Verdict of a judged paired quality metric (the rules of :func:`servedeck.ab.stats._decide`,
    with ``better``/``worse`` for quality)."""
    p_adj, margin, alpha = m.p_adjusted, m.margin, m.alpha
    assert p_adj is not None and margin is not None and alpha is not None  # a judged metric (decide_family)
    pct = f"{margin * 100:g} %" if m.name == "perplexity" else f"{margin:g}"
    if p_adj <= alpha and excludes and beyond:
        m.verdict = "better" if effect_positive == positive_is_better else "worse"
        m.reason = f"p={p_adj:.2g} (Holm) and the difference is beyond ±{pct}"
    elif p_adj <= alpha and excludes:
        m.verdict = "within margin"
        m.reason = f"a difference is detected (p={p_adj:.2g}, Holm) but it is smaller than ±{pct}"
    elif p_adj <= alpha:
        m.verdict = "no verdict"
        m.reason = f"the sign-flip test (p={p_adj:.2g}, Holm) and the bootstrap interval disagree"
    elif m.p_equivalence_adjusted is not None and m.p_equivalence_adjusted <= alpha:
        m.verdict = "equivalent"
        m.reason = f"within ±{pct} (equivalence p={m.p_equivalence_adjusted:.2g}, Holm)"
    else:
        m.verdict = "no verdict"
        floor = smallest_sign_flip_p(n_items)
        level = alpha / family
        if floor > level:
            m.reason = (f"{n_items} paired items cannot reach p ≤ {level:.2g} ({alpha:g} over {family} "
                        f"quality tests): the smallest exact p is {floor:.2g}")
        else:
            m.reason = f"p={p_adj:.2g} (Holm), and equivalence within ±{pct} is not shown"


def compare_likelihood(a: Likelihood, b: Likelihood, margin: float,
                       alpha: float) -> tuple[MetricComparison | None, list[str]]:
    """Perplexity B vs A over the texts scored with the same tokens in both arms (see the module
    docstring); returns the (not yet decided) comparison and notes. None when no text pairs."""
    notes = []
    by_id = {i.id: i for i in a.items}
    pairs = [(by_id[i.id], i) for i in b.items if i.id in by_id]
    same = [(x, y) for x, y in pairs if x.token_ids_sha256 == y.token_ids_sha256 and x.tokens == y.tokens]
    if len(same) < len(pairs):
        notes.append(f"{len(pairs) - len(same)} of {len(pairs)} texts tokenize differently in the two arms "
                     "(another tokenizer): they are left out of the item-by-item likelihood")
    if not same:
        return None, notes
    sa = np.array([x.sum_logprob for x, _ in same])
    sb = np.array([y.sum_logprob for _, y in same])
    n = np.array([x.tokens for x, _ in same], float)
    total = float(n.sum())
    ppl_a, ppl_b = math.exp(-sa.sum() / total), math.exp(-sb.sum() / total)
    d = sb - sa
    m = MetricComparison(name="perplexity", phase="quality", a=ppl_a, b=ppl_b,
                         samples_a=[math.exp(-x.mean_logprob) for x, _ in same],
                         samples_b=[math.exp(-y.mean_logprob) for _, y in same],
                         difference=ppl_b - ppl_a, ratio=ppl_b / ppl_a, lower_is_better=True,
                         verdict="no verdict", judged=not np.all(d == 0), margin=margin, alpha=alpha)
    if not m.judged:
        m.verdict, m.ci_low, m.ci_high = "identical", 1.0, 1.0
        m.reason = "every text scored the same log-likelihood in both arms"
        return m, notes
    lo, hi = paired_interval(sa, sb, n)  # of D (nats per token); the ratio is exp(-D)
    m.ci_low, m.ci_high = math.exp(-hi), math.exp(-lo)
    edge = math.log1p(margin)
    _judge_paired(m, d, (d + edge * n, d - edge * n), better_when_higher=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = d / n
    m.noise = float(np.std(per, ddof=1)) if per.size > 1 else None
    return m, notes


def compare_task_metric(name: str, scores_a: dict[str, float], scores_b: dict[str, float],
                        higher_is_better: bool, margin: float, alpha: float) -> MetricComparison:
    """One lm-evaluation-harness metric (``task/metric``) B vs A over the documents scored in
    both arms (not yet decided)."""
    docs = sorted(set(scores_a) & set(scores_b), key=lambda k: (len(k), k))
    xa = np.array([scores_a[k] for k in docs], float)
    xb = np.array([scores_b[k] for k in docs], float)
    ma = float(xa.mean()) if docs else None
    mb = float(xb.mean()) if docs else None
    m = MetricComparison(name=name, phase="task", a=ma, b=mb, samples_a=list(xa), samples_b=list(xb),
                         difference=(mb - ma) if mb is not None and ma is not None else None,
                         ratio=(mb / ma) if mb is not None and ma else None, lower_is_better=not higher_is_better,
                         verdict="missing" if not docs else "no verdict", judged=len(docs) >= 2,
                         margin=margin, alpha=alpha)
    if not m.judged:
        if docs:
            m.verdict, m.reason = "not judged", "needs at least 2 documents scored in both arms"
        return m
    d = xb - xa
    if not np.any(d):
        m.verdict, m.judged, m.ci_low, m.ci_high = "identical", False, 0.0, 0.0
        m.reason = f"every document scored the same in both arms ({len(docs)} documents)"
        return m
    m.ci_low, m.ci_high = paired_interval(xa, xb, np.ones_like(xa))
    sign = 1.0 if higher_is_better else -1.0
    _judge_paired(m, d * sign, (d * sign + margin, d * sign - margin), better_when_higher=True)
    m.noise = float(np.std(d, ddof=1))
    return m


def decide_family(metrics: list[MetricComparison]) -> None:
    """Holm-adjust the judged quality metrics of one report together and decide each."""
    judged = [m for m in metrics if m.judged and m.p is not None]
    if not judged:
        return
    p = [m.p for m in judged if m.p is not None]
    q = [m.p_equivalence for m in judged if m.p_equivalence is not None]
    assert len(q) == len(judged)  # a judged metric has both tests (_judge_paired)
    for m, p_adj, q_adj in zip(judged, holm(p), holm(q)):
        m.p_adjusted, m.p_equivalence_adjusted = p_adj, q_adj
        margin, lo, hi = m.margin, m.ci_low, m.ci_high
        assert margin is not None and lo is not None and hi is not None  # set by compare_* for a judged metric
        if m.name == "perplexity":
            ratio = m.ratio
            assert ratio is not None  # perplexities are positive
            edge = math.log1p(margin)
            beyond = abs(math.log(ratio)) >= edge
            excludes = lo > 1.0 or hi < 1.0
            _decide(m, len(judged), beyond, excludes, positive_is_better=False, effect_positive=ratio > 1.0,
                    n_items=len(m.samples_a))
        else:
            diff = m.difference or 0.0
            beyond = abs(diff) >= margin
            excludes = lo > 0.0 or hi < 0.0
            _decide(m, len(judged), beyond, excludes, positive_is_better=not m.lower_is_better,
                    effect_positive=diff > 0, n_items=len(m.samples_a))


# --------------------------------------------------------------------------------------------
# Agreement
# --------------------------------------------------------------------------------------------

def _join(tokens: Sequence[str]) -> str:
    return "".join(tokens).replace("\n", "\\n")


def _rate_interval(matches: Sequence[int], positions: Sequence[int]) -> tuple[float, float]:
    total = sum(positions)
    rate = sum(matches) / total if total else 1.0
    if len(matches) < 2 or all(m == p for m, p in zip(matches, positions)):
        return rate, rate
    lo, hi = paired_interval([0.0] * len(matches), matches, positions)
    return max(0.0, lo), min(1.0, hi)


def next_token_agreement(ref: Likelihood, cand: Likelihood, threshold: float) -> Agreement | None:
    """At each scored position of the texts tokenized alike, the reference's and the
    candidate's rank-1 tokens; the first differing position per text with its context."""
    by_id = {i.id: i for i in ref.items}
    items = []
    for c in cand.items:
        r = by_id.get(c.id)
        if r is None or r.token_ids_sha256 != c.token_ids_sha256 or len(r.top1_ids) != len(c.top1_ids):
            continue
        matches = sum(x == y for x, y in zip(r.top1_ids, c.top1_ids))
        div = None
        k = next((j for j, (x, y) in enumerate(zip(r.top1_ids, c.top1_ids)) if x != y), None)
        if k is not None:
            # scored position k predicts prompt token k + 1; the context is the tokens up to k
            ctx = r.token_text[max(0, k + 1 - DIVERGENCE_CONTEXT): k + 1]
            div = Divergence(item=c.id, position=k + 1, context=_join(ctx), reference=_join([r.top1_text[k]]),
                             candidate=_join([c.top1_text[k]]),
                             actual=_join([r.token_text[k + 1]]) if k + 1 < len(r.token_text) else None)
        items.append(AgreementItem(id=c.id, matches=matches, positions=len(c.top1_ids), divergence=div))
    return _agreement("next_token", items, threshold)


def _agreement(kind: Literal["next_token", "generation"], items: list[AgreementItem],
               threshold: float) -> Agreement | None:
    """The agreement over ``items`` (None without any): Σ matches / Σ positions with its
    bootstrap interval over items."""
    if not items:
        return None
    matches, positions = [i.matches for i in items], [i.positions for i in items]
    lo, hi = _rate_interval(matches, positions)
    total = sum(positions)
    return Agreement(kind=kind, items=items, rate=sum(matches) / total if total else 1.0, ci_low=lo, ci_high=hi,
                     identical=sum(i.divergence is None for i in items), threshold=threshold)


def _units(g: GenerationItem) -> tuple[list[Any], list[str]]:
    """Token ids to compare (ids, else token strings, else words) and their text."""
    text_tokens = g.tokens or ((g.reasoning or "") + (g.content or "")).split(" ")
    if g.token_ids is not None:
        return list(g.token_ids), (g.tokens if g.tokens and len(g.tokens) == len(g.token_ids)
                                   else [str(t) for t in g.token_ids])
    return list(text_tokens), list(text_tokens)


def generation_agreement(ref: list[GenerationItem], cand: list[GenerationItem], threshold: float) -> Agreement | None:
    """Greedy outputs token by token: positional matches over the longer output per prompt."""
    by_id = {g.id: g for g in ref if g.error is None}
    items = []
    for c in cand:
        r = by_id.get(c.id)
        if r is None or c.error is not None:
            continue
        ru, rt = _units(r)
        cu, ct = _units(c)
        length = max(len(ru), len(cu))
        matches = sum(x == y for x, y in zip(ru, cu))
        k = next((j for j, (x, y) in enumerate(zip(ru, cu)) if x != y), None)
        if k is None and len(ru) != len(cu):
            k = min(len(ru), len(cu))
        div = None
        if k is not None:
            div = Divergence(item=c.id, position=k, context=_join(rt[max(0, k - DIVERGENCE_CONTEXT):k]),
                             reference=_join(rt[k:k + DIVERGENCE_CONTEXT]) or "(end)",
                             candidate=_join(ct[k:k + DIVERGENCE_CONTEXT]) or "(end)")
        items.append(AgreementItem(id=c.id, matches=matches, positions=length, divergence=div))
    return _agreement("generation", items, threshold)


# --------------------------------------------------------------------------------------------
# Output checks
# --------------------------------------------------------------------------------------------

def _by_arm(a: Any, b: Any, ref: str) -> tuple[Any, Any]:
    return (a, b) if ref == "A" else (b, a)


def _kinds_summary(items: list[GenerationItem]) -> str:
    bad = [g for g in items if g.degenerate]
    if not items:
        return "–"
    kinds = sorted({k for g in bad for k in g.degenerate})
    return f"{len(bad)}/{len(items)}" + (f" ({', '.join(kinds)})" if kinds else "")


def output_checks(qa: QualityResult, qb: QualityResult, ref: str) -> list[OutputCheck]:
    """Degenerate outputs, length stops, features and the needle, both arms and what is new
    in the candidate (``ref``: the reference arm's letter)."""
    r, c = _by_arm(qa, qb, ref)
    cand = "B" if ref == "A" else "A"
    checks: list[OutputCheck] = []
    # degenerate output and probe failures, per prompt
    rg = {g.id: g for g in r.generation}
    new, shared, failed = [], [], []
    for g in c.generation:
        rr = rg.get(g.id)
        if rr is None:
            continue
        if g.error and not rr.error:
            failed.append(f"prompt '{g.id}' failed in {cand}: {g.error[:120]}")
            continue
        extra = [k for k in g.degenerate if k not in rr.degenerate]
        both = [k for k in g.degenerate if k in rr.degenerate]
        if extra:
            new.append(f"prompt '{g.id}': {', '.join(extra)} (output: {_show(g)})")
        if both:
            shared.append(f"prompt '{g.id}': {', '.join(both)}")
    if qa.generation or qb.generation:
        kinds = sorted({k for g in c.generation for k in g.degenerate
                        if g.id in rg and k not in rg[g.id].degenerate})
        summary = "; ".join(filter(None, [
            f"degenerate output in {len(new)} of {len(c.generation)} prompts ({', '.join(kinds)}) "
            f"where {ref}'s was not" if new else "",
            f"{len(failed)} generation request(s) failed" if failed else ""]))
        checks.append(OutputCheck(name="degenerate", a=_kinds_summary(qa.generation),
                                  b=_kinds_summary(qb.generation), new=new + failed, summary=summary, shared=shared))
        stops = [f"prompt '{g.id}' ran to the length limit ({len(g.token_ids or [])} tokens) where "
                 f"{ref} stopped" for g in c.generation
                 if g.id in rg and g.finish_reason == "length" and rg[g.id].finish_reason == "stop"]
        checks.append(OutputCheck(name="length_stop", a=_finish_summary(qa.generation),
                                  b=_finish_summary(qb.generation), new=stops,
                                  summary=(f"{len(stops)} of {len(c.generation)} prompts ran to the length limit "
                                           f"where {ref} stopped") if stops else ""))
    # features
    for name in ("tool_call", "reasoning", "structured_output"):
        fa, fb = qa.feature(name), qb.feature(name)
        if fa is None and fb is None:
            continue
        fr, fc = _by_arm(fa, fb, ref)
        new, shared = [], []
        if fc is not None and fr is not None:
            if fc.broken and not fr.broken:
                new.append(f"{name} {fc.status} ({fc.setting}): {fc.detail}")
            elif fc.broken and fr.broken:
                shared.append(f"{name} {fc.status} in both ({fc.detail})")
            elif fc.status == "error" and fr.status != "error":
                new.append(f"{name} probe failed: {fc.detail[:160]}")
            elif name == "tool_call" and fr.status == "parsed" and fc.status == "no_call":
                new.append(f"no tool call where {ref} called {fr.detail.split(': ', 1)[-1]}")
        elif fc is None and fr is not None:
            new.append(f"{name} not checked in {cand} ({(c.skipped or {}).get(name, 'no result')})")
        checks.append(OutputCheck(name=name, a=_feature_summary(fa), b=_feature_summary(fb), new=new,
                                  summary="; ".join(new), shared=shared))
    # needle
    if qa.needle or qb.needle:
        rn = {round(n.depth, 4): n for n in r.needle}
        lost = [f"the fact at depth {n.depth:.0%} of {rn[round(n.depth, 4)].context_tokens:,} tokens, retrieved "
                f"by {ref}, is missed (answer: {n.answer[:60]!r})" for n in c.needle
                if round(n.depth, 4) in rn and rn[round(n.depth, 4)].retrieved and not n.retrieved]
        checks.append(OutputCheck(name="needle", a=_needle_summary(qa), b=_needle_summary(qb), new=lost,
                                  summary=(f"{len(lost)} of {len(c.needle)} needle depths missed that {ref} "
                                           "retrieved") if lost else ""))
    return checks


def _show(g: GenerationItem, n: int = 60) -> str:
    text = ((g.reasoning or "") + (g.content or "")).replace("\n", "\\n")
    return repr(text[:n] + ("…" if len(text) > n else ""))


def _finish_summary(items: list[GenerationItem]) -> str:
    if not items:
        return "–"
    stops = sum(g.finish_reason == "stop" for g in items)
    return f"{stops}/{len(items)} stopped, {sum(g.finish_reason == 'length' for g in items)} at the limit"


def _feature_summary(f) -> str:
    return "–" if f is None else f.status


def _needle_summary(q: QualityResult) -> str:
    if not q.needle:
        return "–" if "needle" not in q.skipped else f"skipped ({q.skipped['needle']})"
    tokens = max((n.context_tokens for n in q.needle), default=0)
    return f"{sum(n.retrieved for n in q.needle)}/{len(q.needle)} retrieved ({tokens:,} tokens)"


# --------------------------------------------------------------------------------------------
# The comparison and the gate
# --------------------------------------------------------------------------------------------

def compare_quality(runs_a: Sequence[Path], runs_b: Sequence[Path],
                    settings: QualityGateSettings | None = None) -> QualityComparison | None:
    """Compare the quality of two arms and decide the gate.

    Args:
        runs_a, runs_b: each arm's run directories (the first with ``quality.json`` is used;
            standard-task scores from the first with ``lm_eval.json``).
        settings: margins and thresholds (default :class:`QualityGateSettings`).

    Returns:
        None when neither arm has quality probes nor task scores; otherwise the comparison,
        whose gate is ``not checked`` when only one arm has them.

    Raises:
        ServedeckError: a ``quality.json`` or ``lm_eval.json`` is unreadable.
    """
    from servedeck.bench.lmeval import read_lm_eval

    settings = settings or QualityGateSettings()
    ra, qa = _first_with(runs_a, read_quality)
    rb, qb = _first_with(runs_b, read_quality)
    _, ta = _first_with(runs_a, read_lm_eval)
    _, tb = _first_with(runs_b, read_lm_eval)
    if qa is None and qb is None and ta is None and tb is None:
        return None
    ref, cand = settings.reference, settings.candidate
    gate = QualityGate(arm=cand, reference=ref, status="pass")
    out = QualityComparison(run_a=ra.name if ra else None, run_b=rb.name if rb else None, settings=settings, gate=gate)
    family: list[MetricComparison] = []
    if qa is not None and qb is not None:
        if qa.texts_version != qb.texts_version:
            out.notes.append(f"the arms were probed with different versions of the shipped texts "
                             f"({qa.texts_version} vs {qb.texts_version})")
        la, lb = qa.likelihood, qb.likelihood
        if la is not None and lb is not None and la.items and lb.items:
            m, notes = compare_likelihood(la, lb, settings.ppl_margin, settings.alpha)
            out.notes += notes
            out.likelihood = m
            if m is not None:
                family.append(m)
                out.texts = {"items": len(m.samples_a), "tokens": sum(
                    i.tokens for i in la.items if i.id in {x.id for x in lb.items})}
            r_l, c_l = _by_arm(la, lb, ref)
            out.next_token = next_token_agreement(r_l, c_l, settings.min_agreement)
        r_q, c_q = _by_arm(qa, qb, ref)
        out.generation = generation_agreement(r_q.generation, c_q.generation, settings.min_generation_agreement)
        out.checks = output_checks(qa, qb, ref)
    if ta is not None and tb is not None:
        for key, (sa, sb, hib) in _task_pairs(ta, tb).items():
            m = compare_task_metric(key, sa, sb, hib, settings.task_margin, settings.alpha)
            out.tasks.append(m)
            family.append(m)
    decide_family(family)
    _gate(out, qa, qb, ta, tb)
    return out


def _task_pairs(ta, tb) -> dict[str, tuple[dict[str, float], dict[str, float], bool]]:
    """``{"task/metric": (per-doc scores A, per-doc scores B, higher is better)}`` for the task
    metrics both arms have."""
    out = {}
    for key, ma in ta.metrics().items():
        mb = tb.metrics().get(key)
        if mb is not None:
            out[key] = (ma.per_doc, mb.per_doc, ma.higher_is_better)
    return out


def _divergence_text(d: Divergence, ref: str, cand: str) -> str:
    """``'bread' at token 41: …context → A ' x', B ' y'``."""
    where = f"…{d.context}" if d.context else "at the start"
    return f"'{d.item}' at token {d.position}: {where} → {ref} {d.reference!r}, {cand} {d.candidate!r}"


def _gate(out: QualityComparison, qa: QualityResult | None, qb: QualityResult | None, ta, tb) -> None:
    g, s = out.gate, out.settings
    ref, cand = s.reference, s.candidate
    rq, cq = _by_arm(qa, qb, ref)
    if rq is not None and cq is None:
        g.notes.append(f"{cand} has no quality probes")
    elif rq is None and cq is not None:
        g.notes.append(f"the reference {ref} has no quality probes")
    if (ta is None) != (tb is None):
        g.notes.append(f"standard-task scores in {'A' if ta is not None else 'B'} only")
    if rq is not None and cq is not None:
        m = out.likelihood
        if m is not None and m.ratio is not None:
            ratio = m.ratio if ref == "A" else 1.0 / m.ratio
            if ratio > 1.0 + s.ppl_margin:
                assert m.ci_low is not None and m.ci_high is not None  # compare_likelihood sets the interval
                lo, hi = (m.ci_low, m.ci_high) if ref == "A" else (1.0 / m.ci_high, 1.0 / m.ci_low)
                held = f", Holm p={m.p_adjusted:.2g}" if m.p_adjusted is not None else ""
                g.reasons.append(GateReason(rule="likelihood", text=(
                    f"perplexity {(ratio - 1) * 100:+.2f} % against {ref} (ratio {ratio:.4f}, "
                    f"95% CI {lo:.4f}–{hi:.4f}, {m.method or 'not tested'}{held}) "
                    f"beyond the +{s.ppl_margin * 100:g} % margin")))
        rl, cl = rq.likelihood, cq.likelihood
        if rl is not None and rl.items and cl is not None and cl.error:
            g.reasons.append(GateReason(rule="probe", text=f"the likelihood probe failed in {cand}: {cl.error[:160]}"))
        for agr, rule, what in ((out.next_token, "agreement", "next-token agreement"),
                                (out.generation, "generation_agreement", "greedy generation agreement")):
            if agr is not None and agr.rate < agr.threshold:
                g.reasons.append(GateReason(rule=rule, text=(
                    f"{what} with {ref} {agr.rate:.1%} (95% CI {agr.ci_low:.1%}–{agr.ci_high:.1%}) below "
                    f"{agr.threshold:.0%}"), details=[_divergence_text(i.divergence, ref, cand)
                                                     for i in agr.items if i.divergence is not None][:4]))
        for check in out.checks:
            if check.new:
                g.reasons.append(GateReason(rule=check.name, text=check.summary, details=check.new))
            for text in check.shared:
                g.notes.append(f"{check.name} in both arms, not gated: {text}")
    for m in out.tasks:
        worse = (m.verdict == "worse") if ref == "A" else (m.verdict == "better")
        if worse:
            g.reasons.append(GateReason(rule="task", text=(
                f"{m.name} {m.b if ref == 'A' else m.a:.3f} vs {m.a if ref == 'A' else m.b:.3f} in {ref}: "
                f"worse ({m.reason})")))
    if g.reasons:
        g.status = "gated"
    elif (rq is None or cq is None) and (ta is None or tb is None):
        g.status = "not checked"
