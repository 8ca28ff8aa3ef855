"""The results database (nbs/03a_results.ipynb): a database written before heads, settings and finetuning seeds had
their own places is migrated in place, once, and reads plainly afterwards."""
import sqlite3
import threading

from embryo.runs.results import COLUMNS, merge_results, read_results, read_settings, write_results
from embryo.runs.run import DB_NAME

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
    got = {(r.analysis, r.layer, r.head, r.seed, r.metric): r.value for r in df.itertuples()}
    assert got[("attention", 1, 0, -1, "cls")] == 0.31 and got[("attention", 2, 11, -1, "diagonal")] == 0.52
    assert got[("attention", -1, -1, -1, "uniform_diagonal")] == 0.12
    assert got[("glue", -1, -1, -1, "train_loss")] == 0.69  # not a head, not a setting: a result
    assert got[("glue", -1, -1, 0, "score")] == 0.61  # all the way to the current schema: the seed unpacked too
    assert not any(m.startswith("score/") for m in df.metric)
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
        ["computed_with", "examples", "results", "samples", "scores", "settings", "sweep_log"]  # the old table is gone


def test_old_shard_merges_into_a_new_database(tmp_path):
    write_results(tmp_path, "attention", 8, [dict(task="brown", layer=1, head=1, metric="cls", value=0.2)])
    counts = merge_results(tmp_path, [old_database(tmp_path / "results.shard-0-of-2.sqlite")])
    assert counts["results"] == len(OLD_ROWS) - 2 and counts["settings"] == 2
    df = read_results(tmp_path, "attention")
    assert sorted(zip(df.step, df.layer, df["head"], df.metric)) == [(4, -1, -1, "uniform_diagonal"), (4, 1, 0, "cls"),
                                                                     (4, 2, 11, "diagonal"), (8, 1, 1, "cls")]
    assert read_results(tmp_path, "glue", seed=0).metric.tolist() == ["score"]


# The schema with `head` and `settings`, before `seed` (commit d0d53d4 and earlier): each finetuning seed's score was
# metric `score/seed<k>` of analyses glue and squad.
HEAD_SCHEMA = """
CREATE TABLE results (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, task TEXT NOT NULL, layer INTEGER NOT NULL DEFAULT -1,
    head INTEGER NOT NULL DEFAULT -1, metric TEXT NOT NULL, value REAL, n INTEGER, created_at REAL NOT NULL,
    PRIMARY KEY (analysis, step, task, layer, head, metric));
CREATE TABLE settings (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, task TEXT NOT NULL, name TEXT NOT NULL, value REAL,
    created_at REAL NOT NULL, PRIMARY KEY (analysis, step, task, name));
CREATE TABLE samples (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, task TEXT NOT NULL, item TEXT NOT NULL, text TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (analysis, step, task, item));
CREATE TABLE sweep_log (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, status TEXT NOT NULL, seconds REAL, error TEXT, notebook TEXT,
    mode TEXT, created_at REAL NOT NULL, PRIMARY KEY (analysis, step));
CREATE TABLE computed_with (
    analysis TEXT NOT NULL, step INTEGER NOT NULL, digest TEXT NOT NULL, options TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (analysis, step));
"""
HEAD_ROWS = [("glue", 4, "polarity", -1, -1, "score", 0.6, 800, 1.0), ("glue", 4, "polarity", -1, -1, "score/seed0", 0.55, 800, 1.0),
             ("glue", 4, "polarity", -1, -1, "score/seed1", 0.65, 800, 1.0), ("glue", 4, "polarity", -1, -1, "score_sd", 0.07, 2, 1.0),
             ("glue", 4, "builtin", -1, -1, "score/seed1", 0.58, 2, 1.0), ("squad", 4, "squad_v2", -1, -1, "score/seed0", 0.4, 10, 1.0),
             ("attention", 4, "brown", 1, 0, "cls", 0.31, 256, 1.0),
             ("probing", 4, "pos", 1, -1, "score/seed1", 0.5, 10, 1.0)]  # an analysis that does not finetune: left alone


def head_database(path):
    con = sqlite3.connect(path)
    con.executescript(HEAD_SCHEMA)
    con.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?)", HEAD_ROWS)
    con.execute("INSERT INTO settings VALUES ('glue', 4, 'polarity', 'learning_rate', 1e-4, 1.0)")
    con.execute("INSERT INTO sweep_log VALUES ('glue', 4, 'done', 9.0, NULL, NULL, 'inprocess', 1.0)")
    con.execute("INSERT INTO computed_with VALUES ('glue', 4, 'abc', '{}', 1.0)")
    con.commit(); con.close()
    return path


