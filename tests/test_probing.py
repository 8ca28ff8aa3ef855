"""Edge probing (nbs/06b_probe_tasks, 06c_span_features, 06d_probes and 07_probing): the CoNLL-2012 reader on our own
and on real OntoNotes files, the tasks, the features and their cache, the probes and control tasks, evaluate_step on
the fixture run, the figures."""
import os
import shutil
from pathlib import Path

import numpy as np
import papermill as pm
import pytest

from embryo.text.tokenizer import load_tokenizer
from embryo.text.sentences import brown_sentences, brown_base_tag
from embryo.text.conll import ConllError, ontonotes_sample, read_conll2012
from embryo.analyses import probing as PR
from embryo.analyses import probe_tasks as PT
from embryo.analyses import span_features as SF
from embryo.analyses import probes as PB
from embryo.runs.run import CheckpointNotFound, list_steps, load_checkpoint
from embryo.runs.results import read_results

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "probing" / "conll-2012"
SMALL = dict(max_sentences=200, max_train=300, max_dev=60, max_test=100)  # small caps: the tests check plumbing, not scores


# --- the CoNLL-2012 reader ---------------------------------------------------------------------------------------------

def test_reader_on_our_files_in_the_release_layout():
    sents = read_conll2012(DATA)
    assert [s.words for s in sents] == [["It", "rained", "."], ["Paris", "is", "big", "."],
                                        ["Ann", "said", "she", "left", "Boston", "."], ["The", "dog", "barked", "."]]
    ann = sents[2]
    assert ann.constituents == [(0, 6, "TOP"), (0, 6, "S"), (0, 1, "NP"), (1, 5, "VP"), (2, 5, "SBAR"), (2, 5, "S"),
                                (2, 3, "NP"), (3, 5, "VP"), (4, 5, "NP")]
    assert ann.srl == [(1, [(0, 1, "ARG0"), (2, 5, "ARG1")]), (3, [(2, 3, "ARG0"), (4, 5, "ARG1")])]
    assert ann.mentions == [(0, 1, 1), (2, 3, 1), (4, 5, 2)] and ann.entities == [(0, 1, "PERSON"), (4, 5, "GPE")]
    assert sents[0].srl == [(1, [])] and sents[0].mentions == []
    tasks = PT.ontonotes_tasks(DATA)
    pos = tasks["pos"]
    assert {s: int((pos.splits == s).sum()) for s in PT.SPLITS} == {"train": 10, "dev": 3, "test": 4}  # by folder name
    assert sorted(tasks["srl"].labels) == sorted(["ARG0", "ARG1", "ARG0", "ARG1", "ARG0", "ARG1", "ARG2"])
    i = tasks["srl"].labels.index("ARG2")
    assert tasks["srl"].spans[i].tolist() == [1, 2, 2, 3] and tasks["srl"].keys[i] == "big"  # predicate 'is', argument 'big'
    co = tasks["coref"]  # pairs of mentions in one sentence: (Ann, she) corefer, (Ann, Boston) and (she, Boston) do not
    assert sorted(co.labels) == ["0", "0", "1"] and co.spans.tolist()[0] == [0, 1, 2, 3]
    assert "TOP" not in tasks["const"].labels


