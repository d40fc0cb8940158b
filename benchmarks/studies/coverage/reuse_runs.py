"""
Reuse finished runs of one study as the runs of another study's arm, where both train the same thing
(benchmarks/studies/evidence/PROTOCOL.md, "Reuse").

Copies ``<from>/<env>/seed<k>/`` to ``<to>/<env>/seed<k>/`` for every env and seed asked for, only if the two
variants' hyperparameter files hold the same entry for the env and the two variants add the same settings on the
command line for it (``run_grid.hyperparams``; ResetPPO's defaults written out, such as ``boundary:'reset'``, count
as no setting). The copy's ``run.json``
gets ``variant`` set to the new arm and ``reused_from`` to the original folder. Runs already present are left.

Usage: python benchmarks/studies/coverage/reuse_runs.py --from-study fresh_memory --from-variant fm_off --to-study evidence
       --to-variant ev_reset --envs CueRecall-v0 EarlyChoice-v0 --seeds 10
"""

import argparse
import json
import shutil
from pathlib import Path

import yaml

from benchmarks.kit import run_grid

BENCHMARKS = Path(__file__).resolve().parents[2]

# Settings that equal ResetPPO's defaults: the same run whether written or not
DEFAULT_SETTINGS = {"boundary:'reset'", "weighting:'uniform'"}


def same_training(from_variant: str, to_variant: str, env_id: str) -> bool:
    """Whether the two variants train ``env_id`` with the same algorithm, config entry and settings."""
    first, second = run_grid.VARIANTS[from_variant], run_grid.VARIANTS[to_variant]
    if first["algo"] != second["algo"]:
        return False
    entries = [yaml.safe_load(run_grid.conf_file(v).read_text()).get(env_id) for v in (from_variant, to_variant)]
    # The settings each adds on the command line for this env, as run_grid resolves them (window lengths, pins)
    settings = [set(run_grid.hyperparams(v, env_id)) - DEFAULT_SETTINGS for v in (from_variant, to_variant)]
    return entries[0] is not None and entries[0] == entries[1] and settings[0] == settings[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-study", required=True)
    parser.add_argument("--from-variant", required=True, choices=list(run_grid.VARIANTS))
    parser.add_argument("--to-study", required=True)
    parser.add_argument("--to-variant", required=True, choices=list(run_grid.VARIANTS))
    parser.add_argument("--envs", nargs="+", required=True)
    parser.add_argument("--seeds", type=int, required=True, help="seeds 0..N-1")
    args = parser.parse_args()
    results = BENCHMARKS / "results"
    for env_id in args.envs:
        if not same_training(args.from_variant, args.to_variant, env_id):
            raise SystemExit(f"{args.from_variant} and {args.to_variant} do not train {env_id} the same way: not reused")
        for seed in range(args.seeds):
            source = results / args.from_study / args.from_variant / env_id / f"seed{seed}"
            target = results / args.to_study / args.to_variant / env_id / f"seed{seed}"
            if not (source / "run.json").exists():
                print(f"{source}: not finished, skipped")
                continue
            if (target / "run.json").exists():
                print(f"{target}: present, left")
                continue
            if target.exists():
                shutil.rmtree(target)
            # Without the (git-ignored) model files and raw log
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.zip", "log.txt", "*.monitor.csv", "*.pkl"))
            run = {**json.loads((target / "run.json").read_text()), "variant": args.to_variant}
            run["reused_from"] = str(source.relative_to(results))
            (target / "run.json").write_text(json.dumps(run, indent=2))
            print(f"{target}: reused from {source.relative_to(results)}")


if __name__ == "__main__":
    main()
