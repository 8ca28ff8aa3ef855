"""The LLC estimate in bf16 against fp32: the same checkpoints, sampler, seeds and batches, the forward in either precision.

For each step: the estimate of each (mean over chains +- its standard error), the difference in standard errors (of the
two estimates together), and the seconds each took, measured in this run, alternating. The LLC's sweep runs the forward
in bf16 where the CPU multiplies it natively (`llc.evaluate_step(precision="auto")`); this checks that it may.

    python bench/llc_precision.py [--run figures/mature/run --steps 1100 1600 8000]

The defaults are the checkpoints the mature run's committed bundle ships (16-bit weights, read back as fp32): the end of
its plateau, inside its transition, its last step.
"""
import argparse
import time

import numpy as np
import torch

from embryo.analyses import llc as L
from embryo.model.model import native_bf16


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="figures/mature/run")
    p.add_argument("--steps", type=int, nargs="+", default=[1100, 1600, 8000])
    a = p.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, native bf16 matmul: {native_bf16(torch.device('cpu'))}")
    print(f"{'step':>6}{'fp32 LLC':>16}{'bf16 LLC':>16}{'diff / se':>11}{'fp32 s':>9}{'bf16 s':>9}{'ratio':>7}")
    for step in a.steps:
        got = {}
        for prec in ("fp32", "auto"):
            t = time.perf_counter()
            df = L.evaluate_step(a.run, step, write=False, calibrate=False, precision=prec).set_index("metric").value
            got[prec] = (df["llc"], df["llc_sd"] / np.sqrt(L.CHAINS), time.perf_counter() - t)
        (f, fs, ft), (b, bs, bt) = got["fp32"], got["auto"]
        print(f"{step:>6}{f:>10.1f} +-{fs:>4.1f}{b:>10.1f} +-{bs:>4.1f}{(b - f) / np.hypot(fs, bs):>11.2f}"
              f"{ft:>9.0f}{bt:>9.0f}{ft / bt:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
