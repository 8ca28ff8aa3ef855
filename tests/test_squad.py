"""SQuAD 2.0 (nbs/05a_squad.ipynb): the official-format reader and its errors, the `datasets` conversion, the official
metric against hand-computed values, windows and answer positions, the QA model in transformers, the results
database, the figure, the sweep option, `reproduce`'s skip, and the notebook under papermill."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from embryo.text.tokenizer import load_tokenizer
from embryo.runs.series_check import open_run
from embryo.analyses import squad as S
from embryo.train import pretrain as P
from embryo.runs.run import CheckpointNotFound, load_checkpoint
from embryo.runs.results import read_log, read_results, read_samples, read_settings

SQUAD = Path(__file__).parent / "data" / "squad2"  # our own paragraphs in the official SQuAD 2.0 format
FAST = dict(squad_dir=SQUAD, max_train_examples=4, progress=False)  # a few finetuning steps: plumbing, not accuracy


# --- the reader --------------------------------------------------------------------------------------------------------

def test_reader_reads_the_official_layout():
    d = S.load_squad(SQUAD)
    train, dev = d["train"], d["dev"]
    assert (len(train), len(dev)) == (18, 10)
    assert (sum(e.is_impossible for e in train), sum(e.is_impossible for e in dev)) == (6, 4)
    assert all(len(e.answers) == 1 for e in train if not e.is_impossible)  # one answer per training question
    assert [len(e.answers) for e in dev if not e.is_impossible] == [3, 3, 3, 3, 3, 2]  # several annotators on dev
    assert all(e.plausible_answers and not e.answers for e in train + dev if e.is_impossible)
    assert train[0] == S.QAExample(train[0].id, "Karrow_Point_Lighthouse", train[0].context,
                                   "When was the lighthouse at Karrow Point built?", (("1871", 44),))
    assert len({e.id for e in train + dev}) == 28
    for e in train + dev:
        for t, s in e.answers + e.plausible_answers: assert e.context[s:s + len(t)] == t


def _edit(tmp_path, change) -> Path:
    "A copy of the dev file with `change(doc)` applied."
    doc = json.loads((SQUAD / "dev-v2.0.json").read_text())
    change(doc)
    p = tmp_path / "dev-v2.0.json"
    p.write_text(json.dumps(doc))
    return p


def test_reader_errors_name_the_file_and_the_place(tmp_path):
    p = tmp_path / "dev-v2.0.json"
    p.write_text((SQUAD / "dev-v2.0.json").read_text()[:500])
    with pytest.raises(S.SquadDataError, match=r"dev-v2\.0\.json, line 1, column \d+: not valid JSON .*download complete"):
        S.read_squad(p)
    p.write_text('{"version": "v2.0",\n"data": [\n  {"title": "A", "paragraphs": []},,\n]}')
    with pytest.raises(S.SquadDataError, match=r"line 3, column 36: not valid JSON"):
        S.read_squad(p)
    qas = lambda doc: doc["data"][1]["paragraphs"][0]["qas"]
    qid = json.loads((SQUAD / "dev-v2.0.json").read_text())["data"][1]["paragraphs"][0]["qas"][2]["id"]
    with pytest.raises(S.SquadDataError, match=rf"article 2 \('Tide_mill'\), paragraph 1, question '{qid}': no 'answers' field"):
        S.read_squad(_edit(tmp_path, lambda d: qas(d)[2].pop("answers")))
    with pytest.raises(S.SquadDataError, match=r"article 2 \('Tide_mill'\), paragraph 1, question 4: no 'id' field"):
        S.read_squad(_edit(tmp_path, lambda d: qas(d)[3].pop("id")))
    with pytest.raises(S.SquadDataError, match=r"article 1 \('Honeybee'\), paragraph 1: no 'context' field"):
        S.read_squad(_edit(tmp_path, lambda d: d["data"][0]["paragraphs"][0].pop("context")))
    with pytest.raises(S.SquadDataError, match=rf"question '{qid}', answer 2: answer_start 9999 is outside the paragraph"):
        S.read_squad(_edit(tmp_path, lambda d: qas(d)[2]["answers"][1].update(answer_start=9999)))
    with pytest.raises(S.SquadDataError, match=rf"question '{qid}', answer 1: 'answer_start' is \"12\", expected int"):
        S.read_squad(_edit(tmp_path, lambda d: qas(d)[2]["answers"][0].update(answer_start="12")))
    with pytest.raises(S.SquadDataError, match=rf"question '{qid}': is_impossible is true but it has 2 answers"):
        S.read_squad(_edit(tmp_path, lambda d: qas(d)[2].update(is_impossible=True)))
    with pytest.raises(S.SquadDataError, match=r"the id was used before, at article 1, paragraph 1"):
        S.read_squad(_edit(tmp_path, lambda d: qas(d)[0].update(id=d["data"][0]["paragraphs"][0]["qas"][0]["id"])))
    with pytest.raises(S.SquadDataError, match=r"no 'is_impossible' field: a SQuAD 1.1 file\?"):
        S.read_squad(_edit(tmp_path, lambda d: [q.pop("is_impossible") for q in qas(d)]))
    (tmp_path / "only-dev").mkdir(); shutil.copy(SQUAD / "dev-v2.0.json", tmp_path / "only-dev")
    with pytest.raises(S.SquadDataError, match=r"SQuAD 2.0 train file not found: looked for .*only-dev/train-v2\.0\.json"):
        S.load_squad(tmp_path / "only-dev")
    with pytest.raises(S.SquadDataError, match=r"needs data that cannot be fetched here: pass squad_dir="):
        S.load_squad(None)


def test_datasets_rows_in_the_squad_v2_layout_convert_to_the_same_questions():
    import datasets
    train = S.load_squad(SQUAD)["train"]
    features = datasets.Features({  # squad_v2's features on the hub
        "id": datasets.Value("string"), "title": datasets.Value("string"), "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})})
    ds = datasets.Dataset.from_dict({
        "id": [e.id for e in train], "title": [e.title for e in train], "context": [e.context for e in train],
        "question": [e.question for e in train],
        "answers": [{"text": [t for t, _ in e.answers], "answer_start": [s for _, s in e.answers]} for e in train]},
        features=features)
    assert S.from_dataset(ds) == [e._replace(plausible_answers=()) for e in train]
    with pytest.raises(S.SquadDataError, match="no column answers; squad_v2 has id, title, context, question, answers"):
        S.from_dataset(ds.remove_columns("answers"))


def test_datasets_offline_gives_a_clear_error(monkeypatch, hub_offline):
    monkeypatch.setenv("HF_HOME", "/nonexistent-embryo-hf-home")
    with pytest.raises(S.SquadDataError, match=r"could not load rajpurkar/squad_v2 with `datasets`.*squad_dir=<that folder>"):
        S.load_squad("datasets")


# --- the metric --------------------------------------------------------------------------------------------------------

def test_metric_matches_hand_computed_values():
    assert S.normalize_answer("The  Eling (tide) mill, an old one.") == "eling tide mill old one"
    assert S.exact_f1("Near Southampton!", "near southampton") == (1.0, 1.0)
    assert S.exact_f1("the mill by the sea", "a mill near the sea") == (0.0, pytest.approx(2 * 2 / (3 + 3)))  # mill, sea
    assert S.exact_f1("up up down", "up down down") == (0.0, pytest.approx(2 * 2 / 6))  # up and down once each
    assert S.exact_f1("", "anything") == (0.0, 0.0) and S.exact_f1("an", "") == (1.0, 1.0)  # "an" normalises to nothing
    dev = S.load_squad(SQUAD)["dev"]
    preds = dict(zip([e.id for e in dev], ["one", "pollen", "two thousand", "", "", "the Eling", "low tide", "", "", "x"]))
    m = S.squad_metrics(dev, preds)
    # exact: one, -, two thousand, "", "", -, low tide, -, "", - = 6/10; F1 adds "pollen" against "nectar and pollen":
    # 2 x 1 / (1 + 3) = 0.5 ("the Eling" against "near Southampton", "" against "the millstones", "x" against no answer: 0)
    assert m["exact"] == pytest.approx(0.6) and m["f1"] == pytest.approx(0.65)
    assert (m["HasAns_exact"], m["HasAns_f1"], m["HasAns_total"]) == (pytest.approx(3 / 6), pytest.approx(3.5 / 6), 6)
    assert (m["NoAns_exact"], m["NoAns_f1"], m["NoAns_total"]) == (0.75, 0.75, 4)
    assert m["score"] == pytest.approx(0.625)
    q = S.QAExample("q", "", "the cat", "?", (("the", 0), ("cat", 4)))
    assert S.gold_texts(q) == ["cat"]  # "the" is empty once normalised, so it is not a gold answer
    assert S.squad_metrics([q._replace(answers=(("the", 0),))], {"q": ""})["exact"] == 1.0  # nothing left: no answer


# --- windows, the model, predictions ----------------------------------------------------------------------------------

@pytest.mark.parametrize("max_len", [40, 64])
def test_answer_pieces_decode_to_the_answer_and_windows_without_it_point_at_cls(fixture_copy, max_len):
    tok = load_tokenizer(fixture_copy)
    train = S.load_squad(SQUAD)["train"]
    feats, unread = S.features(tok, train, max_len)
    assert unread == set() and all(len(f.input_ids) <= max_len for f in feats)
    n_held = 0
    for k, ex in enumerate(train):
        mine = [f for f in feats if f.example == k]
        pieces = sum(map(len, tok.encode_batch(ex.context.split())))
        assert sum(sum(f.max_context) for f in mine) == pieces  # every paragraph piece is trusted in exactly one window
        holding = [f for f in mine if f.start]
        assert all(f.end == 0 for f in mine if not f.start)
        if ex.is_impossible: assert not holding; continue
        q_len, stride = S.window_settings(max_len)
        room = max_len - 3 - min(q_len, len(tok.encode(ex.question)))
        if len(tok.encode(ex.answers[0][0])) <= room - stride + 1: assert holding, ex.question  # some window holds it
        n_held += bool(holding)
        for f in holding:
            assert f.input_ids[0] == tok.cls_id and f.token_type_ids[f.start] == 1 and f.start <= f.end
            assert S.normalize_answer(tok.decode(f.input_ids[f.start:f.end + 1])) == S.normalize_answer(ex.answers[0][0])
            assert S.normalize_answer(S.span_text(ex, f, f.start, f.end)) == S.normalize_answer(ex.answers[0][0])
    assert len(feats) > len(train) and n_held >= 10  # long paragraphs take several windows; most answers fit one


def test_a_paragraph_that_does_not_read_the_answer_is_counted(fixture_copy):
    tok = load_tokenizer(fixture_copy)
    ok = S.QAExample("a", "", "The mill grinds flour.", "What does it grind?", (("flour", 16),))
    feats, unread = S.features(tok, [ok, ok._replace(id="b", answers=(("wheat", 16),))], 64)
    assert unread == {1} and [f.example for f in feats] == [0, 1] and feats[0].start > 0 and feats[1].start == 0


def _random_albert(**kw):
    from embryo.config import get_config
    from embryo.model.model import AlbertForPreTraining
    torch.manual_seed(0)
    return AlbertForPreTraining(get_config("tiny", vocab_size=1000, num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                           intermediate_size=128, **kw)).eval()


@pytest.mark.parametrize("source", ["fixture", "E==H"])
def test_qa_model_state_dict_loads_into_transformers_with_equal_logits(fixture_copy, source):
    import transformers
    from embryo.model.model import to_hf_config
    pre = load_checkpoint(fixture_copy, 30) if source == "fixture" else _random_albert(embedding_size=64)
    qa = S.AlbertForQuestionAnswering(pre.albert).eval()
    torch.nn.init.normal_(qa.qa_outputs.bias)  # a bias that is not zero, so that it must load too
    hf = transformers.AlbertForQuestionAnswering(to_hf_config(pre.config)).eval()
    hf.load_state_dict(qa.hf_state_dict(), strict=True)
    tok = load_tokenizer(fixture_copy)
    feats, _ = S.features(tok, S.load_squad(SQUAD)["dev"][:3], 64)
    b = S.collate([(f.input_ids, f.token_type_ids) for f in feats])
    with torch.no_grad(): ours, theirs = qa(**b), hf(**b)
    assert b["attention_mask"].min() == 0  # padded: the mask is used
    torch.testing.assert_close(ours[..., 0], theirs.start_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours[..., 1], theirs.end_logits, atol=1e-4, rtol=1e-4)


def test_the_null_answer_wins_only_when_its_score_is_higher(fixture_copy):
    tok = load_tokenizer(fixture_copy)
    dev = S.load_squad(SQUAD)["dev"]
    feats, _ = S.features(tok, dev[5:6], 128)  # "Where is the Eling tide mill?": one window at 128
    (f,) = feats
    words = [dev[5].context[a:b] for a, b in f.offsets]
    near = f.context_start + words.index("near")
    lg = np.full((len(f.input_ids), 2), -5.0, dtype=np.float32)
    lg[near, 0], lg[near + 1, 1], lg[0] = 4.0, 4.0, 3.9  # "near Southampton" scores 8, [CLS] 7.8
    assert S.predict_answers(dev[5:6], feats, [lg]) == {dev[5].id: "near Southampton"}
    lg[0] = 4.1  # [CLS] 8.2
    assert S.predict_answers(dev[5:6], feats, [lg]) == {dev[5].id: ""}
    assert S.best_span(lg, f, max_answer_length=1)[1:] in {(near, near), (near + 1, near + 1)}


# --- one checkpoint, the database, figures, the sweep ------------------------------------------------------------------

def test_missing_step_and_missing_data(fixture_copy):
    with pytest.raises(CheckpointNotFound, match="has no checkpoint for step 25; it has 0, 1, 2, 4, 8, 16, 20, 30"):
        S.evaluate_step(fixture_copy, 25, squad_dir=SQUAD)
    with pytest.raises(S.SquadDataError, match="pass squad_dir=<a folder with train-v2.0.json and dev-v2.0.json>"):
        S.evaluate_step(fixture_copy, 30)


def test_a_step_is_stored_replaced_and_drawn(fixture_copy, tmp_path):
    rows = S.evaluate_step(fixture_copy, 30, **FAST)
    S.evaluate_step(fixture_copy, 0, seed=2, **FAST)
    db = read_results(fixture_copy, S.ANALYSIS, step=30)
    assert set(db.task) == {"squad_v2"} and len(db) == len(rows)
    mean = db[db.seed == -1]
    v = dict(zip(mean.metric, mean.value)); n = dict(zip(mean.metric, mean.n))
    assert {"exact", "f1", "score", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "chance", "train_loss"} <= set(v)
    assert db[db.seed >= 0][["seed", "metric", "value"]].values.tolist() == [[0, "score", v["score"]]]  # the one seed's score
    assert read_results(fixture_copy, S.ANALYSIS, step=0, seed=2).metric.tolist() == ["score"]
    st = read_settings(fixture_copy, S.ANALYSIS, step=30)
    st = dict(zip(st.name, st.value))  # the finetuning settings: their own table, as glue's
    assert {"train_steps", "learning_rate", "max_seq_length", "doc_stride", "train_windows"} <= set(st)
    assert v["score"] == pytest.approx((v["exact"] + v["f1"]) / 2) and v["chance"] == pytest.approx(0.4)
    assert (n["score"], n["HasAns_f1"], n["NoAns_exact"]) == (10, 6, 4)
    assert (st["learning_rate"], st["train_examples"], st["max_seq_length"], st["seed"]) == (3e-5, 4, 64, 0)
    s = read_samples(fixture_copy, S.ANALYSIS)
    preds = json.loads(s[(s.item == "predictions") & (s.step == 30)].text.iloc[0])
    dev = S.load_squad(SQUAD)["dev"]
    assert set(preds) == {e.id for e in dev}
    assert all(p == "" or p in e.context for e, p in zip(dev, (preds[e.id] for e in dev)))  # answers are paragraph text
    assert S.squad_metrics(dev, preds)["score"] == pytest.approx(v["score"])  # the stored predictions give the stored score
    n_all = len(read_results(fixture_copy, S.ANALYSIS))
    S.evaluate_step(fixture_copy, 30, **FAST)
    assert len(read_results(fixture_copy, S.ANALYSIS)) == n_all  # a rerun replaces its own rows
    paths = S.redraw(fixture_copy, tmp_path)
    assert sorted(p.name for p in paths) == ["fig12_squad.png", "fig12_squad.svg", "table_squad_scores.csv", "table_squad_scores.md"]
    assert "Fig. 12 (SQuAD 2.0 panel)" in (tmp_path / "fig12_squad.svg").read_text()
    md = (tmp_path / "table_squad_scores.md").read_text()
    assert "| 30 |" in md and "| 0 |" in md and md.rstrip().endswith("| 40 |")  # chance, the last column
    text = S.verdict(fixture_copy)
    assert text.startswith("The SQuAD 2.0 score (mean of EM and F1) is") and "against 40.0 for answering no question" in text


def test_verdict_follows_the_data(tmp_path):
    from embryo.runs.results import write_results
    def store(scores):
        for step, score in zip((0, 100, 1000, 10000), scores):
            write_results(tmp_path, S.ANALYSIS, step, [dict(task=S.TASK, metric="score", value=score),
                                                       dict(task=S.TASK, metric="chance", value=0.4)])
        return S.verdict(tmp_path)
    assert store((0.40, 0.55, 0.60, 0.61)).endswith("90% of the rise to the last step is there by step 1000, in the first half of "
                                                    "the run, as the paper finds (appendix E.4).")
    assert store((0.40, 0.45, 0.50, 0.61)).endswith("is there by step 10000, later than the first half of the run, unlike "
                                                    "the paper's early rise (appendix E.4).")
    assert "learns to abstain but not to find answers" in store((0.40, 0.405, 0.41, 0.415))
    assert "neither finds answers nor abstains" in store((0.10, 0.15, 0.2, 0.3))
    # rule 1: a peak the run falls back from is judged where it ends (issue 73)
    assert "the last step does not beat that all-null baseline" in store((0.40, 0.60, 0.45, 0.41))


def test_sweep_runs_squad_with_its_folder_and_reproduce_skips_it(fixture_copy, tmp_path, monkeypatch, capsys):
    import embryo.publish.report as R
    import embryo.publish.pipeline as PL
    import embryo.analyses.sweep as W
    assert W.ANALYSES["squad"] == "05a_squad" and "squad" in W.available_analyses()
    run = tmp_path / "r"
    shutil.copytree(fixture_copy, run, ignore=shutil.ignore_patterns("results.sqlite*"))
    monkeypatch.chdir(SQUAD.parent)  # a folder relative to where the sweep is started, while papermill runs in nbs/
    t = W.sweep(open_run(run), ["squad"], steps=[8], mode="papermill", progress=False,
                options={"squad": dict(squad_dir="squad2", max_train_examples=4)})
    assert t.loc["squad", 8] == "done", read_log(run).error.tolist()
    assert set(read_results(run, "squad").step) == {8}
    with pytest.raises(W.SweepError, match="squad has no option glue_dir"):
        W.sweep(open_run(run), ["squad"], steps=[8], mode="inprocess", options={"squad": dict(glue_dir="x")}, progress=False)
    # reproduce, offline and without SQuAD: one line saying how to add it, and the rest goes on
    monkeypatch.setattr(P, "pretrain_from_args", lambda args: None)
    monkeypatch.setattr(W, "available_analyses", lambda: ["squad"])
    monkeypatch.setattr(PL, "available_analyses", lambda: ["squad"])  # reproduce and notebook_pages look it up here
    monkeypatch.setattr(R, "available_analyses", lambda: ["squad"])  # and redraw_all here
    args = type("Args", (), dict(figures=str(tmp_path / "figs"), run_dir=str(run), preset="tiny", mode="inprocess"))()
    PL.reproduce(args)
    out = capsys.readouterr().out
    assert "== squad: skipped: SQuAD 2.0 is not in the built-in data (no package carries it); add it with `embryo sweep --run" in out
    assert "--option squad.squad_dir=<a folder with train-v2.0.json and dev-v2.0.json>" in out
    assert (tmp_path / "figs" / "index.html").exists()
    assert set(read_results(run, "squad").step) == {8}  # nothing run for squad


def test_notebook_runs_one_step_under_papermill(fixture_copy, tmp_path):
    import papermill as pm
    nb = Path(__file__).parents[1] / "nbs" / "05a_squad.ipynb"
    pm.execute_notebook(str(nb), str(tmp_path / "out.ipynb"), kernel_name="python3", progress_bar=False, cwd=str(nb.parent),
                        parameters=dict(run_dir=str(fixture_copy), step=16, squad_dir=str(SQUAD), max_train_examples=6,
                                        figures_dir=str(tmp_path / "figs")))
    db = read_results(fixture_copy, S.ANALYSIS, step=16)
    st = read_settings(fixture_copy, S.ANALYSIS, step=16)
    assert set(db.task) == {"squad_v2"} and st[st.name == "train_examples"].value.iloc[0] == 6
    assert (tmp_path / "figs" / "fig12_squad.png").stat().st_size > 0
    out = json.loads((tmp_path / "out.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in out["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
    assert "The SQuAD 2.0 score (mean of EM and F1)" in text
