# Every target creates .venv and installs what it needs on a fresh machine.
# torch is installed first and pinned: an unpinned torch would pull a multi-GB CUDA build.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat setup.cfg | cksum | cut -d' ' -f1)

.PHONY: install lint type test test-slow demo figures docs clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[tests,plots,zoo,evidence,docs,compare,cluster]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

type: install
	$(BIN)/mypy

test: lint type
	$(BIN)/python -m pytest -n 2 tests

test-slow: install
	$(BIN)/python -m pytest -m slow tests

demo: install
	$(BIN)/python examples/demo.py

figures: install
	$(BIN)/python examples/weight_profile.py

# The documentation site, warnings as errors (open docs/_build/html/index.html)
docs: install
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis docs/_build
