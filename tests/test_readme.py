"""README.md is nbs/index.ipynb rendered to Markdown, and its commands exist."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_in_sync_with_index():
    md = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "markdown", "--stdout",
                         str(ROOT / "nbs" / "index.ipynb")], capture_output=True, text=True, check=True).stdout
    assert md == (ROOT / "README.md").read_text(), "README.md differs from nbs/index.ipynb: run `make readme`"


def test_readme_names_the_two_commands_and_make_has_them():
    readme = (ROOT / "README.md").read_text()
    make = (ROOT / "Makefile").read_text()
    for target in ("reproduce", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", make, re.M), f"Makefile has no `{target}` target"
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "make test"
