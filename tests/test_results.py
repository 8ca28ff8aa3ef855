"""The results database (nbs/03a_results.ipynb): a database written before heads and settings had their own places is
migrated in place, once, and reads plainly afterwards."""
import sqlite3

from embryo.results import DB_NAME, merge_results, read_results, read_settings, write_results

# The schema and rows as the project wrote them before `head` and `settings` (commit 9127cb4 and earlier).
OLD_SCHEMA = """
CREATE TABLE results (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, task TEXT NOT NULL, layer INTEGER NOT NULL DEFAULT -1,
    metric TEXT NOT NULL, value REAL, n INTEGER, created_at REAL NOT NULL,
    PRIMARY KEY (analysis, step, task, layer, metric));
CREATE TABLE samples (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, task TEXT NOT NULL, item TEXT NOT NULL, text TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (analysis, step, task, item));
CREATE TABLE sweep_log (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, status TEXT NOT NULL, seconds REAL, error TEXT, notebook TEXT,
    mode TEXT, created_at REAL NOT NULL, PRIMARY KEY (analysis, step));
"""
OLD_ROWS = [("attention", 4, "brown", 1, "cls/h0", 0.31, 256, 1.0), ("attention", 4, "brown", 2, "diagonal/h11", 0.52, 256, 1.0),
            ("attention", 4, "brown", -1, "uniform_diagonal", 0.12, 256, 1.0),
            ("glue", 4, "polarity", -1, "accuracy", 0.61, 800, 1.0), ("glue", 4, "polarity", -1, "score/seed0", 0.61, 800, 1.0),
            ("glue", 4, "polarity", -1, "learning_rate", 1e-4, 300, 1.0), ("glue", 4, "polarity", -1, "train_loss", 0.69, 300, 1.0),
            ("glue", 4, "polarity", -1, "seed", 0.0, 300, 1.0)]


def old_database(path):
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    con.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?)", OLD_ROWS)
    con.execute("INSERT INTO samples VALUES ('attention', 4, 'brown', 'L1/H0', '{}', 1.0)")
    con.commit(); con.close()
    return path


def test_old_database_is_migrated_heads_and_settings_apart(tmp_path):
    old_database(tmp_path / DB_NAME)
    df = read_results(tmp_path)
    got = {(r.analysis, r.layer, r.head, r.metric): r.value for r in df.itertuples()}
    assert got[("attention", 1, 0, "cls")] == 0.31 and got[("attention", 2, 11, "diagonal")] == 0.52
    assert got[("attention", -1, -1, "uniform_diagonal")] == 0.12
    assert got[("glue", -1, -1, "score/seed0")] == 0.61 and got[("glue", -1, -1, "train_loss")] == 0.69  # not heads, results
    assert not {"learning_rate", "seed"} & set(df.metric) and len(df) == len(OLD_ROWS) - 2
    st = read_settings(tmp_path, "glue")
    assert dict(zip(st.name, st.value)) == {"learning_rate": 1e-4, "seed": 0.0}
    assert (st.step == 4).all() and (st.task == "polarity").all()
    assert len(read_results(tmp_path, "attention", head=0)) == 1
    # the database keeps working: a rerun of the step replaces the migrated rows
    write_results(tmp_path, "attention", 4, [dict(task="brown", layer=1, head=0, metric="cls", value=0.4)])
    assert read_results(tmp_path, "attention", step=4).value.tolist() == [0.4]
    con = sqlite3.connect(tmp_path / DB_NAME)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")] == \
        ["computed_with", "results", "samples", "settings", "sweep_log"]  # the old table is gone


def test_old_shard_merges_into_a_new_database(tmp_path):
    write_results(tmp_path, "attention", 8, [dict(task="brown", layer=1, head=1, metric="cls", value=0.2)])
    counts = merge_results(tmp_path, [old_database(tmp_path / "results.shard-0-of-2.sqlite")])
    assert counts["results"] == len(OLD_ROWS) - 2 and counts["settings"] == 2
    df = read_results(tmp_path, "attention")
    assert sorted(zip(df.step, df.layer, df["head"], df.metric)) == [(4, -1, -1, "uniform_diagonal"), (4, 1, 0, "cls"),
                                                                     (4, 2, 11, "diagonal"), (8, 1, 1, "cls")]


def test_every_analysis_says_what_its_task_names():
    "`task` keeps one role (what an analysis ran on); each analysis documents its values, so describe_results reads plainly."
    from embryo.results import TASK_NAMES, describe_results
    from embryo.sweep import available_analyses
    missing = [a for a in available_analyses() if a not in TASK_NAMES]
    assert not missing, f"analyses without an entry in results.TASK_NAMES: {missing}"
    write_results(tmp := __import__("tempfile").mkdtemp(), "probing", 4, [dict(task="pos_brown", layer=1, metric="f1", value=0.5)])
    d = describe_results(tmp)
    assert d[["analysis", "task", "steps", "layers", "heads", "metrics"]].values.tolist() == [["probing", "pos_brown", 1, 1, 0, "f1"]]
