"""``code_version``: the commit of this project's checkout, never that of a repository the package merely sits in."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sb3_reset_ppo.experiments import runner

PACKAGE = Path(runner.__file__).resolve().parents[1]


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _other_project(path: Path, package_dir: Path) -> None:
    """A git repository of another project (its own setup.cfg), with a copy of the package at ``package_dir``."""
    path.mkdir()
    _git(path, "init", "-q")
    (path / "setup.cfg").write_text("[metadata]\nname = other-project\n")
    shutil.copytree(PACKAGE, package_dir / "sb3_reset_ppo", ignore=shutil.ignore_patterns("__pycache__"))
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "other project")
    assert _git(path, "rev-parse", "HEAD")


@pytest.mark.parametrize("where", ["top_level", "venv"])
def test_code_version_is_empty_in_another_projects_repository(tmp_path: Path, where: str) -> None:
    other = tmp_path / "other"
    # At the other repository's top level, or in a virtual environment inside it
    package_parent = other if where == "top_level" else other / ".venv" / "lib" / "python3.11" / "site-packages"
    _other_project(other, package_parent)
    assert runner.code_version(root=package_parent) == {"commit": "", "dirty": False}
    # An uncommitted change there is not this code's either
    (package_parent / "sb3_reset_ppo" / "version.py").write_text("__version__ = '9'\n")
    assert runner.code_version(root=package_parent) == {"commit": "", "dirty": False}


def test_code_version_is_empty_outside_git(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "sb3_reset_ppo", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "setup.cfg").write_text("[metadata]\nname = sb3-reset-ppo\n")
    assert runner.code_version(root=tmp_path) == {"commit": "", "dirty": False}


def test_code_version_is_head_in_this_checkout() -> None:
    root = PACKAGE.parent
    if not (root / ".git").exists() or not (root / "setup.cfg").is_file():
        pytest.skip(f"the package is not in a git checkout of this project ({root})")
    version = runner.code_version()
    assert version["commit"] == _git(root, "rev-parse", "HEAD")
    assert len(version["commit"]) == 40
    assert version["dirty"] == bool(_git(root, "status", "--porcelain", "--", "sb3_reset_ppo"))


def test_a_git_stopped_by_a_signal_is_an_error_not_an_unknown_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A git that a signal stops would have recorded the run with no commit ("" is for a copy outside this checkout)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text("#!/bin/sh\nkill -TERM $$\n")
    (fake / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    with pytest.raises(RuntimeError, match=r"git rev-parse was stopped by signal 15: the commit is not known"):
        runner.code_version(root=PACKAGE.parent)
