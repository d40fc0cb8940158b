"""
The floor of a window update: ``train()`` per update of ResetPPO and RecurrentPPO against the least work it needs.

For each of ``bench_train.py``'s settings (MLP: CartPoleNoVel-v1, 8 envs; image: CueRecallImage-v0, 64x64,
``CnnLstmPolicy``, 4 envs; LSTM 64 and 256 with ``batch_size`` 128 and 1024; RecurrentPPO's defaults otherwise:
``n_steps=128``, ``n_epochs=10``) and the RL Zoo's tuned ``ppo_lstm`` setting for CartPoleNoVel-v1
(``benchmarks/kit/ppo_lstm.yml``: 8 envs, ``n_steps=32``, ``batch_size=256``, 20 epochs, LSTM 64 with a critic LSTM,
ReLU, ``net_arch=dict(pi=[64], vf=[64])``, VecNormalize) and the README's quick-start snippet ("snippet":
CueRecall-v0, 8 envs, ``n_steps=64``, ``batch_size=64``, RecurrentPPO's defaults otherwise), three things are timed
side by side in one process, interleaved so that all see the same machine load, as the CPU time of the process (one
torch thread), ``--repeats`` times, medians:

- **the floor**: plain torch, no SB3 object: for every minibatch of one update, on ResetPPO's own minibatch shapes
  (rows of windows, padded to the longest, as ResetPPO's ``rollout_buffer.get`` yields them for ``n_epochs``
  epochs), the features extractor (a flatten, or the NatureCNN on the minibatch's distinct steps), a fused
  ``nn.LSTM`` forward for the actor and one for the critic from given memory, the heads (``mlp_extractor``'s layers,
  the action and value layers), the categorical log-probability and entropy, PPO's clipped loss (advantages
  normalised, value and entropy terms) on the minibatch, backward, gradient clipping and one Adam step. No reset
  inputs, no buffer, no gather beyond the features' rows, no logging;
- ResetPPO's ``train()`` (its defaults: windows of ``min(batch_size, n_steps)``, full coverage), the per-rollout
  setup included (the device copy of the rollout is dropped before every call);
- RecurrentPPO's ``train()`` with the same arguments.

A fourth timing, interleaved with them, is ResetPPO's ``train()`` on the same rollout with its episode starts
cleared (no reset inside any window): its difference to ResetPPO's own is what the reset steps cost on that rollout.

Each model first learns one rollout (collection and one ``train()``: the warm-up); later calls train on that
rollout again. The figures are seconds per update (one ``train()`` call) and their ratios to the floor. Then
(``--learn-repeats``, default 3) both classes learn ``--learn-rollouts`` rollouts (default 2) from a fresh model,
interleaved: the ratio of their ``learn()`` CPU seconds (collection included), what a user waits for.

``--cells`` adds rows for the other memories at the same window and width (default: ``lstm`` alone): ``gru``
(``MlpGruPolicy``, ``CnnGruPolicy``; its floor a fused ``nn.GRU``) and ``trxl`` (attention memory:
``MlpTrXLPolicy``, ``CnnTrXLPolicy`` with ``trxl_dim`` the LSTM's hidden size and ``memory_length``
``--memory-length``, the policy's defaults otherwise; its floor the same Transformer-XL blocks written in plain
torch over the same rows of ``W`` slots, each reading ``K`` memory positions of every layer given as one tensor,
with one band mask, no episode start, built once). RecurrentPPO has only the LSTM: for the other cells its columns
are empty, and ``learn()`` is timed for ResetPPO alone.

Usage: python benchmarks/speed/bench_floor.py [--settings mlp:64:128 ... zoo snippet] [--repeats 5] [--learn-repeats 3]
       [--learn-rollouts 2] [--cells lstm gru trxl] [--memory-length 32]
       [--json benchmarks/results/bench_floor.json]
"""

import argparse
import functools
import itertools
import json
import math
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
from torch import nn
from torch.nn import functional as F

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)
from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.reset_ppo.trxl_policies import TrXLActorCriticPolicy

