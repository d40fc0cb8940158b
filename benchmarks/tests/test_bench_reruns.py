"""
Stored runs reused by another study (``benchmarks/studies/coverage/reuse_runs.py``) and re-run for the bitwise precondition
(``benchmarks/studies/coverage/precondition.py``), on fake runs (no training).
"""

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import _fake_run, _load


def test_reuse_only_runs_trained_the_same_way() -> None:
    reuse = _load("reuse_runs")
    # evidence.yml copies fresh_memory.yml's entries for our memory tasks and RepeatPrevious
    for env_id in ("CueRecall-v0", "CueRecallLong-v0", "EarlyChoice-v0", "PopgymRepeatPreviousEasy-v0"):
        assert reuse.same_training("fm_off", "ev_reset", env_id)
        assert reuse.same_training("fm_refresh", "ev_reset_refresh", env_id)
        assert reuse.same_training("gru", "ev_reset_gru", env_id)
    # CartPoleNoVel-v1 uses the zoo's tuned settings in evidence.yml, RecurrentPPO's defaults in fresh_memory.yml
    assert not reuse.same_training("fm_off", "ev_reset", "CartPoleNoVel-v1")
    assert not reuse.same_training("fm_off", "ev_mask", "CueRecall-v0")
    assert not reuse.same_training("fm_refresh", "ev_reset", "CueRecall-v0")
    # Settings as resolved per env: the coverage study's cv_inside16 is ev_reset; cv_full16 and cv_full64 differ
    assert reuse.same_training("ev_reset", "cv_inside16", "CueRecall-v0")
    assert not reuse.same_training("cv_full16", "cv_full64", "CueRecall-v0")


def test_precondition_reruns_and_compares_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    precondition = _load("precondition")
    with pytest.raises(ValueError, match="ARM/ENV/SEED"):
        precondition.parse_run("ev_reset/CueRecall-v0")
    with pytest.raises(ValueError, match="ARM/ENV/SEED"):
        precondition.parse_run("nope/CueRecall-v0/0")
    assert precondition.parse_run("ev_rppo/CueRecall-v0/3") == ("ev_rppo", "CueRecall-v0", 3)
    curve = [0.1, 0.5, 0.9, 1.0]
    for arm in ("ev_reset", "ev_rppo"):
        _fake_run(tmp_path / "evidence", arm, "CueRecall-v0", 0, curve)
    monkeypatch.setattr(precondition.runner, "code_version", lambda: {"commit": "abcdef0123", "dirty": False})
    trained: list[str] = []

    def rerun(job: dict[str, Any]) -> dict[str, Any]:
        """ev_reset trains the same again; ev_rppo differs in its third evaluation."""
        trained.append(job["variant"])
        means = curve if job["variant"] == "ev_reset" else [0.1, 0.5, 0.8, 1.0]
        _fake_run(tmp_path / "evidence" / "precondition" / "abcdef0", job["variant"], job["env"], job["seed"], means)
        return {"variant": job["variant"], "env": job["env"], "seed": job["seed"], "returncode": 0, "seconds": 1.0}

    monkeypatch.setattr(precondition.run_grid, "run_one", rerun)
    runs = ["ev_reset/CueRecall-v0/0", "ev_rppo/CueRecall-v0/0"]
    monkeypatch.setattr(sys, "argv", ["precondition.py", *runs, "--results", str(tmp_path), "--workers", "1"])
    with pytest.raises(SystemExit) as exit_info:
        precondition.main()
    assert exit_info.value.code == 1
    summary = json.loads((tmp_path / "evidence" / "precondition" / "abcdef0" / "summary.json").read_text())
    assert summary["runs"][0] == {"run": runs[0], "equal": True}
    assert summary["runs"][1]["equal"] is False and summary["runs"][1]["first_difference"] == 2
    assert summary["runs"][1]["max_mean_difference"] == pytest.approx(0.1)
    # Resumed: the re-runs are there, nothing trains again; with only the equal run the check passes
    monkeypatch.setattr(sys, "argv", ["precondition.py", runs[0], "--results", str(tmp_path)])
    precondition.main()
    assert trained == ["ev_reset", "ev_rppo"]
    # A stored run that is missing is an error before anything trains
    monkeypatch.setattr(sys, "argv", ["precondition.py", "ev_mask/CueRecall-v0/0", "--results", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match=r"run\.json missing"):
        precondition.main()
