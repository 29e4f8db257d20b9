# `make demo` and `make test` work on a fresh clone: each creates .venv and installs pskv into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test stress soak bench venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,torch]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pskv demo

# Bytecode of pskv and the tests, written once: where PYTHONDONTWRITEBYTECODE=1 (as on our CI
# machine) no process writes it, and every node process the tests start compiled pskv again
# (0.13 s of CPU each). (For the same reason pip must keep compiling site-packages at install.)
test: $(STAMP)
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
