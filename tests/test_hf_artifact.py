"""A checkpoint folder (and a run folder) is a complete Hugging Face artifact: model, weights and tokenizer."""
import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from embryo.text.corpus import read_corpus
from embryo.text.tokenizer import HF_TOKENIZER_FILES, load_tokenizer
from embryo.analyses import glue as G
from embryo.train import pretrain as P
from embryo.runs.run import (
    log_records, run_sentence_task, checkpoint_dir, list_steps, load_checkpoint, read_run_config, train_log)
from embryo.config import get_config, get_train_config
from embryo.analyses.downstream import read_tsv
from embryo.analyses.finetune import max_seq_length
from embryo.runs.figures import plot_pretraining
from embryo.runs.settings import complete_run
from embryo.train.cards import write_model_cards
from embryo.train.fixtures import FIXTURE, corpus_slice, fixture_run
from embryo.train.optim import tokens_seen


def corpus_sentences(n=200):
    docs = read_corpus(corpus_slice())
    return [s for d in docs[::7] for s in d[:3]][:n] + ["The Café in Zürich served ``naïve'' coffee: 42 cups!"]


def assert_same_ids(hf_tok, ours):
    sents = corpus_sentences()
    assert [hf_tok(s, add_special_tokens=False)["input_ids"] for s in sents] == [ours.encode(s) for s in sents]
    assert hf_tok("the city", "of gold")["input_ids"] == [2, *ours.encode("the city"), 3, *ours.encode("of gold"), 3]


def test_every_checkpoint_carries_the_tokenizer(fixture_copy):
    ours = load_tokenizer(fixture_copy)
    for step in list_steps(fixture_copy):
        ck = checkpoint_dir(fixture_copy, step)
        assert all((ck / n).is_file() for n in HF_TOKENIZER_FILES), (ck, sorted(p.name for p in ck.iterdir()))
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint_dir(fixture_copy, 30))
    assert type(tok).__name__ == "AlbertTokenizer" and len(tok) == ours.vocab_size
    assert_same_ids(tok, ours)


def test_fill_mask_pipeline_returns_real_tokens(fixture_copy):
    ours = load_tokenizer(fixture_copy)
    fill = transformers.pipeline("fill-mask", model=str(checkpoint_dir(fixture_copy, 30)), device="cpu")
    out = fill("the [MASK] of the city was built in the year.", top_k=5)
    assert len(out) == 5
    for r in out:
        assert r["token_str"].strip(), out  # before: empty strings from a five-word fallback tokenizer
        assert r["token_str"] == ours.decode([r["token"]]), r
    # the pipeline's top guess is the model's own argmax at the masked position
    ids = [2, *ours.encode("the"), ours.mask_id, *ours.encode("of the city was built in the year."), 3]
    with torch.no_grad():
        logits = load_checkpoint(fixture_copy, 30)(torch.tensor([ids])).prediction_logits[0, 2]
    assert out[0]["token"] == int(logits.argmax())


def test_run_folder_loads_in_autotokenizer(fixture_copy):
    assert not (fixture_copy / "config.json").exists() and (fixture_copy / "pretrain_config.json").is_file()
    assert_same_ids(transformers.AutoTokenizer.from_pretrained(fixture_copy), load_tokenizer(fixture_copy))


def test_old_run_layout_is_read_then_completed(fixture_copy, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(fixture_copy, run)
    (run / "pretrain_config.json").rename(run / "config.json")  # the layout every run had before
    for f in [run / n for n in HF_TOKENIZER_FILES if n != "spiece.model"] + [
            checkpoint_dir(run, s) / n for s in list_steps(run) for n in HF_TOKENIZER_FILES]:
        f.unlink()
    preset, mc, tc = read_run_config(run)  # old runs keep being read
    assert (preset, mc.hidden_size, tc.max_seq_length) == ("tiny", 64, 64)
    assert max_seq_length(run, load_checkpoint(run, 30), G.TASKS["sst2"]) == 64
    assert run_sentence_task(run) == "sop"
    done = complete_run(run)  # what the next sweep does
    assert done["renamed_config"] and done["checkpoints"] == len(list_steps(run))
    assert not (run / "config.json").exists() and read_run_config(run).preset == "tiny"
    assert_same_ids(transformers.AutoTokenizer.from_pretrained(run), load_tokenizer(run))
    assert_same_ids(transformers.AutoTokenizer.from_pretrained(checkpoint_dir(run, 30)), load_tokenizer(run))
    assert complete_run(run) == dict(renamed_config=False, checkpoints=0, run_files=[])  # a second pass changes nothing


def test_bert_twin_checkpoints_load_as_hf_artifacts(tmp_path):
    "The bert-tiny preset's shape (no sharing, E=H, NSP), trained two steps: its checkpoints load as fill-mask models too."
    small = dict(FIXTURE["model"], embedding_size=64)
    mc = get_config("bert-tiny", **small)
    tc = get_train_config("bert-tiny", **FIXTURE["train"], corpus=str(corpus_slice()))
    run = tmp_path / "bert"
    P.train(run, "bert-tiny", mc, tc, stop_after=2, progress=False)
    rows = log_records(run / "logs" / "train.jsonl", 1 << 62)
    assert "nsp_loss" in rows[0] and "sop_loss" not in rows[0]  # the log names the sentence loss after the task trained
    svg = next(p for p in plot_pretraining(run, tmp_path / "fig") if p.suffix == ".svg").read_text()
    assert "nsp loss" in svg and "sop loss" not in svg  # and so does Fig. 2a
    ours = load_tokenizer(run)
    for step in (0, 1, 2):
        assert all((checkpoint_dir(run, step) / n).is_file() for n in HF_TOKENIZER_FILES)
    assert_same_ids(transformers.AutoTokenizer.from_pretrained(checkpoint_dir(run, 2)), ours)
    out = transformers.pipeline("fill-mask", model=str(checkpoint_dir(run, 2)), device="cpu")("the [MASK] of it.", top_k=3)
    assert all(r["token_str"] == ours.decode([r["token"]]) and r["token_str"].strip() for r in out)


def test_trainer_finetunes_a_checkpoint(fixture_copy, tmp_path):
    "transformers' own Trainer (which needs accelerate) finetunes a checkpoint folder with its own tokenizer."
    import datasets
    ck = checkpoint_dir(fixture_copy, 30)
    tok = transformers.AutoTokenizer.from_pretrained(ck)
    assert_same_ids(tok, load_tokenizer(fixture_copy))
    train = read_tsv(Path(__file__).parent / "data" / "glue" / "SST-2" / "train.tsv", "sst2")
    ds = datasets.Dataset.from_dict({"text": [e.text_a for e in train], "label": [e.label for e in train]})
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=32), batched=True, remove_columns=["text"])
    model = transformers.AlbertForSequenceClassification.from_pretrained(ck, num_labels=2)
    before = model.classifier.weight.detach().clone()
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2,
                                          learning_rate=1e-3, use_cpu=True, report_to=[], save_strategy="no",
                                          logging_steps=1, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    result = trainer.train()
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, model.classifier.weight.detach())


