# pdcalc: build the book, run the tests, check the built site.
#   make book         .venv (from pyproject extras) + strict HTML build of the book
#   make test         .venv + unit tests + every chapter re-executed and compared (nbval)
#   make check-site   headless Chromium opens every page of _build/html (charts drawn, no
#                     request outside the site, no error output)
#   make refresh      re-execute the committed chapters in place (outputs to commit)
#   make bench        wall times of make test, the strict book build and one chapter
#   make clean        remove _build and caches (keeps .venv; `make distclean` removes it too)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# Re-installed when pyproject.toml is newer than this stamp.
STAMP := $(VENV)/.pdcalc-installed
# The venv's tools first on PATH, so jupyter-book's kernels are the venv's Python.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYDEVD_DISABLE_FILE_VALIDATION := 1

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: help venv book test check-site refresh bench clean distclean

help:
	@sed -n '2,8p' Makefile | sed 's/^# \{0,1\}//'

$(STAMP): pyproject.toml
	@if [ ! -x "$(PY)" ]; then echo "creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); fi
	$(PY) -m pip install --quiet -e '.[book,test]'
	@touch $@

venv: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build --all -W --keep-going .
	@echo
	@echo "Book built. Open: file://$(CURDIR)/_build/html/index.html"

# One pytest run: the unit tests under tests/ and, with nbval, every chapter under book/.
test: $(STAMP)
	$(PY) -m pytest $(NBVAL) tests book

check-site: $(STAMP)
	$(PY) tools/check_site.py _build/html

refresh: $(STAMP)
	$(PY) tools/refresh_notebooks.py

bench: $(STAMP)
	$(PY) tools/benchmark.py

clean:
	rm -rf _build .pytest_cache
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | xargs -0 rm -rf
	rm -rf *.egg-info

distclean: clean
	rm -rf $(VENV)
