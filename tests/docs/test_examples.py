"""Each example runs with a tiny budget and writes what it promises."""

import runpy
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_example(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """
    An example run as a script (``__name__ == "__main__"``, these arguments) in this process, as ``python SCRIPT`` runs
    it: an interpreter that imports torch costs seconds of CPU. Returns what it prints; an error fails the test.
    """

    def run(script: str, *args: str) -> str:
        path = ROOT / "examples" / script
        monkeypatch.setattr(sys, "argv", [str(path), *args])
        capfd.readouterr()
        runpy.run_path(str(path), run_name="__main__")
        return capfd.readouterr().out

    return run


def test_demo(tmp_path: Path, run_example: Callable[..., str]) -> None:
    from sb3_reset_ppo.common.settings import DEFAULT_WINDOW_SIZE

    out = run_example("demo.py", "--total-timesteps", "1024", "--eval-episodes", "20", "--output-dir", str(tmp_path))
    assert "ResetPPO" in out and "random policy" in out
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    # It trains with the package's default window, and says so as the README does (n_steps=64, batch_size=32)
    assert f"(window_size={DEFAULT_WINDOW_SIZE!r}: windows of 32 steps)" in out
    readme = " ".join((ROOT / "README.md").read_text().replace("`", "").split())
    assert f'window_size (default "{DEFAULT_WINDOW_SIZE}", min(batch_size, n_steps))' in readme


def test_weight_profile(tmp_path: Path, run_example: Callable[..., str]) -> None:
    run_example("weight_profile.py", "--output", str(tmp_path / "profile.png"))
    assert (tmp_path / "profile.png").stat().st_size > 0


def test_quickstart(run_example: Callable[..., str]) -> None:
    out = run_example("quickstart.py", "--total-timesteps", "1024")
    assert "evaluation:" in out and "one episode after save/load" in out
    assert "memory: 2 array(s) of shape (1, 1, 32)" in out


def test_quickstart_with_a_gru(run_example: Callable[..., str]) -> None:
    out = run_example("quickstart.py", "--total-timesteps", "1024", "--policy", "MlpGruPolicy")
    assert "one episode after save/load" in out and "memory: 1 array(s) of shape (1, 1, 32)" in out


def test_loss_scale(tmp_path: Path, run_example: Callable[..., str]) -> None:
    out = run_example("loss_scale.py", "--lengths", "3", "12", "--output", str(tmp_path / "loss.png"))
    assert (tmp_path / "loss.png").stat().st_size > 0
    rows = [[float(cell) for cell in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith(("| 3 ", "| 12 "))]
    (length_short, kept_short, reset_short, mask_short, kept_mean_short, ratio_short), long = rows
    assert (length_short, long[0]) == (3, 12)
    # Shorter episodes: fewer kept slots with masking
    assert kept_short < long[1] < 1.0
    # The claim: reset's and kept_mean's logged entropy term does not depend on the episode length ...
    assert reset_short == long[2] and kept_mean_short == long[4] == reset_short
    # ... the B*W mean's is the same term times the kept fraction, and so is its value loss
    assert mask_short == pytest.approx(reset_short * kept_short, abs=2e-3)
    assert ratio_short == pytest.approx(kept_short, abs=2e-3)


def test_compare_modes(tmp_path: Path, run_example: Callable[..., str]) -> None:
    out = run_example("compare_modes.py", "--total-timesteps", "1024", "--seeds", "1", "--output", str(tmp_path / "modes.png"))
    assert (tmp_path / "modes.png").stat().st_size > 0
    assert out.count("final mean training return") == 3
