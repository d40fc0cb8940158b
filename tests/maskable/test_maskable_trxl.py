"""MaskableResetPPO with attention memory: exactness with masks (float32 and float64), gradients, masked evaluation."""

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from helpers import RandomMaskEnv, check_valid
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.env_util import make_vec_env

from sb3_reset_ppo import MaskableResetPPO
from sb3_reset_ppo.common.maskable_evaluation import evaluate_policy
from sb3_reset_ppo.common.type_aliases import AttentionRows, WindowRolloutBufferSamples
from sb3_reset_ppo.maskable import (
    MaskableAttentionWindowRolloutBuffer,
    MaskableCnnTrXLPolicy,
    MaskableDictAttentionWindowRolloutBuffer,
    MaskableMlpTrXLPolicy,
    MaskableMultiInputTrXLPolicy,
)
from sb3_reset_ppo.maskable.trxl_policies import MaskableAttentionPolicy

ACTION_SPACES = {
    "discrete": spaces.Discrete(4),
    "multidiscrete": spaces.MultiDiscrete([3, 2, 4]),
    "multibinary": spaces.MultiBinary(3),
}
N_STEPS = 16
MEMORY_LENGTH = 4
TRXL_KWARGS: dict[str, Any] = dict(memory_length=MEMORY_LENGTH, trxl_dim=8, n_trxl_layers=2, n_attention_heads=2, net_arch=[8])


def rolled_out_model(
    policy: str = "MlpTrXLPolicy",
    action: str = "discrete",
    obs_kind: str = "box",
    policy_kwargs: dict | None = None,
    **kwargs: Any,
) -> MaskableResetPPO:
    """A model after two rollouts with masks at learning rate 0, on short episodes (1 to 4 steps)."""
    env_kwargs = dict(action_space=ACTION_SPACES[action], obs_kind=obs_kind, max_length=4)
    env = make_vec_env(RandomMaskEnv, n_envs=2, seed=0, env_kwargs=env_kwargs)
    extra: dict[str, Any] = dict(features_extractor_kwargs=dict(features_dim=8)) if policy.startswith("Cnn") else {}
    model = MaskableResetPPO(
        policy,
        env,
        learning_rate=0.0,
        n_steps=N_STEPS,
        batch_size=12,
        n_epochs=1,
        window_size=6,
        seed=0,
        policy_kwargs={**TRXL_KWARGS, **extra, **(policy_kwargs or {})},
        **kwargs,
    )
    # Two rollouts: the second starts mid-episode, with memory carried in from the first
    model.learn(2 * N_STEPS * 2)
    buffer = model.rollout_buffer
    assert buffer.masks_stored and not bool(np.all(buffer.action_masks == 1))
    # Every stored action is valid under its stored mask
    n = N_STEPS * model.n_envs
    check_valid(model.action_space, buffer.actions.reshape(n, -1), buffer.action_masks.reshape(n, -1))
    return model


def test_policy_names_and_buffers() -> None:
    aliases = MaskableResetPPO.policy_aliases
    assert aliases["MlpTrXLPolicy"] is MaskableMlpTrXLPolicy
    assert aliases["CnnTrXLPolicy"] is MaskableCnnTrXLPolicy
    assert aliases["MultiInputTrXLPolicy"] is MaskableMultiInputTrXLPolicy
    model = rolled_out_model()
    assert isinstance(model.policy, MaskableMlpTrXLPolicy)
    assert isinstance(model.rollout_buffer, MaskableAttentionWindowRolloutBuffer)


@pytest.mark.parametrize(
    "policy,obs_kind,action",
    [
        ("MlpTrXLPolicy", "box", "discrete"),
        ("MlpTrXLPolicy", "box", "multidiscrete"),
        ("MlpTrXLPolicy", "box", "multibinary"),
        ("CnnTrXLPolicy", "image", "discrete"),
        ("MultiInputTrXLPolicy", "dict", "multidiscrete"),
    ],
)
@pytest.mark.parametrize(
    "settings_", [{}, {"boundary": "mask", "window_coverage": "inside"}], ids=["reset-full", "mask-inside"]
)
def test_recomputed_equals_rollout_with_masks(policy: str, obs_kind: str, action: str, settings_: dict) -> None:
    model = rolled_out_model(policy, action, obs_kind, **settings_)
    if obs_kind == "dict":
        assert isinstance(model.rollout_buffer, MaskableDictAttentionWindowRolloutBuffer)
    masks_matter = False
    for _ in range(3):
        for samples in model.rollout_buffer.get(7):
            assert samples.action_masks is not None and samples.attention is not None
            attention: Any = model.policy
            with th.no_grad():
                values, log_prob, entropy = attention.evaluate_windows(samples)
                unmasked = attention.evaluate_windows(samples._replace(action_masks=None))[1]
            kept = samples.kept
            # Before any update every kept slot's log-prob and value are the rollout's (drawn with the masks)
            assert float((log_prob - samples.old_log_prob).abs()[kept].max()) < 1e-5
            assert float((values - samples.old_values).abs()[kept].max()) < 1e-5
            assert entropy is not None and bool(th.isfinite(entropy[kept]).all())
            masks_matter = masks_matter or float((unmasked - samples.old_log_prob).abs()[kept].max()) > 1e-2
    # The control: without the stored masks the log-probs are not the rollout's
    assert masks_matter


