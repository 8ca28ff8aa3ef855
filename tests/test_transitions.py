"""Phase transitions of the loss (nbs/03_pretrain.ipynb `transitions`): found where known on synthetic curves, none in
steady decay, stored in the results database, and marked on the analyses' figures over steps."""
import json

import numpy as np
import pytest

from embryo.analyses import attention as A
from embryo.runs.run import list_steps, train_log, transitions
from embryo.runs.figures import TRANSITION_LABEL
from embryo.train.fixtures import fixture_run
from embryo.runs.results import read_results, write_transitions

STEPS = np.unique(np.r_[np.arange(1, 100), np.arange(100, 100_001, 50)])


def sigmoid(at, height, width=0.05, steps=STEPS):
    "A drop of `height` nats centred at step `at`, `width` decades wide."
    return height / (1 + np.exp((np.log10(steps) - np.log10(at)) / width))


def rows(loss, steps=STEPS):
    return [dict(step=int(s), mlm_loss=float(v)) for s, v in zip(steps, loss)]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("at", [50, 700, 3000, 40_000])
def test_one_sigmoid_drop_is_found_at_its_step(seed, at):
    noise = np.random.default_rng(seed).normal(0, 0.05, len(STEPS))
    found = transitions(rows(4 + sigmoid(at, 1.0) + noise))
    assert len(found) == 1, found
    assert abs(np.log10(found[0]["step"] / at)) < 0.05, (at, found)  # within 12% of the step
    assert found[0]["drop"] == pytest.approx(1.0, abs=0.15) and found[0]["rate"] > 0
    assert found[0]["start_step"] <= found[0]["step"] <= found[0]["end_step"]


@pytest.mark.parametrize("seed", range(5))
def test_two_drops_on_a_power_law_are_found_and_nothing_else(seed):
    noise = np.random.default_rng(seed).normal(0, 0.05, len(STEPS))
    power = 3 + 4 * STEPS ** -0.3
    assert transitions(rows(power + noise)) == []
    found = transitions(rows(power + sigmoid(400, 0.6) + sigmoid(25_000, 0.5) + noise))
    assert [round(np.log10(t["step"] / at), 1) for t, at in zip(found, (400, 25_000))] == [0, 0] and len(found) == 2, found


def test_a_rise_or_a_flat_curve_is_not_a_transition():
    assert transitions(rows(4 - sigmoid(2000, 1.0))) == []
    assert transitions(rows(np.full(len(STEPS), 5.0))) == []
    assert transitions(rows(4 + sigmoid(2000, 1.0))[:3]) == []


def test_fixture_log_gives_only_drops_inside_it():
    log = train_log(fixture_run())
    steps = [r["step"] for r in log]
    for t in transitions(log):
        assert t["drop"] > 0 and min(steps) < t["step"] < max(steps), t


def test_attention_figure_marks_the_transition_and_the_database_holds_it(fixture_copy):
    "The copy's log (every step, an MLM loss that drops by 1 nat at step 12) replaces the fixture's 7-record one."
    run = fixture_copy
    for s in list_steps(run)[-2:]: A.evaluate_step(run, s, n_sentences=24, seq_len=12)
    (run / "logs").mkdir(exist_ok=True)
    steps = np.arange(1, 31)
    (run / "logs" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(5 + sigmoid(12, 1.0, steps=steps), steps)))
    found = write_transitions(run)
    assert len(found) == 1 and abs(found[0]["step"] - 12) <= 1, found
    db = read_results(run, "pretraining", task="mlm_loss")
    assert sorted(set(db.step)) == [found[0]["step"]]
    assert db.set_index("metric").value["drop"] == pytest.approx(found[0]["drop"])
    assert (run / "logs" / "transitions.json").exists()
    fig = A.plot_diagonal(run)
    marks = [l for ax in fig.axes for l in ax.lines if l.get_gid() == "loss-transition"]
    assert marks and {float(l.get_xdata()[0]) for l in marks} == {found[0]["step"]}
    assert any(l.get_label() == TRANSITION_LABEL for l in marks)


TINY_LOG = np.r_[1, np.arange(50, 8001, 50)]  # the default run's log: every 50th of 8,000 steps


@pytest.mark.parametrize("seed", range(5))
def test_a_drop_the_log_ends_inside_is_found_and_marked_open(seed):
    "A short run stops mid-transition: the last segment falls faster than the one before and has nothing after it."
    noise = np.random.default_rng(seed).normal(0, 0.05, len(TINY_LOG))
    power = 5 + 3 * TINY_LOG ** -0.3
    assert transitions(rows(power + noise, TINY_LOG)) == []
    found = transitions(rows(power + sigmoid(6000, 0.7, 0.1, TINY_LOG) + noise, TINY_LOG))
    assert [t["open"] for t in found] == [True], found
    assert abs(np.log10(found[0]["step"] / 6000)) < 0.1 and found[0]["end_step"] == 8000 and found[0]["drop"] > 0.4, found


def test_the_committed_default_run_marks_its_loss_drop():
    "figures/run/ holds the default run's training log: its loss leaves the plateau near 6 nats between steps 3,000 and 6,000."
    from pathlib import Path
    log = Path(__file__).parents[1] / "figures" / "run" / "logs" / "train.jsonl"
    found = transitions(log.parents[1])
    assert len(found) == 1 and 3000 <= found[0]["step"] <= 6000 and found[0]["drop"] > 0.5, found
