"""ELECTRA through the pipeline (nbs/01a_electra.ipynb) and BERT's two-phase schedule (nbs/03_pretrain.ipynb): checkpoints
that transformers' ELECTRA classes load with identical outputs, exact resume, and a sequence-length switch at 90%."""
import logging
import os

import pytest
import torch

from embryo.train import pretrain as P
from embryo.config import get_config, get_train_config
from embryo.model.electra import GENERATOR, ElectraPair, load_electra_weights
from embryo.runs.run import checkpoint_dir, list_steps, load_checkpoint, train_log
from embryo.train.fixtures import FIXTURE, corpus_slice, fixture_run
from embryo.train.optim import phase1_steps, seq_length_at

ELECTRA = dict(model_type="electra", sharing="none", sentence_task="none")  # the fixture's sizes, as an ELECTRA pair
TWO_PHASE = dict(phase1_seq_length=32)  # the fixture (64 tokens, 30 steps): 32 tokens up to step 27, then 64


def configs(**over):
    mnames = set(get_config("tiny").to_dict()) | {"model_type", "generator_size"}
    m = {**FIXTURE["model"], **{k: v for k, v in over.items() if k in mnames}}
    t = {**FIXTURE["train"], "corpus": str(corpus_slice()), **{k: v for k, v in over.items() if k not in mnames}}
    return get_config("tiny", **m), get_train_config("tiny", **t)


def test_electra_checkpoints_load_in_transformers_with_identical_outputs():
    from transformers import AutoTokenizer, ElectraForMaskedLM, ElectraForPreTraining, pipeline
    from embryo.text.tokenizer import load_tokenizer
    run = fixture_run(**ELECTRA)
    step = list_steps(run)[-1]
    ck = checkpoint_dir(run, step)
    pair = load_electra_weights(ElectraPair(configs(**ELECTRA)[0]), ck).eval()
    disc, gen = ElectraForPreTraining.from_pretrained(ck).eval(), ElectraForMaskedLM.from_pretrained(ck / GENERATOR).eval()
    for m in (disc, gen):  # transformers leaves some weights at unaligned offsets of the file it read; at one thread a
        for p in m.parameters(): p.data = p.data.clone()  # kernel then sums in another order (3e-8): ours are aligned
    tok = load_tokenizer(run)
    ids = torch.tensor([[tok.cls_id, *tok.encode("the jury said it did find that many of the voters"), tok.sep_id]])
    with torch.no_grad():
        assert torch.equal(disc(ids).logits, pair.discriminator(ids).logits)
        assert torch.equal(gen(ids).logits, pair.generator(ids).logits)
        # what the analyses read: the discriminator's layers, the generator's vocabulary scores
        d, g = load_checkpoint(run, step), load_checkpoint(run, step, mlm=True)
        torch.testing.assert_close(d(ids).hidden_states[-1], disc.electra(ids).last_hidden_state)
        torch.testing.assert_close(g(ids).prediction_logits, gen(ids).logits)
    for folder in (ck, ck / GENERATOR):
        assert AutoTokenizer.from_pretrained(folder)("the jury said")["input_ids"] == [tok.cls_id, *tok.encode("the jury said"), tok.sep_id]
    got = pipeline("fill-mask", model=str(ck / GENERATOR), device="cpu")("the jury [MASK] it")
    assert len(got) == 5 and all(r["token_str"].strip() for r in got)


def test_electra_trains_both_halves_and_logs_replaced_token_detection():
    run = fixture_run(**ELECTRA)
    log = train_log(run)
    assert {"mlm_loss", "rtd_loss", "rtd_accuracy"} <= set(log[-1]) and "sop_loss" not in log[-1]
    assert log[-1]["loss"] == pytest.approx(log[-1]["mlm_loss"] + 50 * log[-1]["rtd_loss"])
    assert log[-1]["mlm_loss"] < log[0]["mlm_loss"] and log[-1]["rtd_loss"] < log[0]["rtd_loss"]
    first, last = (load_electra_weights(ElectraPair(configs(**ELECTRA)[0]), checkpoint_dir(run, s)) for s in (0, 30))
    for half in ("generator", "discriminator"):  # both halves moved
        a, b = getattr(first, half).state_dict(), getattr(last, half).state_dict()
        assert any(not torch.equal(a[k], b[k]) for k in a if "encoder" in k), half


