"""Throughput of the whole pretraining step: the fast path against fp32 eager, and embryo's model against transformers'.

One optimizer step as `embryo.train.pretrain.train` takes it: pick and mask the examples of the step (`Batches.collate`,
n-gram masking included), forward and backward (`train_step`), gradient clipping, a LAMB step.

1. fp32 eager vs the fast path, on the `tiny` preset's own batch (its sequence length, masking and batch size):
   - fp32 eager: `precision="fp32"`, each batch masked on the critical path;
   - fast path: `precision="auto"` (bf16 autocast where the device multiplies bf16 natively, detected at run time;
     the math attention kernel on CPU) and the next batch masked in a background thread (`prefetched`), as `train` does;
   - fast path compiled: the same with `compile=true` (`torch.compile` of the model in fixed shapes, `compile_step`,
     with torch's deterministic algorithms on, as `train` runs it); its compile is timed apart and printed (inductor
     keeps what it built on disk, so a second run compiles faster).
   Printed as tokens/s (the median of 3 rounds, each timing the three in turn) and their ratios to fp32 eager, all
   measured in this run, then for each fast path the share of
   its step's time spent outside matrix multiplications (torch.profiler, self time of every op that is not a matmul;
   inside a compiled graph the fused kernels count as outside).
2. embryo vs transformers (`AlbertForPreTraining` with the very same weights, scoring every position), both driven
   by the same loop in fp32: tokens/s and their ratio.
On a GPU also `base` in bf16, with MFU: the model's own FLOPs per token (`AlbertForPreTraining.flops_per_token`, the
MLM head counted at the masked positions it decodes) x tokens/s / the GPU's peak dense bf16 FLOP/s; at each sequence
length in `--gpu-seq` (128, BERT's first phase; 512, ALBERT's own, section 4.1, and `base`'s `max_seq_length`), for each
batch size in `--gpu-batch` (sequences of 128 tokens; as many tokens per step at the other lengths), and with
`--compile` also under `torch.compile`.

    python bench/pretrain_speed.py [--steps 8] [--presets tiny base] [--gpu-batch 128 256] [--gpu-seq 128 512]
                                   [--compile] [--compile-modes default autotune] [--peak-tflops 989]
"""
import argparse
import contextlib
import tempfile
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch._dynamo
import torch._inductor.config
import transformers

from embryo.text.packages import data_dir
from embryo.text.tokenizer import load_tokenizer, train_tokenizer
from embryo.text.data import build_dataset
from embryo.config import get_config, get_train_config
from embryo.model.model import AlbertForPreTraining, native_bf16, resolve_precision
from embryo.train.pretrain import compile_step, deterministic_kernels, prefetched, resolve_data_workers, train_step
from embryo.train.batches import Batches
from embryo.train.optim import Lamb, param_groups
from embryo.train.fixtures import corpus_slice

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, no sparsity
MATMUL_KERNELS = ("gemm", "nvjet", "cutlass", "xmma")  # cuBLAS / cuBLASLt kernel names
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation")


