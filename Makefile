# Everything a fresh machine needs: `make run` and `make test` create the
# virtualenv on first use (and update it when pyproject.toml or the lock changes).
# Python 3.11 or newer: the first of python3, python3.14 … python3.11 that is,
# unless PYTHON=/path/to/python says which.
PYTHON ?= $(shell for p in python3 python3.14 python3.13 python3.12 python3.11; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo "$$p"; exit; }; \
	done; echo python3)
VENV ?= .venv
LOCAL_VENV ?= .venv-local
PY := $(VENV)/bin/python
LPY := $(LOCAL_VENV)/bin/python
PYTEST_ARGS ?=
# torch for the local-inference suite: the CPU build. PyPI's Linux wheel is the
# multi-GB CUDA build; the PyTorch CPU index has the same version without CUDA.
TORCH := $(shell grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu

.PHONY: install install-local run lint format test test-core test-local bench bench-quick clean FORCE

# An interpreter's version and installation: a virtualenv whose python differs
# from $(PYTHON)'s (made by another Python, or broken) is made again.
py_id = $(shell $(1) -c 'import sys; print(sys.version.split()[0], sys.base_prefix)' 2>/dev/null)
ifneq ($(call py_id,$(PY)),$(call py_id,$(PYTHON)))
$(VENV)/.locked: FORCE
endif
ifneq ($(call py_id,$(LPY)),$(call py_id,$(PYTHON)))
$(LOCAL_VENV)/.installed: FORCE
endif

# $(call venv,DIR): DIR made by $(PYTHON) (3.11+), unless it already is.
define venv
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: this project needs Python 3.11 or newer; PYTHON=$(PYTHON) is" \
	    "$$($(PYTHON) --version 2>/dev/null || echo 'not found')" >&2; \
	  echo "Install Python 3.11+ and name it: make $(or $(MAKECMDGOALS),install) PYTHON=python3.11" >&2; \
	  exit 1; }
	@if [ "$$($(1)/bin/python -c 'import sys; print(sys.version.split()[0], sys.base_prefix)' 2>/dev/null)" \
	    != "$$($(PYTHON) -c 'import sys; print(sys.version.split()[0], sys.base_prefix)')" ]; then \
	  echo "creating $(1) with $$($(PYTHON) --version) ($(PYTHON))"; \
	  rm -rf $(1) && $(PYTHON) -m venv $(1) && $(1)/bin/python -m pip install -q --upgrade pip; \
	fi
endef

# What running needs, from the lock (every file pinned by hash), then the bot itself.
$(VENV)/.locked: pyproject.toml requirements.txt
	$(call venv,$(VENV))
	$(PY) -m pip install -q --require-hashes -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# The tests and linters on top; the locked packages stay as they are. (The lock gets
# a pip call of its own: a hash anywhere in a call, even in a -c file, puts all of it
# in --require-hashes mode, which the unhashed dev extra would fail.)
$(VENV)/.installed: $(VENV)/.locked
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(LOCAL_VENV)/.installed: pyproject.toml
	$(call venv,$(LOCAL_VENV))
	# torch first, the CPU build, so nothing can pull the multi-GB CUDA one (what it
	# needs comes with the next line, from the usual index)
	$(LPY) -m pip install -q --no-deps --extra-index-url $(TORCH_INDEX_URL) $(TORCH)
	$(LPY) -m pip install -q -e '.[dev,local]'
	touch $@

install: $(VENV)/.installed
install-local: $(LOCAL_VENV)/.installed

## run: set up and run the bot (Discord/Slack when their tokens are set, else the terminal chat)
run: $(VENV)/.locked
	$(PY) -m bot run

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## test: lint, the main suite (SQLite, and PostgreSQL when TEST_DATABASE_URL is set) and the
## local-inference suite; each runs even when one before it failed, and the end says how each went
## The local venv (torch, a few minutes of pip) is made in the background while lint and
## the main suite run; its output is shown only if it failed.
test:
	@failed=0; summary=""; \
	$(MAKE) --no-print-directory install >/dev/null || { echo "make install failed" >&2; exit 1; }; \
	$(MAKE) --no-print-directory install-local >.install-local.log 2>&1 & local_pid=$$!; \
	for step in "lint:lint" "test-core:core tests" "test-local:local tests"; do \
	  target=$${step%%:*}; name=$${step#*:}; \
	  if [ "$$target" = test-local ] && ! wait $$local_pid; then \
	    cat .install-local.log >&2; echo "making $(LOCAL_VENV) failed (above)" >&2; \
	  fi; \
	  if $(MAKE) --no-print-directory $$target; then result=passed; else result=FAILED; failed=1; fi; \
	  summary="$$summary$$name: $$result\n"; \
	done; \
	printf "\n$$summary"; exit $$failed

# The main suite on every core (pytest-xdist; TEST_WORKERS=0: in one process). Its
# tests are independent: ports are free ones, PostgreSQL tests a schema each.
TEST_WORKERS ?= auto
test-core: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --ignore=tests/core/experts/local $(PYTEST_ARGS)

test-local: install-local
	$(LPY) -m pytest -q tests/core/experts/local $(PYTEST_ARGS)

## bench: the scripts that need nothing but the loopback fakes (the README says how to run the rest)
bench: install install-local
	$(PY) benchmarks/discord_defer.py
	$(PY) benchmarks/slack_ack.py
	$(LPY) benchmarks/local_inference.py
	$(PY) benchmarks/agent_soak.py

## bench-quick: the performance targets against loopback fakes, quick (about a minute); full run: $(PY) -m benchmarks
bench-quick: install
	$(PY) -m benchmarks --quick

clean:
	rm -rf $(VENV) $(LOCAL_VENV) .pytest_cache .ruff_cache
