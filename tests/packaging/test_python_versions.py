"""The supported Python versions are named alike wherever they are declared or checked."""

import configparser
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    return parser


def _makefile_versions() -> list[str]:
    """``PYTHON_VERSIONS`` of the Makefile, whose ``pyversions`` target checks each of them."""
    match = re.search(r"^PYTHON_VERSIONS\s*:?=\s*(.+)$", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    assert match, "the Makefile defines no PYTHON_VERSIONS"
    return match.group(1).split()


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_python_requires_classifiers_and_ci_name_the_same_versions() -> None:
    setup = _setup_cfg()
    checked = _makefile_versions()
    assert checked == sorted(checked, key=_key) and len(set(checked)) == len(checked), checked
    minimum = checked[0]
    # python_requires: from the first version checked on, with no upper bound
    assert setup.get("options", "python_requires").strip() == f">={minimum}"
    classifiers = setup.get("metadata", "classifiers").split("\n")
    prefix = "Programming Language :: Python :: "
    declared = [c.strip()[len(prefix) :] for c in classifiers if re.fullmatch(r"\d+\.\d+", c.strip()[len(prefix) :])]
    assert declared == checked


def test_the_linters_target_the_minimum_version() -> None:
    minimum = _makefile_versions()[0]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["ruff"]["target-version"] == "py" + minimum.replace(".", "")
    # make type checks the minimum (pyproject's python_version), make pyversions the others
    assert pyproject["tool"]["mypy"]["python_version"] == minimum


def test_ci_runs_the_version_checks_before_the_tests() -> None:
    makefile = (ROOT / "Makefile").read_text()
    test_target = re.search(r"^test:(.*)$", makefile, flags=re.MULTILINE)
    assert test_target and "pyversions" in test_target.group(1).split()
    recipe = makefile[makefile.index("\npyversions:") :].split("\n\n")[0]
    # The versions after the first through mypy, every version through its interpreter, none written out
    assert "$(wordlist 2,$(words $(PYTHON_VERSIONS)),$(PYTHON_VERSIONS))" in recipe and "--python-version $$v" in recipe
    assert "for v in $(PYTHON_VERSIONS)" in recipe and "compileall" in recipe
    assert not re.search(r"3\.1\d", recipe)


def test_the_tests_run_on_a_supported_version() -> None:
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in _makefile_versions()
