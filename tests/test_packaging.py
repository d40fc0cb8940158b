"""What ships: the wheel holds the package data, and the zoo command works from an installed wheel."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_package_data_and_runs_the_zoo_from_an_install(tmp_path: Path) -> None:
    # Build the wheel from the checkout (with the build tools of this environment: no download)
    subprocess.run(
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
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("sb3_reset_ppo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for member in ("sb3_reset_ppo/zoo/reset_ppo.yml", "sb3_reset_ppo/py.typed", "sb3_reset_ppo/envs/cue_recall.py"):
        assert member in names, f"{member} is not in {wheel.name}"
    # Install it apart from the checkout; run from a folder where the checkout is not importable
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import sb3_reset_ppo; print(sb3_reset_ppo.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(site)), where.stdout
    result = subprocess.run(
        [sys.executable, "-m", "sb3_reset_ppo.zoo", "train", "--algo", "reset_ppo", "--env", "CueRecall-v0",
         "-n", "512", "-f", str(tmp_path / "logs"), "--seed", "0", "--hyperparams", "n_envs:2", "n_steps:32"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "logs" / "reset_ppo" / "CueRecall-v0_1" / "CueRecall-v0.zip").exists()
