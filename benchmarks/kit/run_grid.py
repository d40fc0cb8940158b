"""
Benchmark grid: variants x envs x seeds, each run trained and evaluated by the RL Zoo.

Variants: ``reset`` (reset_ppo, boundary reset, uniform weighting), ``reset_importance`` (reset,
importance), ``mask`` (reset_ppo, boundary mask, uniform: the masking baseline, losses averaged over all
``B * W`` slots), ``mask_kept`` (boundary mask, losses averaged over kept slots as sb3-contrib does) and
``ppo_lstm`` (sb3-contrib's RecurrentPPO). Runs go to ``<out>/<variant>/<env>/seed<k>/`` (the zoo's own log folder
inside, with ``evaluations.npz``); a finished run writes ``run.json`` and is skipped next time, so the grid
is resumable. A run whose trainer exits with an error writes ``failed.json`` (and keeps its log as
``log.txt.gz``): the report lists it and the grid does not train it again unless ``--retry-failed``; a run cut
short by a signal or a session's end leaves neither and is trained again. Runs execute in parallel worker
processes, at most one per core, one torch thread each.

With ``--study fresh_memory``: the fresh-memory study of ``benchmarks/studies/fresh_memory/PROTOCOL.md`` (variants
``fm_*``, config ``benchmarks/studies/fresh_memory/fresh_memory.yml``, training logs kept as ``log.txt.gz``), into
``benchmarks/results/fresh_memory``. With ``--study gru``: the GRU study (``benchmarks/studies/gru/PROTOCOL.md``).
With ``--study evidence``: the evidence study (``benchmarks/studies/evidence/PROTOCOL.md``: variants ``ev_*`` incl.
``ev_rppo``, config ``benchmarks/studies/evidence/evidence.yml``, per-env seed counts, secondary arms on a subset of
envs). Studies with their own config keep every run's log as ``log.txt.gz`` and its curves as ``progress.csv.gz``.

With ``--study coverage``: the coverage study (``benchmarks/studies/coverage/PROTOCOL.md``: variants ``cv_*``, config
``benchmarks/studies/evidence/evidence.yml``; arms whose resolved settings coincide on an env train once, under the first).

With ``--address`` (a Ray cluster's, e.g. ``auto`` on a machine of the cluster) the runs train as Ray tasks of one
CPU each, their files sent back to this process (no shared filesystem needed; every machine needs this package's
environment). A run lost with its machine or worker is sent again (up to three times in all), and stored once.

With ``--minutes M`` a worker starts only runs expected to finish within M minutes of the start (the median wall
time of the finished runs of the same variant and env, times 1.25; runs of a pair never timed only without
``--minutes``), taking the next run in the grid's order that fits: a session that ends at a known time leaves no run
half done. ``--forecast`` prints the time the remaining runs need.

Usage: python benchmarks/kit/run_grid.py [--study grid|fresh_memory|gru|evidence|coverage] [--envs ...] [--variants ...]
       [--seeds N] [--workers 2] [--minutes M] [--address RAY_ADDRESS] [--forecast] [--retry-failed]
"""

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sb3_reset_ppo.experiments import executors, runner
from sb3_reset_ppo.experiments.runner import FAILED_FILE, RunSpec, recorded, status

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
# The published grid's config (window_stride: 1), moved from the package's zoo/reset_ppo.yml, which now keeps the defaults
RESET_PPO_CONF = HERE / "grid.yml"
PPO_LSTM_CONF = HERE / "ppo_lstm.yml"
FRESH_MEMORY_CONF = BENCHMARKS / "studies" / "fresh_memory" / "fresh_memory.yml"
EVIDENCE_CONF = BENCHMARKS / "studies" / "evidence" / "evidence.yml"

