"""A user's pretraining corpus taken at its word: every form the README names trains the same examples, and the run's
config records what it was."""
import json
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest

from embryo.text.corpus import CorpusError
from embryo.text.tokenizer import load_tokenizer
from embryo.train import pretrain as P
from embryo.config import ConfigError, get_config, get_train_config
from embryo.analyses.reconstruction import token_counts
from embryo.train.batches import prepare_run
from embryo.train.fixtures import FIXTURE

DATA = Path(__file__).parent / "data" / "corpus"  # 16 documents of embryo-mini, one file per format


def prepare(run, corpus, spiece):
    "Prepare a fixture-sized run on `corpus` with a given vocabulary: (examples, the corpus its config records)."
    run.mkdir(parents=True, exist_ok=True)
    shutil.copy(spiece, run / "spiece.model")  # the same tokenizer for every form, so the examples can be compared
    mc = get_config("tiny", **FIXTURE["model"])
    tc = get_train_config("tiny", **FIXTURE["train"], corpus=corpus)
    tok, ds = prepare_run(run, "tiny", mc, tc)
    return ds["input_ids"], json.loads((run / "pretrain_config.json").read_text())["train"]["corpus"]


@pytest.fixture(scope="module")
def spiece(fixture_copy):
    return fixture_copy / "spiece.model"


@pytest.fixture(scope="module")
def reference(spiece, tmp_path_factory):
    run = tmp_path_factory.mktemp("txt") / "run"
    ids, recorded = prepare(run, str(DATA / "documents.txt"), spiece)
    assert recorded == str(DATA / "documents.txt") and len(ids) >= 30
    return run, ids


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_dataset_files_give_the_examples_of_the_text_file(ext, reference, spiece, tmp_path):
    ids, recorded = prepare(tmp_path / "run", str(DATA / f"documents.{ext}"), spiece)
    assert ids == reference[1] and recorded == str(DATA / f"documents.{ext}")


def test_token_counts_read_a_dataset_file_corpus(reference, spiece, tmp_path):
    "Fig. 8's token frequencies come from the corpus's documents, whatever its format (not the JSON text of the file)."
    prepare(tmp_path / "run", str(DATA / "documents.jsonl"), spiece)
    tok = load_tokenizer(spiece)
    np.testing.assert_array_equal(token_counts(tmp_path / "run", tok), token_counts(reference[0], tok))


def test_saved_dataset_folder(reference, spiece, tmp_path):
    datasets.Dataset.from_json(str(DATA / "documents.jsonl")).save_to_disk(str(tmp_path / "saved"))
    ids, recorded = prepare(tmp_path / "run", str(tmp_path / "saved"), spiece)
    assert ids == reference[1] and recorded == str(tmp_path / "saved")


def test_dataset_object_is_saved_into_the_run_and_recorded(reference, spiece, tmp_path):
    ds = datasets.Dataset.from_json(str(DATA / "documents.jsonl"))
    run = tmp_path / "run"
    ids, recorded = prepare(run, ds, spiece)  # before: "Object of type Dataset is not JSON serializable"
    assert ids == reference[1]
    assert Path(recorded).parent == run and Path(recorded).name.startswith("corpus-")
    assert datasets.load_from_disk(recorded)["text"] == ds["text"]  # the run keeps what it trained on
    assert prepare(run, ds, spiece)[1] == recorded  # resuming with the same Dataset is the same run
    assert prepare(tmp_path / "dict", datasets.DatasetDict(train=ds), spiece)[0] == reference[1]
    (run / "resume").mkdir()  # the run has trained (a resume point): from now on its corpus is fixed
    with pytest.raises(ConfigError, match="corpus: .*corpus-.* in the run, .*corpus-.* now"):
        prepare(run, ds.select(range(8)), spiece)  # another corpus under the same run folder
    assert len(list(run.glob("corpus-*"))) == 1  # and nothing of it was saved
    with pytest.raises(CorpusError, match=r"no 'text' column \(its columns are \['id', 'body'\]\)"):
        prepare(tmp_path / "x", ds.rename_column("text", "body"), spiece)
    with pytest.raises(ConfigError, match=r"corpus is a list; pass a built-in corpus \('embryo-mini', 'embryo-plus' or 'embryo-mix'\), a text file"):
        prepare(tmp_path / "y", [["a sentence."]], spiece)


def test_hub_name_is_read_as_a_hub_dataset(spiece, tmp_path, hub_offline):
    "A hub name reaches `datasets` (offline here: the error says so) instead of failing as a missing file."
    with pytest.raises(CorpusError, match="'embryo-tests/no-such-corpus' is not a local file or folder, and loading it as a hub dataset failed"):
        prepare(tmp_path / "run", "embryo-tests/no-such-corpus", spiece)
    assert json.loads((tmp_path / "run" / "pretrain_config.json").read_text())["train"]["corpus"] == "embryo-tests/no-such-corpus"


def test_a_missing_corpus_says_what_is_accepted(spiece, tmp_path):
    with pytest.raises(CorpusError, match=r"corpus '.*nowhere.txt' does not exist; pass a built-in corpus \('embryo-mini', 'embryo-plus' or 'embryo-mix'\), a text file .* a datasets\.Dataset, or a hub dataset name"):
        prepare(tmp_path / "run", str(tmp_path / "nowhere.txt"), spiece)


def test_the_start_of_a_run_says_what_it_builds(spiece, tmp_path, capsys):
    "Before the first step, a run prints what it is reading and building (it was silent for tens of seconds)."
    run = tmp_path / "run"
    run.mkdir(); shutil.copy(spiece, run / "spiece.model")
    mc = get_config("tiny", **FIXTURE["model"])
    tc = get_train_config("tiny", **FIXTURE["train"], corpus=str(DATA / "documents.txt"), seed=11)
    prepare_run(run, "tiny", mc, tc, verbose=True)
    out = capsys.readouterr().out
    assert f"pretrain {run}: reading the corpus {DATA / 'documents.txt'}" in out
    assert "sop examples of 64 tokens" in out and "examples ready" in out
    prepare_run(run, "tiny", mc, tc)  # quiet unless asked
    assert capsys.readouterr().out == ""
