"""
The reuse precondition of a study (benchmarks/studies/evidence/PROTOCOL.md, "Reuse"): stored runs trained again at the current
commit must give bitwise-equal evaluations.

Each run named ``ARM/ENV/SEED`` is re-run (as ``run_grid.py`` runs it) into
``benchmarks/results/<study>/precondition/<commit>/ARM/ENV/seed<SEED>/`` (a re-run already there is kept, so the
check resumes) and its ``evaluations.npz`` compared byte for byte with the stored run's. Prints one line per run
(the first evaluation that differs, if any), writes ``summary.json`` next to the re-runs and exits with status 1
if any run differs. Run it from a clean checkout (the re-runs record the commit and the dirty flag).

Usage: python benchmarks/studies/coverage/precondition.py [--study evidence] ev_mask/CueRecall-v0/0 ev_rppo/CueRecall-v0/0
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kit import run_grid
from sb3_reset_ppo.experiments import runner

BENCHMARKS = Path(__file__).resolve().parents[2]


def parse_run(text: str) -> tuple[str, str, int]:
    """``ARM/ENV/SEED`` as (arm, env, seed)."""
    parts = text.split("/")
    if len(parts) != 3 or not parts[2].isdigit() or parts[0] not in run_grid.VARIANTS:
        raise ValueError(f"runs: {text!r} is not ARM/ENV/SEED with ARM one of {sorted(run_grid.VARIANTS)}")
    return parts[0], parts[1], int(parts[2])


def evaluations_file(run_dir: Path) -> Path:
    """The zoo's ``evaluations.npz`` of a finished run (``<algo>/<env>_<k>/evaluations.npz``)."""
    if not (run_dir / "run.json").exists():
        raise FileNotFoundError(f"{run_dir}: no finished run (run.json missing)")
    paths = sorted(run_dir.glob("*/*/evaluations.npz"))
    if len(paths) != 1:
        raise FileNotFoundError(f"{run_dir}: expected one <algo>/<env>_<k>/evaluations.npz, found {len(paths)}")
    return paths[0]


def compare(stored: Path, rerun: Path) -> dict[str, Any]:
    """
    Whether two runs' evaluations are bitwise equal; if not, the first evaluation (0-based) whose returns differ
    (``None`` if only other bytes differ) and the largest difference of an evaluation's mean return.
    """
    first, second = evaluations_file(stored), evaluations_file(rerun)
    if first.read_bytes() == second.read_bytes():
        return {"equal": True}
    with np.load(first) as a, np.load(second) as b:
        # (n_evaluations, n_episodes) each; runs of one setting have the same shape
        results_a, results_b = a["results"], b["results"]
    if results_a.shape != results_b.shape:
        return {"equal": False, "first_difference": 0, "shapes": [list(results_a.shape), list(results_b.shape)]}
    differs = np.flatnonzero((results_a != results_b).any(axis=1))
    first_difference = int(differs[0]) if len(differs) else None
    means = np.abs(results_a.mean(axis=1) - results_b.mean(axis=1))
    return {"equal": False, "first_difference": first_difference, "max_mean_difference": float(means.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="ARM/ENV/SEED of stored runs")
    parser.add_argument("--study", default="evidence", help="the study folder under benchmarks/results/")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--results", type=Path, default=BENCHMARKS / "results")
    args = parser.parse_args()
    runs = [parse_run(text) for text in args.runs]
    version = runner.code_version()
    if version["dirty"]:
        raise SystemExit("sb3_reset_ppo/ has uncommitted changes: commit them first (the re-runs record the commit)")
    study = args.results / args.study
    out = study / "precondition" / version["commit"][:7]
    for arm, env_id, seed in runs:
        evaluations_file(study / arm / env_id / f"seed{seed}")  # the stored run exists
    jobs = [
        {"variant": arm, "env": env_id, "seed": seed, "run_dir": out / arm / env_id / f"seed{seed}", "eval_episodes": 20}
        for arm, env_id, seed in runs
    ]
    todo = [job for job in jobs if not (job["run_dir"] / "run.json").exists()]
    for result in run_grid.run_until(todo, {}, max(1, args.workers), None):
        if not runner.completed(result):
            raise SystemExit(
                f"{result['variant']} {result['env']} seed {result['seed']}: the re-run failed: {run_grid.status(result)}"
            )
    summary: dict[str, Any] = {"commit": version["commit"], "runs": []}
    for job in jobs:
        name = f"{job['variant']}/{job['env']}/{job['seed']}"
        outcome = compare(study / job["variant"] / job["env"] / f"seed{job['seed']}", job["run_dir"])
        summary["runs"].append({"run": name, **outcome})
        print(f"{name}: " + ("bitwise equal" if outcome["equal"] else f"DIFFERS {outcome}"), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if not all(run["equal"] for run in summary["runs"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
