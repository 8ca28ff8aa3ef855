"""Learning curves of pretraining recipes, for choosing one: held-out MLM accuracy against tokens seen, per run.

Each run folder is a pretraining run (`embryo pretrain --run-dir R --set ...`). Every checkpoint is scored on the
held-out Brown text (`embryo.train.heldout.heldout_curve`: 15% masking whatever the run trained with), and the training
log gives the mean MLM loss of the logged steps up to each checkpoint since the one before. The rows go to a CSV
(recipe, step, tokens, heldout_mlm_accuracy, train_mlm_accuracy on a fixed sample of training examples masked alike,
train_mlm_loss, and the run's settings that differ from the `tiny` preset), which `nbs/03_pretrain.ipynb` draws.

    python bench/recipe_curves.py --out figures/recipe_curves.csv NAME=RUN_DIR [NAME=RUN_DIR ...] [--steps 8000 32000] [--device cuda]

The held-out masks are drawn from each run's seed; `--mask-seed 0` scores a run of another seed on seed 0's masks.

With `--append`, the rows of other recipes already in `--out` are kept (every curve measured stays in the file).
With `--merge`, so are a recipe's own rows at steps not scored now: a run scored in parts (as it trains, or after a
stop and resume) gives the rows one scoring of all its steps would, each loss window taken from the step before it.
"""
import argparse
import csv
import io
from pathlib import Path

from embryo.config import atomic_write, get_train_config, get_config
from embryo.runs.run import list_steps, load_checkpoint, log_records, read_run_config
from embryo.train.heldout import heldout_curve
from embryo.train.batches import prepare_run


def settings_text(mc, tc) -> str:
    "The run's settings that differ from the tiny preset, as name=value."
    base = {**get_config("tiny").to_dict(), **get_train_config("tiny").to_dict()}
    mine = {**mc.to_dict(), **tc.to_dict()}
    skip = {"corpus", "checkpoint_every", "checkpoint_pow2_until", "resume_every", "log_every", "eval_sequences",
            "compile"}  # how the run was trained or saved, not its recipe
    return " ".join(f"{k}={mine[k]}" for k in sorted(mine) if k not in skip and mine[k] != base.get(k))


def check_run(p: argparse.ArgumentParser, run) -> Path:
    "`run` as a Path; one line and exit 2 where it is not the folder of a pretraining run."
    if not (Path(run) / "spiece.model").exists():
        p.exit(2, f"{p.prog}: {run} is not a pretraining run (no spiece.model); pass a run folder of `embryo pretrain`\n")
    return Path(run)


def named_run(p: argparse.ArgumentParser, spec: str) -> tuple[str, Path]:
    "(name, run folder) of a NAME=RUN_DIR argument; one line and exit 2 where it is not one (`check_run`)."
    name, _, run = spec.partition("=")
    if not run: p.exit(2, f"{p.prog}: {spec!r}: expected NAME=RUN_DIR\n")
    return name, check_run(p, run)


def check_steps(p: argparse.ArgumentParser, run: Path, steps) -> None:
    "One line and exit 2 where `run` has no checkpoint at one of `steps` (None: no step asked for)."
    have = list_steps(run)
    missing = sorted(set(steps or ()) - set(have))
    if missing: p.exit(2, f"{p.prog}: {run} has no checkpoint at step {', '.join(map(str, missing))}; its steps: {have}; "
                          "pass steps it has, or train it further\n")


