"""``make demo`` installs what the demo needs (the package and its plots), not every extra; ``make test`` every one."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(target: str, venv: Path) -> list[str]:
    """The installs (pip's or uv's) that ``make TARGET`` would run from a fresh clone (no virtual environment yet)."""
    result = subprocess.run(["make", "-n", "-B", f"VENV={venv}", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.replace("\\\n", " ").splitlines() if re.search(r"(-m|uv) pip install", line)]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_the_package_and_its_plots_only(tmp_path: Path) -> None:
    installs = _dry_run("demo", tmp_path / "fresh")
    extras = [line for line in installs if " -e " in line]
    assert extras == [f'{tmp_path / "fresh"}/bin/python -m pip install -q -e ".[plots]"'], installs
    assert not any("benchmarks" in line for line in installs)
    # make test keeps installing every extra
    assert any("tests,plots,zoo,evidence,docs,compare,cluster,deploy" in line for line in _dry_run("test", tmp_path / "t"))
