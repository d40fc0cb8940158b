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

Usage: python benchmarks/speed/bench_floor.py [--settings mlp:64:128 ... zoo snippet] [--repeats 5] [--learn-repeats 3]
       [--learn-rollouts 2]
       [--json benchmarks/results/bench_floor.json]
"""

import argparse
import functools
import itertools
import json
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

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)
from sb3_reset_ppo import ResetPPO

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


class FloorNetwork(nn.Module):
    """The policy's networks in plain torch: features, actor and critic LSTMs, heads."""

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        n_actions: int,
        hidden: int,
        net_arch: tuple[list[int], list[int]],
        activation: type[nn.Module],
    ) -> None:
        super().__init__()
        self.image = len(observation_shape) == 3
        if self.image:
            # (C, H, W): channel-first, as SB3 transposes images (VecTransposeImage)
            self.features: nn.Module = NatureCNN(observation_shape[0], observation_shape[1])
            n_features = 512
        else:
            self.features = nn.Flatten()
            n_features = int(np.prod(observation_shape))
        self.lstm_actor = nn.LSTM(n_features, hidden)
        self.lstm_critic = nn.LSTM(n_features, hidden)
        self.mlp_pi = mlp([hidden, *net_arch[0]], activation)
        self.mlp_vf = mlp([hidden, *net_arch[1]], activation)
        self.action_net = nn.Linear(([hidden, *net_arch[0]])[-1], n_actions)
        self.value_net = nn.Linear(([hidden, *net_arch[1]])[-1], 1)


class FloorMinibatch:
    """Random data of one minibatch's shapes: ``rows`` windows of ``width`` slots over ``steps`` distinct steps."""

    def __init__(
        self, observation_shape: tuple[int, ...], n_actions: int, hidden: int, rows: int, width: int, steps: int
    ) -> None:
        generator = th.Generator().manual_seed(rows * 100_003 + width * 101 + steps)
        self.rows, self.width = rows, width
        shape = (steps, *observation_shape)
        if len(observation_shape) == 3:  # images, (C, H, W), stored as uint8 values
            self.observations = th.randint(0, 256, shape, generator=generator, dtype=th.uint8)
        else:
            self.observations = th.randn(shape, generator=generator)
        # (width * rows,): the distinct step each slot holds, time-major as the fused call reads them
        self.slot_steps = th.arange(width * rows) % steps
        n_slots = width * rows
        self.memory = [th.randn(1, rows, hidden, generator=generator) for _ in range(4)]
        self.actions = th.randint(0, n_actions, (n_slots,), generator=generator)
        self.old_log_prob = -th.rand(n_slots, generator=generator)
        self.advantages = th.randn(n_slots, generator=generator)
        self.returns = th.randn(n_slots, generator=generator)
        self.old_values = th.randn(n_slots, generator=generator)


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
    features = network.features(batch.observations)
    # (width * rows, F) -> (width, rows, F): the slots' features, time-major
    sequence = features[batch.slot_steps].reshape(batch.width, batch.rows, -1)
    latent_pi, _ = network.lstm_actor(sequence, (batch.memory[0], batch.memory[1]))
    latent_vf, _ = network.lstm_critic(sequence, (batch.memory[2], batch.memory[3]))
    # (width, rows, H) -> (width * rows, H)
    logits = network.action_net(network.mlp_pi(latent_pi.reshape(batch.width * batch.rows, -1)))
    # (width, rows, H) -> (width * rows, H); values (width * rows, 1) -> (width * rows,)
    values = network.value_net(network.mlp_vf(latent_vf.reshape(batch.width * batch.rows, -1))).flatten()
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
    hidden = config["kwargs"]["policy_kwargs"]["lstm_hidden_size"]
    network = FloorNetwork(observation_shape, n_actions, hidden, config["net_arch"], config["activation"])
    optimizer = th.optim.Adam(
        network.parameters(), lr=model.learning_rate if isinstance(model.learning_rate, float) else 3e-4, eps=1e-5
    )
    batches = [FloorMinibatch(observation_shape, n_actions, hidden, *shape) for shape in shapes]
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


def bench_setting(setting: str, args: argparse.Namespace) -> dict[str, Any]:
    config = parse_setting(setting, args.n_steps, args.n_epochs)
    models = {"reset": make_model(ResetPPO, config, args.seed), "recurrent_ppo": make_model(RecurrentPPO, config, args.seed)}
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

    runs: dict[str, list[float]] = {"floor": [], "reset": [], "recurrent_ppo": [], "reset_without_resets": []}
    functions = {
        "floor": floor_update_fn,
        "reset": reset_train,
        "recurrent_ppo": models["recurrent_ppo"].train,
        "reset_without_resets": reset_train_without_resets,
    }
    for _ in range(args.repeats):
        for name, function in functions.items():
            runs[name].append(timed(function))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    learn: dict[str, list[float]] = {"reset": [], "recurrent_ppo": []}
    for _ in range(args.learn_repeats):
        for name, cls in (("reset", ResetPPO), ("recurrent_ppo", RecurrentPPO)):
            model = make_model(cls, config, args.seed)
            learn[name].append(timed(functools.partial(model.learn, args.learn_rollouts * model.n_envs * model.n_steps)))
    learn_medians = {name: statistics.median(values) for name, values in learn.items()} if args.learn_repeats else {}
    return {
        "setting": setting,
        "env_id": config["task"]["env_id"],
        "policy": config["task"]["policy"],
        "n_envs": reset.n_envs,
        "n_steps": reset.n_steps,
        "n_epochs": reset.n_epochs,
        "batch_size": reset.batch_size,
        "lstm_hidden_size": config["kwargs"]["policy_kwargs"]["lstm_hidden_size"],
        "window_size": reset.window_length,
        "minibatches_per_update": len(shapes),
        "minibatch_shapes": sorted(set(shapes)),
        "seconds_per_update": medians,
        "runs": runs,
        "reset_over_floor": medians["reset"] / medians["floor"],
        "recurrent_ppo_over_floor": medians["recurrent_ppo"] / medians["floor"],
        "reset_without_resets_over_floor": medians["reset_without_resets"] / medians["floor"],
        "episode_starts_per_step": float(reset.rollout_buffer.episode_starts.mean()),
        "reset_over_recurrent_ppo": medians["reset"] / medians["recurrent_ppo"],
        "learn_seconds": learn_medians,
        "learn_runs": learn,
        "learn_ratio": learn_medians["reset"] / learn_medians["recurrent_ppo"] if learn_medians else None,
    }


def print_table(results: list[dict[str, Any]]) -> None:
    print(
        "| setting | minibatches per update | floor s | ResetPPO s | RecurrentPPO s | ResetPPO / floor "
        "| ResetPPO without resets / floor | RecurrentPPO / floor | ResetPPO / RecurrentPPO "
        "| learn() ResetPPO / RecurrentPPO |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["seconds_per_update"]
        print(
            f"| {r['setting']} | {r['minibatches_per_update']} | {s['floor']:.3f} | {s['reset']:.3f} "
            f"| {s['recurrent_ppo']:.3f} "
            f"| {r['reset_over_floor']:.2f} | {r['reset_without_resets_over_floor']:.2f} "
            f"| {r['recurrent_ppo_over_floor']:.2f} | {r['reset_over_recurrent_ppo']:.2f} "
            f"| {'-' if r['learn_ratio'] is None else format(r['learn_ratio'], '.2f')} |"
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
        result = bench_setting(setting, args)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k not in ("runs", "learn_runs", "minibatch_shapes")}), flush=True)
    print()
    print_table(results)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": sys.argv, "settings": vars(args), "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
