"""
sb3-contrib's own MaskablePPO tests (tests/test_invalid_actions.py of sb3-contrib 2.9.2) pass for MaskableResetPPO.

The file is downloaded from PyPI at test time (sb3-contrib's sdist, checked against its recorded sha256, cached
under pytest's cache folder), swapped by tests/oracles/upstream_swaps.py (MaskablePPO -> MaskableResetPPO, each feedforward
policy name -> its recurrent counterpart, the reasons listed there) and run with pytest in a subprocess. Without
network access to the package index the tests skip.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_swaps import (
    DESELECTED,
    MEMBER,
    SDIST_FILE,
    SDIST_SHA256,
    Cell,
    Evaluation,
    IndexUnreachableError,
    fetch_sdist,
    swapped_source,
    upstream_source,
)

ROOT = Path(__file__).resolve().parents[2]
# The upstream file's tests (16 with parametrization) less the deselected ones
EXPECTED_PASSED = 16 - len(DESELECTED)
# Plugins installed beside pytest that the upstream file does not use (loading them is a second of CPU)
UNUSED_PLUGINS = ("xdist", "xdist.looponfail", "hypothesispytest", "anyio")
# pytest, with the forkserver that SubprocVecEnv starts its workers from importing the libraries once: each worker
# then forks with them loaded instead of importing torch anew (5 of the suite's CPU seconds)
PYTEST_WITH_PRELOADED_FORKSERVER = (
    "import multiprocessing, sys, pytest; "
    "multiprocessing.set_forkserver_preload(['stable_baselines3', 'sb3_contrib', 'sb3_reset_ppo']); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


def _cache_folder(config: pytest.Config) -> Path:
    """pytest's cache folder (.pytest_cache, git-ignored), or the user's cache folder when the cache is disabled."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return cache.mkdir("sb3-contrib-sdist")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sb3-reset-ppo" / "sb3-contrib-sdist"


@pytest.fixture(scope="module")
def upstream(request: pytest.FixtureRequest) -> str:
    try:
        sdist = fetch_sdist(_cache_folder(request.config))
    except IndexUnreachableError as error:
        pytest.skip(f"PyPI cannot be reached: {error}")
    return upstream_source(sdist)


def _run_upstream(source: str, cell: Cell, evaluation: Evaluation, folder: Path) -> subprocess.CompletedProcess:
    test_file = folder / f"test_invalid_actions_{cell.lower()}.py"
    test_file.write_text(swapped_source(source, cell, evaluation))
    deselect = [argument for name in DESELECTED for argument in ("--deselect", f"{test_file.name}::{name}")]
    # This checkout's package, one torch thread; the folder has no pytest configuration, so none of ours applies
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])), OMP_NUM_THREADS="1")
    unused_plugins = [argument for name in UNUSED_PLUGINS for argument in ("-p", f"no:{name}")]
    command = [sys.executable, "-c", PYTEST_WITH_PRELOADED_FORKSERVER, "-p", "no:cacheprovider", *unused_plugins]
    command += [test_file.name, "-q", *deselect]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)


def _check_passed(result: subprocess.CompletedProcess) -> None:
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    # Every test that is not deselected ran and passed: none skipped
    assert re.search(rf"\b{EXPECTED_PASSED} passed, {len(DESELECTED)} deselected\b", summary), summary
    assert "skipped" not in summary and "xfail" not in summary, summary


def test_upstream_maskable_ppo_suite_passes_with_lstm_policies(upstream: str, tmp_path: Path) -> None:
    # The swaps (MaskablePPO -> MaskableResetPPO, MlpPolicy -> MlpLstmPolicy, ...) with sb3-contrib's own
    # masked evaluate_policy and MaskableEvalCallback, as a MaskablePPO user would call them
    _check_passed(_run_upstream(upstream, "Lstm", "sb3_contrib", tmp_path))


@pytest.mark.slow
def test_upstream_maskable_ppo_suite_passes_with_gru_policies_and_memory_keeping_evaluation(
    upstream: str, tmp_path: Path
) -> None:
    # The GRU policies, evaluated with sb3_reset_ppo's evaluate_policy and MaskableEvalCallback (same signatures as
    # sb3-contrib's, which the upstream tests exercise: masks required unless use_masking=False, reward_threshold,
    # the callback's child callbacks and log file)
    _check_passed(_run_upstream(upstream, "Gru", "sb3_reset_ppo", tmp_path))


def test_swaps_refuse_a_different_upstream_file(upstream: str) -> None:
    swapped = swapped_source(upstream, "Lstm", "sb3_contrib")
    assert "MaskablePPO(" not in swapped and '"MlpPolicy"' not in swapped and '"MlpLstmPolicy"' in swapped
    assert "from sb3_reset_ppo import MaskableResetPPO" in swapped and SDIST_SHA256 in swapped
    assert all(f"def {name}(" in upstream for name in DESELECTED)
    # One call more or less than the recorded file holds: refused, not half swapped
    with pytest.raises(ValueError, match="occurs 23 times"):
        swapped_source(upstream + '\nMaskablePPO("MlpPolicy", None)\n', "Lstm", "sb3_contrib")


def test_a_cached_file_with_another_sha256_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import upstream_swaps

    (tmp_path / SDIST_FILE).write_bytes(b"not sb3-contrib")
    monkeypatch.setattr(upstream_swaps, "index_reachable", lambda timeout=10.0: False)
    # Not reused: it would be downloaded again, and the index is unreachable
    with pytest.raises(IndexUnreachableError, match=SDIST_FILE):
        fetch_sdist(tmp_path)
    assert MEMBER.endswith("tests/test_invalid_actions.py")
