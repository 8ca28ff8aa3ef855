"""Exact resume on a whole run: a preset trained twice at once, one copy killed with -9 midway and rerun.

Run A trains without a break. Run B, started beside it with the same command, is killed with SIGKILL (its whole
process group, data workers included) once its training log reaches step `--kill-at`, then started again with the same
command, which resumes it from its last resume point. Then every checkpoint's weights, the training logs (tokens/s
aside) and the final held-out evaluations of A and B are compared, and the result is written as JSON.

    python bench/kill_resume.py --preset tiny-mature --kill-at 4100 --out figures/mature/kill_resume.json -- --set compile=true

Arguments after `--` go to `embryo pretrain` unchanged. The two runs share the machine, so each is slower than alone;
the `tiny-mature` preset took about 4 minutes for both on one H200 (compiled), and would take hours on two CPU cores.
Exit 0 when the two runs are identical, 1 when they differ, 2 on bad arguments.
"""
import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from embryo.config import atomic_write
from embryo.train.batches import _resume_step
from embryo.runs.run import checkpoint_dir, list_steps, log_records


def start(run: Path, args: list[str], log: Path) -> subprocess.Popen:
    "`embryo pretrain` into `run`, in a process group of its own (so that a kill reaches its data workers too)."
    cmd = [sys.executable, "-m", "embryo.cli", "pretrain", "--no-progress", "--run-dir", str(run), *args]
    return subprocess.Popen(cmd, stdout=open(log, "a"), stderr=subprocess.STDOUT, start_new_session=True)


def logged_step(run: Path) -> int:
    "The last step in `run`'s training log (0 before the first record)."
    recs = log_records(run / "logs" / "train.jsonl")
    return recs[-1]["step"] if recs else 0


def finished(proc: subprocess.Popen, log: Path):
    "Wait for `proc`; stop with the end of its log if it failed."
    if proc.wait() != 0:
        sys.exit(f"kill_resume.py: `embryo pretrain` exited {proc.returncode}; the end of {log}:\n"
                 + "\n".join(log.read_text().splitlines()[-15:]))


def compare(a: Path, b: Path) -> dict:
    "Every checkpoint's weights (bytes, else tensors), the training logs without tokens/s, the final evaluations."
    sha = lambda f: hashlib.sha256(f.read_bytes()).hexdigest()
    (sa, sb), differ = (list_steps(a), list_steps(b)), []
    for s in sa if sa == sb else []:
        fa, fb = (checkpoint_dir(r, s) / "model.safetensors" for r in (a, b))
        if sha(fa) == sha(fb): continue
        ta, tb = load_file(fa), load_file(fb)
        if ta.keys() != tb.keys() or not all(torch.equal(ta[k], tb[k]) for k in ta): differ.append(s)
    log = lambda r: [{k: v for k, v in rec.items() if k != "tokens_per_s"} for rec in log_records(r / "logs" / "train.jsonl")]
    ev = lambda r: json.loads((r / "logs" / "eval.json").read_text())
    (la, lb), (ea, eb) = (log(a), log(b)), (ev(a), ev(b))
    return dict(checkpoints=len(sa), same_steps=sa == sb, checkpoints_differing=differ,
                final_sha256=sha(checkpoint_dir(a, sa[-1]) / "model.safetensors"),
                final_sha256_b=sha(checkpoint_dir(b, sb[-1]) / "model.safetensors"),
                log_records=len(la), logs_equal=la == lb, eval_equal=ea == eb, eval=ea)


def versions() -> dict:
    "The packages that decide the run's numbers: torch and the vocabulary's trainer (another release, another vocabulary)."
    from importlib.metadata import version
    return {name: version(name) for name in ("torch", "sentencepiece", "transformers")}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", required=True)
    p.add_argument("--kill-at", type=int, required=True, help="kill B once its log reaches this step (a logged step)")
    p.add_argument("--work", type=Path, default=Path("runs/kill-resume"), help="where A and B are trained (emptied first)")
    p.add_argument("--out", type=Path, required=True, help="the JSON result")
    p.add_argument("pretrain_args", nargs=argparse.REMAINDER, help="after --: more arguments of `embryo pretrain`")
    a = p.parse_args()
    extra = ["--preset", a.preset, *[x for x in a.pretrain_args if x != "--"]]
    bad = lambda what: p.exit(2, f"{p.prog}: {what}\n")  # one line, exit 2, as the other bench scripts
    if a.kill_at < 1: bad(f"--kill-at {a.kill_at}: pass a logged step >= 1")
    other = sorted(set(os.listdir(a.work)) - {"A", "B", "A.log", "B.log"}) if a.work.is_dir() else []
    if other or (a.work.exists() and not a.work.is_dir()):
        bad(f"--work {a.work} holds other files ({', '.join(other) or 'it is a file'}), and it is emptied first: "
            "pass a new folder")
    shutil.rmtree(a.work, ignore_errors=True); a.work.mkdir(parents=True)
    A, B = a.work / "A", a.work / "B"
    t0 = time.time()
    pa, pb = start(A, extra, a.work / "A.log"), start(B, extra, a.work / "B.log")
    while logged_step(B) < a.kill_at and pb.poll() is None: time.sleep(0.2)
    if pb.poll() is not None:  # it failed, or finished before the kill: either way the check cannot be made
        os.killpg(pa.pid, signal.SIGKILL); pa.wait(); finished(pb, a.work / "B.log")
        sys.exit(f"kill_resume.py: B ended before it could be killed at step {a.kill_at}; pass an earlier --kill-at")
    os.killpg(pb.pid, signal.SIGKILL); pb.wait()
    killed = dict(at_logged_step=logged_step(B), resume_point=_resume_step(B), after_s=round(time.time() - t0, 1))
    print(f"B killed with -9 at logged step {killed['at_logged_step']} (resume point {killed['resume_point']}); rerun",
          flush=True)
    pb = start(B, extra, a.work / "B.log")
    finished(pa, a.work / "A.log"); finished(pb, a.work / "B.log")
    res = compare(A, B)
    identical = (res["same_steps"] and not res["checkpoints_differing"] and res["logs_equal"] and res["eval_equal"])
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or platform.machine()
    out = dict(preset=a.preset, pretrain_args=extra, killed=killed, identical=identical, wall_s=round(time.time() - t0),
               device=device, versions=versions(), **res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(a.out, json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "eval"}))
    sys.exit(0 if identical else 1)


if __name__ == "__main__":
    main()
