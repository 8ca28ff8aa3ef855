"""Every notebook in nbs/ runs top to bottom as a test (nbdev's test_nb), one pytest test per notebook."""
import os
import re
import sys
from pathlib import Path

import pytest
from nbdev.test import test_nb as run_notebook

from embryo.analyses.sweep import ANALYSES

NBS = sorted((Path(__file__).resolve().parents[1] / "nbs").glob("*.ipynb"))


def test_found_notebooks():
    assert len(NBS) >= 3, f"expected the notebooks in nbs/, found {NBS}"


@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_notebook(nb, capsys):
    ok, secs = run_notebook(nb, skip_flags=["notest"], showerr=True)
    assert ok, f"{nb.name} failed (see the traceback above)"


# A second micro run whose settings differ from the fixture's wherever an analysis could assume them: its corpus (documents
# 2,000-2,300 of embryo-mini, PTB's, where the fixture reads Brown's first 300, so its SentencePiece vocabulary differs too),
# sequence length, vocabulary size, layers, heads, and BERT's layout (no sharing, E = H, NSP), like the BERT twin. Each analysis notebook runs
# whole on it under papermill, as the README's `papermill nbs/05_glue.ipynb out.ipynb -p run_dir ... -p step ...` does,
# so a demo or test cell that holds only for the fixture fails here.
OTHER_CORPUS = dict(n_docs=300, start=2000)
OTHER_RUN = dict(vocab_size=600, tokenizer_vocab_size=600, max_seq_length=32, num_hidden_layers=3, num_attention_heads=4,
                 sharing="none", embedding_size=64, sentence_task="nsp", total_steps=8, eval_sequences=32)
# The same as an ELECTRA pair (notebook 01a): the analyses read the generator or the discriminator through one interface.
OTHER_RUNS = {"bert-like": OTHER_RUN, "electra": dict(OTHER_RUN, model_type="electra", sentence_task="none")}
# Where each other run's notebooks execute: the repository root (as the README runs them) for one, nbs/ (where JupyterLab and
# nbdev_test run them) for the other, so every notebook runs on a foreign corpus from both folders.
CWD = {"bert-like": lambda nb: nb.parent.parent, "electra": lambda nb: nb.parent}
# the notebooks of the sweep's analyses (09 takes no run: it trains its own; 04a-04c, 05b hold pieces of an analysis)
ANALYSIS_NBS = [p for p in NBS if p.stem[:2] in ("04", "05", "06", "07", "08") and p.stem in ANALYSES.values()]
OPTIONS = {"04": dict(max_words=100), "05": dict(max_train_examples=64, max_dev_examples=200),  # small caps: seconds, not minutes
           "05a": dict(squad_dir=str(Path(__file__).parent / "data" / "squad2"), max_train_examples=4),
           "08a": dict(max_sentences=100, treebank=str(Path(__file__).parent / "data" / "treebank")),
           "08c": dict(n_pairs=30), "08d": dict(max_occurrences=3), "08e": dict(chains=2, draws=8)}


def _kernel(cwd):
    "A started kernel in `cwd`, shut down after the last test that uses it."
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name="python3"); km.start_kernel(cwd=str(cwd))
    yield km
    km.shutdown_kernel(now=True)


# The notebooks papermill runs here on one run share a kernel (passed as `km`), so the 6-7 s of starting it and importing
# torch, transformers and embryo are paid once per run, not per notebook (CI time). Each notebook still runs whole, its
# parameters injected, as the README's papermill command runs it; that each one also runs in a fresh kernel of its own is
# what nbdev_test checks, top to bottom, on the fixture.
@pytest.fixture(scope="module")
def root_kernel():
    yield from _kernel(NBS[0].parent.parent)


@pytest.fixture(scope="module", params=list(OTHER_RUNS))
def other_run(request, tmp_path_factory):
    "A copy of a differently configured micro run (built once under the data dir), with a results database of its own."
    import shutil
    from embryo.train.fixtures import fixture_run
    dst = tmp_path_factory.mktemp("run") / request.param
    from embryo.train.fixtures import corpus_slice
    shutil.copytree(fixture_run(**OTHER_RUNS[request.param], corpus=str(corpus_slice(**OTHER_CORPUS))), dst, ignore=shutil.ignore_patterns("results.sqlite*", "figures", "resume"))
    return dst


