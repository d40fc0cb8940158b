"""Each example runs with a tiny budget and writes what it promises."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True, check=True, timeout=300
    )
    return result.stdout


def test_demo(tmp_path: Path) -> None:
    out = _run("demo.py", "--total-timesteps", "1024", "--eval-episodes", "20", "--output-dir", str(tmp_path))
    assert "ResetPPO" in out and "random policy" in out
    assert (tmp_path / "learning_curve.png").stat().st_size > 0


def test_weight_profile(tmp_path: Path) -> None:
    _run("weight_profile.py", "--output", str(tmp_path / "profile.png"))
    assert (tmp_path / "profile.png").stat().st_size > 0
