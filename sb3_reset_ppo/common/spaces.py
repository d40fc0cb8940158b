"""The observation and action spaces the policies take, and the one check of invalid-action masks."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticCnnPolicy, RecurrentMultiInputActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first

__all__ = ["check_action_masks", "check_action_space", "check_observation_space", "mask_dims", "mask_sizes"]

# The smallest image side SB3's NatureCNN takes: its convolutions (8, stride 4; 4, stride 2; 3, stride 1) leave 1x1
NATURE_CNN_MIN_SIDE = 36

# What a caller may hand over as masks: an array, a tensor, nested lists, or one mask per env (VecEnv.env_method)
MasksLike = np.ndarray | th.Tensor | Sequence[Any]


def check_observation_space(
    observation_space: spaces.Space, policy_class: type, policy_kwargs: dict[str, Any], policy_name: str | None = None
) -> None:
    """
    Raise a ``ValueError`` naming the policy to use where its default features extractor cannot take the observations
    (a ``Dict`` under a one-array policy, an image smaller than ``NatureCNN`` takes), which SB3 only finds in ``learn()``.

    :param observation_space: The observation space (images channel-first, as SB3 wraps them)
    :param policy_kwargs: The policy's keyword arguments (an extractor of the user's own is not checked)
    :param policy_name: The name the user gave the policy by; default: its class's name
    """
    if policy_kwargs.get("features_extractor_class") is not None:
        return
    name = policy_name or policy_class.__name__
    multi_input = issubclass(policy_class, RecurrentMultiInputActorCriticPolicy)
    if isinstance(observation_space, spaces.Dict) and not multi_input:
        cell = "Gru" if "Gru" in name or "Gru" in policy_class.__name__ else "Lstm"
        keys = ", ".join(map(repr, observation_space))
        raise ValueError(
            f"policy {name} takes one array, but the observation space is a Dict (keys {keys}): "
            f"use policy='MultiInput{cell}Policy', which encodes each key (images with a CNN) and concatenates them"
        )
    # NatureCNN: what CnnLstmPolicy takes, and what MultiInputLstmPolicy's CombinedExtractor gives each image key
    images: dict[str, spaces.Space] = {}
    if issubclass(policy_class, RecurrentActorCriticCnnPolicy):
        images = {"": observation_space}
    elif multi_input and isinstance(observation_space, spaces.Dict):
        normalized = not policy_kwargs.get("normalize_images", True)
        images = {
            f"[{key!r}]": space
            for key, space in observation_space.items()
            if is_image_space(space, normalized_image=normalized)
        }
    for key, space in images.items():
        if not (isinstance(space, spaces.Box) and len(space.shape) == 3):
            continue
        # (channels, height, width) or (height, width, channels)
        height, width = space.shape[1:] if is_image_space_channels_first(space) else space.shape[:2]
        if min(height, width) < NATURE_CNN_MIN_SIDE:
            side = NATURE_CNN_MIN_SIDE
            raise ValueError(
                f"observation_space{key} is a {height}x{width} image (shape {space.shape}), smaller than the {side}x{side} "
                f"that {name}'s default features extractor, SB3's NatureCNN, takes: give images of at least {side}x{side} "
                "(e.g. a gymnasium ResizeObservation wrapper), or pass an extractor of your own, "
                "policy_kwargs=dict(features_extractor_class=...) (SB3's guide: Custom Policy Network)"
            )


def check_action_space(action_space: spaces.Space) -> None:
    """
    Raise a ``ValueError`` naming ``action_space`` and the flat space to use unless the policies' action distributions
    can represent it: ``MultiBinary`` needs an int ``n``, ``MultiDiscrete`` a flat ``nvec`` (``docs/guide/masking.md``).
    """
    if isinstance(action_space, spaces.MultiBinary) and not isinstance(action_space.n, (int, np.integer)):
        flat = int(np.prod(action_space.n))
        raise ValueError(
            f"action_space must be a flat MultiBinary(n) with an int n, got {action_space!r} (n={action_space.n!r}): "
            f"SB3's and sb3-contrib's distributions support no other; flatten it to MultiBinary({flat}) with a "
            "gymnasium.ActionWrapper whose action() reshapes the flat action to the env's shape"
        )
    if isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim != 1:
        raise ValueError(
            f"action_space must be a MultiDiscrete with a flat nvec, got {action_space!r} (nvec shape "
            f"{action_space.nvec.shape}): SB3's and sb3-contrib's distributions support no other; flatten it to "
            f"MultiDiscrete({action_space.nvec.reshape(-1).tolist()}) with a gymnasium.ActionWrapper whose action() "
            "reshapes the flat action to the env's shape"
        )


def mask_sizes(action_space: spaces.Space) -> list[int]:
    """The lengths of one step's action mask's pieces (one per sub-action), as sb3-contrib's maskable distributions cut it."""
    if isinstance(action_space, spaces.Discrete):
        return [int(action_space.n)]
    if isinstance(action_space, spaces.MultiDiscrete):
        return [int(n) for n in action_space.nvec.reshape(-1)]
    if isinstance(action_space, spaces.MultiBinary):
        if not isinstance(action_space.n, (int, np.integer)):
            raise ValueError(f"MultiBinary action spaces must be flat for masking, got MultiBinary({action_space.n})")
        return [2] * int(action_space.n)
    raise ValueError(f"action space {action_space} has no invalid-action mask: use Discrete, MultiDiscrete or MultiBinary")