def _float64(observations: Any) -> Any:
    """Observations (a tensor, or a dict of them) as float64."""
    if isinstance(observations, dict):
        return {key: obs.double() for key, obs in observations.items()}
    return observations.double()


@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_float64_windows_equal_the_step_by_step_masked_policy(obs_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The model in float64: each env's rollout stepped one step at a time from the memory entering it (collection's
    # path, with the stored masks) gives every step's log-prob, value and block inputs; the windows, reading those
    # block inputs as their memory, recompute the same log-probs and values to 1e-10
    policy_name = "MultiInputTrXLPolicy" if obs_kind == "dict" else "MlpTrXLPolicy"
    model = rolled_out_model(policy_name, "multidiscrete", obs_kind)
    # In place: the model is not run again (a deep copy meets the last minibatch's distribution, not a leaf tensor)
    policy = model.policy.double()
    assert isinstance(policy, MaskableAttentionPolicy)
    # SB3's preprocessing makes observations float32 (exactly, from the stored float32 and uint8 ones): the features
    # extractors take them as float64
    for extractor in {policy.features_extractor, policy.pi_features_extractor, policy.vf_features_extractor}:
        monkeypatch.setattr(extractor, "forward", lambda obs, forward=extractor.forward: forward(_float64(obs)))
    buffer = model.rollout_buffer
    assert isinstance(buffer, (MaskableAttentionWindowRolloutBuffer, MaskableDictAttentionWindowRolloutBuffer))

    def observation(step: int, env: int) -> Any:
        if isinstance(buffer.observations, dict):
            return {key: th.as_tensor(obs[step, env][None]).double() for key, obs in buffer.observations.items()}
        return th.as_tensor(buffer.observations[step, env][None]).double()

    # (E, T) log-probs and values; (E, K + T, L, D) positions, actor and critic
    log_probs, values = np.zeros((model.n_envs, N_STEPS)), np.zeros((model.n_envs, N_STEPS))
    positions: dict[str, list[th.Tensor]] = {"pi": [], "vf": []}
    with th.no_grad():
        for env in range(model.n_envs):
            # (E, K, L, D) -> (K, 1, L, D)
            entering = {
                suffix: th.as_tensor(buffer.block_inputs[suffix][env, :MEMORY_LENGTH, None]).double() for suffix in positions
            }
            count = th.as_tensor(buffer.memory_counts[:1, env, None]).T
            state = RNNStates((entering["pi"], count), (entering["vf"], count))
            inputs: dict[str, list[th.Tensor]] = {"pi": [], "vf": []}
            for step in range(N_STEPS):
                start = th.as_tensor(buffer.episode_starts[step, env][None])
                latent_pi, latent_vf, state = policy.step_latents(observation(step, env), state, start)
                masks = th.as_tensor(buffer.action_masks[step, env][None])
                distribution = policy._get_action_dist_from_latent(latent_pi, masks)
                log_probs[env, step] = float(distribution.log_prob(th.as_tensor(buffer.actions[step, env][None])))
                values[env, step] = float(policy.value_net(latent_vf))
                for suffix, memory in zip(("pi", "vf"), (state.pi[0], state.vf[0]), strict=True):
                    # The newest position: this step's block inputs, (K, 1, L, D) -> (L, D)
                    inputs[suffix].append(memory[-1, 0])
            for suffix in positions:
                positions[suffix].append(th.cat([entering[suffix][:, 0], th.stack(inputs[suffix])]))
    stored = {suffix: th.stack(parts) for suffix, parts in positions.items()}
    # float32 collection stored the same block inputs, to float32 rounding
    th.testing.assert_close(
        stored["pi"][:, MEMORY_LENGTH:-1].float(), th.as_tensor(buffer.block_inputs["pi"][:, MEMORY_LENGTH:-1])
    )

    def in_float64(samples: WindowRolloutBufferSamples) -> WindowRolloutBufferSamples:
        assert samples.attention is not None
        env, step = np.divmod(samples.window_starts.numpy(), N_STEPS)
        # (B,) and (K,) -> (B, K): each row's memory positions, steps t - K .. t - 1
        index = step[:, None] + np.arange(MEMORY_LENGTH)
        rows = AttentionRows(
            memory_pi=stored["pi"][env[:, None], index],
            memory_vf=stored["vf"][env[:, None], index],
            counts=samples.attention.counts,
        )
        obs = samples.observations
        observations = {k: v.double() for k, v in obs.items()} if isinstance(obs, dict) else obs.double()
        return samples._replace(observations=observations, attention=rows)

    checked = 0
    for samples in buffer.get(7):
        with th.no_grad():
            window_values, window_log_prob, _ = policy.evaluate_windows(in_float64(samples))
        env, step = np.divmod(samples.window_starts.numpy(), N_STEPS)
        width = samples.slot_steps.shape[1]
        # (B, W): each slot's step (padding slots clipped; they are not kept)
        steps = np.minimum(step[:, None] + np.arange(width), N_STEPS - 1)
        kept = samples.kept.numpy()
        expected_log_prob = log_probs[env[:, None], steps]
        expected_values = values[env[:, None], steps]
        np.testing.assert_allclose(window_log_prob.numpy()[kept], expected_log_prob[kept], rtol=0, atol=1e-10)
        np.testing.assert_allclose(window_values.numpy()[kept], expected_values[kept], rtol=0, atol=1e-10)
        checked += int(kept.sum())
    assert checked > 0


def test_no_gradient_crosses_an_episode_start_with_masks() -> None:
    model = rolled_out_model(window_stride=1, window_coverage="inside")
    policy: Any = model.policy
    found = 0
    for samples in model.rollout_buffer.get(None):
        assert samples.attention is not None
        observations = samples.observations.clone().requires_grad_(True)  # type: ignore[union-attr]
        rows = samples.attention
        memory_pi, memory_vf = rows.memory_pi.clone().requires_grad_(True), rows.memory_vf
        assert memory_vf is not None
        memory_vf = memory_vf.clone().requires_grad_(True)
        values, log_prob, _ = policy.evaluate_windows(
            samples._replace(observations=observations, attention=rows._replace(memory_pi=memory_pi, memory_vf=memory_vf))
        )
        starts = samples.episode_starts > 0.5
        for row in range(starts.shape[0]):
            # The first episode start after slot 0 of the row, and the slots from it on
            later = th.nonzero(starts[row, 1:])
            if not len(later):
                continue
            start = int(later[0]) + 1
            for slot in range(start, starts.shape[1]):
                if bool(starts[row, start + 1 : slot + 1].any()):
                    break
                grads = th.autograd.grad(
                    log_prob[row, slot] + values[row, slot], (observations, memory_pi, memory_vf), retain_graph=True
                )
                feature_grad, pi_grad, vf_grad = grads
                steps = samples.slot_steps[row]
                # Exactly 0: the earlier episode's slots and the memory before the row
                assert bool((feature_grad[steps[:start]] == 0).all())
                assert bool((pi_grad[row] == 0).all()) and bool((vf_grad[row] == 0).all())
                # ... and every slot of its own episode in the window is reached
                assert bool((feature_grad[steps[start : slot + 1]].abs().sum(dim=1) > 0).all())
                found += 1
            if int(rows.counts[row]) > 0 and not bool(starts[row, 0]) and start <= MEMORY_LENGTH:
                # The control: a slot before the start whose episode began before the row attends to the memory
                grads = th.autograd.grad(values[row, start - 1], (memory_vf,), retain_graph=True)
                assert float(grads[0][row].abs().sum()) > 0
    assert found > 0


class _RecordingModel:
    """A model whose ``predict`` calls (state in, episode start, state out, masks) are recorded."""

    def __init__(self, model: MaskableResetPPO) -> None:
        self.model = model
        self.calls: list[tuple[Any, np.ndarray, Any, np.ndarray | None]] = []

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, Any]:
        assert episode_start is not None
        action, new_state = self.model.predict(observation, state, episode_start, deterministic, action_masks)
        self.calls.append((state, episode_start.copy(), new_state, action_masks))
        return action, new_state


