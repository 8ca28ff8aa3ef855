"""An average of weights as a recipe (issue "findings": one of the candidates from small-data masked-LM work): the mean
of a run's saved checkpoints from one step to its last, scored on the same held-out masks as the last checkpoint
alone, and their paired difference with a 95% interval.

Averaging checkpoints late in a run (Izmailov et al. 2018, stochastic weight averaging; Kaddour 2022, latest weight
averaging) can stand in for, or add to, the decay of the rate: the weights of the steps averaged are spread around a
minimum and their mean sits nearer to it. Every floating-point tensor of the model is the plain mean of the same tensor
over the checkpoints; nothing is trained again.

    python bench/average_weights.py NAME=RUN_DIR --from STEP [--to STEP] [--out figures/mature/recipe_pairs.csv] [--device cuda]

`--to` (default: the run's last checkpoint) is both the last step averaged and the baseline it is compared with.
`--out` adds the comparison as a row of the recipe pairs' CSV (as `bench/recipe_pair.py` does).
"""
import argparse
from pathlib import Path

import torch

from embryo.runs.run import list_steps, load_checkpoint
from recipe_curves import checkpoint, named_run  # bench/ is the script's folder
from recipe_pair import compare, model_hits


def average(run: Path, steps: list[int], device: str = "cpu") -> torch.nn.Module:
    "The model of `run`'s first checkpoint in `steps` holding the mean of every floating-point tensor over all of them."
    model = load_checkpoint(run, steps[0], device, mlm=True)
    total = {k: v.double().clone() for k, v in model.state_dict().items() if v.is_floating_point()}
    for s in steps[1:]:
        for k, v in load_checkpoint(run, s, device, mlm=True).state_dict().items():
            if k in total: total[k] += v.double()
    model.load_state_dict({k: (v / len(steps)).float() for k, v in total.items()}, strict=False)
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", metavar="NAME=RUN_DIR")
    p.add_argument("--from", dest="start", type=int, required=True, help="the first checkpoint averaged")
    p.add_argument("--to", type=int, help="the last checkpoint averaged, and the baseline (default: the run's last)")
    p.add_argument("--out", type=Path, help="add the comparison to this CSV")
    p.add_argument("--device", default="cpu", help="where the checkpoints are evaluated (e.g. cuda)")
    a = p.parse_args()
    name, run = named_run(p, a.run)
    saved = list_steps(run)
    end = saved[-1] if a.to is None else a.to
    steps = [s for s in saved if a.start <= s <= end]
    if end not in saved or len(steps) < 2:
        p.exit(2, f"{p.prog}: {run} has {len(steps)} checkpoint(s) from step {a.start} to {end}; pass --from and --to "
                  f"around at least two of its steps: {saved}\n")
    tc, tok, ds, _, last = checkpoint(run, end, a.device)
    ha, ia = model_hits(last, tc, tok, ds, a.device)
    hb, ib = model_hits(average(run, steps, a.device), tc, tok, ds, a.device)
    compare(f"{name} at step {end}", ha, dict(ia, step=end),
            f"{name}, the average of its {len(steps)} checkpoints from step {steps[0]} to {end}", hb, dict(ib, step=end),
            a.out)


if __name__ == "__main__":
    main()