VARIANTS: dict[str, dict[str, Any]] = {
    "reset": {"algo": "reset_ppo", "hyperparams": ["boundary:'reset'", "weighting:'uniform'"]},
    "reset_importance": {"algo": "reset_ppo", "hyperparams": ["boundary:'reset'", "weighting:'importance'"]},
    "mask": {"algo": "reset_ppo", "hyperparams": ["boundary:'mask'", "weighting:'uniform'"]},
    # The masking rule with sb3-contrib's loss scale (mean over kept slots): separates the rule from the scale
    "mask_kept": {"algo": "reset_ppo", "hyperparams": ["boundary:'mask'", "weighting:'kept_mean'"]},
    "ppo_lstm": {"algo": "ppo_lstm", "hyperparams": []},
}
# The fresh-memory study (benchmarks/studies/fresh_memory/PROTOCOL.md): its own config, each variant with the config's
# n_epochs (10) and with 30 ("_e30", where stale memory should matter most)
_FRESH_MEMORY = {
    "fm_off": [],
    "fm_refresh": ["memory_refresh:1"],
    "fm_burn8": ["burn_in:8"],
    "fm_burn16": ["burn_in:16"],
    "fm_refresh_burn8": ["memory_refresh:1", "burn_in:8"],
}
for _name, _hyperparams in _FRESH_MEMORY.items():
    for _suffix, _epochs in (("", []), ("_e30", ["n_epochs:30"])):
        VARIANTS[_name + _suffix] = {"algo": "reset_ppo", "hyperparams": _hyperparams + _epochs, "conf": FRESH_MEMORY_CONF}
FRESH_MEMORY_VARIANTS = [name for name in VARIANTS if name.startswith("fm_")]
# The GRU study (benchmarks/studies/gru/PROTOCOL.md): the fresh-memory config with the GRU policy; its LSTM arm is the
# fresh-memory study's fm_off
VARIANTS["gru"] = {"algo": "reset_ppo", "hyperparams": ["policy:'MlpGruPolicy'"], "conf": FRESH_MEMORY_CONF}
GRU_VARIANTS = ["gru"]
# The evidence study (benchmarks/studies/evidence/PROTOCOL.md): every arm trains with
# benchmarks/studies/evidence/evidence.yml, RecurrentPPO too; its primary arms are the published grid's ResetPPO variants
EVIDENCE_PRIMARY = {f"ev_{name}": VARIANTS[name]["hyperparams"] for name in ("reset", "reset_importance", "mask", "mask_kept")}
EVIDENCE_SECONDARY = {
    "ev_reset_stride1": ["window_stride:1"],
    "ev_reset_gru": ["policy:'MlpGruPolicy'"],
    "ev_reset_refresh": ["memory_refresh:1"],
}
for _name, _hyperparams in {**EVIDENCE_PRIMARY, **EVIDENCE_SECONDARY}.items():
    VARIANTS[_name] = {"algo": "reset_ppo", "hyperparams": _hyperparams, "conf": EVIDENCE_CONF}
# RecurrentPPO with the same settings (the zoo's ppo_lstm algo reading the same file)
VARIANTS["ev_rppo"] = {"algo": "ppo_lstm", "hyperparams": [], "conf": EVIDENCE_CONF}
# The studies above trained with ResetPPO's defaults of their time, windows of 16 inside the rollout (the coverage
# study changed the defaults): their runs name them on the command line (hyperparams()) so that they train the same
# way at any commit. The window length only where the variant's own file is read: a tuned trial's file names its own.
OLD_DEFAULT_COVERAGE = "window_coverage:'inside'"
OLD_DEFAULT_WINDOW = "window_size:16"
EVIDENCE_VARIANTS = [*EVIDENCE_PRIMARY, "ev_rppo", *EVIDENCE_SECONDARY]
# The memory tasks every study trains on, then each study's own envs
_MEMORY_ENVS = ["CueRecall-v0", "CueRecallLong-v0", "EarlyChoice-v0", "CartPoleNoVel-v1"]
EVIDENCE_ENVS = [
    *_MEMORY_ENVS, "PendulumNoVel-v1", "PopgymRepeatPreviousEasy-v0", "PopgymNoisyPositionOnlyCartPoleEasy-v0",
    "PopgymCountRecallEasy-v0", "MiniGridMemoryS7Flat-v0",
]  # fmt: skip
# The coverage study (benchmarks/studies/coverage/PROTOCOL.md): epoch structure and window length, evidence.yml's settings.
# Its cv_inside16 and most of cv_rppo are the evidence study's ev_reset and ev_rppo (reused, not trained here).
COVERAGE_ARMS: dict[str, dict[str, Any]] = {
    # Today's default: trained here only for the side-by-side timing seeds (its runs are ev_reset's)
    "cv_inside16": {"coverage": "inside", "window": 16},
    "cv_full16": {"coverage": "full", "window": 16},
    "cv_full64": {"coverage": "full", "window": 64},
    "cv_batch": {"coverage": "full", "window": "batch"},
    "cv_rollout": {"coverage": "full", "window": "rollout"},
}
for _name, _arm in COVERAGE_ARMS.items():
    VARIANTS[_name] = {"algo": "reset_ppo", "hyperparams": [f"window_coverage:'{_arm['coverage']}'"], "conf": EVIDENCE_CONF}