def test_other_runs_read_a_corpus_of_their_own(other_run):
    "The other runs' text and SentencePiece vocabulary are not the fixture's, so a cell that assumes the fixture's pieces fails."
    import sentencepiece as spm
    from embryo.train.fixtures import fixture_run
    from embryo.runs.run import read_run_config
    mine, theirs = (read_run_config(r).train.corpus for r in (fixture_run(), other_run))
    assert mine != theirs and Path(theirs).read_text()[:2000] != Path(mine).read_text()[:2000], (mine, theirs)
    pieces = [set(spm.SentencePieceProcessor(model_file=str(r / "spiece.model")).id_to_piece(i) for i in range(600))
              for r in (fixture_run(), other_run)]
    assert len(pieces[0] ^ pieces[1]) > 100, "the two vocabularies are nearly the same"


def test_found_analysis_notebooks():
    assert [p.stem.split("_")[0] for p in ANALYSIS_NBS] == ["04", "05", "05a", "06", "06a", "07", "07a", "08", "08a",
                                                             "08b", "08c", "08d", "08e", "08g", "08h", "08i"], ANALYSIS_NBS


@pytest.fixture(scope="module")
def other_kernel(other_run):
    yield from _kernel(CWD[other_run.name](NBS[0]))


def _named_texts(run, tmp_path) -> dict:
    "Memorization's options for a run on a corpus of its own: that corpus, and held-out Brown as documents of 10 sentences."
    from embryo.runs.run import read_run_config
    from embryo.text.sentences import tagged_sentences
    held = tmp_path / "heldout.txt"
    held.write_text("\n\n".join("\n".join(" ".join(s.words).lower() for s in tagged_sentences()[i:i + 10])
                                for i in range(0, 400, 10)) + "\n")
    return dict(train_text=read_run_config(run).train.corpus, heldout_text=str(held))


@pytest.mark.parametrize("nb", ANALYSIS_NBS, ids=[p.stem for p in ANALYSIS_NBS])
def test_analysis_notebook_on_other_run(nb, other_run, other_kernel, tmp_path):
    import papermill as pm
    from embryo.runs.run import list_steps
    from embryo.analyses.sweep import ANALYSES, analysis_module
    name = next(a for a, n in ANALYSES.items() if n == nb.stem)
    texts = _named_texts(other_run, tmp_path) if name == "memorization" else {}  # a run on text of its own names it
    if why := analysis_module(name).applies_to(other_run, **texts):  # the sweep leaves it out of such a run, saying why
        assert name == "exposure" and "without injected facts" in why, why  # only the injected facts' analysis may
        return
    step = list_steps(other_run)[-1]
    try:
        pm.execute_notebook(str(nb), str(tmp_path / nb.name), km=other_kernel, kernel_name="python3", progress_bar=False,
                            parameters=dict(run_dir=str(other_run), step=step, figures_dir=str(tmp_path / "figures"),
                                            **OPTIONS.get(nb.stem.split("_")[0], {}), **texts))
    except pm.PapermillExecutionError as e:
        pytest.fail(f"{nb.name} fails on a run configured unlike the fixture ({other_run.name}: {OTHER_RUNS[other_run.name]}): "
                    f"{e.ename}: {e.evalue}\n"
                    + "".join(e.traceback[-3:]), pytrace=False)


@pytest.mark.parametrize("nb", ANALYSIS_NBS, ids=[p.stem for p in ANALYSIS_NBS])
def test_a_step_that_does_not_exist_stops_the_notebook_at_once(nb, root_kernel, tmp_path):
    "Issue 33, point 3: the design card's `papermill nbs/05_glue.ipynb -p step 250000` failed 15-20 s in, in a demo cell."
    import papermill as pm
    with pytest.raises(pm.PapermillExecutionError) as e:
        pm.execute_notebook(str(nb), str(tmp_path / nb.name), km=root_kernel, kernel_name="python3", progress_bar=False,
                            parameters=dict(step=250000))
    # the fixture run's steps (0, ...), or the committed default run's (08h reads it by default)
    assert e.value.ename == "CheckpointNotFound" and re.search("has no checkpoint for step 250000; it has (0|2500), ",
                                                               e.value.evalue), e.value.evalue
    import nbformat
    cells = nbformat.read(tmp_path / nb.name, as_version=4).cells
    ran = [c for c in cells if c.cell_type == "code" and c.get("execution_count")]
    setup = lambda c: (set(c.metadata.get("tags", [])) & {"parameters", "injected-parameters", "sweep"}
                       or c.source.lstrip().startswith(("#| export", "#| hide", "#| default_exp")))
    demo = [c.source.splitlines()[0] for c in ran if not setup(c)]
    assert not demo, f"{nb.name}: demo cells ran before the step was checked: {demo}"  # it fails right after the parameters
