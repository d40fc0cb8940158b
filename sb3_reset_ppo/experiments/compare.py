"""
``python -m sb3_reset_ppo.compare``: should I switch? ResetPPO against RecurrentPPO (or any zoo algorithms) on
*your* task, per env step and per second, with intervals.

Every (algorithm, seed) trains through the RL Zoo with the same hyperparameter file and settings (the zoo's
``--conf-file`` and ``--hyperparams``), one torch thread each, on local worker processes or, with ``--address``,
as Ray tasks on a cluster. Runs are recorded as they finish, so the command is resumable: run it again and it
trains only what is missing, then writes the report. Each seed's runs start next to each other, so that runs of two
algorithms share the machine at the same time and their wall times can be compared.

The report (``REPORT.md``, ``summary.json`` and figures in ``--out``): the return against env steps and against
seconds of ``learn()``; for each algorithm the final return (mean of the last evaluations) and the return over
training (mean of all evaluations) as interquartile means with 95% stratified-bootstrap intervals (rliable); the
probability that each algorithm beats the baseline, at the end, over training, and at equal wall-clock time
(:func:`sb3_reset_ppo.experiments.stats.score_at_time`), with the two-sided Mann-Whitney test's Holm-adjusted p-value
(:func:`sb3_reset_ppo.experiments.stats.mann_whitney`: exact without ties, a permutation test with them); ``learn()``
time ratios of runs that trained at the same time on one machine; and a verdict in words, which says "not
significant" unless both the interval and the test say otherwise. Evaluations are the zoo's: ``--eval-episodes``
deterministic episodes on a separate env, ``--evaluations`` times over the budget.

Example::

    python -m sb3_reset_ppo.compare --env CueRecall-v0 --seeds 2 --timesteps 4000
    python -m sb3_reset_ppo.compare --env MyEnv-v0 --gym-packages my_package --conf-file my.yml --seeds 10
    python -m sb3_reset_ppo.compare --env MyEnv-v0 --gym-packages my_package --seeds 10 --address auto
"""

import argparse
import hashlib
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sb3_reset_ppo.experiments import executors, runner, stats
from sb3_reset_ppo.experiments.runner import RunSpec

DEFAULT_ALGOS = ["reset_ppo", "ppo_lstm"]
PACKAGED_CONF = Path(__file__).resolve().parents[1] / "zoo" / "reset_ppo.yml"
SETTINGS_FILE = "compare.json"
# Settings that comparisons recorded before they existed had at these values
SETTING_DEFAULTS: dict[str, Any] = {"num_threads": 1}
FEW_SEEDS = 5
# The tests' level (after Holm's adjustment over the report's tests)
ALPHA = 0.05


@dataclass
class Variant:
    """
    One arm of a comparison.

    :param name: Its name in the report (and its runs' folder)
    :param algo: The zoo algorithm (``reset_ppo``, ``ppo_lstm``, ...)
    :param hyperparams: Its own settings on top of the shared ones (the zoo's ``key:value`` form)
    """

    name: str
    algo: str
    hyperparams: list[str] = field(default_factory=list)


def parse_variants(algos: Sequence[str], variants: Sequence[Sequence[str]] | None) -> list[Variant]:
    """
    The arms: each of ``algos`` with its own name, then each ``--variant NAME ALGO [KEY:VALUE ...]``.

    :raises ValueError: a ``--variant`` without an algorithm, a setting not ``KEY:VALUE`` or setting the budget
        (``n_timesteps``: ``--timesteps`` sets it for every arm), a name that is not a plain folder name, or two
        arms with one name
    """
    arms = [Variant(algo, algo) for algo in algos]
    for values in variants or []:
        if len(values) < 2:
            raise ValueError(f"--variant needs NAME ALGO [KEY:VALUE ...], got {' '.join(values)!r}")
        name, algo, *settings = values
        bad = [setting for setting in settings if ":" not in setting]
        if bad:
            raise ValueError(f"--variant {name}: settings must be KEY:VALUE (the zoo's --hyperparams form), got {bad}")
        check_hyperparams(settings, f"--variant {name}")
        arms.append(Variant(name, algo, list(settings)))
    names = [arm.name for arm in arms]
    unsafe = [name for name in names if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name)]
    if unsafe:
        raise ValueError(f"arm names must be letters, digits, '_', '.' and '-' (they name folders), got {unsafe}")
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"each arm needs its own name; {duplicated} appear more than once in --algos/--variant")
    if len(arms) < 2:
        raise ValueError(f"a comparison needs at least two arms (--algos and --variant), got {names}")
    return arms


def check_hyperparams(settings: Sequence[str], option: str) -> None:
    """
    :raises ValueError: a setting gives ``n_timesteps``: the evaluations are spread over ``--timesteps``, which
        sets every arm's budget
    """
    budget_settings = [setting for setting in settings if setting.split(":", 1)[0].strip() == "n_timesteps"]
    if budget_settings:
        raise ValueError(f"{option}: give the budget with --timesteps (the same for every arm), not {budget_settings}")


