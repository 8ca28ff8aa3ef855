"""Per (analysis, step) overhead of the sweep's papermill path against its in-process path.

Both paths run the same `evaluate_step` on the same checkpoints of a run (default: the `tiny` run of `make reproduce`,
copied so its database is untouched); papermill adds a kernel start, the notebook's imports and the executed
notebook's write. Printed per analysis: seconds per step both ways, the overhead in seconds and the ratio.
Goal: at most 3 s of overhead per notebook run.

    python bench/sweep_overhead.py [--run runs/tiny] [--steps 100 1200] [--analyses knowledge attention reconstruction]
"""
import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from embryo.pretrain import fixture_run, list_steps
from embryo.sweep import available_analyses, sweep

QUICK = {"reconstruction": dict(max_words=50), "knowledge": dict(max_facts=200), "glue": dict(max_train_examples=64),
         "attention": dict(n_sentences=32)}


def copy_run(src: Path, dst: Path, steps) -> Path:
    dst.mkdir(parents=True)
    for f in ("config.json", "spiece.model", "token_counts.npy"):
        if (src / f).exists(): shutil.copy(src / f, dst / f)
    for s in steps:
        shutil.copytree(src / "checkpoints" / f"step_{s:07d}", dst / "checkpoints" / f"step_{s:07d}")
    return dst


def time_steps(run, analysis, steps, mode):
    "Seconds of each (analysis, step) job run alone through `mode`."
    out = []
    for s in steps:
        t0 = time.perf_counter()
        t = sweep(run, [analysis], [s], mode=mode, force=True, options={analysis: QUICK.get(analysis, {})},
                  redraw=False, progress=False)
        out.append(time.perf_counter() - t0)
        assert t.loc[analysis, s] == "done", f"{analysis} step {s} failed under {mode}"
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=Path("runs/tiny"), help="default runs/tiny (the fixture run if absent)")
    p.add_argument("--steps", type=int, nargs="+", help="default: the run's middle and last steps")
    p.add_argument("--analyses", nargs="+", default=[a for a in ("knowledge", "attention", "reconstruction") if a in available_analyses()])
    a = p.parse_args()
    src = a.run if (a.run / "checkpoints").is_dir() else fixture_run()
    have = list_steps(src)
    steps = a.steps or [have[len(have) // 2], have[-1]]
    print(f"run {src}, steps {steps}")
    print(f"{'analysis':15s} {'in-process s/step':>18s} {'papermill s/step':>17s} {'overhead s':>11s} {'ratio':>6s}")
    with tempfile.TemporaryDirectory() as d:
        run = copy_run(src, Path(d) / "run", steps)
        for analysis in a.analyses:
            time_steps(run, analysis, steps[:1], "inprocess")  # warm caches (facts, tagged text) as a long sweep has them
            ip = statistics.median(time_steps(run, analysis, steps, "inprocess"))
            pm = statistics.median(time_steps(run, analysis, steps, "papermill"))
            print(f"{analysis:15s} {ip:18.2f} {pm:17.2f} {pm - ip:11.2f} {pm / ip:6.2f}", flush=True)


if __name__ == "__main__":
    main()
