"""Per (analysis, step) overhead of the sweep's papermill path against its in-process path.

Both paths run the same `evaluate_step` on the same checkpoints of a run (default: the `tiny` run of `make reproduce`,
copied so its database is untouched), as a sweep does: one `sweep` call per analysis and mode over several steps, timed
whole and divided by the steps. Papermill adds, per notebook, a kernel (started ahead by the sweep's `KernelPool`,
while the previous notebook runs), the notebook's exported code and the executed notebook's write; in-process keeps
its caches from one step to the next. Printed per analysis: seconds per step both ways, the overhead in seconds and
the ratio. Goal: at most 3 s of overhead per notebook run.

    python bench/sweep_overhead.py [--run runs/tiny] [--steps 0 2 8 32 128 512 800 1200] [--analyses knowledge attention reconstruction]
"""
import argparse
import shutil
import tempfile
import time
from pathlib import Path

from embryo.runs.run import list_steps
from embryo.train.fixtures import fixture_run
from embryo.analyses.sweep import available_analyses, sweep
from embryo.runs.series_check import open_run

QUICK = {"reconstruction": dict(max_words=50), "knowledge": dict(max_facts=200), "glue": dict(max_train_examples=64),
         "attention": dict(n_sentences=32)}


def copy_run(src: Path, dst: Path, steps) -> Path:
    dst.mkdir(parents=True)
    for f in ("pretrain_config.json", "config.json", "spiece.model", "tokenizer_config.json", "special_tokens_map.json",
              "tokenizer.json", "token_counts.npy"):  # config.json: a run made before pretrain_config.json
        if (src / f).exists(): shutil.copy(src / f, dst / f)
    for s in steps:
        shutil.copytree(src / "checkpoints" / f"step_{s:07d}", dst / "checkpoints" / f"step_{s:07d}")
    return dst


def time_per_step(run, analysis, steps, mode):
    "Seconds per (analysis, step) job of one sweep over `steps` through `mode`."
    t0 = time.perf_counter()
    t = sweep(open_run(run), [analysis], steps, mode=mode, force=True, options={analysis: QUICK.get(analysis, {})},
              redraw=False, progress=False)
    assert (t.loc[analysis] == "done").all(), f"{analysis} failed under {mode}: {t.loc[analysis].to_dict()}"
    return (time.perf_counter() - t0) / len(steps)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=Path("runs/tiny"), help="default runs/tiny (the fixture run if absent)")
    p.add_argument("--steps", type=int, nargs="+", help="default: 8 of the run's steps, first to last")
    p.add_argument("--analyses", nargs="+", default=[a for a in ("knowledge", "attention", "reconstruction") if a in available_analyses()])
    a = p.parse_args()
    src = a.run if (a.run / "checkpoints").is_dir() else fixture_run()
    have = list_steps(src)
    steps = a.steps or sorted({have[i * (len(have) - 1) // 7] for i in range(8)})
    print(f"run {src}, steps {steps}")
    print(f"{'analysis':15s} {'in-process s/step':>18s} {'papermill s/step':>17s} {'overhead s':>11s} {'ratio':>6s}")
    with tempfile.TemporaryDirectory() as d:
        run = copy_run(src, Path(d) / "run", steps)
        for analysis in a.analyses:
            time_per_step(run, analysis, steps[:1], "inprocess")  # warm the disk caches (facts, tagged text) for both
            ip = time_per_step(run, analysis, steps, "inprocess")
            pm = time_per_step(run, analysis, steps, "papermill")
            print(f"{analysis:15s} {ip:18.2f} {pm:17.2f} {pm - ip:11.2f} {pm / ip:6.2f}", flush=True)


if __name__ == "__main__":
    main()
