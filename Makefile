# pdcalc: build the book, run the tests, check the built site.
#   make book         .venv (from pyproject extras) + strict HTML build of the book
#   make test         .venv + unit tests + every chapter re-executed and compared (nbval)
#   make check-site   headless Chromium opens every page of _build/html (charts drawn, no request
#                     outside the site, no error output, no truncated or too-wide table, code <= 3 %,
#                     live parameters that follow and agree with the command line)
#   make refresh      re-execute the committed chapters in place (outputs to commit)
#   make bench        wall times: unit tests, nbval, strict build, chapters, plan at 8,192 cards
#   make lock         re-resolve requirements-lock.txt from pyproject.toml (then `make refresh`)
#   make clean        remove _build and caches (keeps .venv; `make distclean` removes it too)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# Re-installed when pyproject.toml or the lock is newer than this stamp.
STAMP := $(VENV)/.pdcalc-installed
# Exact versions of every dependency: the environment the committed chapter outputs were made with.
LOCK := requirements-lock.txt
UV_VERSION := 0.13.9
# The venv's tools first on PATH, so jupyter-book's kernels are the venv's Python.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYDEVD_DISABLE_FILE_VALIDATION := 1

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: help venv book test test-unit test-nbval check-site refresh bench lock clean distclean

help:
	@sed -n '2,10p' Makefile | sed 's/^# \{0,1\}//'

$(STAMP): pyproject.toml $(LOCK)
	@if [ ! -x "$(PY)" ]; then echo "creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); fi
	$(PY) -m pip install --quiet -c $(LOCK) -e '.[book,test]'
	@touch $@

# One command to update the pins: resolve pyproject.toml's dependencies (extras book and test) afresh
# for Python 3.11 on Linux, the platform CI and the committed outputs use.
lock:
	@if [ ! -x "$(PY)" ]; then $(PYTHON) -m venv $(VENV); fi
	$(PY) -m pip install --quiet 'uv==$(UV_VERSION)'
	$(BIN)/uv pip compile pyproject.toml --extra book --extra test --python-version 3.11 \
	  --python-platform linux --upgrade --quiet -o $(LOCK)
	@echo "$(LOCK) updated: run 'make refresh' and 'make test', then commit the lock with the refreshed chapters."

venv: $(STAMP)

# jupyter-book talks to each chapter's kernel over local TCP (127.0.0.1) without encryption, and ipykernel 7
# logs a warning about it on every kernel start (one per chapter). Nothing crosses the machine, so the build
# drops exactly that line from stderr; every other line, and jupyter-book's exit status, pass through.
KERNEL_TCP_WARNING := Kernel is running over TCP without encryption
WITHOUT_KERNEL_TCP_WARNING = { $(1) 2>&1 1>&3 | { grep -v -F '$(KERNEL_TCP_WARNING)' || true; } >&2; } 3>&1

book: $(STAMP)
	$(call WITHOUT_KERNEL_TCP_WARNING,$(BIN)/jupyter-book build --all -W --keep-going .)
	@echo
	@echo "Book built. Open: file://$(CURDIR)/_build/html/index.html"

# One pytest run: the unit tests under tests/ (with the precision scan of every committed output) and,
# with nbval, every chapter under book/. test-unit and test-nbval run the two parts alone.
test: $(STAMP)
	$(PY) -m pytest $(NBVAL) tests book

test-unit: $(STAMP)
	$(PY) -m pytest tests

test-nbval: $(STAMP)
	$(PY) -m pytest $(NBVAL) book

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