def check_algos(arms: Sequence[Variant]) -> None:
    """
    :raises ValueError: an arm's algorithm the RL Zoo does not know (with the closest known name, as for ``--env``)
    """
    import difflib

    from sb3_reset_ppo.zoo import register

    register()
    from rl_zoo3.utils import ALGOS

    unknown = sorted({arm.algo for arm in arms if arm.algo not in ALGOS})
    if unknown:
        close = {name: difflib.get_close_matches(name, list(ALGOS), n=1) for name in unknown}
        hints = "".join(f" (did you mean {match[0]} for {name}?)" for name, match in close.items() if match)
        raise ValueError(f"unknown algorithms {unknown}{hints}: the RL Zoo's are {sorted(ALGOS)}")


# What the command imports, and the extra that installs it: to train (the RL Zoo), to report, on a Ray cluster
TRAIN_MODULES = {"rl_zoo3": "compare", "optuna": "compare"}
REPORT_MODULES = {"rliable": "compare", "scipy": "compare", "matplotlib": "compare"}
CLUSTER_MODULES = {"ray": "cluster"}


def missing_modules(modules: dict[str, str]) -> dict[str, str]:
    """The modules of ``modules`` (name: extra) that cannot be imported here."""
    import importlib.util

    return {name: extra for name, extra in modules.items() if importlib.util.find_spec(name) is None}


def check_requirements(report_only: bool, address: str | None) -> None:
    """
    Check that what the command will import is installed, before anything trains (a report that cannot be written
    after hours of training, or runs that all fail on the same missing module, are found at once).

    :param report_only: Only the report's modules are needed (``--report-only``)
    :param address: A Ray cluster's address (``--address``): Ray is needed too
    :raises ValueError: naming the missing modules and the extras that install them
    """
    modules = {**REPORT_MODULES, **({} if report_only else TRAIN_MODULES), **(CLUSTER_MODULES if address else {})}
    missing = missing_modules(modules)
    if missing:
        extras = ",".join(sorted(set(missing.values())))
        raise ValueError(
            f"python -m sb3_reset_ppo.compare needs {', '.join(sorted(missing))}, which cannot be imported here: in "
            f'the clone of sb3-reset-ppo, pip install -e ".[{extras}]"'
        )


def check_env(env_id: str, gym_packages: Sequence[str]) -> None:
    """
    Check that ``env_id`` is registered where the runs will train: after the imports of the zoo's trainer (the RL
    Zoo's envs, this package's memory tasks) and of ``--gym-packages``. A missing id is refused with the closest
    registered one, as the RL Zoo's ``train`` suggests it (``difflib.get_close_matches`` over gymnasium's registry).

    :param env_id: The ``--env`` value
    :param gym_packages: The modules that register the user's envs (``--gym-packages``)
    :raises ValueError: a module of ``gym_packages`` cannot be imported, or ``env_id`` is not registered
    """
    import difflib
    import importlib

    import gymnasium as gym
    import rl_zoo3.import_envs  # noqa: F401  (the envs the zoo's trainer registers)

    import sb3_reset_ppo.envs  # noqa: F401  (the memory tasks)

    for name in gym_packages:
        try:
            importlib.import_module(name)
        except Exception as error:  # an import that fails here fails in every run
            raise ValueError(
                f"--gym-packages {name} cannot be imported here ({type(error).__name__}: {error}): install it (on every "
                "machine of a cluster)"
            ) from error
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=1)
    hint = f"did you mean {close[0]}?" if close else "no registered id is close to it"
    raise ValueError(
        f"--env {env_id} is not a registered env id: {hint} (an env of your own needs --gym-packages with the module "
        "that registers it)"
    )


