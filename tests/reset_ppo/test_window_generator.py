"""The window generator: left alone by ``set_random_seed(None)`` as SB3 does, saved and loaded with the model."""

from pathlib import Path

from helpers import small_reset_ppo

from sb3_reset_ppo import ResetPPO


def test_set_random_seed_none_leaves_the_window_generator_alone() -> None:
    # SB3's set_random_seed(None) does nothing; reseeding the window generator from OS entropy broke reproducibility
    model = small_reset_ppo()
    state = model.rollout_buffer.generator.bit_generator.state
    model.set_random_seed(None)
    assert model.rollout_buffer.generator.bit_generator.state == state
    model.set_random_seed(3)
    assert model.rollout_buffer.generator.bit_generator.state != state


def test_a_loaded_checkpoint_continues_the_window_generator(tmp_path: Path) -> None:
    model = small_reset_ppo()
    model.learn(64)
    model.save(tmp_path / "model")
    loaded = ResetPPO.load(tmp_path / "model", env=model.get_env())
    # The next phases and orders are the saved model's, not those of a fresh generator seeded alike
    assert loaded.rollout_buffer.generator.integers(1 << 30, size=8).tolist() == (
        model.rollout_buffer.generator.integers(1 << 30, size=8).tolist()
    )
    fresh = small_reset_ppo()
    assert fresh.rollout_buffer.generator.bit_generator.state != loaded.rollout_buffer.generator.bit_generator.state