def mask_dims(action_space: spaces.Space) -> int:
    """Entries of one step's action mask, as sb3-contrib counts them (``2 * n`` for ``MultiBinary(n)``: one per outcome)."""
    return sum(mask_sizes(action_space))


def check_action_masks(action_masks: MasksLike, action_space: spaces.Space, n_envs: int, step: str) -> np.ndarray:
    """
    The action masks of ``n_envs`` envs as a boolean ``(n_envs, mask_dims)`` array, or a ``ValueError`` that names the
    env and ``step`` where a mask has the wrong shape or allows no action of some sub-action (``docs/guide/masking.md``).

    Accepted: ``(n_envs, mask_dims)``, ``(mask_dims,)``, ``(n_envs * mask_dims,)``, or a sequence of ``n_envs`` masks
    (``VecEnv.env_method("action_masks")``); a non-zero entry allows its action.

    :param step: The step the masks are for, named by the error (e.g. ``"evaluation step 2 (counted from 0)"``)
    :return: The masks, ``(n_envs, mask_dims)``, ``True`` where an action is allowed
    """
    sizes = mask_sizes(action_space)
    dims = sum(sizes)

    def error(detail: str, shape_is_right: bool = False) -> ValueError:
        # Worded only when a mask is refused; the expected shape only where the shape was wrong
        if shape_is_right:
            return ValueError(f"action_masks at {step}: {detail}")
        expected = f"({n_envs}, {dims})" + (f" or ({dims},)" if n_envs == 1 else f" or ({n_envs * dims},) flat")
        return ValueError(
            f"action_masks at {step}: {detail}; expected shape {expected} ({n_envs} env(s), {dims} entries per env for "
            f"{action_space})"
        )

    if isinstance(action_masks, th.Tensor):
        action_masks = action_masks.detach().cpu().numpy()
    if isinstance(action_masks, (list, tuple)) and len(action_masks) > 0 and not np.isscalar(action_masks[0]):
        # One mask per env: say which env's is wrong when they differ
        try:
            masks = np.stack(action_masks)
        except ValueError:
            shapes = [np.shape(mask) for mask in action_masks]
            env = next(i for i, shape in enumerate(shapes) if shape != shapes[0])
            raise error(f"env {env}'s mask has shape {shapes[env]} where env 0's has {shapes[0]}") from None
    else:
        masks = np.asarray(action_masks)
    if masks.shape != (n_envs, dims):
        if masks.ndim <= 1 and masks.size == n_envs * dims:
            # Flat: (n_envs * mask_dims,) -> (n_envs, mask_dims)
            masks = masks.reshape(n_envs, dims)
        else:
            raise error(f"got shape {masks.shape}: {_shape_detail(masks, n_envs, dims)}")
    valid = masks.astype(bool)
    starts = np.cumsum([0, *sizes[:-1]])
    # (n_envs, n_pieces): whether each piece of each env's mask allows some action
    allowed = np.logical_or.reduceat(valid, starts, axis=1)
    if not allowed.all():
        env, piece = (int(i) for i in np.argwhere(~allowed)[0])
        what = (
            "no action"
            if len(sizes) == 1
            else f"no action of sub-action {piece} (entries {starts[piece]}:{starts[piece] + sizes[piece]})"
        )
        raise error(
            f"env {env}'s mask allows {what} (sb3-contrib would sample an invalid action uniformly: every env needs an "
            "allowed action per sub-action; end the episode or give the env a valid no-op action instead)",
            shape_is_right=True,
        )
    return valid


def _shape_detail(masks: np.ndarray, n_envs: int, dims: int) -> str:
    """Which env a wrongly shaped mask fails first, for the error of :func:`check_action_masks`."""
    if masks.ndim <= 1:
        env = min(masks.size // dims, n_envs - 1)
        return f"{masks.size} entries are not {n_envs} x {dims}: env {env}'s mask is cut or extended"
    if masks.shape[0] != n_envs:
        if masks.shape[0] < n_envs:
            return f"masks of {masks.shape[0]} env(s) for {n_envs}: env {masks.shape[0]} has none"
        return f"masks of {masks.shape[0]} envs for {n_envs}: more masks than envs (env {n_envs} does not exist)"
    return f"env 0's mask has shape {masks.shape[1:]}, {int(np.prod(masks.shape[1:]))} entries instead of {dims}"
