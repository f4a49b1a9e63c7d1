# dmsolve: `make demo` and `make test` work on a fresh machine with Python 3.11 and pip.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
MPIEXEC := $(VENV)/bin/mpiexec
STAMP   := $(VENV)/.dmsolve-installed
PETSC_STAMP := $(VENV)/.dmsolve-petsc
# numba caches the compiled kernels next to their modules, in this checkout:
# the stamp of the warm-up lives here too, and goes stale when any module of
# preconditioners/ or topology/ changes (numba then recompiles that module's
# kernels, and the warm-up compiles them again before a demo times them)
WARM_STAMP := .numba-warm
KERNEL_SOURCES := $(wildcard preconditioners/*.py preconditioners/*/*.py topology/*.py)
# Per-rank BLAS threads: 4 ranks on 2 cores with threaded BLAS run several times slower.
export OMP_NUM_THREADS := 1
export OPENBLAS_NUM_THREADS := 1
export MKL_NUM_THREADS := 1
# Wall-clock bound on one whole pytest run, on top of pytest-timeout's per-test bound.
RUN_TIMEOUT ?= 1500
RANKS ?= 2 3 4
TESTS ?= tests
PYTEST_ARGS ?=

.PHONY: setup petsc demo test test-serial test-mpi test-boundscheck bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $(STAMP)

# Compile and cache every numba kernel once (about a minute on a fresh
# checkout), so that the first demo or test run does not compile them
$(WARM_STAMP): $(STAMP) $(KERNEL_SOURCES) tools/warm_kernels.py
	$(MPIEXEC) -n 2 $(PY) -m mpi4py tools/warm_kernels.py
	touch $(WARM_STAMP)

setup: $(STAMP) $(WARM_STAMP)

# Optional [petsc] extra: PETSc and petsc4py built from PyPI sources against the
# mpich wheel's MPI (about 20 minutes the first time; pip caches the wheels).
$(PETSC_STAMP): $(STAMP) tools/install-petsc.sh
	bash tools/install-petsc.sh $(VENV)
	touch $(PETSC_STAMP)

petsc: $(PETSC_STAMP)

demo: setup
	$(MPIEXEC) -n 2 $(PY) -m mpi4py examples/demo.py

test: test-serial test-mpi

test-serial: setup
	timeout $(RUN_TIMEOUT) $(PY) -m pytest -q $(PYTEST_ARGS) $(TESTS)

test-mpi: setup
	@for n in $(RANKS); do \
	  echo "== mpiexec -n $$n pytest =="; \
	  timeout $(RUN_TIMEOUT) $(MPIEXEC) -n $$n $(PY) -m mpi4py -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) $(TESTS) \
	    || exit 1; \
	done

# The numba kernels (preconditioners/_kernels.py, topology/_*kernels.py) index without
# bounds checks; this recompiles them with checks (own cache) and runs their tests.
test-boundscheck: setup
	NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR=$(CURDIR)/.numba-boundscheck \
	  $(MPIEXEC) -n 3 $(PY) -m mpi4py -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) \
	  tests/test_precond.py tests/test_amg.py tests/test_topology_gradient.py \
	  tests/test_topology_persistence.py tests/test_examples.py tests/test_gemslr.py

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .numba-boundscheck $(WARM_STAMP)
