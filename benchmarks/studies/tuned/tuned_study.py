"""
Tuned against tuned, with today's ResetPPO (``benchmarks/studies/tuned/PROTOCOL.md``): each arm's setting selected
from its search, then trained on fresh seeds.

``select``: per (env, arm) whose search has its 30 trials, the 5 best completed trials of the search
(:func:`benchmarks.kit.tune.top_trials`: value, then the earlier trial), each trained on the selection seeds 200 to 202
at the env's budget, as the grid trains a run (20 evaluations of 20 episodes, one torch thread, its training log kept):
``<out>/selection/<env>/<arm>/trial<k>/seed<s>/``, the trial's settings in ``trial<k>.yml`` beside them. Once the 15
runs are stored, the selected trial (the highest mean over its 3 runs of the final evaluation's mean return; ties: the
earlier trial) is written to ``selected.json`` in the same folder, with each top trial's runs and search value.
``fresh``: each selected setting on the fresh seeds 300 to 309, ``<out>/fresh/<arm>/<env>/seed<s>/`` (only where
the selection is complete). A seed's two runs train side by side, so that their ``learn()`` seconds compare (one
machine, one session): its RecurrentPPO run starts first, and its ResetPPO run only once that one has started or is
stored (:func:`partner_started`), also under ``--minutes`` (a pair whose longer run does not fit waits for the next
session; until an arm has a finished fresh run, its selected trial's selection runs time it).

The searches: ``tuned_reset``'s are this study's (``<out>/search/<env>/tuned_reset/study.log``, ``tune.py optimize
--arms tuned_reset --out <out>/search``); ``ev_rppo``'s on EarlyChoice-v0 and CartPoleNoVel-v1 are the evidence
study's Q4 searches (``benchmarks/results/tuning/<env>/ev_rppo/study.log``, read, never written), elsewhere this
study's. Both modes are resumable (stored runs are skipped; a run cut by a signal trains again) and store the
study's folder as its tables when they end (``rundata.pack``), also when stopped by a signal: the first SIGINT or
SIGTERM starts no new run and lets the running ones finish (then exits with status 130, a KeyboardInterrupt, and
writes no selection), a second one stops them at once (:func:`sb3_reset_ppo.experiments.executors.run_workers`).

Usage: python benchmarks/studies/tuned/tuned_study.py select|fresh [--envs ...] [--arms ...] [--workers 2]
       [--minutes M] [--steps N --out DIR --searches DIR --trials T]  (--steps: a smoke test into another folder)
"""

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.kit import run_grid, rundata, tune
from sb3_reset_ppo.experiments import runner

HERE = Path(__file__).resolve().parent
OUT = rundata.RESULTS / "tuned"
ARMS = ["tuned_reset", "ev_rppo"]
OTHER_ARM = "ev_rppo"  # RecurrentPPO: a seed's run that starts first in the fresh stage (its ResetPPO run beside it)
ENVS = ["EarlyChoice-v0", "CartPoleNoVel-v1"]
# The evidence study's Q4 searches reused for RecurrentPPO (PROTOCOL.md, Arms and search); every other search is
# this study's
Q4_SEARCHES = {("EarlyChoice-v0", "ev_rppo"), ("CartPoleNoVel-v1", "ev_rppo")}
# Trials of every search (the Q4 budget), and the best of them the selection trains
TRIALS = 30
TOP = 5
SELECTION_SEEDS = (200, 201, 202)
FRESH_SEEDS = tuple(range(300, 310))
EVAL_EPISODES = 20
SELECTED = "selected.json"


def search_storage(env_id: str, arm: str, out: Path, searches: Path = tune.OUT) -> str:
    """
    The journal of an arm's search on an env: the Q4 study's in ``searches`` (unpacked from its tables where
    needed) for :data:`Q4_SEARCHES`, else this study's in ``out/search``.
    """
    if (env_id, arm) in Q4_SEARCHES:
        path = tune.study_path(searches, env_id, arm)
        rundata.ensure(path.parent)
    else:
        path = tune.study_path(out / "search", env_id, arm)
    if not path.exists():
        raise ValueError(f"no search of {arm} on {env_id}: {path} does not exist (run its search first)")
    return str(path)


def selection_folder(out: Path, env_id: str, arm: str) -> Path:
    return out / "selection" / env_id / arm


def trial_config(folder: Path, env_id: str, arm: str, number: int, params: dict[str, Any]) -> Path:
    """
    The hyperparameter file of a trial's runs, ``trial<k>.yml`` in ``folder``: the env's entry of the arm's config
    with the trial's converted settings (:func:`benchmarks.kit.tune.best_config`). Written once: the file the
    stored runs trained with is never rewritten.
    """
    path = folder / f"trial{number}.yml"
    if not path.exists():
        spec = run_grid.VARIANTS[arm]
        config = tune.best_config(spec["algo"], env_id, spec["conf"], params)
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({env_id: config}, sort_keys=True))
    return path


