"""The sweep (notebook 10), the report (notebook 10c) and the `embryo` command (notebook 11): papermill and in-process
give the same numbers, done pairs are skipped, a crash is resumed, failures are logged, parallel writers lose nothing,
shards merge."""
import json
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from embryo.runs.results import read_log, read_results, write_results
from embryo.runs.series_check import open_run
from embryo.publish.report import write_report
from embryo.runs.run import SeriesError
from embryo.runs.series import as_run, hub_run
from embryo.analyses.sweep import SweepError, sweep

ROOT = Path(__file__).resolve().parents[1]
QUICK = {"reconstruction": dict(max_words=15), "knowledge": dict(max_facts=15)}


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("results.sqlite*", "notebooks", "figures"))
    return dst


def values(run, analysis):
    df = read_results(run, analysis)
    return df.sort_values(["step", "task", "layer", "metric"])[["step", "task", "layer", "metric", "value", "n"]].reset_index(drop=True)


def test_papermill_and_inprocess_give_the_same_numbers(fixture_copy, tmp_path):
    a, b = copy_run(fixture_copy, tmp_path / "a"), copy_run(fixture_copy, tmp_path / "b")
    ta = sweep(open_run(a), ["knowledge", "reconstruction"], steps=[8, 30], workers=2, mode="papermill", options=QUICK, progress=False)
    tb = sweep(open_run(b), ["knowledge", "reconstruction"], steps=[8, 30], mode="inprocess", options=QUICK, progress=False)
    assert (ta == "done").all().all() and (tb == "done").all().all()
    for analysis in ("knowledge", "reconstruction"):
        pd.testing.assert_frame_equal(values(a, analysis), values(b, analysis))
        assert len(values(a, analysis))
    for s in (8, 30):  # the executed notebooks are kept, one per (analysis, step)
        assert (a / "notebooks" / "knowledge" / f"step_{s:07d}.ipynb").is_file()
    assert not list((a / "notebooks").rglob(".*.ipynb")), "temporary notebooks left behind"
    assert (a / "figures" / "fig6_world_knowledge.png").exists()  # redrawn once at the end
    log = read_log(a)
    assert set(log.status) == {"done"} and set(log["mode"]) == {"papermill"} and len(log) == 4


def test_failure_is_logged_and_the_rest_goes_on(fixture_copy, tmp_path):
    run = copy_run(fixture_copy, tmp_path / "r")
    # knowledge fails on an unknown relation; reconstruction runs anyway
    t = sweep(open_run(run), ["knowledge", "reconstruction"], steps=[4], mode="papermill",
              options={"knowledge": dict(relations=["P999"]), "reconstruction": dict(max_words=10)}, progress=False)
    assert t.loc["knowledge", 4] == "failed" and t.loc["reconstruction", 4] == "done"
    log = read_log(run).set_index(["analysis", "step"])
    assert "UnknownRelation" in log.loc[("knowledge", 4), "error"] and "P999" in log.loc[("knowledge", 4), "error"]
    nb = Path(log.loc[("knowledge", 4), "notebook"])
    assert nb.is_file() and "P999" in nb.read_text()  # the failed notebook is kept with its traceback


def test_bad_requests_name_the_problem(fixture_copy):
    from embryo.runs.run import CheckpointNotFound
    with pytest.raises(SweepError, match="unknown analysis 'glu'; the analyses are"):
        sweep(open_run(fixture_copy), ["glu"], progress=False)
    with pytest.raises(CheckpointNotFound, match="has no checkpoint for step 7; it has 0, 1, 2, 4, 8"):
        sweep(open_run(fixture_copy), ["knowledge"], steps=[7], progress=False)
    with pytest.raises(SweepError, match="0 <= i < n"):
        sweep(open_run(fixture_copy), ["knowledge"], shard="2/2", progress=False)


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "embryo.cli", *args], capture_output=True, text=True, cwd=ROOT, **kw)