@pytest.mark.parametrize("deterministic", [True, False])
def test_masked_evaluation_keeps_attention_memory(deterministic: bool) -> None:
    model = rolled_out_model()
    # strict: an invalid action raises, so every action of the evaluation is valid under its mask
    env = make_vec_env(RandomMaskEnv, n_envs=1, seed=3, env_kwargs=dict(action_space=ACTION_SPACES["discrete"], max_length=4))
    recorder = _RecordingModel(model)
    result = evaluate_policy(recorder, env, n_eval_episodes=4, deterministic=deterministic, return_episode_rewards=True)
    lengths = result[1]
    calls = recorder.calls
    assert isinstance(lengths, list)
    assert len(calls) == sum(lengths) and len(lengths) == 4
    assert sum(bool(start[0]) for _, start, _, _ in calls) >= 4
    previous_count = 0
    for index, (state, start, new_state, masks) in enumerate(calls):
        assert masks is not None
        if index == 0:
            assert state is None and bool(start[0])
        else:
            # The memory returned by the last step is the one given to this step
            assert state is calls[index - 1][2]
        memory, count = new_state
        assert memory.shape == (MEMORY_LENGTH, 1, 2, 8)
        # An episode start resets the count; otherwise it grows up to memory_length
        expected = 1 if start[0] else min(previous_count + 1, MEMORY_LENGTH)
        assert int(count[0, 0]) == expected
        previous_count = expected
