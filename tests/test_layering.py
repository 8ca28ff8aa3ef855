"""Each notebook imports only from earlier ones, and only their public names: a reader can follow the notebooks in
order, and a module's private helpers can change without breaking another notebook."""
import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "embryo"
# Imports of a later notebook that remain (each a piece still to move to the earliest notebook owning its concept).
KNOWN_BACKWARD: set = set()


def _order() -> dict[str, str]:
    "module -> its notebook's number (e.g. '03a'), read from the header nbdev writes."
    out = {}
    for f in PKG.glob("*.py"):
        m = re.search(r"File to edit: \.\./nbs/(\w+?)_", f.read_text()[:400])
        if m: out[f.stem] = m[1]
    return out


def _imports(f: Path):
    "(imported module, names) of every `from embryo.x import ...` / `from .x import ...` in `f`, at any depth."
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module.removeprefix("embryo.") if node.level == 0 else node.module
            if node.level == 0 and not node.module.startswith("embryo."): continue
            yield mod, [a.name for a in node.names]


def test_no_module_imports_a_private_name_of_another():
    bad = [(f.stem, mod, n) for f in PKG.glob("*.py") if f.stem != "_modidx"
           for mod, names in _imports(f) for n in names if n.startswith("_") and mod != f.stem]
    assert not bad, f"private names imported across modules (make them public or move them): {bad}"


def test_notebooks_import_only_from_earlier_ones():
    order = _order()
    assert {"config", "model", "pretrain", "results", "sweep", "cli"} <= set(order), order
    back = {(f.stem, mod) for f in PKG.glob("*.py") if f.stem in order
            for mod, _ in _imports(f) if mod in order and order[mod] > order[f.stem]}
    assert back <= KNOWN_BACKWARD, f"new imports from a later notebook: {back - KNOWN_BACKWARD}"
    assert back == KNOWN_BACKWARD, f"fixed, remove from KNOWN_BACKWARD: {KNOWN_BACKWARD - back}"


NBS = PKG.parent / "nbs"


def _notebook_imports(nb: Path):
    "(cell number, imported embryo module) of every `from embryo.x import` / `import embryo.x` in a notebook's code cells."
    import json
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "code": continue
        for m in re.finditer(r"^\s*(?:from\s+embryo\.(\w+)\s+import|import\s+embryo\.(\w+))", "".join(cell["source"]), re.M):
            yield i, m[1] or m[2]


def test_notebook_cells_import_only_from_earlier_notebooks():
    "A reader who follows the notebooks in order never meets a name from a notebook still ahead (demo and hidden cells too)."
    order = _order()
    notebooks = {nb.stem.split("_")[0]: nb for nb in NBS.glob("*.ipynb") if re.match(r"\d", nb.stem)}
    assert set(order.values()) <= set(notebooks), (sorted(order.values()), sorted(notebooks))
    back = [(nb.name, i, mod) for num, nb in notebooks.items() for i, mod in _notebook_imports(nb)
            if mod in order and order[mod] > num]
    assert not back, f"notebook cells that import a later notebook's module (notebook, cell, module): {back}"


def test_notebook_cell_check_sees_a_backward_import(tmp_path):
    "The check above reads `from embryo.x import` in any cell, hidden or not."
    nb = tmp_path / "00_x.ipynb"
    nb.write_text('{"cells": [{"cell_type": "code", "source": ["#| hide\\n", "from embryo.sweep import sweep\\n"]}]}')
    assert list(_notebook_imports(nb)) == [(0, "sweep")]
