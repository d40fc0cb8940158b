# Every target creates .venv and installs what it needs on a fresh machine.
# torch is pinned (the CPU wheel that pip's find-links hold here): an unpinned torch would pull a multi-GB CUDA build.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat setup.cfg benchmarks/pyproject.toml | cksum | cut -d' ' -f1)
# pip's find-links (pip config), each as uv's --find-links
FIND_LINKS = $(foreach dir,$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null),--find-links $(dir))
# The Python versions supported (setup.cfg's python_requires is the first, its classifiers all of them; pyproject's
# mypy python_version and ruff target-version the first; tests/packaging/test_python_versions.py checks that they agree)
PYTHON_VERSIONS := 3.11 3.12 3.13
# What mypy checks (pyproject's [tool.mypy] files), byte-compiled by each interpreter
SOURCES := sb3_reset_ppo tests examples benchmarks

.PHONY: install lint type pyversions test test-package test-benchmarks test-slow test-matrix demo figures docs clean

# uv installs: it downloads and unpacks in parallel, with a sixth of pip's CPU time (about 20 s against 105 s here).
# It does not read pip's configuration, so it is given pip's find-links, where a CPU torch wheel may lie. The venv
# keeps pip: tests/packaging installs the built wheel with it
$(STAMP): setup.cfg pyproject.toml benchmarks/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv
	# The package with every extra and torch, and the benchmarks' own project (benchmarks/pyproject.toml: the package
	# `benchmarks`) on it, in one resolution
	$(BIN)/uv pip install -q --python $(BIN)/python $(FIND_LINKS) "$(TORCH)" \
		-e ".[tests,plots,zoo,evidence,docs,compare,cluster,deploy,masking-study]" -e benchmarks
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

type: install
	$(BIN)/mypy

# The versions after the first: mypy with each (in parallel; the first is make type's), and every supported
# interpreter found (python3.X on PATH, else pyenv's newest 3.X) byte-compiles the sources; one not found is skipped.
# torch is installed for the venv's Python only, so the tests themselves run on that one
pyversions: install
	@status=0; pids=""; \
	for v in $(wordlist 2,$(words $(PYTHON_VERSIONS)),$(PYTHON_VERSIONS)); do \
		echo "mypy --python-version $$v"; $(BIN)/mypy --python-version $$v & pids="$$pids $$!"; \
	done; \
	for pid in $$pids; do wait $$pid || status=1; done; \
	pycache=$$(mktemp -d); \
	for v in $(PYTHON_VERSIONS); do \
		py=""; \
		for candidate in python$$v $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null | sort -V -r); do \
			if [ "$$($$candidate -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$$v" ]; then \
				py=$$candidate; break; \
			fi; \
		done; \
		if [ -z "$$py" ]; then echo "python$$v: not found, skipped"; continue; fi; \
		echo "python$$v ($$py): compileall $(SOURCES)"; \
		PYTHONPYCACHEPREFIX=$$pycache $$py -m compileall -q $(SOURCES) || { echo "python$$v cannot compile them"; status=1; }; \
	done; \
	rm -rf $$pycache; \
	exit $$status

test: lint type pyversions test-package test-benchmarks

# The tests handed to the two workers one at a time (--maxschedchunk 1): a worker free takes the next. The longest
# tests come first (tests/conftest.py and benchmarks/tests/conftest.py name them), so that the workers end within a
# short test of each other instead of one waiting for a long test that started last. The package's tests
test-package: install
	$(BIN)/python -m pytest -n 2 --dist load --maxschedchunk 1 -rs tests

# The benchmarks' tests (benchmarks/tests: the study kit, every study's pages regenerated from its stored runs, the
# speed scripts); loadgroup: the tests that read one study's regenerated pages share one worker, which makes them once.
# The longest tests (the study regenerations) start first: benchmarks/tests/conftest.py orders them
test-benchmarks: install
	$(BIN)/python -m pytest -n 2 --dist loadgroup -rs benchmarks/tests

# The whole settings matrix (tests/oracles/matrix.py): every triple of option values in some combination (the default suite
# runs every pair); its last result is summarised in docs/guide/reliability.md
test-matrix: install
	SB3_RESET_PPO_MATRIX=full $(BIN)/python -m pytest -n 2 -rs tests/reset_ppo/test_settings_matrix.py tests/export/test_export_matrix.py

# The slow tests, and the property tests with all their examples (the default suite runs a quarter of them)
test-slow: install
	HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest -m 'slow or hypothesis' tests benchmarks/tests

# The demo needs the package and its plots only: installed alone, without the other extras (Ray, Optuna, OpenSpiel,
# Sphinx, ...), unless make install already installed everything
DEMO_STAMP := $(VENV)/.demo-installed-$(shell cat setup.cfg | cksum | cut -d' ' -f1)

$(DEMO_STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[plots]"
	rm -f $(VENV)/.demo-installed-*
	touch $(DEMO_STAMP)

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/python examples/demo.py

figures: install
	$(BIN)/python examples/weight_profile.py

# The documentation site, warnings as errors (open docs/_build/html/index.html)
docs: install
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis docs/_build
