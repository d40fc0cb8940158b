"""
The evidence study's reports (``benchmarks/studies/evidence/PROTOCOL.md``, amendment 4) in one command, so that the report is
regenerated from the runs exactly as the protocol fixed it.

Runs ``report.py`` (in this process, ``benchmarks/kit/scripts.py``; each report states its own command) for:

- the primary arms (``ev_reset``, ``ev_reset_importance``, ``ev_mask``, ``ev_mask_kept``, ``ev_rppo``) on the
  study's 9 envs: ``RESULTS.md`` (with the study's notes, then the other studies' summary), figures in
  ``figures/primary/``;
- the secondary arms (``ev_reset_stride1``, ``ev_reset_gru``, ``ev_reset_refresh``, each against ``ev_reset``)
  on the 4 envs they run on: ``RESULTS_secondary.md``, figures in ``figures/secondary/``;
- the tuned re-runs of Q4 (``tune.py rerun``: ``tuned_ev_reset`` against ``tuned_ev_mask_kept`` and
  ``tuned_ev_rppo``, seeds 100 to 109), if any exist: ``RESULTS_tuned.md``, figures in
  ``figures/tuned/``.

Every report uses baseline ``ev_reset`` (its tuned counterpart for Q4), the mean of the last 2 of 20
evaluations, aggregates over 10 named seeds and the training diagnostics. Each writes its estimates as JSON
(``results/evidence_<report>_summary.json``), and ``results/evidence_readme_tables.md`` receives
``readme_tables.py``'s tables of all of them, from which the documentation's *Evidence* page (docs/studies/evidence.md)
and the README's summary are written.
``DECISIONS.md`` then states the claims and the default decisions the protocol's rules give
(``decisions.py``, from every summary present).

``--out-dir`` (pages, figures) and ``--summaries`` (JSON) write under other folders, e.g. an interim look at a partial grid
that must not overwrite the committed report: ``python benchmarks/studies/evidence/evidence_report.py --out-dir /tmp/interim
--min-seeds 2 --reps 200``.

Usage: python benchmarks/studies/evidence/evidence_report.py [--out-dir DIR] [--summaries DIR] [--only primary secondary tuned]
"""

import argparse
import shlex
from pathlib import Path

from benchmarks.kit import run_grid, rundata
from benchmarks.kit.scripts import run_script
from sb3_reset_ppo.experiments import runner

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parents[1]
ROOT = HERE.parents[2]

PRIMARY = [*run_grid.EVIDENCE_PRIMARY, "ev_rppo"]
SECONDARY = ["ev_reset", *run_grid.EVIDENCE_SECONDARY]
TUNED = ["tuned_ev_reset", "tuned_ev_mask_kept", "tuned_ev_rppo"]
REPORTS = ["primary", "secondary", "tuned"]
NOTES = Path("benchmarks/studies/evidence/NOTES.md")
OTHER_STUDIES = Path("benchmarks/studies/evidence/OTHER_STUDIES.md")


