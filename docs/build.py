"""Build the documentation site: a page per notebook, the front page from nbs/index.ipynb, the pages of docs/, the committed figures copied in.

Run by `make docs` with the docs environment's Python (.venv-docs), never the project's: python docs/build.py [--out _site].
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns("checkpoints", "*.sqlite-wal", "*.sqlite-shm", ".*")  # the bundles' weights (30 MB) stay out


def stage(src: Path) -> Path:
    """A Sphinx source folder laid out as the site: index.ipynb at its root, the other notebooks in nbs/, the pages of
    docs/ (its Markdown files: the explanations, the findings, the lab journal) in docs/, figures/ beside."""
    (src / "nbs").mkdir(parents=True)
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        if nb.name != "index.ipynb": shutil.copyfile(nb, src / "nbs" / nb.name)
    for page in sorted((ROOT / "docs").rglob("*.md")):  # where they sit in the checkout, so their ../figures/ links hold
        (src / page.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, src / page.relative_to(ROOT))
    front = (ROOT / "nbs" / "index.ipynb").read_text(encoding="utf-8")  # at the site's root its ../ links lose ../
    (src / "index.ipynb").write_text(front.replace("](../", "]("), encoding="utf-8")
    (src / "figures").symlink_to(ROOT / "figures", target_is_directory=True)
    return src


def _place(src: str, dst: str):
    "A hard link where the site and figures/ share a disk (the files are only ever replaced by renames), else a copy."
    if os.path.exists(dst): sys.exit(f"docs: {dst} is both a page and a file of figures/: rename one of them")
    if os.stat(src).st_dev == os.stat(os.path.dirname(dst)).st_dev: os.link(src, dst)
    else: shutil.copy2(src, dst)


def copy_figures(out: Path):
    "The committed figures, tables, reports and executed pages under out/figures/, where the pages' links point."
    shutil.copytree(ROOT / "figures", out / "figures", ignore=SKIP, copy_function=_place, dirs_exist_ok=True)


def replace_dir(tmp: Path, dst: Path):
    "Put the finished site `tmp` at `dst` by renames, so a reader never sees half a site."
    old = dst.with_name(f".docs-old-{dst.name}-{os.getpid()}")
    if dst.exists(): dst.rename(old)
    tmp.rename(dst)
    shutil.rmtree(old, ignore_errors=True)


def build(out: Path, quiet: bool = False) -> Path:
    "Build the site into `out` (replaced whole when the build succeeds); returns its front page."
    try: from sphinx.cmd.build import build_main
    except ImportError:
        print(f"docs: no Sphinx in {sys.executable}; run `make docs`, which installs it into .venv-docs", file=sys.stderr); sys.exit(2)
    t0 = time.time()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".docs-build-", dir=out.parent) as d:  # beside `out`: renamed into place
        src, tmp = stage(Path(d) / "src"), Path(d) / "html"
        args = ["-b", "html", "-c", str(ROOT / "docs"), "--fail-on-warning", "-d", str(Path(d) / "doctrees")]
        if build_main(args + (["-q"] if quiet else []) + [str(src), str(tmp)]) != 0:
            sys.exit("docs: Sphinx failed (its warnings above); the site was left as it was")
        copy_figures(tmp)
        replace_dir(tmp, out)
    print(f"docs: wrote {out}/index.html ({time.time() - t0:.0f} s)")
    return out / "index.html"


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "_site"), help="the site's folder, replaced whole (default: _site)")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and the last line")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    # the site replaces its folder whole: only a new folder, an empty one or an earlier site (Sphinx's .buildinfo)
    bad = (f"{out} is a file" if out.is_file() else f"{out} holds files that are not a site built here"
           if out.is_dir() and any(out.iterdir()) and not (out / ".buildinfo").is_file() else "")
    if bad: print(f"docs: --out {args.out}: {bad}; give a new folder or an earlier site, e.g. --out _site", file=sys.stderr); sys.exit(2)
    return out, args.quiet


if __name__ == "__main__":
    build(*parse())
