"""Shared test set-up: the repository root, and torch kept to the machine's cores."""
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(2)


@pytest.fixture
def root():
    return ROOT
