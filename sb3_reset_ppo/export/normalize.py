"""SB3's ``VecNormalize`` in the graph, and the statistics the RL Zoo saves beside a model (docs/guide/deploy.md)."""

import ast
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize
from torch import nn

from sb3_reset_ppo.common.utils import read_zoo_yaml

# The file name the RL Zoo saves a VecNormalize under (rl_zoo3's ExperimentManager and SaveVecNormalizeCallback)
VEC_NORMALIZE_FILE = "vecnormalize.pkl"
# The zoo's saved hyperparameters, beside vecnormalize.pkl
_ZOO_CONFIG_FILE = "config.yml"
# A single observation's key in the normaliser (the export's observation dict uses the same)
_SINGLE = ""


def load_vec_normalize(source: VecNormalize | str | Path) -> VecNormalize:
    """
    ``source`` if a ``VecNormalize``, else one read from its pickle without an env (unpickling runs code, as
    ``VecNormalize.load``).
    """
    if isinstance(source, VecNormalize):
        return source
    if not isinstance(source, str | Path):
        raise TypeError(
            f"vec_normalize must be a VecNormalize, the path of its pickle (str or Path) or None, got {type(source).__name__}"
        )
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"vec_normalize must be the path of a VecNormalize pickle, got {str(path)!r}: no such file")
    try:
        with path.open("rb") as file:
            loaded = pickle.load(file)
    except OSError:
        raise
    except Exception as error:  # whatever unpickling a file that is not a pickle raises
        raise ValueError(
            f"vec_normalize {str(path)!r} is not a VecNormalize pickle ({type(error).__name__}: {error}): give the file "
            "that VecNormalize.save wrote (the RL Zoo's vecnormalize.pkl)"
        ) from error
    if not isinstance(loaded, VecNormalize):
        raise ValueError(f"vec_normalize {str(path)!r} holds a {type(loaded).__name__}, not a VecNormalize")
    return loaded


def find_vec_normalize(model_path: str | Path) -> Path | None:
    """The ``VecNormalize`` pickle the RL Zoo saved beside a model's zip, if any: in ``<run>/<env>/`` or ``<run>/``."""
    folder = _stats_folder(Path(model_path))
    if folder is not None and (folder / VEC_NORMALIZE_FILE).is_file():
        return folder / VEC_NORMALIZE_FILE
    beside = Path(model_path).parent / VEC_NORMALIZE_FILE
    return beside if beside.is_file() else None


def zoo_config_normalizes(model_path: str | Path) -> bool:
    """Whether the RL Zoo's ``config.yml`` beside a model's zip says that its observations were normalised."""
    folder = _stats_folder(Path(model_path))
    if folder is None or not (folder / _ZOO_CONFIG_FILE).is_file():
        return False
    try:
        config = read_zoo_yaml(folder / _ZOO_CONFIG_FILE)
    except ImportError:  # no PyYAML: no zoo
        return False
    if not isinstance(config, dict):
        return False
    normalize = config.get("normalize", False)
    if isinstance(normalize, str):
        normalize = _literal_kwargs(normalize)
    if isinstance(normalize, dict):
        return bool(normalize.get("norm_obs", True))
    return bool(normalize)


def warn_if_unnormalized(model: Any, model_path: str | Path | None = None) -> None:
    """
    Warn that ``model`` (or policy) was trained on normalised observations where its env, or the zoo's ``config.yml``
    beside the zip it was loaded from (``model_path``), says so.
    """
    reason = None
    if isinstance(model, BaseAlgorithm):
        env = model.get_vec_normalize_env()
        if env is not None and env.norm_obs:
            reason = "its env is a VecNormalize normalising observations (pass vec_normalize=model.get_vec_normalize_env())"
    if reason is None and model_path is not None and zoo_config_normalizes(model_path):
        reason = (
            f"the RL Zoo's {_ZOO_CONFIG_FILE} beside {str(model_path)!r} says normalize, but no {VEC_NORMALIZE_FILE} "
            "was found (pass its path: vec_normalize=... or --vec-normalize PATH)"
        )
    if reason is not None:
        warnings.warn(
            f"The model was trained on normalised observations and the exported graph does not normalise them: {reason}. "
            "Without the statistics the file expects observations already normalised.",
            UserWarning,
            stacklevel=3,
        )