@pytest.mark.parametrize("over", [ELECTRA, TWO_PHASE], ids=["electra", "two-phase"])
def test_resume_is_bit_identical(over, tmp_path):
    "Stopped at step 25 and resumed: the same checkpoints and log as the run trained in one go (two-phase: across the switch)."
    reference = fixture_run(**over)
    mc, tc = configs(**over)
    P.train(tmp_path, "tiny", mc, tc, progress=False, stop_after=25)
    assert list_steps(tmp_path)[-1] == 20
    P.train(tmp_path, "tiny", mc, tc, progress=False)
    assert list_steps(tmp_path) == list_steps(reference)
    for step in list_steps(reference):
        for sub in ("", GENERATOR) if over is ELECTRA else ("",):
            from safetensors.torch import load_file
            a = load_file(checkpoint_dir(tmp_path, step) / sub / "model.safetensors")
            b = load_file(checkpoint_dir(reference, step) / sub / "model.safetensors")
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"step {step} {sub or 'model'} differs"
    strip = lambda run: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in train_log(run)]
    assert strip(tmp_path) == strip(reference)


def test_two_phase_schedule_switches_sequence_length_at_90_percent():
    run = fixture_run(**TWO_PHASE)
    _, tc = configs(**TWO_PHASE)
    assert phase1_steps(tc) == 27 and seq_length_at(27, tc) == 32 and seq_length_at(28, tc) == 64
    seen = {r["step"]: r["seq_length"] for r in train_log(run)}  # the longest padded batch of each logged step
    assert all(n <= 32 for s, n in seen.items() if s <= 27) and seen[30] > 32, seen
    assert get_train_config("bert-base").phase1_seq_length == 128 and phase1_steps(get_train_config("bert-base")) == 900_000


class _Records(logging.Handler):
    "The (level, message) of every record logged to the logger it is added to."
    def __init__(self): super().__init__(); self.got = []
    def emit(self, record): self.got.append((record.levelno, record.getMessage()))


def _card_code(folder) -> str:
    "The Python block of a checkpoint folder's model card."
    return (folder / "README.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]


def test_electra_fill_mask_is_the_generator_and_the_discriminator_folder_says_it_has_no_head():
    """Issue 33, point 9: `pipeline("fill-mask", model=<ELECTRA checkpoint folder>)` gave a random head, silently once
    embryo had loaded a checkpoint (its quiet loads switched transformers' load report off for good). Now the card's
    code gives the generator's own predictions, and loading the folder as a masked LM still prints the report."""
    from transformers import AutoTokenizer, pipeline
    from transformers.utils import logging as hf_logging
    run = fixture_run(**ELECTRA)
    ck = checkpoint_dir(run, 30)
    hf_logging.set_verbosity_warning()  # transformers' default: a test before this one in the process may have changed it
    level = hf_logging.get_verbosity()
    generator, _ = load_checkpoint(run, 30, mlm=True), load_checkpoint(run, 30)  # embryo's own, quiet loads
    assert hf_logging.get_verbosity() == level <= hf_logging.WARNING  # leave transformers' reports as they were
    card = (ck / "README.md").read_text()
    assert "pipeline_tag" not in card.split("---")[1] and "- electra" in card  # the folder is no fill-mask model
    assert "**Fill-mask takes `generator/`, not this folder.**" in card and "MISSING" in card
    ns = {}
    exec(_card_code(ck), ns)  # the card's code, as a user runs it
    text = "the [MASK] of the city."
    ids = AutoTokenizer.from_pretrained(ck)(text, return_tensors="pt")["input_ids"]
    with torch.no_grad(): scores = generator(ids).prediction_logits[0, (ids[0] == 4).nonzero()[0, 0]]
    assert [r["token"] for r in ns["fill"](text, top_k=3)] == scores.topk(3).indices.tolist()
    seen = _Records()  # what transformers' logger passes on: what its own handler prints on stderr
    logging.getLogger("transformers").addHandler(seen)
    try: pipeline("fill-mask", model=str(ck), device="cpu")  # the discriminator's folder as a masked LM: a random head, said
    finally: logging.getLogger("transformers").removeHandler(seen)
    report = [m for level, m in seen.got if level >= logging.WARNING and "ElectraForMaskedLM LOAD REPORT" in m]
    assert report and "generator_lm_head.bias" in report[0] and "MISSING" in report[0], seen.got
