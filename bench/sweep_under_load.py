"""A sweep beside other torch jobs: how much of its quiet speed it keeps, and how much it leaves its neighbours.

The same neighbours as `bench/under_load.py` (a torch process multiplying 384 x 384 matrices at its default threads,
whose threads spin while they wait). The sweep is `embryo sweep --force` of `--analyses` over `--steps` of a copy of
`--run` (default: the `tiny` run of `make reproduce`, else the fixture run), papermill mode as the card's commands
run it, one job at a time; its speed is the inverse of its wall time, kernel start-up included. Each condition in
each round: quiet, then beside 1 and 2 neighbours at nice 0; the sweep's share of its quiet speed (the same round's
quiet), each neighbour's products a second as a share of one neighbour's quiet speed, over the sweep's time.

    python bench/sweep_under_load.py [--run runs/tiny] [--analyses reconstruction attention] [--steps 1000 8000]
                                     [--policies turns passive] [--shares 0.7] [--conditions quiet n1 n2]
                                     [--repeats 1] [--out results.json]

`turns` is the sweep's own share of the time beside a lone spinner (`SWEEP_TURN`, notebook 02a7); each `--shares` value
adds a policy `turns-<share>` that works that share instead (`EMBRYO_TURN`), so shares are compared in one run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from under_load import rounds, summary  # noqa: E402
from sweep_overhead import QUICK, copy_run  # noqa: E402

from embryo.cli import SHARED_CORES  # noqa: E402
from embryo.runs.run import list_steps  # noqa: E402
from embryo.train.fixtures import fixture_run  # noqa: E402

POLICIES = {"passive": {**SHARED_CORES, "EMBRYO_TURNS": "0"}, "turns": SHARED_CORES}


def timed_sweep(run: Path, analyses: list[str], steps: list[int], env: dict) -> tuple[float, float, float]:
    "Wall seconds of one forced papermill sweep (as `embryo sweep` runs it) under `env`, its start and end."
    opts = [f"{a}.{k}={v}" for a in analyses for k, v in QUICK.get(a, {}).items()]
    cmd = [sys.executable, "-m", "embryo.cli", "sweep", "--run", str(run), "--force", "--analyses", *analyses,
           "--steps", *map(str, steps), *(["--option", *opts] if opts else [])]
    t0 = time.perf_counter()
    subprocess.run(cmd, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
    t1 = time.perf_counter()
    return t1 - t0, t0, t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("runs/tiny"))
    ap.add_argument("--analyses", nargs="+", default=["reconstruction", "attention"])
    ap.add_argument("--steps", type=int, nargs="+", help="default: the run's first and last steps")
    ap.add_argument("--conditions", nargs="+", default=["quiet", "n1", "n2"], choices=["quiet", "n1", "n2"])
    ap.add_argument("--policies", nargs="+", default=["turns", "passive"], choices=list(POLICIES))
    ap.add_argument("--shares", nargs="*", default=[], help="also `turns` at these shares of the time")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", help="also write the rows and their summary to this JSON file")
    a = ap.parse_args()
    src = a.run if (a.run / "checkpoints").is_dir() else fixture_run()
    have = list_steps(src)
    steps = a.steps or [have[0], have[-1]]
    print(f"run {src}, steps {steps}, analyses {a.analyses}", flush=True)
    with tempfile.TemporaryDirectory() as d:
        run = copy_run(src, Path(d) / "run", steps)
        timed_sweep(run, a.analyses, steps[:1], POLICIES["passive"])  # warm: disk caches, tagged text

        def job(env):  # its speed: sweeps a second
            wall, t0, t1 = timed_sweep(run, a.analyses, steps, env)
            return dict(seconds=round(wall, 1)), 1 / wall, t0, t1
        policies = {**{p: POLICIES[p] for p in a.policies},
                    **{f"turns-{s}": {**POLICIES["turns"], "EMBRYO_TURN": s} for s in a.shares}}
        rows = rounds(job, policies, a.conditions, a.repeats)
    print("\n| policy | condition | round | seconds | share of its quiet speed | each neighbour's share of its quiet "
          "speed |\n|---|---|---|---|---|---|")
    for r in rows: print(f"| {r['policy']} | {r['condition']} | {r['round']} | {r['seconds']} | "
                         f"{r['share_of_quiet']} | {', '.join(map(str, r['neighbours_share'])) or '-'} |")
    if a.out: Path(a.out).write_text(json.dumps(dict(rows=rows, summary=summary(rows)), indent=1) + "\n")


if __name__ == "__main__":
    main()