VARIANTS["cv_rppo"] = {"algo": "ppo_lstm", "hyperparams": [], "conf": EVIDENCE_CONF}
# The tuned study (benchmarks/studies/tuned/PROTOCOL.md): ResetPPO with today's window defaults (none pinned on the command
# line, none sampled by its search: tune.py runs its trials with benchmarks/kit/ppo_lstm_space.py) and evidence.yml's
# settings; its RecurrentPPO arm is ev_rppo, whose searches it reuses
VARIANTS["tuned_reset"] = {"algo": "reset_ppo", "hyperparams": [], "conf": EVIDENCE_CONF, "today_defaults": True}
# cv_rppo first in each (seed, env): while it trains on one worker, the other trains that seed's ResetPPO arms
COVERAGE_VARIANTS = ["cv_rppo", *COVERAGE_ARMS]
# cv_rppo and cv_inside16 re-train only these seeds, side by side (timing); their other seeds are ev_rppo's and
# ev_reset's
COVERAGE_TIMING_SEEDS = 2
COVERAGE_TIMING_ONLY = ("cv_rppo", "cv_inside16")
# Seeds per env (the protocol's power calculation): 20 where it asks for them, else 10
EVIDENCE_SEEDS = {"CartPoleNoVel-v1": 20, "EarlyChoice-v0": 20}
# The secondary arms run on these envs only
EVIDENCE_SECONDARY_ENVS = ["CueRecall-v0", "EarlyChoice-v0", "CartPoleNoVel-v1", "PopgymRepeatPreviousEasy-v0"]
FRESH_MEMORY_ENVS = [*_MEMORY_ENVS, "PopgymRepeatPreviousEasy-v0", "PopgymAutoencodeEasy-v0"]
GRU_ENVS = [*_MEMORY_ENVS, "PopgymRepeatPreviousEasy-v0"]
# Envs that fit a 2-core machine; LunarLanderNoVel-v3 and CarRacing-v3 are configured in grid.yml
# but need more compute (and Box2D).
DEFAULT_ENVS = [*_MEMORY_ENVS, "PendulumNoVel-v1", "MountainCarContinuousNoVel-v0"]
# --minutes: a run is expected to take its pair's median wall time times this
MARGIN = 1.25


def conf_file(variant: str) -> Path:
    """The hyperparameter file a variant trains with."""
    spec = VARIANTS[variant]
    return spec.get("conf", RESET_PPO_CONF if spec["algo"] == "reset_ppo" else PPO_LSTM_CONF)


@functools.cache
def _parse_conf(text: str) -> dict[str, Any]:
    """A hyperparameter file's text parsed, once per text: planning a grid asks for it once per job. Read only."""
    return dict(yaml.safe_load(text))


def read_conf(path: Path) -> dict[str, Any]:
    """
    The entries of a hyperparameter file, env -> settings (shared between calls: callers must not change them).

    :param path: the file
    :return: its entries
    """
    return _parse_conf(path.read_text())


def coverage_window(variant: str, env_id: str) -> int:
    """
    The window length a coverage arm trains with on an env (``benchmarks/studies/coverage/PROTOCOL.md``): its
    ``window_size``, capped at the env's ``n_steps``, with ``'batch'`` = ``min(batch_size, n_steps)`` and
    ``'rollout'`` = ``n_steps`` (ResetPPO's defaults, 128 and 128, where the file sets none).
    """
    entry = read_conf(EVIDENCE_CONF)[env_id]
    n_steps, batch_size = int(entry.get("n_steps", 128)), int(entry.get("batch_size", 128))
    window = COVERAGE_ARMS[variant]["window"]
    if window == "rollout":
        return n_steps
    if window == "batch":
        return min(batch_size, n_steps)
    return min(int(window), n_steps)