# bench_train.py's tasks and settings (read there; repeated here so that this script stands alone)
TASKS: dict[str, dict[str, Any]] = {
    "mlp": dict(env_id="CartPoleNoVel-v1", policy="MlpLstmPolicy", env_kwargs={}, n_envs=8),
    "image": dict(env_id="CueRecallImage-v0", policy="CnnLstmPolicy", env_kwargs=dict(min_delay=4, max_delay=30), n_envs=4),
}
# (lstm_hidden_size, batch_size)
SETTINGS = ((64, 128), (64, 1024), (256, 128), (256, 1024))
# The RL Zoo's ppo_lstm hyperparameters for CartPoleNoVel-v1 (benchmarks/ppo_lstm.yml; constant learning rate and
# clip range: their schedules do not change the work)
ZOO: dict[str, Any] = dict(
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=1e-3,
    clip_range=0.2,
    policy_kwargs=dict(
        ortho_init=False,
        activation_fn=nn.ReLU,
        lstm_hidden_size=64,
        enable_critic_lstm=True,
        net_arch=dict(pi=[64], vf=[64]),
    ),
)
# The README's quick-start snippet: CueRecall-v0, 8 envs, n_steps=64, batch_size=64, RecurrentPPO's defaults otherwise
# (LSTM 256 with a critic LSTM, layers of 64 and 64, Tanh, 10 epochs)
SNIPPET_TASK: dict[str, Any] = dict(env_id="CueRecall-v0", policy="MlpLstmPolicy", env_kwargs={}, n_envs=8)
SNIPPET: dict[str, Any] = dict(n_steps=64, batch_size=64, policy_kwargs=dict(lstm_hidden_size=256))
DEFAULT_SETTINGS = [f"{task}:{lstm}:{batch}" for task in TASKS for lstm, batch in SETTINGS] + ["zoo", "snippet"]
# The memories compared at the same window and width; RecurrentPPO, the peer, has only the first
CELLS = ("lstm", "gru", "trxl")


def parse_setting(setting: str, n_steps: int, n_epochs: int) -> dict[str, Any]:
    """
    A setting's task and model arguments: ``"zoo"``, ``"snippet"`` or ``"TASK:LSTM:BATCH"``.

    :param setting: The setting's name
    :param n_steps: ``n_steps`` of bench_train's settings
    :param n_epochs: ``n_epochs`` of bench_train's settings
    :return: ``task``, ``kwargs`` (the model's arguments), ``normalize``, ``activation`` and ``net_arch``
    """
    if setting == "zoo":
        return dict(task=TASKS["mlp"], kwargs=dict(ZOO), normalize=True, activation=nn.ReLU, net_arch=([64], [64]))
    if setting == "snippet":
        return dict(
            task=SNIPPET_TASK, kwargs=dict(SNIPPET), normalize=False, activation=nn.Tanh, net_arch=([64, 64], [64, 64])
        )
    parts = setting.split(":")
    if len(parts) != 3 or parts[0] not in TASKS or not all(part.isdigit() for part in parts[1:]):
        raise ValueError(f"setting must be 'zoo', 'snippet' or TASK:LSTM:BATCH with TASK in {sorted(TASKS)}, got {setting!r}")
    task, lstm, batch_size = TASKS[parts[0]], int(parts[1]), int(parts[2])
    kwargs = dict(n_steps=n_steps, n_epochs=n_epochs, batch_size=batch_size, policy_kwargs=dict(lstm_hidden_size=lstm))
    # SB3's default layers: none after a NatureCNN, two of 64 (Tanh) otherwise
    net_arch: tuple[list[int], list[int]] = ([], []) if parts[0] == "image" else ([64, 64], [64, 64])
    return dict(task=task, kwargs=kwargs, normalize=False, activation=nn.Tanh, net_arch=net_arch)


