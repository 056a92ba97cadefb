"""The quality comparison's statistics: the paired sign-flip test is exact, and the verdicts keep
their error rates (simulations over many experiments whose truth is known)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from servedeck.ab import quality
from servedeck.ab.quality import (
    compare_likelihood,
    compare_task_metric,
    decide_family,
    generation_agreement,
    next_token_agreement,
    sign_flip_test,
    smallest_sign_flip_p,
)
from servedeck.bench.quality import GenerationItem, Likelihood, LikelihoodItem

ALPHA = 0.05


def _lik(sums, tokens, top1=None) -> Likelihood:
    items = []
    for i, (s, n) in enumerate(zip(sums, tokens)):
        ids = list(top1[i]) if top1 else [0] * n
        items.append(LikelihoodItem(id=f"t{i}", tokens=n, sum_logprob=float(s), token_ids_sha256=f"h{i}",
                                    logprobs=[], top1_ids=ids, token_text=[f" w{j}" for j in range(n + 1)],
                                    top1_text=[f" p{k}" for k in ids]))
    return Likelihood(items=items)


def test_sign_flip_test_is_exact():
    d = np.array([0.3, -0.1, 0.7, 0.2, 0.5, -0.4, 0.9, 0.15])
    observed = d.sum()
    flips = [np.dot(signs, np.abs(d)) for signs in itertools.product((1, -1), repeat=d.size)]
    exact = np.mean([abs(f) >= abs(observed) - 1e-12 for f in flips])
    assert sign_flip_test(d) == pytest.approx(exact)
    assert sign_flip_test(np.ones(8)) == pytest.approx(smallest_sign_flip_p(8)) == pytest.approx(2 / 256)
    assert sign_flip_test(np.zeros(5)) == 1.0
    assert sign_flip_test(np.ones(8), "greater") == pytest.approx(1 / 256)
    assert sign_flip_test(np.ones(8), "less") == 1.0


def _null_experiment(rng, n=12, spread=0.02, shift=0.0):
    """Per-text log-likelihood sums of two arms: per-token differences drawn symmetric around
    ``shift`` (nats per token), texts of 60-200 tokens."""
    tokens = rng.integers(60, 200, size=n)
    base = -8.0 * tokens + rng.normal(0, 3, size=n)
    d = (shift + rng.normal(0, spread, size=n) * rng.choice([0.5, 1, 2], size=n)) * tokens
    return base, base + d, tokens


@pytest.fixture
def fast_bootstrap(monkeypatch):
    # the verdict needs the interval only to exclude 1; 999 resamples keep the simulation quick
    monkeypatch.setattr(quality, "BOOTSTRAP_RESAMPLES", 999)


def test_false_verdict_rate_over_identical_arms_stays_below_alpha(fast_bootstrap):
    rng = np.random.default_rng(7)
    runs, wrong = 300, 0
    for _ in range(runs):
        sa, sb, n = _null_experiment(rng)
        m, _ = compare_likelihood(_lik(sa, n), _lik(sb, n), 0.0, ALPHA)
        decide_family([m])
        wrong += m.verdict in ("better", "worse")
    # binomial upper bound: alpha plus three standard errors
    assert wrong / runs <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs), wrong


def test_equivalence_is_rarely_claimed_at_the_margins_edge(fast_bootstrap):
    rng = np.random.default_rng(11)
    margin = 0.01
    runs, claimed = 300, 0
    for _ in range(runs):
        # B's perplexity exactly (1 + margin) times A's: log-likelihood lower by log(1.01) per token
        sa, sb, n = _null_experiment(rng, spread=0.01, shift=-math.log1p(margin))
        m, _ = compare_likelihood(_lik(sa, n), _lik(sb, n), margin, ALPHA)
        decide_family([m])
        claimed += m.verdict == "equivalent"
    assert claimed / runs <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs), claimed


def test_a_real_drop_is_called_worse_and_a_tiny_one_within_margin(fast_bootstrap):
    rng = np.random.default_rng(3)
    sa, sb, n = _null_experiment(rng, spread=0.005, shift=-0.05)  # ppl +5 %
    m, _ = compare_likelihood(_lik(sa, n), _lik(sb, n), 0.01, ALPHA)
    decide_family([m])
    assert m.verdict == "worse" and m.ratio == pytest.approx(math.exp(0.05), rel=0.01)
    assert m.ci_low > 1.0 and m.p == pytest.approx(2 / 2 ** 12)
    sa, sb, n = _null_experiment(rng, spread=0.0005, shift=-0.002)  # ppl +0.2 %, precisely measured
    m, _ = compare_likelihood(_lik(sa, n), _lik(sb, n), 0.01, ALPHA)
    decide_family([m])
    assert m.verdict == "within margin"


def test_texts_tokenized_differently_are_left_out(fast_bootstrap):
    a = _lik([-800.0, -900.0, -1000.0], [100, 110, 120])
    b = _lik([-801.0, -905.0, -990.0], [100, 110, 120])
    b.items[1].token_ids_sha256 = "another tokenizer"
    m, notes = compare_likelihood(a, b, 0.01, ALPHA)
    assert len(m.samples_a) == 2 and "1 of 3 texts tokenize differently" in notes[0]
    b.items[0].token_ids_sha256 = b.items[2].token_ids_sha256 = "x"
    assert compare_likelihood(a, b, 0.01, ALPHA)[0] is None


def test_holm_runs_over_the_quality_family(fast_bootstrap):
    rng = np.random.default_rng(5)
    sa, sb, n = _null_experiment(rng, spread=0.005, shift=-0.05)
    lik, _ = compare_likelihood(_lik(sa, n), _lik(sb, n), 0.01, ALPHA)
    docs = {str(i): float(i % 2) for i in range(20)}
    task = compare_task_metric("qa/exact_match", docs, {k: 1.0 - v for k, v in docs.items()}, True, 0.01, ALPHA)
    decide_family([lik, task])
    assert lik.p_adjusted == pytest.approx(min(1.0, 2 * lik.p))
    assert task.p_adjusted >= task.p


def test_task_scores_paired_by_document_and_direction():
    a = {str(i): 0.0 for i in range(12)}
    b = {str(i): 1.0 for i in range(12)}
    m = compare_task_metric("qa/exact_match", a, b, True, 0.01, ALPHA)
    decide_family([m])
    assert (m.a, m.b, m.difference) == (0.0, 1.0, 1.0) and m.verdict == "better"
    m = compare_task_metric("qa/perplexity", a, b, False, 0.01, ALPHA)
    decide_family([m])
    assert m.verdict == "worse" and m.lower_is_better
    same = compare_task_metric("qa/exact_match", a, dict(a), True, 0.01, ALPHA)
    assert same.verdict == "identical" and not same.judged
    only_some = compare_task_metric("qa/x", {"1": 1.0}, {"2": 1.0}, True, 0.01, ALPHA)
    assert only_some.verdict == "missing"


def test_next_token_agreement_counts_positions_and_shows_the_first_divergence():
    ref = _lik([-80.0, -90.0], [4, 3], top1=[[1, 2, 3, 4], [5, 6, 7]])
    cand = _lik([-80.0, -90.0], [4, 3], top1=[[1, 2, 9, 4], [5, 6, 7]])
    agr = next_token_agreement(ref, cand, 0.95)
    assert (agr.rate, agr.identical) == (6 / 7, 1)
    div = agr.first
    # scored position 2 predicts the text's token 3; the context is tokens 0..2
    assert (div.item, div.position, div.context, div.reference, div.candidate, div.actual) == (
        "t0", 3, " w0 w1 w2", " p3", " p9", " w3")
    assert agr.ci_low <= agr.rate <= agr.ci_high


def test_generation_agreement_is_positional_over_the_longer_output():
    ref = [GenerationItem(id="p", token_ids=[1, 2, 3, 4], tokens=["a", "b", "c", "d"]),
           GenerationItem(id="q", token_ids=[7, 8], tokens=["x", "y"])]
    cand = [GenerationItem(id="p", token_ids=[1, 2, 5, 4, 6], tokens=["a", "b", "e", "d", "f"]),
            GenerationItem(id="q", token_ids=[7, 8], tokens=["x", "y"])]
    agr = generation_agreement(ref, cand, 0.5)
    assert agr.items[0].matches == 3 and agr.items[0].positions == 5
    assert agr.rate == pytest.approx(5 / 7) and agr.identical == 1
    assert (agr.first.position, agr.first.context, agr.first.reference, agr.first.candidate) == (2, "ab", "cd", "edf")
    # a shorter output that agrees as far as it goes diverges where it ends
    short = generation_agreement(ref[1:], [GenerationItem(id="q", token_ids=[7], tokens=["x"])], 0.5)
    assert short.first.position == 1 and short.first.candidate == "(end)"
