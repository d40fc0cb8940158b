"""
What ships: the wheel holds the package data, and the zoo command works from an installed wheel; the extras never
install both pygames, and the tests extra holds the build requirements.
"""

import configparser
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """Run ``command``, failing with its stderr (and stdout) in the assertion message if it exits with an error."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(command)} exited with {result.returncode}\n"
        f"stderr:\n{result.stderr[-4000:]}\nstdout:\n{result.stdout[-2000:]}"
    )
    return result


def test_a_failing_step_shows_its_stderr() -> None:
    with pytest.raises(AssertionError, match=r"(?s)exited with 3.*stderr:\s*no bdist_wheel"):
        _run([sys.executable, "-c", "import sys; sys.stderr.write('no bdist_wheel'); sys.exit(3)"])


def _missing_build_requirements() -> list[str]:
    """pyproject.toml's build requirements that this environment does not satisfy."""
    missing = []
    for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]:
        requirement = Requirement(line)
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            missing.append(f"{line} (installed: {version})")
    return missing


def test_wheel_holds_package_data_and_runs_the_zoo_from_an_install(tmp_path: Path) -> None:
    # Build the wheel from the checkout (with the build tools of this environment: no download); the tests extra
    # installs them
    missing = _missing_build_requirements()
    assert not missing, f"the build requirements {missing} are missing: pip install -e '.[tests]'"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("sb3_reset_ppo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    members = ("sb3_reset_ppo/zoo/reset_ppo.yml", "sb3_reset_ppo/py.typed", "sb3_reset_ppo/envs/cue_recall.py")
    for member in (*members, "sb3_reset_ppo/compare.py", "sb3_reset_ppo/experiments/compare/cli.py"):
        assert member in names, f"{member} is not in {wheel.name}"
    # Install it apart from the checkout; run from a folder where the checkout is not importable
    site = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)], timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site)}
    # Where the package is found (without importing it: that would import torch, seconds of CPU)
    find = "import importlib.util; print(importlib.util.find_spec('sb3_reset_ppo').origin)"
    where = _run([sys.executable, "-c", find], cwd=tmp_path, env=env)
    assert where.stdout.strip().startswith(str(site)), where.stdout
    # The comparison command from the install: it trains through the zoo's command line from the install (with the
    # packaged config), its runs record no commit (no checkout), its report is written
    out = tmp_path / "compare"
    _run(
        [sys.executable, "-m", "sb3_reset_ppo.compare", "--env", "CueRecall-v0", "--seeds", "1", "--timesteps", "512",
         "--evaluations", "2", "--eval-episodes", "2", "--final-evaluations", "1", "--hyperparams", "n_envs:2",
         "n_steps:32", "--workers", "2", "--out", str(out)],
        cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    run_dir = out / "runs" / "reset_ppo" / "CueRecall-v0" / "seed0"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["returncode"] == 0 and run["commit"] == "" and not run["dirty"]
    assert " -m sb3_reset_ppo.zoo train " in run["command"], run["command"]
    assert f"--conf-file {site / 'sb3_reset_ppo' / 'zoo' / 'reset_ppo.yml'} " in run["command"], run["command"]
    assert (run_dir / "reset_ppo" / "CueRecall-v0_1" / "CueRecall-v0.zip").exists()
    assert (out / "REPORT.md").exists() and (out / "figures" / "return_vs_seconds.png").exists()


def _extras() -> dict[str, list[str]]:
    """The extras of setup.cfg: name -> requirement names (lower case, ``_`` as ``-``)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    extras = {}
    for extra, value in parser["options.extras_require"].items():
        lines = [line.split("#")[0].strip() for line in value.splitlines()]
        extras[extra] = [re.split(r"[<>=!~;\[ ]", line)[0].lower().replace("_", "-") for line in lines if line]
    return extras


def test_extras_do_not_mix_pygame_and_pygame_ce() -> None:
    # minigrid (the evidence extra) requires pygame-ce, which installs into the same `pygame` folder as pygame
    extras = _extras()
    assert "minigrid" in extras["evidence"]
    assert all("pygame" not in names for names in extras.values()), extras
    assert "pygame-ce" in extras["zoo"]  # enjoy's window


def test_compare_extra_holds_what_the_zoo_cli_imports() -> None:
    # compare trains through rl_zoo3.cli, whose load_from_hub imports requests although rl_zoo3 does not require it:
    # without it every run of a compare installed with the compare extra alone failed at its first line
    from sb3_reset_ppo.experiments.compare.planning import TRAIN_MODULES

    extras = _extras()
    assert "requests" in extras["zoo"] and "requests" in extras["compare"], extras
    for module, extra in TRAIN_MODULES.items():
        assert module.replace("_", "-") in extras[extra], (module, extra, extras[extra])
    assert "requests" in TRAIN_MODULES  # checked before any training, with the extra's install command


def test_installed_distributions_do_not_hold_both_pygames() -> None:
    names = {str(dist.metadata["Name"]).lower().replace("_", "-") for dist in importlib.metadata.distributions()}
    assert not {"pygame", "pygame-ce"} <= names, (
        "pygame and pygame-ce are both installed (one overwrites the other's files): "
        "pip uninstall -y pygame && pip install --force-reinstall --no-deps pygame-ce"
    )


def test_tests_extra_holds_the_build_requirements() -> None:
    # The wheel above is built with this environment's build tools (--no-build-isolation)
    tomllib = pytest.importorskip("tomllib")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    tests = {line.strip() for line in parser["options.extras_require"]["tests"].splitlines() if line.strip()}
    assert set(requires) <= tests, (requires, tests)
    # bdist_wheel is part of setuptools from 70.1 (setuptools 65 of a fresh Python 3.11 venv has none without wheel)
    assert any(r.startswith("setuptools>=") and tuple(map(int, r.split(">=")[1].split("."))) >= (70, 1) for r in requires)


def test_no_merge_conflict_markers_in_sources() -> None:
    marker = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)
    files = [path for folder in ("sb3_reset_ppo", "docs", "tests") for path in (ROOT / folder).rglob("*.py")]
    files += [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    marked = [str(path.relative_to(ROOT)) for path in files if marker.search(path.read_text(encoding="utf-8"))]
    assert not marked, f"merge conflict markers in {marked}"
