"""Training-step throughput of embryo's ALBERT against transformers' AlbertForPreTraining.

Same config, same weights, same batch, same optimizer, measured in one process and printed as a ratio
(ours / transformers; > 1 means ours is faster), for ours as it trains (MLM logits at masked positions
only) and like for like (logits at every position). CPU: tiny and base at batch 8 x 128, fp32.
On a GPU also bf16 autocast at a larger batch.

    python bench/model_speed.py [--presets tiny base] [--steps 5] [--batch 8] [--seq 128]
"""
import argparse
import tempfile
import time

import torch
import transformers

from embryo.config import get_config
from embryo.model.model import AlbertForPreTraining
from embryo.experiments.throughput import make_batch, tokens_per_s  # shared with ALBERT Table 3's throughput (notebook 08f)


def step_fn(model, opt, batch, logits, dtype):
    def step():
        with torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(**batch).loss if logits is None else model(**batch, logits=logits).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def compare(preset, batch, seq, steps, device, dtype):
    cfg = get_config(preset)
    ours = AlbertForPreTraining(cfg).to(device).train()
    with tempfile.TemporaryDirectory() as d:  # the very same weights in transformers
        ours.save_pretrained(d)
        theirs = transformers.AlbertForPreTraining.from_pretrained(d, attn_implementation="sdpa").to(device).train()
    b = make_batch(cfg.vocab_size, batch, seq, device)
    res = {}
    # embryo as it trains (vocabulary scored at masked positions only) and, for a like-for-like model, at every position
    for name, model, logits in (("transformers", theirs, None), ("embryo", ours, "masked"), ("embryo-all", ours, "all")):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        res[name] = tokens_per_s(step_fn(model, opt, b, logits, dtype), batch * seq, steps, device)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["tiny", "base"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    a = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    runs = [(a.batch, torch.float32)] + ([(64, torch.bfloat16)] if device.type == "cuda" else [])
    print(f"device {device}, torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}")
    print("ratio = embryo / transformers tokens per second (training step: forward, backward, AdamW step)")
    print("embryo scores the vocabulary at masked positions only, as it trains; 'all' scores every position, like transformers")
    print(f"{'preset':<8}{'batch':>7}{'dtype':>10}{'transformers tok/s':>20}{'embryo tok/s':>14}{'ratio':>8}{'all tok/s':>11}{'ratio':>8}")
    for preset in a.presets:
        for batch, dtype in runs:
            r = compare(preset, batch, a.seq, a.steps, device, dtype)
            print(f"{preset:<8}{f'{batch}x{a.seq}':>7}{str(dtype).split('.')[-1]:>10}{r['transformers']:>20,.0f}"
                  f"{r['embryo']:>14,.0f}{r['embryo'] / r['transformers']:>8.2f}"
                  f"{r['embryo-all']:>11,.0f}{r['embryo-all'] / r['transformers']:>8.2f}")


if __name__ == "__main__":
    main()
