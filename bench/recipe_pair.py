"""Two pretraining recipes compared on the same held-out masks: MLM accuracy of each on every held-out Brown sequence
(not only the 256 the run's own evaluation scores), and their paired difference with a 95% interval.

Both runs must share their vocabulary (the same corpus and tokenizer settings), so that every masked token is the same
token in both. Each checkpoint predicts the same masked positions (`embryo.train.heldout.evaluate_heldout`, 15% masking);
the interval is the difference of the per-token hits, +-1.96 standard errors of its mean. The held-out examples and
masks are drawn from one seed for both runs (A's, or `--mask-seed`), so runs of different seeds are compared on the
same masks. Two runs trained on sequences of different lengths are scored on held-out sequences of one length
(`--seq-length`), so that they predict the same masked tokens; each run's own evaluation (at its own length) is
printed beside.

    python bench/recipe_pair.py A=RUN_DIR B=RUN_DIR [--step N] [--seq-length 64] [--mask-seed 0] [--out figures/mature/recipe_pairs.csv] [--device cuda]

`--out` adds the comparison as a row of a CSV (a row for the same two names is replaced; the others are kept).
"""
import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from embryo.train.heldout import evaluate_heldout, heldout_examples
from embryo.runs.run import read_run_config
from recipe_curves import check_steps, checkpoint, named_run, write_rows  # bench/ is the script's folder


def model_hits(model, tc, tok, ds, device: str = "cpu", seq_length: int | None = None,
               mask_seed: int | None = None) -> tuple[np.ndarray, dict]:
    ("Whether `model` predicted each masked token of every held-out sequence (of `seq_length` tokens; default `tc`'s), "
     "the examples and masks drawn from `mask_seed` (default `tc`'s seed).")
    at = replace(tc, max_seq_length=seq_length or tc.max_seq_length, seed=tc.seed if mask_seed is None else mask_seed)
    every = heldout_examples(tok, at.max_seq_length, seed=at.seed)
    r = evaluate_heldout(model, tok, at, torch.device(device), ds, examples=every, per_token=True)
    first = evaluate_heldout(model, tok, tc, torch.device(device), ds)  # the run's own evaluation
    return r["token_hits"], dict(sequences=len(every), own=first["mlm_accuracy"], seq_length=at.max_seq_length,
                                 own_length=tc.max_seq_length)


def token_hits(run: Path, step: int | None, device: str = "cpu", seq_length: int | None = None,
               mask_seed: int | None = None) -> tuple[np.ndarray, dict]:
    "`model_hits` of checkpoint `step` of `run` (default: its last)."
    tc, tok, ds, step, model = checkpoint(run, step, device)
    hits, info = model_hits(model, tc, tok, ds, device, seq_length, mask_seed)
    return hits, dict(info, step=step)


def compare(na: str, ha: np.ndarray, ia: dict, nb: str, hb: np.ndarray, ib: dict, out: Path | None = None) -> dict:
    "Print A and B (hits and infos of `token_hits`) and B - A with its 95% interval; add the row to the CSV `out`."
    assert len(ha) == len(hb), "the two masked different numbers of tokens"
    for name, h, i in ((na, ha, ia), (nb, hb, ib)):
        print(f"{name}: step {i['step']}: {h.mean():.4f} on {len(h)} masked tokens of {i['sequences']} held-out "
              f"sequences of {i['seq_length']} tokens (the run's own evaluation, {i['own_length']} tokens: {i['own']:.4f})")
    d = hb.astype(float) - ha.astype(float)
    se = d.std(ddof=1) / np.sqrt(len(d))
    print(f"{nb} - {na}: {d.mean():+.4f} (95% interval {d.mean() - 1.96 * se:+.4f} to {d.mean() + 1.96 * se:+.4f})")
    row = dict(baseline=na, recipe=nb, step=ib["step"], masked_tokens=len(d), sequences=ib["sequences"],
               seq_length=ib["seq_length"],
               baseline_accuracy=round(ha.mean(), 4), accuracy=round(hb.mean(), 4), difference=round(d.mean(), 4),
               low=round(d.mean() - 1.96 * se, 4), high=round(d.mean() + 1.96 * se, 4))
    if out:
        write_rows(out, [row], key=lambda r: (r["baseline"], r["recipe"]))
        print(f"wrote {out}")
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs=2, metavar="NAME=RUN_DIR")
    p.add_argument("--step", type=int, help="this checkpoint of both runs (default: each run's last)")
    p.add_argument("--out", type=Path, help="add the comparison to this CSV")
    p.add_argument("--seq-length", type=int, help="score both on held-out sequences of this many tokens (default: "
                                                   "their own; needed when the two runs trained on different lengths)")
    p.add_argument("--device", default="cpu", help="where the checkpoints are evaluated (e.g. cuda)")
    p.add_argument("--mask-seed", type=int, help="the held-out examples and masks of this seed (default: A's)")
    a = p.parse_args()
    (na, ra), (nb, rb) = (named_run(p, s) for s in a.runs)
    for r in (ra, rb): check_steps(p, r, None if a.step is None else [a.step])
    (_, ma, ta), (_, mb, tb) = (read_run_config(r) for r in (ra, rb))
    if a.seq_length is None and ta.max_seq_length != tb.max_seq_length:
        p.exit(2, f"{p.prog}: {ra} trained on {ta.max_seq_length}-token sequences and {rb} on {tb.max_seq_length}: "
                  "pass --seq-length N to score both on held-out sequences of N tokens\n")
    most = min(ma.max_position_embeddings, mb.max_position_embeddings)
    if a.seq_length is not None and not 8 <= a.seq_length <= most:
        p.exit(2, f"{p.prog}: --seq-length {a.seq_length}: expected 8 to {most} tokens (the runs' position tables)\n")
    if (ra / "spiece.model").read_bytes() != (rb / "spiece.model").read_bytes():
        p.exit(2, f"{p.prog}: {ra} and {rb} have different vocabularies: their masked tokens differ, so they cannot be "
                  "compared token by token; compare their recipe curves (bench/recipe_curves.py) instead\n")
    seed = ta.seed if a.mask_seed is None else a.mask_seed  # one set of masks for both
    (ha, ia), (hb, ib) = (token_hits(r, a.step, a.device, a.seq_length, seed) for r in (ra, rb))
    compare(na, ha, ia, nb, hb, ib, a.out)


if __name__ == "__main__":
    main()
