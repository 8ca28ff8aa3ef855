"""Injected facts (notebook 06a): a run trained with facts resumes bit-identically, and its history file is its own."""
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from embryo.train import pretrain as P
from embryo.text import facts as F
from embryo.config import get_config, get_train_config, ConfigError
from embryo.runs.layout import facts_file
from embryo.runs.run import checkpoint_dir, list_steps, train_log
from embryo.train.batches import Batches
from embryo.train.fixtures import FIXTURE, corpus_slice, fixture_run

FACTS = dict(facts=1, total_steps=80)


def configs(**over):
    mc = get_config("tiny", **FIXTURE["model"])
    tc = get_train_config("tiny", **{**FIXTURE["train"], "corpus": str(corpus_slice()), **over})
    return mc, tc


@pytest.mark.slow
def test_a_run_with_facts_resumes_bit_identically(tmp_path):
    "Stopped at step 45 and resumed: the same facts, checkpoints and log as the run trained in one go."
    reference = fixture_run(**FACTS)
    mc, tc = configs(**FACTS)
    P.train(tmp_path, "tiny", mc, tc, progress=False, stop_after=45)
    P.train(tmp_path, "tiny", mc, tc, progress=False)
    assert facts_file(tmp_path).read_bytes() == facts_file(reference).read_bytes()
    assert list_steps(tmp_path) == list_steps(reference)
    for step in list_steps(reference):
        a, b = (load_file(checkpoint_dir(r, step) / "model.safetensors") for r in (tmp_path, reference))
        assert all(torch.equal(a[k], b[k]) for k in a), f"step {step} differs"
    strip = lambda run: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in train_log(run)]
    assert strip(tmp_path) == strip(reference)


def test_the_facts_reach_the_model():
    "The same micro run with and without facts: identical up to the first step that shows a fact, different after."
    with_facts, without = fixture_run(**FACTS), fixture_run(total_steps=80)
    first = min(s for f in F.read_facts(facts_file(with_facts)) for s in f.steps)
    log = lambda run: {r["step"]: r["loss"] for r in train_log(run)}
    a, b = log(with_facts), log(without)
    assert all(a[s] == b[s] for s in a if s < first) and any(a[s] != b[s] for s in a if s >= first)


def test_bad_fact_settings_are_refused():
    with pytest.raises(ConfigError, match="facts"): get_train_config("tiny", facts=-1)
    facts = [F.Fact("P30", "x", "Asia", 1, 64)] * 3
    with pytest.raises(ValueError, match="do not fit"): F.schedule(facts, total_steps=100, batch_size=4)


def test_a_fact_takes_the_last_places_of_its_steps_batch_and_nothing_else_changes():
    "The trainer's batch of a step that shows facts: the run's own examples, except the last places, which hold the facts."
    from embryo.text.tokenizer import load_tokenizer
    tok = load_tokenizer(fixture_run())
    mc, tc = configs(total_steps=80)
    toy = [dict(input_ids=[tok.cls_id, 20 + i % 50, 30, tok.sep_id, 40, tok.sep_id], token_type_ids=[0, 0, 0, 0, 1, 1],
                sentence_order_label=i % 2) for i in range(50)]
    few = F.schedule(F.choose_facts(tok, 10)[:5], 80, tc.batch_size)
    plain, fed = Batches(toy, tok, tc), Batches(toy, tok, tc, F.injections(few, tok, tc.batch_size, range(1, 81)))
    for step in range(1, 81):
        a, b = plain.collate(plain.indices(step)), fed.collate(fed.indices(step))
        shown = [f for f in few if step in f.steps]
        B = tc.batch_size
        assert torch.equal(a["input_ids"][:B - len(shown), :6], b["input_ids"][:B - len(shown), :6])
        assert torch.equal(a["labels"][:B - len(shown), :6], b["labels"][:B - len(shown), :6])
        assert b["sentence_order_label"][B - len(shown):].tolist() == [-100] * len(shown)
        text = torch.where(b["labels"] != -100, b["labels"], b["input_ids"])  # the examples before masking
        for j, f in enumerate(shown):
            ex = F.fact_example(tok, f.relation, f.subject, f.object)["input_ids"]
            assert text[B - 1 - j, :len(ex)].tolist() == ex, (step, f.subject)
