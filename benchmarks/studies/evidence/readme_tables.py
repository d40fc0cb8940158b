"""
Markdown tables for the README from the estimates ``report.py --json`` wrote, so that every number the README
quotes comes from the runs, with its 95% interval.

Prints, for one or more summaries (one per study or setting, each labelled), a table with a row per variant:
IQM of the final normalised return and its probability of improvement over the baseline, then the same over
training (area under the curve); and the per-env differences from the baseline that stay significant after
Holm's correction ("none" when none does).

Usage: python benchmarks/studies/evidence/readme_tables.py LABEL=SUMMARY.json [LABEL=SUMMARY.json ...]
"""

import argparse
import json
from pathlib import Path
from typing import Any


def estimate(triple: list[float]) -> str:
    """``point (low to high)`` with 2 decimals."""
    point, low, high = triple
    return f"{point:.2f} ({low:.2f} to {high:.2f})"


def verdict(triple: list[float]) -> str:
    """Whether a probability of improvement's interval excludes 0.5."""
    _, low, high = triple
    return "better" if low > 0.5 else "worse" if high < 0.5 else "n.s."


def aggregate_table(label: str, summary: dict[str, Any]) -> list[str]:
    baseline = summary["baseline"]
    if not summary["aggregate"]:
        # report.py found no env with every variant's aggregate seeds (a partial grid)
        return [f"{label}: no aggregate yet (no env has the aggregate seeds of every variant)."]
    final, auc = summary["aggregate"]["final"], summary["aggregate"]["auc"]
    seeds = final["seeds"]
    lines = [
        f"{label}: {len(final['envs'])} envs, seeds {seeds[0]} to {seeds[-1]}, final = mean of the last "
        f"{summary['final_evaluations']} evaluations.",
        "",
        f"| variant | final IQM | final P(> {baseline}) | | over training IQM | over training P(> {baseline}) | |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in summary["variants"]:
        cells = []
        for entry in (final, auc):
            triple = entry["probability_of_improvement"].get(variant)
            cells += [estimate(entry["iqm"][variant]), *([estimate(triple), verdict(triple)] if triple else ["-", ""])]
        lines.append(f"| `{variant}` | " + " | ".join(cells) + " |")
    return lines


def env_row_text(row: dict[str, Any]) -> str:
    """``env +d (low to high, Holm p)`` of one per-env difference row (raw returns)."""
    difference, low, high = row["difference"]
    return f"{row['env']} {difference:+.3g} ({low:+.3g} to {high:+.3g}, Holm p {row['p_holm']:.3f})"


def significant_differences(summary: dict[str, Any], key: str, alpha: float = 0.05) -> str:
    """The per-env rows whose Holm-adjusted p is below ``alpha``, as text."""
    rows = [row for row in summary["differences"].get(key, []) if row["p_holm"] < alpha]
    if not rows:
        return "none"
    return "; ".join(f"{row['variant']} on {env_row_text(row)}" for row in rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summaries", nargs="+", help="LABEL=PATH of a report.py --json file")
    args = parser.parse_args(argv)
    for item in args.summaries:
        label, _, path = item.partition("=")
        if not path:
            raise ValueError(f"summaries: {item!r} is not LABEL=PATH")
        summary = json.loads(Path(path).read_text())
        print("\n".join(aggregate_table(label, summary)))
        print()
        for key, name in (("final", "final return"), ("auc", "return over training")):
            print(f"Per env, significant after Holm ({name}): {significant_differences(summary, key)}.")
        print()


if __name__ == "__main__":
    main()
