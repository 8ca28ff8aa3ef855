"""Does the precision a host trains in change an ablation row? One row's run trained twice from the same seed, in bf16
(hosts with AMX or avx512_bf16) and in fp32 (hosts with AVX2 alone, where `precision auto` picks it), set against the
same row's other seed: the held-out scores of each, and how far apart their logged training losses run.

    python bench/precision_pair.py figures/ablations/precision-fp32/all-E128-sop-seed0 \\
        figures/ablations/quick/all-E128-sop-seed0 figures/ablations/quick/all-E128-sop-seed1 \\
        --out figures/ablations/precision-fp32/compare.json

Each argument is a run's record (02a6: `pretrain_config.json`, `logs/train.jsonl`, `logs/eval.json`). Writes a JSON of
the three records' scores, the differences (second minus first, third minus second) and the mean and largest absolute
difference of their logged MLM losses over the steps both logged.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import refuse  # noqa: E402

SCORES = ("mlm_accuracy", "sop_accuracy", "nsp_accuracy")


def record(folder: Path) -> dict:
    "A record's precision, held-out scores (percent) and logged MLM loss by step."
    files = [folder / "pretrain_config.json", folder / "logs" / "train.jsonl", folder / "logs" / "eval.json"]
    if missing := [str(f) for f in files if not f.exists()]:
        refuse(f"{folder}: not a finished run's record (missing {', '.join(missing)}); pass a folder of "
               "figures/ablations/<preset>/")
    log = [json.loads(l) for l in files[1].read_text().splitlines() if l.strip()]
    ev = json.loads(files[2].read_text())
    return dict(precision=log[-1].get("precision"), **{k: 100 * ev[k] for k in SCORES if k in ev},
                loss={r["step"]: r["mlm_loss"] for r in log})


def gap(a: dict, b: dict) -> dict:
    "b's scores minus a's, and the mean and largest absolute gap of their MLM losses over the steps both logged."
    steps = sorted(set(a["loss"]) & set(b["loss"]))
    d = [abs(a["loss"][s] - b["loss"][s]) for s in steps]
    return dict(**{k: b[k] - a[k] for k in SCORES if k in a and k in b}, logged_steps=len(steps),
                loss_gap_mean=sum(d) / len(d), loss_gap_max=max(d))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other_precision", type=Path, help="the row trained in the other precision")
    ap.add_argument("same_seed", type=Path, help="the committed row of the same seed")
    ap.add_argument("other_seed", type=Path, help="the committed row of another seed")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    rs = {k: record(p) for k, p in (("other_precision", a.other_precision), ("same_seed", a.same_seed),
                                    ("other_seed", a.other_seed))}
    settings = [(p / "pretrain_config.json").read_bytes() for p in (a.other_precision, a.same_seed)]
    if settings[0] != settings[1]:
        refuse(f"{a.other_precision} and {a.same_seed} were trained with different settings; pass the same row and seed")
    out = dict(records={k: str(p) for k, p in vars(a).items() if k != "out"},
               scores={k: {m: v for m, v in r.items() if m != "loss"} for k, r in rs.items()},
               precision_gap=gap(rs["same_seed"], rs["other_precision"]), seed_gap=gap(rs["same_seed"], rs["other_seed"]))
    text = json.dumps(out, indent=1) + "\n"
    print(text)
    if a.out:
        from embryo.config import atomic_write
        atomic_write(a.out, text)


if __name__ == "__main__":
    main()
