"""Checkpoint series we did not train (notebook 02a's "Checkpoint series we did not train", issue "any checkpoint
series" part 2): a tiny BERT with a WordPiece vocabulary and a tiny RoBERTa with a byte-level BPE vocabulary, each
trained for a few steps by transformers' own `Trainer` (its `checkpoint-N/` folders and `trainer_state.json`), become
runs; the encoder analyses sweep them end to end, in Python and through the CLI; words align to their pieces under
each tokenizer; an analysis a series cannot give is left out with one line saying why."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embryo.text.packages import data_dir
from embryo.runs.series_check import open_run
from embryo.text.tokenizer import load_tokenizer
from embryo.text.sentences import align
from embryo.runs.results import read_results, read_log
from embryo.runs.run import Run, SeriesError, list_steps, train_log
from embryo.runs.series import as_run
from embryo.runs.lock import run_lock

ROOT = Path(__file__).resolve().parents[1]
SERIES = dict(sentences=600, vocab_size=600, hidden_size=32, layers=2, heads=2, max_length=64, batch_size=16,
              max_steps=12, save_steps=4, learning_rate=2e-3, seed=0)
STEPS = [4, 8, 12]
EOT = "<|endoftext|>"  # GPT-NeoX's one special token
ENCODER = ["probing", "similarity", "attention", "syntax"]
QUICK = {"probing": dict(tasks="pos_brown", max_sentences=200, max_train=300, max_dev=60, max_test=100),
         "similarity": dict(max_tokens=300), "attention": dict(n_sentences=24, seq_len=12),
         "syntax": dict(max_sentences=40)}


def _tokenizer(kind: str, lines: list[str]):
    "A WordPiece (bert) or byte-level BPE (roberta) vocabulary trained by the `tokenizers` library, as a transformers tokenizer."
    from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer
    from transformers import BertTokenizerFast, RobertaTokenizerFast
    if kind == "bert":
        t = BertWordPieceTokenizer(lowercase=True)
        t.train_from_iterator(lines, vocab_size=SERIES["vocab_size"], show_progress=False)
        return BertTokenizerFast(tokenizer_object=t._tokenizer)
    t = ByteLevelBPETokenizer()
    if kind in ("gpt-neox", "gpt2"):  # GPT-2's and Pythia's kind: byte-level BPE, one special token, no [CLS]/[SEP]
        from transformers import PreTrainedTokenizerFast
        t.train_from_iterator(lines, vocab_size=SERIES["vocab_size"], show_progress=False, special_tokens=[EOT])
        return PreTrainedTokenizerFast(tokenizer_object=t._tokenizer, bos_token=EOT, eos_token=EOT, unk_token=EOT, pad_token=EOT)
    t.train_from_iterator(lines, vocab_size=SERIES["vocab_size"], show_progress=False,
                          special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return RobertaTokenizerFast(tokenizer_object=t._tokenizer)


def _model(kind: str, tok):
    from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM,
                              RobertaConfig, RobertaForMaskedLM)
    size = dict(vocab_size=len(tok), hidden_size=SERIES["hidden_size"], num_hidden_layers=SERIES["layers"],
                num_attention_heads=SERIES["heads"], intermediate_size=2 * SERIES["hidden_size"])
    if kind == "gpt-neox":
        return GPTNeoXForCausalLM(GPTNeoXConfig(**size, max_position_embeddings=128, bos_token_id=tok.bos_token_id,
                                                eos_token_id=tok.eos_token_id))
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=SERIES["hidden_size"], n_layer=SERIES["layers"],
                                          n_head=SERIES["heads"], n_positions=128, bos_token_id=tok.bos_token_id,
                                          eos_token_id=tok.eos_token_id))
    if kind == "bert": return BertForMaskedLM(BertConfig(**size, max_position_embeddings=128))
    return RobertaForMaskedLM(RobertaConfig(**size, max_position_embeddings=130, type_vocab_size=1, pad_token_id=tok.pad_token_id,
                                            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))


def trainer_series(kind: str) -> Path:
    """A Trainer's output_dir (checkpoint-4/, -8/, -12/) of a tiny `kind` ('bert', 'roberta' masked LM or 'gpt-neox', 'gpt2' causal LM) trained on the
    first sentences of the built-in corpus; built once (about 15 s) and cached under the data dir."""
    import transformers
    key = hashlib.sha256(json.dumps([kind, SERIES, transformers.__version__]).encode()).hexdigest()[:10]
    out = data_dir() / "series" / f"{kind}-{key}"
    with run_lock(out.parent / ".locks" / out.name, wait=True):  # test workers build it once, one after the other
        if (out / f"checkpoint-{SERIES['max_steps']}" / "trainer_state.json").exists(): return out
        from embryo.train.fixtures import corpus_slice
        from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments, set_seed
        set_seed(SERIES["seed"])
        lines = [l.strip() for l in corpus_slice().read_text().splitlines() if l.strip()][:SERIES["sentences"]]
        tok = _tokenizer(kind, lines)
        model = _model(kind, tok)
        data = [{"input_ids": ids} for ids in tok(lines, truncation=True, max_length=SERIES["max_length"])["input_ids"]]
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        args = TrainingArguments(output_dir=str(tmp), per_device_train_batch_size=SERIES["batch_size"],
                                 max_steps=SERIES["max_steps"], save_steps=SERIES["save_steps"], logging_steps=1,
                                 learning_rate=SERIES["learning_rate"], seed=SERIES["seed"], save_only_model=True,
                                 report_to=[], use_cpu=True, disable_tqdm=True)
        Trainer(model=model, args=args, train_dataset=data, processing_class=tok,
                data_collator=DataCollatorForLanguageModeling(tok, mlm=kind not in ("gpt-neox", "gpt2"),
                                                             mlm_probability=0.15)).train()
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
    return out


@pytest.fixture(scope="module", params=["bert", "roberta"])
def series(request):
    "(kind, a Trainer's output_dir) of each tokenizer family."
    return request.param, trainer_series(request.param)


def _files(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


def test_a_trainer_output_dir_is_a_run(series, tmp_path):
    "Its checkpoint-N folders are the steps, its trainer_state.json the training log, its tokenizer the run's; nothing is written into it."
    from embryo.runs.figures import plot_pretraining
    kind, out = series
    before = _files(out)
    run = Run(as_run(out, tmp_path / "runs" / kind))
    assert run.steps == STEPS and run.kind == "masked-lm" and run.preset is None
    assert run.checkpoint(8).resolve() == (out / "checkpoint-8").resolve()
    state = json.loads((out / f"checkpoint-{STEPS[-1]}" / "trainer_state.json").read_text())
    logged = [(r["step"], r["loss"]) for r in state["log_history"] if "loss" in r]
    assert len(logged) == SERIES["max_steps"] and [(r["step"], r["mlm_loss"]) for r in run.log] == logged
    assert [r["loss"] for r in run.log] == [r["mlm_loss"] for r in run.log] and all("learning_rate" in r for r in run.log)
    assert isinstance(run.transitions, list)  # computed from the Trainer's loss like ours
    assert plot_pretraining(run, tmp_path / "fig")[0].stat().st_size > 10_000  # Fig. 2a from the Trainer's log
    tok = run.tokenizer()
    assert type(tok).__name__ == "HFTokenizer" and tok.vocab_size == SERIES["vocab_size"]
    assert [tok.pieces[tok.cls_id], tok.pieces[tok.sep_id]] == (["[CLS]", "[SEP]"] if kind == "bert" else ["<s>", "</s>"])
    model = run.load(12)
    assert type(model.model).__name__ == ("BertForMaskedLM" if kind == "bert" else "RobertaForMaskedLM")
    assert model.config.num_hidden_layers == SERIES["layers"] and model.max_length == 128  # RoBERTa: 130 positions, less its offset
    assert as_run(out, tmp_path / "runs" / kind) == tmp_path / "runs" / kind and Run(tmp_path / "runs" / kind).steps == STEPS
    assert _files(out) == before  # the user's folder is read, never written


def test_words_align_to_their_pieces(series, tmp_path):
    "A word split into pieces owns exactly its pieces, under WordPiece (##) and byte-level BPE (Ġ) alike."
    kind, out = series
    tok = load_tokenizer(as_run(out, tmp_path / "runs" / kind))
    words = ["The", "unbelievably", "reconsidered", "words", "(", "yet", ")", "."]
    ids, spans = align(tok, words)
    assert all(spans) and spans[0][0] == 0 and spans[-1][1] == len(ids)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous: every piece belongs to one word
    split = spans[1]
    assert split[1] - split[0] > 1, [tok.pieces[i] for i in ids]  # "unbelievably" is not in a 600-piece vocabulary
    for w, (s, e) in zip(words, spans):
        assert tok.decode(ids[s:e]).strip() == (w.lower() if kind == "bert" else w), (w, [tok.pieces[i] for i in ids[s:e]])
    pieces = [tok.pieces[i] for i in ids[split[0]:split[1]]]
    if kind == "bert":
        assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:]), pieces
        # WordPiece splits words alone as in the sentence: transformers' own word_ids agree with ours
        enc = tok.hf(words, is_split_into_words=True, add_special_tokens=False)
        ours = [w for w, (s, e) in enumerate(spans) for _ in range(s, e)]
        assert enc["input_ids"] == ids and enc.word_ids() == ours
    else:
        assert pieces[0].startswith("Ġ") and not any(p.startswith("Ġ") for p in pieces[1:]), pieces
        assert not tok.pieces[ids[0]].startswith("Ġ") and not tok.pieces[ids[spans[-1][0]]].startswith("Ġ")  # "The", "."


def test_the_encoder_analyses_sweep_a_trainer_series(series, tmp_path, monkeypatch, capsys):
    "sweep(<output_dir>) runs probing, similarity, attention and syntax at every step and leaves n-grams out, saying why."
    from embryo.analyses.sweep import sweep
    kind, out = series
    monkeypatch.chdir(tmp_path)  # the run folder is made as runs/<name>, beside the caller
    t = sweep(open_run(out), ENCODER + ["ngram"], mode="inprocess", options=QUICK, progress=False)
    said = capsys.readouterr().out
    assert sorted(t.index) == sorted(ENCODER) and list(t.columns) == STEPS and (t == "done").all().all(), t
    assert said.count("not run") == 1 and "ngram: not run: no training corpus is recorded" in said, said
    run = tmp_path / "runs" / out.name
    L, H = SERIES["layers"], SERIES["heads"]
    p = read_results(run, "probing")
    f1 = p[(p.task == "pos_brown") & (p.metric == "f1")]
    assert sorted(f1.step.unique()) == STEPS and f1.groupby("step").layer.apply(sorted).tolist() == [list(range(L + 1))] * 3
    assert f1.value.between(0, 1).all() and (p[p.metric == "n_test"].value > 20).all()
    a = read_results(run, "attention")
    diag = a[a.metric == "diagonal"]
    assert diag.groupby("step").size().tolist() == [L * H] * 3 and set(diag.layer) == {1, 2} and set(diag["head"]) == {0, 1}
    assert diag.value.between(0, 1).all() and diag.value.nunique() > 1
    s = read_results(run, "similarity")
    self_cka = s[(s.step == 12) & (s.metric == "cka_final")]
    assert sorted(self_cka.layer) == list(range(L + 1)) and (self_cka.value - 1).abs().max() < 1e-6  # the last step against itself
    early = s[(s.step == 4) & (s.metric == "cka_final")]
    assert len(early) == L + 1 and early.value.between(0, 1).all()
    x = read_results(run, "syntax")
    assert sorted(x.step.unique()) == STEPS and set(x[x["head"] >= 0].layer) == {1, 2}
    assert set(read_log(run).status) == {"done"}


def test_a_bare_encoder_series_leaves_out_what_needs_a_head(tmp_path, monkeypatch, capsys):
    "MultiBERTs-style folders of a BertModel (no masked-LM head) with only a vocab.txt: encoder analyses run, the rest is left out."
    from transformers import AutoTokenizer, BertModel
    from embryo.runs.run import load_hf_model
    from embryo.analyses.sweep import sweep
    out = trainer_series("bert")
    vocab = AutoTokenizer.from_pretrained(out / "checkpoint-4").get_vocab()
    for s in STEPS:  # step_4k ... as MultiBERTs names them: 4,000 ... 12,000
        dst = tmp_path / "multiberts" / f"seed_0-step_{s}k"
        BertModel.from_pretrained(out / f"checkpoint-{s}").save_pretrained(dst)
        (dst / "vocab.txt").write_text("".join(w + "\n" for w in sorted(vocab, key=vocab.get)))
    monkeypatch.chdir(tmp_path)
    t = sweep(open_run(tmp_path / "multiberts"), ["reconstruction", "knowledge", "attention"], mode="inprocess", options=QUICK,
              progress=False)
    said = capsys.readouterr().out.splitlines()
    assert list(t.index) == ["attention"] and list(t.columns) == [4000, 8000, 12000] and (t == "done").all().all(), t
    skipped = [l for l in said if "not run" in l]
    assert [l.split(":")[0] for l in skipped] == ["reconstruction", "knowledge"], said
    assert all("bert encoder models (BertModel); this analysis needs the vocabulary scores of a masked-LM or causal-LM "
               "head" in l for l in skipped)
    run = Run(tmp_path / "runs" / "multiberts")
    assert run.kind == "encoder" and not load_hf_model(run.checkpoint(4000)).has_mlm_head
    assert type(run.tokenizer()).__name__ == "HFTokenizer"  # from vocab.txt alone, through transformers


def test_a_causal_lm_trainer_series_gets_the_encoder_analyses(tmp_path, monkeypatch, capsys):
    """A GPT-NeoX (Pythia's architecture) trained by Trainer, byte-level BPE with no [CLS]/[SEP]: probing, similarity,
    attention and syntax read its decoder's hidden states and causal attention maps; reconstruction and knowledge read
    its next-piece scores (issue 78), so nothing is left out."""
    from embryo.analyses.sweep import sweep
    out = trainer_series("gpt-neox")
    monkeypatch.chdir(tmp_path)
    t = sweep(open_run(out), ENCODER + ["reconstruction", "knowledge"], mode="inprocess", options=QUICK, progress=False)
    said = [l for l in capsys.readouterr().out.splitlines() if "not run" in l]
    assert sorted(t.index) == sorted(ENCODER + ["reconstruction", "knowledge"]) and list(t.columns) == STEPS, t
    assert (t == "done").all().all() and not said, (t, said)
    run = Run(tmp_path / "runs" / out.name)
    assert run.kind == "causal-lm" and (run.tokenizer().prefix, run.tokenizer().n_added) == (0, 0)
    L, H = SERIES["layers"], SERIES["heads"]
    f1 = read_results(run, "probing", task="pos_brown", metric="f1")
    assert sorted(f1.step.unique()) == STEPS and sorted(f1.layer.unique()) == list(range(L + 1)) and f1.value.between(0, 1).all()
    a = read_results(run, "attention", metric="next")
    assert len(a) == len(STEPS) * L * H and (a.value.abs() < 1e-6).all()  # causal: nothing attends to the next token
    assert (read_results(run, "attention", metric="self").value > 0).all()
    x = read_results(run, "syntax", metric="uas_best")
    assert sorted(x.step.unique()) == STEPS and x.value.between(0, 1).all()
    s = read_results(run, "similarity", metric="cka_final", step=STEPS[-1])
    assert (s.value - 1).abs().max() < 1e-6


def test_a_gpt2_series_named_like_hub_revisions(tmp_path, monkeypatch, capsys):
    "GPT-2 checkpoints saved as step1000/, step2000/ (Pythia's revision names): attention and reconstruction (next-word) run."
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel
    from embryo.analyses.sweep import sweep
    tok = AutoTokenizer.from_pretrained(trainer_series("roberta") / "checkpoint-4")
    for s in (1000, 2000):
        d = tmp_path / "pythia-like" / f"step{s}"
        GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=64)).save_pretrained(d)
        tok.save_pretrained(d)
    monkeypatch.chdir(tmp_path)
    t = sweep(open_run(tmp_path / "pythia-like"), ["attention", "reconstruction"], mode="inprocess", options=QUICK, progress=False)
    said = [l for l in capsys.readouterr().out.splitlines() if "not run" in l]
    assert list(t.index) == ["attention", "reconstruction"] and list(t.columns) == [1000, 2000], t
    assert (t == "done").all().all() and not said, said
    assert Run(tmp_path / "runs" / "pythia-like").steps == [1000, 2000]


def test_knowledge_says_why_it_skips_byte_level_bpe(tmp_path):
    from embryo.analyses import knowledge, reconstruction, glue
    bert, roberta = (as_run(trainer_series(k), tmp_path / k) for k in ("bert", "roberta"))
    assert knowledge.applies_to(bert) is None and reconstruction.applies_to(roberta) is None
    assert "byte-level BPE" in knowledge.applies_to(roberta) and glue.applies_to(bert) is None  # its family's own head
    from embryo.analyses import ngram  # its estimates are counted on the training text, which a Trainer series does not name
    assert ngram.applies_to(bert) == ("no training corpus is recorded for this series (its n-gram estimates need one): "
                                      "name the text it trained on with --option ngram.corpus=FILE")
    assert ngram.applies_to(bert, corpus="trained_on.txt") is None  # named: it runs
    from embryo.analyses import aoa, grammar  # masked-LM scores only: any masked LM, any tokenizer
    assert grammar.applies_to(bert) is None and aoa.applies_to(roberta) is None
    from embryo.analyses import llc  # the masked-LM loss: any masked LM
    assert llc.applies_to(bert) is None and llc.applies_to(roberta) is None


def test_step_folder_names(tmp_path):
    "Digits only (no Unicode digits), MultiBERTs' k and M; two folders for one step are refused by name."
    from embryo.runs.series import step_of
    assert [step_of(n) for n in ("checkpoint-500", "step_20k", "step_2M", "step1000", "seed_3-step_0k", "0001000")] == \
        [500, 20_000, 2_000_000, 1000, 0, 1000]
    assert [step_of(n) for n in ("step_²", "step_٣", "٣٣", "seed_3", "checkpoint-5.old", "step_5x")] == [None] * 6
    src = tmp_path / "s"
    for name in ("step_1k", "1000"):
        (src / name).mkdir(parents=True); (src / name / "config.json").write_text("{}")
    with pytest.raises(SeriesError, match="step_1k and 1000 in .* both name step 1,000|1000 and step_1k in .* both name step 1,000"):
        as_run(src, tmp_path / "r")


def test_the_cli_sweeps_a_trainer_output_dir(tmp_path):
    "`embryo sweep --run <output_dir>` as a user types it: papermill mode, each executed notebook kept in the run."
    out = trainer_series("roberta")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "embryo.cli", "sweep", "--run", str(out), "--analyses", "attention",
                        "--option", "attention.n_sentences=16", "attention.seq_len=10"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"step\s+4\s+8\s+12\s.*attention\s+done\s+done\s+done", r.stdout, re.S), r.stdout
    a = read_results(tmp_path / "runs" / out.name, "attention")
    assert [p.name for p in sorted((tmp_path / "runs" / out.name / "notebooks" / "attention").iterdir())] == \
        [f"step_{s:07d}.ipynb" for s in STEPS]
    assert sorted(a.step.unique()) == STEPS and (a[a.metric == "diagonal"].groupby("step").size() == 4).all()


def test_compare_sets_a_trainer_series_beside_our_run(tmp_path, monkeypatch):
    "`embryo compare --run figures/run --run <swept Trainer series>`: one curve each, the series named by its model type."
    from embryo.cli import main
    from embryo.experiments.compare import model_family, run_length
    from embryo.analyses.sweep import sweep
    out = trainer_series("bert")
    monkeypatch.chdir(tmp_path)
    sweep(open_run(out), ["reconstruction"], mode="inprocess", options={"reconstruction": dict(max_words=60)}, progress=False)
    run = tmp_path / "runs" / out.name
    assert model_family(run) == "BERT" and run_length(run) == STEPS[-1]
    assert main(["compare", "--run", str(ROOT / "figures" / "run"), "--run", str(run), "--figures", str(tmp_path / "cmp")]) in (0, None)
    report = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    ours = f"ALBERT ({json.loads((ROOT / 'figures' / 'run' / 'pretrain_config.json').read_text())['preset']})"
    assert sorted(report["analyses"]["reconstruction"]["runs"]) == sorted([ours, f"BERT ({out.name})"]), report
    assert report["analyses"]["reconstruction"]["runs"][f"BERT ({out.name})"]["first"] >= 0
    assert (tmp_path / "cmp" / "fig_compare_reconstruction.png").stat().st_size > 10_000


def test_report_on_a_two_checkpoint_multiberts_series(tmp_path, monkeypatch, capsys):
    """Issue 76: `embryo report` on a short series (two MultiBERTs-style checkpoints of a micro BERT, step_20k and
    step_40k) writes index.html and findings.md, says in one line each section it cannot draw and why, and exits
    non-zero only when something failed (here: a redraw made to raise)."""
    from transformers import AutoTokenizer, BertForMaskedLM
    from embryo.cli import main
    from embryo.analyses.sweep import sweep
    out = trainer_series("bert")
    for s, k in ((4, 20), (8, 40)):
        dst = tmp_path / "multiberts" / f"step_{k}k"
        BertForMaskedLM.from_pretrained(out / f"checkpoint-{s}").save_pretrained(dst)
        AutoTokenizer.from_pretrained(out / f"checkpoint-{s}").save_pretrained(dst)
    monkeypatch.chdir(tmp_path)
    analyses = ["aoa", "attention", "similarity", "reconstruction"]
    opts = dict(QUICK, aoa=dict(max_occurrences=2), reconstruction=dict(max_words=50))
    t = sweep(open_run(tmp_path / "multiberts"), analyses, mode="inprocess", options=opts, progress=False)
    said = capsys.readouterr().out
    assert sorted(t.index) == sorted(analyses) and list(t.columns) == [20000, 40000] and (t == "done").all().all(), t
    assert t.attrs["failed"] == 0 and "failed" not in said, said  # too few steps is not a failure: it is said
    assert [l for l in said.splitlines() if l.startswith("aoa")] == [
        "aoa: figures not drawn: needs 5 steps (a sigmoid of 4 unknowns over each word's surprisal); "
        "multiberts has 2 (20,000, 40,000)"], said
    run, figs = tmp_path / "runs" / "multiberts", tmp_path / "report"
    rc = main(["report", "--run", str(run), "--figures", str(figs)])
    o = capsys.readouterr(); lines = (o.out + o.err).splitlines()
    assert rc == 0, o
    assert (figs / "index.html").is_file() and (figs / "findings.md").is_file() and (figs / "report.json").is_file()
    assert not any("Traceback" in l or "Error:" in l for l in lines), o
    not_drawn = [l for l in lines if "not drawn:" in l]
    assert sorted(l.split(":")[0] for l in not_drawn) == ["aoa", "pretraining"], not_drawn
    assert any(l.startswith("aoa") and "needs 5 steps" in l for l in not_drawn), not_drawn
    assert any(l.startswith("pretraining") and "no training log" in l for l in not_drawn), not_drawn
    page = (figs / "index.html").read_text()
    assert "fig3_attention_patterns" in page or "fig_attention" in page or "attention" in page
    assert "needs 5 steps" in page  # the report says why the section is missing
    assert any(p.suffix == ".png" for p in figs.iterdir())
    # a redraw that raises is a failure: said in one line, the rest written, exit 1
    import embryo.analyses.attention
    monkeypatch.setattr(embryo.analyses.attention, "redraw", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    (figs / "index.html").unlink(); (figs / "findings.md").unlink()
    rc = main(["report", "--run", str(run), "--figures", str(figs)])
    o = capsys.readouterr(); lines = (o.out + o.err).splitlines()
    assert rc == 1, o
    assert [l for l in lines if "failed:" in l] == ["attention: failed: RuntimeError: boom"], lines
    assert (figs / "index.html").is_file() and (figs / "findings.md").is_file()


@pytest.mark.parametrize("kind,head", [("bert", "BertForSequenceClassification"),
                                       ("roberta", "RobertaForSequenceClassification"),
                                       ("gpt-neox", "GPTNeoXForSequenceClassification")])
def test_glue_finetunes_any_series_with_its_familys_head(kind, head, tmp_path, capsys):
    "Issue 78: the downstream tasks on a Trainer series of each family, through its own Auto classifier; the sweep runs it."
    from embryo.analyses import glue as G
    from embryo.analyses.sweep import sweep
    run = as_run(trainer_series(kind), tmp_path / "runs" / kind)
    assert G.applies_to(run) is None
    quick = dict(tasks="polarity,word_order", max_train_examples=64, max_dev_examples=64, progress=False)
    t = G.evaluate_step(run, 12, **quick)
    scores = t[(t.metric == "score") & (t.seed == -1)].set_index("task").value
    assert set(scores.index) == {"polarity", "word_order", "builtin"} and scores.between(0, 1).all(), t
    from embryo.runs.results import read_samples
    settings = json.loads(read_samples(run, G.ANALYSIS, "polarity").query("item == 'settings'").text.iloc[0])
    assert settings["classifier"] == head and settings["train_examples"] == 64
    again = G.evaluate_step(run, 12, write=False, **quick)  # the seed fixes the head, the order and the sample
    assert (again.value.to_numpy() == t.value.to_numpy()).all()
    t = sweep(open_run(run), ["glue"], steps=[12], mode="inprocess", options={"glue": quick}, progress=False)
    assert "glue: not run" not in capsys.readouterr().out and not t.attrs.get("failed"), t.attrs


def test_the_cards_papermill_command_on_a_bert_trainer_folder(tmp_path):
    "`papermill nbs/05_glue.ipynb out.ipynb -p run_dir <a Trainer's output_dir> -p step 8`, from a folder of one's own."
    out = trainer_series("bert")
    r = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "nbs" / "05_glue.ipynb"), "out.ipynb",
                        "-p", "run_dir", str(out), "-p", "step", "8", "-p", "tasks", "polarity",
                        "-p", "max_train_examples", "32", "-p", "max_dev_examples", "32"],
                       capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    rows = read_results(tmp_path / "runs" / out.name, "glue", step=8)
    assert {"polarity", "builtin"} <= set(rows.task), rows
    assert (tmp_path / "runs" / out.name / "figures" / "fig12_glue_tasks.png").stat().st_size > 0


@pytest.mark.parametrize("kind,head", [("bert", "BertForQuestionAnswering"), ("roberta", "RobertaForQuestionAnswering"),
                                       ("gpt-neox", "GPTNeoXForQuestionAnswering")])
def test_squad_finetunes_any_series_with_its_familys_head(kind, head, tmp_path):
    "Issue 78: SQuAD 2.0 on a Trainer series of each family: its own windows (the tokenizer's pair overflow) and QA head."
    from embryo.analyses import squad as S
    from embryo.analyses.finetune import pretrained_body
    from embryo.runs.run import load_checkpoint
    run = as_run(trainer_series(kind), tmp_path / "runs" / kind)
    assert S.applies_to(run) is None
    tok = load_tokenizer(run)
    assert type(S.question_answerer(pretrained_body(load_checkpoint(run, 12)), tok).hf).__name__ == head
    data = S.load_squad(S.sample_dir())
    feats, unread = S.features_hf(tok, data["train"], 64)
    assert not unread and any(f.start for f in feats)
    for f in feats:  # every window's answer is the answer, read back from the paragraph's own characters
        if f.start: assert S.normalize_answer(S.span_text(data["train"][f.example], f, f.start, f.end)) == \
            S.normalize_answer(data["train"][f.example].answers[0][0])
    t = S.evaluate_step(run, 12, squad_dir=S.sample_dir(), progress=False)
    v = t[t.seed == -1].set_index("metric").value
    assert 0 <= v["score"] <= 1 and (v["HasAns_total"], v["NoAns_total"], v["chance"]) == (6, 4, 0.4), v


def test_grammar_scores_a_causal_series_by_sentence_log_likelihood(tmp_path, monkeypatch, capsys):
    "Issue 78: minimal pairs on a GPT-NeoX Trainer series: its sentences' log-likelihoods are minicons', swept and drawn."
    from minicons import scorer
    from embryo.analyses import grammar as G
    from embryo.analyses.sweep import sweep
    from embryo.runs.run import load_checkpoint
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series("gpt-neox"), tmp_path / "runs" / "neox")
    assert G.applies_to(run) is None
    tok, model = load_tokenizer(run), load_checkpoint(run, 12)
    assert model.causal and not model.has_mlm_head
    pr = G.read_pairs(G.paradigm_pairs(20))
    s = list(pr.good[:8]) + list(pr.bad[:8])
    mc = scorer.IncrementalLMScorer(model.model, tokenizer=tok.hf, device="cpu")
    theirs = mc.sequence_score(s, bos_token=True, reduction=lambda x: x.sum(0).item())
    assert abs(G.sentence_ll(model, tok, s) - theirs).max() < 1e-4
    t = sweep(open_run(run), ["grammar"], mode="inprocess", options={"grammar": dict(n_pairs=20)}, progress=False)
    assert "grammar: not run" not in capsys.readouterr().out and (t == "done").all().all(), t
    assert not t.attrs.get("failed"), t.attrs  # the redraw too
    res = read_results(run, "grammar", task="all")
    assert {"accuracy", "ties", "accuracy_per_piece"} <= set(res.metric) and "accuracy_l2r" not in set(res.metric)
    acq = G.acquisition(run, resamples=50)
    assert len(acq) == 10 and (acq.pairs == 20).all()
    assert (run / "figures" / "fig_grammar_paradigms.png").stat().st_size > 0


def test_age_of_acquisition_reads_a_causal_series_left_to_right(tmp_path, monkeypatch, capsys):
    "Issue 78: ages of acquisition on a GPT-NeoX Trainer series, from next-piece surprisal (Chang and Bergen's setting)."
    from embryo.analyses import aoa as A
    from embryo.analyses.sweep import sweep
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series("gpt-neox"), tmp_path / "runs" / "neox")
    assert A.applies_to(run) is None
    t = sweep(open_run(run), ["aoa"], mode="inprocess", options={"aoa": dict(max_occurrences=2)}, progress=False)
    assert "aoa: not run" not in capsys.readouterr().out and (t == "done").all().all(), t
    assert not t.attrs.get("failed"), t.attrs
    s = read_results(run, "aoa", task="all", metric="surprisal")
    assert sorted(s.step) == STEPS and (s.value > 0).all() and s.n.min() > 300, s


@pytest.mark.parametrize("kind", ["gpt-neox", "bert"])
def test_induction_runs_on_a_trainer_series(kind, tmp_path, monkeypatch, capsys):
    "Issue 78: induction and copying on a causal (GPT-NeoX) and a masked (BERT) Trainer series: swept, drawn, a verdict."
    from embryo.analyses import induction as I
    from embryo.analyses.sweep import sweep
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series(kind), tmp_path / "runs" / kind)
    assert I.applies_to(run) is None
    t = sweep(open_run(run), ["induction"], mode="inprocess", options={"induction": dict(n_sequences=8)}, progress=False)
    assert "induction: not run" not in capsys.readouterr().out and (t == "done").all().all(), t
    assert not t.attrs.get("failed"), t.attrs  # the redraw too
    res = read_results(run, "induction")
    heads = res[(res.metric == "copying") & (res.step == STEPS[-1])]
    assert len(heads) == heads.layer.nunique() * heads["head"].nunique() >= 2, heads
    steps = I.step_table(run)
    assert list(steps.index) == STEPS and (steps.loss_first > 0).all() and (steps.gain_lo <= steps.gain_hi).all()
    assert I.verdict(run).startswith("At step")
    assert (run / "figures" / "fig_induction.png").stat().st_size > 0


@pytest.mark.parametrize("kind", ["gpt-neox", "bert", "roberta"])
def test_lens_runs_on_a_trainer_series(kind, tmp_path, monkeypatch, capsys):
    "Issue 78: the logit and tuned lens on a causal (GPT-NeoX) and masked (BERT, RoBERTa) Trainer series: swept, drawn, a verdict."
    from embryo.analyses import lens as LN
    from embryo.analyses.sweep import sweep
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series(kind), tmp_path / "runs" / kind)
    assert LN.applies_to(run) is None
    t = sweep(open_run(run), ["lens"], mode="inprocess", options={"lens": dict(n_sentences=64)}, progress=False)
    assert "lens: not run" not in capsys.readouterr().out and (t == "done").all().all(), t
    assert not t.attrs.get("failed"), t.attrs  # the redraw too
    tab = LN.layer_table(run)
    L = tab["accuracy"].columns.max()
    assert list(tab.index) == STEPS and L >= 2 and (tab["kl"][L] == 0).all() and (tab["tuned_kl"] >= 0).all().all(), tab
    assert LN.verdict(run).startswith("At step")
    assert (run / "figures" / "fig_lens.png").stat().st_size > 0


@pytest.mark.parametrize("kind", ["gpt-neox", "bert"])
def test_memorization_runs_on_a_trainer_series_given_its_text(kind, tmp_path, monkeypatch, capsys):
    """Issue 78: memorization on a causal (GPT-NeoX) and a masked (BERT) Trainer series: without its training text the
    sweep says in one line what to pass; given it (the corpus slice the series trained on) and held-out Brown text, swept,
    drawn, a verdict."""
    from embryo.analyses import memorization as M
    from embryo.analyses.sweep import sweep
    from embryo.text.sentences import tagged_sentences
    from embryo.train.fixtures import corpus_slice
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series(kind), tmp_path / "runs" / kind)
    assert "--option memorization.train_text=FILE memorization.heldout_text=FILE" in M.applies_to(run)
    sweep(open_run(run), ["memorization"], mode="inprocess", progress=False)
    assert "memorization: not run: the text" in capsys.readouterr().out
    lines = [l.strip() for l in corpus_slice().read_text().splitlines() if l.strip()][:SERIES["sentences"]]
    train = tmp_path / "train.txt"; train.write_text("\n\n".join("\n".join(lines[i:i + 10]) for i in range(0, 60, 10)) + "\n")
    held = tmp_path / "held.txt"
    held.write_text("\n\n".join("\n".join(" ".join(s.words).lower() for s in tagged_sentences()[i:i + 10])
                                for i in range(0, 60, 10)) + "\n")
    opts = dict(train_text=str(train), heldout_text=str(held), n_chunks=2)
    t = sweep(open_run(run), ["memorization"], mode="inprocess", options={"memorization": opts}, progress=False)
    assert (t == "done").all().all() and not t.attrs.get("failed"), t
    tab = M.step_table(run)
    assert list(tab.index) == STEPS and ((tab.gap_lo <= tab.gap) & (tab.gap <= tab.gap_hi)).all(), tab
    assert M.verdict(run).startswith("At step") and (run / "figures" / "fig_memorization.png").stat().st_size > 0


def test_llc_runs_on_a_causal_trainer_series(tmp_path, monkeypatch, capsys):
    "Issue 78: the LLC on a causal (GPT-NeoX) Trainer series, on its own next-piece loss: swept, a curve, a figure."
    from embryo.analyses import llc as L
    from embryo.analyses.sweep import sweep
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series("gpt-neox"), tmp_path / "runs" / "neox")
    assert L.applies_to(run) is None
    t = sweep(open_run(run), ["llc"], mode="inprocess", options={"llc": dict(chains=2, draws=8)}, progress=False)
    assert "llc: not run" not in capsys.readouterr().out and (t == "done").all().all() and not t.attrs.get("failed"), t
    assert set(read_results(run, "llc").task) == {L.NEXT, "calibration"}  # the next-piece loss, named so
    c = L.llc_curve(run)
    assert list(c.index) == STEPS and (c.init_loss > 0).all() and c.llc.notna().all(), c
    assert (run / "figures" / "fig_llc.png").stat().st_size > 0


def test_ngram_runs_on_a_causal_trainer_series_given_its_corpus(tmp_path, monkeypatch, capsys):
    """Issue 78: n-gram phases on a causal (GPT-NeoX) Trainer series, its next-piece predictions against left-context
    estimates (unigram, the piece before, the two before) of the text it trained on, named by the option."""
    from embryo.analyses import ngram as N
    from embryo.analyses.sweep import sweep
    from embryo.train.fixtures import corpus_slice
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series("gpt-neox"), tmp_path / "runs" / "neox")
    assert "--option ngram.corpus=FILE" in N.applies_to(run)
    lines = [l.strip() for l in corpus_slice().read_text().splitlines() if l.strip()][:SERIES["sentences"]]
    corpus = tmp_path / "trained_on.txt"; corpus.write_text("\n".join(lines) + "\n")
    opts = dict(corpus=str(corpus), max_sentences=200)
    t = sweep(open_run(run), ["ngram"], mode="inprocess", options={"ngram": opts}, progress=False)
    assert "ngram: not run" not in capsys.readouterr().out and (t == "done").all().all() and not t.attrs.get("failed"), t
    res = N.ngram_results(run)
    assert list(N.curves(res).columns) == ["unigram", "left", "left2"] and (N.curves(res) >= -1e-6).all().all()
    cs = N.closest_steps(run, resamples=50)
    assert list(cs.index) == ["unigram", "left", "left2"]
    assert N.verdict(run, cs).startswith("The next-piece predictions come closest")
    assert (run / "figures" / "fig_ngram_phases.png").stat().st_size > 0


def test_reconstruction_runs_on_a_causal_trainer_series(tmp_path, monkeypatch, capsys):
    "Issue 78: reconstruction on a causal (GPT-NeoX) Trainer series as next-word prediction by part of speech, with its floor."
    from embryo.analyses import reconstruction as R
    from embryo.analyses.sweep import sweep
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series("gpt-neox"), tmp_path / "runs" / "neox")
    assert R.applies_to(run) is None
    t = sweep(open_run(run), ["reconstruction"], mode="inprocess", options={"reconstruction": dict(max_words=40)}, progress=False)
    assert "reconstruction: not run" not in capsys.readouterr().out and (t == "done").all().all(), t
    assert not t.attrs.get("failed"), t.attrs
    assert set(read_results(run, "reconstruction").task) == {R.NEXT, R.FLOOR} and R.tasks_of(run) == (R.NEXT,)
    assert list(R.curves(run, R.NEXT, "pos").index) == STEPS
    assert R.verdict(run).startswith("Next-word prediction:")
    assert (run / "figures" / "fig1_reconstruction_by_pos.png").stat().st_size > 0


def test_knowledge_runs_on_a_causal_trainer_series(tmp_path, monkeypatch, capsys):
    """Issue 78: the knowledge probe on a causal (GPT-NeoX, byte-level BPE) Trainer series: the templates whose answer
    ends the sentence, each answer read as written after a space; the others give no queries."""
    from embryo.analyses import knowledge as K
    from embryo.analyses.sweep import sweep
    from embryo.text.tokenizer import load_tokenizer
    monkeypatch.chdir(tmp_path)
    run = as_run(trainer_series("gpt-neox"), tmp_path / "runs" / "neox")
    assert K.applies_to(run) is None
    tok = load_tokenizer(run)
    assert K.next_cloze(tok, "[Y] is the capital of [X] .", "France") is None  # the answer is not last
    ids, pos = K.next_cloze(tok, "[X] is a subclass of [Y] .", "dog")
    assert ids[0] == tok.start_id and pos == len(ids) - 1 and tok.decode(ids[1:]).strip() == "dog is a subclass of"
    t = sweep(open_run(run), ["knowledge"], mode="inprocess", progress=False)
    assert "knowledge: not run" not in capsys.readouterr().out and (t == "done").all().all(), t
    assert not t.attrs.get("failed"), t.attrs
    res = K.knowledge_results(run)
    assert set(res.step) == set(STEPS) and (res[res.metric == "p@1"].n > 0).all() and "P279" in set(res.task), res
    assert (run / "figures" / "fig6_world_knowledge.png").stat().st_size > 0



def test_every_analysis_and_the_report_on_a_gpt2_trainer_series(tmp_path, monkeypatch, capsys):
    """Issue 78, done when: on a GPT-2 Trainer series every analysis that can read a causal LM runs in one sweep (its
    text named where one needs it), each that cannot says why in one line, and `embryo report` draws them."""
    from embryo.analyses.sweep import ANALYSES, sweep
    from embryo.cli import main
    from embryo.text.sentences import tagged_sentences
    from embryo.train.fixtures import corpus_slice
    from test_notebooks import OPTIONS
    monkeypatch.chdir(tmp_path)
    out = trainer_series("gpt2")
    lines = [l.strip() for l in corpus_slice().read_text().splitlines() if l.strip()][:SERIES["sentences"]]
    train = tmp_path / "train.txt"; train.write_text("\n\n".join("\n".join(lines[i:i + 10]) for i in range(0, 200, 10)) + "\n")
    held = tmp_path / "held.txt"
    held.write_text("\n\n".join("\n".join(" ".join(s.words).lower() for s in tagged_sentences()[i:i + 10])
                                for i in range(0, 200, 10)) + "\n")
    opts = {a: dict(OPTIONS.get(nb.split("_")[0], {})) for a, nb in ANALYSES.items()}
    opts.update(QUICK, memorization=dict(train_text=str(train), heldout_text=str(held), n_chunks=2),
                ngram=dict(corpus=str(train), max_sentences=200), glue=dict(max_train_examples=32, max_dev_examples=50,
                                                                            seeds=1),
                induction=dict(n_sequences=8), lens=dict(n_sentences=64), knowledge=dict(max_facts=50),
                grammar=dict(n_pairs=20), aoa=dict(max_occurrences=2))
    t = sweep(open_run(out), None, mode="inprocess", options=opts, steps=[STEPS[-1]], progress=False)
    said = capsys.readouterr().out
    not_run = {l.split(":")[0] for l in said.splitlines() if ": not run:" in l}
    assert not_run <= {"exposure"}, said  # only the injected facts' analysis cannot read this series
    assert (t == "done").all().all() and not t.attrs.get("failed"), (t, said)
    assert set(t.index) == set(ANALYSES) - not_run
    run, figs = tmp_path / "runs" / out.name, tmp_path / "report"
    rc = main(["report", "--run", str(run), "--figures", str(figs)])
    o = capsys.readouterr()
    assert rc == 0 and not any("failed:" in l for l in (o.out + o.err).splitlines()), o
    page = (figs / "index.html").read_text()
    for f in ("fig_lens", "fig_memorization", "fig_induction", "fig_llc", "fig1_reconstruction_by_pos"):
        assert f in page, f
