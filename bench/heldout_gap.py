"""Memorisation or genre: one checkpoint's MLM accuracy on the held-out Brown files, on as many Brown files it trained on,
and on its training sample, all masked alike (15%, `embryo.train.heldout.evaluate_heldout`).

The training sample (`embryo.train.heldout.training_sample`, the one of the recipe curves, drawn from the whole mixed corpus) can score above held-out
Brown for two reasons: the model remembers text it read many times, or the other sources (Wikipedia, Penn Treebank,
news) are easier to predict than Brown. Brown files it trained on tell the two apart: for each held-out file, the next
training file of its genre (the one before it at a genre's end), made into examples as the held-out ones are.

    python bench/heldout_gap.py RUN_DIR [--step N] [--out figures/mature/heldout_gap.json] [--device cuda]

Prints the three accuracies with 95% intervals (+-1.96 standard errors of the per-token hits); `--out` writes them as
JSON (temp file, then rename). The run must have trained on a built-in corpus with Brown in it (embryo-mini or
embryo-plus).
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

from embryo.text.packages import download
from embryo.text.corpora import heldout_brown_files, read_brown, SOURCES
from embryo.config import atomic_write
from embryo.train.heldout import brown_examples, evaluate_heldout, heldout_examples, training_sample
from embryo.runs.run import read_run_config
from recipe_curves import checkpoint, checkpoint_args  # bench/ is the script's folder

BROWN_CORPORA = ("embryo-mini", "embryo-plus")  # the built-in corpora whose training text holds the other Brown files


def training_twins(cats: dict[str, str], held: tuple[str, ...]) -> list[str]:
    "For each held-out Brown file (`held`, sorted), the next training file of its genre (the one before it at a genre's end)."
    by_cat, twins = {}, []
    for f, c in sorted(cats.items()): by_cat.setdefault(c, []).append(f)
    for f in held:
        fs = by_cat[cats[f]]; i = fs.index(f)
        twins.append(next(g for g in fs[i + 1:] + fs[:i][::-1] if g not in held and g not in twins))
    return twins


def scored(model, tok, tc, device, ds, examples) -> tuple[dict, float]:
    "Accuracy on `examples` with its 95% interval, and its standard error."
    h = evaluate_heldout(model, tok, tc, torch.device(device), ds, examples=examples, per_token=True)["token_hits"]
    se = h.std(ddof=1) / np.sqrt(len(h))
    return dict(sequences=len(examples), masked_tokens=len(h), accuracy=round(float(h.mean()), 4),
                low=round(float(h.mean() - 1.96 * se), 4), high=round(float(h.mean() + 1.96 * se), 4)), se


def gap(run: Path, step: int | None = None, device: str = "cpu") -> dict:
    tc, tok, ds, step, model = checkpoint(run, step, device)
    files, cats = read_brown(download(SOURCES["brown"], verbose=False))
    names = heldout_brown_files(cats); twins = training_twins(cats, names)
    twin_docs = [[[w for w, _ in s] for s in files[n]] for n in twins]
    held, se_held = scored(model, tok, tc, device, ds, heldout_examples(tok, tc.max_seq_length, seed=tc.seed))
    seen, se_seen = scored(model, tok, tc, device, ds, brown_examples(twin_docs, tok, tc.max_seq_length, tc.seed))
    d, half = seen["accuracy"] - held["accuracy"], 1.96 * np.hypot(se_held, se_seen)  # two samples: not paired
    sample = evaluate_heldout(model, tok, tc, torch.device(device), ds, examples=training_sample(ds, tc))
    return dict(run=str(run), step=step, heldout_brown=dict(held, files=list(names)), training_brown=dict(seen, files=twins),
                difference=dict(accuracy=round(d, 4), low=round(float(d - half), 4), high=round(float(d + half), 4)),
                training_sample=dict(sequences=tc.eval_sequences, accuracy=round(sample["mlm_accuracy"], 4)))


def main():
    p, a = checkpoint_args(__doc__)
    corpus = read_run_config(a.run)[2].corpus
    if corpus not in BROWN_CORPORA:
        p.exit(2, f"{p.prog}: {a.run} trained on {corpus}, which holds no Brown training files to compare with; "
                  f"pass a run on {' or '.join(BROWN_CORPORA)}\n")
    r = gap(a.run, a.step, a.device)
    for k in ("heldout_brown", "training_brown"):
        x = r[k]
        print(f"{k}: {x['accuracy']:.4f} (95% {x['low']:.4f} to {x['high']:.4f}) on {x['masked_tokens']} masked tokens of "
              f"{x['sequences']} sequences")
    d = r["difference"]
    print(f"training Brown - held-out Brown: {d['accuracy']:+.4f} (95% {d['low']:+.4f} to {d['high']:+.4f}); the training sample ({r['training_sample']['sequences']}"
          f" sequences of the mixed corpus): {r['training_sample']['accuracy']:.4f}")
    if a.out:
        atomic_write(a.out, json.dumps(r, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