class HFAdapter(torch.nn.Module):
    "transformers' model behind embryo's call: same arguments, logits gathered at the masked positions afterwards."
    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids, attention_mask, token_type_ids, labels=None, logits="masked"):
        out = self.hf(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits = out.prediction_logits[labels != -100]
        mlm_loss = torch.nn.functional.cross_entropy(logits.float(), labels[labels != -100])
        return SimpleNamespace(prediction_logits=logits, sop_logits=out.sop_logits, mlm_loss=mlm_loss,
                               mlm_labels=labels[labels != -100])


def bench_data(tc):
    "A tokenizer trained on a slice of embryo-mini and the examples built from it (cached, as pretraining caches them)."
    text = corpus_slice()
    tok_dir = data_dir() / "bench" / f"tokenizer-{tc.tokenizer_vocab_size}"
    if not (tok_dir / "spiece.model").exists(): train_tokenizer(text, tok_dir, tc.tokenizer_vocab_size)
    tok = load_tokenizer(tok_dir)
    return tok, build_dataset(text, tok, data_dir() / "datasets", max_seq_length=tc.max_seq_length, seed=0)


def loop(model, data, tc, device, steps, precision="fp32", prefetch=False, profile=False, stats=None, premade=False,
         compiled=False, deterministic=None):
    """tokens/s of `steps` optimizer steps (after two warm-up steps from the same stream of batches, so that starting
    the data workers is not timed), data preparation included (as `train` prepares it
    with `prefetch`: a thread on a CPU, worker processes on a GPU), or left out with `premade` (four batches made before
    the clock starts, used in turn); with `profile`, the profiler too. `stats` (a dict), if given, receives the share of
    tokens that were masked (predicted). `compiled`: the step as `compile=true` trains it (`compile_step`; True compiles
    `model` here, or pass what `compile_step(model)` returned). MLM hits are not counted, as `train` skips them on the
    steps it does not log."""
    if compiled is True: compiled = compile_step(model, device)
    with deterministic_kernels(compiled is not False if deterministic is None else deterministic):
        return _loop(model, data, tc, device, steps, precision, prefetch, profile, stats, premade,
                     None if compiled is False else compiled)


def _loop(model, data, tc, device, steps, precision, prefetch, profile, stats, premade, compiled):
    opt = Lamb(param_groups(model, tc.weight_decay), lr=1e-4)
    model.train()
    make = lambda s: [data.collate(data.indices(s))]

    def step(batches):
        n_masked = sum(int((b["labels"] != -100).sum()) for b in batches)
        train_step(model, batches, n_masked, tc.batch_size, 1, device, precision=precision, compiled=compiled,
                   predictions=data.cap if compiled is not None else None, count_hits=False)
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.max_grad_norm)
        opt.step(); opt.zero_grad(set_to_none=True)
        return sum(int(b["attention_mask"].sum()) for b in batches)

    todo = range(1, steps + 3)
    if premade:
        made = [make(s) for s in range(3, 7)]
        stream = ((s, made[s % 4]) for s in todo)
    elif prefetch: stream = prefetched(make, todo, resolve_data_workers("auto", device), device.type == "cuda")
    else: stream = ((s, make(s)) for s in todo)
    stream = iter(stream)
    for _ in (1, 2): step(next(stream)[1])
    if device.type == "cuda": torch.cuda.synchronize()
    prof = torch.profiler.profile() if profile else None
    t, tokens, masked = time.perf_counter(), 0, 0
    if prof: prof.__enter__()
    for _, batches in stream:
        tokens += step(batches); masked += sum(int((b["labels"] != -100).sum()) for b in batches)
    if device.type == "cuda": torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    if prof: prof.__exit__(None, None, None)
    if stats is not None: stats["predicted"] = masked / tokens
    return tokens / seconds, prof


def busy_times(prof) -> dict:
    """Time (µs) per name of what did the work in a profile: the GPU's kernels where it recorded any (an op and the
    kernels it launched are not both counted), else each op's own CPU time."""
    out = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name] = out.get(e.name, 0) + e.time_range.elapsed_us()
    return out or {r.key: r.self_cpu_time_total for r in prof.key_averages()}


def outside_matmul_share(times: dict) -> float:
    "Share of `busy_times` spent outside matrix multiplications (matmul ops on a CPU, cuBLAS kernels on a GPU)."
    mm = sum(v for k, v in times.items() if k in MATMUL_OPS or any(w in k.lower() for w in MATMUL_KERNELS))
    return 1 - mm / sum(times.values())


def bench_config(preset, tok):
    "The preset's model, its vocabulary at least the bench tokenizer's."
    return get_config(preset, vocab_size=max(get_config(preset).vocab_size, tok.vocab_size))


def fresh(mc, device):
    torch.manual_seed(0)
    return AlbertForPreTraining(mc).to(device)


