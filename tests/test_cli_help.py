"""`embryo --help` answers without importing torch, and every option says what it does and its default."""
import subprocess
import sys

import pytest

from embryo.cli import parser

PROBE = """
import runpy, sys
sys.argv = ["embryo", *{args!r}]
try: runpy.run_module("embryo.cli", run_name="__main__")
except SystemExit: pass
print("TORCH-IMPORTED" if "torch" in sys.modules else "NO-TORCH")
"""

SUBCOMMANDS = ["fetch", "pretrain", "params", "sweep", "merge", "report", "reproduce"]


@pytest.mark.parametrize("args", [["--help"], *[[c, "--help"] for c in SUBCOMMANDS]])
def test_help_does_not_import_torch(args):
    "`python -m embryo.cli ... --help`, run as a user runs it, in a fresh interpreter."
    r = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "usage: embryo" in r.stdout and r.stdout.strip().endswith("NO-TORCH"), r.stdout[-300:]


def options(command):
    sub = next(a for a in parser()._actions if a.dest == "command").choices[command]
    return {o: a for a in sub._actions for o in a.option_strings}


def test_every_option_has_help():
    for c in SUBCOMMANDS:
        missing = [o for o, a in options(c).items() if o.startswith("--") and not a.help]
        assert not missing, (c, missing)


def test_help_texts_match_the_defaults():
    rep, sw = options("reproduce"), options("sweep")
    assert "default: figures)" in rep["--figures"].help  # reproduce writes figures/, not <run>/figures
    assert "<run>/figures" in options("pretrain")["--figures"].help
    desc = next(a for a in parser()._actions if a.dest == "command").choices["reproduce"].description
    assert "tiny run" not in desc and "--preset" in desc
    assert rep["--mode"].default == "inprocess" and sw["--mode"].default == "papermill"
    assert "embryo sweep" in rep["--mode"].help and "default" in sw["--mode"].help  # the two defaults say why they differ


def test_sweep_help_names_every_analysis():
    import subprocess, sys
    from embryo.analyses.sweep import ANALYSES
    out = subprocess.run([sys.executable, "-m", "embryo.cli", "sweep", "--help"], capture_output=True, text=True, check=True).stdout
    assert all(a in " ".join(out.split()) for a in ANALYSES), out


def test_version_and_descriptions_print_as_written():
    "Issue 33, point 9: no --version, and `embryo seeds --help` printed '95%%'."
    import embryo
    r = subprocess.run([sys.executable, "-m", "embryo.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"embryo {embryo.__version__}", r.stdout + r.stderr
    out = subprocess.run([sys.executable, "-m", "embryo.cli", "seeds", "--help"], capture_output=True, text=True).stdout
    assert "95% bootstrap band" in out and "%%" not in out, out
