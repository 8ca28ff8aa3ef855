"""What one step of the two costliest analyses of `make reproduce` spends its time on: downstream (`glue`, with the
options `make reproduce` gives it) and the LLC, each profiled on one checkpoint of a run (nothing written to it).

Issue 77 asks to cut their cost without changing their verdicts; this says what a cut can reach. For each analysis:
its wall seconds, and the seconds (and share) of its named parts, read from Python's profiler (cumulative time of each
function, so nested parts overlap: finetuning holds its forward and backward). Host and threads are recorded beside.

    python bench/analysis_profile.py runs/tiny --step 1500 [--analyses glue llc] [--out bench/results/analysis_profile-DATE]

Writes <out>.json and <out>.md.
"""
import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import host, refuse  # noqa: E402

# per analysis: (key, name in the table, module path ending, function name) of the parts reported
PARTS = {
    "glue": [("finetune", "finetuning", "analyses/finetune.py", "finetune"),
             ("forward", "forward passes in finetuning", "analyses/finetune.py", "forward"),
             ("backward", "backward passes (autograd)", "", "run_backward"),
             ("predict", "predicting the dev sets", "analyses/finetune.py", "predict"),
             ("classifiers", "building the classifiers", "analyses/finetune.py", "sequence_classifier"),
             ("ngram_floor", "n-gram floor", "analyses/floors.py", "ngram_score"),
             ("bow_floor", "bag-of-words floor", "analyses/floors.py", "bow_score"),
             ("load_tasks", "loading the tasks", "analyses/downstream.py", "load_task"),
             ("load_checkpoint", "loading the checkpoint", "runs/run.py", "load_checkpoint")],
    "llc": [("sgld", "SGLD chains", "analyses/llc.py", "sgld_chain"),
            ("backward", "backward passes (autograd)", "", "run_backward"),
            ("linear", "linear layers (forward)", "", "linear"),
            ("noise", "Langevin noise (randn)", "", "randn"),
            ("mala", "MALA acceptance", "analyses/llc.py", "mala_acceptance"),
            ("batches", "building the batches", "analyses/llc.py", "mlm_batches"),
            ("load_checkpoint", "loading the checkpoint", "runs/run.py", "masked_lm_at")],
}


def seconds_in(stats: pstats.Stats, where: str, name: str, total: bool) -> float:
    "Cumulative seconds of every profiled function called `name` in a file ending in `where` (own time for built-ins)."
    return sum(ct if total else tt for (f, _, fn), (_, _, tt, ct, _) in stats.stats.items()
               if ((fn == name and f.endswith(where)) if where else (f == "~" and name in fn)))


def profile(analysis: str, run: str, step: int) -> dict:
    "Run one step of `analysis` on `run` under the profiler (write=False); its wall seconds and its parts."
    from embryo.analyses import glue, llc
    from embryo.publish.pipeline import REPRODUCE_OPTIONS
    call = {"glue": lambda: glue.evaluate_step(run, step, progress=False, write=False, **REPRODUCE_OPTIONS["glue"]),
            "llc": lambda: llc.evaluate_step(run, step, write=False, calibrate=False)}[analysis]
    pr = cProfile.Profile(); t0 = time.perf_counter()
    pr.enable(); call(); pr.disable()
    wall = time.perf_counter() - t0
    st = pstats.Stats(pr)
    parts = {key: (label, round(seconds_in(st, where, name, total=bool(where)), 1))
             for key, label, where, name in PARTS[analysis]}
    return dict(seconds=round(wall, 1),
                parts={k: dict(part=label, seconds=v, share=round(v / wall, 3)) for k, (label, v) in parts.items()})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a run folder with checkpoints (e.g. runs/tiny after make reproduce)")
    ap.add_argument("--step", type=int, required=True, help="the checkpoint to profile")
    ap.add_argument("--analyses", nargs="+", default=["glue", "llc"], choices=list(PARTS))
    ap.add_argument("--out", help="write <out>.json and <out>.md")
    a = ap.parse_args()
    from embryo.runs.run import list_steps
    if not (Path(a.run) / "checkpoints").is_dir():
        refuse(f"{a.run}: no checkpoints folder; pass a run folder (make reproduce trains runs/tiny)")
    if a.step not in list_steps(a.run):
        refuse(f"{a.run} has no checkpoint at step {a.step}; its steps: {', '.join(map(str, list_steps(a.run)))}")
    import torch
    out = dict(host=host(), threads=torch.get_num_threads(), run=str(a.run), step=a.step,
               omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
               analyses={x: profile(x, a.run, a.step) for x in a.analyses})
    lines = [f"# One step of the costliest analyses, profiled ({a.run}, step {a.step})", "",
             f"Host: {out['host']['cpu']}, {out['host']['cores']} cores, AMX {out['host']['amx']}, avx512_bf16 "
             f"{out['host']['avx512_bf16']}; torch threads {out['threads']}.", ""]
    for x, r in out["analyses"].items():
        lines += [f"## {x}: {r['seconds']} s", "", "| part | seconds | share |", "|---|---|---|",
                  *(f"| {v['part']} | {v['seconds']} | {v['share']:.1%} |" for v in r["parts"].values()), ""]
    print("\n".join(lines))
    if a.out:
        from embryo.config import atomic_write
        atomic_write(Path(a.out + ".json"), json.dumps(out, indent=1) + "\n")
        atomic_write(Path(a.out + ".md"), "\n".join(lines))


if __name__ == "__main__":
    main()