def test_database_with_heads_but_no_seeds_is_migrated_seeds_apart(tmp_path):
    head_database(tmp_path / DB_NAME)
    df = read_results(tmp_path)
    assert tuple(df.columns) == COLUMNS and len(df) == len(HEAD_ROWS)
    got = {(r.analysis, r.task, r.seed, r.metric): r.value for r in df.itertuples()}
    assert got == {("glue", "polarity", -1, "score"): 0.6, ("glue", "polarity", 0, "score"): 0.55,
                   ("glue", "polarity", 1, "score"): 0.65, ("glue", "polarity", -1, "score_sd"): 0.07,
                   ("glue", "builtin", 1, "score"): 0.58, ("squad", "squad_v2", 0, "score"): 0.4,
                   ("attention", "brown", -1, "cls"): 0.31, ("probing", "pos", -1, "score/seed1"): 0.5}
    assert read_results(tmp_path, "glue", task="polarity", seed=1).value.tolist() == [0.65]  # a query reads seed = 1
    assert read_results(tmp_path, "glue", task="polarity", metric="score", seed=-1).value.tolist() == [0.6]  # the mean alone
    assert read_results(tmp_path, "attention")["head"].tolist() == [0]  # heads kept
    assert read_settings(tmp_path, "glue").name.tolist() == ["learning_rate"]  # the other tables as they were
    con = sqlite3.connect(tmp_path / DB_NAME)
    assert con.execute("SELECT status FROM sweep_log").fetchall() == [("done",)]
    assert con.execute("SELECT digest FROM computed_with").fetchall() == [("abc",)]
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")] == \
        ["computed_with", "examples", "results", "samples", "scores", "settings", "sweep_log"]  # the old table is gone
    key = [r[1] for r in sorted(con.execute("PRAGMA table_info(results)"), key=lambda r: r[5]) if r[5]]
    assert key == ["analysis", "step", "task", "layer", "head", "seed", "metric"]
    con.close()
    # the database keeps working: a rerun with seeds replaces the migrated rows of its task
    write_results(tmp_path, "glue", 4, [dict(task="polarity", metric="score", value=0.7)]
                  + [dict(task="polarity", seed=s, metric="score", value=0.7) for s in (0, 1, 2)])
    assert sorted(read_results(tmp_path, "glue", task="polarity").seed) == [-1, 0, 1, 2]


def test_connections_at_once_migrate_once(tmp_path):
    "Four connections open an old database together: one migrates, the others find it done, none fails or duplicates."
    head_database(tmp_path / DB_NAME)
    got, errors = [], []
    def read():
        try: got.append(len(read_results(tmp_path)))
        except Exception as e: errors.append(e)
    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert not errors and got == [len(HEAD_ROWS)] * 4
    assert sorted(read_results(tmp_path, "glue", task="polarity", metric="score").seed) == [-1, 0, 1]


def test_shard_with_heads_but_no_seeds_merges_into_a_new_database(tmp_path):
    write_results(tmp_path, "glue", 8, [dict(task="polarity", seed=0, metric="score", value=0.62)])
    counts = merge_results(tmp_path, [head_database(tmp_path / "results.shard-0-of-2.sqlite")])
    assert counts["results"] == len(HEAD_ROWS) and counts["settings"] == 1
    df = read_results(tmp_path, "glue", task="polarity", metric="score")
    assert sorted(zip(df.step, df.seed, df.value)) == [(4, -1, 0.6), (4, 0, 0.55), (4, 1, 0.65), (8, 0, 0.62)]
    assert read_results(tmp_path, "squad", seed=0).value.tolist() == [0.4]


def test_every_analysis_says_what_its_task_names():
    "`task` keeps one role (what an analysis ran on); each analysis documents its values, so describe_results reads plainly."
    from embryo.runs.results import TASK_NAMES, describe_results
    from embryo.analyses.sweep import available_analyses
    missing = [a for a in available_analyses() if a not in TASK_NAMES]
    assert not missing, f"analyses without an entry in results.TASK_NAMES: {missing}"
    write_results(tmp := __import__("tempfile").mkdtemp(), "probing", 4, [dict(task="pos_brown", layer=1, metric="f1", value=0.5)])
    d = describe_results(tmp)
    assert d[["analysis", "task", "steps", "layers", "heads", "seeds", "metrics"]].values.tolist() == [["probing", "pos_brown", 1, 1, 0, 0, "f1"]]



def _log_at_once(run, step, barrier, errors):
    from embryo.runs.results import log_job
    barrier.wait()  # every process opens the database at the same moment
    try: log_job(run, "knowledge", step, "done")
    except Exception as e: errors.put(repr(e))


def test_processes_creating_one_database_together_all_get_in(tmp_path):
    """Eight processes open a database none has created yet, 20 times over (as a sweep's workers do): none fails. Switching a
    new file to WAL needs it alone and SQLite's busy wait does not cover that switch; without the retry most rounds had a
    process fail with 'database is locked' (CI's papermill sweep test did)."""
    import multiprocessing as mp
    from embryo.runs.results import read_log
    ctx = mp.get_context("fork")
    for trial in range(20):
        run, barrier, errors = tmp_path / f"r{trial}", ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_log_at_once, args=(run, s, barrier, errors)) for s in range(8)]
        for p in procs: p.start()
        for p in procs: p.join(60)
        assert errors.empty(), (trial, errors.get())
        assert sorted(read_log(run).step) == list(range(8))
