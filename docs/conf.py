"""Sphinx settings of the documentation site that `make docs` builds (docs/build.py stages the notebooks and runs it)."""
import json
import os
import re
from pathlib import Path

project = "embryo"
author = "embryo developers"
copyright = "2026 onwards, embryo developers"

# sphinx-mathjax-offline: the notebooks' $...$ maths rendered by a MathJax copied into the site (no CDN: it reads offline)
extensions = ["myst_nb", "sphinx-mathjax-offline"]
myst_enable_extensions = ["dollarmath"]
# the pages are the notebooks as committed: never executed here (the analyses take hours; their results cells carry
# the committed figures and verdicts, written by embryo.publish.prose.sync_notebooks)
nb_execution_mode = "off"
root_doc = "index"  # nbs/index.ipynb, staged at the site's root as nbdev's docs put it
# the committed tables, findings and side-by-side summaries (Markdown in figures/) are pages too, reached by the
# notebooks' links; the folder's other files are copied into the site as they are (build.py)
# the documentation's own pages (docs/**/*.md: the explanations, the findings of the longer runs, the lab journal),
# Markdown with fact spans that embryo.publish.prose.sync_prose keeps equal to the committed files
include_patterns = ["index.ipynb", "nbs/*.ipynb", "docs/**.md", "figures/**.md"]
exclude_patterns = ["figures/**/checkpoints/**"]
myst_heading_anchors = 3
smartquotes = False  # the verdicts' quotes as written (the test finds each verdict on its page)
suppress_warnings = ["myst.header"]  # the notebooks use `####` under `##` (their results cells), as the README does

html_theme = "furo"
html_title = "embryo"
html_show_sourcelink = False
html_copy_source = False
html_permalinks_icon = "#"

FIGURES = "figures"  # the committed figures: build.py copies them into the site where they sit in the checkout
NBDEV_HIDDEN = ("hide", "default_exp")  # cells nbdev's docs leave out (tests and the export target)
_DIRECTIVE = re.compile(r"^#\|\s*([\w-]+)")


def nbdev_cells(nb: dict) -> dict:
    "The notebook as nbdev's docs show it: cells marked `#| hide` or `#| default_exp` left out, `#|` lines dropped."
    cells = []
    for c in nb["cells"]:
        lines = "".join(c["source"]).splitlines(keepends=True)
        if c["cell_type"] == "code":
            dirs = {m.group(1) for m in map(_DIRECTIVE.match, lines) if m}
            if dirs & set(NBDEV_HIDDEN): continue
            lines = [l for l in lines if not _DIRECTIVE.match(l)]
            if not "".join(lines).strip(): continue
        cells.append(dict(c, source="".join(lines)))
    return dict(nb, cells=cells)


RESULTS = "<!-- embryo:results"  # the first line of an analysis notebook's results cell (embryo.publish.prose.RESULTS_MARK)


def results_first(nb: dict) -> dict:
    "An analysis page opens with its committed results: the results cell moved under the title, the code after it."
    cells = nb["cells"]
    i = next((k for k, c in enumerate(cells) if c["cell_type"] == "markdown" and c["source"].startswith(RESULTS)), None)
    if i is None or i <= 1: return nb
    head = dict(cell_type="markdown", id="embryo-results-first", metadata={},
                source="## The results\n\nWhat the committed runs show; the code that measures it follows.")
    return dict(nb, cells=[cells[0], head, cells[i], *cells[1:i], *cells[i + 1:]])


IMAGE = re.compile(r"(?<!\[)!\[([^\]]*)\]\(([^)\s]+)\)")  # a Markdown image not already inside a link


def images_open_full_size(text: str) -> str:
    "Each image of a Markdown text wrapped in a link to its own file: the page shows it at column width, a click full size."
    return IMAGE.sub(lambda m: f"[![{m[1]}]({m[2]})]({m[2]})", text)


def toctree(caption: str, pages) -> str:
    "A hidden toctree of `pages`: the sidebar lists their titles, in this order, under `caption`."
    return f"```{{toctree}}\n:hidden:\n:titlesonly:\n:caption: {caption}\n\n" + "\n".join(pages) + "\n```\n"


