"""The house in wings (issue 74): the package is laid out along the way a checkpoint travels, and each wing imports only
the wings under it. Each notebook imports only from earlier ones, and only their public names: a reader can follow the
notebooks in order, and a module's private helpers can change without breaking another notebook."""
import ast
import json
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "embryo"
NBS = PKG.parent / "nbs"

# The wings and what each may import, besides itself and the ground (the top-level config). `cli` stands on top of all.
GROUND = {"config"}
WINGS = {
    "text": set(),  # raw text to batches, tagged sentences, facts
    "model": set(),  # ALBERT with its Hugging Face interop, ELECTRA
    "runs": {"text", "model"},  # the Run, the results store, figure helpers, the verdict rules
    "train": {"runs", "text", "model"},  # the training loop
    "analyses": {"runs", "text", "model"},  # one module per measurement, and the sweep over checkpoints
    "experiments": {"analyses", "train", "runs", "text", "model"},  # ablations, compare, seeds
    "publish": {"experiments", "analyses", "train", "runs", "text", "model"},  # report, bundles, prose
}
# Imports of a later notebook that remain (each a piece still to move to the earliest notebook owning its concept).
KNOWN_BACKWARD: set = set()
# Names that text.data imports from the rooms they moved to (issue 74: the pinned packages, the corpus, the built-in
# corpora and the vocabulary left notebook 02 for 01b-01e) only to pass them on to callers that still read them there
# (`D.fetch`): a number that may only fall, as each caller imports the name from its room.
PASSED_ON_BY_TEXT_DATA = 0  # every caller imports a moved name from its room (issue 74)
# Analysis notebooks whose test cells still build their fixture run with the training loop (train.pretrain.fixture_run):
# the issue asks for the fixture from runs/ or a test helper. Counted here so that the number can only fall.
FIXTURE_FROM_TRAIN = 14


def _modules() -> dict[str, Path]:
    "Dotted module name under embryo (e.g. 'analyses.glue', 'config') -> its file; `_modidx` and `__init__` left out."
    return {".".join(f.relative_to(PKG).with_suffix("").parts): f for f in PKG.rglob("*.py")
            if f.stem not in ("_modidx", "__init__")}


def _order() -> dict[str, str]:
    "module -> its notebook's number (e.g. '03a'), read from the header nbdev writes."
    out = {}
    for name, f in _modules().items():
        m = re.search(r"File to edit: (?:\.\./)+nbs/(\w+?)_", f.read_text()[:400])
        if m: out[name] = m[1]
    return out


def _imports(name: str, f: Path):
    "(imported dotted module, names) of every `from embryo.x import ...` / relative import in `f`, at any depth."
    pkg = name.split(".")[:-1]
    for node in ast.walk(ast.parse(f.read_text())):
        if not isinstance(node, ast.ImportFrom): continue
        if node.level == 0:
            if not (node.module or "").startswith("embryo"): continue
            base = node.module.split(".")[1:]
        else: base = (pkg[:len(pkg) - node.level + 1] if node.level > 1 else pkg) + (node.module or "").split(".")
        base = [b for b in base if b]
        for a in node.names:  # `from . import data` names a module; `from .run import Run` a name in one
            full = ".".join(base + [a.name])
            yield (full if full in _modules() else ".".join(base)), [a.name]


def wing_of(module: str) -> str: return module.split(".")[0] if "." in module else module


def test_every_module_lives_in_a_wing():
    loose = [m for m in _modules() if "." not in m and m not in GROUND | {"cli"}]
    assert not loose, f"modules outside every wing (give each a home in {sorted(WINGS)}): {loose}"
    assert {wing_of(m) for m in _modules() if "." in m} <= set(WINGS), sorted(_modules())


def test_each_wing_imports_only_the_wings_under_it():
    bad = []
    for name, f in _modules().items():
        if name == "cli": continue
        w = wing_of(name)
        for mod, _ in _imports(name, f):
            t = wing_of(mod)
            if t != w and t not in GROUND and t not in WINGS.get(w, set()): bad.append((name, mod))
    assert not bad, f"imports across wings the rules forbid (module, imported): {bad}"


