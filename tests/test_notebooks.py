"""Every notebook in nbs/ runs top to bottom as a test (nbdev's test_nb), one pytest test per notebook."""
import os
import sys
from pathlib import Path

import pytest
from nbdev.test import test_nb as run_notebook

NBS = sorted((Path(__file__).resolve().parents[1] / "nbs").glob("*.ipynb"))


def test_found_notebooks():
    assert len(NBS) >= 3, f"expected the notebooks in nbs/, found {NBS}"


@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_notebook(nb, capsys):
    ok, secs = run_notebook(nb, skip_flags=["notest"], showerr=True)
    assert ok, f"{nb.name} failed (see the traceback above)"
