"""Every failure a user can cause prints one line naming the problem, the file and the fix, with exit status 2 (the
sweep: its failure log holds the same line, status 1). `python tests/test_bad_input.py` prints the table of cases:
input, message, exit status, what was left on disk."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from embryo.runs.run import checkpoint_dir

from embryo.train.fixtures import FIXTURE, corpus_slice, fixture_run
from embryo.runs.layout import RUN_CONFIG

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, hide=None):
    "`embryo` with `args`; `hide`: a package that this Python then cannot import, as where it is not installed."
    start = ["-m", "embryo.cli"] if hide is None else \
        ["-c", f"import sys; sys.modules[{hide!r}] = None; from embryo.cli import main; sys.exit(main(sys.argv[1:]))"]
    return subprocess.run([sys.executable, *start, *args], capture_output=True, text=True, cwd=ROOT)


def _pretrain_args(run, **extra):
    sets = {**FIXTURE["model"], **FIXTURE["train"], "corpus": str(corpus_slice()), "total_steps": 4, "warmup_steps": 1, **extra}
    return ["pretrain", "--preset", "tiny", "--run-dir", str(run), "--no-progress", "--set"] + [f"{k}={json.dumps(v)}" for k, v in sets.items()]


def _copy_fixture(dst):
    return Path(shutil.copytree(fixture_run(), dst, ignore=shutil.ignore_patterns("results.sqlite*", "figures", "notebooks", ".lock")))


def _corpus(tmp, name, data: bytes):
    f = tmp / name; f.write_bytes(data); return f


class Evil:
    "A pickle that would run a shell command when loaded."
    def __init__(self, marker): self.marker = marker
    def __reduce__(self): return (os.system, (f"touch {self.marker}",))


def case_empty_corpus(tmp):
    f = _corpus(tmp, "empty.txt", b"")
    return dict(input="empty corpus file", args=_pretrain_args(tmp / "run", corpus=str(f)), names=str(f), error="CorpusError", run=tmp / "run")


def case_non_utf8_corpus(tmp):
    f = _corpus(tmp, "latin1.txt", "Caf\u00e9 au lait .\nUne phrase .\n\nDeux .\nTrois .\n".encode("latin1"))
    return dict(input="non-UTF-8 corpus", args=_pretrain_args(tmp / "run", corpus=str(f)), names=str(f), error="CorpusError", run=tmp / "run")


def case_one_line_corpus(tmp):
    f = _corpus(tmp, "one.txt", b"just one sentence here .\n")
    return dict(input="one-line corpus", args=_pretrain_args(tmp / "run", corpus=str(f)), names=str(f), error="CorpusError", run=tmp / "run")


def case_missing_corpus(tmp):
    f = tmp / "nope.txt"
    return dict(input="missing corpus", args=_pretrain_args(tmp / "run", corpus=str(f)), names=str(f), error="CorpusError", run=tmp / "run")


def case_garbage_config(tmp):
    run = _copy_fixture(tmp / "run")
    (run / RUN_CONFIG).write_text("{this is not json")
    return dict(input="garbage run pretrain_config.json", args=_pretrain_args(run, total_steps=30, warmup_steps=5), names=str(run / RUN_CONFIG),
                error="ConfigError", run=run)


def case_truncated_resume(tmp):
    run = _copy_fixture(tmp / "run")
    f = run / "resume" / "model.safetensors"; f.write_bytes(f.read_bytes()[:1000])
    return dict(input="truncated resume/model.safetensors", args=_pretrain_args(run, total_steps=30, warmup_steps=5), names=str(f),
                error="CheckpointError", run=run)


def case_malicious_trainer_state(tmp):
    run = _copy_fixture(tmp / "run")
    marker = tmp / "PWNED"
    torch.save(dict(step=Evil(marker)), run / "resume" / "trainer_state.pt")
    return dict(input="malicious resume/trainer_state.pt (a pickle calling os.system)", args=_pretrain_args(run, total_steps=30, warmup_steps=5),
                names=str(run / "resume" / "trainer_state.pt"), error="CheckpointError", run=run, never=marker)


def case_truncated_checkpoint(tmp):
    run = _copy_fixture(tmp / "run")
    f = checkpoint_dir(run, 8) / "model.safetensors"; f.write_bytes(f.read_bytes()[:1000])
    return dict(input="truncated checkpoint model.safetensors (sweep)", args=["sweep", "--run", str(run), "--analyses", "knowledge",
                "--steps", "8", "--mode", "inprocess", "--option", "knowledge.max_facts=5"], names=str(f), error="CheckpointError", run=run,
                status=1, log=True)


def case_pickle_only_step(tmp):
    run = _copy_fixture(tmp / "run")
    d = checkpoint_dir(run, 8)
    from safetensors.torch import load_file
    torch.save(load_file(d / "model.safetensors"), d / "pytorch_model.bin"); (d / "model.safetensors").unlink()
    return dict(input="pickle-only step folder (sweep --steps 8)", args=["sweep", "--run", str(run), "--analyses", "knowledge", "--steps", "8",
                "--mode", "inprocess"], names=str(d), error="CheckpointNotFound", run=run)


def case_mistyped_option(tmp):
    run = _copy_fixture(tmp / "run")
    return dict(input="sweep --option knowledge.max_facts=many", args=["sweep", "--run", str(run), "--analyses", "knowledge", "--option",
                "knowledge.max_facts=many"], names="max_facts", error="ParameterError", run=run)


def case_misspelt_option(tmp):
    run = _copy_fixture(tmp / "run")
    return dict(input="sweep --option knowledge.max_fact=5 (misspelt)", args=["sweep", "--run", str(run), "--analyses", "knowledge",
                "--option", "knowledge.max_fact=5"], names="nbs/06_knowledge.ipynb", error="SweepError", run=run)


def case_disk_full(tmp):
    mnt = tmp / "small-disk"; mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root) to fill a disk")
    return dict(input="disk full (a 2 MB tmpfs)", args=_pretrain_args(mnt / "run"), names=str(mnt / "run"), error="DiskFull",
                run=mnt / "run", unmount=mnt)


def case_figures_folder_to_compare(tmp):
    figs = tmp / "figures"; figs.mkdir(); (figs / "index.html").write_text("<html></html>")  # an older report: no run/ beside it
    run = _copy_fixture(tmp / "run")
    return dict(input="compare --run <a figures folder without run/>", args=["compare", "--run", str(figs), "--run", str(run),
                "--figures", str(tmp / "compare")], names=f"embryo report --run <that run> --figures {figs}", error="SweepError", run=figs)


def case_zero_seeds(tmp):
    return dict(input="reproduce --seeds 0", args=["reproduce", "--seeds", "0", "--run-dir", str(tmp / "run"), "--figures", str(tmp / "figures")],
                names="--seeds 0", error="SweepError", run=tmp / "run")


def case_unknown_analysis_to_reproduce(tmp):
    return dict(input="reproduce --analyses facts", args=["reproduce", "--analyses", "facts", "--run-dir", str(tmp / "run"),
                "--figures", str(tmp / "figures")], names="unknown facts; the analyses are", error="SweepError", run=tmp / "run")


def case_negative_facts(tmp):
    return dict(input="pretrain --set facts=-1", args=_pretrain_args(tmp / "run", facts=-1), names="facts=-1 must be at least 0",
                error="ConfigError", run=tmp / "run")


def case_compile_not_a_bool(tmp):
    return dict(input="pretrain --set compile=yes", args=_pretrain_args(tmp / "run", compile="yes"), names="compile='yes' is not true or false",
                error="ConfigError", run=tmp / "run")


def case_compile_for_electra(tmp):
    args = _pretrain_args(tmp / "run", compile=True)
    args[args.index("tiny")] = "electra-tiny"
    return dict(input="pretrain --preset electra-tiny --set compile=true", args=args, names="set compile=false",
                error="ConfigError", run=tmp / "run")


def case_tensorboard_without_its_package(tmp):
    "Issue 33, point 9: --tensorboard where tensorboardX is not installed says what to install, before any run folder."
    return dict(input="pretrain --tensorboard without tensorboardX", args=_pretrain_args(tmp / "run") + ["--tensorboard"],
                hide="tensorboardX", names="pip install tensorboardX", error="ConfigError", run=tmp / "run", fresh=True)


def _damaged_db(run, how):
    "The run's results.sqlite, truncated after real rows were written, or overwritten with text (issue 32, finding 4)."
    from embryo.runs.results import write_results
    f = run / "results.sqlite"
    if how == "truncated":
        for step in range(40):
            write_results(run, "knowledge", step, [dict(task=f"P{k}", metric="p@1", value=0.5) for k in range(40)])
        for extra in ("-wal", "-shm"): Path(f"{f}{extra}").unlink(missing_ok=True)
        f.write_bytes(f.read_bytes()[:len(f.read_bytes()) // 3])
    else: f.write_text("results: none yet\n" * 100)
    return f


def _db_case(command, how):
    def make(tmp):
        run = _copy_fixture(tmp / "run")
        f = _damaged_db(run, how)
        args = dict(sweep=["sweep", "--run", str(run), "--analyses", "knowledge", "--steps", "8", "--mode", "inprocess"],
                    report=["report", "--run", str(run), "--figures", str(tmp / "figures")],
                    merge=["merge", "--run", str(tmp / "other"), str(f)])[command]
        if command == "merge": _copy_fixture(tmp / "other")
        return dict(input=f"{how} results.sqlite ({command})", args=args, names=f"{f} is damaged", error="ResultsDamaged", run=run)
    make.__name__ = f"case_{how}_results_{command}"
    return make


DATABASES = [_db_case(c, h) for c in ("sweep", "report", "merge") for h in ("truncated", "garbage")]


def case_jsonl_without_text(tmp):
    f = _corpus(tmp, "c.jsonl", b'{"body": "One sentence here ."}\n{"body": "Another one ."}\n')
    return dict(input=".jsonl corpus without a text column", args=_pretrain_args(tmp / "run", corpus=str(f)),
                names=f"{f}: the dataset has no 'text' column; its columns are body: name the column", error="CorpusError", run=tmp / "run")


def case_csv_without_text(tmp):
    f = _corpus(tmp, "c.csv", b"body\nOne sentence here .\n")
    return dict(input=".csv corpus without a text column", args=_pretrain_args(tmp / "run", corpus=str(f)),
                names=f"{f}: the dataset has no 'text' column", error="CorpusError", run=tmp / "run")


def case_broken_parquet(tmp):
    f = _corpus(tmp, "c.parquet", b"PAR1 this is not really parquet")
    return dict(input="broken .parquet corpus", args=_pretrain_args(tmp / "run", corpus=str(f)),
                names=f"{f}: cannot be read as parquet", error="CorpusError", run=tmp / "run")


def case_facts_option_not_a_folder(tmp):
    run = _copy_fixture(tmp / "run")
    return dict(input="sweep --option 'knowledge.facts={\"P1\": 3}'", args=["sweep", "--run", str(run), "--analyses", "knowledge",
                "--steps", "8", "--mode", "inprocess", "--option", 'knowledge.facts={"P1": 3}'],
                names="is neither a LAMA folder nor relations: pass the path of a LAMA folder", error="FactsError", run=run, status=1, log=True)


def case_report_of_a_missing_run(tmp):
    return dict(input="report --run <missing>", args=["report", "--run", str(tmp / "nope"), "--figures", str(tmp / "figures")],
                names=f"no run folder at {tmp / 'nope'}: nothing to report", error="SeriesError", run=tmp / "nope")


def case_report_of_an_empty_folder(tmp):
    (tmp / "empty").mkdir()
    return dict(input="report --run <an empty folder>", args=["report", "--run", str(tmp / "empty"), "--figures", str(tmp / "figures")],
                names="holds no results.sqlite and no logs/: nothing to report", error="SeriesError", run=tmp / "empty")


def case_sweep_of_a_missing_run(tmp):
    return dict(input="sweep --run <missing>", args=["sweep", "--run", str(tmp / "nope"), "--analyses", "knowledge"],
                names=f"no run folder or checkpoint folder at {tmp / 'nope'}", error="SeriesError", run=tmp / "nope")


def case_lama_relation_outside_its_folder(tmp):
    run = _copy_fixture(tmp / "run")
    lama = tmp / "lama"; (lama / "TREx").mkdir(parents=True)
    (lama / "relations.jsonl").write_text(json.dumps({"relation": "../../x", "template": "[X] is the capital of [Y] ."}) + "\n")
    (tmp / "x.jsonl").write_text(json.dumps({"sub_label": "secret", "obj_label": "file"}) + "\n")  # what ../../x would read
    return dict(input="LAMA relation named ../../x", args=["sweep", "--run", str(run), "--analyses", "knowledge", "--steps", "8",
                "--mode", "inprocess", "--option", f"knowledge.facts={json.dumps(str(lama))}"],
                names="relation '../../x' is not a relation id", error="FactsError", run=run, status=1, log=True)


CORPORA = [case_jsonl_without_text, case_csv_without_text, case_broken_parquet, case_facts_option_not_a_folder,
           case_report_of_a_missing_run, case_report_of_an_empty_folder, case_sweep_of_a_missing_run,
           case_lama_relation_outside_its_folder]


# Settings: each refused before anything is written (issue 32, finding 5), with the field, the value and what to pass.
# (field, value, what the line names); a value that is a str reaches the run as `--set field=<str>`, unquoted.
SETTINGS = [
    ("batch_size", "abc", "TrainConfig.batch_size='abc' is not an integer"), ("total_steps", 40.5, "total_steps=40.5 is not an integer"),
    ("learning_rate", -0.01, "learning_rate=-0.01 is outside (0, inf)"), ("learning_rate", "NaN", "learning_rate=nan is not a finite number"),
    ("learning_rate", "Infinity", "learning_rate=inf is not a finite number"), ("learning_rate", "fast", "learning_rate='fast' is not a finite"),
    ("mask_prob", 2, "mask_prob=2 is outside (0, 1)"), ("mask_prob", 0, "mask_prob=0 is outside (0, 1)"),
    ("weight_decay", -1, "weight_decay=-1 is outside [0, inf)"), ("adam_beta1", 1.0, "adam_beta1=1.0 is outside [0, 1)"),
    ("adam_beta2", -0.1, "adam_beta2=-0.1 is outside"), ("adam_epsilon", 0, "adam_epsilon=0 is outside (0, inf)"),
    ("max_grad_norm", -1, "max_grad_norm=-1 is outside"), ("seed", -1, "seed=-1 is outside [0, inf)"), ("seed", 1.5, "seed=1.5 is not an integer"),
    ("short_seq_prob", 1.5, "short_seq_prob=1.5 is outside [0, 1]"), ("max_ngram", 0, "max_ngram=0 is outside [1, inf)"),
    ("eval_sequences", 0, "eval_sequences=0 is outside"), ("checkpoint_pow2_until", -1, "checkpoint_pow2_until=-1 is outside"),
    ("rtd_weight", -1, "rtd_weight=-1 is outside"), ("warmup_steps", -1, "warmup_steps=-1 must lie in [0, total_steps=4]"),
    ("warmup_steps", 10, "warmup_steps=10 must lie in [0, total_steps=4]"), ("grad_accum", 3, "not divisible by grad_accum=3"),
    ("grad_accum", 0, "grad_accum must be at least 1"), ("max_seq_length", 4, "max_seq_length must be at least 8"),
    ("log_every", 0, "log_every must be at least 1"), ("resume_every", 0, "resume_every must be at least 1"),
    ("optimizer", "sgd", "optimizer='sgd' is not one of lamb, adamw"), ("lr_schedule", "cosine", "lr_schedule='cosine' is not one of"),
    ("decay_fraction", 0, "decay_fraction=0 must lie in (0, 1]"), ("phase1_fraction", 1, "phase1_fraction=1 must lie in (0, 1)"),
    ("phase1_seq_length", 128, "phase1_seq_length=128 must lie in [8, max_seq_length=64)"),
    ("sentence_task", "nsp2", "sentence_task='nsp2' is not one of sop, nsp, none"), ("precision", "fp16", "precision='fp16' is not one of"),
    ("checkpoint_every", "often", "checkpoint_every='often' is not a list"),
    ("checkpoint_every", [[0, None]], "checkpoint_every=[[0, None]] is not a number of steps or a list of [every, until] pairs"),
    ("checkpoint_every", [[10, 2.5]], "is not a number of steps or a list of [every, until] pairs"),
    ("max_predictions", 0, "max_predictions must be at least 1"), ("max_predictions", "all", "max_predictions='all' is not an integer or null"),
    ("tokenizer_vocab_size", 0, "vocab_size"), ("hidden_size", "big", "ModelConfig.hidden_size='big' is not an integer"),
    ("num_attention_heads", 3, "is not divisible by num_attention_heads=3"), ("sharing", "some", "sharing='some' is not one of"),
    ("hidden_act", "swish", "hidden_act='swish' is not one of"), ("hidden_dropout_prob", 1.5, "hidden_dropout_prob must lie in [0, 1)"),
    ("initializer_range", 0, "initializer_range=0 is outside (0, inf)"), ("layer_norm_eps", -1, "layer_norm_eps=-1 is outside"),
    ("model_type", "gpt", "model_type='gpt' is not one of albert, electra"), ("num_hidden_layers", 0, "num_hidden_layers must be a positive"),
    ("embedding_size", 2.5, "embedding_size=2.5 is not an integer"), ("pad_token_id", 5000, "pad_token_id=5000 is outside the vocabulary"),
    ("generator_size", 0, "generator_size=0 is outside (0, 1]"), ("facts", 1.5, "facts=1.5 is not an integer"),
    ("compile", 1, "compile=1 is not true or false"),
]


def _setting_case(field, value, names):
    def make(tmp):
        args = _pretrain_args(tmp / "run")
        if isinstance(value, str): args.append(f"{field}={value}")  # as a user types it: no JSON quotes
        else: args.append(f"{field}={json.dumps(value)}")
        return dict(input=f"pretrain --set {args[-1]}", args=args, names=names, error="ConfigError", run=tmp / "run", fresh=True,
                    inprocess=True)
    make.__name__ = f"case_set_{field}_{value}"
    return make


def _args_case(label, extra, names, error="ConfigError"):
    def make(tmp):
        args = _pretrain_args(tmp / "run")
        i = args.index("--set")
        args = args + list(extra[1:]) if extra[0] == "--set" else args[:i] + list(extra) + args[i:]  # one --set list
        return dict(input=f"pretrain {label}", args=args, names=names, error=error, run=tmp / "run", fresh=True, inprocess=True)
    make.__name__ = f"case_{label.replace(' ', '_').replace('-', '')}"
    return make


ARGS = [_args_case("--device cuda (no GPU here)", ["--device", "cuda"], "--device cuda: this machine has no CUDA GPU"),
        _args_case("--device gpu", ["--device", "gpu"], "--device 'gpu' is not a device: pass cpu, cuda, cuda:N or auto"),
        _args_case("--data-workers many", ["--data-workers", "many"], "data_workers must be 'auto' or a number of processes"),
        _args_case("--data-workers superscript-two", ["--data-workers", "\u00b2"], "data_workers must be 'auto' or a number of processes"),
        _args_case("--set lr=1 (not a field)", ["--set", "lr=1"], "--set lr: not a field of ModelConfig or TrainConfig"),
        _args_case("--set batch_size (no value)", ["--set", "batch_size"], "--set 'batch_size': expected name=value")]


CASES = [case_empty_corpus, case_non_utf8_corpus, case_one_line_corpus, case_missing_corpus, case_garbage_config,
         case_truncated_resume, case_malicious_trainer_state, case_truncated_checkpoint, case_pickle_only_step,
         case_mistyped_option, case_misspelt_option, case_disk_full, case_figures_folder_to_compare,
         case_zero_seeds, case_unknown_analysis_to_reproduce, case_negative_facts, case_compile_not_a_bool,
         case_compile_for_electra, case_tensorboard_without_its_package] + [_setting_case(*c) for c in SETTINGS] + ARGS + DATABASES + CORPORA


# Every other command and option (issue "numbers a reader can trust": 150 cases or more, 0 tracebacks). Each is run in
# this process: refused before any job runs (status 2, one line on stderr), or, where only the analysis can tell
# (a layer the model lacks), a failed job whose line in the sweep's failure log names the value (status 1).
def _sweep_case(label, extra, names, error, status=2, log=False, run=True):
    def make(tmp):
        r = _copy_fixture(tmp / "run") if run else tmp / "nope"
        return dict(input=f"sweep {label}", args=["sweep", "--run", str(r), "--mode", "inprocess", *extra], names=names,
                    error=error, run=r, status=status, log=log, inprocess=True)
    make.__name__ = "case_sweep_" + "".join(c if c.isalnum() else "_" for c in label)
    return make


def _cmd_case(label, args, names, error, fresh=False):
    "`args` with {tmp} and {run} (a copy of the fixture run) filled in."
    def make(tmp):
        r = _copy_fixture(tmp / "run") if "{run}" in " ".join(args) else tmp / "run"
        return dict(input=label, args=[a.format(tmp=tmp, run=r) for a in args], names=names, error=error, run=r,
                    inprocess=True, fresh=fresh)
    make.__name__ = "case_" + "".join(c if c.isalnum() else "_" for c in label)
    return make


def case_pretrain_over_a_measured_run_without_resume_point(tmp):
    run = _copy_fixture(tmp / "run"); shutil.rmtree(run / "resume")
    (run / "results.sqlite").write_bytes(b"")
    from embryo.runs.results import write_results
    write_results(run, "attention", 30, [dict(task="brown", metric="diagonal", value=0.5)])
    return dict(input="pretrain on a measured run without its resume point (a shipped bundle)", args=_pretrain_args(run, total_steps=30, warmup_steps=5),
                names="results measured on them, but no resume point", error="ConfigError", run=run, inprocess=True)


_Q = ["--steps", "30"]
MORE = [
    _sweep_case("--workers 0", ["--analyses", "attention", "--workers", "0"], "--workers 0: pass 1 or more", "SweepError"),
    _sweep_case("--workers -1", ["--analyses", "attention", "--workers", "-1"], "--workers -1: pass 1 or more", "SweepError"),
    _sweep_case("--option attention.seq_len (no value)", ["--analyses", "attention", "--option", "attention.seq_len"],
                "expected analysis.option=value", "ParameterError"),
    _sweep_case("--option seq_len=3 (no analysis)", ["--analyses", "attention", "--option", "seq_len=3"],
                "expected analysis.option=value", "ParameterError"),
    _sweep_case("--option nope.x=1", ["--analyses", "attention", "--option", "nope.x=1"], "unknown analysis 'nope'", "SweepError"),
    _sweep_case("--steps 99999", ["--analyses", "attention", "--steps", "99999"], "has no checkpoint for step 99999", "CheckpointNotFound"),
    _sweep_case("--shard 3/2", ["--analyses", "attention", "--shard", "3/2"], "--shard '3/2': expected i/n", "SweepError"),
    _sweep_case("--shard abc", ["--analyses", "attention", "--shard", "abc"], "--shard 'abc': expected i/n", "SweepError"),
    _sweep_case("--analyses nope", ["--analyses", "nope"], "unknown analysis 'nope'", "SweepError"),
    _sweep_case("--device gpu", ["--analyses", "attention", "--device", "gpu"], "--device 'gpu' is not a device", "ConfigError"),
    _sweep_case("--mode papermill --option attention.nope=1", ["--analyses", "attention", "--mode", "papermill", "--option",
                "attention.nope=1"], "attention has no option nope", "SweepError"),
    _sweep_case("--run <missing>", ["--analyses", "attention"], "no run folder or checkpoint folder at", "SeriesError", run=False),
    *[_sweep_case(f"--option {a}.{k}=/nonexistent", ["--analyses", a, *_Q, "--option", f"{a}.{k}=/nonexistent"],
                  f"--option {a}.{k}=/nonexistent: no such file or folder", "SweepError")
      for a, k in [("knowledge", "facts"), ("syntax", "treebank"), ("grammar", "pairs"), ("reconstruction", "sentences"),
                   ("glue", "glue_dir"), ("squad", "squad_dir"), ("probing", "ontonotes")]],
    *[_sweep_case(f"--option {o}", ["--analyses", o.split(".")[0], *_Q, "--option", o], o.split("=")[0].split(".")[1],
                  "ParameterError")
      for o in ["knowledge.max_facts=-5", "knowledge.max_facts=0", "knowledge.relations=[]", "probing.tasks=[]",
                "attention.n_sentences=0", "llc.draws=0", "llc.lr=-1", "llc.chains=0", "grammar.n_pairs=0",
                "reconstruction.max_words=0", "similarity.max_tokens=-1", "syntax.max_sentences=0",
                "ngram.max_sentences=0", "aoa.max_occurrences=0", "glue.max_train_examples=0", "glue.seeds=0",
                "glue.tasks=[]", "attention.seq_len=0", "squad.doc_stride=0", "probing.max_train=-3"]],
    *[_sweep_case(f"--option {o} (found by the job)", ["--analyses", o.split(".")[0], *_Q, "--option", o], says, err,
                  status=1, log=True)
      for o, says, err in [("probing.layers=[99]", "layer(s) [99] out of range", "ValueError"),
                           ("attention.heads=[99]", "head(s) 99 do not exist", "ValueError"),
                           ("attention.layers=[99]", "layer(s) 99 do not exist", "ValueError"),
                           ("attention.seq_len=10000", "choose a smaller seq_len", "ValueError"),
                           ("glue.tasks=[\"nope\"]", "unknown task(s) nope", "UnknownTask"),
                           ("probing.tasks=[\"nope\"]", "unknown probing task(s) nope", "UnknownTask"),
                           ("grammar.precision=fp8", "precision='fp8' is not one of", "ConfigError"),
                           ("ngram.corpus=/nonexistent", "/nonexistent does not exist", "CorpusError")]],
    _cmd_case("merge with no shard databases", ["merge", "--run", "{run}"], "no shard databases", "ResultsMissing"),
    _cmd_case("merge a file that is no database", ["merge", "--run", "{run}", "{run}/spiece.model"], "no results database at",
              "ResultsMissing"),
    _cmd_case("report --figures <a file>", ["report", "--run", "{run}", "--figures", "{run}/spiece.model"],
              "is a file: pass a folder", "embryo report"),
    _cmd_case("params --figures <a file>", ["params", "--figures", "{run}/spiece.model"], "is a file: pass a folder", "embryo params"),
    _cmd_case("compare with one run", ["compare", "--run", "{run}", "--figures", "{tmp}/cmp"], "compare needs two runs or more",
              "SweepError"),
    _cmd_case("compare a run never swept", ["compare", "--run", "{run}", "--run", "{tmp}/nope", "--figures", "{tmp}/cmp"],
              "has no results.sqlite: sweep it first", "SweepError"),
    _cmd_case("seeds with one run", ["seeds", "--run", "{run}", "--figures", "{tmp}/s"], "seed bands need two seeds or more",
              "SweepError"),
    _cmd_case("seeds of a run never swept", ["seeds", "--run", "{run}", "--run", "{tmp}/nope", "--figures", "{tmp}/s"],
              "has no results.sqlite: sweep it first", "SweepError"),
    _cmd_case("pretrain --preset nope", ["pretrain", "--preset", "nope", "--run-dir", "{tmp}/run"], "invalid choice: 'nope'",
              "error: argument --preset", fresh=True),
    _cmd_case("reproduce --preset nope", ["reproduce", "--preset", "nope", "--run-dir", "{tmp}/run"], "invalid choice: 'nope'",
              "error: argument --preset", fresh=True),
    _cmd_case("fetch --corpus nope", ["fetch", "--corpus", "nope"], "invalid choice: 'nope'", "error: argument --corpus",
              fresh=True),
    _cmd_case("sweep with no --run", ["sweep", "--analyses", "attention"], "the following arguments are required: --run",
              "error:", fresh=True),
    _cmd_case("no command", [], "the following arguments are required: COMMAND", "error:", fresh=True),
    _cmd_case("sweep --steps ten", ["sweep", "--run", "{tmp}/run", "--steps", "ten"], "invalid int value: 'ten'", "error:",
              fresh=True),
    _cmd_case("pretrain --override --set hidden_size=128", ["pretrain", "--run-dir", "{run}", "--no-progress", "--override",
              "--set", "hidden_size=128"], "--override cannot change model.hidden_size", "ConfigError"),
    _cmd_case("pretrain --override on a folder without settings", ["pretrain", "--run-dir", "{tmp}/run", "--override", "--set",
              "learning_rate=0.001"], "has no pretrain_config.json to override", "ConfigError", fresh=True),
    case_pretrain_over_a_measured_run_without_resume_point,
    _cmd_case("pretrain --run-dir under a file", ["pretrain", "--run-dir", "{run}/spiece.model/run", "--no-progress"],
              "a file stands where a folder is needed (this path or a parent)", "embryo pretrain"),
    _cmd_case("report --figures under a file", ["report", "--run", "{run}", "--figures", "{run}/spiece.model/figs"],
              "a file stands where a folder is needed (this path or a parent)", "embryo report"),
]


def _foreign_db(tmp):
    import sqlite3
    run = _copy_fixture(tmp / "run")
    with sqlite3.connect(run / "results.sqlite") as con: con.execute("CREATE TABLE people (name TEXT)")
    return run


def _seed_runs(tmp, **other):
    "Two swept copies of the fixture run, the second trained (as its settings say) with seed 1 and `other`."
    a, b = (Path(shutil.copytree(fixture_run(), tmp / n, ignore=shutil.ignore_patterns("figures", "notebooks", ".lock")))
            for n in ("run", "run-seed1"))
    cfg = json.loads((b / RUN_CONFIG).read_text()); cfg["train"].update(seed=1, **other)
    (b / RUN_CONFIG).write_text(json.dumps(cfg))
    return a, b


def case_seeds_of_two_recipes(tmp):
    a, b = _seed_runs(tmp, batch_size=64)
    return dict(input="seeds of two recipes", args=["seeds", "--run", str(a), "--run", str(b), "--figures", str(tmp / "s")],
                names="are two recipes, not two seeds of one: they differ in train.batch_size", error="SweepError", run=tmp / "s",
                inprocess=True)


def case_seeds_of_one_run_twice(tmp):
    a, _ = _seed_runs(tmp)
    return dict(input="seeds of one run given twice", args=["seeds", "--run", str(a), "--run", f"{a}/../run", "--figures",
                str(tmp / "s")], names="a run is given twice", error="SweepError", run=tmp / "s", inprocess=True)


def case_foreign_results_database_sweep(tmp):
    run = _foreign_db(tmp)
    return dict(input="results.sqlite of another program (sweep)", args=["sweep", "--run", str(run), "--analyses", "attention",
                "--steps", "30", "--mode", "inprocess"], names="an SQLite database of something else (tables: people)",
                error="ResultsDamaged", run=run, inprocess=True)


def case_foreign_results_database_report(tmp):
    run = _foreign_db(tmp)
    return dict(input="results.sqlite of another program (report)", args=["report", "--run", str(run), "--figures",
                str(tmp / "figures")], names="an SQLite database of something else (tables: people)", error="ResultsDamaged",
                run=run, inprocess=True)


def case_logs_is_a_file(tmp):
    run = _copy_fixture(tmp / "run"); shutil.rmtree(run / "logs"); (run / "logs").write_text("not a folder")
    return dict(input="a file named logs in the run (pretrain)", args=_pretrain_args(run, total_steps=30, warmup_steps=5),
                names=f"{run / 'logs'}: a file stands where a folder is needed", error="embryo pretrain", run=run, inprocess=True)


def _read_only_run(tmp, with_results):
    "A copy of the fixture run (with a results database, or without) on a tmpfs remounted read-only."
    mnt = tmp / "ro"; mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64M", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root) to make a read-only disk")
    run = _copy_fixture(mnt / "run")
    if with_results:
        from embryo.runs.results import write_results
        write_results(run, "attention", 30, [dict(task="brown", metric="diagonal", value=0.5)])
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    return run, mnt


def case_read_only_disk_report(tmp):
    run, mnt = _read_only_run(tmp, True)
    return dict(input="report of a run on a read-only disk", args=["report", "--run", str(run), "--figures", str(tmp / "figures")],
                names="cannot be opened for writing (a read-only disk or folder", error="ResultsLocked", run=run, unmount=mnt)


def case_read_only_disk_sweep(tmp):
    run, mnt = _read_only_run(tmp, False)
    return dict(input="sweep of a run on a read-only disk", args=["sweep", "--run", str(run), "--analyses", "attention", "--steps", "30",
                "--mode", "inprocess"], names="the disk is read-only", error="embryo sweep", run=run, unmount=mnt)


def case_read_only_disk_pretrain(tmp):
    run, mnt = _read_only_run(tmp, False)
    return dict(input="pretrain a run on a read-only disk", args=_pretrain_args(run, total_steps=40, warmup_steps=5),
                names="the disk is read-only", error="embryo pretrain", run=run, unmount=mnt)


MORE += [case_foreign_results_database_sweep, case_foreign_results_database_report, case_logs_is_a_file,
         case_read_only_disk_report, case_read_only_disk_sweep, case_read_only_disk_pretrain]
MORE += [case_seeds_of_two_recipes, case_seeds_of_one_run_twice]
CASES += MORE


def left_on_disk(run: Path) -> str:
    "What the failure left in the run folder, beside what was there before: the names, and any temporary or half file."
    if not run.exists(): return "no run folder"
    names = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and "notebooks" not in p.parts)
    tmp = [n for n in names if n.endswith((".tmp", ".old")) or "/." in n and not n.endswith(".lock")]
    return f"{len(names)} files" + (f", temporary: {tmp}" if tmp else ", nothing temporary")


def _in_process(args):
    "The `embryo` command run in this process (settings are refused before torch does any work: no start-up to pay)."
    import contextlib, io, types
    from embryo.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try: code = main(list(args))
        except SystemExit as e: code = e.code  # argparse's refusals
    return types.SimpleNamespace(returncode=code or 0, stderr=err.getvalue())


def run_case(make, tmp):
    c = make(tmp)
    try:
        res = _in_process(c["args"]) if c.get("inprocess") else _cli(*c["args"], hide=c.get("hide"))
        if c.get("log"):  # a failing sweep job: the line is in its failure log
            from embryo.runs.results import read_log
            line = read_log(c["run"]).error.iloc[-1]
        else:
            line = res.stderr.strip()
        return c, res, line, left_on_disk(c["run"])
    finally:
        if c.get("unmount"): subprocess.run(["umount", str(c["unmount"])])


@pytest.mark.parametrize("make", CASES, ids=[m.__name__[5:] for m in CASES])
def test_bad_input_gives_one_line_with_the_file_and_the_fix(make, tmp_path):
    c, res, line, left = run_case(make, tmp_path)
    assert res.returncode == c.get("status", 2), (res.returncode, res.stderr[-3000:])
    assert len(line.splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert c["error"] in line and c["names"] in line, line
    assert "nothing temporary" in left or left == "no run folder", left
    if c.get("fresh"): assert left == "no run folder", left  # refused before the run folder was made
    if c.get("never"): assert not c["never"].exists(), "the malicious pickle ran"


if __name__ == "__main__":  # the table of the issue: input, message, exit status, what was left on disk
    import tempfile
    print("| input | message | exit status | left on disk |\n|---|---|---|---|")
    for make in CASES:
        with tempfile.TemporaryDirectory() as d:
            try: c, res, line, left = run_case(make, Path(d))
            except BaseException as e:
                print(f"| {make.__name__[5:]} | skipped: {e} | | |"); continue
            print(f"| {c['input']} | `{line.replace('|', '/')}` | {res.returncode} | {left} |", flush=True)