def test_reader_on_the_real_ontonotes_sample():
    d = ontonotes_sample()
    s, = read_conll2012(d / "conll_2012" / "subdomain2" / "example.gold_conll")
    assert " ".join(s.words) == "and that wildness is still in him , as it is with all children ."
    assert s.pos[:4] == ["CC", "DT", "NN", "VBZ"] and s.pos[-2:] == ["NNS", "."]
    # (TOP (S and (NP that wildness) (VP is (ADVP still) (PP in (NP him)) , (SBAR as (S (NP it) (VP is (PP with (NP all children)))))) .))
    assert s.constituents == [(0, 15, "TOP"), (0, 15, "S"), (1, 3, "NP"), (3, 14, "VP"), (4, 5, "ADVP"), (5, 7, "PP"),
                              (6, 7, "NP"), (8, 14, "SBAR"), (9, 14, "S"), (9, 10, "NP"), (10, 14, "VP"), (11, 14, "PP"),
                              (12, 14, "NP")]
    assert s.srl == [(3, [(0, 1, "ARGM-DIS"), (1, 3, "ARG1"), (4, 5, "ARGM-TMP"), (5, 7, "ARG2"), (8, 14, "ARGM-ADV")]),
                     (10, [(9, 10, "ARG1"), (11, 14, "ARG2")])]
    assert s.mentions == [(6, 7, 14)]  # 'him'
    first = read_conll2012(d / "conll_2012" / "subdomain" / "example.gold_conll")[0]
    assert first.words[:4] == ["Mali", "government", "officials", "say"] and first.entities == [(0, 1, "GPE")]
    assert first.mentions == [(4, 7, 1), (4, 8, 3)]  # 'the woman 's' inside 'the woman 's confession'
    assert (0, 2, "NML") in first.constituents and (4, 10, "SBAR") in first.constituents
    coref = read_conll2012(d / "coref" / "coref.gold_conll")
    assert len(coref) == 7 and coref[0].words[23:25] == ["Hong", "Kong"] and (23, 25, 23) in coref[0].mentions
    assert len(read_conll2012(d / "srl" / "nt_6401.gold_conll")) == 37
    assert len(read_conll2012(d)) == 49  # all four files


def test_reader_names_file_and_line_of_errors(tmp_path):
    good = (DATA / "test" / "demo.gold_conll").read_text()
    f = tmp_path / "bad.gold_conll"
    f.write_text(good.replace("(ADJP*))", "(ADJP*)"))
    with pytest.raises(ConllError, match=r"bad\.gold_conll, line 2: the parse bits of this sentence do not balance"):
        read_conll2012(f)
    f.write_text(good.replace("(ARG2*)", "(ARG2*"))
    with pytest.raises(ConllError, match="still open"):
        read_conll2012(f)
    f.write_text(good.replace("(V*)", "*"))
    with pytest.raises(ConllError, match=r"argument column 12 has 0 \(V\*\) predicates"):
        read_conll2012(f)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .*_conll files under"):
        read_conll2012(tmp_path / "empty")


# --- built-in tasks, control labels, probes -----------------------------------------------------------------------------

def test_builtin_tasks_are_fixed_and_aligned_with_the_words():
    a = PT.builtin_tasks(**SMALL)
    b = PT.builtin_tasks(**SMALL)
    assert list(a) == list(PT.BUILTIN_TASKS)
    for name in a:
        assert a[name].labels == b[name].labels and (a[name].spans == b[name].spans).all()  # seeded: the same targets
        assert (a[name].splits == "train").sum() <= 300 and (a[name].splits == "test").sum() <= 100
    pos = a["pos_brown"]
    sents = brown_sentences(200)
    for k in range(0, len(pos), 37):  # the label is the gold Brown tag of that word, without its suffixes
        t, s = pos.text_ids[k], pos.spans[k, 0]
        assert pos.labels[k] == brown_base_tag(sents[t][1][s]) and pos.keys[k] == sents[t][0][s].lower()
    assert set(a["const_silver"].labels) <= {"S", "SBAR", "VP", "NP", "PP", "ADJP", "ADVP", "X"}
    assert a["dep_silver"].pairs and "nsubj" in a["dep_silver"].labels and "PERSON" in a["ner_silver"].labels


def test_control_labels_one_per_word_type_in_the_label_distribution():
    rng = np.random.default_rng(1)
    keys = [f"w{i}" for i in rng.integers(0, 300, 5000)]
    labels = list(rng.choice(["a", "b", "c"], 5000, p=[0.6, 0.3, 0.1]))
    train = np.arange(5000) < 4000
    ctl = PB.control_labels(keys, labels, train)
    assert all(len({c for k2, c in zip(keys, ctl) if k2 == k}) == 1 for k in set(keys[:50]))
    per_type = dict(zip(keys, ctl))
    share = {c: list(per_type.values()).count(c) / len(per_type) for c in "abc"}
    assert abs(share["a"] - 0.6) < 0.1 and abs(share["c"] - 0.1) < 0.06
    assert PB.control_labels(keys, labels, train) == ctl  # seeded


