"""Token reconstruction / mask prediction (notebook 04): papermill run for one step, idempotent rows, clear errors."""
import json
from pathlib import Path

import papermill as pm
import pytest

from embryo.text.tokenizer import load_tokenizer, preprocess_text
from embryo.runs.run import CheckpointNotFound, list_steps
from embryo.train.fixtures import fixture_run
from embryo.text.sentences import POS_CLASSES, VERB_FORMS, align, brown_class, sentence_text, tagged_sentences
from embryo.analyses.reconstruction import evaluate_step, redraw
from embryo.runs.results import read_results

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    "A copy of the fixture run, so the tests' database writes stay out of the shared one."
    import shutil
    dst = tmp_path_factory.mktemp("run") / "fixture"
    shutil.copytree(fixture_run(), dst)
    (dst / "results.sqlite").unlink(missing_ok=True)
    return dst


def test_every_class_and_form_is_found_in_heldout_brown():
    sents = tagged_sentences()
    classes = {c for s in sents for c in s.classes if c}
    forms = {f for s in sents for f in s.forms if f}
    assert classes == set(POS_CLASSES) and forms == set(VERB_FORMS)
    # the common Brown tags land where Penn would put them
    assert [brown_class(t)[0] for t in ("at", "in", "cc", "jj", "rb", "nns", "np-tl", "vbg")] == [
        "determiner", "preposition", "conjunction", "adjective", "adverb", "noun", "proper_noun", "verb"]


def test_alignment_covers_words_in_order(run):
    tok = load_tokenizer(run)
    n_words = n_aligned = 0
    for s in tagged_sentences()[:300]:
        ids, spans = align(tok, s.words)
        assert ids == tok.encode(sentence_text(s.words)[0])
        prev = 0
        for w, sp in zip(s.words, spans):
            n_words += 1
            if sp is None: continue
            n_aligned += 1
            assert sp[0] >= prev and sp[1] > sp[0]
            assert tok.decode(ids[sp[0]:sp[1]]).strip() == preprocess_text(w).strip()
            prev = sp[1]
    assert n_aligned / n_words > 0.97, (n_aligned, n_words)


def test_papermill_one_step_then_rerun_is_idempotent(run, tmp_path):
    step = list_steps(run)[-1]
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(ROOT / "nbs" / "04_reconstruction.ipynb"), str(out), cwd=str(ROOT / "nbs"),
                        parameters=dict(run_dir=str(run), step=step, max_words=40, figures_dir=str(tmp_path / "fig")),
                        progress_bar=False, kernel_name="python3")
    rows = read_results(run, "reconstruction", step=step)
    assert len(rows) > 20 and set(rows.task) == {"reconstruction", "mask_prediction", "most_frequent_token"}
    assert (tmp_path / "fig" / "fig1_reconstruction_by_pos.png").exists()
    assert (tmp_path / "fig" / "table_fig1_learning_order.md").exists()
    again = evaluate_step(run, step, max_words=40)  # the same computation from Python: same numbers, no duplicates
    rows2 = read_results(run, "reconstruction", step=step)
    assert len(rows2) == len(rows)
    merged = rows.merge(rows2, on=["task", "metric"])
    assert (merged.value_x == merged.value_y).all()
    assert len(again) == len(rows)


def test_missing_step_lists_the_steps(run):
    with pytest.raises(CheckpointNotFound, match=r"no checkpoint for step 7; it has 0, 1, 2, 4, 8"):
        evaluate_step(run, 7)


def test_figures_from_several_steps(run, tmp_path):
    for s in list_steps(run)[:3]: evaluate_step(run, s, max_words=20)
    paths = redraw(run, tmp_path)
    assert {p.name for p in paths} >= {"fig1_reconstruction_by_pos.svg", "fig7_verb_forms.png", "fig8_frequency.png"}
    md = (tmp_path / "table_fig1_learning_order.md").read_text()
    assert "function words" in md or "not testable" in md


def test_figs_7_and_8_have_verdicts_of_their_own(tmp_path, root):
    "The report gave Figs. 7 and 8 Fig. 1's verdict, so the verb-form and frequency orders were never claimed (issue 'findings')."
    import shutil
    from embryo.publish.report import report_sections
    run = shutil.copytree(root / "figures" / "run", tmp_path / "tiny", ignore=shutil.ignore_patterns("checkpoints"))
    v = {s["file"]: s["verdict"] for s in report_sections(run) if s.get("analysis") == "reconstruction"}
    assert len({v["fig1_reconstruction_by_pos"], v["fig7_verb_forms"], v["fig8_frequency"]}) == 3, v
    assert "verb forms" in v["fig7_verb_forms"] and "gerund" in v["fig7_verb_forms"], v["fig7_verb_forms"]
    assert "frequent tokens" in v["fig8_frequency"] and "1550-1599" in v["fig8_frequency"], v["fig8_frequency"]


def test_floor_rows_are_the_constant_prediction_on_the_same_words(run):
    "Issue 'findings': the most-frequent-token floor, stored with every step and measured on the words the step scored."
    step = list_steps(run)[-1]
    evaluate_step(run, step, max_words=40)
    rows = read_results(run, "reconstruction", step=step)
    floor = rows[rows.task == "most_frequent_token"].set_index("metric").value
    mask = rows[rows.task == "mask_prediction"].set_index("metric").value
    assert set(floor.index) == set(mask.index) and floor.between(0, 1).all()
    assert floor["pos/determiner"] > 0 and floor["pos/noun"] == 0  # the constant is a determiner ("the"), never a noun
    n = rows[(rows.task == "most_frequent_token") & (rows.metric == "all")].n.item()
    assert n == rows[(rows.task == "mask_prediction") & (rows.metric == "all")].n.item()


def test_mask_prediction_verdict_names_the_classes_below_their_floor(tmp_path, root):
    "The committed verdict said the order was 'reproduced' while 4 of 5 content-word classes were never learned."
    import shutil
    from embryo.analyses.reconstruction import verdict
    run = shutil.copytree(root / "figures" / "run", tmp_path / "tiny", ignore=shutil.ignore_patterns("checkpoints"))
    mask = [l for l in verdict(run).splitlines() if l.startswith("Mask prediction")][0]
    assert "not learned above the most-frequent-token floor" in mask and "noun" in mask and "adjective" in mask, mask
