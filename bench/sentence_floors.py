"""The sentence tasks' floor without a model: on the held-out pairs a run is scored on (`evaluate_heldout`: SOP and NSP,
as many as its `eval_sequences`, cut with the run's seed), the accuracy of the better length rule ("label 1 iff the
first segment is longer", or its reverse; `embryo.train.heldout.length_rule`), for each seed asked.

    python bench/sentence_floors.py RUN_DIR [--seeds 0 1] [--out bench/results/sentence_floors.json]

RUN_DIR gives the tokenizer and the settings (sequence length, eval_sequences); the pairs depend on the seed, so each
seed is scored on its own pairs, as each ablation row of that seed was. The JSON is written whole (temp file, rename).
"""
import argparse
import json
from pathlib import Path

from embryo.config import atomic_write
from embryo.text.tokenizer import load_tokenizer
from embryo.train.heldout import length_floors
from embryo.runs.run import read_run_config


def floors(run, seeds) -> dict:
    "Each seed's length rule on the run's held-out SOP and NSP pairs."
    _, _, tc = read_run_config(run)
    tok = load_tokenizer(run)
    return length_floors(tok, tc.max_seq_length, tc.eval_sequences, seeds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    out = dict(run=str(a.run), rule="the better of: label 1 iff the first segment is longer, or its reverse",
               seeds=floors(a.run, a.seeds))
    print(json.dumps(out, indent=1))
    if a.out: atomic_write(a.out, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