def fast_vs_fp32(tok, ds, tc, steps, device, rounds=3):
    """tokens/s of fp32 eager, the fast path and the compiled fast path: the median of `rounds` rounds that time each in
    turn (a shared host's load then weighs on all three alike), and each fast path's share of time outside matmuls."""
    mc = get_config("tiny", vocab_size=tok.vocab_size)
    data = Batches(ds, tok, tc)
    models = [fresh(mc, device) for _ in range(3)]
    t = time.perf_counter()
    compiled = compile_step(models[2], device)
    loop(models[2], data, tc, device, 1, "auto", compiled=compiled)  # the compile itself, timed apart
    print(f"   (torch.compile of the step: {time.perf_counter() - t:.0f} s, once per run)")
    paths = [dict(precision="fp32"), dict(precision="auto", prefetch=True), dict(precision="auto", prefetch=True, compiled=compiled)]
    speeds = [[loop(m, data, tc, device, steps, **kw)[0] for m, kw in zip(models, paths)] for _ in range(rounds)]
    base, fast, compiled_speed = (float(np.median(col)) for col in zip(*speeds))
    outside = [outside_matmul_share(busy_times(loop(m, data, tc, device, max(2, steps // 2), profile=True, **kw)[1]))
               for m, kw in zip(models[1:], paths[1:])]
    if device.type == "cuda":  # which half of the fast path pays on a GPU: the precision, or the data workers
        print(f"   fp32 with data workers {loop(fresh(mc, device), data, tc, device, steps, 'fp32', prefetch=True)[0]:,.0f} tok/s; "
              f"bf16 with data on the critical path {loop(fresh(mc, device), data, tc, device, steps, 'auto')[0]:,.0f} tok/s")
    return base, fast, compiled_speed, outside


def hf_vs_embryo(preset, tok, ds, tc, steps, device, precision="fp32", compiled=False, modes=("default",)):
    """tokens/s of transformers' model and embryo's (and, with `compiled`, embryo's under `torch.compile` in each of
    `modes`, with the data workers and on premade batches) on the same weights and batches; with the model FLOPs per
    token of each (transformers decodes every position, embryo the masked)."""
    mc, data = bench_config(preset, tok), Batches(ds, tok, tc)
    ours = fresh(mc, device)
    with tempfile.TemporaryDirectory() as d:  # the very same weights in transformers
        ours.save_pretrained(d)
        theirs = transformers.AlbertForPreTraining.from_pretrained(d, attn_implementation="sdpa").to(device)
    stats, seq = {}, tc.max_seq_length
    speed = {"transformers": loop(HFAdapter(theirs), data, tc, device, steps, precision)[0],
             "embryo": loop(ours, data, tc, device, steps, precision, prefetch=True, stats=stats)[0]}
    if device.type == "cuda": speed["embryo, no data"] = loop(ours, data, tc, device, steps, precision, premade=True)[0]
    flops = {"transformers": ours.flops_per_token(seq), "embryo": ours.flops_per_token(seq, predicted=stats["predicted"])}
    flops["embryo, no data"] = flops["embryo"]
    for mode in modes if compiled else ():
        name = "compiled" if mode == "default" else mode
        try:
            t, model = time.perf_counter(), fresh(mc, device)
            with variant_flags(mode):
                step, kw = compiled_variant(model, device, mode)
                speed[f"embryo {name}"] = loop(model, data, tc, device, steps, precision, prefetch=True, compiled=step,
                                               **kw)[0]
                print(f"   (torch.compile, mode {mode}: {time.perf_counter() - t:.0f} s for the compile and the timed "
                      "steps)")
                speed[f"{name}, no data"] = loop(model, data, tc, device, steps, precision, premade=True, compiled=step,
                                                 **kw)[0]
            flops[f"embryo {name}"] = flops[f"{name}, no data"] = flops["embryo"]
        except Exception as e:  # a compile failure is a finding to print, not a reason to lose the other rows
            print(f"   torch.compile (mode {mode}) failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return flops, speed


VARIANTS = {"nondeterministic": "the fixed-shape compile without torch's deterministic algorithms",
            "embeddings-in-graph": "the fixed-shape compile with the embedding lookups inside the graph, as on a CPU",
            "autotune": "the fixed-shape compile with inductor's autotuning (mode max-autotune-no-cudagraphs: matmul "
                        "templates timed against cuBLAS; coordinate-descent tuning of the fused kernels)",
            "aggressive": "the fixed-shape compile with inductor's aggressive fusion (nodes fused even without shared "
                          "reads)",
            "flash": "the fixed-shape compile with attention by the flash kernel (cuDNN's attention off)"}


@contextlib.contextmanager
def variant_flags(mode):
    """Inside the block, the process-wide switches `mode` needs (inductor settings, attention kernels); restored after.
    Dynamo's compiled code is dropped on the way in and out: it guards on the model's shapes, not on these switches, so
    a second variant would otherwise run the first one's code (measured: 'compiled' in 3 s, the same speed)."""
    settings = {"autotune": dict(coordinate_descent_tuning=True), "aggressive": dict(aggressive_fusion=True)}.get(mode, {})
    torch._dynamo.reset()
    with torch._inductor.config.patch(settings), contextlib.ExitStack() as stack:
        if mode == "flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            stack.enter_context(sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]))
        try: yield
        finally: torch._dynamo.reset()


def compiled_variant(model, device, mode):
    """`model` compiled as `mode` says, and the `loop` arguments it needs: 'default' (as `train` compiles), a
    `torch.compile` mode, or one of `VARIANTS` (compile and run it inside `variant_flags(mode)`)."""
    if mode in ("default", *VARIANTS):
        return (compile_step(model, device, eager_embeddings=False if mode == "embeddings-in-graph" else None,
                             mode="max-autotune-no-cudagraphs" if mode == "autotune" else None),
                dict(deterministic=mode != "nondeterministic"))
    return torch.compile(model, dynamic=False, mode=mode), {}


def gpu_profile(preset, tok, ds, tc, steps, device, precision="bf16", top=12, mode="default"):
    """Where the compiled step's time goes on a GPU, on premade batches: the share of the wall time the GPU is busy,
    the share of its busy time outside matmuls, and the kernels that take most of it."""
    data, model = Batches(ds, tok, tc), fresh(bench_config(preset, tok), device)
    with variant_flags(mode):
        step, kw = compiled_variant(model, device, mode)
        loop(model, data, tc, device, 2, precision, premade=True, compiled=step, **kw)  # compiled and warm
        t = time.perf_counter()
        _, prof = loop(model, data, tc, device, steps, precision, premade=True, compiled=step, profile=True, **kw)
        wall = (time.perf_counter() - t) * 1e6
    kernels = busy_times(prof)
    busy = sum(kernels.values())
    print(f"   {device.type} busy {busy / wall:.0%} of the profiled wall time ({steps} steps, the profiler's own cost "
          f"included); {outside_matmul_share(kernels):.0%} of that busy time outside matmuls; the kernels that take most "
          "of it:")
    for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])[:top]:
        print(f"   {v / busy:>6.1%}  {k[:110]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["tiny", "base"], help="presets for the embryo-vs-transformers table")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--gpu-batch", type=int, nargs="*", default=[128, 256, 512],
                   help="sequences of 128 tokens per step for the bf16 GPU rows, as many tokens at other lengths "
                        "(none: no GPU rows)")
    p.add_argument("--gpu-seq", type=int, nargs="+", default=[128, 512],
                   help="sequence lengths of the GPU rows (512: ALBERT's and base's own)")
    p.add_argument("--compile", action="store_true", help="also time embryo's model under torch.compile on the GPU")
    p.add_argument("--compile-modes", nargs="+", default=["default"],
                   help="compiled GPU rows: 'default' (the fixed-shape compile that training uses), a torch.compile mode "
                        "(e.g. reduce-overhead), or one of " + ", ".join(f"{k!r} ({v})" for k, v in VARIANTS.items()))
    p.add_argument("--parts", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3], help="which parts to run")
    p.add_argument("--profile", nargs="*", default=None, metavar="MODE",
                   help="on a GPU, profile the step compiled in each MODE (default: 'default') at the largest "
                        "--gpu-batch: busy share and top kernels")
    p.add_argument("--peak-tflops", type=float, default=None, help="peak dense bf16 TFLOP/s of the GPU (default: by name)")
    a = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tc = get_train_config("tiny")
    tok, ds = bench_data(tc) if {1, 2} & set(a.parts) else (None, None)
    print(f"device {device}, torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}")
    print(f"native bf16 matmul: {native_bf16(device)}, so precision 'auto' = {resolve_precision('auto', device)}")
    if 1 in a.parts: fp32_fast_compiled(tok, ds, tc, a.steps, device)
    if 2 in a.parts:
        print(f"\n2. embryo vs transformers (same weights, same loop, fp32, sequences of <= 128 tokens)")
        print(f"{'preset':<8}{'batch':>7}{'transformers tok/s':>20}{'embryo tok/s':>14}{'ratio':>8}")
        for preset in a.presets:
            ptc = get_train_config(preset, batch_size=16 if preset == "tiny" else 8, max_seq_length=128,
                                   tokenizer_vocab_size=tc.tokenizer_vocab_size)
            ptok, pds = bench_data(ptc)
            _, r = hf_vs_embryo(preset, ptok, pds, ptc, a.steps, device)
            print(f"{preset:<8}{ptc.batch_size:>7}{r['transformers']:>20,.0f}{r['embryo']:>14,.0f}{r['embryo'] / r['transformers']:>8.2f}")
    if 3 in a.parts: gpu_rows(a, tc, device)


def fp32_fast_compiled(tok, ds, tc, steps, device):
    print(f"\n1. whole training step of the tiny preset (batch {tc.batch_size} x {tc.max_seq_length} tokens, "
          f"{tc.mask_prob:.0%} masking): the median of 3 rounds of {steps} steps each, the three paths in turn")
    base, fast, compiled, outside = fast_vs_fp32(tok, ds, tc, steps, device)
    print(f"{'':<22}{'tok/s':>10}{'ratio':>8}   share of the step outside matmuls")
    print(f"{'fp32 eager':<22}{base:>10,.0f}{1:>8.2f}")
    print(f"{'fast path':<22}{fast:>10,.0f}{fast / base:>8.2f}   {outside[0]:.0%}")
    print(f"{'fast path, compiled':<22}{compiled:>10,.0f}{compiled / base:>8.2f}   {outside[1]:.0%}")


def gpu_rows(a, tc, device):
    if device.type != "cuda":
        print("\n3. base in bf16 with MFU: not run (no GPU here)")
        return
    name = torch.cuda.get_device_name()
    peak = a.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    print(f"\n3. base at sequence lengths {', '.join(map(str, a.gpu_seq))}, bf16 autocast, on {name}; MFU against a peak of "
          + (f"{peak:.0f} TFLOP/s" if peak else "? (unknown GPU: pass --peak-tflops)"))
    print(f"embryo: its training loop, batches masked by {resolve_data_workers('auto', device)} worker processes; 'no data': the "
          "same step on four batches made beforehand; transformers: batches made on the critical path")
    print(f"{'seq':>5}{'batch':>7}  {'model':<26}{'tok/s':>12}{'GFLOP/token':>13}{'MFU':>8}")
    base_tc = lambda batch, seq: get_train_config("base", batch_size=max(1, batch * 128 // seq), max_seq_length=seq,
                                                  tokenizer_vocab_size=tc.tokenizer_vocab_size)
    for seq in a.gpu_seq:
        for batch in a.gpu_batch:
            gtc = base_tc(batch, seq)
            gtok, gds = bench_data(gtc)
            flops, speed = hf_vs_embryo("base", gtok, gds, gtc, a.steps, device, precision="bf16", compiled=a.compile,
                                        modes=a.compile_modes)
            for k, v in speed.items():
                mfu = f"{flops[k] * v / (peak * 1e12):.1%}" if peak else "?"
                print(f"{seq:>5}{gtc.batch_size:>7}  {k:<26}{v:>12,.0f}{flops[k] / 1e9:>13.3f}{mfu:>8}", flush=True)
    for mode in (a.profile or ["default"]) if a.profile is not None and a.gpu_batch else ():
        print(f"\n   profile of the step compiled as {mode!r}, {max(a.gpu_batch)} x 128 tokens at sequence length "
              f"{a.gpu_seq[-1]}, on premade batches:")
        gtc = base_tc(max(a.gpu_batch), a.gpu_seq[-1])
        gpu_profile("base", *bench_data(gtc), gtc, max(2, a.steps // 2), device, mode=mode)


if __name__ == "__main__":
    main()