def checkpoint_args(doc: str, extra=None, argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    ("The parser and arguments of a script about one checkpoint of one run (RUN_DIR, --step, --out, --device, and what "
     "`extra(parser)` adds); a folder that is not a run, or a step it has no checkpoint of, gets one line and exit 2.")
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("run", type=Path, metavar="RUN_DIR")
    p.add_argument("--step", type=int, help="this checkpoint (default: the run's last)")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    p.add_argument("--device", default="cpu", help="where the checkpoint is evaluated (e.g. cuda)")
    if extra: extra(p)
    a = p.parse_args(argv)
    check_steps(p, check_run(p, a.run), None if a.step is None else [a.step])
    return p, a


def checkpoint(run: Path, step: int | None = None, device: str = "cpu") -> tuple:
    "(settings, tokenizer, pretraining dataset, step, MLM model) of checkpoint `step` of `run` (default: its last)."
    preset, mc, tc = read_run_config(run)
    tok, ds = prepare_run(run, preset, mc, tc)
    step = step if step is not None else list_steps(run)[-1]
    return tc, tok, ds, step, load_checkpoint(run, step, device, mlm=True)


def loss_windows(run: Path, steps) -> list:
    "Per step of `steps` (ascending): the mean logged training MLM loss after the step before it, up to it ('' if none)."
    log = log_records(run / "logs" / "train.jsonl", 1 << 62)
    out, prev = [], 0
    for s in steps:
        w = [x["mlm_loss"] for x in log if prev < x["step"] <= s]
        out.append(round(sum(w) / len(w), 4) if w else ""); prev = s
    return out


def curve_rows(name: str, run: Path, steps=None, device: str = "cpu", mask_seed: int | None = None) -> list[dict]:
    "The rows of `run`'s checkpoints `steps` (default: all), scored on the held-out text, as recipe `name`."
    _, mc, tc = read_run_config(run)
    rows = [dict(recipe=name, step=r["step"], tokens=r["tokens"], heldout_mlm_accuracy=round(r["mlm_accuracy"], 4),
                 train_mlm_accuracy=round(r["train_mlm_accuracy"], 4), train_mlm_loss="", settings=settings_text(mc, tc))
            for r in heldout_curve(run, steps, device, mask_seed)]
    for r, w in zip(rows, loss_windows(run, [r["step"] for r in rows])): r["train_mlm_loss"] = w
    return rows


def check_settings(p: argparse.ArgumentParser, out: Path, name: str, run: Path) -> None:
    "One line and exit 2 where `out` holds rows of recipe `name` from a run of other settings than `run`'s."
    with open(out, newline="") as f: had = {r["settings"] for r in csv.DictReader(f) if r["recipe"] == name}
    _, mc, tc = read_run_config(run)
    if had - {settings_text(mc, tc)}:
        p.exit(2, f"{p.prog}: {out} holds {name!r} from a run of other settings ({', '.join(map(repr, had))}; {run}: "
                  f"{settings_text(mc, tc)!r}); give this run another name, or leave out --merge\n")


def merged_rows(out: Path, run: Path, rows: list[dict]) -> list[dict]:
    "`rows` of one recipe with its rows already in `out` at other steps, by step, every loss window taken anew."
    with open(out, newline="") as f: old = [r for r in csv.DictReader(f) if r["recipe"] == rows[0]["recipe"]]
    new = {r["step"] for r in rows}
    rows = sorted([r for r in old if int(r["step"]) not in new] + rows, key=lambda r: int(r["step"]))
    for r, w in zip(rows, loss_windows(run, [int(r["step"]) for r in rows])): r["train_mlm_loss"] = w
    return rows


def write_rows(out: Path, rows: list[dict], key, keep: bool = True):
    "Write `rows` to the CSV `out` (temp file, then rename); `keep`: after the rows there whose `key` none has."
    if keep and out.exists():
        new = {key(r) for r in rows}
        with open(out, newline="") as f: rows = [r for r in csv.DictReader(f) if key(r) not in new] + rows
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[-1]))
    w.writeheader(); w.writerows(rows)
    atomic_write(out, buf.getvalue())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="NAME=RUN_DIR")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, nargs="+", help="only these checkpoints (default: every one)")
    p.add_argument("--append", action="store_true", help="keep the rows of the other recipes already in --out")
    p.add_argument("--merge", action="store_true", help="as --append, and keep each recipe's rows at steps not scored "
                                                        "now (a run scored in parts)")
    p.add_argument("--device", default="cpu", help="where the checkpoints are evaluated (e.g. cuda)")
    p.add_argument("--mask-seed", type=int, help="the held-out examples and masks of this seed (default: each run's "
                                                 "own), to score runs of other seeds on the same masks")
    a = p.parse_args()
    runs = [named_run(p, spec) for spec in a.runs]  # all checked before any is evaluated
    for name, run in runs:
        check_steps(p, run, a.steps)
        if a.merge and a.out.exists(): check_settings(p, a.out, name, run)
    rows = []
    for name, run in runs:
        mine = curve_rows(name, run, a.steps, a.device, a.mask_seed)
        print(f"{name}: " + ", ".join(f"{r['step']}: {r['heldout_mlm_accuracy']:.3f}" for r in mine))
        rows += merged_rows(a.out, run, mine) if a.merge and a.out.exists() else mine
    write_rows(a.out, rows, key=lambda r: r["recipe"], keep=a.append or a.merge)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
