"""Pretraining beside other torch jobs: how much of its quiet speed it keeps, and how much it leaves its neighbours.

A neighbour is another process multiplying 384 x 384 float32 matrices with torch at its default thread count (one
thread per core, as any torch job starts), counting its products. The pretraining is `embryo pretrain --preset tiny`
for `--steps` steps in a fresh run folder; its speed is the median of the tokens a second its log records (one record
every 10 steps, the first left out: it holds the start-up), so the tokenizer and corpus set-up do not count.

Each condition, in one run on one host: quiet; beside 1 and 2 neighbours at nice 0 (equal priority); beside 1
neighbour at nice 19; beside 1 and 2 neighbours that start under the same policy (`n1same`, `n2same`: another embryo
job, a sweep's kernel or a test worker, beside the training). For each, the pretraining's speed as a share of its
quiet speed, and each neighbour's products a second as a share of one neighbour's quiet speed (measured alone in the
same run, over the time the pretraining ran, its start-up included). Each policy in `--policies` is one set of
environment variables for the pretraining process, which starts `embryo pretrain`'s own function without the
`embryo` command's `share_cores`, so that `default` is what it says:

- `default`: libgomp's own default (what `embryo pretrain` did before `embryo.cli.share_cores`);
- `passive`: `OMP_WAIT_POLICY=PASSIVE` (OpenMP threads sleep at once when they wait, instead of spinning), what every
  `embryo` command now sets (`embryo.cli.SHARED_CORES`);
- `spin-10k`, `spin-1k`: `GOMP_SPINCOUNT` 10,000 or 1,000 (spin that many times, then sleep; libgomp's own default is
  300,000 where it has a core for each thread);
- `one-thread`: `OMP_NUM_THREADS=1` (not a policy for training: the thread count changes its numbers);
- `passive-batch`: passive, and the process (with the threads it starts) under Linux's `SCHED_BATCH`: a thread that
  wakes does not preempt the one running, so a neighbour keeps its cores for its whole time slice.
- `turns`: passive, and the training loop's `Turns` (notebook 02a7): beside one busy neighbour whose threads spin, it
  works `TURN` of the time and pauses for the rest (every 2 s). Every other policy runs with `EMBRYO_TURNS=0`.

    python bench/under_load.py [--steps 150] [--policies default passive one-thread] [--conditions quiet n1 n2 n1nice]
                               [--repeats 3] [--out results.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embryo.cli import SHARED_CORES

NEIGHBOUR = r"""
import time, torch
a, n = torch.randn(384, 384), 0
while True:
    a @ a; n += 1
    if n % 20 == 0: print(f"{time.perf_counter():.4f} {n}", flush=True)
