"""The n-gram phases of nbs/08b_ngram beyond the notebook's checks: counts against a direct count, the KL of an
estimate to itself, and the committed results against what the bundle's database gives."""
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embryo.analyses.ngram import (ORDERS, Masked, closest_steps, context_keys, estimates, ngram_counts, phase_order,
                          step_measures, verdict)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def seqs():
    rng = np.random.default_rng(3)
    return [[0, *rng.integers(1, 7, size=rng.integers(1, 9)).tolist(), 0] for _ in range(200)]


def test_counts_match_a_direct_count(seqs):
    V, got = 7, ngram_counts(seqs, 7)
    direct = {o: Counter() for o in ORDERS}
    for s in seqs:
        for i in range(1, len(s) - 1):
            a, b, c = s[i - 1], s[i], s[i + 1]
            direct["unigram"][b] += 1; direct["left"][a * V + b] += 1; direct["right"][c * V + b] += 1
            direct["trigram"][(a * V + c) * V + b] += 1
    for o in ORDERS:
        keys, n = got[o]
        assert dict(zip(keys.tolist(), n.tolist())) == dict(direct[o]), o


def test_an_estimate_is_at_distance_zero_from_itself(seqs):
    "A model whose log-probabilities are an order's estimate has KL 0 to it and agrees with its mode everywhere."
    V, counts = 7, ngram_counts(seqs, 7)
    before, piece, after = np.array([1, 2, 3, 0]), np.array([2, 2, 5, 1]), np.array([4, 5, 0, 2])
    masked = Masked([([0, 9, 0], [1])] * 4, piece, before, after, [f"{k}:1" for k in range(4)])
    est = {o: estimates(counts[o], k, V, 1) for o, k in context_keys(before, after, V).items()}
    e = est["right"]
    q = np.full((4, V), 1e-9)
    q[e.row, e.piece] = e.p
    rows, kl = step_measures(np.log(q / q.sum(1, keepdims=True)), masked, est)
    r = {x["metric"]: x["value"] for x in rows}
    assert np.allclose(kl["right"], 0, atol=1e-5) and r["agree_right"] == 1.0
    assert r["kl_unigram"] > 1e-4 and r["kl_trigram"] >= 0  # the other orders differ from it


def test_the_order_is_claimed_only_past_the_floor():
    "Phases left in the paper's order are claimed only where every estimate was approached above the untrained model."
    inf = np.inf
    cs = pd.DataFrame(dict(closest_step=[200, 200, 200, 7750], low=[200] * 3 + [7750], high=[200] * 3 + [7750],
                           leaves_at=[800, 1400, 1300, inf], leaves_low=[750, 1300, 1250, inf],
                           leaves_high=[800, 1900, 1300, inf], approached=[True, True, True, False]), index=list(ORDERS))
    assert phase_order(cs)[0] == "not testable"
    assert phase_order(cs.assign(approached=True))[0] == "reproduced"
    assert phase_order(cs.assign(approached=True, leaves_low=[1500, 1300, 1250, inf], leaves_at=[1600, 1400, 1300, inf],
                                 leaves_high=[1700, 1900, 1300, inf]))[0] == "not reproduced"


@pytest.mark.parametrize("bundle", ["figures", "figures/mature"])
def test_committed_ngram_results_are_what_the_bundle_gives(bundle):
    "The committed table and verdict of the quick and mature runs are what their bundled databases give."
    t = pd.read_csv(ROOT / bundle / "table_ngram_phases.csv", index_col="order")
    got = closest_steps(ROOT / bundle / "run")
    assert list(t.index) == list(ORDERS) and (t.closest_step == got.closest_step).all() and (t.low == got.low).all()
    assert np.allclose(t.leaves_at, got.leaves_at) and (got.leaves_at["unigram"] < got.leaves_at[["left", "right"]]).all()
    assert verdict(ROOT / bundle / "run") in (ROOT / bundle / "table_ngram_phases.md").read_text()
