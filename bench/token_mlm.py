"""Comparable masked-LM numbers: a checkpoint's held-out loss, perplexity and accuracy under BERT's token-level masking
(`embryo.train.heldout.token_mlm`: 15% of the tokens, 80% [MASK], 10% random, 10% kept, as Hugging Face's run_mlm scores
it), on all held-out Brown sequences, beside the whole-word n-gram-masked accuracy the run logs.

    python bench/token_mlm.py RUN_DIR [--step N] [--out figures/mature/token_mlm.json] [--seeds 3] [--device cuda]

An ELECTRA run is scored by its generator (the half with a masked-LM head). Each seed draws other masks; the JSON holds
each seed's figures and their mean, with the step, the sequences and the protocol (temp file, then rename).
"""
import json

import numpy as np

from embryo.text.tokenizer import load_tokenizer
from embryo.config import atomic_write
from embryo.train.heldout import heldout_examples, token_mlm
from embryo.runs.run import list_steps, load_checkpoint, read_run_config
from recipe_curves import checkpoint_args  # bench/ is the script's folder


def main(argv=None):
    _, a = checkpoint_args(__doc__, lambda p: p.add_argument("--seeds", type=int, default=3,
                                                             help="mask draws (default 3)"), argv)
    step = a.step if a.step is not None else list_steps(a.run)[-1]
    _, mc, tc = read_run_config(a.run)
    tok = load_tokenizer(a.run)
    examples = heldout_examples(tok, tc.max_seq_length, seed=tc.seed)
    model = load_checkpoint(a.run, step, a.device, mlm=True)
    runs = [token_mlm(model, tok, examples, seed=s, device=a.device) for s in range(a.seeds)]
    keys = ("token_mlm_loss", "token_mlm_perplexity", "token_mlm_accuracy")
    out = dict(run=str(a.run), step=step, model_type=mc.model_type, sequences=len(examples),
               protocol=runs[0]["protocol"], seeds=runs,
               **{k: float(np.mean([r[k] for r in runs])) for k in keys},
               **{f"{k}_sd": float(np.std([r[k] for r in runs], ddof=1)) if len(runs) > 1 else 0.0 for k in keys})
    print(json.dumps({k: v for k, v in out.items() if k != "seeds"}, indent=1))
    if a.out: atomic_write(a.out, json.dumps(out, indent=1) + "\n"); print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
