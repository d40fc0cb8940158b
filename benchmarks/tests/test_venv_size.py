"""benchmarks/speed/venv_size.py: it installs what make demo installs, and measures a folder's size on disk."""

import subprocess
from pathlib import Path

from bench_helpers import ROOT, _load


def test_the_target_is_make_demos_install() -> None:
    # make -p prints its variables, make -n a recipe without running it: the target venv_size.py builds is the
    # Makefile's DEMO_STAMP, which installs the pinned torch and the package with its plots only
    target = _load("venv_size").demo_target(ROOT)
    database = subprocess.run(["make", "-n", "-p", "demo"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    assert f"\nDEMO_STAMP := {target}\n" in database
    recipe = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    assert 'pip install -q "torch==2.13.0"' in recipe and 'pip install -q -e ".[plots]"' in recipe


def test_du_counts_the_bytes_a_folder_holds(tmp_path: Path) -> None:
    du_bytes = _load("venv_size").du_bytes
    empty = du_bytes(tmp_path)
    (tmp_path / "data").write_bytes(b"\1" * 1_000_000)
    assert du_bytes(tmp_path) - empty >= 1_000_000
