"""Shared test set-up: the repository root, and torch kept to the machine's cores."""
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(2)


@pytest.fixture
def root():
    return ROOT


@pytest.fixture(scope="module")
def fixture_copy(tmp_path_factory):
    "A copy of the fixture run (checkpoints, tokenizer, config) with a results database of its own, per test module."
    import shutil
    from embryo.pretrain import fixture_run
    dst = tmp_path_factory.mktemp("run") / "fixture"
    shutil.copytree(fixture_run(), dst, ignore=shutil.ignore_patterns("results.sqlite*", "figures", "resume", "logs"))
    return dst