def test_probes_find_the_layer_that_holds_the_label():
    rng = np.random.default_rng(0)
    n = 1200; y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, 3, 6)).astype(np.float32)
    X[:, 2, 0] += 5 * (y == 1); X[:, 2, 1] += 5 * (y == 2)  # only layer 2 knows the label
    split = np.array(["train"] * 800 + ["dev"] * 150 + ["test"] * 250)
    pred = PB.train_probes(X, np.stack([y, rng.integers(0, 3, n)]), split, 3)
    assert pred.shape == (2, 3, 250)
    f1 = [PB.micro_f1(y[950:], pred[0, l]) for l in range(3)]
    assert f1[2] > 0.95 and max(f1[:2]) < 0.5, f1


# --- one checkpoint of the fixture run -----------------------------------------------------------------------------------

def test_missing_step_and_unknown_task_are_named(fixture_copy):
    with pytest.raises(CheckpointNotFound, match="has no checkpoint for step 25; it has 0, 1, 2, 4, 8, 16, 20, 30"):
        PR.evaluate_step(fixture_copy, 25)
    with pytest.raises(PT.UnknownTask, match="unknown probing task.s. chunk; the tasks are pos, const, srl, coref, pos_brown"):
        PR.evaluate_step(fixture_copy, 30, tasks="pos_brown,chunk")
    with pytest.raises(PT.UnknownTask, match="need OntoNotes 5.0 CoNLL-2012 files"):
        PR.evaluate_step(fixture_copy, 30, tasks=["srl"])
    with pytest.raises(ValueError, match=r"layer\(s\) \[7\] out of range: this model has layers 0 \(embeddings\) to 2"):
        PR.evaluate_step(fixture_copy, 30, layers="0,7")


def test_papermill_one_step_then_rerun_is_idempotent(fixture_copy, tmp_path):
    step = list_steps(fixture_copy)[-1]
    pm.execute_notebook(str(ROOT / "nbs" / "07_probing.ipynb"), str(tmp_path / "out.ipynb"), cwd=str(ROOT / "nbs"),
                        parameters=dict(run_dir=str(fixture_copy), step=step, tasks="pos_brown,dep_silver,ner_silver",
                                        figures_dir=str(tmp_path / "fig")),
                        progress_bar=False, kernel_name="python3")
    rows = read_results(fixture_copy, PR.ANALYSIS, step=step)
    assert set(rows.task) == {"pos_brown", "dep_silver", "ner_silver"}
    f1 = rows[rows.metric == "f1"]
    assert set(f1.layer) == {0, 1, 2} and f1.value.between(0, 1).all() and (f1.n > 0).all()
    sel = rows.pivot_table(index=["task", "layer"], columns="metric", values="value").dropna(subset=["f1"])
    assert np.allclose(sel.selectivity, sel.f1 - sel.control_f1)
    floor = rows[rows.metric == "word_identity_f1"]  # issue 'findings': each task's floor, on the same test targets
    assert sorted(floor.task) == sorted({"pos_brown", "dep_silver", "ner_silver"}) and (floor.layer == -1).all()
    assert floor.value.between(0, 1).all() and (floor.n.values == rows[(rows.metric == "f1") & (rows.layer == 0)].set_index(
        "task").n.reindex(floor.task).values).all()
    assert SF.cache_file(fixture_copy, step).exists()
    assert {p.stem for p in (tmp_path / "fig").iterdir()} >= {r["file"] for r in PR.REPORT}
    again = PR.evaluate_step(fixture_copy, step, tasks="pos_brown,dep_silver,ner_silver")  # from the feature cache
    rows2 = read_results(fixture_copy, PR.ANALYSIS, step=step)
    assert len(rows2) == len(rows) == len(again)
    m = rows.merge(rows2, on=["task", "layer", "metric"])
    assert (m.value_x == m.value_y).all()  # seeded probes on the same float16 features: the same numbers


