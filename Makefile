# Two commands on a fresh machine with Python 3.11, pip and make: `make demo`, `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# Two workers, a test file each: the grading suites already run their students in parallel.
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder
# An index pip also searches, e.g. PyTorch's CPU builds (README: "Why torch==2.13.0 is pinned").
# Empty by default: pip then uses its own configuration (PyPI, or a local wheel folder).
TORCH_INDEX ?=

.PHONY: setup demo test test-fast test-portable lint release release-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -e '.[test]'
	touch $@

setup: $(STAMP)

demo: setup
	$(PY) -m grader demo

test: setup lint
	$(PY) -m pytest $(PYTEST_ARGS)

# Unit tests and checks: no sandboxed class, no nbgrader cycle, no notebook executed (nbval off,
# and not loaded: importing it costs each of pytest's three processes a second or more).
test-fast: setup lint
	$(PY) -m pytest $(PYTEST_ARGS) -p no:nbval -o addopts="-ra --strict-markers" -m "not slow" tests/

# The solutions' stored outputs as on another CPU: PyTorch's kernels without SIMD, MKL's
# compatible (non-AVX) matrix products, one thread; and every CPU-dependent result moved 2 ulps
# up, then down (tests/another_cpu.py).
PORTABLE_ENV := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1
test-portable: setup
	$(PORTABLE_ENV) $(PY) tests/another_cpu.py 2 $(PYTEST_ARGS) solutions/
	$(PY) tests/another_cpu.py -2 $(PYTEST_ARGS) solutions/

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

release: setup
	$(PY) -m grader release

release-check: setup
	$(PY) -m grader release --check

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis
