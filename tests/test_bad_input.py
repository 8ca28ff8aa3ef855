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

from embryo import pretrain as P
from embryo.config import RUN_CONFIG

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "embryo.cli", *args], capture_output=True, text=True, cwd=ROOT)


def _pretrain_args(run, **extra):
    sets = {**P.FIXTURE["model"], **P.FIXTURE["train"], "corpus": str(P.corpus_slice()), "total_steps": 4, "warmup_steps": 1, **extra}
    return ["pretrain", "--preset", "tiny", "--run-dir", str(run), "--no-progress", "--set"] + [f"{k}={json.dumps(v)}" for k, v in sets.items()]


def _copy_fixture(dst):
    return Path(shutil.copytree(P.fixture_run(), dst, ignore=shutil.ignore_patterns("results.sqlite*", "figures", "notebooks", ".lock")))


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
    f = P.checkpoint_dir(run, 8) / "model.safetensors"; f.write_bytes(f.read_bytes()[:1000])
    return dict(input="truncated checkpoint model.safetensors (sweep)", args=["sweep", "--run", str(run), "--analyses", "knowledge",
                "--steps", "8", "--mode", "inprocess", "--option", "knowledge.max_facts=5"], names=str(f), error="CheckpointError", run=run,
                status=1, log=True)


def case_pickle_only_step(tmp):
    run = _copy_fixture(tmp / "run")
    d = P.checkpoint_dir(run, 8)
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
    return dict(input="pretrain --set compile=yes", args=_pretrain_args(tmp / "run", compile="yes"), names="compile must be true or false",
                error="ConfigError", run=tmp / "run")


def case_compile_for_electra(tmp):
    args = _pretrain_args(tmp / "run", compile=True)
    args[args.index("tiny")] = "electra-tiny"
    return dict(input="pretrain --preset electra-tiny --set compile=true", args=args, names="set compile=false",
                error="ConfigError", run=tmp / "run")


CASES = [case_empty_corpus, case_non_utf8_corpus, case_one_line_corpus, case_missing_corpus, case_garbage_config,
         case_truncated_resume, case_malicious_trainer_state, case_truncated_checkpoint, case_pickle_only_step,
         case_mistyped_option, case_misspelt_option, case_disk_full, case_figures_folder_to_compare,
         case_zero_seeds, case_unknown_analysis_to_reproduce, case_negative_facts, case_compile_not_a_bool,
         case_compile_for_electra]


def left_on_disk(run: Path) -> str:
    "What the failure left in the run folder, beside what was there before: the names, and any temporary or half file."
    if not run.exists(): return "no run folder"
    names = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and "notebooks" not in p.parts)
    tmp = [n for n in names if n.endswith((".tmp", ".old")) or "/." in n and not n.endswith(".lock")]
    return f"{len(names)} files" + (f", temporary: {tmp}" if tmp else ", nothing temporary")


def run_case(make, tmp):
    c = make(tmp)
    try:
        res = _cli(*c["args"])
        if c.get("log"):  # a failing sweep job: the line is in its failure log
            from embryo.results import read_log
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
