"""Pretraining end to end: exact resume after SIGKILL, torchrun with 2 processes, clear errors."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from embryo import pretrain as P
from embryo.config import ConfigError, get_config, get_train_config

ROOT = Path(__file__).resolve().parents[1]


def fixture_args(run, **extra):
    "Command-line arguments that train the fixture's micro configuration into `run`."
    sets = {**P.FIXTURE["model"], **P.FIXTURE["train"], "corpus": str(P.corpus_slice()), **extra}
    return ["--preset", "tiny", "--run-dir", str(run), "--no-progress", "--set"] + [f"{k}={json.dumps(v)}" for k, v in sets.items()]


def weights(run, step):
    return load_file(P.checkpoint_dir(run, step) / "model.safetensors")


def losses(run):
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in P._read_log(Path(run) / "logs" / "train.jsonl", 1 << 62)]


def run_until(args, stop, timeout=240):
    "Start a pretraining process; SIGKILL it as soon as `stop()` is true. Returns True if it was killed."
    proc = subprocess.Popen([sys.executable, "-m", "embryo.pretrain", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.time()
    while proc.poll() is None and time.time() - t0 < timeout:
        if stop():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.005)
    err = proc.stderr.read().decode()
    assert proc.wait() == 0, err
    return False


def test_sigkill_and_resume_is_bit_identical(tmp_path):
    reference = P.fixture_run()  # the uninterrupted run
    run = tmp_path / "killed"
    args = fixture_args(run)
    logged = lambda k: any(r["step"] >= k for r in P._read_log(run / "logs" / "train.jsonl", 1 << 62))
    mid_write = lambda: any(p.name.endswith(".tmp") for d in (run, run / "checkpoints") if d.exists() for p in d.iterdir())
    kills = [lambda: (P.checkpoint_dir(run, 2)).exists(),  # early, right after a checkpoint
             lambda: mid_write() or logged(20),  # while a checkpoint or resume point is being written, if we catch one
             lambda: logged(25)]  # between resume points: work since step 20 is redone
    killed = [run_until(args, k) for k in kills]
    assert sum(killed) >= 2, f"expected the kills to land, got {killed}"
    run_until(args, lambda: False)  # resume to the end
    assert P.list_steps(run) == P.list_steps(reference)
    for step in P.list_steps(reference):
        a, b = weights(run, step), weights(reference, step)
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), f"weights differ at step {step}"
    assert losses(run) == losses(reference)
    assert not [p for p in (run / "checkpoints").iterdir() if not p.name.startswith("step_")]


def test_torchrun_two_processes_equals_one(tmp_path):
    # dropout draws differ between 1 and 2 processes; the rest is the same math, checked in fp32 (bf16 rounds each
    # process's partial sums, and LAMB's normalised update magnifies that in the smallest gradients)
    extra = dict(classifier_dropout_prob=0.0, precision="fp32")
    one, two = tmp_path / "one", tmp_path / "two"
    run_until(fixture_args(one, **extra), lambda: False)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
           "-m", "embryo.pretrain", *fixture_args(two, **extra)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = weights(one, 30), weights(two, 30)
    for k in a: torch.testing.assert_close(a[k], b[k], atol=2e-5, rtol=1e-4)
    la, lb = losses(one), losses(two)
    assert [r["step"] for r in la] == [r["step"] for r in lb]
    for ra, rb in zip(la, lb):
        for k in ("loss", "mlm_loss", "sop_loss"): assert ra[k] == pytest.approx(rb[k], rel=1e-4, abs=1e-5), (ra, rb)


def test_resume_with_other_settings_is_refused(tmp_path):
    mc, tc = get_config("tiny", **P.FIXTURE["model"]), get_train_config("tiny", **P.FIXTURE["train"], corpus=str(P.corpus_slice()))
    P.run_config(tmp_path, "tiny", mc, tc)
    tc2 = get_train_config("tiny", **{**P.FIXTURE["train"], "learning_rate": 1.0}, corpus=str(P.corpus_slice()))
    with pytest.raises(ConfigError, match=r"train.learning_rate: 0.005 in the run, 1.0 now"):
        P.run_config(tmp_path, "tiny", mc, tc2)


def test_divergence_stops_with_a_clear_message(tmp_path):
    mc = get_config("tiny", **P.FIXTURE["model"])
    tc = get_train_config("tiny", **{**P.FIXTURE["train"], "learning_rate": 1e12, "warmup_steps": 0, "max_grad_norm": 1e30},
                          corpus=str(P.corpus_slice()))
    with pytest.raises(P.TrainingDiverged, match=r"the loss became nan at step \d+; nothing was saved after it, the last good checkpoint is step \d+"):
        P.train(tmp_path, "tiny", mc, tc, progress=False)


def test_missing_step_lists_the_steps():
    run = P.fixture_run()
    with pytest.raises(P.CheckpointNotFound, match="has no checkpoint for step 7; it has 0, 1, 2, 4, 8, 16, 20, 30. Pass one of those"):
        P.find_checkpoint(run, 7)


def test_bad_overrides():
    with pytest.raises(ConfigError, match="--set lr: not a field"):
        P.split_overrides(["lr=1"])
    with pytest.raises(ConfigError, match="expected name=value"):
        P.split_overrides(["lr"])
