"""The run as a type: a `Run` goes wherever a run folder does, and says what the folder holds."""
from pathlib import Path

import pytest

from embryo.runs.run import Run, CheckpointNotFound, resolve_step


def test_run_reads_the_fixture(fixture_copy):
    run = Run(fixture_copy)
    assert run.steps == [0, 1, 2, 4, 8, 16, 20, 30] and run.preset == "tiny" and run.model_type == "albert"
    assert run.checkpoint(30) == fixture_copy / "checkpoints" / "step_0000030" and str(run) == str(fixture_copy)
    assert run.tokenizer().vocab_size == run.settings["model"]["vocab_size"]
    assert resolve_step(run) == 30 and run.load(30).config.num_hidden_layers == 2
    with pytest.raises(CheckpointNotFound, match="it has 0, 1, 2, 4, 8, 16, 20, 30"): run.checkpoint(7)


def test_an_analysis_takes_a_run_and_a_left_out_step(fixture_copy):
    "evaluate_step takes a Run as it takes a folder, and step=None is the run's last step, as in the notebooks."
    from embryo.analyses import attention
    from embryo.runs.results import read_results
    attention.evaluate_step(Run(fixture_copy), None, n_sentences=8, seq_len=12)
    assert sorted(read_results(fixture_copy, "attention").step.unique()) == [30]


def test_the_quick_run_is_measured_to_stop_while_its_loss_still_falls(root):
    "Issue 'findings': the committed quick run ends mid-transition; its pretraining verdict measures the loss's pace."
    from embryo.publish.report import _pretraining_verdict
    from embryo.runs.run import loss_pace, train_log
    rows = train_log(root / "figures" / "run")
    end = loss_pace(rows, rows[-1]["step"])
    assert 0.5 < end < 1.5, end  # nats per decade of steps, at the last logged step
    v = _pretraining_verdict(root / "figures" / "run")
    assert f"falls at {end:.2f} nats per decade" in v and "stops while still falling" in v, v


def test_step_folders_are_ascii_digits_only(fixture_copy):
    "Issue 32, finding 8: `step_²` made every sweep fail with a traceback and `step_٣` was read as step 3."
    import shutil
    from embryo.analyses.sweep import sweep
    from embryo.runs.series_check import open_run
    src = fixture_copy / "checkpoints" / "step_0000002"
    for name in ("step_\u00b2", "step_\u0663"):
        shutil.copytree(src, fixture_copy / "checkpoints" / name)
    run = Run(fixture_copy)
    assert run.steps == [0, 1, 2, 4, 8, 16, 20, 30]  # neither is a step
    t = sweep(open_run(fixture_copy), ["knowledge"], steps=[2], mode="inprocess", options={"knowledge": dict(max_facts=5)},
              progress=False)
    assert t.loc["knowledge", 2] == "done"