def cell_config(config: dict[str, Any], cell: str, memory_length: int) -> dict[str, Any]:
    """
    The setting with another memory of the same width: its policy (``Lstm`` in the name replaced) and arguments.

    :param config: :func:`parse_setting`'s
    :param cell: One of :data:`CELLS`
    :param memory_length: ``memory_length`` of attention memory
    :return: The setting, with ``cell`` and ``hidden`` (the LSTM's hidden size: ``trxl_dim`` of attention memory)
    """
    policy_kwargs = dict(config["kwargs"]["policy_kwargs"])
    hidden = policy_kwargs["lstm_hidden_size"]
    policy = config["task"]["policy"]
    if cell == "gru":
        policy = policy.replace("Lstm", "Gru")
    elif cell == "trxl":
        policy = policy.replace("Lstm", "TrXL")
        critic = policy_kwargs.pop("enable_critic_lstm", True)
        del policy_kwargs["lstm_hidden_size"]
        policy_kwargs.update(trxl_dim=hidden, memory_length=memory_length, enable_critic_trxl=critic)
    kwargs = {**config["kwargs"], "policy_kwargs": policy_kwargs}
    return {**config, "task": {**config["task"], "policy": policy}, "kwargs": kwargs, "cell": cell, "hidden": hidden}


def make_model(cls: type[RecurrentPPO], config: dict[str, Any], seed: int) -> RecurrentPPO:
    """The same arguments for both classes: only the class differs."""
    task = config["task"]
    env = make_vec_env(task["env_id"], n_envs=task["n_envs"], seed=seed, env_kwargs=task["env_kwargs"])
    if config["normalize"]:
        env = VecNormalize(env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ResetPPO's batch-size advice
        return cls(task["policy"], env, seed=seed, device="cpu", **config["kwargs"])


class NatureCNN(nn.Module):
    """SB3's NatureCNN in plain torch: images ``(N, C, 64, 64)`` scaled to [0, 1] -> ``(N, features_dim)``."""

    def __init__(self, channels: int, size: int, features_dim: int = 512) -> None:
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with th.no_grad():
            n_flat = self.cnn(th.zeros(1, channels, size, size)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())

    def forward(self, images: th.Tensor) -> th.Tensor:
        return self.linear(self.cnn(images.float() / 255.0))


def mlp(sizes: list[int], activation: type[nn.Module]) -> nn.Sequential:
    """Linear layers of the given sizes, each followed by the activation."""
    layers: list[nn.Module] = []
    for n_in, n_out in itertools.pairwise(sizes):
        layers += [nn.Linear(n_in, n_out), activation()]
    return nn.Sequential(*layers)


class FloorBlock(nn.Module):
    """One pre-layer-norm Transformer-XL block with relative distances, in plain torch (the policy's block)."""

    def __init__(self, dim: int, n_heads: int, ff_dim: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.norm_attention = nn.LayerNorm(dim)
        self.query = nn.Linear(dim, dim)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.distance = nn.Linear(dim, dim, bias=False)
        self.content_bias = nn.Parameter(th.zeros(n_heads, self.head_dim))
        self.distance_bias = nn.Parameter(th.zeros(n_heads, self.head_dim))
        self.out = nn.Linear(dim, dim)
        self.norm_ff = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.ReLU(), nn.Linear(ff_dim, dim))

    def heads(self, tensor: th.Tensor) -> th.Tensor:
        # (B, N, D) -> (B, N, H, D / H) -> (B, H, N, D / H)
        return tensor.reshape(*tensor.shape[:2], self.n_heads, self.head_dim).transpose(1, 2)

    def forward(
        self, memory: th.Tensor, slots: th.Tensor, bias: th.Tensor, table: th.Tensor, distance: th.Tensor
    ) -> th.Tensor:
        rows, width, dim = slots.shape
        # (B, K, D) and (B, W, D) -> (B, K + W, D)
        normed = self.norm_attention(th.cat([memory, slots], dim=1))
        query = self.heads(self.query(normed[:, -width:]))
        key, value = (self.heads(part) for part in self.key_value(normed).chunk(2, dim=-1))
        # (K + 1, D) -> (K + 1, H, D / H)
        distances = self.distance(table).reshape(-1, self.n_heads, self.head_dim)
        # (B, H, W, K + 1), gathered at each slot's distance to each key -> (B, H, W, K + W)
        scores = th.einsum("bhwe,khe->bhwk", query + self.distance_bias[:, None], distances)
        scores = scores.gather(3, distance.expand(rows, self.n_heads, width, -1)) / math.sqrt(self.head_dim)
        attended = F.scaled_dot_product_attention(query + self.content_bias[:, None], key, value, attn_mask=bias + scores)
        # (B, H, W, D / H) -> (B, W, H, D / H) -> (B, W, D)
        stream = slots + self.out(attended.transpose(1, 2).reshape(rows, width, dim))
        return stream + self.ff(self.norm_ff(stream))


class FloorTransformer(nn.Module):
    """The attention memory in plain torch: embedding, ``n_layers`` :class:`FloorBlock`, a final layer norm."""

    def __init__(self, n_features: int, dim: int, n_layers: int, n_heads: int, memory_length: int) -> None:
        super().__init__()
        self.embedding = nn.Linear(n_features, dim)
        self.blocks = nn.ModuleList(FloorBlock(dim, n_heads, dim) for _ in range(n_layers))
        self.norm_out = nn.LayerNorm(dim)
        # Transformer-XL's sinusoids of the distances 0 .. K: (K + 1, 1) * (D / 2,) -> (K + 1, D / 2) -> (K + 1, D)
        frequencies = th.exp(th.arange(0, dim, 2, dtype=th.float32) * (-math.log(10000.0) / dim))
        angles = th.arange(memory_length + 1, dtype=th.float32)[:, None] * frequencies
        self.register_buffer("table", th.cat([angles.sin(), angles.cos()], dim=1), persistent=False)

    def forward(self, slots: th.Tensor, memory: th.Tensor, bias: th.Tensor, distance: th.Tensor) -> th.Tensor:
        """``(B, W, F)`` slots, ``(B, K, L, D)`` memory -> ``(B, W, D)``."""
        stream = F.relu(self.embedding(slots))
        for layer, block in enumerate(self.blocks):
            stream = block(memory[:, :, layer], stream, bias, self.table, distance)
        return self.norm_out(stream)


class FloorNetwork(nn.Module):
    """The policy's networks in plain torch: features, actor and critic memories (LSTM, GRU or attention), heads."""

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        n_actions: int,
        hidden: int,
        net_arch: tuple[list[int], list[int]],
        activation: type[nn.Module],
        cell: str = "lstm",
        attention: dict[str, int] | None = None,
    ) -> None:
        super().__init__()
        self.image = len(observation_shape) == 3
        self.cell = cell
        if self.image:
            # (C, H, W): channel-first, as SB3 transposes images (VecTransposeImage)
            self.features: nn.Module = NatureCNN(observation_shape[0], observation_shape[1])
            n_features = 512
        else:
            self.features = nn.Flatten()
            n_features = int(np.prod(observation_shape))
        if cell == "trxl":
            assert attention is not None
            self.actor: nn.Module = FloorTransformer(n_features, hidden, **attention)
            self.critic: nn.Module = FloorTransformer(n_features, hidden, **attention)
        else:
            rnn = nn.LSTM if cell == "lstm" else nn.GRU
            self.actor, self.critic = rnn(n_features, hidden), rnn(n_features, hidden)
        self.mlp_pi = mlp([hidden, *net_arch[0]], activation)
        self.mlp_vf = mlp([hidden, *net_arch[1]], activation)
        self.action_net = nn.Linear(([hidden, *net_arch[0]])[-1], n_actions)
        self.value_net = nn.Linear(([hidden, *net_arch[1]])[-1], 1)


