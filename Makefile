# `make demo` and `make test` work on a fresh clone, in either order: each creates .venv and installs pskv
# into it. The demo needs only the base and [plot] (numpy, pyzmq, numba, tqdm, matplotlib); the tests
# install the dev, torch and docs extras (torch, ray, mkdocs: about 1.8 GB).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint docs stress soak bench venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,torch]'
	touch $(STAMP)

# the light install of `make demo`; nothing to do after `make test`'s full one
$(DEMO_STAMP): $(PY) pyproject.toml
	if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
	    $(PY) -m pip install --quiet --upgrade pip && $(PY) -m pip install --quiet -e '.[plot]'; fi
	touch $(DEMO_STAMP)

venv: $(STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/pskv demo

# the docs site (mkdocs.yml, docs/) into build/site; strict: a broken link or reference fails
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir build/site

# ruff (lint and format) and mypy (types) on src/, as pyproject.toml configures and pins them; mypy keeps its
# cache in .mypy_cache (a first run takes ~30 s of CPU, later ones about a second)
lint: $(STAMP)
	$(PY) -m ruff check src
	$(PY) -m ruff format --check src
	$(PY) -m mypy

# Lint and types first, then the tests. Bytecode of pskv and the tests, written once: where
# PYTHONDONTWRITEBYTECODE=1 (as on our CI machine) no process writes it, and every node process the
# tests start compiled pskv again (0.13 s of CPU each). (For the same reason pip must keep
# compiling site-packages at install.)
test: lint
	$(PY) -m compileall -q src tests
	$(PY) -m pytest -q

# randomized stress rounds under a CPU burner (tests/stress); PSKV_STRESS_SEED=N replays a run
stress: $(STAMP)
	$(PY) -m compileall -q src tests
	$(PY) -m pytest -q -s -n 0 -m stress tests/stress

# 10 minutes of backups, relocation, replication and a checkpoint every 30 s beside a CPU burner:
# exact totals and flat RSS (benchmarks/soak.py; not in CI)
soak: $(STAMP)
	$(PY) benchmarks/soak.py --minutes 10 --every 30

bench: $(STAMP)
	$(PY) benchmarks/bench_kv.py

clean:
	rm -rf $(VENV) build src/*.egg-info
