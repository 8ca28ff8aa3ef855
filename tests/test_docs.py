"""`make docs` builds the documentation site: the front page, a page per notebook, each analysis page with its committed
figures and verdicts; and nbdev_docs's own processing of the notebooks (before quarto) runs through."""
import hashlib
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))


def _text(page: str) -> str:
    "A page's visible text, tags dropped and whitespace collapsed."
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    "The site as `make docs` builds it (its own environment, .venv-docs, made or reused), into a scratch folder."
    out = tmp_path_factory.mktemp("docs") / "site"
    r = subprocess.run(["make", "docs", f"SITE={out}"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"make docs failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return out


def test_front_page_is_index_and_every_notebook_has_a_page(site):
    front = (site / "index.html").read_text()
    assert "The two commands" in front and "make docs" in _text(front), "the front page is not nbs/index.ipynb"
    for nb in NBS:
        if nb.stem == "index": continue
        assert (site / "nbs" / f"{nb.stem}.html").is_file(), f"no page for {nb.name}"
        assert f'href="nbs/{nb.stem}.html"' in front, f"the front page's navigation misses {nb.name}"
    for img in re.findall(r'<img[^>]* src="([^"]+)"', front):  # the README's figures
        assert (site / img).is_file(), img


def test_every_page_of_docs_is_on_the_site_and_in_its_navigation(site):
    """Issue 74: the pages the README's journal, explanations and longer runs' findings moved to (docs/**/*.md) are
    pages of the site, in the front page's navigation, their numbers and their links into figures/ intact."""
    from embryo.publish.prose import FACT_SPAN
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert pages
    front = (site / "index.html").read_text()
    for md in pages:
        rel = md.relative_to(ROOT).with_suffix(".html").as_posix()
        page_file = site / rel
        assert page_file.is_file(), f"no page for {md.relative_to(ROOT)}"
        assert f'href="{rel}"' in front, f"the front page's navigation misses {md.relative_to(ROOT)}"
        page, text = page_file.read_text(), _text(page_file.read_text())
        for m in FACT_SPAN.finditer(md.read_text()):
            if m["value"]: assert " ".join(m["value"].split()) in text, f"{rel}: {m['value']} is not on the page"
        for href in re.findall(r'href="(\.\./(?:\.\./)?figures/[^"#]+)"', page):
            assert (page_file.parent / href).exists(), f"{rel}: the link {href} leads nowhere in the site"


def test_each_analysis_page_shows_its_committed_figures_and_verdicts(site):
    "Every figure of a notebook's results cell is on its page (the same bytes as in figures/), every verdict is in its text, every link resolves."
    from embryo.publish.prose import NOTEBOOKS, USER_DATA, _results_cell
    for a, name in NOTEBOOKS.items():
        path, page_file = ROOT / "nbs" / f"{name}.ipynb", site / "nbs" / f"{name}.html"
        cell = "".join(_results_cell(json.loads(path.read_text()), a, path)["source"])
        page = page_file.read_text()
        shown = {_digest(page_file.parent / src) for src in re.findall(r'<img[^>]* src="([^"]+)"', page)}
        figures = re.findall(r"!\[[^\]]*\]\(\.\./(figures/[^)]+)\)", cell)
        verdicts = re.findall(r"^\*\*Verdict on this run\.\*\* (.+)$", cell, re.M)
        if a not in USER_DATA: assert figures or verdicts, f"{name}: its results cell shows nothing to check"
        for f in figures: assert _digest(ROOT / f) in shown, f"{name}: {f} is not on its page"
        text = _text(page)
        for v in verdicts: assert " ".join(v.split()) in text, f"{name}: a verdict is not on its page: {v[:100]}"
        for href in re.findall(r'href="(\.\./figures/[^"#]+)"', page):
            assert (page_file.parent / href).exists(), f"{name}: the link {href} leads nowhere in the site"


def test_bad_output_folder_is_one_line_and_exit_2(tmp_path):
    "The site replaces its folder whole, so a folder of other files is refused before anything is built."
    (tmp_path / "notes.txt").write_text("mine")
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "build.py"), "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "not a site built here" in r.stderr, r.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_nbdev_docs_processes_every_notebook(monkeypatch):
    """What nbdev_docs runs before quarto: nbdev's doc processors, which execute only the exported cells, the cells with an
    import and show_doc; a cell mixing an import with code that needs a cell they skip failed (01_model's NameError)."""
    from execnb.nbio import read_nb
    from nbdev.processors import FilterDefaults
    monkeypatch.setenv("IN_TEST", "1")  # as nbdev's serve_drv sets it
    monkeypatch.chdir(ROOT / "nbs")
    for nb in NBS:
        try: FilterDefaults()(read_nb(nb))
        except Exception as e: pytest.fail(f"{nb.name}: {e} ({e.__cause__!r})")


def test_committed_pages_load_nothing_from_the_network():
    "The executed pages loaded require.js and MathJax from a CDN (nbconvert's template); the bundles must read offline."
    pages = sorted(ROOT.glob("figures/**/notebooks/*.html"))
    assert pages, "no executed pages committed under figures/"
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not re.findall(r'(?:src|href)="https?://', text), page
        assert not re.findall(r"<script[^>]*>[^<]*?https?://", text), page


def test_analysis_pages_show_results_before_code_and_figures_open_full_size(site):
    """Issue 76, item 5: each analysis page put its imports before its results, and its figures were shrunk to column width
    with no way to open them full size. Now the committed results come first (under the title) and each figure links to its
    own file."""
    from embryo.publish.prose import NOTEBOOKS
    for a, name in NOTEBOOKS.items():
        page = (site / "nbs" / f"{name}.html").read_text()
        body = page[page.index("<h1"):]
        code, results = body.find('class="highlight'), body.find('id="the-results"')
        assert results != -1 and (code == -1 or results < code), f"{name}: code before its results"
        for img in re.finditer(r"<img[^>]*>", body):
            before = body[:img.start()]
            link = before[before.rfind("<a "):]
            assert "</a>" not in link and 'href="' in link, f"{name}: {img[0][:80]} opens no larger view"
            target, shown = re.search(r'href="([^"]+)"', link)[1], re.search(r'src="([^"]+)"', img[0])[1]
            pages = site / "nbs"
            assert _digest(pages / target) == _digest(pages / shown), f"{name}: {target} is not the figure it shows"
