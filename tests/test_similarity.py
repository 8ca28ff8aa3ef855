"""The similarity measures of nbs/07a_similarity beyond the notebook's checks: symmetry, bounds, degenerate inputs, a damaged cache."""
import shutil

import numpy as np
import pytest

from embryo.analyses.similarity import (
    cache_file, cca, centred, evaluate_step, linear_cka, pwcca, representations, svcca)


@pytest.fixture(scope="module")
def mats():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 8)) @ rng.normal(size=(8, 8))
    Y = np.tanh(X @ rng.normal(size=(8, 5))) + 0.3 * rng.normal(size=(300, 5))
    return X, Y


def test_symmetry_and_bounds(mats):
    X, Y = mats
    assert linear_cka(X, Y) == pytest.approx(linear_cka(Y, X), abs=1e-12)
    assert svcca(X, Y) == pytest.approx(svcca(Y, X), abs=1e-10)
    for f in (linear_cka, svcca, pwcca):
        assert 0 < f(X, Y) < 1 and 0 < f(Y, X) < 1
    rho, H = cca(X, Y)
    assert len(rho) == 5 and H.shape == (300, 5)  # min(rank X, rank Y) correlations


def test_constant_and_duplicated_columns_do_not_count(mats):
    X, Y = mats
    padded = np.c_[X, np.ones(len(X)), X[:, :2]]  # a constant column and two copies: the same column space
    assert len(centred(padded).s) == 8
    assert cca(padded, Y)[0] == pytest.approx(cca(X, Y)[0], abs=1e-8)  # CCA sees the column space only
    assert pwcca(Y, padded) == pytest.approx(pwcca(Y, X), abs=1e-8)  # so does PWCCA on the reference side
    assert np.isnan(linear_cka(np.ones((10, 3)), X[:10]))  # no variance: undefined, not a number


def test_a_damaged_cache_is_rebuilt(tmp_path):
    from embryo.runs.run import list_steps
    from embryo.train.fixtures import fixture_run
    run = tmp_path / "run"
    shutil.copytree(fixture_run(), run, ignore=shutil.ignore_patterns("results.sqlite*", "figures", "resume", "cache", "logs"))
    step = list_steps(run)[-1]
    reps, kept = representations(run, step, max_tokens=100)
    cache_file(run, step).write_bytes(b"not a zip file")
    again, _ = representations(run, step, max_tokens=100)
    assert (again == reps).all() and np.load(cache_file(run, step))["reps"].shape == reps.shape
    rows = evaluate_step(run, step, max_tokens=100, write=False)
    assert (rows[rows.metric.str.endswith("_final")].value.round(9) == 1).all()  # the final step against itself


@pytest.mark.parametrize("bundle", ["figures", "figures/mature", "figures/bert-tiny-mature"])
def test_committed_runs_place_the_trained_reference(bundle):
    "The committed similarity results hold the trained BERT's CKA to each final layer, and the settle table and verdict read it."
    from pathlib import Path
    import pandas as pd
    from embryo.runs.series import REFERENCE
    from embryo.analyses.similarity import similarity_results, verdict
    root = Path(__file__).resolve().parents[1] / bundle
    df = similarity_results(root / "run")
    tr = df[df.metric == "cka_trained"]
    assert len(tr) == df.layer.nunique() and (tr.step == df.final_step.max()).all()  # one per layer, at the final step
    assert tr.value.between(0.05, 0.95).all()  # neither the same model nor unrelated noise
    t = pd.read_csv(root / "table_similarity_settle.csv", index_col="layer")
    assert list(t[f"CKA of {REFERENCE['name']} to final"].round(6)) == list(tr.sort_values("layer").value.round(6))
    assert f"A trained BERT ({REFERENCE['name']}" in verdict(root / "run") and verdict(root / "run") in (root / "table_similarity_settle.md").read_text()
