"""Small numpy-only memory tasks, registered with gymnasium on import."""

import gymnasium as gym

from sb3_reset_ppo.envs.cue_recall import CueRecallEnv, CueRecallImageEnv

__all__ = ["CueRecallEnv", "CueRecallImageEnv"]

if "CueRecall-v0" not in gym.registry:
    gym.register("CueRecall-v0", entry_point="sb3_reset_ppo.envs.cue_recall:CueRecallEnv", max_episode_steps=200)
if "CueRecallImage-v0" not in gym.registry:
    gym.register("CueRecallImage-v0", entry_point="sb3_reset_ppo.envs.cue_recall:CueRecallImageEnv", max_episode_steps=200)