def job(
    arm: str, env_id: str, seed: int, conf: Path, run_dir: Path, steps: int | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """A run of the grid's layout (``run_grid.spec_of``) with a trial's hyperparameter file."""
    return {
        "variant": arm, "env": env_id, "seed": seed, "eval_episodes": EVAL_EPISODES, "conf": conf, "steps": steps,
        "extra": extra, "run_dir": run_dir,
    }  # fmt: skip


def selection_jobs(
    env_id: str, arm: str, out: Path, steps: int | None, searches: Path = tune.OUT, trials: int = TRIALS
) -> list[dict[str, Any]]:
    """
    The :data:`TOP` x :data:`SELECTION_SEEDS` runs of an arm's selection on an env (trials best first).

    :raises ValueError: the search does not exist or has fewer than ``trials`` finished (completed or pruned) trials
    """
    storage = search_storage(env_id, arm, out, searches)
    done = tune.finished_trials(storage, tune.study_name(env_id, arm))
    if done < trials:
        raise ValueError(f"the search of {arm} on {env_id} has {done} of its {trials} trials finished ({storage})")
    folder = selection_folder(out, env_id, arm)
    jobs = []
    for rank, (number, value, params) in enumerate(tune.top_trials(storage, tune.study_name(env_id, arm), TOP)):
        conf = trial_config(folder, env_id, arm, number, params)
        extra = {"stage": "selection", "trial": number, "rank": rank, "search_value": value}
        runs = folder / f"trial{number}"
        jobs += [job(arm, env_id, seed, conf, runs / f"seed{seed}", steps, extra) for seed in SELECTION_SEEDS]
    return jobs


def select(folder: Path, trials: list[int]) -> dict[str, Any] | None:
    """
    The selected trial of a selection folder: the highest mean of the final evaluation's mean return over its
    :data:`SELECTION_SEEDS` runs, ties to the earlier trial; None until every run of ``trials`` is stored.

    :param folder: ``<out>/selection/<env>/<arm>``
    :param trials: the trials selected from (the search's top :data:`TOP`)
    :return: ``{"trial", "mean", "means": {trial: mean}, "finals": {trial: [final per seed]}, "seeds"}``
    """
    finals: dict[int, dict[int, float]] = {number: {} for number in trials}
    # load_runs reads <name>/<env>/seed<k>/: here trial<k>/ as the name, the arm's folder as the grid
    for run in runner.load_runs(folder.parent):
        if Path(run["dir"]).parent.parent.name == folder.name and int(run["trial"]) in finals:
            finals[int(run["trial"])][int(run["seed"])] = float(run["final"])
    if any(set(by_seed) != set(SELECTION_SEEDS) for by_seed in finals.values()):
        return None
    means = {number: statistics.fmean(by_seed.values()) for number, by_seed in finals.items()}
    best = min(means, key=lambda number: (-means[number], number))
    return {
        "trial": best, "mean": means[best], "means": {str(k): v for k, v in means.items()},
        "finals": {str(k): [finals[k][seed] for seed in SELECTION_SEEDS] for k in trials}, "seeds": list(SELECTION_SEEDS),
    }  # fmt: skip


def selected_trial(out: Path, env_id: str, arm: str) -> int | None:
    """The number of an arm's selected trial on an env (its ``selected.json``), None before its selection is stored."""
    path = selection_folder(out, env_id, arm) / SELECTED
    return int(json.loads(path.read_text())["trial"]) if path.exists() else None


def fresh_jobs(env_id: str, arm: str, out: Path, steps: int | None) -> list[dict[str, Any]]:
    """The fresh-seed runs of an arm's selected setting on an env (none before its selection is stored)."""
    number = selected_trial(out, env_id, arm)
    if number is None:
        path = selection_folder(out, env_id, arm) / SELECTED
        print(f"{env_id} {arm}: no selection stored ({path}); run `select` first", flush=True)
        return []
    conf = selection_folder(out, env_id, arm) / f"trial{number}.yml"
    extra = {"stage": "fresh", "trial": number}
    return [job(arm, env_id, seed, conf, out / "fresh" / arm / env_id / f"seed{seed}", steps, extra) for seed in FRESH_SEEDS]


def selection_timing(env_id: str, arm: str, out: Path) -> list[dict[str, Any]]:
    """
    The selected trial's selection runs, named as its fresh runs (variant and env): the same settings and budget on
    other seeds, so that their wall times time the fresh runs under ``--minutes`` until a fresh run of the arm has
    finished (``run_grid.median_times``; without them a first fresh run could start only with no time limit).
    """
    number = selected_trial(out, env_id, arm)
    if number is None:
        return []
    runs = selection_folder(out, env_id, arm) / f"trial{number}"
    return [{"variant": arm, "env": env_id, "run_dir": runs / f"seed{seed}"} for seed in SELECTION_SEEDS]


def interleaved(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs ordered by env, then seed and trial rank, arms alternating: two workers train the two arms side by side."""
    return sorted(jobs, key=lambda j: (j["env"], j["extra"].get("rank", 0), j["seed"], ARMS.index(j["variant"])))


def fresh_order(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fresh-seed runs ordered by env and seed, each seed's RecurrentPPO run before its ResetPPO run."""
    return sorted(jobs, key=lambda j: (j["env"], j["seed"], j["variant"] != OTHER_ARM))


def partner_started(job: dict[str, Any], todo: list[dict[str, Any]]) -> bool:
    """
    Whether a fresh-seed run may start: a RecurrentPPO run always, a ResetPPO run once its seed's RecurrentPPO run is
    no longer waiting in ``todo`` (started, stored, or not part of this call).
    """
    if job["variant"] == OTHER_ARM:
        return True
    return not any(j["variant"] == OTHER_ARM and (j["env"], j["seed"]) == (job["env"], job["seed"]) for j in todo)


def store(out: Path) -> None:
    """Store the study's folder as its tables (``rundata.pack``), if it exists."""
    if out.exists():
        rows, files = rundata.pack(out.name, out.parent)
        print(f"stored: {files} files in {rows} rows -> {rundata.runs_table(out.name, out.parent)}", flush=True)


def train(
    jobs: list[dict[str, Any]],
    workers: int,
    minutes: float | None,
    out: Path,
    ready: Callable[[dict[str, Any], list[dict[str, Any]]], bool] | None = None,
    timed_by: list[dict[str, Any]] | None = None,
) -> None:
    """
    Train the runs of ``jobs`` not stored yet (a run that failed with an error stays failed: delete its folder).

    :param out: The study's folder, stored if a signal stops the runs (after the running ones have finished)
    :param ready: Whether a run may start now, given the runs not started yet (``run_grid.next_job``)
    :param timed_by: Runs whose wall times stand in for a variant and env of ``jobs`` without a finished run
        (:func:`selection_timing`)
    """
    todo = [j for j in jobs if not runner.recorded(j["run_dir"])]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} runs already stored; {len(todo)} to run on {workers} workers", flush=True)
    note = run_grid.machine_note(jobs)
    if note:
        print(note, flush=True)
    try:
        times = {**run_grid.median_times(timed_by or []), **run_grid.median_times(jobs)}
        run_grid.run_until(todo, times, workers, minutes, ready)
    except KeyboardInterrupt:
        store(out)
        raise


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["select", "fresh"])
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--arms", nargs="+", default=ARMS, choices=ARMS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=None, help="start only runs expected to finish in time")
    parser.add_argument("--out", type=Path, default=OUT, help="the study's folder (its tables beside it)")
    parser.add_argument("--searches", type=Path, default=tune.OUT, help="the Q4 searches (benchmarks/results/tuning)")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (a smoke test; needs --out)")
    parser.add_argument("--trials", type=int, default=TRIALS, help="select: trials a search must have finished")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.steps is not None and (args.steps < 1 or args.out == OUT):
        parser.error(f"--steps must be positive and needs --out (the study's folder keeps its budgets), got {args.steps}")
    print("command: python " + " ".join(["benchmarks/studies/tuned/tuned_study.py", *sys.argv[1:]]), flush=True)
    out = args.out.resolve()
    rundata.ensure(out, out.parent)  # the stored runs on disk, so that packing again keeps them
    pairs = [(env_id, arm) for env_id in args.envs for arm in args.arms]
    if args.mode == "select":
        jobs = {}
        for pair in pairs:
            try:
                jobs[pair] = selection_jobs(*pair, out, args.steps, args.searches, args.trials)
            except ValueError as error:  # a search not finished yet: the other pairs go on
                print(f"{pair[0]} {pair[1]}: not selected: {error}", flush=True)
        train(interleaved([j for pair_jobs in jobs.values() for j in pair_jobs]), args.workers, args.minutes, out)
        for (env_id, arm), pair_jobs in jobs.items():
            folder = selection_folder(out, env_id, arm)
            chosen = select(folder, list(dict.fromkeys(int(j["extra"]["trial"]) for j in pair_jobs)))
            if chosen is None:
                print(f"{env_id} {arm}: selection incomplete (runs missing or failed)", flush=True)
                continue
            # The search's values beside the selection's (reported together; only the fresh runs are tested)
            chosen["search_values"] = {str(j["extra"]["trial"]): j["extra"]["search_value"] for j in pair_jobs}
            runner.write_record(folder / SELECTED, chosen)
            means = chosen["means"]
            print(f"{env_id} {arm}: trial {chosen['trial']} selected (mean {chosen['mean']:.3f}; means {means})", flush=True)
    else:
        fresh = fresh_order([j for pair in pairs for j in fresh_jobs(*pair, out, args.steps)])
        timing = [j for pair in pairs for j in selection_timing(*pair, out)]
        train(fresh, args.workers, args.minutes, out, partner_started, timing)
    store(out)


if __name__ == "__main__":
    main()