def test_feature_cache_is_dropped_when_the_checkpoint_changes(fixture_copy):
    tok = load_tokenizer(fixture_copy)
    model = load_checkpoint(fixture_copy, 0)
    tasks = PT.builtin_tasks(["pos_brown"], max_sentences=30, max_train=40, max_dev=10, max_test=10)
    x1, k1 = SF.task_features(model, tok, tasks, run=fixture_copy, step=0)["pos_brown"]
    x2, _ = SF.task_features(model, tok, tasks, run=fixture_copy, step=0)["pos_brown"]
    assert k1.mean() > 0.9 and (x1 == x2).all()
    w = fixture_copy / "checkpoints" / "step_0000000" / "model.safetensors"
    os.utime(w, ns=(w.stat().st_atime_ns, w.stat().st_mtime_ns + 10**9))  # a new file in its place
    f = SF.cache_file(fixture_copy, 0)
    before = f.stat().st_mtime_ns
    x3, _ = SF.task_features(model, tok, tasks, run=fixture_copy, step=0)["pos_brown"]
    assert f.stat().st_mtime_ns != before and (x3 == x1).all()  # recomputed (same weights here, so the same values)


def test_ontonotes_tasks_run_and_figures_say_what_is_absent(fixture_copy, tmp_path):
    rows = PR.evaluate_step(fixture_copy, 0, tasks="pos,srl", ontonotes=ontonotes_sample(), max_epochs=5)
    assert set(rows.task) == {"pos", "srl"}
    # one step is one evaluation: a rerun with other tasks replaces it whole, so step 0 is evaluated on all four at once
    PR.evaluate_step(fixture_copy, 0, tasks="pos,srl,pos_brown,const_silver", ontonotes=ontonotes_sample(), max_epochs=5, **SMALL)
    PR.evaluate_step(fixture_copy, 30, tasks="pos_brown,const_silver", max_epochs=5, **SMALL)
    paths = PR.redraw(fixture_copy, tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"{r['file']}.{e}" for r in PR.REPORT
                                                   for e in (("md", "csv") if r["file"].startswith("table") else ("png", "svg")))
    svg = (tmp_path / "fig10_probing_const_srl_coref.svg").read_text()
    assert "no coreference results in this run" in svg and "const_silver" in svg  # srl is there, coref is not
    md = (tmp_path / "table_probing_selectivity.md").read_text()
    assert "| pos_brown | 0 |" in md and "selectivity" in md
    assert PR.verdict(fixture_copy).startswith("At step 30 the probes on layer 2 are scored by test micro-F1")


def test_best_layer_gain_names_the_layer_and_where_it_levels_off():
    import pandas as pd
    rows = [dict(task="pos_brown", metric="f1", step=s, layer=l, value=v) for s, vals in
            ((0, (0.30, 0.30)), (100, (0.31, 0.50)), (1000, (0.32, 0.58)), (5000, (0.33, 0.60))) for l, v in zip((1, 2), vals)]
    s = PR.best_layer_gain(pd.DataFrame(rows), "pos_brown")
    assert s.startswith("On pos_brown the best layer is 2: F1 0.30 at step 0 and 0.60 at step 5000 (+0.30)")
    assert "90% of that gain by step 1000 (20% of the run)" in s
    one = pd.DataFrame([dict(task="pos_brown", metric="f1", step=0, layer=1, value=0.3)])
    assert "Only step 0" in PR.best_layer_gain(one, "pos_brown")


def test_verdict_leaves_out_probes_that_never_clear_their_floor(tmp_path, root):
    "Issue 'findings': a probe curve at its word-identity floor tells nothing of what pretraining built."
    import shutil, sqlite3
    run = shutil.copytree(root / "figures" / "run", tmp_path / "tiny", ignore=shutil.ignore_patterns("checkpoints"))
    with sqlite3.connect(run / "results.sqlite") as con:
        con.execute("DELETE FROM results WHERE metric = 'word_identity_f1'")
        con.execute("INSERT INTO results SELECT analysis, step, task, -1, -1, -1, 'word_identity_f1', 0.99, n, created_at "
                    "FROM results WHERE analysis = 'probing' AND metric = 'f1' AND layer = 0")
    v = PR.verdict(run)
    assert "not testable on this run" in v and "reproduced" not in v.split(". On ")[0], v
    assert "a floor of 0.99" in v, v