def coverage_alias(variant: str, env_id: str) -> str:
    """
    The coverage arm whose runs a coverage arm shares on an env: the first arm (in ``COVERAGE_ARMS``'s order) with
    the same resolved settings (the arm itself when none comes before it).
    """
    if variant not in COVERAGE_ARMS:
        return variant
    settings = (COVERAGE_ARMS[variant]["coverage"], coverage_window(variant, env_id))
    for other in COVERAGE_ARMS:
        if (COVERAGE_ARMS[other]["coverage"], coverage_window(other, env_id)) == settings:
            return other
    return variant


def hyperparams(variant: str, env_id: str, own_conf: bool = True) -> list[str]:
    """
    The settings a variant adds on the command line for an env: coverage arms their resolved window length; the
    other ResetPPO variants the defaults of their studies' time (:data:`OLD_DEFAULT_COVERAGE`, and
    :data:`OLD_DEFAULT_WINDOW` when ``own_conf``, i.e. the variant's own hyperparameter file is read), unless they
    or the file's entry for the env set them (the command line overrides the file), or they keep today's defaults
    (``today_defaults``).
    """
    spec = VARIANTS[variant]
    if variant in COVERAGE_ARMS:
        return [*spec["hyperparams"], f"window_size:{coverage_window(variant, env_id)}"]
    settings = list(spec["hyperparams"])
    if spec["algo"] == "reset_ppo" and not spec.get("today_defaults", False):
        entry = read_conf(conf_file(variant)).get(env_id, {}) if own_conf else {}
        named = {setting.split(":")[0] for setting in settings} | set(entry)
        for pinned in (OLD_DEFAULT_COVERAGE, *([OLD_DEFAULT_WINDOW] if own_conf else [])):
            if pinned.split(":")[0] not in named:
                settings.append(pinned)
    return settings


def spec_of(job: dict[str, Any]) -> RunSpec:
    """
    The run of a grid job: ``job`` holds ``variant``, ``env``, ``seed``, ``run_dir``, ``eval_episodes`` and
    optionally ``conf`` (e.g. a tuned trial's file) and ``steps`` (then the budget), ``label`` (the variant name
    recorded, default ``variant``) and ``extra`` (more ``run.json`` fields). Studies with their own config keep
    their training logs (train/ and rollout/ keys of every update).
    """
    variant = VARIANTS[job["variant"]]
    return RunSpec(
        algo=variant["algo"], env=job["env"], seed=job["seed"], run_dir=job["run_dir"],
        conf_file=job.get("conf") or conf_file(job["variant"]),
        hyperparams=hyperparams(job["variant"], job["env"], own_conf=not job.get("conf")),
        eval_episodes=job["eval_episodes"], steps=job.get("steps"), keep_log="conf" in variant,
        label=job.get("label", job["variant"]), extra=job.get("extra", {}),
    )  # fmt: skip


def command(
    variant: str, env_id: str, seed: int, run_dir: Path, eval_episodes: int, conf: Path | None = None, steps: int | None = None
) -> list[str]:
    """
    The zoo command of one run: the variant's algorithm and settings, its hyperparameter file (or ``conf``, e.g. a
    tuned trial's), 20 evaluations over the env's budget (or ``steps``, which then replaces the budget).
    """
    job = {"variant": variant, "env": env_id, "seed": seed, "run_dir": run_dir, "eval_episodes": eval_episodes}
    return runner.zoo_command(spec_of({**job, "conf": conf, "steps": steps}))


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """
    Train and evaluate one grid job (:func:`spec_of`) and record it (:func:`sb3_reset_ppo.experiments.runner.run_one`:
    ``run.json`` when finished, ``failed.json`` on an error, nothing when cut).
    """
    conf, steps = job.get("conf"), job.get("steps")
    args = command(job["variant"], job["env"], job["seed"], job["run_dir"], job["eval_episodes"], conf=conf, steps=steps)
    return runner.run_one(spec_of(job), args)


def seeds_of(args: argparse.Namespace, env_id: str) -> int:
    """Seeds 0..N-1 of an env: ``--seeds`` if given, else the evidence protocol's count (that study) or 5."""
    if args.seeds is not None:
        return int(args.seeds)
    return {"coverage": 10, "evidence": EVIDENCE_SEEDS.get(env_id, 10)}.get(args.study, 5)


