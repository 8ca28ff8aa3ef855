"""Where held-out MLM accuracy comes from: one checkpoint's hits on every held-out Brown sequence, split by how each
target piece was shown and by the run of adjacent targets it sits in.

Held-out text is masked as in training (`embryo.train.heldout.evaluate_heldout`, at 15%): whole words, in n-grams of up to
three words, and each chosen piece is shown as [MASK] (80%), as a random piece (10%) or as itself (10%), BERT's and
ALBERT's rule. A piece shown as itself is read off the input, so the one accuracy mixes prediction and copying; this
splits it:
- `shown`: `mask` (the input holds [MASK]), `itself` (the input holds the target piece), `other` (another piece);
- `run`: the number of adjacent predicted pieces the target sits in (1, 2, 3, 4, 5 or more): a one-piece word alone,
  or a piece inside a masked n-gram whose neighbours are hidden too.

    python bench/heldout_masks.py RUN_DIR [--step N] [--out figures/mature/heldout_masks.json] [--device cuda]

Prints each group's share of the targets and its accuracy with a 95% interval (+-1.96 standard errors of the per-token
hits); `--out` writes them as JSON (temp file, then rename).
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

from embryo.config import atomic_write
from embryo.train.batches import Batches
from embryo.train.heldout import evaluate_heldout, heldout_config, heldout_examples
from recipe_curves import checkpoint, checkpoint_args  # bench/ is the script's folder

SHOWN = ("mask", "itself", "other")
RUNS = ("1", "2", "3", "4", "5+")


def target_kinds(batch: dict, mask_id: int) -> tuple[np.ndarray, np.ndarray]:
    "How each target of `batch` was shown (index into `SHOWN`) and the length of its run of adjacent targets, in hit order."
    ids, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
    target = labels != -100
    shown = np.where(ids == mask_id, 0, np.where(ids == labels, 1, 2))[target]
    runs = np.zeros(labels.shape, np.int64)
    for r, row in enumerate(target):
        edges = np.flatnonzero(np.diff(np.r_[0, row.astype(np.int8), 0]))  # starts and ends of the runs of targets
        for s, e in zip(edges[::2], edges[1::2]): runs[r, s:e] = e - s
    return shown, runs[target]


def share(hits: np.ndarray, m: np.ndarray) -> dict:
    "A group's share of the targets, its size and its accuracy with a 95% interval."
    h = hits[m]
    se = h.std(ddof=1) / np.sqrt(len(h)) if len(h) > 1 else float("nan")
    return dict(targets=int(m.sum()), share=round(float(m.mean()), 4), accuracy=round(float(h.mean()), 4) if len(h) else None,
                low=round(float(h.mean() - 1.96 * se), 4) if len(h) > 1 else None,
                high=round(float(h.mean() + 1.96 * se), 4) if len(h) > 1 else None)


def split(run: Path, step: int | None = None, device: str = "cpu") -> dict:
    tc, tok, ds, step, model = checkpoint(run, step, device)
    every = heldout_examples(tok, tc.max_seq_length, seed=tc.seed)
    hits = evaluate_heldout(model, tok, tc, torch.device(device), ds, examples=every, per_token=True)["token_hits"]
    data = Batches(every, tok, heldout_config(tc))  # the same masks, seeded per example, in the same order
    kinds = [target_kinds(data.collate(range(s, min(s + 256, len(every)))), tok.mask_id) for s in range(0, len(every), 256)]
    shown, runs = (np.concatenate(k) for k in zip(*kinds))
    assert len(shown) == len(hits), "the masks differ from the evaluation's"
    runs = np.minimum(runs, 5)
    return dict(run=str(run), step=step, sequences=len(every), masked_tokens=len(hits), **share(hits, hits >= 0),
                shown={k: share(hits, shown == i) for i, k in enumerate(SHOWN)},
                run_length={k: share(hits, runs == i + 1) for i, k in enumerate(RUNS)},
                mask_run_length={k: share(hits, (runs == i + 1) & (shown == 0)) for i, k in enumerate(RUNS)})


def main():
    _, a = checkpoint_args(__doc__)
    r = split(a.run, a.step, a.device)
    line = lambda name, x: print(f"{name:>22}: {x['share']:6.1%} of targets, accuracy {x['accuracy']:.4f} "
                                 f"(95% {x['low']:.4f} to {x['high']:.4f})" if x["targets"] > 1 else f"{name:>22}: {x['targets']} targets")
    print(f"{a.run} step {r['step']}: {r['accuracy']:.4f} on {r['masked_tokens']} targets of {r['sequences']} held-out sequences")
    for k, x in r["shown"].items(): line(f"shown as {k}", x)
    for k, x in r["run_length"].items(): line(f"in a run of {k}", x)
    for k, x in r["mask_run_length"].items(): line(f"[MASK], run of {k}", x)
    if a.out:
        atomic_write(a.out, json.dumps(r, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
