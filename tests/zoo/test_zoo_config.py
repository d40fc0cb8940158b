"""The packaged zoo config uses ResetPPO's defaults (the published grid's own: benchmarks/tests/test_bench_grid.py)."""

import yaml


def test_packaged_zoo_config_uses_the_default_stride() -> None:
    from sb3_reset_ppo.zoo import DEFAULT_CONF_FILE

    hyperparams = yaml.safe_load(DEFAULT_CONF_FILE.read_text())
    assert [env_id for env_id, settings in hyperparams.items() if "window_stride" in settings] == []
