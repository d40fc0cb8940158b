"""Observations a policy's default features extractor cannot take: one ValueError at construction, naming the
observation and what to use instead (SB3 and sb3-contrib failed in learn() or inside torch)."""

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, CombinedExtractor
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_reset_ppo import MaskableResetPPO, ResetPPO

TINY: dict[str, Any] = dict(n_steps=8, batch_size=8, n_epochs=1, seed=0, policy_kwargs=dict(lstm_hidden_size=4))


class ObservationEnv(RandomEpisodeEnv):
    """``RandomEpisodeEnv`` with the observation space given."""

    def __init__(self, observation_space: spaces.Space) -> None:
        super().__init__()
        self.observation_space = observation_space


def _env(observation_space: spaces.Space) -> DummyVecEnv:
    return DummyVecEnv([lambda: ObservationEnv(observation_space)])


def _image(side: int) -> spaces.Box:
    return spaces.Box(0, 255, shape=(side, side, 3), dtype=np.uint8)


def _image_and_vector(side: int) -> spaces.Dict:
    return spaces.Dict({"image": _image(side), "vector": spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)})


@pytest.mark.parametrize(
    ("policy", "use"), [("MlpLstmPolicy", "MultiInputLstmPolicy"), ("MlpGruPolicy", "MultiInputGruPolicy")]
)
def test_a_dict_observation_under_a_flat_policy_names_the_multi_input_policy(policy: str, use: str) -> None:
    # Was accepted here, then learn() failed with AttributeError: 'dict' object has no attribute 'flatten'
    message = rf"^policy {policy} takes one array, but the observation space is a Dict \(keys 'image', 'vector'\): "
    message += f"use policy='{use}'"
    with pytest.raises(ValueError, match=message):
        ResetPPO(policy, _env(_image_and_vector(36)), **TINY)
    with pytest.raises(ValueError, match=f"use policy='{use}'"):
        MaskableResetPPO(policy, _env(_image_and_vector(36)), **TINY)


def test_an_image_smaller_than_nature_cnn_takes_names_the_smallest_and_how_to_pass_another_extractor() -> None:
    # Was torch's "Kernel size can't be greater than actual input size"
    expected = (
        r"^observation_space\['image'\] is a 16x16 image \(shape \(3, 16, 16\)\), smaller than the 36x36 that "
        r"MultiInputLstmPolicy's default features extractor, SB3's NatureCNN, takes: .*"
        r"policy_kwargs=dict\(features_extractor_class=\.\.\.\)"
    )
    with pytest.raises(ValueError, match=expected):
        ResetPPO("MultiInputLstmPolicy", _env(_image_and_vector(16)), **TINY)
    with pytest.raises(ValueError, match=r"^observation_space is a 20x20 image .* CnnGruPolicy's default features"):
        ResetPPO("CnnGruPolicy", _env(_image(20)), **TINY)


class _SmallImages(BaseFeaturesExtractor):
    """Flattens each key: takes any image."""

    def __init__(self, observation_space: spaces.Dict) -> None:
        sizes = [int(np.prod(space.shape or ())) for space in observation_space.spaces.values()]
        super().__init__(observation_space, features_dim=sum(sizes))

    def forward(self, observations: Any) -> Any:
        import torch as th

        # (n_envs, *shape) per key -> (n_envs, features_dim)
        return th.cat([value.flatten(1).float() for value in observations.values()], dim=1)


def test_the_smallest_image_and_an_extractor_of_ones_own_are_accepted() -> None:
    ResetPPO("MultiInputLstmPolicy", _env(_image_and_vector(36)), **TINY)
    kwargs = {**TINY, "policy_kwargs": dict(lstm_hidden_size=4, features_extractor_class=_SmallImages)}
    model = ResetPPO("MultiInputLstmPolicy", _env(_image_and_vector(16)), **kwargs)
    assert not isinstance(model.policy.features_extractor, CombinedExtractor)
    model.learn(8)


def test_a_dict_observation_under_the_multi_input_attention_policy_is_accepted() -> None:
    # The check is for the recurrent policies: it refused MultiInputTrXLPolicy, whose CombinedExtractor takes a Dict
    model = ResetPPO("MultiInputTrXLPolicy", _env(_image_and_vector(36)), n_steps=8, batch_size=8, n_epochs=1, seed=0)
    assert isinstance(model.observation_space, spaces.Dict)