"""
OFF = {"EMBRYO_TURNS": "0"}
POLICIES = {"default": OFF, "passive": {**SHARED_CORES, **OFF}, "spin-10k": {"GOMP_SPINCOUNT": "10000", **OFF},
            "spin-1k": {"GOMP_SPINCOUNT": "1000", **OFF}, "one-thread": {"OMP_NUM_THREADS": "1", **OFF},
            "passive-batch": {**SHARED_CORES, "BENCH_SCHED": "batch", **OFF}, "turns": SHARED_CORES}
# (neighbours, their nice, whether they start under the pretraining's policy too, as another embryo job would)
CONDITIONS = {"quiet": (0, 0, False), "n1": (1, 0, False), "n2": (2, 0, False), "n1nice": (1, 19, False),
              "n1same": (1, 0, True), "n2same": (2, 0, True)}


def start_neighbours(k: int, nice: int, env: dict | None = None) -> list[subprocess.Popen]:
    """`k` neighbour processes at `nice` (under `env` added to ours), each writing 'time count' lines to a file of its
    own (a pipe read only at the end would fill and stop the neighbour after some 64,000 products)."""
    ps = []
    for _ in range(k):
        out = tempfile.TemporaryFile("w+")
        p = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=out, text=True,
                             env={**os.environ, **(env or {})}, preexec_fn=(lambda: os.nice(nice)) if nice else None)
        p.out = out; ps.append(p)
    return ps


def products_per_s(p: subprocess.Popen, t0: float, t1: float) -> float:
    "Stop neighbour `p`; its products a second between the perf-counter times `t0` and `t1`."
    p.terminate(); p.wait(); p.out.seek(0)
    pts = [tuple(map(float, l.split())) for l in p.out.read().splitlines() if len(l.split()) == 2]
    p.out.close()
    pts = [(t, n) for t, n in pts if t0 <= t <= t1]
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) if len(pts) >= 2 else float("nan")


def neighbour_alone(seconds: float = 20) -> float:
    "One neighbour's products a second alone (the reference of every neighbour's share), after 2 s of start-up."
    alone = start_neighbours(1, 0); t0 = time.perf_counter(); time.sleep(seconds)
    quiet_n = products_per_s(alone[0], t0 + 2, time.perf_counter())
    print(f"neighbour alone: {quiet_n:.0f} products/s", flush=True)
    return quiet_n


def rounds(job, policies: dict, conditions: list[str], repeats: int) -> list[dict]:
    """Every policy (name: environment variables) in each of `repeats` rounds under each of `conditions`, quiet first.
    `job(env)` runs the timed job once: (its row's own fields, its speed, higher is faster, start, end). Each row adds
    the speed's share of the same round's quiet speed and each neighbour's share of one neighbour's speed alone."""
    quiet_n, rows = neighbour_alone(), []
    for policy, rep in ((p, r) for r in range(repeats) for p in policies):
        quiet = None
        for cond in sorted(conditions, key=lambda c: c != "quiet"):  # quiet first: the others' reference
            k, nice, same = CONDITIONS[cond]
            ps = start_neighbours(k, nice, policies[policy] if same else None); time.sleep(2 if k else 0)
            fields, speed, t0, t1 = job(policies[policy])
            ns = [products_per_s(p, t0, t1) / quiet_n for p in ps]
            quiet = speed if cond == "quiet" else quiet
            rows.append(dict(policy=policy, condition=cond, round=rep + 1, **fields,
                             share_of_quiet=round(speed / quiet, 3) if quiet else None,
                             neighbours_share=[round(x, 3) for x in ns]))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def pretrain(steps: int, env: dict, folder: Path) -> tuple[float, float, float]:
    "Pretrain `tiny` for `steps` steps under `env`; (median tokens/s of its steady log records, start, end)."
    run = folder / f"run-{time.monotonic_ns()}"
    # the subcommand's own function, not `main`: main would add SHARED_CORES to the policy under test
    cmd = [sys.executable, "-c", "import os, sys; from embryo.cli import parser; a = parser().parse_args(sys.argv[1:]); "
           "os.environ.get('BENCH_SCHED') == 'batch' and os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)); "
           "a.fn(a)", "pretrain", "--preset", "tiny", "--run-dir",
           str(run), "--no-progress", "--set", f"total_steps={steps}", "log_every=10", f"warmup_steps={steps // 3}",
           f"checkpoint_every=[[{steps}, null]]", f"resume_every={steps}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t1 = time.perf_counter()
    rec = [json.loads(l) for l in (run / "logs" / "train.jsonl").read_text().splitlines()]
    tps = [r["tokens_per_s"] for r in rec if r["step"] > 10]
    return statistics.median(tps), t0, t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of every policy and condition (quiet speed each round)")
    ap.add_argument("--out", help="also write the rows and their summary to this JSON file")
    a = ap.parse_args()
    print(f"host: {os.cpu_count()} cores; torch threads by default: one a core", flush=True)
    with tempfile.TemporaryDirectory() as d:
        pretrain(20, {}, Path(d))  # warm: the tokenizer and corpus set-up cached under the data folder

        def job(env):
            tps, t0, t1 = pretrain(a.steps, env, Path(d))
            return dict(tokens_per_s=round(tps)), tps, t0, t1
        rows = rounds(job, {p: POLICIES[p] for p in a.policies}, a.conditions, a.repeats)
    print("\n| policy | condition | tokens/s | share of its quiet speed | each neighbour's share of its quiet speed |")
    print("|---|---|---|---|---|")
    for r in rows: print(f"| {r['policy']} | {r['condition']} | {r['tokens_per_s']} | {r['share_of_quiet']} | "
                         f"{', '.join(map(str, r['neighbours_share'])) or '-'} |")
    if a.repeats > 1:  # each policy and condition over the rounds: median (lowest-highest)
        print(f"\n| policy | condition | share of its quiet speed, {a.repeats} rounds | "
              "first neighbour's share of its quiet speed |\n|---|---|---|---|")
        for s in summary(rows):
            span = lambda k: f"{s[k]:.3f} ({s[k + '_low']:.3f}-{s[k + '_high']:.3f})" if k in s else "-"
            print(f"| {s['policy']} | {s['condition']} | {span('share')} | {span('neighbour')} |")
    if a.out:  # the rows and their summary, for the journal's fact spans
        Path(a.out).write_text(json.dumps(dict(rows=rows, summary=summary(rows)), indent=1) + "\n")


def summary(rows: list[dict]) -> list[dict]:
    "Per policy and condition over the rounds: the median, lowest and highest share of ours and the first neighbour's."
    out = []
    for key in dict.fromkeys((r["policy"], r["condition"]) for r in rows):
        rs = [r for r in rows if (r["policy"], r["condition"]) == key]
        s = {"policy": key[0], "condition": key[1], "case": " ".join(key), "rounds": len(rs)}
        for name, xs in (("share", [r["share_of_quiet"] for r in rs if r["share_of_quiet"] is not None]),
                         ("neighbour", [r["neighbours_share"][0] for r in rs if r["neighbours_share"]])):
            if xs: s.update({name: statistics.median(xs), f"{name}_low": min(xs), f"{name}_high": max(xs)})
        out.append(s)
    return out

if __name__ == "__main__":
    main()