class FloorMinibatch:
    """
    Random data of one minibatch's shapes: ``rows`` windows of ``width`` slots over ``steps`` distinct steps, and the
    memory entering each row (attention: ``K`` positions of ``L`` layers, the band mask and the distances).
    """

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        n_actions: int,
        hidden: int,
        rows: int,
        width: int,
        steps: int,
        cell: str = "lstm",
        attention: dict[str, int] | None = None,
    ) -> None:
        generator = th.Generator().manual_seed(rows * 100_003 + width * 101 + steps)
        self.rows, self.width = rows, width
        shape = (steps, *observation_shape)
        if len(observation_shape) == 3:  # images, (C, H, W), stored as uint8 values
            self.observations = th.randint(0, 256, shape, generator=generator, dtype=th.uint8)
        else:
            self.observations = th.randn(shape, generator=generator)
        # (width * rows,): the distinct step each slot holds (time-major for the fused call, row-major for attention)
        self.slot_steps = th.arange(width * rows) % steps
        n_slots = width * rows
        if cell == "trxl":
            assert attention is not None
            memory_length, n_layers = attention["memory_length"], attention["n_layers"]
            self.memory = [th.randn(rows, memory_length, n_layers, hidden, generator=generator) for _ in range(2)]
            slot = th.arange(width)
            key_time = th.arange(-memory_length, width)
            # (W, K + W): each slot attends to itself and the K steps before it
            band = (key_time[None, :] >= slot[:, None] - memory_length) & (key_time[None, :] <= slot[:, None])
            # (W, K + W) -> (B, 1, W, K + W): -inf where a slot does not attend
            self.bias = th.zeros(rows, 1, width, memory_length + width).masked_fill(~band, -math.inf)
            # (W, K + W): the distance from each slot to each key, clamped to the table
            self.distance = (slot[:, None] - key_time[None, :]).clamp(0, memory_length)
        else:
            self.memory = [th.randn(1, rows, hidden, generator=generator) for _ in range(4 if cell == "lstm" else 2)]
        self.actions = th.randint(0, n_actions, (n_slots,), generator=generator)
        self.old_log_prob = -th.rand(n_slots, generator=generator)
        self.advantages = th.randn(n_slots, generator=generator)
        self.returns = th.randn(n_slots, generator=generator)
        self.old_values = th.randn(n_slots, generator=generator)