def repository_path(path: Path) -> Path:
    """``path`` relative to the repository's root if it lies inside it, else absolute."""
    path = path.resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def report_commands(
    out_dir: Path,
    summaries: Path,
    evidence: Path,
    tuned: Path,
    min_seeds: int,
    reps: int,
    only: list[str],
    evaluations: int = runner.EVALUATIONS_PER_RUN,
) -> dict[str, list[str]]:
    """
    The ``report.py`` command of each report to write: the script, then its arguments.

    The command runs from the repository's root: relative paths are relative to it.

    :param out_dir: the folder of the pages and figures (this study's folder for the committed ones)
    :param summaries: the folder of the summaries (``benchmarks/results`` for the committed ones)
    :param evidence: the evidence grid's results folder
    :param tuned: the tuned re-runs' results folder (``tune.py rerun``)
    :param min_seeds: seeds of every env in the aggregates (the protocol: 10)
    :param reps: bootstrap replications (the protocol: 2,000)
    :param only: which of ``REPORTS`` to write
    :param evaluations: evaluations every run has within its budget (the protocol: 20); runs with another count
        are reported as failed
    :return: report name -> argv
    """
    common = ["--final-evaluations", "2", "--evaluations", str(evaluations), "--min-seeds", str(min_seeds)]
    common += ["--reps", str(reps), "--diagnostics"]
    grid_command = "python benchmarks/kit/run_grid.py --study evidence --workers 2"
    # The searches behind the tuned re-runs (``tune.py rerun`` writes it next to the studies)
    search = tuned.parent / "SEARCH.md"
    settings = {
        "primary": ([evidence], PRIMARY, "ev_reset", 0, run_grid.EVIDENCE_ENVS, "RESULTS.md",
                    "Evidence: reset-and-continue against masking (benchmarks/studies/evidence/PROTOCOL.md, primary arms)",
                    [NOTES, OTHER_STUDIES], grid_command),
        "secondary": ([evidence], SECONDARY, "ev_reset", 0, run_grid.EVIDENCE_SECONDARY_ENVS, "RESULTS_secondary.md",
                      "Evidence: window_stride 1, GRU and refreshed memory against ev_reset "
                      "(benchmarks/studies/evidence/PROTOCOL.md, Q3)", [NOTES], grid_command),
        "tuned": ([tuned], TUNED, "tuned_ev_reset", 100, ["EarlyChoice-v0", "CartPoleNoVel-v1"], "RESULTS_tuned.md",
                  "Evidence: an equal tuning budget (benchmarks/studies/evidence/PROTOCOL.md, Q4), best trials on fresh seeds",
                  [search, NOTES] if (ROOT / search).exists() else [NOTES],
                  "python benchmarks/kit/tune.py optimize && python benchmarks/kit/tune.py rerun"),
    }  # fmt: skip
    commands = {}
    for name in only:
        grids, variants, baseline, first_seed, envs, out, title, notes, command = settings[name]
        commands[name] = [
            "benchmarks/kit/report.py", "--grid", *map(str, grids), "--variants", *variants,
            "--baseline", baseline, "--first-seed", str(first_seed), "--envs", *envs, "--out", str(out_dir / out),
            "--figures", str(out_dir / "figures" / name), "--json", str(summaries / f"evidence_{name}_summary.json"),
            "--title", title, "--grid-command", command, "--notes", *map(str, notes), *common,
        ]  # fmt: skip
    return commands


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=HERE, help="the pages' and figures' folder (default: this study's)")
    parser.add_argument("--summaries", type=Path, default=BENCHMARKS / "results", help="the summaries' folder")
    parser.add_argument("--evidence", type=Path, default=BENCHMARKS / "results" / "evidence", help="the grid's runs")
    parser.add_argument("--tuned", type=Path, default=BENCHMARKS / "results" / "tuning" / "runs", help="tuned re-runs")
    parser.add_argument("--min-seeds", type=int, default=10, help="seeds per env in the aggregates (protocol: 10)")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap replications (protocol: 2000)")
    parser.add_argument("--only", nargs="+", choices=REPORTS, default=REPORTS, help="the reports to write")
    parser.add_argument("--evaluations", type=int, default=runner.EVALUATIONS_PER_RUN,
                        help="evaluations of every run within its budget (protocol: 20); others count as failed")  # fmt: skip
    args = parser.parse_args(argv)
    rundata.ensure_all()  # the stored runs' folders, unpacked from their tables where needed
    if args.min_seeds < 1:
        parser.error(f"--min-seeds must be at least 1, got {args.min_seeds}")
    only = list(args.only)
    if "tuned" in only and not any(args.tuned.glob("*/*/seed*/run.json")):
        print(f"no finished tuned re-run in {args.tuned}: the tuned report is skipped")
        only.remove("tuned")
    if not only:
        return
    args.summaries.mkdir(parents=True, exist_ok=True)
    # Paths inside the repository are given relative to it and the reports run from its root, so that the command
    # each report states works in any checkout
    out_dir, summaries, evidence, tuned = map(repository_path, (args.out_dir, args.summaries, args.evidence, args.tuned))
    commands = report_commands(out_dir, summaries, evidence, tuned, args.min_seeds, args.reps, only, args.evaluations)
    for name, command in commands.items():
        print(f"{name}: {shlex.join(command)}", flush=True)
        run_script(command)
    # The README tables and the protocol's claims and decisions from every summary there is (a report not written
    # now may exist from an earlier run of this script, e.g. the primary one while only the tuned report is
    # rewritten), in the order of REPORTS
    present = {name: summaries / f"evidence_{name}_summary.json" for name in REPORTS}
    present = {name: path for name, path in present.items() if (ROOT / path).exists()}
    readme_tables = ["benchmarks/studies/evidence/readme_tables.py"]
    readme_tables += [f"{name}={path}" for name, path in present.items()]
    tables = run_script(readme_tables, capture=True)
    out = args.summaries / "evidence_readme_tables.md"
    out.write_text(tables)
    print(f"README tables: {out}")
    decision_args = [argument for name, path in present.items() for argument in (f"--{name}", str(path))]
    if "--primary" in decision_args:
        decisions_out = out_dir / "DECISIONS.md"
        run_script(["benchmarks/studies/evidence/decisions.py", *decision_args, "--out", str(decisions_out)])
        print(f"claims and decisions: {decisions_out}")


if __name__ == "__main__":
    main()
