"""Grammar by minimal pairs (nbs/08c_grammar) beyond the notebook's checks: the generated paradigms are minimal pairs
of the size the issue asks, BLiMP's own file format is read, our pseudo-log-likelihoods are minicons' (a client nobody
here wrote), a paradigm on its floor is never called acquired, and the committed results are what the bundles give."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embryo.text.tokenizer import load_tokenizer
from embryo.config import ConfigError
from embryo.text.lexicon import brown_lexicon
from embryo.analyses.grammar import (ANALYSIS, PARADIGMS, acquisition, generate_pairs, pair_rows, pass_rate, pll,
                            read_pairs, verdict)
from embryo.runs.results import write_results

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(brown_lexicon(), 300)


def test_at_least_8_paradigms_of_300_minimal_pairs(pairs):
    "Each pair differs in exactly one word; half of each paradigm has the plural (or vowel, or participle) reading."
    df = pd.DataFrame(pairs)
    assert df.UID.nunique() >= 8 and (df.groupby("UID").size() >= 300).all()
    assert not df.duplicated(["sentence_good", "sentence_bad"]).any()
    for good, bad in zip(df.sentence_good, df.sentence_bad):
        g, b = good.lower().split(), bad.lower().split()
        assert len(g) == len(b) and sum(x != y for x, y in zip(g, b)) == 1, (good, bad)
    # no word decides a paradigm by frequency alone: the changed words swap roles within each paradigm
    for uid, g in df.groupby("UID"):
        changed = [tuple(x for x, y in zip(a.split(), b.split()) if x != y) for a, b in zip(g.sentence_good, g.sentence_bad)]
        assert len({c for c in changed}) > 1, uid


def test_reads_blimps_own_format(tmp_path):
    "A BLiMP file's lines carry more fields than we read; the paradigm is its UID. A file without the two sentences is refused."
    line = dict(sentence_good="Whose hat should Tonya wear?", sentence_bad="Whose should Tonya wear hat?", field="syntax",
                linguistics_term="filler_gap_dependency", UID="wh_questions_object_gap", simple_LM_method=True,
                one_prefix_method=False, two_prefix_method=False, lexically_identical=True, pairID="0")
    (tmp_path / "wh_questions_object_gap.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({**line, "pairID": "1"}) + "\n")
    got = read_pairs(tmp_path)
    assert list(got.paradigm) == ["wh_questions_object_gap"] * 2 and list(got.pair) == ["0", "1"]
    (tmp_path / "broken.jsonl").write_text('{"good": "a", "bad": "b"}\n')
    with pytest.raises(ConfigError, match="broken.jsonl, line 1: no sentence_good and sentence_bad"):
        read_pairs(tmp_path)


def test_ties_count_half():
    assert pass_rate([0.2, -0.2, 0.0, 0.0]) == 0.5 and pass_rate([0.00004, 1]) == 0.75  # 4e-5 rounds to a tie


def test_pll_is_minicons(pairs):
    "Issue 34: minicons' MaskedLMScorer gives the PLLs we compute, both variants, on a committed checkpoint, to 1e-4."
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from minicons import scorer
    from embryo.runs.run import find_checkpoint, load_checkpoint
    run = ROOT / "figures" / "run"
    tok = AutoTokenizer.from_pretrained(run)
    if not hasattr(type(tok), "batch_encode_plus"):  # minicons 0.3.39 calls it; transformers 5 removed it
        type(tok).batch_encode_plus = lambda self, *a, **k: self(*a, **k)
    theirs = scorer.MaskedLMScorer(AutoModelForMaskedLM.from_pretrained(find_checkpoint(run, 8000), dtype=torch.float32),
                                   "cpu", tokenizer=tok)
    sents = [p[k] for p in pairs[::150] for k in ("sentence_good", "sentence_bad")]
    sents += ["The unbelievably long souvenirs were photographed yesterday."]  # words of several pieces
    ours = pll(load_checkpoint(run, 8000, mlm=True).eval(), load_tokenizer(run), sents)
    for k, metric in enumerate(("original", "within_word_l2r")):
        got = theirs.sequence_score(sents, reduction=lambda x: x.sum(0).item(), PLL_metric=metric)
        assert np.allclose(ours[:, k], got, atol=1e-4, rtol=0), (metric, np.abs(ours[:, k] - got).max())
    assert (ours[:, 1] <= ours[:, 0] + 1e-6).sum() > len(sents) // 2  # masking the rest of a word hides evidence
    assert not np.allclose(ours[-1, 0], ours[-1, 1])


def test_a_paradigm_on_its_floor_is_never_acquired(tmp_path):
    "Of two paradigms, one rises above chance from step 100, one stays at 50% (and one beats only a 70% unigram floor)."
    rng = np.random.default_rng(0)
    pr = pd.DataFrame(dict(paradigm=["rises"] * 300 + ["flat"] * 300 + ["below_unigram"] * 300,
                           pair=[str(k) for k in range(300)] * 3, good="", bad=""))
    uni = np.r_[rng.normal(0, 1, 600), np.where(np.arange(300) < 210, 1.0, -1.0)]  # 70% on the third paradigm
    for step in (0, 10, 100, 1000):
        p = {"rises": 0.5 if step < 100 else 0.9, "flat": 0.5, "below_unigram": 0.5 if step < 100 else 0.66}
        d = np.concatenate([np.where(rng.random(300) < p[t], 1.0, -1.0) for t in ("rises", "flat", "below_unigram")])
        rows, scores = pair_rows(pr, np.stack([d, d], 1), uni)
        write_results(tmp_path, ANALYSIS, step, rows, scores=scores)
    acq = acquisition(tmp_path, resamples=300)
    assert acq.acquired["rises"] and acq.acquired_at["rises"] == 100 and acq.high["rises"] == 100
    assert not acq.acquired["flat"] and not acq.acquired["below_unigram"]
    assert acq.floor["below_unigram"] == pytest.approx(0.7)
    v = verdict(tmp_path, acq)
    assert v.startswith("1 of 3 paradigms are acquired") and "Rises at step 100 (interval" in v
    assert "Flat is not acquired on this run" in v and "Below_unigram is not acquired on this run" in v


@pytest.mark.parametrize("bundle", ["figures"])  # the mature run's bundle keeps 3 checkpoints: it needs its run again
def test_committed_grammar_results_are_what_the_bundle_gives(bundle):
    "The committed table and verdict of the quick run are what its bundled database gives."
    t = pd.read_csv(ROOT / bundle / "table_grammar_acquisition.csv", index_col="paradigm")
    got = acquisition(ROOT / bundle / "run")
    assert set(t.index) == set(PARADIGMS) and (got.pairs >= 300).all()
    assert np.allclose(t.loc[got.index, "acquired_at"], got.acquired_at, equal_nan=True)
    assert np.allclose(t.loc[got.index, "last"], got["last"]) and got.acquired.sum() >= 1
    assert verdict(ROOT / bundle / "run") in (ROOT / bundle / "table_grammar_acquisition.md").read_text()


def test_the_forward_precision_is_recorded_with_each_step(fixture_copy):
    "The sweep's default runs the forward in bf16 where the CPU has it (`bench/grammar_precision.py`); each step says which."
    import torch
    from embryo.analyses.grammar import evaluate_step
    from embryo.model.model import resolve_precision
    from embryo.runs.results import read_settings
    run, bf16 = fixture_copy, float(resolve_precision("auto", torch.device("cpu")) == "bf16")
    for step, precision, want in ((4, "fp32", 0.0), (8, "auto", bf16)):
        evaluate_step(run, step, n_pairs=20, precision=precision)
        st = read_settings(run, ANALYSIS, task="all")
        assert st[st.step == step].set_index("name").value.bf16 == want, (step, precision)
