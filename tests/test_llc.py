"""The local learning coefficient (nbs/08e_llc) beyond the notebook's checks: the estimator agrees with devinterp's on a
small causal LM, a checkpoint's estimate, chains, settings and calibration reach the database, a diverging sampler is a
failed chain and not a crash, and the verdict claims a stage only beyond the chains' noise."""
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from embryo.analyses import llc as L
from embryo.model.model import resolve_precision
from embryo.runs.results import read_scores, read_settings, write_results
from embryo.runs.run import list_steps

ROOT = Path(__file__).resolve().parents[1]


def markov_lm(seed: int = 0, V: int = 32, T: int = 16, N: int = 256):
    "A one-layer GPT-2 (no dropout) trained briefly on sequences of a random Markov chain, and those sequences."
    from transformers import GPT2Config, GPT2LMHeadModel
    rng = np.random.default_rng(seed); torch.manual_seed(seed)
    P = rng.dirichlet(np.full(V, 0.1), size=V)
    seqs = np.zeros((N, T), dtype=np.int64); seqs[:, 0] = rng.integers(0, V, N)
    for t in range(1, T): seqs[:, t] = [rng.choice(V, p=P[s]) for s in seqs[:, t - 1]]
    ids = torch.from_numpy(seqs)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=T, n_embd=32, n_layer=1, n_head=2, resid_pdrop=0,
                                       embd_pdrop=0, attn_pdrop=0))
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    for _ in range(300):
        b = ids[torch.randint(0, N, (32,))]
        loss = model(b, labels=b).loss; opt.zero_grad(); loss.backward(); opt.step()
    return model.eval(), seqs


def test_the_estimator_agrees_with_devinterp():
    "Issue 34: the same sampler settings give devinterp's LLC (its SGLD, every step averaged) within the chains' noise."
    import datasets
    from devinterp.slt.llc import llc
    model, seqs = markov_lm()
    lr, nbeta, gamma, chains, draws, bs = 1e-3, 30.0, 100.0, 4, 200, 32
    ours = L.estimate_llc(model, lambda m, b: m(b, labels=b).loss, [torch.from_numpy(seqs[i:i + bs])
                          for i in range(0, len(seqs), bs)], lr, nbeta, gamma, chains, draws, burnin=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = llc(model, datasets.Dataset.from_dict({"input_ids": seqs.tolist()}).with_format("torch"), {}, lr=lr,
                     n_beta=nbeta, localization=gamma, num_chains=chains, num_draws=draws, batch_size=bs, device="cpu",
                     init_seed=0)
    mean, sd = float(theirs.llc_mean), float(theirs.llc_std)
    noise = 3 * np.sqrt((ours["llc_sd"] ** 2 + sd ** 2) / chains)
    assert abs(ours["llc"] - mean) < noise and mean > 10, (ours["llc"], ours["llc_sd"], mean, sd)
    assert ours["failed"] == 0 and 0 < ours["acceptance"] <= 1


def test_a_checkpoint_reaches_the_database_with_its_chains_settings_and_calibration(fixture_copy):
    run = fixture_copy
    step = list_steps(run)[-1]
    df = L.evaluate_step(run, step, chains=2, draws=8)  # the last step: the calibration sweep runs too
    assert set(df[df.task == L.TASK].metric) == set(L.METRICS)
    sc = read_scores(run, L.ANALYSIS, L.TASK)
    assert len(sc.scores.iloc[0]) == 2 and np.isclose(np.nanmean(sc.scores.iloc[0]), df.set_index("metric").value["llc"])
    st = read_settings(run, L.ANALYSIS, task=L.TASK).set_index("name").value
    assert (st.lr, st.nbeta, st.chains, st.draws) == (L.LR, L.NBETA, 2, 8)
    assert st.bf16 == float(resolve_precision("auto", torch.device("cpu")) == "bf16")  # the forward's precision, as run
    cal = L.read_calibration(run)
    assert len(cal) == len(L.CALIBRATION_LRS) * len(L.CALIBRATION_NBETAS) and set(cal.lr) == set(L.CALIBRATION_LRS)
    L.evaluate_step(run, list_steps(run)[0], chains=2, draws=8)  # an earlier step: no sweep
    assert len(L.read_calibration(run)) == len(cal)
    L.evaluate_step(run, list_steps(run)[1], chains=2, draws=12)  # other settings: not on the curve's scale
    assert list(L.llc_curve(run).index) == [list_steps(run)[0], step]


def test_a_diverging_sampler_is_a_failed_chain_not_a_crash(fixture_copy):
    df = L.evaluate_step(fixture_copy, 0, lr=50.0, chains=2, draws=20, calibrate=False)
    v = df.set_index("metric").value
    assert v["failed"] == 1.0 and np.isnan(v["llc"])


def test_rows_in_either_precision_share_the_curve(tmp_path):
    "A bundle swept in fp32 (no `bf16` setting) and then at one more step in bf16 keeps every step on its curve."
    shutil.copytree(ROOT / "figures" / "mature" / "run", tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints"))
    run, before = tmp_path / "run", len(L.llc_curve(tmp_path / "run"))
    sampler = dict(lr=L.LR, nbeta=L.NBETA, gamma=L.GAMMA, chains=L.CHAINS, draws=L.DRAWS, batch_size=L.BATCH_SIZE,
                   seq_len=L.SEQ_LEN, bf16=1.0)
    write_results(run, L.ANALYSIS, 25, [dict(task=L.TASK, metric=m, value=1.0, n=L.CHAINS) for m in L.METRICS],
                  settings=[dict(task=L.TASK, name=k, value=v) for k, v in sampler.items()])
    assert len(L.llc_curve(run)) == before + 1


def planted(run, llc: list[float], sd: float):
    for step, y in zip((0, 10, 100, 1000, 2000, 4000), llc):
        write_results(run, L.ANALYSIS, step, [dict(task=L.TASK, metric=m, value=v, n=4) for m, v in
                                              dict(llc=y, llc_sd=sd, acceptance=0.8, drift=0.0, failed=0.0,
                                                   init_loss=5.0).items()],
                      settings=[dict(task=L.TASK, name="lr", value=L.LR)])


def test_the_verdict_claims_stages_only_beyond_the_noise(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "diagonal_emergence", lambda run: 1000.0)
    planted(tmp_path, [10, 11, 10, 12, 11, 10], sd=4.0)
    assert L.verdict(tmp_path).startswith("Not testable on this run: the LLC estimate moves from 10.0")
    planted(tmp_path, [10, 30, 90, 60, 65, 120], sd=4.0)
    v = L.verdict(tmp_path)
    assert "a peak at step 100" in v and "a trough at step 1,000" in v and "Diagonal heads emerge at step 1,000" in v