def runs_on(study: str, variant: str, env_id: str, seed: int = 0) -> bool:
    """
    Whether a variant trains on an env (and seed): the evidence study's secondary arms run on a subset of its envs;
    in the coverage study an arm whose settings equal an earlier arm's on the env does not train (it shares that
    arm's runs), and cv_rppo and cv_inside16 train only their side-by-side timing seeds.
    """
    if study == "coverage":
        if variant in COVERAGE_TIMING_ONLY:
            return seed < COVERAGE_TIMING_SEEDS
        return coverage_alias(variant, env_id) == variant
    return not (study == "evidence" and variant in EVIDENCE_SECONDARY and env_id not in EVIDENCE_SECONDARY_ENVS)


def median_times(jobs: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """
    The median wall time (seconds) of the finished runs of each (variant, env) of ``jobs``; reused runs, timed by
    another study, count only where a pair has no other finished run.
    """
    own: dict[tuple[str, str], list[float]] = {}
    reused: dict[tuple[str, str], list[float]] = {}
    for job in jobs:
        run_file = job["run_dir"] / "run.json"
        if run_file.exists():
            run = json.loads(run_file.read_text())
            if run["returncode"] == 0:
                timed = reused if "reused_from" in run else own
                timed.setdefault((job["variant"], job["env"]), []).append(float(run["seconds"]))
    # A pair whose finished runs are all reused is timed by them
    return {key: statistics.median(seconds) for key, seconds in {**reused, **own}.items()}


def machine_note(jobs: list[dict[str, Any]], here: dict[str, Any] | None = None) -> str | None:
    """
    The line that warns when the stored runs of ``jobs`` trained on a machine other than this one (seconds compare
    only within one machine, and floats differ across CPUs); None when every stored run's machine is this one.

    :param here: This machine (default ``runner.machine()``)
    """
    here = runner.machine() if here is None else here
    others: Counter[str] = Counter()
    for job in jobs:
        run_file = job["run_dir"] / "run.json"
        if run_file.exists():
            stored = json.loads(run_file.read_text()).get("machine")
            if stored is not None and stored != here:
                others[runner.machine_name(stored)] += 1
    if not others:
        return None
    counted = "; ".join(f"{count} on {name}" for name, count in others.most_common())
    return (
        f"machines: {sum(others.values())} stored runs trained on another machine ({counted}), this one is "
        f"{runner.machine_name(here)}: the study's seconds compare only within one machine"
    )


def next_job(
    todo: list[dict[str, Any]],
    times: dict[tuple[str, str], float],
    seconds_left: float | None,
    margin: float = MARGIN,
    ready: Callable[[dict[str, Any], list[dict[str, Any]]], bool] | None = None,
) -> dict[str, Any] | None:
    """
    Take the first run of ``todo`` (in the grid's order) expected to finish within ``seconds_left``: its pair's
    median time times ``margin``. With no time limit (None) that is the first run; a pair without a timed run
    is started only then, since nothing says it fits. The run taken is removed from ``todo``.

    :param ready: Whether a run may start now, given the runs not started yet (default: every run may)
    :return: The run, or None if none fits
    """
    for index, job in enumerate(todo):
        if ready is not None and not ready(job, todo):
            continue
        expected = times.get((job["variant"], job["env"]))
        if seconds_left is None or (expected is not None and expected * margin <= seconds_left):
            return todo.pop(index)
    return None


def left_for_later(todo: list[dict[str, Any]], times: dict[tuple[str, str], float]) -> str:
    """
    The line that says why the runs of ``todo`` were not started under ``--minutes`` (:func:`next_job`): those of a
    timed variant and env are not expected to finish in the time left; those of a pair never timed cannot start under
    ``--minutes`` at all, and the line says how to time them.

    :param todo: The runs not started
    :param times: The median wall time of each (variant, env) with a finished run (:func:`median_times`)
    """
    untimed = sum((job["variant"], job["env"]) not in times for job in todo)
    reasons = []
    if len(todo) > untimed:
        reasons.append(f"{len(todo) - untimed} not expected to finish in the time left")
    if untimed:
        reasons.append(
            f"{untimed} not timed yet (--minutes starts only runs of a variant and env with a finished run): run the "
            "study once without --minutes to time them"
        )
    return f"{len(todo)} runs left for later: " + "; ".join(reasons)


def discard_cut_short(job: dict[str, Any]) -> bool:
    """
    Remove the folder of a run that ended without a record (cut by a signal, or truncated): the next start trains it
    again from nothing (:func:`sb3_reset_ppo.experiments.runner.run_one` replaces the folder), and a study stored
    (``rundata.pack``) before then would keep the cut run's files in its tables.

    :param job: The run (its ``run_dir``), once its trainer has returned
    :return: Whether a folder was removed (never one that ``run_one`` did not make)
    """
    run_dir = job.get("run_dir")
    if run_dir is None or recorded(Path(run_dir)) or not runner.is_run_dir(Path(run_dir)):
        return False
    shutil.rmtree(run_dir)
    return True


def finished_line(name: str, job: dict[str, Any], result: dict[str, Any]) -> str:
    """
    The line printed as a run ends (its name, outcome and seconds), after removing its folder if it was cut short
    (:func:`discard_cut_short`), which the line then says.

    :param name: The run in words (variant, env, seed)
    :param job: The run
    :param result: Its trainer's result (:func:`sb3_reset_ppo.experiments.runner.run_one`'s)
    """
    line = f"{name}: {status(result)} in {result['seconds']:.0f} s"
    if discard_cut_short(job):
        line += "; its folder removed (trained again at the next start)"
    return line


def run_until(
    todo: list[dict[str, Any]],
    times: dict[tuple[str, str], float],
    workers: int,
    minutes: float | None,
    ready: Callable[[dict[str, Any], list[dict[str, Any]]], bool] | None = None,
) -> list[dict[str, Any]]:
    """
    Train the runs of ``todo`` on ``workers`` threads (one run each at a time), each worker taking the next run
    that :func:`next_job` expects to finish ``minutes`` from now (no limit: None), so that a session's end does
    not kill runs half done. Prints each run as it finishes.

    :param ready: Whether a run may start now, given the runs not started yet (:func:`next_job`)
    :return: The results of the runs trained, in the order they finished
    """

    def report(job: dict[str, Any], result: dict[str, Any]) -> None:
        run = f"{result['variant']:>16} {result['env']:<30} seed {result['seed']}"
        print(finished_line(run, job, result), flush=True)

    results = executors.run_local(
        todo,
        lambda job: run_one(job),
        workers,
        minutes,
        pick=lambda jobs, left: next_job(jobs, times, left, ready=ready),
        on_result=report,
    )
    if todo:
        print(left_for_later(todo, times), flush=True)
    return results


def run_on_ray(todo: list[dict[str, Any]], address: str) -> list[dict[str, Any]]:
    """Train the runs of ``todo`` as Ray tasks on the cluster at ``address``, printing each as it comes back."""

    def report(spec: RunSpec, result: dict[str, Any]) -> None:
        print(f"{result['variant']:>16} {result['env']:<30} seed {result['seed']}: {status(result)}", flush=True)
        if "error" in result:
            print(f"    {result['error'][:2000]}", flush=True)

    def lost(spec: RunSpec, result: dict[str, Any], attempt: int) -> None:
        run = f"{result['variant']:>16} {result['env']:<30} seed {result['seed']}"
        print(
            f"{run}: lost with its machine or worker, sent again (attempt {attempt} of {executors.LOST_ATTEMPTS})", flush=True
        )
        print(f"    {result['error'][:2000]}", flush=True)

    return executors.run_ray([spec_of(job) for job in todo], address, on_result=report, on_lost=lost)


def forecast(jobs: list[dict[str, Any]], todo: list[dict[str, Any]], workers: int) -> str:
    """
    How long the runs still to do take, from the median wall time of the finished runs of each (variant, env)
    (reused runs, timed by another study, only where a pair has no other finished run). The grid spans machines
    of different speeds, so this is a plan, not a measurement; (variant, env) pairs without a finished run are
    listed, not counted, so the total is a lower bound when there are any.

    :param jobs: every run of the grid
    :param todo: the runs not finished yet
    :param workers: runs trained at a time
    :return: a few lines of text: the total, then core-hours per variant and per env
    """
    times = median_times(jobs)
    unknown = Counter(f"{job['variant']} on {job['env']}" for job in todo if (job["variant"], job["env"]) not in times)
    by_variant: dict[str, float] = {}
    by_env: dict[str, float] = {}
    for job in todo:
        seconds = times.get((job["variant"], job["env"]))
        if seconds is not None:
            by_variant[job["variant"]] = by_variant.get(job["variant"], 0.0) + seconds
            by_env[job["env"]] = by_env.get(job["env"], 0.0) + seconds
    total = sum(by_variant.values())

    def hours(spent: dict[str, float]) -> str:
        return ", ".join(f"{name} {seconds / 3600:.1f}" for name, seconds in spent.items())

    bound = "at least " if unknown else ""
    lines = [
        f"forecast: {len(todo)} runs to do, {bound}{total / 3600:.1f} core-hours, {bound or 'about '}"
        f"{total / 3600 / max(workers, 1):.1f} "
        f"wall-hours on {workers} workers (medians of the finished runs of each variant and env)",
        f"  core-hours by variant: {hours(by_variant)}",
        f"  core-hours by env: {hours(by_env)}",
    ]
    if unknown:
        lines.append("  not counted (no finished run yet): " + ", ".join(f"{k} ({n})" for k, n in unknown.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", choices=["grid", "fresh_memory", "gru", "evidence", "coverage"], default="grid",
                        help="default envs and variants: the published grid, the fresh-memory or the GRU study")  # fmt: skip
    parser.add_argument("--envs", nargs="+", default=None)
    parser.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds 0..N-1 per env (default: 5; the evidence study: the protocol's counts)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/<study>")
    parser.add_argument("--forecast", action="store_true", help="print how long the remaining runs take; run nothing")
    parser.add_argument("--minutes", type=float, default=None,
                        help="start only runs expected to finish within this many minutes (a session's end)")  # fmt: skip
    parser.add_argument("--retry-failed", action="store_true",
                        help=f"train again the runs that failed with an error ({FAILED_FILE}; by default not)")  # fmt: skip
    parser.add_argument("--address", default=None,
                        help="a Ray cluster's address: runs train there as tasks of one CPU (not with --minutes)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=None,
                        help="env steps per run instead of the config's budget (a smoke test; needs --out)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps is not None and (args.steps < 1 or args.out is None):
        parser.error(f"--steps must be positive and needs --out (a study's folder keeps its budget), got {args.steps}")
    if args.address and args.minutes is not None:
        parser.error("--minutes schedules local workers; with --address Ray schedules the runs (give one of them)")
    if args.minutes is not None and args.minutes <= 0:
        parser.error(f"--minutes must be positive, got {args.minutes}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    studies = {
        "grid": (DEFAULT_ENVS, [v for v in VARIANTS if "conf" not in VARIANTS[v]]),
        "fresh_memory": (FRESH_MEMORY_ENVS, FRESH_MEMORY_VARIANTS),
        "gru": (GRU_ENVS, GRU_VARIANTS),
        "evidence": (EVIDENCE_ENVS, EVIDENCE_VARIANTS),
        "coverage": (EVIDENCE_ENVS, COVERAGE_VARIANTS),
    }
    args.envs = args.envs or studies[args.study][0]
    args.variants = args.variants or studies[args.study][1]
    args.out = args.out or BENCHMARKS / "results" / args.study
    print("command: python " + " ".join(["benchmarks/kit/run_grid.py", *argv]), flush=True)
    jobs = [
        {"variant": variant, "env": env_id, "seed": seed, "run_dir": args.out / variant / env_id / f"seed{seed}",
         "eval_episodes": args.eval_episodes, "steps": args.steps}
        for seed in range(max(seeds_of(args, env_id) for env_id in args.envs))
        for env_id in args.envs
        for variant in args.variants
        if seed < seeds_of(args, env_id) and runs_on(args.study, variant, env_id, seed)
    ]  # fmt: skip
    todo = [job for job in jobs if not recorded(job["run_dir"], args.retry_failed)]
    failed = [job for job in jobs if recorded(job["run_dir"]) and not (job["run_dir"] / "run.json").exists()]
    print(
        f"{len(jobs) - len(todo)} of {len(jobs)} runs already done; {len(todo)} to run on {args.workers} workers", flush=True
    )
    if failed:
        runs = ", ".join(f"{job['variant']} {job['env']} seed {job['seed']}" for job in failed)
        retried = "retried now" if args.retry_failed else "not retried; --retry-failed retries them"
        print(f"{len(failed)} failed with an error ({FAILED_FILE}; {retried}): {runs}", flush=True)
    workers = max(1, min(args.workers, os.cpu_count() or 1))
    note = machine_note(jobs)
    if note:
        print(note, flush=True)
    if args.forecast:
        print(forecast(jobs, todo, workers))
    elif args.address:
        run_on_ray(todo, args.address)
    else:
        run_until(todo, median_times(jobs), workers, args.minutes)


if __name__ == "__main__":
    main()
