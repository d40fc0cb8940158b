"""The packaged zoo config uses ResetPPO's defaults; the published grid keeps its own."""

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


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