def test_interrupted_sweep_resumes_with_what_is_left(fixture_copy, tmp_path):
    run = copy_run(fixture_copy, tmp_path / "r")
    args = ["sweep", "--run", str(run), "--analyses", "knowledge", "--mode", "inprocess", "--option", "knowledge.max_facts=15"]
    p = subprocess.Popen([sys.executable, "-m", "embryo.cli", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:  # wait for the first finished step, then kill the sweep
        if (run / "results.sqlite").exists() and len(read_log(run)) >= 1: break
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    first = set(read_log(run).step)
    assert 1 <= len(first) < 8, "the sweep should have been killed part way"
    r = _cli(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("skipped") == len(first) and r.stdout.count("done") == 8 - len(first), r.stdout
    assert sorted(read_results(run, "knowledge").step.unique()) == [0, 1, 2, 4, 8, 16, 20, 30]
    r = _cli(*args)  # nothing left: everything skipped
    assert r.stdout.count("skipped") == 8 and "done" not in r.stdout


def test_cli_exit_status_reports_failures(fixture_copy, tmp_path):
    run = copy_run(fixture_copy, tmp_path / "r")
    r = _cli("sweep", "--run", str(run), "--analyses", "knowledge", "--steps", "0", "--mode", "inprocess",
             "--option", "knowledge.relations=[\"P999\"]")
    assert r.returncode == 1 and "knowledge step 0: UnknownRelation" in r.stdout, r.stdout + r.stderr
    r = _cli("sweep", "--run", str(run), "--analyses", "knowledge", "--steps", "999", "--mode", "inprocess")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr  # bad input: one message, not a traceback
    assert "embryo sweep: CheckpointNotFound:" in r.stderr and "it has 0, 1, 2" in r.stderr, r.stderr


def _writer(args):
    db, worker, batches = args
    for b in range(batches):
        # each worker rewrites its own step and, in turn with all others, the shared step 0 (with a task of its own)
        write_results(db, "stress", 1 + worker, [dict(task="t", metric=f"m{k}", value=b, n=k) for k in range(20)])
        write_results(db, "stress", 0, [dict(task=f"w{worker}", metric=f"m{k}", value=b) for k in range(20)])
    return worker


def test_eight_parallel_writers_lose_and_duplicate_nothing(tmp_path):
    "Eight processes write one database at once. Forked, as test_results' creators are: a spawned worker imports this file"
    " (and torch) again, 20 s of CPU each on 2 cores (the writes themselves take under a second)."
    db = tmp_path / "results.sqlite"
    with mp.get_context("fork").Pool(8) as pool:
        assert sorted(pool.map(_writer, [(db, w, 15) for w in range(8)])) == list(range(8))
    df = read_results(db, "stress")
    assert len(df) == 8 * 20 + 20  # each worker's step, and at step 0 one worker's write whole (a write replaces the step)
    assert df[df.step == 0].task.nunique() == 1  # never two writers' rows mixed at one step
    assert not df.duplicated(["step", "task", "layer", "metric"]).any()
    assert set(df.value) == {14.0}  # every step holds its last write
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_shards_write_their_own_files_and_merge_without_loss(fixture_copy, tmp_path):
    run = copy_run(fixture_copy, tmp_path / "r")
    for i in range(3):
        r = _cli("sweep", "--run", str(run), "--analyses", "knowledge", "--shard", f"{i}/3", "--mode", "inprocess",
                 "--option", "knowledge.max_facts=10")
        assert r.returncode == 0, r.stdout + r.stderr
    assert not (run / "results.sqlite").exists()
    shards = sorted(run.glob("results.shard-*-of-3.sqlite"))
    assert len(shards) == 3
    per_shard = [set(read_results(s, "knowledge").step) for s in shards]
    assert set().union(*per_shard) == {0, 1, 2, 4, 8, 16, 20, 30} and sum(map(len, per_shard)) == 8
    n = sum(len(read_results(s, "knowledge")) for s in shards)
    r = _cli("merge", "--run", str(run))
    assert r.returncode == 0, r.stderr
    assert len(read_results(run, "knowledge")) == n and len(read_log(run)) == 8
    _cli("merge", "--run", str(run))  # merging again adds nothing
    assert len(read_results(run, "knowledge")) == n


def test_a_folder_of_hf_checkpoints_is_swept_as_a_run(fixture_copy, tmp_path):
    for s in (0, 30):
        shutil.copytree(fixture_copy / "checkpoints" / f"step_{s:07d}", tmp_path / "release" / f"step{s}")
    shutil.copyfile(fixture_copy / "spiece.model", tmp_path / "release" / "step30" / "spiece.model")
    run = as_run(tmp_path / "release", tmp_path / "runs" / "release")
    t = sweep(open_run(run), ["knowledge"], mode="inprocess", options=QUICK, progress=False)
    assert t.loc["knowledge"].tolist() == ["done", "done"]
    # swept by its own folder, it says where the linked run went (issue 33, point 9)
    r = subprocess.run([sys.executable, "-m", "embryo.cli", "sweep", "--run", str(tmp_path / "release"), "--analyses", "knowledge",
                        "--mode", "inprocess", "--option", "knowledge.max_facts=5"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and f"{tmp_path / 'release'} is read as the run runs/release: its checkpoints are linked there" in r.stdout, r.stdout + r.stderr


def test_hub_checkpoints_offline_give_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SeriesError, match="(?s)could not download albert/albert-base-v2@step1000 .* needs the internet"):
        hub_run("albert/albert-base-v2", ["step1000"], tmp_path / "hub")


def test_report_shows_figures_with_paper_numbers_and_verdicts(tmp_path):
    from embryo.train.fixtures import fixture_run
    run = copy_run(fixture_run(), tmp_path / "r")  # with its logs, for Fig. 2a
    sweep(open_run(run), ["knowledge", "reconstruction"], steps=[0, 30], mode="inprocess", options=QUICK, progress=False)
    r = _cli("report", "--run", str(run), "--figures", str(tmp_path / "fig"))
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "fig" / "index.html").read_text()
    for needle in ("Embryology Fig. 1", "Embryology Fig. 6", "Embryology Table 9", "Embryology Fig. 2a",
                   "fig1_reconstruction_by_pos.png", "On this run."):
        assert needle in page, needle
    for img in ("fig1_reconstruction_by_pos.png", "fig6_world_knowledge.png", "fig2a_pretraining_loss.png"):
        assert (tmp_path / "fig" / img).exists()
    from embryo.publish.report import report_sections
    papers = [r["paper"] for r in report_sections(run)]
    assert len(papers) > 10 and all(p.startswith(("Embryology ", "ALBERT ")) for p in papers), papers  # one way to cite


def test_sweep_notebooks_keep_the_analysis_and_drop_the_examples():
    import nbformat
    from embryo.analyses.sweep import ANALYSES, nbs_dir, sweep_notebook
    for analysis, name in ANALYSES.items():
        path = nbs_dir() / f"{name}.ipynb"
        full, trimmed = nbformat.read(str(path), 4), sweep_notebook(path)
        code = [c.source for c in trimmed.cells if c.cell_type == "code"]
        evaluates = lambda s: "evaluate_step(" in s or "evaluate_or_read(evaluate_step," in s  # (a bundle's rows read, 03a)
        assert any(evaluates(s) and not s.lstrip().startswith("#|") for s in code), f"{name}: no sweep cell calls evaluate_step"
        assert not any("test_fail(" in s or "test_eq(" in s for s in code), f"{name}: a test cell is tagged for the sweep"
        assert sum(c.cell_type == "code" for c in full.cells) > len(code)
        assert [c.source for c in full.cells if c.cell_type == "markdown"] == [c.source for c in trimmed.cells if c.cell_type == "markdown"]
        assert len(sweep_notebook(path, examples=True).cells) == len(full.cells)


def test_kernel_pool_starts_one_kernel_per_job_and_stops_what_is_not_taken():
    from embryo.analyses.sweep import KernelPool, stop_kernel
    with KernelPool(3, size=2, preload=("json",)) as pool:
        km = pool.take()  # the first job's kernel; the second is started, the third waits for a take
        assert km.has_kernel and pool.left == 0
        pids = [km.provisioner.pid] + [f.result().provisioner.pid for f in pool._ready]
        stop_kernel(km)
    time.sleep(0.5)
    for pid in pids:  # the taken kernel was stopped by its user, the others by close()
        with pytest.raises(ProcessLookupError): os.kill(pid, 0)


def _parent(p: Path) -> int:
    try: return int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError): return -1


def _cmdline(p: Path) -> bytes:
    try: return (p / "cmdline").read_bytes()
    except OSError: return b""


def test_papermill_sweep_leaves_no_kernel_and_the_working_directory_alone(fixture_copy, tmp_path):
    run = copy_run(fixture_copy, tmp_path / "r")
    here = os.getcwd()
    t = sweep(open_run(run), ["knowledge"], steps=[2, 4, 8], workers=2, mode="papermill", options=QUICK, redraw=False, progress=False)
    assert (t == "done").all().all() and os.getcwd() == here
    kids = [p for p in Path("/proc").glob("[0-9]*") if _parent(p) == os.getpid() and b"ipykernel" in _cmdline(p)]
    assert not kids, "kernels left running after the sweep"
    nb = (run / "notebooks" / "knowledge" / "step_0000004.ipynb").read_text()
    assert "evaluate_step(run_dir, step" in nb and "test_fail(" not in nb  # the analysis ran, the examples did not


def test_results_remember_their_options_and_other_options_recompute(fixture_copy, tmp_path, capsys):
    "After a default sweep, the user's LAMA folder is computed (and said so), not 'skipped'; a malformed folder shows its error."
    from embryo.text.facts import load_facts, write_lama
    run = copy_run(fixture_copy, tmp_path / "r")
    lama = tmp_path / "lama"
    rels = load_facts()
    write_lama(lama, {r: rels[r] for r in sorted(rels)[:2]})
    quick = dict(max_facts=15)
    assert sweep(open_run(run), ["knowledge"], steps=[8], mode="inprocess", options={"knowledge": quick}, progress=False).loc["knowledge", 8] == "done"
    before = set(read_results(run, "knowledge").task)
    capsys.readouterr()
    t = sweep(open_run(run), ["knowledge"], steps=[8], mode="inprocess", options={"knowledge": dict(quick, facts=str(lama))}, progress=False)
    assert t.loc["knowledge", 8] == "done"
    out = capsys.readouterr().out
    assert "knowledge: recomputing step(s) 8: their results were computed with" in out and str(lama) in out, out
    # the step holds the LAMA folder's two relations alone, not them beside the built-in ones (issue 32, finding 1)
    assert len(set(read_results(run, "knowledge", step=8).task)) == 2 < len(before), read_results(run, "knowledge").task.unique()
    t = sweep(open_run(run), ["knowledge"], steps=[8], mode="inprocess", options={"knowledge": dict(quick, facts=str(lama))}, progress=False)
    assert t.loc["knowledge", 8] == "skipped"  # the same options and data: done
    (lama / "relations.jsonl").write_text("this is not json\n")  # the user's data changed, and is now malformed
    t = sweep(open_run(run), ["knowledge"], steps=[8], mode="inprocess", options={"knowledge": dict(quick, facts=str(lama))}, progress=False)
    assert t.loc["knowledge", 8] == "failed"
    err = read_log(run).set_index(["analysis", "step"]).loc[("knowledge", 8), "error"]
    assert "relations.jsonl" in err, err
    assert sweep(open_run(run), ["knowledge"], steps=[8], mode="inprocess", options={"knowledge": quick}, force=True,
                 progress=False).loc["knowledge", 8] == "done"  # --force stays
    assert set(read_results(run, "knowledge", step=8).task) == before  # back to the defaults: the LAMA relations are gone
    write_results(run, "knowledge", 8, [dict(task="P36", metric="p@1", value=0.5)])  # by hand, options unknown
    capsys.readouterr()
    assert sweep(open_run(run), ["knowledge"], steps=[8], mode="inprocess", options={"knowledge": quick},
                 progress=False).loc["knowledge", 8] == "done"
    assert "options nobody recorded (written outside a sweep)" in capsys.readouterr().out
    assert set(read_results(run, "knowledge", step=8).task) == before


def test_results_of_an_older_method_are_said_and_recomputed(fixture_copy, tmp_path, capsys):
    """Trust: reconstruction's method 2 reads no sentence longer than the run trained on. Results written before it
    (recorded as the defaults, "{}") no longer pass for today's: the report says so under the verdict, and a sweep
    computes them anew, saying why; after it the note is gone."""
    from embryo.analyses import reconstruction as R
    from embryo.publish.report import report_sections
    from embryo.runs.results import set_computed_with
    run = copy_run(fixture_copy, tmp_path / "r")
    opts = {"reconstruction": dict(max_words=15)}
    assert sweep(open_run(run), ["reconstruction"], steps=[8, 30], mode="inprocess", options=opts, progress=False).eq("done").all().all()
    for s in (8, 30): set_computed_with(run, "reconstruction", s, '{"max_words": 15}')  # as method 1 recorded them
    said = lambda: [r["verdict"] for r in report_sections(run) if r.get("analysis") == "reconstruction"]
    assert all("older method of this analysis at 2 evaluated steps" in v for v in said()), said()
    capsys.readouterr()
    t = sweep(open_run(run), ["reconstruction"], steps=[8, 30], mode="inprocess", options=opts, progress=False)
    assert t.eq("done").all().all(), t
    out = capsys.readouterr().out
    assert 'reconstruction: recomputing step(s) 8, 30: their results were computed with {"max_words": 15}' in out, out
    assert not any("older method" in v for v in said()), said()
    assert sweep(open_run(run), ["reconstruction"], steps=[8], mode="inprocess", options=opts,
                 progress=False).loc["reconstruction", 8] == "skipped"  # method 2 and the same options: done


def test_a_killed_papermill_sweeps_temporary_notebook_is_removed_by_the_rerun(fixture_copy, tmp_path):
    run = copy_run(fixture_copy, tmp_path / "r")
    args = ["sweep", "--run", str(run), "--analyses", "knowledge", "--steps", "8", "--option", "knowledge.max_facts=15"]
    p = subprocess.Popen([sys.executable, "-m", "embryo.cli", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    folder, deadline = run / "notebooks" / "knowledge", time.time() + 300
    while time.time() < deadline and not (folder.is_dir() and list(folder.glob(".*.ipynb"))) and p.poll() is None:
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    left = list(folder.glob(".*.ipynb"))
    assert left, "the sweep ended before its notebook was written; nothing to test"
    assert _cli(*args).returncode == 0
    assert not list(folder.glob(".*.ipynb")), f"left behind: {list(folder.glob('.*.ipynb'))}"
    assert (folder / "step_0000008.ipynb").is_file()


@pytest.mark.parametrize("params, message", [
    (dict(stp=8), "this notebook has no parameter stp; its parameters are run_dir, step,"),
    (dict(step="abc"), "papermill parameter: step='abc' must be an integer (a checkpoint step, e.g. -p step 1000)"),
    (dict(max_facts="many"), "papermill parameter: max_facts='many' must be an integer (its default is 1000)"),
])
def test_papermill_parameters_are_checked_by_name(fixture_copy, tmp_path, params, message):
    import papermill as pm
    from embryo.analyses.sweep import nbs_dir, sweep_notebook
    nb = sweep_notebook(nbs_dir() / "06_knowledge.ipynb")
    with pytest.raises(Exception) as e:
        pm.execute_notebook(nb, str(tmp_path / "out.ipynb"), parameters=dict(run_dir=str(fixture_copy), **params),
                            kernel_name="python3", progress_bar=False, cwd=str(nbs_dir()))
    assert e.value.ename == "ParameterError" and message in e.value.evalue, (e.value.ename, e.value.evalue)


def test_notebooks_show_the_committed_results(root):
    "Each analysis notebook's results cell is what the committed figures/ give: rewriting figures/ without it fails here."
    from embryo.publish.prose import NOTEBOOKS, USER_DATA, results_markdown, _results_cell
    for a, name in NOTEBOOKS.items():
        path = root / "nbs" / f"{name}.ipynb"
        cell = "".join(_results_cell(json.loads(path.read_text()), a, path)["source"])
        assert cell == results_markdown(a, root / "figures", root / "nbs"), (
            f"{path.name}: its results cell is stale against figures/; run `embryo report` (or embryo.publish.prose.sync_notebooks())")
        if a in USER_DATA and "../figures/" not in cell:  # reproduce cannot fetch its data: the cell says how to add it
            assert "`make reproduce` skips this analysis" in cell and "--option" in cell, cell
        else: assert "../figures/" in cell, f"{path.name}: its results cell shows no committed figure"


def test_prose_cites_the_committed_numbers(root):
    """Every number a notebook's prose, or a page of the documentation (docs/**/*.md: the findings, the lab journal),
    cites from a run (a fact span) is the one the committed figures/ hold."""
    from embryo.publish.prose import cited_facts, fact_value
    spans = [(p.relative_to(root).as_posix(), m) for p, m in cited_facts(root / "nbs")]
    assert len(spans) >= 10, f"only {len(spans)} fact spans in the notebooks' prose"
    pages = {name for name, _ in spans if name.startswith("docs/")}
    assert {"docs/journal.md", "docs/findings/mature.md", "docs/findings/twins.md", "docs/findings/seeds.md",
            "docs/findings/facts.md"} <= pages, pages
    stale = [(name, m["value"], fact_value(m["spec"], root / "figures"), m["spec"]) for name, m in spans
             if m["value"] != fact_value(m["spec"], root / "figures")]
    assert not stale, f"prose cites numbers the committed figures/ do not hold (run `embryo report`): {stale}"


def test_committed_report_json_matches_index(root):
    "figures/report.json (what the notebooks show) and index.html were written together: the same sections and verdicts."
    import html
    import re
    from embryo.publish.report import REPORT_JSON
    for d in [root / "figures", *[p for p in (root / "figures").iterdir() if (p / "index.html").exists()]]:
        rep, page = json.loads((d / REPORT_JSON).read_text()), (d / "index.html").read_text()
        assert [s["file"] for s in rep["sections"]] == re.findall(r"<section id='(?!notebooks'|more')([^']+)'>", page), d
        for s in rep["sections"]:
            if s["verdict"]: assert html.escape(s["verdict"]) in page, (d, s["file"])


def test_reproduce_seeds_trains_sibling_runs_and_draws_their_bands(monkeypatch, tmp_path):
    "`embryo reproduce --seeds 3`: seed 0 is the usual run and figures; seeds 1, 2 go beside it, with --set seed=k; then the bands."
    from embryo import cli
    from embryo.publish import pipeline as R
    calls, drawn = [], []
    monkeypatch.setattr(R, "reproduce", lambda a: calls.append(a) if getattr(a, "seeds", 1) == 1 else R.reproduce_seeds(a, a.seeds))
    monkeypatch.setattr(R, "seed_bands", lambda runs, out: drawn.append((runs, out)) or [])
    args = cli.parser().parse_args(["reproduce", "--preset", "tiny", "--seeds", "3", "--figures", str(tmp_path / "figures"),
                                    "--run-dir", str(tmp_path / "runs" / "tiny"), "--set", "total_steps=64"])
    R.reproduce_seeds(args, args.seeds)
    assert [c.run_dir.name for c in calls] == ["tiny", "tiny-seed1", "tiny-seed2"]
    assert [c.set for c in calls] == [["total_steps=64"], ["total_steps=64", "seed=1"], ["total_steps=64", "seed=2"]]
    assert [Path(c.figures).relative_to(tmp_path).as_posix() for c in calls] == ["figures", "figures/seeds/seed1", "figures/seeds/seed2"]
    assert [c.pages for c in calls] == [True, False, False] and all(c.seeds == 1 for c in calls)
    assert drawn == [([c.run_dir for c in calls], tmp_path / "figures" / "seeds")]


def test_report_links_the_results_beside_it(fixture_copy, tmp_path):
    "figures/index.html links the twins' reports, the side-by-side comparison and the seed bands found in its folder."
    figs = tmp_path / "figures"
    for f in ("bert-tiny/index.html", "compare/compare.md", "seeds/seeds.md", "notes/readme.txt"):
        (figs / f).parent.mkdir(parents=True, exist_ok=True); (figs / f).write_text("x")
    page = write_report(fixture_copy, figs).read_text()
    assert "href='bert-tiny/index.html'>The BERT twin: its report<" in page
    assert "href='compare/compare.md'" in page and "href='seeds/seeds.md'" in page and "notes/" not in page


def test_report_sections_give_every_committed_figure_a_verdict(tmp_path, root):
    "A module without per-figure verdicts keeps its own (the report once gave 'no verdict (TypeError ...)' to knowledge)."
    import shutil
    from embryo.publish.report import report_sections
    run = shutil.copytree(root / "figures" / "run", tmp_path / "tiny", ignore=shutil.ignore_patterns("checkpoints"))
    bad = [(s["file"], s["verdict"][:80]) for s in report_sections(run) if s["verdict"].startswith("no verdict")]
    assert not bad, bad


def test_a_run_at_its_floor_does_not_rise_side_by_side():
    "Issue 'findings': BERT and ELECTRA 'rose early' in mask prediction at exactly the always-'the' score (0.038)."
    import pandas as pd
    from embryo.experiments.compare import side_by_side_verdict, trend
    at_floor = pd.Series([0.0, 0.038, 0.038], index=[0, 500, 8000])
    t = trend(at_floor, 8000, floor=0.038)
    assert not t["rises"] and trend(at_floor, 8000)["rises"]  # without the floor it 'rises early'
    v = side_by_side_verdict("reconstruction", {"BERT": t, "ALBERT": trend(pd.Series([0.0, 0.05, 0.2], index=[0, 500, 8000]), 8000, 0.038)})
    assert v.startswith("The trend does not generalise") and "BERT" in v.split(":")[1] and "floor 0.038" in v, v


def test_evaluation_steps_keep_the_plateau_exit_dense_when_a_final_decay_drops_too(tmp_path, monkeypatch):
    "The mature run's log has two drops, the plateau exit (2,700-7,450) and the final decay (21,150-32,000, open)."
    import embryo.analyses.sweep as S
    import embryo.runs.run as R
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, *range(200, 10001, 100), *range(10500, 32001, 500)]
    for s in steps: (tmp_path / "checkpoints" / f"step_{s:07d}").mkdir(parents=True); (tmp_path / "checkpoints" / f"step_{s:07d}" / "model.safetensors").touch()
    monkeypatch.setattr(R, "run_transitions", lambda run: [dict(start_step=2700, end_step=7450), dict(start_step=21150, end_step=32000)])
    got = S.evaluation_steps(tmp_path, 4, 12)
    window = [s for s in got if 2700 < s <= 7500]  # 2,700: the plateau's last checkpoint (the drop starts there)
    assert 2700 in got and len(window) == 12 and window[-1] == 7500, got
    assert [s for s in got if s > 7500] == S.log_spaced([s for s in steps if s > 7500], 4), got


def test_downstream_floor_is_the_floor_of_the_aggregate_drawn():
    "With GLUE and the built-in tasks both stored, the panel draws GLUE: its floor is GLUE's bag-of-words (not 'builtin', first alphabetically)."
    import pandas as pd
    from embryo.experiments.compare import FLOORS, SIDE_BY_SIDE
    df = pd.DataFrame(dict(task=["glue", "builtin", "glue", "builtin"], metric=["bow", "bow", "score", "score"], seed=-1, step=0,
                           value=[0.7, 0.6, 0.8, 0.55]))
    assert FLOORS["glue"][1](None, df) == 0.7 and SIDE_BY_SIDE["glue"][2](df).tolist() == [0.8]


def _holding(lock: str, run: Path) -> subprocess.Popen:
    "Another process holding `lock` ('sweep_lock' or 'run_lock') of `run` until killed; returns once it holds it."
    p = subprocess.Popen([sys.executable, "-c", f"import time\nfrom embryo.runs.lock import {lock}\nwith {lock}({str(run)!r}):\n"
                          "    print('held', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_sweep_is_refused_and_a_sweep_during_training_says_so(fixture_copy, tmp_path, capsys):
    "Issue 32, finding 6: two sweeps of one run both ran every job, and a sweep during training did not say so."
    run = copy_run(fixture_copy, tmp_path / "r")
    first = _holding("sweep_lock", run)
    try: r = _cli("sweep", "--run", str(run), "--analyses", "knowledge", "--steps", "8", "--mode", "inprocess")
    finally: first.kill(); first.wait()
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert f"RunLocked: {run} is being swept by pid {first.pid} on" in r.stderr, r.stderr
    trainer = _holding("run_lock", run)
    try: t = sweep(open_run(run), ["knowledge"], steps=[8], mode="inprocess", options=QUICK, progress=False)
    finally: trainer.kill(); trainer.wait()
    out = capsys.readouterr().out
    assert t.loc["knowledge", 8] == "done" and f"{run} is still training (pid {trainer.pid} on" in out, out
    assert "up to step 30" in out and "rerun the same sweep when training ends" in out, out


def test_report_leaves_the_bundle_it_reads_as_it_was(root, tmp_path):
    "Issue 33, point 7: `embryo report --run figures/run --figures <elsewhere>` rewrote the bundle's results.sqlite."
    bundle = shutil.copytree(root / "figures" / "run", tmp_path / "run")
    wal = lambda p: p.name.endswith(("-wal", "-shm"))  # git ignores those; a copy may carry a reader's leftovers
    before = {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file() and not wal(p)}
    r = _cli("report", "--run", str(bundle), "--figures", str(tmp_path / "elsewhere"))
    assert r.returncode == 0, r.stderr[-2000:]
    after = {p for p in bundle.rglob("*") if p.is_file() and not wal(p)}
    assert after == set(before) and all(p.read_bytes() == before[p] for p in after), sorted(set(after) ^ set(before))
    fits = lambda d: {p.name: p.read_bytes() for p in d.glob("aoa_fits-*.parquet")}  # the bundle's AoA fits (08d)
    assert fits(tmp_path / "elsewhere" / "run") == fits(bundle) and len(fits(bundle)) == 1


def test_committed_comparisons_are_what_compare_draws_from_the_bundles(tmp_path, root):
    "figures/compare said BERT and ELECTRA rise in mask prediction at exactly the always-'the' score (their databases hold no floor)."
    from embryo.experiments.compare import compare_runs
    for folder, bundles in (("compare", ("", "bert-tiny", "electra-tiny")), ("compare-mature", ("mature", "bert-tiny-mature", "electra-tiny-mature"))):
        out = tmp_path / folder
        compare_runs([root / "figures" / b / "run" for b in bundles], out)
        got, want = json.loads((out / "compare.json").read_text()), json.loads((root / "figures" / folder / "compare.json").read_text())
        assert got["analyses"] == want["analyses"], f"figures/{folder} is stale: rerun embryo compare (README)"
    mask = json.loads((root / "figures" / "compare" / "compare.json").read_text())["analyses"]["reconstruction"]["runs"]
    assert not mask["BERT (bert-tiny)"]["rises"] and mask["BERT (bert-tiny)"]["floor"] == mask["ALBERT (tiny)"]["floor"]


def test_pages_run_two_at_a_time_and_come_back_in_the_order_asked(fixture_copy, tmp_path, monkeypatch):
    """notebook_pages with two workers (as `reproduce` runs them on 2 cores) writes each executed page, in the order asked,
    where a relative folder names it, and leaves this process in its directory (papermill's cwd= moved the whole
    process: two pages at once left it in nbs/, and a `make reproduce` wrote its pages and report under nbs/figures)."""
    from embryo.publish.pipeline import notebook_pages
    omp = os.environ.get("OMP_NUM_THREADS")
    monkeypatch.chdir(tmp_path)
    got = notebook_pages(fixture_copy, "pages", ["syntax", "attention"], workers=2)
    assert Path.cwd() == tmp_path and not (ROOT / "nbs" / "pages").exists()
    assert [p.name for p in got] == ["08a_syntax.html", "08_attention.html"]
    assert all(p.parent == tmp_path / "pages" for p in got), got
    for p in got:  # executed: outputs (a figure) in each page, and no cell that raised
        page = p.read_text()
        assert "data:image/png;base64" in page and "Traceback" not in page, p
    assert os.environ.get("OMP_NUM_THREADS") == omp  # the kernels' thread count did not leak into this process


def test_a_one_worker_sweep_runs_its_jobs_in_the_calling_thread(fixture_copy, monkeypatch):
    "In-process, one job at a time runs in this thread, not a pool's: after training in the same process (as `reproduce` does),"
    " torch ops in a new thread ran 1.5x slower (the LLC, 41 s a step against 27 s; numbers in the sweep's comment)."
    import threading
    import embryo.analyses.sweep as S
    seen, real = [], S.run_job
    monkeypatch.setattr(S, "run_job", lambda *a, **k: (seen.append(threading.get_ident()), real(*a, **k))[1])
    t = sweep(open_run(fixture_copy), ["attention"], steps=[2, 4], mode="inprocess", force=True, redraw=False, progress=False)
    assert seen == [threading.get_ident()] * 2 and (t == "done").all().all()


def test_bench_reproduce_time_reads_where_the_time_went(tmp_path):
    "Issue 77: `bench/reproduce_time.py` reads pretraining's time from the run folder and each analysis's from its sweep log."
    from embryo.train.fixtures import fixture_run
    run = tmp_path / "run"
    shutil.copytree(fixture_run(), run, ignore=shutil.ignore_patterns("results.sqlite*", "figures"))
    sweep(open_run(run), ["attention"], [0, 16], mode="inprocess", redraw=False, progress=False)
    cmd = [sys.executable, str(ROOT / "bench" / "reproduce_time.py"), str(run), "--wall", "600", "--out", str(tmp_path / "t")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "t.json").read_text())
    assert s["pretraining"]["steps"] == json.loads((run / "pretrain_config.json").read_text())["train"]["total_steps"]
    assert s["pretraining"]["seconds"] > 0 and list(s["analyses"]) == ["attention"]
    assert s["analyses"]["attention"]["jobs"] == 2 and 0 < s["analyses_share"] < 1
    assert "| attention | 2 |" in (tmp_path / "t.md").read_text()
    # a run stopped and resumed: the time some job ran, and the pretraining's own logged time, beside the spans
    assert 0 < s["analyses_busy_seconds"] <= s["analyses_wall_seconds"] + 0.1 and not s["analyses_interrupted"]
    assert s["pretraining"]["logged_seconds"] > 0
    sys.path.insert(0, str(ROOT / "bench"))
    try: from reproduce_time import busy_seconds
    finally: sys.path.remove(str(ROOT / "bench"))
    assert busy_seconds([(100, 110), (0, 10), (5, 20)]) == 30  # overlaps counted once, the gap 20-100 not at all
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "reproduce_time.py"), str(tmp_path / "nothing")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no such run folder" in bad.stderr


def test_bench_analysis_profile_names_what_a_step_spends(tmp_path):
    """Issue 77: `bench/analysis_profile.py` profiles one step of the LLC (and downstream) without writing to the run,
    and names each part's seconds; a step the run lacks is refused in one line."""
    from embryo.train.fixtures import fixture_run
    run, script = tmp_path / "run", str(ROOT / "bench" / "analysis_profile.py")
    # a copy: the shared fixture's lock file is touched by other workers' tests
    shutil.copytree(fixture_run(), run, ignore=shutil.ignore_patterns(".lock"))
    before = {p: p.stat().st_mtime for p in run.rglob("*") if p.is_file()}
    cmd = [sys.executable, script, str(run), "--step", "16", "--analyses", "llc", "--out", str(tmp_path / "p")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "p.json").read_text())["analyses"]["llc"]
    parts = s["parts"]
    assert s["seconds"] > 0 and 0 < parts["sgld"]["seconds"] <= s["seconds"]
    assert 0 < parts["backward"]["seconds"] < parts["sgld"]["seconds"]
    assert "| SGLD chains |" in (tmp_path / "p.md").read_text()
    assert {p: p.stat().st_mtime for p in run.rglob("*") if p.is_file()} == before  # nothing written to the run
    bad = subprocess.run([sys.executable, script, str(run), "--step", "7"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no checkpoint at step 7" in bad.stderr


def test_two_inprocess_jobs_resolve_transformers_first(fixture_copy, monkeypatch):
    """transformers resolves its names lazily, unsafely from two threads at once (a `make reproduce` lost a downstream
    job to `ImportError: cannot import name 'PreTrainedModel'`): the sweep resolves them before two jobs start."""
    code = ("import sys, transformers; before = set(sys.modules); "
            "from embryo.analyses.sweep import preload_transformers; preload_transformers(); after = set(sys.modules); "
            "names = ('PreTrainedModel', 'AutoModelForMaskedLM', 'AlbertConfig', 'ElectraForPreTraining', 'AutoTokenizer'); "
            "mods = [getattr(transformers, n).__module__ for n in names]; "
            "print([m not in before for m in mods], [m in after for m in mods])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"{[True] * 5} {[True] * 5}", out  # not imported by `import transformers`; imported by the preload
    import embryo.analyses.sweep as S
    calls = []
    monkeypatch.setattr(S, "preload_transformers", lambda: calls.append(1) or 0)
    sweep(open_run(fixture_copy), ["knowledge"], steps=[8, 30], mode="inprocess", workers=2, options=QUICK,
          redraw=False, progress=False)
    assert calls == [1]