SUMMARIES = ("findings", "compare/compare", "seeds/seeds")  # under figures/ (and a run's folder in it): the results pages
PAGES = "docs"  # the documentation's Markdown pages, staged where they sit in the checkout (build.py)
# the sidebar's sections of those pages, in this order: (caption, folder under docs/ or a page); the journal last
PAGE_SECTIONS = (("How to", "explanations"), ("Findings", "findings"), ("The lab journal", "journal.md"))
ORDER = {"explanations": ("setup", "notebooks", "pretraining", "analysing", "your-data", "using-the-model", "benchmarks",
                          "data-sources"),
         "findings": ("default-run", "mature", "twins", "facts", "seeds", "ablations", "reference")}


def doc_pages(src: Path, entry: str) -> list:
    "The pages of docs/`entry` (a folder: those `ORDER` names first, in its order, then the others by name; or a page)."
    if entry.endswith(".md"): return [f"{PAGES}/{entry[:-3]}"] if (src / PAGES / entry).exists() else []
    names = [p.stem for p in sorted((src / PAGES / entry).glob("*.md"))]
    first = [n for n in ORDER.get(entry, ()) if n in names]
    return [f"{PAGES}/{entry}/{n}" for n in first + [n for n in names if n not in first]]


def navigation(src: Path) -> dict:
    """The front page's hidden markdown cell: every notebook in reading order, the documentation's pages (docs/), then
    the committed results' summary pages."""
    name = lambda p: p.relative_to(src).with_suffix("").as_posix()
    pages = sorted(name(p) for p in src.glob("nbs/*.ipynb"))
    results = [name(p) for d in (src / FIGURES, *sorted((src / FIGURES).glob("*/"))) for s in SUMMARIES
               if (p := d / f"{s}.md").exists()]
    docs = [toctree(caption, found) for caption, entry in PAGE_SECTIONS if (found := doc_pages(src, entry))]
    return dict(cell_type="markdown", id="embryo-pages", metadata={},
                source="\n".join([toctree("The notebooks", pages), *docs, toctree("The committed results", results)]))


def on_source_read(app, docname, source):
    "Read each notebook as nbdev's docs show it, the front page with the site's navigation; a table of figures/ is a page of its own."
    if docname.startswith(f"{FIGURES}/"):
        source[0] = "---\norphan: true\n---\n" + images_open_full_size(source[0]); return
    if docname.startswith(f"{PAGES}/"):  # a page of docs/: Markdown, in the front page's navigation
        source[0] = images_open_full_size(source[0]); return
    nb = results_first(nbdev_cells(json.loads(source[0])))
    for c in nb["cells"]:
        if c["cell_type"] == "markdown": c["source"] = images_open_full_size(c["source"])
    if docname == root_doc: nb["cells"].append(navigation(Path(app.srcdir)))
    source[0] = json.dumps(nb)


def _link_target(app, docname: str, node) -> Path:
    "The file or folder a link of the page `docname` points to, in the staged sources."
    src = Path(app.srcdir)
    if node.get("refdomain") == "doc": return src / node["reftarget"]  # a page MyST did not find (its name from the root)
    return src / Path(docname).parent / node["reftarget"].split("#")[0]


def on_doctree_read(app, doctree):
    "Links into figures/ (tables, reports, executed pages, folders) stay plain links to the copy in the site; a broken one warns."
    from docutils import nodes
    from sphinx import addnodes
    from sphinx.util import logging
    docname, src = app.env.docname, Path(app.srcdir)
    figures = src / FIGURES
    for node in list(doctree.findall(lambda n: isinstance(n, (addnodes.pending_xref, addnodes.download_reference)))):
        if node.get("refdomain") == "doc" and node["reftarget"] in app.env.found_docs: continue  # a page: Sphinx links it
        target = _link_target(app, docname, node)
        if not os.path.abspath(target).startswith(str(figures) + os.sep): continue
        if not target.exists():
            logging.getLogger(__name__).warning(f"link to a missing file: {target.relative_to(src)}", location=node)
        url = os.path.relpath(os.path.abspath(target), src / Path(docname).parent).replace(os.sep, "/")
        ref = nodes.reference("", "", *node.children, refuri=url + ("/" if target.is_dir() else ""), internal=False)
        node.replace_self(ref)


def setup(app):
    app.connect("source-read", on_source_read)
    app.connect("doctree-read", on_doctree_read, priority=100)  # before Sphinx collects the downloads and images
