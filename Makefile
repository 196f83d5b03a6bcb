# ringleader: `make demo` sets everything up and runs the main scenario; `make test` runs the checks.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTHON ?= python3

.PHONY: setup demo test lint typecheck unit bench clean test-packages lab-horovod lab-dli

setup: $(STAMP)

# Open MPI from Debian (mpirun + mpicc for building mpi4py against it), ssh and iproute2 (ssh hosts
# and the emulated cluster of `cluster up`), Chromium where we may install it (it renders the HTML
# reports in tests), then a virtual env with the CPU build of torch, mpi4py compiled for that MPI,
# and ringleader with its extras.
DEBS := openmpi-bin libopenmpi-dev openssh-client openssh-server iproute2
$(STAMP): pyproject.toml
	@if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null || ! command -v ssh >/dev/null \
	    || ! test -x /usr/sbin/sshd || ! command -v tc >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBS); \
	  else \
	    echo "Open MPI, ssh or iproute2 is missing: run 'sudo apt-get install $(DEBS)' and retry" >&2; exit 2; \
	  fi; \
	fi
	@# Chromium renders the HTML reports in the rendered-output tests (they skip without it).
	@if ! command -v chromium >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
	    || echo "chromium not installed: the rendered-report tests will skip" >&2; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	MPICC=mpicc $(PY) -m pip install -q --no-binary mpi4py mpi4py
	$(PY) -m pip install -q -e '.[bench,sim,kube,dev]'
	@touch $(STAMP)

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/demo.sh

# The two labs end to end, their outputs under examples/labs/ (see scripts/labs.sh).
# lab-horovod first installs Horovod into the venv, built from its sdist (scripts/install-horovod.sh:
# 15-30 minutes the first time on 2 cores, the wheel kept for the next).
lab-horovod: setup
	PYTHON=$(PY) bash scripts/install-horovod.sh
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/labs.sh horovod examples/labs/horovod

lab-dli: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/labs.sh dli examples/labs/dli

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: setup
	$(VENV)/bin/mypy

# The test files run side by side in 6 processes (most tests wait on processes, sockets, daemons
# and real control planes rather than compute: 4 left the 2 cores a third idle); tests/conftest.py
# says what makes that safe, and no test bounds a wall time, so a busier machine changes no result.
# Python's bytecode caches are written for the test run even where the environment forbids them
# (PYTHONDONTWRITEBYTECODE, as on this project's machines and in many containers): the tests start
# thousands of Python processes, and without the caches each compiled every ringleader module it
# imports again (0.1-0.2 s of CPU each) and each test process rewrote every test module's asserts
# (13 of its 21 s of collection). One collection first writes the test modules' cache, so that the
# six processes beside each other read it rather than each writing its own (its output is dropped:
# the run after it reports any error).
unit: setup
	export PYTHONDONTWRITEBYTECODE=; $(PY) -m pytest -qq --collect-only >/dev/null; \
	  $(PY) -m pytest -q -n 6 --dist loadfile

# Debian packages for the tests that run real systems, installed only as root (those tests need
# root anyway and skip with a reason elsewhere), in one apt run:
# - Slurm (slurmctld, slurmd, clients) for the real-Slurm engine tests, with its accounting:
#   slurmdbd and MariaDB (team queues on Slurm are slurmdbd's accounts and QOS; the tests start a
#   private MariaDB and slurmdbd, see src/ringleader/engines/slurm/sandboxdb.py);
# - a real container runtime for the --image tests: podman, runc (crun, podman's default, cannot
#   set up cgroups on a hybrid-cgroup host such as a container) and debootstrap (the tests build
#   their image from a minimal Debian root file system, no registry). The tests give podman a
#   settings file (CONTAINERS_CONF): runc, cgroupfs (no systemd), and default ulimits within this
#   host's hard limits (podman's defaults are higher, and runc cannot raise them); see
#   tests/trainimage.py.
TEST_DEBS := slurm-wlm slurmdbd mariadb-server podman runc debootstrap
TEST_COMMANDS := slurmctld slurmd sbatch slurmdbd mariadbd podman runc debootstrap
TEST_PACKAGES := $(if $(filter 0,$(shell id -u)),test-packages,)

test-packages:
	@for c in $(TEST_COMMANDS); do command -v $$c >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(TEST_DEBS); \
	fi

test: $(TEST_PACKAGES) lint typecheck unit

bench: setup
	$(PY) benchmarks/placement.py

clean:
	rm -rf $(VENV) .demo