def test_train_and_analyses_never_import_each_other():
    pairs = [(n, m) for n, f in _modules().items() for m, _ in _imports(n, f)
             if {wing_of(n), wing_of(m)} == {"train", "analyses"}]
    assert not pairs, pairs


def test_the_wing_check_sees_a_forbidden_import(tmp_path, monkeypatch):
    "A module of runs/ that imports an analysis fails the rule above."
    fake = tmp_path / "runs" / "x.py"; fake.parent.mkdir(); fake.write_text("from ..analyses.glue import verdict\n")
    assert list(_imports("runs.x", fake)) == [("analyses.glue", ["verdict"])]
    assert "analyses" not in WINGS["runs"]


def test_no_module_imports_a_private_name_of_another():
    bad = [(name, mod, n) for name, f in _modules().items()
           for mod, names in _imports(name, f) for n in names if n.startswith("_") and mod != name]
    assert not bad, f"private names imported across modules (make them public or move them): {bad}"


def test_notebooks_import_only_from_earlier_ones():
    order = _order()
    assert {"config", "model.model", "train.pretrain", "runs.results", "analyses.sweep", "cli"} <= set(order), order
    back = {(name, mod) for name, f in _modules().items() if name in order
            for mod, _ in _imports(name, f) if mod in order and order[mod] > order[name]}
    assert back <= KNOWN_BACKWARD, f"new imports from a later notebook: {back - KNOWN_BACKWARD}"
    assert back == KNOWN_BACKWARD, f"fixed, remove from KNOWN_BACKWARD: {KNOWN_BACKWARD - back}"


def _notebook_imports(nb: Path):
    "(cell number, imported embryo module) of every `from embryo.x import` / `import embryo.x` in a notebook's code cells."
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "code": continue
        src = "".join(cell["source"])
        for m in re.finditer(r"^\s*(?:from\s+embryo\.([\w.]+)\s+import\s+([\w ,]+)|import\s+embryo\.([\w.]+))", src, re.M):
            mod = m[1] or m[3]
            if m[1] and "." not in mod:  # `from embryo.text import data as D`: the module is text.data
                for name in (x.split()[0] for x in m[2].split(",") if x.strip()):
                    yield i, f"{mod}.{name}" if f"{mod}.{name}" in _modules() else mod
            else: yield i, mod


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
    nb.write_text('{"cells": [{"cell_type": "code", "source": ["#| hide\\n", "from embryo.analyses.sweep import sweep\\n",'
                  ' "from embryo.text import data as D\\n"]}]}')
    assert list(_notebook_imports(nb)) == [(0, "analyses.sweep"), (0, "text.data")]


def test_analysis_notebooks_building_their_fixture_with_the_training_loop_do_not_grow():
    "The analyses' notebooks that import the training wing (for `fixture_run`): a number that may only fall."
    order = _order()
    analysis_nbs = {num for mod, num in order.items() if wing_of(mod) == "analyses"}
    users = sorted(nb.name for nb in NBS.glob("*.ipynb") if nb.stem.split("_")[0] in analysis_nbs
                   and any(wing_of(mod) == "train" for _, mod in _notebook_imports(nb)))
    assert len(users) <= FIXTURE_FROM_TRAIN, users


def test_names_text_data_passes_on_do_not_grow():
    "text.data passes on, unused by itself, only the names its old callers still read there; each goes once they move."
    tree = ast.parse((PKG / "text" / "data.py").read_text())
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 1 for a in n.names}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    passed_on = imported - used
    assert len(passed_on) <= PASSED_ON_BY_TEXT_DATA, f"text.data passes on more names than before: {sorted(passed_on)}"
    readers = {m: f.read_text() for m, f in _modules().items() if m != "text.data"}
    unread = [n for n in passed_on if not any(re.search(rf"\bD\.{n}\b|text\.data import[^\n]*\b{n}\b", t)
                                              for t in readers.values())]
    assert not unread, f"no module reads these from text.data any more: import them from their room, drop them: {unread}"
    assert len(passed_on) == PASSED_ON_BY_TEXT_DATA, f"fewer names passed on: set PASSED_ON_BY_TEXT_DATA = {len(passed_on)}"
