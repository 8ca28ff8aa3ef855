"""Numbers a reader can trust (issue "numbers a reader can trust", items 1-4 and 6): inputs that used to give wrong
numbers with no error now stop with one line naming the file or value and the fix. Each test here failed on cf5b18f."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from embryo.text.tokenizer import load_tokenizer, TokenizerError
from embryo.train.fixtures import FIXTURE, corpus_slice, fixture_run
from embryo.runs.results import read_results, write_results
from embryo.runs.run import SeriesError, find_checkpoint, list_steps, load_checkpoint
from embryo.runs.series import as_run
from embryo.model.model import CheckpointError

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "embryo.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def _one_line(res, status=2):
    "The error line of a refused command: exactly one line on stderr, no traceback."
    assert res.returncode == status, (res.returncode, res.stdout[-2000:], res.stderr[-3000:])
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr[-3000:]
    return res.stderr.strip()


@pytest.fixture
def run_copy(tmp_path):
    "A copy of the fixture run (checkpoints, tokenizer, settings, log)."
    return Path(shutil.copytree(fixture_run(), tmp_path / "run", ignore=shutil.ignore_patterns(
        "results.sqlite*", "figures", "notebooks", ".lock", "resume")))


def _series(tmp_path, name):
    "A folder of two checkpoint folders of a micro BERT (different seeds per `name`), as a Trainer leaves them."
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
    from tokenizers import BertWordPieceTokenizer
    lines = corpus_slice().read_text().splitlines()[:500]
    wp = BertWordPieceTokenizer(lowercase=True); wp.train_from_iterator(lines, vocab_size=300, show_progress=False)
    tok = BertTokenizerFast(tokenizer_object=wp._tokenizer)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    out = tmp_path / name / "out"
    for s in (2, 4):
        torch.manual_seed(hash(name) % 1000 + s)
        BertForMaskedLM(cfg).save_pretrained(out / f"checkpoint-{s}"); tok.save_pretrained(out / f"checkpoint-{s}")
    return out


def test_two_series_whose_folders_share_a_name_are_never_one_run(tmp_path, monkeypatch):
    "Item 1: A/out swept, then B/out from the same working folder: B is refused, not read as A's results."
    a, b = _series(tmp_path, "A"), _series(tmp_path, "B")
    monkeypatch.chdir(tmp_path)
    run = as_run(a)
    assert run == Path("runs/out") and json.loads((run / "source.json").read_text()) == {"path": str(a.resolve())}
    write_results(run, "probing", 4, [dict(task="pos", layer=1, metric="accuracy", value=0.5)])
    line = _one_line(_cli("sweep", "--run", str(b), "--analyses", "attention", cwd=tmp_path))
    assert "runs/out is already the run of" in line and str(a.resolve()) in line and str(b.resolve()) in line, line
    assert all(p.resolve().parent == a.resolve() for p in (run / "checkpoints").iterdir())  # still A's
    assert as_run(a) == run  # A again: the same run
    (run / "source.json").unlink()  # a run made before the record: its links say whose it is
    with pytest.raises(SeriesError, match="already the run of"): as_run(b)


def test_a_config_that_names_another_family_is_refused(run_copy):
    "Item 2: config.json saying bert over ALBERT weights used to load a random BertModel and analyse it."
    step = list_steps(run_copy)[-1]
    f = find_checkpoint(run_copy, step) / "config.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), "model_type": "bert"}))
    with pytest.raises(CheckpointError, match="do not fill the Bert"): load_checkpoint(run_copy, step)


def test_weights_that_hold_nan_are_refused(run_copy):
    "Item 2: all-NaN weights used to be analysed."
    from safetensors.torch import load_file, save_file
    step = list_steps(run_copy)[-1]
    f = find_checkpoint(run_copy, step) / "model.safetensors"
    save_file({k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in load_file(f).items()}, f)
    with pytest.raises(CheckpointError, match="hold NaN or infinite values"): load_checkpoint(run_copy, step)
    load_checkpoint(run_copy, list_steps(run_copy)[0])  # the other steps still load


def test_a_run_whose_tokenizer_files_are_gone_has_no_tokenizer(run_copy):
    "Item 2: with spiece.model and tokenizer.json gone, transformers built a 5-piece tokenizer from the config alone."
    for n in ("spiece.model", "tokenizer.json"): (run_copy / n).unlink()
    with pytest.raises(TokenizerError, match="no tokenizer at"): load_tokenizer(run_copy)


def test_a_tokenizer_that_does_not_fit_the_embeddings_is_refused(run_copy, tmp_path):
    "Item 2: another model's vocabulary (here a 300-piece WordPiece) beside the run's weights."
    for n in ("spiece.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (run_copy / n).unlink()
    src = _series(tmp_path, "C") / "checkpoint-2"
    for n in ("tokenizer.json", "tokenizer_config.json"): shutil.copy(src / n, run_copy / n)
    with pytest.raises(TokenizerError, match="embedding rows"): load_checkpoint(run_copy, list_steps(run_copy)[-1])


@pytest.mark.parametrize("option", ["knowledge.max_facts=-5", "knowledge.max_facts=0", "knowledge.relations=[]",
                                    "probing.tasks=[]", "attention.n_sentences=0"])
def test_options_that_select_nothing_are_refused_and_erase_nothing(run_copy, option):
    "Item 3: such an option used to exit 0 and leave the step with no rows."
    a = option.split(".")[0]
    step = list_steps(run_copy)[-1]
    write_results(run_copy, a, step, [dict(task="t", metric="accuracy", value=0.25)])
    line = _one_line(_cli("sweep", "--run", str(run_copy), "--analyses", a, "--steps", str(step), "--force",
                          "--mode", "inprocess", "--option", option))
    assert option.split("=")[0].split(".")[1] in line and ("above 0" in line or "selects nothing" in line), line
    assert len(read_results(run_copy, a, step=step)) == 1  # nothing erased


def test_a_job_that_writes_no_row_fails_and_so_does_the_sweep(run_copy, monkeypatch, capsys):
    "Item 3: a job that ends without error but measures nothing is failed, and a failed sweep exits non-zero."
    from embryo.analyses import attention
    from embryo.cli import main
    monkeypatch.setattr(attention, "evaluate_step", lambda run, step, device="cpu", **kw: None)
    step = list_steps(run_copy)[-1]
    status = main(["sweep", "--run", str(run_copy), "--analyses", "attention", "--steps", str(step), "--mode",
                   "inprocess"])
    out = capsys.readouterr().out
    assert status == 1 and "attention wrote no results for step" in out, out
    assert "failed" in out


def test_a_failed_redraw_fails_the_sweep(run_copy, monkeypatch, capsys):
    "Item 3: a sweep that printed '1 failed' (its redraw) exited 0."
    from embryo.analyses import similarity
    from embryo.cli import main
    def broken(*a, **k): raise ValueError("cannot draw")
    monkeypatch.setattr(similarity, "redraw", broken)
    step = list_steps(run_copy)[-1]
    status = main(["sweep", "--run", str(run_copy), "--analyses", "similarity", "--steps", str(step), "--mode",
                   "inprocess", "--option", "similarity.max_tokens=64"])
    out = capsys.readouterr().out
    assert "1 failed" in out and "redraw: ValueError: cannot draw" in out, out
    assert status == 1


def _pretrain(run, *sets, override=False):
    sets = {**FIXTURE["model"], **FIXTURE["train"], "corpus": str(corpus_slice()), "warmup_steps": 1,
            **dict(s.split("=", 1) for s in sets)} if not override else dict(s.split("=", 1) for s in sets)
    return _cli("pretrain", "--preset", "tiny", "--run-dir", str(run), "--no-progress",
                *(["--override"] if override else []), "--set", *[f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                                                                   for k, v in sets.items()])


def test_total_steps_below_the_last_checkpoint_is_refused(run_copy):
    "Item 4: --override --set total_steps=20 on a run trained to 30 rewrote step 30's model card with false figures."
    card = find_checkpoint(run_copy, 30) / "README.md"
    before = card.read_text()
    line = _one_line(_pretrain(run_copy, "total_steps=20", override=True))
    assert "total_steps=20 is below step 30" in line, line
    assert card.read_text() == before


@pytest.mark.parametrize("sets,says", [(["corpus="], "names no text"),
                                       (["max_seq_length=128", "max_position_embeddings=64"], "longer than the model's"),
                                       (["type_vocab_size=1"], "needs two segment types")])
def test_settings_that_cannot_train_are_refused_before_the_run_folder_is_made(tmp_path, sets, says):
    "Item 4: `--set corpus=` trained on every .txt under the working folder; the others are each valid alone."
    line = _one_line(_pretrain(tmp_path / "run", "total_steps=4", *sets))
    assert says in line, line
    assert not (tmp_path / "run").exists()


def test_a_folder_that_asks_to_run_its_own_code_is_refused(tmp_path):
    "Item 6: an auto_map in config.json made transformers ask, mid-sweep, whether to run the folder's Python code."
    out = _series(tmp_path, "D")
    for s in (2, 4):
        f = out / f"checkpoint-{s}" / "config.json"
        f.write_text(json.dumps({**json.loads(f.read_text()), "auto_map": {"AutoModel": "modeling_x.XModel"}}))
        (out / f"checkpoint-{s}" / "modeling_x.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    line = _one_line(_cli("sweep", "--run", str(out), "--analyses", "attention", cwd=tmp_path))
    assert "asks to run Python code of its own" in line, line
    assert not (tmp_path / "ran").exists() and not (tmp_path / "runs" / "out").exists()


def test_a_copied_checkpoint_is_flagged_before_the_sweep_reads_it(tmp_path, monkeypatch, capsys):
    "A series is checked before it is read: a step that is a copy of another (as users found in Pythia) is named."
    from embryo.analyses.sweep import sweep
    from embryo.runs.series_check import open_run
    out = _series(tmp_path, "E")
    shutil.copytree(out / "checkpoint-2", out / "checkpoint-6")
    monkeypatch.chdir(tmp_path)
    sweep(open_run(out), analyses=[], progress=False)  # opening the series checks it
    said = capsys.readouterr().out
    assert "steps 2 and 6 hold the same weights" in said, said
    flags = json.loads((tmp_path / "runs" / "out" / "logs" / "series_check.json").read_text())["flags"]
    assert len(flags) == 1 and flags[0].startswith("steps 2 and 6"), flags


def test_a_run_that_explodes_without_a_nan_stops_before_saving_exploded_weights(tmp_path):
    """Item 4: at rate 5 the loss climbs to 18, 114, ... 7e6 nats, all finite; checkpoints 2-8 and the resume point held
    exploded weights, and the advised --override resumed from them to rc 0 at held-out 0.000."""
    run = tmp_path / "run"
    line = _one_line(_pretrain(run, "total_steps=40", "learning_rate=5.0", "log_every=1"))
    assert "TrainingDiverged" in line and "MLM loss became" in line and "a uniform guess" in line, line
    assert list_steps(run) == [0] and not (run / "resume").exists()  # nothing exploded was saved
    res = _pretrain(run, "learning_rate=0.002", override=True)
    assert res.returncode == 0, res.stderr[-2000:]
    acc = float(res.stdout.split("held-out MLM accuracy ")[1].split()[0])
    assert acc > 0.01, res.stdout  # a language model again, not the exploded one (0.000)


def test_the_report_names_a_copied_checkpoint(tmp_path, monkeypatch, capsys):
    "A series is checked before it is read, and the report says what the check found, first."
    from embryo.cli import main
    from embryo.analyses.sweep import sweep
    from embryo.runs.series_check import open_run
    out = _series(tmp_path, "F")
    shutil.copytree(out / "checkpoint-2", out / "checkpoint-6")
    monkeypatch.chdir(tmp_path)
    sweep(open_run(out), analyses=["attention"], mode="inprocess", options={"attention": dict(n_sentences=8, seq_len=10)},
          progress=False)
    main(["report", "--run", "runs/out", "--figures", str(tmp_path / "figs")])
    said = capsys.readouterr().out
    assert "series check: steps 2 and 6 hold the same weights" in said, said
    page = (tmp_path / "figs" / "index.html").read_text()
    assert "Series check" in page and "steps 2 and 6 hold the same weights" in page