def floor_latents(network: FloorNetwork, batch: FloorMinibatch) -> tuple[th.Tensor, th.Tensor]:
    """The actor's and critic's memory outputs of every slot, ``(width * rows, H)`` each."""
    features = network.features(batch.observations)
    n_slots = batch.width * batch.rows
    if network.cell == "trxl":
        # (rows * width, F) -> (rows, width, F): the slots' features, row-major
        slots = features[batch.slot_steps].reshape(batch.rows, batch.width, -1)
        latent_pi = network.actor(slots, batch.memory[0], batch.bias, batch.distance)
        latent_vf = network.critic(slots, batch.memory[1], batch.bias, batch.distance)
    else:
        # (width * rows, F) -> (width, rows, F): the slots' features, time-major
        sequence = features[batch.slot_steps].reshape(batch.width, batch.rows, -1)
        memory_pi = (batch.memory[0], batch.memory[1]) if network.cell == "lstm" else batch.memory[0]
        memory_vf = (batch.memory[2], batch.memory[3]) if network.cell == "lstm" else batch.memory[1]
        latent_pi, _ = network.actor(sequence, memory_pi)
        latent_vf, _ = network.critic(sequence, memory_vf)
    # (width, rows, H) or (rows, width, H) -> (width * rows, H)
    return latent_pi.reshape(n_slots, -1), latent_vf.reshape(n_slots, -1)