def check_out(out: Path) -> None:
    """
    Check that the comparison's folder can be written: it is a folder or does not exist yet, and the folder that
    holds it (or the nearest one that exists) is writable.

    :raises ValueError: ``out`` is a file, or cannot be created or written
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder: give a folder for the comparison")
    existing = next(folder for folder in (out, *out.parents) if folder.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} cannot be written: {existing} is not a folder you can write to")


# Gymnasium's env id grammar ([namespace/]name[-v<version>], gymnasium.envs.registration.ENV_ID_RE)
_ENV_ID = re.compile(r"(?:(?P<namespace>[\w:-]+)/)?(?P<name>[\w:.-]+?)(?:-v(?P<version>\d+))?")


def check_env_id(env_id: str) -> str:
    """
    An env id as gymnasium writes them, ``[namespace/]name[-v<version>]``, that names one folder (:func:`env_folder`).

    :param env_id: The ``--env`` value
    :return: ``env_id``
    :raises TypeError: ``env_id`` is not a str
    :raises ValueError: ``env_id`` is empty, has a path separator other than the namespace's one ``/``, or a name of
        dots only (``.``, ``..``: the report's folder would be the current folder or its parent)
    """
    if not isinstance(env_id, str):
        raise TypeError(f"--env must be a str, got {type(env_id).__name__}")
    match = _ENV_ID.fullmatch(env_id)
    if match is None or not match["name"].strip("."):
        raise ValueError(
            f"--env {env_id!r} is not an env id: expected [namespace/]name[-v<version>] (letters, digits, '_', "
            "':', '-' and '.' in the name, not only dots; at most one '/', after the namespace)"
        )
    return env_id


def env_folder(env_id: str) -> str:
    """The folder name of an env id (a namespace's ``/`` becomes ``-``, as the zoo's hub names do)."""
    return env_id.replace("/", "-")


def resolve_conf(args: argparse.Namespace) -> tuple[Path, str]:
    """
    The hyperparameter file every arm trains with and its text: ``--conf-file``; else the package's
    (``reset_ppo.yml``: the zoo's ``ppo_lstm`` settings and the memory tasks) if it has the env; else a file for
    ``--out`` (``conf.yml``, written by :func:`main` once the settings are checked) with ``--policy``, ``--n-envs``
    and ``--timesteps``, every other argument at the algorithms' defaults.

    :raises ValueError: the file is missing or not the zoo's YAML form, has no entry for the env, or no budget is
        known (neither ``--timesteps`` nor the entry's ``n_timesteps``)
    """
    if args.conf_file is not None:
        path = Path(args.conf_file).resolve()
        if not path.is_file():
            raise ValueError(f"--conf-file {args.conf_file} is not a file")
        text = path.read_text()
    else:
        path, text = PACKAGED_CONF, PACKAGED_CONF.read_text()
        if args.env not in (yaml.safe_load(text) or {}):
            if args.timesteps is None:
                raise ValueError(
                    f"env {args.env!r} has no settings in the package's file: give --timesteps (and --policy, "
                    "--n-envs), or a --conf-file with an entry for it"
                )
            path = args.out / "conf.yml"
            entry = {"policy": args.policy, "n_envs": args.n_envs, "n_timesteps": args.timesteps}
            text = yaml.safe_dump({args.env: entry})
    try:
        entries = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"--conf-file {path} is not valid YAML: {error}") from error
    if not isinstance(entries, dict) or args.env not in entries or not isinstance(entries[args.env], dict):
        raise ValueError(f"--conf-file {path} has no entry for env {args.env!r} (a YAML mapping of env ids to settings)")
    if args.timesteps is None and "n_timesteps" not in entries[args.env]:
        raise ValueError(f"--conf-file {path}'s entry for {args.env!r} has no n_timesteps: give --timesteps")
    return path, text


def plan(args: argparse.Namespace, arms: Sequence[Variant], conf: Path) -> list[RunSpec]:
    """Every (arm, seed) run, seed by seed with the arms of a seed next to each other."""
    return [
        RunSpec(
            algo=arm.algo, env=args.env, seed=seed,
            run_dir=args.out / "runs" / arm.name / env_folder(args.env) / f"seed{seed}",
            conf_file=conf, hyperparams=[*(args.hyperparams or []), *arm.hyperparams], eval_episodes=args.eval_episodes,
            evaluations=args.evaluations, steps=args.timesteps, gym_packages=list(args.gym_packages or []),
            keep_log=True, label=arm.name, num_threads=args.num_threads,
        )
        for seed in range(args.seeds)
        for arm in arms
    ]  # fmt: skip


def check_settings(out: Path, settings: dict[str, Any]) -> None:
    """
    Record the comparison's settings in ``out`` on the first call; later calls (resuming) must give the same ones.

    :raises ValueError: ``out`` holds a comparison with other settings
    """
    path = out / SETTINGS_FILE
    if path.exists():
        before = {**SETTING_DEFAULTS, **json.loads(path.read_text())}
        settings = {**SETTING_DEFAULTS, **settings}
        changed = sorted(
            key for key in settings.keys() | before.keys() if before.get(key) != settings.get(key) and key != "seeds"
        )
        if changed:
            raise ValueError(
                f"--out {out} holds a comparison with other settings ({', '.join(changed)}): give another --out, or the "
                "same settings to resume it (only --seeds may change: the report takes seeds 0 to N-1)"
            )
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2))


class Progress:
    """Prints each run as it finishes: how many are done, the time so far, and a forecast of the rest."""

    def __init__(self, total: int, workers: int | None) -> None:
        """
        :param total: Runs to train
        :param workers: Runs at a time, for the forecast (None: unknown, e.g. on a Ray cluster: no forecast)
        """
        self.total, self.workers, self.done = total, workers, 0
        self.start = time.monotonic()
        self.seconds: list[float] = []

    @staticmethod
    def clock(seconds: float) -> str:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{rest:02d}s"

    def __call__(self, spec: RunSpec, result: dict[str, Any]) -> None:
        self.done += 1
        self.seconds.append(float(result.get("seconds", 0.0)))
        left = self.total - self.done
        forecast = ""
        if left and self.workers:
            forecast = f", about {self.clock(statistics.median(self.seconds) * left / self.workers)} left"
        print(
            f"[{self.done}/{self.total}] {spec.label or spec.algo} seed {spec.seed}: "
            f"{runner.status(result, spec.evaluations)} in {result.get('seconds', 0.0):.0f} s "
            f"({self.clock(time.monotonic() - self.start)} so far{forecast})",
            flush=True,
        )
        if "error" in result:
            print(f"    {result['error'][:2000]}", flush=True)
        if result.get("returncode", 0) > 0:
            log = spec.run_dir / "log.txt"
            log = log if log.exists() else spec.run_dir / "log.txt.gz"
            tail = result.get("log_tail") or []
            print(f"    its log: {log}" + (", last lines:" if tail else ""), flush=True)
            for line in tail:
                print(f"      {line}", flush=True)


def train(specs: list[RunSpec], args: argparse.Namespace) -> None:
    """
    Train the runs not recorded yet, locally or on the Ray cluster at ``args.address``.

    :raises FileExistsError: a run's folder exists and is not a run's (:func:`runner.check_run_dir`), checked before
        anything trains: it is never deleted
    """
    todo = [spec for spec in specs if not runner.recorded(spec.run_dir, args.retry_failed)]
    for spec in todo:
        runner.check_run_dir(spec.run_dir)
    where = f"the Ray cluster at {args.address}" if args.address else f"{args.workers} local workers"
    print(f"{len(specs) - len(todo)} of {len(specs)} runs already done; {len(todo)} to train on {where}", flush=True)
    if not todo:
        return
    progress = Progress(len(todo), None if args.address else min(args.workers, len(todo)))
    if args.address:
        executors.run_ray(todo, args.address, on_result=progress)
    else:
        executors.run_local(todo, runner.run_one, args.workers, on_result=progress)


def learn_seconds(run: dict[str, Any]) -> float:
    """A run's ``learn()`` seconds: the time of its last evaluation (its training log's clock), else its process's."""
    times = run.get("times")
    return float(times[-1]) if times is not None and len(times) else float(run["seconds"])


def load(out: Path, env: str, arms: Sequence[Variant], final_evaluations: int, seeds: int) -> dict[str, list[dict[str, Any]]]:
    """
    The finished runs of seeds ``0..seeds-1`` of each arm, with ``times`` (``learn()`` seconds at each evaluation,
    None without a log).
    """
    loaded = runner.load_runs(out / "runs", final_evaluations)
    by_arm: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in arms}
    for run in loaded:
        if run["env"] == env and run["variant"] in by_arm and int(run["seed"]) < seeds:
            run["times"] = runner.elapsed_seconds(run)
            by_arm[run["variant"]].append(run)
    for arm_runs in by_arm.values():
        arm_runs.sort(key=lambda run: int(run["seed"]))
    return by_arm


def _scores(arm_runs: list[dict[str, Any]], key: str) -> np.ndarray:
    # (n_runs,) -> (n_runs, 1): rliable's (runs, tasks) layout, one task
    return np.array([[run[key]] for run in arm_runs], dtype=float)


class NothingToCompare(ValueError):
    """No finished runs of the baseline, or of every other arm, yet."""


def analyse(by_arm: dict[str, list[dict[str, Any]]], baseline: str, reps: int, final_evaluations: int) -> dict[str, Any]:
    """
    The report's numbers: per arm the IQM (95% CI) of the final return and of the return over training, and its
    median ``learn()`` seconds; per arm other than the baseline the probability it beats the baseline (95% CI) at
    the end, over training and at equal wall-clock time (:func:`equal_time`), each with the two-sided Mann-Whitney
    test's p-value (``p``), the method that computed it (``p_method``: :func:`stats.mann_whitney`) and its Holm
    adjustment over all the report's tests (``p_holm``), and its ``learn()`` time over the baseline's in pairs of
    runs that trained at the same time on one machine.

    :param by_arm: Each arm's finished runs (:func:`load`)
    :param baseline: The arm the others are compared with
    :param reps: Bootstrap resamples
    :param final_evaluations: The evaluations the runs' final return averages (``--final-evaluations``): a run that
        has stopped by the equal-wall-clock time counts that final return
    :raises NothingToCompare: the baseline or every other arm has no finished run
    """
    arms = {name: arm_runs for name, arm_runs in by_arm.items() if arm_runs}
    if baseline not in arms or len(arms) < 2:
        counts = {name: len(arm_runs) for name, arm_runs in by_arm.items()}
        raise NothingToCompare(
            f"nothing to compare yet: finished runs per arm {counts}; the "
            f"baseline {baseline!r} and at least one other arm need finished runs"
        )
    summary: dict[str, Any] = {"baseline": baseline, "reps": reps, "arms": {}, "comparisons": {}}
    tests: list[tuple[str, str, list[float], list[float]]] = []
    for key in ("final", "auc"):
        point, interval, poi, poi_ci = stats.aggregate({n: _scores(r, key) for n, r in arms.items()}, reps, baseline)
        for name in arms:
            entry = summary["arms"].setdefault(name, {"runs": len(arms[name])})
            entry[key] = stats.interval_triple(point[name][0], interval[name][0][0], interval[name][1][0])
            if name != baseline:
                summary["comparisons"].setdefault(name, {})[key] = stats.probability_triple(poi, poi_ci, f"{name},{baseline}")
                tests.append((name, key, [r[key] for r in arms[name]], [r[key] for r in arms[baseline]]))
    for name, arm_runs in arms.items():
        summary["arms"][name]["learn_seconds"] = statistics.median(learn_seconds(run) for run in arm_runs)
        summary["arms"][name]["hosts"] = sorted({str(run.get("host", "?")) for run in arm_runs})
    for name in arms:
        if name == baseline:
            continue
        comparison = summary["comparisons"][name]
        # Pairs of runs (any seeds) that trained at the same time on one machine: the only fair time ratios
        pairs = stats.side_by_side(arms[name], arms[baseline], same_seed=False)
        ratios = [learn_seconds(run) / learn_seconds(other) for run, other in pairs if learn_seconds(other) > 0]
        comparison["time_ratio"] = statistics.median(ratios) if ratios else None
        comparison["time_pairs"] = len(ratios)
        comparison["equal_time"] = equal_time(arms[name], arms[baseline], reps, final_evaluations)
        if comparison["equal_time"] is not None and comparison["equal_time"]["probability"] is not None:
            tests.append((name, "equal_time", *comparison["equal_time"].pop("scores")))
    results = [stats.mann_whitney(arm, base) for _, _, arm, base in tests]
    p_values = [p for p, _ in results]
    for (name, key, _, _), (p, method), p_holm in zip(tests, results, stats.holm(p_values), strict=True):
        summary["comparisons"][name].setdefault("p", {})[key] = p
        summary["comparisons"][name].setdefault("p_method", {})[key] = method
        summary["comparisons"][name].setdefault("p_holm", {})[key] = p_holm
    summary["tests"] = len(tests)
    return summary


def equal_time(
    arm_runs: list[dict[str, Any]], base_runs: list[dict[str, Any]], reps: int, final_evaluations: int
) -> dict[str, Any] | None:
    """
    The probability that an arm beats the baseline when both stop at the same wall-clock time: the faster arm's
    median ``learn()`` seconds. Each run is scored by :func:`stats.score_at_time`: a run that has stopped by then
    counts its final return (the mean of its last ``final_evaluations`` evaluations, as the final endpoint), a run
    still training its last evaluation by then.

    :param arm_runs: The arm's runs (:func:`load`, with ``times``)
    :param base_runs: The baseline's runs
    :param reps: Bootstrap resamples
    :param final_evaluations: The evaluations a final return averages (``--final-evaluations``)
    :return: ``seconds``, ``probability`` (None where a run has no evaluation by then) and ``scores`` (the two arms'
        scores then); None without training logs
    """
    if any(run["times"] is None for run in [*arm_runs, *base_runs]):
        return None
    at = min(
        statistics.median(learn_seconds(run) for run in arm_runs), statistics.median(learn_seconds(run) for run in base_runs)
    )

    def scores(group: list[dict[str, Any]]) -> list[float]:
        return [
            stats.score_at_time(run["times"], run["eval_mean"], at, final_evaluations, before_first=math.nan) for run in group
        ]

    arm_scores, base_scores = scores(arm_runs), scores(base_runs)
    if any(math.isnan(value) for value in [*arm_scores, *base_scores]):
        return {"seconds": at, "probability": None}
    # (n_runs,) -> (n_runs, 1): rliable's (runs, tasks) layout
    both = {"arm": np.array(arm_scores)[:, None], "base": np.array(base_scores)[:, None]}
    _, _, poi, poi_ci = stats.aggregate(both, reps, "base")
    return {
        "seconds": at,
        "probability": stats.probability_triple(poi, poi_ci, "arm,base"),
        "scores": (arm_scores, base_scores),
    }


def _triple(values: Sequence[float], digits: int = 1) -> str:
    return f"{values[0]:.{digits}f} ({values[1]:.{digits}f} to {values[2]:.{digits}f})"


def _probability_sentence(name: str, baseline: str, triple: Sequence[float], when: str, p_holm: float, tests: int) -> str:
    """
    A finding in words: better / worse only where the probability's 95% interval excludes 0.5 and the Mann-Whitney
    test's Holm-adjusted p-value is below 0.05 (with few seeds a bootstrap interval can exclude 0.5 by chance).
    """
    verdict = stats.significance(triple[1], triple[2], 0.5) if p_holm < ALPHA else "not significant"
    test = f"Mann-Whitney p = {p_holm:.3f} (Holm-adjusted over the report's {tests} tests)"
    if triple[0] in (0.0, 1.0):
        # Every run of one arm above every run of the other: the bootstrap interval is that one point, and says
        # nothing more; the test says whether so few runs can show it
        side = "ahead of" if triple[0] == 1.0 else "behind"
        pairs = f"{name} was {side} {baseline} in every pair of runs (P({name} > {baseline}) = {triple[0]:.0f})"
        words = {
            "better": f"**{name} is better** than {baseline}: {pairs}",
            "worse": f"**{name} is worse** than {baseline}: {pairs}",
            "not significant": f"{pairs}, but with so few runs that is **not significant**",
        }[verdict]
        return f"{when}, {words}; {test}."
    words = {
        "better": f"**{name} is better** than {baseline}",
        "worse": f"**{name} is worse** than {baseline}",
        "not significant": f"{name} and {baseline} do not differ significantly (**not significant**)",
    }[verdict]
    return f"{when}, {words}: P({name} > {baseline}) = {_triple(triple, 2)}; {test}."


def verdict(summary: dict[str, Any], seeds: int, failed: dict[str, int] | None = None) -> list[str]:
    """
    The verdict in words, one line per finding; "not significant" unless the probability's interval excludes 0.5
    and the Holm-adjusted Mann-Whitney p-value is below 0.05.

    :param summary: :func:`analyse`'s numbers
    :param seeds: The fewest finished runs of an arm (a warning below :data:`FEW_SEEDS`)
    :param failed: Runs per arm that failed with an error (left out of the numbers)
    """
    baseline, tests = summary["baseline"], summary["tests"]
    lines = []
    for name, comparison in summary["comparisons"].items():
        p_holm = comparison["p_holm"]
        lines.append(
            _probability_sentence(
                name, baseline, comparison["final"], "Per env step, at the end of training", p_holm["final"], tests
            )
        )
        lines.append(
            _probability_sentence(name, baseline, comparison["auc"], "Per env step, over training", p_holm["auc"], tests)
        )
        if comparison["time_ratio"] is not None:
            lines.append(
                f"Per second: {name}'s `learn()` takes {comparison['time_ratio']:.2f} of {baseline}'s time (median "
                f"of {comparison['time_pairs']} pairs of runs that trained at the same time on one machine)."
            )
        else:
            lines.append(
                f"Per second: no {name} run trained at the same time as a {baseline} run on one machine, so no time ratio "
                "is given (machines and loads differ in speed)."
            )
        same_time = comparison["equal_time"]
        if same_time is None:
            lines.append("Equal wall-clock time: not measured (runs without a training log).")
        elif same_time["probability"] is None:
            lines.append(
                f"Equal wall-clock time: not measured (a run had no evaluation by {same_time['seconds']:.0f} s, the faster "
                "arm's median `learn()` time)."
            )
        else:
            when = f"Stopped at {same_time['seconds']:.0f} s of `learn()` (the faster arm's median time)"
            lines.append(_probability_sentence(name, baseline, same_time["probability"], when, p_holm["equal_time"], tests))
    hosts = sorted({host for entry in summary["arms"].values() for host in entry["hosts"]})
    if len(hosts) > 1:
        lines.append(
            f"The runs trained on {len(hosts)} machines: the equal wall-clock comparison mixes their speeds (the time "
            "ratio uses only pairs on one machine)."
        )
    for name, count in sorted((failed or {}).items()):
        lines.append(f"{count} run(s) of {name} failed with an error and are left out of these numbers (see Failed runs).")
    if seeds < FEW_SEEDS:
        lines.append(
            f"With {seeds} seed(s) per arm the intervals are wide and rest on few runs: use 10 or more seeds before deciding."
        )
    return lines


def figures(by_arm: dict[str, list[dict[str, Any]]], folder: Path, env: str) -> list[Path]:
    """The return against env steps (mean over seeds, shaded: its standard error) and against ``learn()`` seconds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # the compare extra
        raise ImportError('the report\'s figures need matplotlib: in the clone, pip install -e ".[compare]"') from error
    folder.mkdir(parents=True, exist_ok=True)

    def save(fig: Any, ax: Any, xlabel: str, title: str, path: Path) -> Path:
        ax.set(xlabel=xlabel, ylabel="evaluation return", title=title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path

    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, arm_runs in by_arm.items():
        if not arm_runs:
            continue
        length = min(len(run["eval_mean"]) for run in arm_runs)
        # (n_runs, n_evaluations): the evaluations all runs have
        curves = np.array([run["eval_mean"][:length] for run in arm_runs])
        steps = arm_runs[0]["timesteps"][:length]
        mean = curves.mean(axis=0)
        spread = curves.std(axis=0, ddof=1) / np.sqrt(len(curves)) if len(curves) > 1 else np.zeros_like(mean)
        ax.plot(steps, mean, label=f"{name} ({len(curves)} seeds)")
        ax.fill_between(steps, mean - spread, mean + spread, alpha=0.2)
    paths.append(save(fig, ax, "env steps", f"{env}: return per env step", folder / "return_vs_steps.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for index, (name, arm_runs) in enumerate(by_arm.items()):
        timed = [run for run in arm_runs if run["times"] is not None]
        for number, run in enumerate(timed):
            ax.plot(run["times"], run["eval_mean"], color=f"C{index}", alpha=0.6, label=name if number == 0 else None)
    paths.append(save(fig, ax, "seconds of learn()", f"{env}: return per second (each run)", folder / "return_vs_seconds.png"))
    return paths


_METHOD_WORDS = {
    "exact": "exact where the scores have no ties",
    "permutation": "an exact permutation test on midranks where they have ties",
    "permutation (monte carlo)": f"a permutation test on midranks from {stats.PERMUTATIONS:,} random splits where they "
    "have ties and more splits exist",
    "undefined": "1 where every score is the same",
}


def _methods(summary: dict[str, Any]) -> str:
    """How the report's Mann-Whitney p-values were computed, in words (the methods it used, in a fixed order)."""
    used = {method for comparison in summary["comparisons"].values() for method in comparison.get("p_method", {}).values()}
    return "; ".join(words for method, words in _METHOD_WORDS.items() if method in used) or "none"


def _threads(num_threads: int) -> str:
    return "torch's default number of threads" if num_threads == -1 else f"{num_threads} torch thread{'s' * (num_threads > 1)}"


def markdown(summary: dict[str, Any], settings: dict[str, Any], lines: list[str], pictures: list[Path], out: Path) -> str:
    """``REPORT.md``: the verdict first, then the table, the figures, the settings and what failed."""
    baseline = summary["baseline"]
    text = [f"# {settings['env']}: {' vs '.join(summary['arms'])}", "", "## Verdict", ""]
    text += [f"- {line}" for line in lines]
    text += [
        "", "## Numbers", "",
        "Interquartile mean over seeds with 95% stratified-bootstrap intervals (rliable, "
        f"{summary['reps']} resamples); P(arm > {baseline}): the probability of improvement with its interval, and p: "
        f"the two-sided Mann-Whitney test's p-value ({_methods(summary)}), Holm-adjusted over the report's "
        f"{summary['tests']} tests. At equal wall-clock time a run that has stopped counts its final return, one still "
        "training its last evaluation by then.", "",
        f"| arm | runs | final return | return over training | median `learn()` s | P(> {baseline}) final | "
        f"P(> {baseline}) over training | `learn()` time / {baseline}'s (side-by-side pairs) |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, entry in summary["arms"].items():
        comparison = summary["comparisons"].get(name)
        if comparison is None:
            extra = "baseline | baseline | 1"
        else:
            ratio = (
                "none" if comparison["time_ratio"] is None else f"{comparison['time_ratio']:.2f} ({comparison['time_pairs']})"
            )
            p_holm = comparison["p_holm"]
            extra = (
                f"{_triple(comparison['final'], 2)}, p {p_holm['final']:.3f} | "
                f"{_triple(comparison['auc'], 2)}, p {p_holm['auc']:.3f} | {ratio}"
            )
        text.append(
            f"| {name} | {entry['runs']} | {_triple(entry['final'])} | {_triple(entry['auc'])} | "
            f"{entry['learn_seconds']:.0f} | {extra} |"
        )
    text += ["", "## Figures", ""]
    text += [f"![{picture.stem}]({picture.relative_to(out).as_posix()})" for picture in pictures]
    text += [
        "", "## Settings", "",
        f"- command: `{settings['command']}`",
        f"- hyperparameter file (every arm): `{settings['conf_file']}`; shared settings: {settings['hyperparams'] or 'none'}",
        f"- seeds 0 to {settings['seeds'] - 1}; budget: {settings['timesteps'] or 'the file n_timesteps'} env steps; "
        f"{settings['evaluations']} evaluations of {settings['eval_episodes']} deterministic episodes on a separate env; "
        f"final return: the mean of the last {settings['final_evaluations']}",
        "- `learn()` seconds: SB3's clock (env steps over `time/fps`) at each evaluation, the last update not counted; "
        f"they include the evaluations; runs trained with {_threads(settings.get('num_threads', 1))} each",
    ]  # fmt: skip
    text += [f"- arm {arm['name']}: `{arm['algo']}` {' '.join(arm['hyperparams'])}".rstrip() for arm in settings["arms"]]
    failed = settings.get("failed") or []
    if failed:
        text += ["", "## Failed runs", ""]
        text += [f"- {run['variant']} seed {run['seed']}: exit {run['returncode']}, log `{run['log']}`" for run in failed]
    return "\n".join(text) + "\n"


def report(args: argparse.Namespace, arms: Sequence[Variant], settings: dict[str, Any]) -> Path:
    """Write ``REPORT.md``, ``summary.json`` and the figures into ``args.out``; return the report's path."""
    by_arm = load(args.out, args.env, arms, args.final_evaluations, args.seeds)
    summary = analyse(by_arm, args.baseline, args.reps, args.final_evaluations)
    pictures = figures(by_arm, args.out / "figures", args.env)
    failed = [
        {
            "variant": run["variant"],
            "seed": run["seed"],
            "returncode": run["returncode"],
            "log": str(run["dir"] / "log.txt.gz"),
        }
        for run in runner.load_failed(args.out / "runs")
        if run["variant"] in by_arm and int(run["seed"]) < args.seeds and not (run["dir"] / runner.RUN_FILE).exists()
    ]
    counts = {name: sum(run["variant"] == name for run in failed) for name in {run["variant"] for run in failed}}
    lines = verdict(summary, min(entry["runs"] for entry in summary["arms"].values()), counts)
    (args.out / "summary.json").write_text(json.dumps({**summary, "failed": failed, "verdict": lines}, indent=2))
    path = args.out / "REPORT.md"
    path.write_text(markdown(summary, {**settings, "failed": failed}, lines, pictures, args.out))
    return path


def parser() -> argparse.ArgumentParser:
    """The command line (see the module's documentation)."""
    p = argparse.ArgumentParser(
        prog="python -m sb3_reset_ppo.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", required=True, help="the env id (registered by --gym-packages for your own env)")
    p.add_argument("--gym-packages", nargs="+", default=[], help="modules to import first, e.g. the one registering --env")
    p.add_argument("--algos", nargs="+", default=DEFAULT_ALGOS, help="zoo algorithms compared with their file's settings")
    p.add_argument("--variant", nargs="+", action="append", metavar="NAME ALGO [KEY:VALUE]",
                   help="one more arm: a name, a zoo algorithm and its own settings (repeatable)")  # fmt: skip
    p.add_argument("--baseline", default=None, help="the arm the others are compared with (default ppo_lstm, else the last)")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 per arm (default 10)")
    p.add_argument("--timesteps", type=int, default=None, help="env steps per run (default: the file's n_timesteps)")
    p.add_argument("--conf-file", default=None, help="the zoo hyperparameter file every arm trains with")
    p.add_argument("--hyperparams", nargs="+", default=[], help="settings for every arm (the zoo's KEY:VALUE form)")
    p.add_argument("--policy", default="MlpLstmPolicy", help="policy of the file written for an env the package lacks")
    p.add_argument("--n-envs", type=int, default=8, help="n_envs of the file written for an env the package lacks")
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--evaluations", type=int, default=runner.EVALUATIONS_PER_RUN, help="evaluations over each run")
    p.add_argument("--final-evaluations", type=int, default=2, help="the final return: mean of the last N evaluations")
    p.add_argument(
        "--num-threads",
        type=int,
        default=1,
        help="torch threads per run (default 1: more stall beside the other runs; -1: torch's default)",
    )
    p.add_argument("--workers", type=int, default=None,
                   help="local runs at a time (default: the cores over --num-threads, so one core per thread)")  # fmt: skip
    p.add_argument("--address", default=None, help="a Ray cluster's address: runs train there as tasks of one CPU")
    p.add_argument("--out", type=Path, default=None, help="the comparison's folder (default compare/<env>)")
    p.add_argument("--reps", type=int, default=stats.REPS, help="bootstrap resamples")
    p.add_argument("--report-only", action="store_true", help="train nothing; report the runs finished so far")
    p.add_argument("--retry-failed", action="store_true", help="train again runs that failed with an error")
    return p


def _check(args: argparse.Namespace, p: argparse.ArgumentParser, arms: Sequence[Variant]) -> None:
    try:
        runner.check_num_threads(args.num_threads, "--num-threads")
    except ValueError as error:
        p.error(str(error))
    if args.workers is None:
        args.workers = max((os.cpu_count() or 1) // max(args.num_threads, 1), 1)
    for name in ("seeds", "n_envs", "eval_episodes", "evaluations", "final_evaluations", "workers", "reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.timesteps is not None and args.timesteps < 1:
        p.error(f"--timesteps must be at least 1, got {args.timesteps}")
    if args.final_evaluations > args.evaluations:
        p.error(f"--final-evaluations ({args.final_evaluations}) must be at most --evaluations ({args.evaluations})")
    names = [arm.name for arm in arms]
    if args.baseline is None:
        args.baseline = "ppo_lstm" if "ppo_lstm" in names else names[-1]
    if args.baseline not in names:
        p.error(f"--baseline {args.baseline!r} is not one of the arms {names}")


def main(argv: Sequence[str] | None = None) -> Path:
    """
    Run the comparison (resumable) and write its report; return the report's path.

    Everything the command needs is checked before anything is written or trains: the options, the installed
    extras, the env id (registered, with a "did you mean"), the algorithms, the hyperparameter file, the output
    folder and the runs' folders. A refused command exits with status 2, names the cause and leaves nothing behind.
    """
    p = parser()
    args = p.parse_args(argv)
    try:
        arms = parse_variants(args.algos, args.variant)
        check_hyperparams(args.hyperparams, "--hyperparams")
    except ValueError as error:
        p.error(str(error))
    _check(args, p, arms)
    try:
        check_env_id(args.env)
        check_requirements(args.report_only, args.address)
        if not args.report_only:
            check_env(args.env, args.gym_packages)
            check_algos(arms)
    except ValueError as error:
        p.error(str(error))
    args.out = (args.out or Path("compare") / env_folder(args.env)).resolve()
    try:
        check_out(args.out)
        conf, text = resolve_conf(args)
    except ValueError as error:
        p.error(str(error))
    settings = {
        "env": args.env, "arms": [asdict(arm) for arm in arms], "baseline": args.baseline, "seeds": args.seeds,
        "timesteps": args.timesteps, "conf_file": str(conf), "conf_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "hyperparams": args.hyperparams, "gym_packages": args.gym_packages, "eval_episodes": args.eval_episodes,
        "evaluations": args.evaluations, "final_evaluations": args.final_evaluations, "num_threads": args.num_threads,
    }  # fmt: skip
    specs = plan(args, arms, conf)
    try:
        if not args.report_only:
            for spec in specs:  # a folder that is not a run's is never replaced: refused before anything is written
                runner.check_run_dir(spec.run_dir)
        check_settings(args.out, settings)
    except (ValueError, FileExistsError) as error:
        p.error(str(error))
    if conf == args.out / "conf.yml":  # the file written for an env the package lacks
        conf.write_text(text)
    settings["command"] = "python -m sb3_reset_ppo.compare " + " ".join(sys.argv[1:] if argv is None else argv)
    if not args.report_only:
        try:
            train(specs, args)
        except KeyboardInterrupt:
            p.exit(130, "interrupted: the finished runs are kept; run the same command again to resume\n")
        except FileExistsError as error:
            p.error(str(error))
    try:
        path = report(args, arms, settings)
    except NothingToCompare as error:
        p.exit(1, f"{p.prog}: no report: {error}\n")
    print(f"report: {path}")
    print("\n".join(json.loads((args.out / "summary.json").read_text())["verdict"]))
    return path
