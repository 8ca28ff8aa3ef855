"""Throughput of the whole pretraining step: embryo's loop driving our ALBERT vs the same loop driving transformers'.

One optimizer step as `embryo.pretrain.train` takes it: pick and mask the examples of the step (`Batches.collate`,
n-gram masking included), forward and backward (`train_step`), gradient clipping, a LAMB step. The only difference
between the two rows is the model: embryo's `AlbertForPreTraining` (vocabulary scored at masked positions only) or
`transformers.AlbertForPreTraining` with the very same weights (scores every position). Printed as tokens/s and as a
ratio (embryo / transformers, > 1: ours is faster), both measured in this run on the same batches.

CPU: `tiny` and `base` at sequence length 128, fp32. On a GPU also `base` in bf16 autocast, with MFU:
model FLOPs per token (`AlbertForPreTraining.flops_per_token`) x tokens/s / the GPU's peak dense bf16 FLOP/s.

    python bench/pretrain_speed.py [--presets tiny base] [--steps 5] [--seq 128] [--peak-tflops 989]
"""
import argparse
import tempfile
import time
from types import SimpleNamespace

import torch
import transformers

from embryo import data as D
from embryo.config import get_config, get_train_config
from embryo.model import AlbertForPreTraining
from embryo.pretrain import Batches, Lamb, corpus_slice, param_groups, train_step

BATCH = {"tiny": 16, "base": 8}  # sequences per step on CPU (tiny: its preset's batch)
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, no sparsity


class HFAdapter(torch.nn.Module):
    "transformers' model behind embryo's call: same arguments, logits gathered at the masked positions afterwards."
    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids, attention_mask, token_type_ids, labels=None, logits="masked"):
        out = self.hf(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return SimpleNamespace(prediction_logits=out.prediction_logits[labels != -100], sop_logits=out.sop_logits)


def bench_data(seq):
    "A tokenizer trained on a slice of embryo-mini and the examples built from it (cached, as pretraining caches them)."
    text = corpus_slice()
    tok_dir = D.data_dir() / "bench" / "tokenizer-8000"
    if not (tok_dir / "spiece.model").exists(): D.train_tokenizer(text, tok_dir, 8000)
    tok = D.load_tokenizer(tok_dir)
    return tok, D.build_dataset(text, tok, D.data_dir() / "datasets", max_seq_length=seq, seed=0)


def loop(model, data, tc, device, steps):
    "tokens/s of `steps` optimizer steps (after one warm-up step), data preparation included."
    opt = Lamb(param_groups(model, tc.weight_decay), lr=1e-4)
    model.train()

    def step(s):
        batches = [data.collate(data.indices(s))]
        n_masked = sum(int((b["labels"] != -100).sum()) for b in batches)
        train_step(model, batches, n_masked, tc.batch_size, 1, device)
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.max_grad_norm)
        opt.step(); opt.zero_grad(set_to_none=True)
        return sum(int(b["attention_mask"].sum()) for b in batches)

    step(1)
    if device.type == "cuda": torch.cuda.synchronize()
    t, tokens = time.perf_counter(), 0
    for s in range(2, steps + 2): tokens += step(s)
    if device.type == "cuda": torch.cuda.synchronize()
    return tokens / (time.perf_counter() - t)


def compare(preset, tok, ds, seq, batch, steps, device):
    mc = get_config(preset, vocab_size=max(get_config(preset).vocab_size, tok.vocab_size))
    tc = get_train_config(preset, batch_size=batch, max_seq_length=seq)
    data = Batches(ds, tok, tc)
    torch.manual_seed(0)
    ours = AlbertForPreTraining(mc).to(device)
    with tempfile.TemporaryDirectory() as d:  # the very same weights in transformers
        ours.save_pretrained(d)
        theirs = transformers.AlbertForPreTraining.from_pretrained(d, attn_implementation="sdpa").to(device)
    fpt = ours.flops_per_token(seq)
    return fpt, {"transformers": loop(HFAdapter(theirs), data, tc, device, steps), "embryo": loop(ours, data, tc, device, steps)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["tiny", "base"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--gpu-batch", type=int, default=128, help="sequences per step for the bf16 GPU row")
    p.add_argument("--peak-tflops", type=float, default=None, help="peak dense bf16 TFLOP/s of the GPU (default: by name)")
    a = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok, ds = bench_data(a.seq)
    print(f"device {device}, torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}")
    print(f"whole training step (masking, forward, backward, clip, LAMB) on embryo-mini examples of <= {a.seq} tokens")
    print("ratio = embryo / transformers tokens per second, both driven by embryo's loop, measured in this run")
    print(f"{'preset':<8}{'batch':>7}{'dtype':>10}{'transformers tok/s':>20}{'embryo tok/s':>14}{'ratio':>8}")
    for preset in a.presets:
        _, r = compare(preset, tok, ds, a.seq, BATCH.get(preset, 8), a.steps, device)
        print(f"{preset:<8}{BATCH.get(preset, 8):>7}{'float32':>10}{r['transformers']:>20,.0f}{r['embryo']:>14,.0f}"
              f"{r['embryo'] / r['transformers']:>8.2f}")
    if device.type == "cuda" and "base" in a.presets:
        name = torch.cuda.get_device_name()
        peak = a.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
        # train_step runs the forward under bf16 autocast on a GPU
        fpt, r = compare("base", tok, ds, a.seq, a.gpu_batch, a.steps, device)
        print(f"{'base':<8}{a.gpu_batch:>7}{'bf16':>10}{r['transformers']:>20,.0f}{r['embryo']:>14,.0f}"
              f"{r['embryo'] / r['transformers']:>8.2f}")
        if peak:
            print(f"MFU base bf16 on {name}: embryo {fpt * r['embryo'] / (peak * 1e12):.1%}, "
                  f"transformers {fpt * r['transformers'] / (peak * 1e12):.1%} "
                  f"({fpt / 1e9:.2f} GFLOP/token, peak {peak:.0f} TFLOP/s)")
        else:
            print(f"MFU: unknown peak for {name}; pass --peak-tflops")


if __name__ == "__main__":
    main()