def floor_update(
    network: FloorNetwork,
    optimizer: th.optim.Optimizer,
    batch: FloorMinibatch,
    clip_range: float,
    ent_coef: float,
    vf_coef: float,
    max_grad_norm: float,
) -> None:
    """The least work of one minibatch's update (see the module docstring)."""
    latent_pi, latent_vf = floor_latents(network, batch)
    logits = network.action_net(network.mlp_pi(latent_pi))
    # values (width * rows, 1) -> (width * rows,)
    values = network.value_net(network.mlp_vf(latent_vf)).flatten()
    log_probs = th.log_softmax(logits, dim=1)
    log_prob = log_probs.gather(1, batch.actions[:, None]).squeeze(1)
    entropy = -(log_probs.exp() * log_probs).sum(dim=1)
    advantages = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    ratio = th.exp(log_prob - batch.old_log_prob)
    policy_loss = -th.min(advantages * ratio, advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()
    value_loss = ((batch.returns - values) ** 2).mean()
    loss = policy_loss - ent_coef * entropy.mean() + vf_coef * value_loss
    optimizer.zero_grad()
    loss.backward()
    th.nn.utils.clip_grad_norm_(network.parameters(), max_grad_norm)
    optimizer.step()


def floor(model: ResetPPO, config: dict[str, Any]) -> tuple[Callable[[], None], list[tuple[int, int, int]]]:
    """
    The floor of one update of ``model``: a function running it and the shapes it runs, ``(rows, width, distinct
    steps)`` of every minibatch of ``n_epochs`` epochs, read from ResetPPO's own buffer (its random phases).
    """
    buffer = model.rollout_buffer
    shapes = []
    for _ in range(model.n_epochs):
        for samples in buffer.get(model.batch_size):
            rows, width = samples.slot_steps.shape
            observations = samples.observations
            assert isinstance(observations, th.Tensor)
            shapes.append((int(rows), int(width), int(observations.shape[0])))
    buffer.release()
    observation_shape = model.observation_space.shape
    assert observation_shape is not None
    n_actions = int(model.action_space.n)  # type: ignore[attr-defined]
    cell, hidden = config["cell"], config["hidden"]
    attention = None
    if cell == "trxl":
        policy = model.policy
        assert isinstance(policy, TrXLActorCriticPolicy)
        memory_length, n_layers, _ = policy.memory_shape
        attention = dict(n_layers=n_layers, n_heads=policy.trxl_kwargs["n_heads"], memory_length=memory_length)
    network = FloorNetwork(observation_shape, n_actions, hidden, config["net_arch"], config["activation"], cell, attention)
    optimizer = th.optim.Adam(
        network.parameters(), lr=model.learning_rate if isinstance(model.learning_rate, float) else 3e-4, eps=1e-5
    )
    batches = [FloorMinibatch(observation_shape, n_actions, hidden, *shape, cell, attention) for shape in shapes]
    clip_range = float(model.clip_range(1.0))  # type: ignore[operator]

    def update() -> None:
        for batch in batches:
            floor_update(network, optimizer, batch, clip_range, model.ent_coef, model.vf_coef, model.max_grad_norm)

    return update, shapes


def timed(function: Callable[[], object]) -> float:
    """CPU seconds of one call (the process's: one torch thread)."""
    start = time.process_time()
    function()
    return time.process_time() - start


def bench_setting(setting: str, args: argparse.Namespace, cell: str = "lstm") -> dict[str, Any]:
    config = cell_config(parse_setting(setting, args.n_steps, args.n_epochs), cell, args.memory_length)
    # The peer, RecurrentPPO, has only the LSTM
    classes: dict[str, type[RecurrentPPO]] = {"reset": ResetPPO, **({"recurrent_ppo": RecurrentPPO} if cell == "lstm" else {})}
    models = {name: make_model(cls, config, args.seed) for name, cls in classes.items()}
    for model in models.values():
        model.learn(model.n_envs * model.n_steps)  # one rollout and one train(): the warm-up
    reset = models["reset"]
    assert isinstance(reset, ResetPPO)
    floor_update_fn, shapes = floor(reset, config)
    floor_update_fn()  # warm-up

    def reset_train() -> None:
        reset.rollout_buffer.release()  # the per-rollout setup counts
        reset.train()

    def reset_train_without_resets() -> None:
        # The same rollout with its episode starts cleared: no reset inside a window, what the reset layout costs
        buffer = reset.rollout_buffer
        flags = buffer.episode_starts.copy()
        buffer.episode_starts[:] = 0.0
        try:
            reset_train()
        finally:
            buffer.episode_starts[:] = flags
            buffer.release()

    functions = {
        "floor": floor_update_fn,
        "reset": reset_train,
        **({"recurrent_ppo": models["recurrent_ppo"].train} if "recurrent_ppo" in models else {}),
        "reset_without_resets": reset_train_without_resets,
    }
    runs: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(args.repeats):
        for name, function in functions.items():
            runs[name].append(timed(function))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    learn: dict[str, list[float]] = {name: [] for name in classes}
    for _ in range(args.learn_repeats):
        for name, cls in classes.items():
            model = make_model(cls, config, args.seed)
            learn[name].append(timed(functools.partial(model.learn, args.learn_rollouts * model.n_envs * model.n_steps)))
    learn_medians = {name: statistics.median(values) for name, values in learn.items()} if args.learn_repeats else {}
    peer = "recurrent_ppo" in medians
    return {
        "setting": setting,
        "cell": cell,
        "env_id": config["task"]["env_id"],
        "policy": config["task"]["policy"],
        "n_envs": reset.n_envs,
        "n_steps": reset.n_steps,
        "n_epochs": reset.n_epochs,
        "batch_size": reset.batch_size,
        "lstm_hidden_size": config["hidden"],
        "memory_length": args.memory_length if cell == "trxl" else None,
        "window_size": reset.window_length,
        "minibatches_per_update": len(shapes),
        "minibatch_shapes": sorted(set(shapes)),
        "seconds_per_update": medians,
        "runs": runs,
        "reset_over_floor": medians["reset"] / medians["floor"],
        "recurrent_ppo_over_floor": medians["recurrent_ppo"] / medians["floor"] if peer else None,
        "reset_without_resets_over_floor": medians["reset_without_resets"] / medians["floor"],
        "episode_starts_per_step": float(reset.rollout_buffer.episode_starts.mean()),
        "reset_over_recurrent_ppo": medians["reset"] / medians["recurrent_ppo"] if peer else None,
        "learn_seconds": learn_medians,
        "learn_runs": learn,
        "learn_ratio": learn_medians["reset"] / learn_medians["recurrent_ppo"] if learn_medians and peer else None,
    }


def _figure(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(results: list[dict[str, Any]]) -> None:
    cells = any(r.get("cell", "lstm") != "lstm" for r in results)
    print(
        "| setting |" + (" cell |" if cells else "") + " minibatches per update | floor s | ResetPPO s | RecurrentPPO s "
        "| ResetPPO / floor | ResetPPO without resets / floor | RecurrentPPO / floor | ResetPPO / RecurrentPPO "
        "| learn() ResetPPO / RecurrentPPO |" + (" learn() ResetPPO s |" if cells else "")
    )
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if cells else ""))
    for r in results:
        s = r["seconds_per_update"]
        cell = f" {r['cell']}{'' if r['memory_length'] is None else ' K=' + str(r['memory_length'])} |" if cells else ""
        learn = f" {_figure(r['learn_seconds'].get('reset'), 2)} |" if cells else ""
        print(
            f"| {r['setting']} |{cell} {r['minibatches_per_update']} | {s['floor']:.3f} | {s['reset']:.3f} "
            f"| {_figure(s.get('recurrent_ppo'), 3)} "
            f"| {r['reset_over_floor']:.2f} | {r['reset_without_resets_over_floor']:.2f} "
            f"| {_figure(r['recurrent_ppo_over_floor'], 2)} | {_figure(r['reset_over_recurrent_ppo'], 2)} "
            f"| {_figure(r['learn_ratio'], 2)} |{learn}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS,
                        help="'zoo', 'snippet' or TASK:LSTM:BATCH (default: %(default)s)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--learn-rollouts", type=int, default=2, help="rollouts each learn() call trains")
    parser.add_argument("--learn-repeats", type=int, default=3,
                        help="learn() calls per class from a fresh model, interleaved (0: none)")  # fmt: skip
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--n-epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cells", nargs="+", default=["lstm"], choices=CELLS,
                        help="memories compared per setting, at the same window and width (default: %(default)s)")  # fmt: skip
    parser.add_argument("--memory-length", type=int, default=32, help="memory_length of the trxl cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.learn_repeats < 0:
        parser.error(f"--learn-repeats must be at least 0, got {args.learn_repeats}")
    if args.learn_rollouts < 1:
        parser.error(f"--learn-rollouts must be at least 1, got {args.learn_rollouts}")
    for setting in args.settings:
        try:
            parse_setting(setting, args.n_steps, args.n_epochs)
        except ValueError as error:
            parser.error(str(error))
    th.set_num_threads(args.threads)
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

    print("command: python " + " ".join(sys.argv), flush=True)
    print(
        f"settings: n_steps={args.n_steps} n_epochs={args.n_epochs} (zoo: its own) threads={args.threads} "
        f"repeats={args.repeats} torch={th.__version__} machine={platform.machine()}",
        flush=True,
    )
    results = []
    for setting in args.settings:
        for cell in args.cells:
            result = bench_setting(setting, args, cell)
            results.append(result)
            print(
                json.dumps({k: v for k, v in result.items() if k not in ("runs", "learn_runs", "minibatch_shapes")}),
                flush=True,
            )
    print()
    print_table(results)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": sys.argv, "settings": vars(args), "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