def _card(run, step) -> str: return (checkpoint_dir(run, step) / "README.md").read_text()


def test_every_checkpoint_has_a_model_card_from_the_runs_own_records():
    "Issue 33, point 9: each checkpoint folder's README.md says how it was trained and at what, from the run's files."
    import yaml
    run = fixture_run()
    preset, mc, tc = read_run_config(run)
    log, heldout = {r["step"]: r for r in train_log(run)}, json.loads((run / "logs" / "eval.json").read_text())
    for step in list_steps(run):
        card = _card(run, step)
        front = yaml.safe_load(card.split("---\n")[1])
        assert front["library_name"] == "transformers" and front["pipeline_tag"] == "fill-mask", front
        assert {"embryo", "albert"} <= set(front["tags"]) and "language" not in front  # the corpus is a file: its language unknown
        assert f"# {run.name} at step {step:,}" in card and f"(preset `{preset}`)" in card
        assert f"{tokens_seen(step, tc):,} tokens" in card and f'folder = "{checkpoint_dir(run, step)}"' in card
        assert ("Held-out evaluation" in card) == (step == tc.total_steps), step
        assert f"| batch | {tc.batch_size} sequences a step |" in card and f"`{tc.corpus}`" in card
        assert "LAMB (beta1 0.9" in card and "sentence-order prediction" in card and "`model.safetensors` (float32)" in card
    assert "nothing has been trained yet" in _card(run, 0)
    assert "Logged at step 1, the last logged step before 2" in _card(run, 2)  # logged every 5 steps, and step 1
    last = _card(run, 30)
    for k in ("loss", "mlm_loss", "mlm_accuracy", "sop_loss", "sop_accuracy", "lr"):
        assert f"| {k} | {log[30][k]:.4g} |" in last.split("Held-out")[0], k
    for k in ("mlm_accuracy", "baseline_accuracy", "sop_accuracy", "nsp_accuracy"):
        assert f"| {k} | {heldout[k]:.4g} |" in last.split("Held-out")[1], k
    ns = {}
    exec(last.split("```python\n", 1)[1].split("```", 1)[0], ns)  # the card's code loads what it says
    ids = ns["tokenizer"]("the [MASK] of the city.", return_tensors="pt")["input_ids"]
    assert ids[0].tolist() == [2, *load_tokenizer(run).encode("the"), 4, *load_tokenizer(run).encode("of the city."), 3]
    with torch.no_grad():
        torch.testing.assert_close(ns["model"](ids).logits, load_checkpoint(run, 30)(ids).prediction_logits, atol=1e-5, rtol=1e-5)
    assert len(ns["fill"]("the [MASK] of the city.")) == 5


def test_cards_written_later_are_those_training_writes(tmp_path):
    """write_model_cards gives a run trained before cards existed (or with an older card) the cards its training writes
    now, and leaves a checkpoint folder linked in from elsewhere alone."""
    mc = get_config("tiny", **FIXTURE["model"])
    tc = get_train_config("tiny", **{**FIXTURE["train"], "total_steps": 2, "warmup_steps": 1}, corpus=str(corpus_slice()))
    run = tmp_path / "run"
    P.train(run, "tiny", mc, tc, progress=False)
    trained = {s: _card(run, s) for s in list_steps(run)}
    assert list(trained) == [0, 1, 2] and "Held-out evaluation" in trained[2] and "Held-out" not in trained[1]
    (checkpoint_dir(run, 0) / "README.md").unlink()
    (checkpoint_dir(run, 1) / "README.md").write_text("an older card\n")
    elsewhere = Path(shutil.copytree(checkpoint_dir(run, 2), tmp_path / "elsewhere", ignore=shutil.ignore_patterns("README.md")))
    (run / "checkpoints" / "step_0000099").symlink_to(elsewhere, target_is_directory=True)  # a user's folder, linked in
    assert write_model_cards(run) == [checkpoint_dir(run, s) / "README.md" for s in (0, 1)]
    assert {s: _card(run, s) for s in (0, 1, 2)} == trained
    assert not (elsewhere / "README.md").exists() and write_model_cards(run) == []  # not ours; the others are current
