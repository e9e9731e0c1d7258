# pdserve developer entry points. `make test` sets everything up from nothing.
SHELL := /bin/bash
PY_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
K8S_BIN := .cache/k8s/bin
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`'s first pass (every test but the control-plane ones; the
# second pass runs those beside it, in one process: tools/test_passes.sh, the root conftest.py): the machine's CPUs,
# at most 4 (each worker can start a vLLM conformance process of ~1-2 GB). 0: one process.
PYTEST_WORKERS ?= $(shell $(PY_SYS) -c "import os; print(min(4, len(os.sched_getaffinity(0))))")
TEST_ENV = PDSERVE_CONFORMANCE_REQUIRED=1 PDSERVE_LOAD_REQUIRED=1 PDSERVE_K8S_BIN=$(abspath $(K8S_BIN))

.PHONY: test setup lint unit conformance conformance-env load-env venv system-deps k8s-bins demo crds dashboard bench bench-smoke disk-usage clean help

help:
	@echo "make demo   - run the whole loop locally on mock workers (no cluster)"
	@echo "make test   - set up everything from nothing and run the whole suite (then make bench-smoke)"
	@echo "make bench-smoke - run every benchmark script on a tiny input"
	@echo "make conformance - vLLM's own code judges pdserve, per supported version (rewrites conformance/RESULTS.md)"
	@echo "make lint   - ruff and mypy (make test runs it)"

$(VENV)/.installed: pyproject.toml
	$(PY_SYS) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Everything `make test` needs. The first four side by side (the Go build is CPU-bound, the
# others mostly download: cold, they overlap minutes of it); conformance-env after them, so
# its ~8 GB peak and the Go build's temporary caches (~4.7 GB) are not on disk at once.
setup:
	$(MAKE) --no-print-directory -j4 venv system-deps k8s-bins load-env
	$(MAKE) --no-print-directory conformance-env

# Debian packages the integration tests use (a real Prometheus server).
system-deps:
	@if ! command -v prometheus >/dev/null 2>&1; then \
	  echo "installing Debian packages: prometheus"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends prometheus; \
	fi

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok built
# from source with the Go toolchain; cached under .cache/ (git-ignored).
k8s-bins:
	bash e2e/controlplane/build-binaries.sh $(K8S_BIN)

crds: venv
	$(VENV)/bin/pdserve crd --out crds/ --out charts/pdserve/crds/ --reference docs/crd-reference.md --versions-doc docs/install.md

dashboard: venv
	$(VENV)/bin/pdserve dashboard --out charts/pdserve/dashboards/pdserve.json

# Lint rules and types (config in pyproject.toml); `make test` runs it first.
lint:
	@test -x $(VENV)/bin/mypy -a -x $(VENV)/bin/ruff || $(MAKE) venv
	$(VENV)/bin/ruff check src tests e2e bench conformance tools
	$(VENV)/bin/mypy

test: setup
	@$(MAKE) --no-print-directory lint
	$(TEST_ENV) bash tools/test_passes.sh $(PY) $(PYTEST_WORKERS) $(PYTEST_ARGS)
	PDSERVE_K8S_BIN=$(abspath $(K8S_BIN)) $(MAKE) --no-print-directory bench-smoke
	@$(MAKE) --no-print-directory disk-usage

# Bytes on disk of what `make test` set up (a CI run once ran out of space): the venvs, .cache/
# (conformance venvs, control-plane binaries, load venv) and the kept wheels in the user's cache.
WHEEL_CACHE = $(or $(PDSERVE_WHEEL_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pdserve)
disk-usage:
	@du -sb $(VENV)/ $(wildcard .cache/*/) $(WHEEL_CACHE) 2>/dev/null | awk '{t += $$1; printf "[disk] %6.2f GB  %s\n", $$1/1e9, $$2} END {printf "[disk] %6.2f GB  total\n", t/1e9}'

# Every benchmark script on a tiny input (seconds each, outputs in a temporary folder),
# so none of them rots; numbers are not checked here (bench/smoke.py).
bench-smoke: venv
	PYTHONPATH=$(abspath src) $(PY) bench/smoke.py

# One venv per supported vLLM version under .cache/conformance/ (git-ignored), from the
# pinned lists in conformance/requirements/; rebuilt only when a list changes.
conformance-env:
	$(PY_SYS) conformance/setup_env.py

# NVIDIA's aiperf (pyproject's `load` extra) in its own venv, .cache/load-venv (git-ignored);
# rebuilt only when the extra changes. The demo's --load-engine aiperf and its test use it.
load-env:
	$(PY_SYS) tools/setup_load_env.py

# The conformance tier alone; a missing venv or a check that compared nothing fails.
# Counts go to a file of this run only (worktrees may share .cache/).
conformance: venv conformance-env
	counts=$$(mktemp .cache/conformance/counts.XXXXXX) && \
	PDSERVE_CONFORMANCE_COUNTS=$$counts PDSERVE_CONFORMANCE_REQUIRED=1 $(PY) -m pytest -ra $(PYTEST_ARGS) tests/conformance && \
	$(PY) conformance/report.py --counts $$counts

unit: venv
	$(PY) -m pytest -ra -m "not controlplane and not prometheus" $(PYTEST_ARGS) tests

demo: venv
	$(VENV)/bin/pdserve demo

clean:
	rm -rf $(VENV) .pytest_cache build dist
