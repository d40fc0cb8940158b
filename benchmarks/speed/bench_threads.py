"""
Torch's thread count and the seconds of ``learn()``: one thread, two threads and torch's default, on a machine with
nothing else to do and beside one busy process.

Torch's default is one thread per core. For the small recurrent networks this package trains on a CPU, each
operation is too small to share out, and the threads wait for each other at every step: when another process holds
a core, a thread that is not running stalls all the others. This script measures what that costs.

Settings: the package's documented ones (``bench_train.py``'s tasks, RecurrentPPO's defaults otherwise:
``n_steps=128``, ``batch_size=128``, ``n_epochs=10``):

- ``mlp_lstm64``, ``mlp_lstm256``: ``CartPoleNoVel-v1``, ``MlpLstmPolicy``, 8 envs, LSTM 64 or 256;
- ``mlp_gru64``: the same with ``MlpGruPolicy``, hidden size 64 (ResetPPO only: RecurrentPPO has no GRU);
- ``cnn_lstm64``, ``cnn_lstm256``: ``CueRecallImage-v0`` (64x64 images), ``CnnLstmPolicy``, 4 envs.

Each setting trains with ``ResetPPO`` (its defaults) and sb3-contrib's ``RecurrentPPO`` (the same arguments), with
``--threads`` (default: 1, 2 and ``default``, torch's own choice: no ``set_num_threads`` call and no
``OMP_NUM_THREADS``/``MKL_NUM_THREADS``). Every measurement is a fresh process (the thread pool is set once per
process) that builds the model and times one ``learn()`` of ``--learn-steps`` env steps (default: one rollout).

Conditions (``--conditions``): ``idle``, nothing started by this script (other processes on the machine are not
stopped: the load average recorded with every figure says how idle it was), and ``busy``, beside one busy process
that this script starts (a Python loop that keeps one core busy, as another training run would) and stops.

Repeats are interleaved (every configuration once per repeat, each condition in turn), so that all see the same
machine; the figures are medians over the repeats of the wall seconds (what a user waits for) and CPU seconds of
``learn()``. One thread is measured first; a measurement with more threads is stopped once it has taken
``--stop-ratio`` times as long as that (enough to know that it is slower, without waiting minutes for it), and any
measurement after ``--timeout`` seconds; a stopped one counts as the time it was stopped at (a lower bound: the
table marks it ``>``). With every figure: the machine's 1-minute load average (``os.getloadavg``) at the start of
its runs, the lowest and highest over the repeats.

Writes ``<out>.json`` (every run) and ``<out>.txt`` (what it prints, the exact command first).

Usage: python benchmarks/speed/bench_threads.py [--settings mlp_lstm64 ...] [--algos reset_ppo recurrent_ppo]
       [--threads 1 2 default] [--conditions idle busy] [--repeats 5] [--learn-steps N] [--stop-ratio 10]
       [--timeout 600] [--out benchmarks/results/bench_threads]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SETTINGS: dict[str, dict[str, Any]] = {
    "mlp_lstm64": dict(env_id="CartPoleNoVel-v1", policy="MlpLstmPolicy", n_envs=8, hidden=64),
    "mlp_lstm256": dict(env_id="CartPoleNoVel-v1", policy="MlpLstmPolicy", n_envs=8, hidden=256),
    "mlp_gru64": dict(env_id="CartPoleNoVel-v1", policy="MlpGruPolicy", n_envs=8, hidden=64),
    "cnn_lstm64": dict(env_id="CueRecallImage-v0", policy="CnnLstmPolicy", n_envs=4, hidden=64),
    "cnn_lstm256": dict(env_id="CueRecallImage-v0", policy="CnnLstmPolicy", n_envs=4, hidden=256),
}
ALGOS = ("reset_ppo", "recurrent_ppo")
LABELS = {"reset_ppo": "ResetPPO", "recurrent_ppo": "RecurrentPPO"}
THREADS = ("1", "2", "default")
CONDITIONS = ("idle", "busy")
N_STEPS = 128
# Environment variables that set torch's (OpenMP's, MKL's) thread count: removed for every measurement
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Keeps one core busy; ends by itself once its parent (this script) is gone
BUSY_LOOP = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1_000_000):\n        pass\n"


def supported(setting: str, algo: str) -> bool:
    """RecurrentPPO has no GRU policy."""
    return not (algo == "recurrent_ppo" and "Gru" in SETTINGS[setting]["policy"])


def learn_steps(setting: str, steps: int | None) -> int:
    """The env steps of one measurement: ``steps``, else one rollout of the setting."""
    return steps or N_STEPS * SETTINGS[setting]["n_envs"]


def child(setting: str, algo: str, threads: str, steps: int, seed: int) -> dict[str, Any]:
    """
    One measurement, in this (fresh) process: set the thread count, build the model, time one ``learn()``.

    :return: ``learn_wall``, ``learn_cpu`` (seconds), ``torch_threads`` (``torch.get_num_threads()`` during it)
    """
    import warnings

    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)
    import torch as th
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecallImage-v0)
    from sb3_reset_ppo import ResetPPO

    if threads != "default":
        th.set_num_threads(int(threads))
    task = SETTINGS[setting]
    env = make_vec_env(task["env_id"], n_envs=task["n_envs"], seed=seed)
    kwargs: dict[str, Any] = dict(
        n_steps=N_STEPS, seed=seed, device="cpu", policy_kwargs=dict(lstm_hidden_size=task["hidden"]), verbose=0
    )
    model = (ResetPPO if algo == "reset_ppo" else RecurrentPPO)(task["policy"], env, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ResetPPO's advice on the thread count: the point of this measurement
        cpu, wall = time.process_time(), time.perf_counter()
        model.learn(steps)
        learn_cpu, learn_wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"learn_wall": learn_wall, "learn_cpu": learn_cpu, "torch_threads": th.get_num_threads()}


def measure(
    setting: str, algo: str, threads: str, steps: int, args: argparse.Namespace, timeout: float | None = None
) -> dict[str, Any]:
    """
    One measurement in a fresh process (:func:`child`), stopped after ``timeout`` seconds (default ``args.timeout``).

    :return: the child's figures (when stopped: the seconds it was stopped at as ``learn_wall``, a lower bound since
        they include the process's start, ``learn_cpu`` None), with ``timed_out`` and ``load`` (the 1-minute load
        average at its start)
    """
    timeout = args.timeout if timeout is None else timeout
    command = [sys.executable, __file__, "child", setting, algo, threads, str(steps), str(args.seed)]
    environment = {key: value for key, value in os.environ.items() if key not in THREAD_VARIABLES}
    load = os.getloadavg()[0]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, check=False)
    except subprocess.TimeoutExpired:
        return {"learn_wall": float(timeout), "learn_cpu": None, "torch_threads": None, "timed_out": True, "load": load}
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "timed_out": False, "load": load}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repeats; a median that is a stopped run's is marked ``wall_censored``."""
    walls = sorted(run["learn_wall"] for run in runs)
    wall = statistics.median(walls)
    censored = sum(run["timed_out"] for run in runs)
    cpus = [run["learn_cpu"] for run in runs if run["learn_cpu"] is not None]
    return {
        "wall": wall,
        # The median is a lower bound where it reaches a stopped run's time
        "wall_censored": censored > 0 and wall >= min(run["learn_wall"] for run in runs if run["timed_out"]),
        "cpu": statistics.median(cpus) if cpus else None,
        "load": [min(run["load"] for run in runs), max(run["load"] for run in runs)],
        "timed_out": censored,
        "torch_threads": sorted({run["torch_threads"] for run in runs if run["torch_threads"] is not None}),
        "runs": runs,
    }


