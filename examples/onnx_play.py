"""
Play CueRecall-v0 with an exported policy and onnxruntime only: no torch, no Stable-Baselines3.

The script keeps the policy's memory itself, as a game engine or a robot would: zeros before the first step,
the graph's new memory fed back at every step, and ``episode_start = 1`` at the first step of each episode (the
graph zeroes the memory then; in the ML-Agents layout the memory is set to zeros instead). It prints the mean
return over ``--episodes`` episodes, played one after the other from ``env.reset(seed=--seed)``: the episodes
that SB3's ``evaluate_policy`` plays on a one-env ``DummyVecEnv`` seeded the same way.

Export a model first, e.g. the README's quick-start model::

    python -m sb3_reset_ppo.export reset_ppo_cue.zip reset_ppo_cue.onnx
    python examples/onnx_play.py reset_ppo_cue.onnx --episodes 100

Needs ``onnxruntime``, ``numpy`` and ``gymnasium``. CueRecall's environment is loaded from its own file
(``sb3_reset_ppo/envs/cue_recall.py``, numpy and gymnasium only): importing ``sb3_reset_ppo`` itself would import
torch.
"""

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import onnxruntime as ort


def cue_recall_env() -> gym.Env:
    """CueRecall-v0 (200 steps at most, as ``sb3_reset_ppo.envs`` registers it), without importing ``sb3_reset_ppo``."""
    package = importlib.util.find_spec("sb3_reset_ppo")  # a top-level package: found, not imported
    if package is not None and package.submodule_search_locations:
        path = Path(next(iter(package.submodule_search_locations))) / "envs" / "cue_recall.py"
    else:  # a clone that is not installed
        path = Path(__file__).resolve().parents[1] / "sb3_reset_ppo" / "envs" / "cue_recall.py"
    spec = importlib.util.spec_from_file_location("_cue_recall", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return gym.wrappers.TimeLimit(module.CueRecallEnv(), max_episode_steps=200)


class OnnxPolicy:
    """
    An exported policy with its memory, for one agent (batch 1).

    :param path: The ONNX file written by ``sb3_reset_ppo.export``
    """

    def __init__(self, path: str | Path) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        metadata = self.session.get_modelmeta().custom_metadata_map
        self.layout = metadata["layout"]
        self.dtype = np.float16 if metadata["dtype"] == "float16" else np.float32
        self.memory_spec = json.loads(metadata["memory"])
        self.inputs = {node.name: node.shape for node in self.session.get_inputs()}
        self.memory: list[np.ndarray] = []
        self.reset()

    def reset(self) -> None:
        """Zeros: the memory before an agent's first step."""
        spec = self.memory_spec
        if self.layout == "mlagents":
            self.memory = [np.zeros((1, 1, spec["memory_size"]), self.dtype)]
        else:
            self.memory = [np.zeros((spec["n_layers"], 1, spec["hidden_size"]), self.dtype) for _ in spec["tensors"]]

    def act(self, obs: np.ndarray, episode_start: bool) -> Any:
        """
        The deterministic action for one observation, the memory updated.

        :param obs: The env's observation
        :param episode_start: Whether ``obs`` is the first of an episode
        :return: The action, as the env takes it
        """
        batch = np.asarray(obs, dtype=self.dtype)[None]  # (obs_shape) -> (1, obs_shape)
        if self.layout == "mlagents":
            if episode_start:
                self.reset()
            feed = {"obs_0": batch, "recurrent_in": self.memory[0]}
            if "action_masks" in self.inputs:
                # Every action allowed: (1, sum of the branches' sizes)
                feed["action_masks"] = np.ones((1, self.inputs["action_masks"][1]), self.dtype)
            outputs = dict(zip([node.name for node in self.session.get_outputs()], self.session.run(None, feed), strict=True))
            self.memory = [outputs["recurrent_out"]]
            kind = "discrete" if "deterministic_discrete_actions" in outputs else "continuous"
            action = outputs[f"deterministic_{kind}_actions"]  # (1, n_branches) or (1, action_dim)
            return action[0, 0] if action.shape[1] == 1 else action[0]
        feed = {"obs": batch, "episode_start": np.array([float(episode_start)], self.dtype)}
        feed.update(zip(self.memory_spec["tensors"], self.memory, strict=True))
        action, *self.memory = self.session.run(["action"] + [f"{name}_out" for name in self.memory_spec["tensors"]], feed)
        return action[0]


def play(path: str | Path, n_episodes: int, seed: int) -> list[float]:
    """
    Returns of ``n_episodes`` episodes of CueRecall-v0, the first reset with ``seed``.

    :param path: The ONNX file
    :param n_episodes: Episodes to play
    :param seed: Seed of the first reset
    :return: The episodes' returns
    """
    policy = OnnxPolicy(path)
    env = cue_recall_env()
    returns = []
    obs, _ = env.reset(seed=seed)
    for _ in range(n_episodes):
        episode_return, episode_start, done = 0.0, True, False
        while not done:
            action = policy.act(obs, episode_start)
            obs, reward, terminated, truncated, _ = env.step(action)
            episode_return += float(reward)
            episode_start, done = False, terminated or truncated
        returns.append(episode_return)
        obs, _ = env.reset()
    return returns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("onnx", help="the exported policy (python -m sb3_reset_ppo.export MODEL.zip OUT.onnx)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the returns as JSON")
    args = parser.parse_args(argv)
    returns = play(args.onnx, args.episodes, args.seed)
    if args.json:
        print(json.dumps({"mean_return": float(np.mean(returns)), "returns": returns}))
    else:
        print(f"mean return over {args.episodes} episodes: {np.mean(returns):.3f} (torch imported: {'torch' in sys.modules})")


if __name__ == "__main__":
    main()
