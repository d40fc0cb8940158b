"""Defects found by the reviews of issue 35 in the envs, the RL Zoo command line and the packaging, each pinned by a test."""

import configparser
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

import sb3_reset_ppo.envs  # noqa: F401  (registers the tasks)
from sb3_reset_ppo.envs.popgym_tasks import TASKS as POPGYM_TASKS

ROOT = Path(__file__).resolve().parents[1]


def _zoo(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sb3_reset_ppo.zoo", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _extras() -> dict[str, list[str]]:
    """The extras of setup.cfg: name -> requirement names (lower case, ``_`` as ``-``)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    extras = {}
    for extra, value in parser["options.extras_require"].items():
        lines = [line.split("#")[0].strip() for line in value.splitlines()]
        extras[extra] = [re.split(r"[<>=!~;\[ ]", line)[0].lower().replace("_", "-") for line in lines if line]
    return extras


# POPGym: fresh info dicts on every call


@pytest.mark.parametrize("task", POPGYM_TASKS)
def test_popgym_infos_are_fresh_objects_on_every_call(task: str) -> None:
    pytest.importorskip("popgym")
    env = gym.make(f"Popgym{task}-v0")
    _, reset_info = env.reset(seed=0)
    kept = {key: np.array(value, copy=True) for key, value in reset_info.items()}
    step_infos = [env.step(env.action_space.sample())[4] for _ in range(2)]
    infos = [reset_info, *step_infos]
    for i, info in enumerate(infos):
        for other in infos[i + 1 :]:
            assert info is not other
            assert all(info[key] is not other[key] for key in info.keys() & other.keys())
    # What reset returned is not changed by the steps after it (CountRecall's counts were)
    assert all(np.array_equal(reset_info[key], value) for key, value in kept.items())


# The zoo's command line


@pytest.mark.parametrize("script", ["train", "enjoy"])
def test_zoo_script_help_names_the_module_command(script: str) -> None:
    result = _zoo(script, "--help")
    assert result.returncode == 0, result.stderr[-3000:]
    usage = result.stdout.splitlines()[0]
    assert re.match(rf"usage: python\S* -m sb3_reset_ppo\.zoo {script} ", usage), usage
    assert "__main__.py" not in result.stdout


def test_no_display_reason() -> None:
    from sb3_reset_ppo.zoo import no_display_reason

    assert no_display_reason({}, "linux") is not None and "DISPLAY" in str(no_display_reason({}, "linux"))
    assert no_display_reason({"DISPLAY": ":0"}, "linux") is None
    assert no_display_reason({"WAYLAND_DISPLAY": "wayland-0"}, "linux") is None
    assert no_display_reason({}, "freebsd14") is not None
    # macOS and Windows have a display without these variables
    assert no_display_reason({}, "darwin") is None and no_display_reason({}, "win32") is None
    # SDL's drivers that show nothing
    for driver in ("dummy", "offscreen"):
        assert "SDL_VIDEODRIVER" in str(no_display_reason({"DISPLAY": ":0", "SDL_VIDEODRIVER": driver}, "linux"))
        assert no_display_reason({"SDL_VIDEODRIVER": driver}, "darwin") is not None
    assert no_display_reason({"DISPLAY": ":0", "SDL_VIDEODRIVER": "x11"}, "linux") is None


def test_enjoy_without_a_display_does_not_render(capsys: pytest.CaptureFixture[str]) -> None:
    from sb3_reset_ppo.zoo import _without_render_if_no_display

    enjoy = ["enjoy", "--algo", "reset_ppo", "--env", "CueRecall-v0"]
    assert _without_render_if_no_display(enjoy, {}, "linux") == [*enjoy, "--no-render"]
    assert "no display" in capsys.readouterr().err
    # Nothing to change: a display, --no-render given, or another script
    for argv, environ in (
        (enjoy, {"DISPLAY": ":0"}),
        ([*enjoy, "--no-render"], {}),
        ([*enjoy, "--no-r"], {}),
        ([*enjoy, "--help"], {}),
        (["train", "--algo", "reset_ppo"], {}),
        ([], {}),
    ):
        assert _without_render_if_no_display(argv, environ, "linux") == argv
    assert capsys.readouterr().err == ""


def test_enjoy_runs_unpaced_and_says_so_without_a_display(tmp_path: Path) -> None:
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_reset_ppo import ResetPPO

    run = tmp_path / "reset_ppo" / "CueRecall-v0_1"
    run.mkdir(parents=True)
    model = ResetPPO(
        "MlpLstmPolicy", make_vec_env("CueRecall-v0", n_envs=1), n_steps=16, batch_size=16, window_size=8,
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    )  # fmt: skip
    model.save(run / "CueRecall-v0.zip")
    environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")}
    # 200 steps paced at CueRecall's render_fps (4) would take 50 s
    start = time.monotonic()
    result = _zoo("enjoy", "--algo", "reset_ppo", "--env", "CueRecall-v0", "-f", str(tmp_path), "-n", "200", env=environ)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no display" in result.stderr and "--no-render" in result.stderr, result.stderr[-3000:]
    assert "Mean reward" in result.stdout
    assert elapsed < 45, f"enjoy took {elapsed:.0f} s"


# Packaging


def test_extras_do_not_mix_pygame_and_pygame_ce() -> None:
    # minigrid (the evidence extra) requires pygame-ce, which installs into the same `pygame` folder as pygame
    extras = _extras()
    assert "minigrid" in extras["evidence"]
    assert all("pygame" not in names for names in extras.values()), extras
    assert "pygame-ce" in extras["zoo"]  # enjoy's window


def test_installed_distributions_do_not_hold_both_pygames() -> None:
    names = {str(dist.metadata["Name"]).lower().replace("_", "-") for dist in importlib.metadata.distributions()}
    assert not {"pygame", "pygame-ce"} <= names, (
        "pygame and pygame-ce are both installed (one overwrites the other's files): "
        "pip uninstall -y pygame && pip install --force-reinstall --no-deps pygame-ce"
    )


def test_tests_extra_holds_the_build_requirements() -> None:
    # tests/test_packaging.py builds the wheel with this environment's build tools (--no-build-isolation)
    tomllib = pytest.importorskip("tomllib")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    tests = {line.strip() for line in parser["options.extras_require"]["tests"].splitlines() if line.strip()}
    assert set(requires) <= tests, (requires, tests)
    # bdist_wheel is part of setuptools from 70.1 (setuptools 65 of a fresh Python 3.11 venv has none without wheel)
    assert any(r.startswith("setuptools>=") and tuple(map(int, r.split(">=")[1].split("."))) >= (70, 1) for r in requires)


# The packaged zoo config uses ResetPPO's defaults; the published grid keeps its own


def test_packaged_zoo_config_uses_the_default_stride() -> None:
    from sb3_reset_ppo.zoo import DEFAULT_CONF_FILE

    hyperparams = yaml.safe_load(DEFAULT_CONF_FILE.read_text())
    assert [env_id for env_id, settings in hyperparams.items() if "window_stride" in settings] == []


def test_published_grid_keeps_its_config() -> None:
    spec = importlib.util.spec_from_file_location("run_grid", ROOT / "benchmarks" / "kit" / "run_grid.py")
    assert spec is not None and spec.loader is not None
    run_grid = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_grid)
    assert run_grid.RESET_PPO_CONF == ROOT / "benchmarks" / "kit" / "grid.yml"
    assert run_grid.conf_file("reset") == run_grid.conf_file("mask") == run_grid.RESET_PPO_CONF
    grid = yaml.safe_load(run_grid.RESET_PPO_CONF.read_text())
    # The grid's envs trained every window every epoch
    for env_id in run_grid.DEFAULT_ENVS:
        assert grid[env_id]["window_stride"] == 1 and grid[env_id]["window_size"] == 16
    packaged = yaml.safe_load((ROOT / "sb3_reset_ppo" / "zoo" / "reset_ppo.yml").read_text())
    # The packaged config sets no window setting (ResetPPO's defaults) and covers the grid's envs
    for env_id in run_grid.DEFAULT_ENVS:
        assert "window_stride" not in packaged[env_id] and "window_size" not in packaged[env_id]
