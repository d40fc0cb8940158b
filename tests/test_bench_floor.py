"""benchmarks/speed/bench_floor.py's stored results and the performance page's table of them (issue 52)."""

import json
import re

from bench_helpers import ROOT

RESULTS = ROOT / "benchmarks" / "results"


def test_the_performance_page_states_the_stored_floor_measurements() -> None:
    # Every row of docs/studies/performance.md's floor table is the stored run's (after) and the stored run before
    # the changes: seconds per update, the ratios and the learn() ratio, in the order of the stored settings
    after = json.loads((RESULTS / "bench_floor.json").read_text())["results"]
    before = {r["setting"]: r for r in json.loads((RESULTS / "bench_floor_before.json").read_text())["results"]}
    page = (ROOT / "docs" / "studies" / "performance.md").read_text()
    table = page.split("## Per update against the floor")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if re.match(r"\| (MLP|image|zoo)", line)]
    assert len(rows) == len(after) == 9
    for line, row in zip(rows, after, strict=True):
        seconds = row["seconds_per_update"]
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        expected = [
            f"{seconds['floor']:.3f}", f"{seconds['reset']:.3f}", f"{seconds['recurrent_ppo']:.3f}",
            f"{before[row['setting']]['reset_over_floor']:.2f}", f"{row['reset_over_floor']:.2f}",
            f"{row['recurrent_ppo_over_floor']:.2f}", f"{row['reset_over_recurrent_ppo']:.2f}", f"{row['learn_ratio']:.2f}",
        ]  # fmt: skip
        assert cells[1:] == expected, line
