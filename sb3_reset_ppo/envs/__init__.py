"""
Memory tasks registered with gymnasium on import: small numpy-only ones (``CueRecall-v0``, ``CueRecallLong-v0``,
``CueRecallImage-v0``, ``MaskedCueRecall-v0``, ``EarlyChoice-v0``), POPGym's and MiniGrid's (``docs/guide/examples.md``).
"""

import gymnasium as gym

from sb3_reset_ppo.envs import minigrid_tasks, popgym_tasks
from sb3_reset_ppo.envs.cue_recall import CueRecallEnv, CueRecallImageEnv
from sb3_reset_ppo.envs.early_choice import EarlyChoiceEnv
from sb3_reset_ppo.envs.masked_cue_recall import MaskedCueRecallEnv

__all__ = [
    "CueRecallEnv",
    "CueRecallImageEnv",
    "EarlyChoiceEnv",
    "MaskedCueRecallEnv",
    "random_policy_return",
]


def random_policy_return(env_id: str, n_episodes: int, seed: int = 0) -> float:
    """
    Mean return of a uniformly random policy on the registered env ``env_id`` over ``n_episodes`` episodes.

    :param seed: Seed of the action space and of the episodes (``seed + episode``)
    """
    env = gym.make(env_id)
    env.action_space.seed(seed)
    total = 0.0
    for episode in range(n_episodes):
        env.reset(seed=seed + episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
    return total / n_episodes


_TASKS = {
    "CueRecall-v0": ("sb3_reset_ppo.envs.cue_recall:CueRecallEnv", {}),
    "CueRecallLong-v0": ("sb3_reset_ppo.envs.cue_recall:CueRecallEnv", {"min_delay": 20, "max_delay": 40}),
    "CueRecallImage-v0": ("sb3_reset_ppo.envs.cue_recall:CueRecallImageEnv", {}),
    "MaskedCueRecall-v0": ("sb3_reset_ppo.envs.masked_cue_recall:MaskedCueRecallEnv", {}),
    "EarlyChoice-v0": ("sb3_reset_ppo.envs.early_choice:EarlyChoiceEnv", {}),
}

for _env_id, (_entry_point, _kwargs) in _TASKS.items():
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point, kwargs=_kwargs, max_episode_steps=200)
popgym_tasks.register()
minigrid_tasks.register()
