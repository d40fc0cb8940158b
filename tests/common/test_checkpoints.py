"""
Checkpoints saved before a setting existed load as they trained, not with today's defaults; a GRU checkpoint
loaded by RecurrentPPO and a truncated file say what they are.
"""

import io
import json
import zipfile
from pathlib import Path

import pytest
from helpers import small_reset_ppo
from sb3_contrib import RecurrentPPO

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.checkpoints import LEGACY_SETTINGS, check_checkpoint, legacy_settings

# Made by tests/common/data/make_checkpoint_before_window_coverage.py: windows of 4 inside the rollout, CartPole-v1, saved
# without window_coverage (and the window generator's state), as checkpoints were before window_coverage existed
OLD_CHECKPOINT = Path(__file__).parent / "data" / "checkpoint_before_window_coverage.zip"


def _saved_data(path: Path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("data"))


def test_the_stored_checkpoint_lacks_window_coverage() -> None:
    data = _saved_data(OLD_CHECKPOINT)
    assert "window_coverage" not in data and data["window_size"] == 4
    assert legacy_settings(OLD_CHECKPOINT) == {"window_coverage": "inside"}


def test_a_checkpoint_from_before_window_coverage_loads_inside() -> None:
    model = ResetPPO.load(OLD_CHECKPOINT)
    assert model.window_coverage == "inside"
    assert model.rollout_buffer.window_coverage == "inside"
    assert model.window_length == 4
    # The stored settings are the checkpoint's
    assert (model.consecutive_windows, model.memory_refresh, model.burn_in) == ("auto", 0, 0)


def test_load_overrides_win_over_the_settings_of_the_time() -> None:
    model = ResetPPO.load(OLD_CHECKPOINT, window_coverage="full")
    assert model.window_coverage == "full"
    assert model.rollout_buffer.window_coverage == "full"


def test_an_open_file_of_an_old_checkpoint_loads_inside() -> None:
    buffer = io.BytesIO(OLD_CHECKPOINT.read_bytes())
    assert ResetPPO.load(buffer).rollout_buffer.window_coverage == "inside"


def test_every_setting_missing_from_a_checkpoint_takes_its_value_of_the_time(tmp_path: Path) -> None:
    # The oldest checkpoints (before consecutive_windows, memory_refresh and burn_in came) held none of them
    data = _saved_data(OLD_CHECKPOINT)
    for name in LEGACY_SETTINGS:
        data.pop(name, None)
    path = tmp_path / "oldest.zip"
    with zipfile.ZipFile(OLD_CHECKPOINT) as source, zipfile.ZipFile(path, "w") as target:
        for info in source.infolist():
            target.writestr(info.filename, json.dumps(data) if info.filename == "data" else source.read(info))
    assert legacy_settings(path) == LEGACY_SETTINGS
    model = ResetPPO.load(path, memory_refresh=2)
    assert (model.window_coverage, model.consecutive_windows, model.memory_refresh, model.burn_in) == ("inside", 1, 2, 0)
    assert model.rollout_buffer.window_coverage == "inside"


@pytest.mark.parametrize("window_coverage", ["full", "inside"])
def test_a_checkpoint_that_stores_its_settings_loads_them(tmp_path: Path, window_coverage: str) -> None:
    model = ResetPPO(
        "MlpLstmPolicy",
        "CartPole-v1",
        n_steps=8,
        batch_size=8,
        window_coverage=window_coverage,
        policy_kwargs={"lstm_hidden_size": 4, "net_arch": [4]},
    )
    model.save(tmp_path / "model.zip")
    assert legacy_settings(tmp_path / "model.zip") == {}
    assert ResetPPO.load(tmp_path / "model.zip").rollout_buffer.window_coverage == window_coverage


def test_a_recurrent_ppo_checkpoint_takes_reset_ppos_defaults(tmp_path: Path) -> None:
    RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_steps=8, batch_size=8, policy_kwargs={"lstm_hidden_size": 4}).save(
        tmp_path / "recurrent.zip"
    )
    assert legacy_settings(tmp_path / "recurrent.zip") == {}
    assert ResetPPO.load(tmp_path / "recurrent.zip").window_coverage == "full"


def test_a_gru_checkpoint_in_recurrent_ppo_says_to_use_reset_ppo(tmp_path: Path) -> None:
    model = small_reset_ppo(policy="MlpGruPolicy")
    model.save(tmp_path / "gru")
    contrib = RecurrentPPO.load(tmp_path / "gru", env=model.get_env())
    with pytest.raises(ValueError, match=r"ResetPPO\.load"):
        contrib.learn(32)


def test_a_checkpoint_cut_after_a_nested_archive_is_reported_as_truncated(tmp_path: Path) -> None:
    import zipfile

    model = small_reset_ppo()
    path = tmp_path / "model.zip"
    model.save(path)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        nested = next(info for info in archive.infolist() if info.filename == "policy.optimizer.pth")
    # Cut just after the nested torch archive's own zip directory: zip finds that one
    end = nested.header_offset + 30 + len(nested.filename) + nested.compress_size
    cut = tmp_path / "cut.zip"
    cut.write_bytes(data[: end - 11])
    with pytest.raises(ValueError, match="truncated") as error:
        check_checkpoint(cut)
    assert "data.pkl" not in str(error.value)  # the nested archive's members are not listed as the checkpoint's
