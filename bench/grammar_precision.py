"""Grammar by minimal pairs in bf16 against fp32: the same checkpoints and pairs, the forward in either precision.

For each step: the overall pass rate in each precision, the largest and the mean difference of the 20 per-paradigm pass
rates (both PLL variants), the pairs whose verdict flips, and the seconds each took, measured in this run. The grammar
sweep runs the forward in bf16 where the CPU multiplies it natively (`grammar.evaluate_step(precision="auto")`); this
checks that it may: a paradigm's 300 pairs have a binomial standard error of 2 to 3 points.

    python bench/grammar_precision.py [--run figures/mature/run --steps 1100 1600 8000]

The defaults are the checkpoints the mature run's committed bundle ships (16-bit weights, read back as fp32): the end of
its plateau, inside its transition, its last step.
"""
import argparse
import time

import numpy as np
import torch

from embryo.analyses import grammar as G
from embryo.model.model import native_bf16
from embryo.runs.run import masked_lm_at


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="figures/mature/run")
    p.add_argument("--steps", type=int, nargs="+", default=[1100, 1600, 8000])
    a = p.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, native bf16 matmul: {native_bf16(torch.device('cpu'))}")
    pr = G.read_pairs(G.paradigm_pairs())
    good, bad, paradigms = list(pr.good), list(pr.bad), sorted(set(pr.paradigm))
    print(f"{len(pr)} pairs, {len(paradigms)} paradigms")
    print(f"{'step':>6}{'fp32 pass':>11}{'bf16 pass':>11}{'max diff':>10}{'mean diff':>11}{'flips':>7}"
          f"{'fp32 s':>8}{'bf16 s':>8}{'ratio':>7}")
    for step in a.steps:
        _, _, tok, model = masked_lm_at(a.run, step, "cpu")
        got = {}
        for prec in ("fp32", "auto"):
            t = time.perf_counter()
            s = G.pll(model, tok, good + bad, precision=prec)
            got[prec] = (s[:len(pr)] - s[len(pr):], time.perf_counter() - t)
        rates = {k: np.array([G.pass_rate(d[pr.paradigm.values == u, v]) for u in paradigms for v in (0, 1)])
                 for k, (d, _) in got.items()}
        diff = np.abs(rates["fp32"] - rates["auto"])
        sign = {k: np.sign(np.round(d, 4)) for k, (d, _) in got.items()}
        (f, ft), (b, bt) = got["fp32"], got["auto"]
        print(f"{step:>6}{G.pass_rate(f[:, 0]):>11.4f}{G.pass_rate(b[:, 0]):>11.4f}{diff.max():>10.4f}"
              f"{diff.mean():>11.4f}{int((sign['fp32'] != sign['auto']).sum()):>7}{ft:>8.1f}{bt:>8.1f}{ft / bt:>7.2f}",
              flush=True)


if __name__ == "__main__":
    main()