class ObservationNormalizer(nn.Module):
    """
    ``VecNormalize.normalize_obs`` on the export's observation dict (key ``""`` for one observation), in float32.

    :param stats: Per normalised key, its ``(mean, var)``
    :param clip_obs: ``VecNormalize.clip_obs``
    :param epsilon: ``VecNormalize.epsilon``
    """

    def __init__(self, stats: dict[str, tuple[np.ndarray, np.ndarray]], clip_obs: float, epsilon: float) -> None:
        super().__init__()
        self.keys = tuple(stats)
        self.clip_obs = float(clip_obs)
        self.epsilon = float(epsilon)
        for index, (mean, var) in enumerate(stats.values()):
            # sqrt(var + epsilon) in float64, as VecNormalize, then stored in float32
            self.register_buffer(f"mean_{index}", th.as_tensor(np.asarray(mean, np.float64), dtype=th.float32))
            std = np.sqrt(np.asarray(var, np.float64) + epsilon)
            self.register_buffer(f"std_{index}", th.as_tensor(std, dtype=th.float32))

    def metadata(self, source: str) -> dict[str, Any]:
        """The metadata's ``vec_normalize`` entry, before JSON; ``source``: the statistics' path, or ``"object"``."""
        return {
            "in_graph": True,
            "source": source,
            "keys": [key or "obs" for key in self.keys],
            "clip_obs": self.clip_obs,
            "epsilon": self.epsilon,
            "formula": "clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs), before SB3's preprocessing",
        }

    def forward(self, obs: dict[str, th.Tensor]) -> dict[str, th.Tensor]:
        normalised = dict(obs)
        for index, key in enumerate(self.keys):
            mean, std = getattr(self, f"mean_{index}"), getattr(self, f"std_{index}")
            value = (obs[key].to(th.float32) - mean) / std
            normalised[key] = th.clamp(value, -self.clip_obs, self.clip_obs)
        return normalised


def observation_normalizer(vec_normalize: VecNormalize, observation_space: spaces.Space) -> ObservationNormalizer | None:
    """
    The graph's normaliser, checked against the policy's observation space; ``None`` when ``vec_normalize`` does not
    normalise observations (``norm_obs=False``).
    """
    if not vec_normalize.norm_obs:
        return None
    obs_rms = vec_normalize.obs_rms
    subspaces = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {_SINGLE: observation_space}
    if isinstance(observation_space, spaces.Dict):
        if not isinstance(obs_rms, dict):
            raise ValueError(
                f"vec_normalize holds the statistics of a single observation, but the policy observes a Dict with keys "
                f"{list(observation_space.spaces)}: use the VecNormalize the model was trained with"
            )
        unknown = [key for key in obs_rms if key not in observation_space.spaces]
        if unknown:
            raise ValueError(
                f"vec_normalize normalises keys {unknown} that the policy's observation space lacks (its keys: "
                f"{list(observation_space.spaces)}): use the VecNormalize the model was trained with"
            )
    elif isinstance(obs_rms, dict):
        raise ValueError(
            f"vec_normalize holds the statistics of a Dict observation (keys {list(obs_rms)}), but the policy "
            f"observes {observation_space}: use the VecNormalize the model was trained with"
        )
    stats: dict[str, RunningMeanStd] = dict(obs_rms) if isinstance(obs_rms, dict) else {_SINGLE: obs_rms}
    for key, rms in stats.items():
        subspace = subspaces[key]
        if not isinstance(subspace, spaces.Box):
            raise ValueError(
                f"vec_normalize normalises observation {key or 'obs'!r}, which is {subspace}: only Box observations can be"
            )
        if tuple(np.shape(rms.mean)) != tuple(subspace.shape):
            raise ValueError(
                f"vec_normalize's statistics of observation {key or 'obs'!r} have shape {tuple(np.shape(rms.mean))}, "
                f"the policy's space {tuple(subspace.shape)}: use the VecNormalize the model was trained with"
            )
    return ObservationNormalizer(
        {key: (np.asarray(rms.mean), np.asarray(rms.var)) for key, rms in stats.items()},
        clip_obs=float(vec_normalize.clip_obs),
        epsilon=float(vec_normalize.epsilon),
    )


def _stats_folder(model_path: Path) -> Path | None:
    """The zoo's ``<run>/<env>`` folder of a model zip: ``<run>/<stem>``, else the run's only folder with a config."""
    run = model_path.parent
    named = run / model_path.stem
    if (named / VEC_NORMALIZE_FILE).is_file() or (named / _ZOO_CONFIG_FILE).is_file():
        return named
    if not run.is_dir():
        return None
    candidates = [folder for folder in run.iterdir() if folder.is_dir() and (folder / _ZOO_CONFIG_FILE).is_file()]
    return candidates[0] if len(candidates) == 1 else None


def _literal_kwargs(source: str) -> dict[str, Any] | bool:
    """The zoo's ``normalize`` string (``"dict(norm_obs=True, ...)"`` or ``"{'norm_obs': ...}"``) without ``eval``."""
    try:
        tree = ast.parse(source.strip(), mode="eval").body
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "dict" and not tree.args:
            return {keyword.arg: ast.literal_eval(keyword.value) for keyword in tree.keywords if keyword.arg is not None}
        value = ast.literal_eval(tree)
    except (SyntaxError, ValueError):
        # Not a literal: the zoo would eval it; assume observations are normalised (the warning errs on that side)
        return True
    return value if isinstance(value, dict | bool) else bool(value)
