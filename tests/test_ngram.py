"""The n-gram phases of nbs/08b_ngram beyond the notebook's checks: counts against a direct count, the KL of an
estimate to itself, and the committed results against what the bundle's database gives."""
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embryo.ngram import (ORDERS, Masked, closest_steps, context_keys, estimates, ngram_counts, phase_order,
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
    cs = pd.DataFrame(dict(closest_step=[500, 2000, 2000, 8000], low=[250, 1500, 1500, 6000], high=[750, 2500, 2500, 8000],
                           approached=[True, True, True, False], last_step=8000), index=list(ORDERS))
    assert phase_order(cs)[0] == "not testable"
    assert phase_order(cs.assign(approached=True))[0] == "reproduced"


def test_committed_ngram_results_are_what_the_bundle_gives():
    "The committed table and verdict of the quick run are what its bundled database gives (positions resampled alike)."
    t = pd.read_csv(ROOT / "figures" / "table_ngram_phases.csv", index_col="order")
    got = closest_steps(ROOT / "figures" / "run")
    assert list(t.index) == list(ORDERS) and (t.closest_step == got.closest_step).all() and (t.low == got.low).all()
    assert verdict(ROOT / "figures" / "run") in (ROOT / "figures" / "table_ngram_phases.md").read_text()
