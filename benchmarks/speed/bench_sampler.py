"""
What the window sampler costs inside ``train()``: planning the epochs and gathering their minibatches.

For each setting of ``bench_floor.py`` (the same models, the same names), ResetPPO learns one rollout, then, on that
rollout, in one process, one torch thread, CPU time of the process:

- ``train()`` per update (``--repeats`` calls, median; the per-rollout setup included, as in ``bench_floor.py``);
- ``plan_epoch`` for the ``n_epochs`` epochs of one update (the windows, their order, the minibatch cuts);
- the epochs' minibatches as ``rollout_buffer`` yields them to ``train()`` (planning and gathering: every index,
  device gather, reset layout and weight of every minibatch of one update), without the network.

Each is printed per update and as a share of ``train()``: what removing the sampler's host work entirely could save.

Usage: python benchmarks/speed/bench_sampler.py [--settings zoo mlp:64:128 ...] [--repeats 10]
"""

import argparse
import statistics
import sys
from collections.abc import Callable

import numpy as np
import torch as th

from benchmarks.speed import bench_floor
from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.common.windows import plan_epoch


def per_update(function: Callable[[], None], repeats: int) -> float:
    """Median CPU seconds of ``repeats`` calls (``bench_floor.timed`` each)."""
    return statistics.median(bench_floor.timed(function) for _ in range(repeats))


def bench_setting(setting: str, repeats: int, seed: int) -> dict[str, float]:
    config = bench_floor.parse_setting(setting, 128, 10)
    model = bench_floor.make_model(ResetPPO, config, seed)
    assert isinstance(model, ResetPPO)
    model.learn(model.n_envs * model.n_steps)  # one rollout and one train(): the warm-up
    buffer = model.rollout_buffer
    generator = np.random.default_rng(seed)

    def train() -> None:
        buffer.release()  # the per-rollout setup counts
        model.train()

    def plans() -> None:
        sampler = buffer.sampler()
        for _ in range(model.n_epochs):
            plan_epoch(
                sampler.n_steps, sampler.n_envs, sampler.settings, model.batch_size, sampler.consecutive_windows, generator
            )

    def minibatches() -> None:
        buffer.release()  # the per-rollout setup counts, as in train()
        for _ in range(model.n_epochs):
            for _samples in buffer.get(model.batch_size):
                pass

    train()
    return {
        "train": per_update(train, repeats),
        "plans": per_update(plans, repeats),
        "minibatches": per_update(minibatches, repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=["zoo", "mlp:64:128", "snippet"])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    for setting in args.settings:
        try:
            bench_floor.parse_setting(setting, 128, 10)
        except ValueError as error:
            parser.error(str(error))
    th.set_num_threads(1)
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

    print("command: python " + " ".join(sys.argv), flush=True)
    print("| setting | train() ms per update | plan_epoch ms | share of train() | minibatches ms | share of train() |")
    print("|---|---|---|---|---|---|")
    for setting in args.settings:
        ms = {name: 1000 * seconds for name, seconds in bench_setting(setting, args.repeats, args.seed).items()}
        print(
            f"| {setting} | {ms['train']:.1f} | {ms['plans']:.1f} | {ms['plans'] / ms['train']:.1%} "
            f"| {ms['minibatches']:.1f} | {ms['minibatches'] / ms['train']:.1%} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
