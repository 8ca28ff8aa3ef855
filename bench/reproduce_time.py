"""Where the time of `make reproduce` went, read from the run it made: pretraining (from the run folder's files) and
each analysis's sweep (the `sweep_log` of its results database: when each job ended and how long it took), with the
host's CPU. Issue 77 asks for `make reproduce` within 60 minutes on every host, with the analyses' share stated.

    python bench/reproduce_time.py runs/tiny --wall 3720 --out bench/results/reproduce-2026-12-06

`--wall`: the seconds the whole command took, as the shell measured it (install and report included); without it the
table gives the parts only. Writes <out>.json and <out>.md.

A run stopped and resumed (a session's end, a kill) stretches the spans: the pretraining is also timed from its own log
(each record's steps at its logged tokens a second) and the analyses by the time some job was running, and where a
span exceeds those by more than 5 minutes the summary says it was interrupted and reads the busy times instead.
"""
import argparse
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import host, refuse  # noqa: E402


def pretraining(run: Path) -> dict:
    "Seconds from the first checkpoint (step 0, saved as training starts) to the held-out scores (written last)."
    first, end = run / "checkpoints" / "step_0000000", run / "logs" / "eval.json"
    if not (first.exists() and end.exists()):
        refuse(f"{run}: no finished training here (needs checkpoints/step_0000000 and logs/eval.json); pass the "
                 "run folder make reproduce trained (runs/tiny)")
    train = json.loads((run / "pretrain_config.json").read_text())["train"]
    steps, tokens = train["total_steps"], train["batch_size"] * train["max_seq_length"]
    seconds = end.stat().st_mtime - first.stat().st_mtime
    logged, prev = 0.0, 0  # each record's steps since the last one, at the tokens a second it logged
    for line in (run / "logs" / "train.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("tokens_per_s"): logged += (r["step"] - prev) * tokens / r["tokens_per_s"]; prev = r["step"]
    return dict(seconds=round(seconds, 1), minutes=round(seconds / 60, 1), steps=steps,
                steps_per_s=round(steps / seconds, 2), logged_seconds=round(logged, 1),
                logged_minutes=round(logged / 60, 1), interrupted=seconds - logged > GAP)


def done_jobs(run: Path) -> list:
    "The sweep log's finished jobs: (analysis, seconds, when it ended)."
    db = run / "results.sqlite"
    if not db.exists(): refuse(f"{run}: no results.sqlite; run the sweep (make reproduce does) first")
    with sqlite3.connect(db) as con:
        return con.execute("SELECT analysis, seconds, created_at FROM sweep_log WHERE status = 'done'").fetchall()


def analyses(rows) -> dict:
    "Per analysis of `done_jobs`: its jobs, their summed seconds, and the wall time from its first job's start to its last job's end."
    out = {}
    for a, s, end in rows:
        d = out.setdefault(a, dict(jobs=0, job_seconds=0.0, start=end - s, end=end))
        d["jobs"] += 1; d["job_seconds"] += s; d["start"] = min(d["start"], end - s); d["end"] = max(d["end"], end)
    return {a: dict(jobs=d["jobs"], job_seconds=round(d["job_seconds"], 1), wall_seconds=round(d["end"] - d["start"], 1),
                    wall_minutes=round((d["end"] - d["start"]) / 60, 1), start=d["start"], end=d["end"])
            for a, d in sorted(out.items(), key=lambda kv: kv[1]["start"])}


GAP = 300  # seconds: a span longer than the busy time by more than this was interrupted


def busy_seconds(intervals) -> float:
    "The length of the union of (start, end) intervals: the time some job was running."
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > reach: total += b - max(a, reach); reach = b
    return total


def summary(run: Path, wall: float | None) -> dict:
    rows = done_jobs(run)
    parts = analyses(rows)
    span = max(d["end"] for d in parts.values()) - min(d["start"] for d in parts.values()) if parts else 0.0
    busy = busy_seconds((end - s, end) for _, s, end in rows)
    out = dict(host=host(), run=str(run), pretraining=pretraining(run), analyses=parts,
               analyses_wall_seconds=round(span, 1), analyses_wall_minutes=round(span / 60, 1),
               analyses_busy_seconds=round(busy, 1), analyses_busy_minutes=round(busy / 60, 1),
               analyses_interrupted=span - busy > GAP, wall_seconds=wall, wall_minutes=round(wall / 60, 1) if wall else None)
    if wall: out["analyses_share"] = round(span / wall, 3)
    return out


def markdown(s: dict) -> str:
    h, p = s["host"], s["pretraining"]
    lines = [f"# Where `make reproduce`'s time went ({s['run']})", "",
             f"Host: {h['cpu']}, {h['cores']} cores, AMX {h['amx']}, avx512_bf16 {h['avx512_bf16']}.", "",
             f"Pretraining: {p['seconds'] / 60:.1f} min ({p['steps']} steps, {p['steps_per_s']} steps a second); "
             f"{p['logged_minutes']:.1f} min by its log's own speeds"
             + (" (interrupted: read the log's time)." if p["interrupted"] else "."),
             f"Analyses: {s['analyses_wall_seconds'] / 60:.1f} min from the first job's start to the last one's end, "
             f"{s['analyses_busy_minutes']:.1f} min with some job running"
             + (" (interrupted: read the busy time)." if s["analyses_interrupted"] else "."),
             f"Whole command: {s['wall_seconds'] / 60:.1f} min." if s["wall_seconds"] else "Whole command: not given.",
             "", "| analysis | jobs | wall (min) | summed job time (min) |", "|---|---|---|---|"]
    lines += [f"| {a} | {d['jobs']} | {d['wall_seconds'] / 60:.1f} | {d['job_seconds'] / 60:.1f} |"
              for a, d in s["analyses"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the run folder make reproduce trained (runs/tiny)")
    ap.add_argument("--wall", type=float, help="seconds the whole command took, as measured outside it")
    ap.add_argument("--out", type=Path, help="write <out>.json and <out>.md")
    a = ap.parse_args(argv)
    if not a.run.is_dir(): refuse(f"{a.run}: no such run folder; pass the folder make reproduce trained (runs/tiny)")
    s = summary(a.run, a.wall)
    print(markdown(s))
    if a.out:
        from embryo.config import atomic_write
        for suffix, text in ((".json", json.dumps(s, indent=1) + "\n"), (".md", markdown(s))):
            atomic_write(a.out.with_name(a.out.name + suffix), text)


if __name__ == "__main__":
    main()
