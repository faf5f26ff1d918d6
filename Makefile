# upfl in three commands (README.md): `make install`, `make quick`, `make test`.
#   make install   a virtual environment .venv with CPU torch, upfl (editable), Snakemake 9, pytest and Flower
#   make quick     the quick preset (every synthetic table and figure) and its report, results/report.html
#   make paper     the whole paper (config/config.yaml) and its report (downloads the authors' data once)
#   make test      the test suite (docs/testing.md)
#   make lint      ruff (lint and format check), mypy on src/upfl, Snakemake's lint and snakefmt on the workflow
#   make lock      rewrite requirements/cpu-lock.txt from .venv (after an upgrade there; docs/testing.md)
# Variables: TORCH (the torch requirement), TORCH_INDEX (extra package index searched for it; the CPU wheels by
# default, e.g. TORCH_INDEX=https://download.pytorch.org/whl/cu126 for a CUDA build, TORCH_INDEX= for none),
# PYTHON (the interpreter that makes the environment), VENV (its folder), CORES (Snakemake's --cores), LOCK (the
# exact versions installed, requirements/cpu-lock.txt by default; LOCK= for the newest versions pyproject.toml allows).

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
CORES ?= all
LOCK ?= requirements/cpu-lock.txt

BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export VIRTUAL_ENV := $(abspath $(VENV))

CONSTRAINTS := $(if $(LOCK),-c $(LOCK))

.PHONY: install quick paper test lint lock

install:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --retries 0 $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) $(CONSTRAINTS) "$(TORCH)"
	$(BIN)/pip install $(CONSTRAINTS) -e ".[test,flower]"

quick:
	$(BIN)/snakemake --cores $(CORES) --configfile config/quick.yaml
	$(BIN)/snakemake --report results/report.html --configfile config/quick.yaml

paper:
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --report results/report.html

test:
	$(BIN)/python -m pytest -q

lint:
	$(BIN)/pip install --retries 0 $(CONSTRAINTS) -e ".[lint]"
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/python tools/workflow_lint.py
	$(BIN)/snakefmt --check workflow

# The lock: every distribution of .venv but upfl, at its exact version (torch without its +cpu label: the CPU index
# supplies the +cpu build, and CUDA builds stay out as long as TORCH_INDEX is the CPU index).
lock:
	{ echo "# Exact versions of the CPU install (make install; make lock rewrites this file from .venv)."; \
	  $(BIN)/pip freeze --exclude-editable | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)
