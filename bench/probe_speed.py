"""Edge probing of one checkpoint, all tasks x all layers: the shared design of `embryo.analyses.probing` against the naive one.

- shared (what `evaluate_step` does): one forward pass over the union of every task's texts, each span's vectors
  computed once for every layer (`task_features` over all tasks), then per task one batched model that trains the
  probes of all layers, real and control labels together (`probe_task` with every layer);
- per task (the baseline): one forward pass per task over that task's texts (`task_features` with one task), then one
  probe training per (task, layer) (`probe_task` with one layer; each still trains its control probe beside it).

Both start from the same tasks (built once: the Brown text and spaCy's cached annotation are not timed) and neither
uses the on-disk feature cache. Printed: seconds and forward tokens/s of both designs, their test F1 side by side (a
probe trains the same whether batched with other layers or alone, so F1 agrees up to float rounding), and the ratio
baseline / shared (> 1: the shared design is faster; the goal is >= 5).

The ceiling: both designs run the same probes, so the saving is in the forward passes, and the forward ratio is the
ratio of tokens read, at most the number of tasks (reached only when every task reads the same texts). The script
prints that ceiling beside the measured ratio.

    python bench/probe_speed.py [--run runs/tiny] [--step 1200] [--threads 1] [--max-sentences 1500]
"""
import argparse
import time

import numpy as np
import torch

from embryo.text.tokenizer import load_tokenizer
from embryo.analyses import probing as PR
from embryo.analyses import probe_tasks as PT
from embryo.analyses import span_features as SF
from embryo.runs.run import list_steps, load_checkpoint


def n_tokens(tok, tasks) -> int:
    "Tokens a forward pass over the distinct texts of `tasks` reads ([CLS] and [SEP] included)."
    texts = {SF._text_key(t.texts[i]): t.texts[i] for t in tasks.values() for i in set(t.text_ids.tolist())}
    return sum(len(ids) + 2 for ids in tok.encode_batch([" ".join(w) for w in texts.values()]))


def shared(model, tok, tasks, layers):
    t0 = time.perf_counter()
    feats = SF.task_features(model, tok, tasks)
    t1 = time.perf_counter()
    rows = [r for n, t in tasks.items() for r in PR.probe_task(t, *feats[n], layers)]
    return t1 - t0, time.perf_counter() - t1, rows, n_tokens(tok, tasks)


def per_task(model, tok, tasks, layers):
    fwd = fit = 0.0; rows = []; toks = 0
    for n, t in tasks.items():
        t0 = time.perf_counter()
        x, kept = SF.task_features(model, tok, {n: t})[n]
        t1 = time.perf_counter()
        for l in layers: rows += PR.probe_task(t, x, kept, [l])
        fwd += t1 - t0; fit += time.perf_counter() - t1; toks += n_tokens(tok, {n: t})
    return fwd, fit, rows, toks


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", default="runs/tiny")
    p.add_argument("--step", type=int, default=None, help="default: the run's last step")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the forward passes")
    p.add_argument("--max-sentences", type=int, default=1500)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    step = a.step if a.step is not None else list_steps(a.run)[-1]
    model, tok = load_checkpoint(a.run, step).eval(), load_tokenizer(a.run)
    layers = list(range(model.config.num_hidden_layers + 1))
    t0 = time.perf_counter()
    tasks = PT.builtin_tasks(max_sentences=a.max_sentences)
    print(f"{a.run} step {step}: {len(tasks)} tasks x {len(layers)} layers, {sum(map(len, tasks.values())):,} targets "
          f"(tasks built in {time.perf_counter() - t0:.1f} s, not timed below); torch threads {a.threads}")
    res = {"per task": per_task(model, tok, tasks, layers), "shared": shared(model, tok, tasks, layers)}
    print(f"{'design':<10} {'forward s':>10} {'tokens':>9} {'tokens/s':>9} {'probes s':>9} {'total s':>8}")
    for k, (fwd, fit, _, toks) in res.items():
        print(f"{k:<10} {fwd:>10.1f} {toks:>9,} {toks / fwd:>9,.0f} {fit:>9.1f} {fwd + fit:>8.1f}")
    f1 = {k: {(r["task"], r["layer"]): r["value"] for r in v[2] if r["metric"] == "f1"} for k, v in res.items()}
    diff = [abs(f1["shared"][k] - f1["per task"][k]) for k in f1["shared"]]
    print(f"test F1, shared vs per task: mean |difference| {np.mean(diff):.3f}, max {np.max(diff):.3f} over {len(diff)} probes")
    (bf, bp, _, bt), (sf, sp, _, st) = res["per task"], res["shared"]
    print(f"ratio per-task / shared: forward {bf / sf:.1f}x, probes {bp / sp:.1f}x, total {(bf + bp) / (sf + sp):.1f}x (goal >= 5x)")
    print(f"ceiling with free probes: tokens read per task / shared = {bt / st:.1f}x ({len(tasks)} tasks)")


if __name__ == "__main__":
    main()