def table(results: list[dict[str, Any]], threads: list[str], conditions: list[str]) -> list[str]:
    """One row per setting, algorithm and condition: wall seconds per thread count, ratios to one thread, the load."""
    header = "| setting | algorithm | condition |" + "".join(f" {t} thread(s) s |" for t in threads)
    others = [t for t in threads if t != "1"]
    if "1" in threads:
        header += "".join(f" {t} / 1 |" for t in others)
    header += " load (1 min) |"
    lines = [header, "|" + "---|" * header.count(" |")]
    for r in results:
        for condition in conditions:
            cells = r["figures"][condition]

            def wall(t: str, cells: dict[str, Any] = cells) -> str:
                return f"{'>' if cells[t]['wall_censored'] else ''}{cells[t]['wall']:.2f}"

            row = f"| {r['setting']} | {LABELS[r['algo']]} | {condition} |" + "".join(f" {wall(t)} |" for t in threads)
            if "1" in threads:
                for t in others:
                    marker = ">" if cells[t]["wall_censored"] else ""
                    row += f" {marker}{cells[t]['wall'] / cells['1']['wall']:.1f} |"
            loads = [load for t in threads for load in cells[t]["load"]]
            row += f" {min(loads):.1f} to {max(loads):.1f} |"
            lines.append(row)
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--threads", nargs="+", default=list(THREADS), help="thread counts (ints) and/or 'default'")
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--learn-steps", type=int, default=None, help="env steps per learn() (default: one rollout)")
    parser.add_argument("--stop-ratio", type=float, default=10.0,
                        help="stop a measurement with more threads at this many times one thread's time "
                        "(default 10)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds after which a measurement is stopped")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_threads"),
                        help="writes OUT.json and OUT.txt (default: %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("repeats", "timeout", "stop_ratio"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if args.learn_steps is not None and args.learn_steps < 1:
        parser.error(f"--learn-steps must be at least 1, got {args.learn_steps}")
    bad = [t for t in args.threads if t != "default" and not (t.isdigit() and int(t) >= 1)]
    if bad:
        parser.error(f"--threads takes positive ints and 'default', got {bad}")
    # One thread first: the others are stopped relative to it
    args.threads = sorted(dict.fromkeys(args.threads), key=lambda t: t != "1")
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmark; print and write the results."""
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["child"]:
        setting, algo, threads, steps, seed = arguments[1:]
        print(json.dumps(child(setting, algo, threads, int(steps), int(seed))), flush=True)
        return []
    args = parse_args(arguments)
    import torch as th

    from benchmarks.speed.bench_train import Printout

    printout = Printout("bench_threads.py", arguments)
    say = printout.say
    say(
        f"settings: n_steps={N_STEPS} batch_size=128 n_epochs=10 repeats={args.repeats} seed={args.seed} "
        f"stop ratio={args.stop_ratio:g} timeout={args.timeout:g} s cores={os.cpu_count()} torch={th.__version__} "
        f"(default threads here: {th.get_num_threads()}) machine={platform.machine()} "
        f"load at start={os.getloadavg()[0]:.2f}"
    )
    configs = [(s, a) for s in args.settings for a in args.algos if supported(s, a)]
    runs: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for repeat in range(args.repeats):
        for condition in args.conditions:
            # One process that keeps one core busy until the condition's measurements are done
            busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if condition == "busy" else None
            try:
                for setting, algo in configs:
                    one: float | None = None
                    for threads in args.threads:
                        timeout = args.timeout if one is None else min(args.timeout, args.stop_ratio * one)
                        run = measure(setting, algo, threads, learn_steps(setting, args.learn_steps), args, timeout)
                        if threads == "1" and not run["timed_out"]:
                            one = run["learn_wall"]
                        runs.setdefault((setting, algo, condition, threads), []).append(run)
                        print(
                            f"repeat {repeat} {condition} {setting} {algo} threads={threads}: "
                            f"{'>' if run['timed_out'] else ''}{run['learn_wall']:.2f} s (load {run['load']:.2f})",
                            flush=True,
                        )
            finally:
                if busy is not None:
                    busy.terminate()
                    busy.wait()
    results = [
        {
            "setting": setting,
            "algo": algo,
            **SETTINGS[setting],
            "learn_steps": learn_steps(setting, args.learn_steps),
            "figures": {
                condition: {threads: summarise(runs[setting, algo, condition, threads]) for threads in args.threads}
                for condition in args.conditions
            },
        }
        for setting, algo in configs
    ]
    say("")
    say("learn() wall seconds, median over the repeats; '>': at least (the median run was stopped: --stop-ratio, --timeout)")
    for line in table(results, args.threads, args.conditions):
        say(line)
    printout.write(args.out, {"settings": vars(args), "cores": os.cpu_count(), "results": results})
    return results


if __name__ == "__main__":
    main()
