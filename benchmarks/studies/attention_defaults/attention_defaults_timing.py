"""
The attention defaults study's budget sizing (``PROTOCOL.md``, Budget): ``learn()`` CPU seconds per 1,000 env steps of
a few settings on each task, from one short run in this process (one torch thread), with the study's base file and the
setting's ``policy_kwargs``, as the attention study's timing builds the model (``benchmarks/studies/attention/timing.py``).

Not a counted run and not a speed benchmark: one run per setting and task, to size the budget. By default the
cheapest setting, the base and the two most costly (fewer layers, more width, more layers); the others are
extrapolated in the protocol.

Usage: python benchmarks/studies/attention_defaults/attention_defaults_timing.py [--steps 4096] [--tasks ...]
       [--settings ...]
"""

import argparse
import json
import platform

from benchmarks.kit import run_grid
from benchmarks.studies.attention import timing
from benchmarks.studies.attention_defaults import attention_defaults_study as study

TIMED = ("base", "n_trxl_layers_1", "trxl_dim_128", "n_trxl_layers_3")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--tasks", nargs="+", default=list(study.TASKS), choices=list(study.TASKS))
    parser.add_argument("--settings", nargs="+", default=list(TIMED), choices=list(study.SETTINGS))
    args = parser.parse_args(argv)
    print(f"# {platform.processor() or platform.machine()}, one torch thread, {args.steps} env steps per run", flush=True)
    for task in args.tasks:
        budget = float(run_grid.read_conf(study.CONF)[task]["n_timesteps"])
        for setting in args.settings:
            extra = [f"policy_kwargs:{study.policy_kwargs(setting, task)!r}", *study.WINDOW]
            row = {"setting": setting, "task": task}
            row.update(timing.time_learn(*timing.zoo_settings("reset_ppo", study.CONF, extra, task), task, args.steps))
            row["budget_cpu_minutes"] = row["cpu_per_1000_steps"] * budget / 1000 / 60
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
