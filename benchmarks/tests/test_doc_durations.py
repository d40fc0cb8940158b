"""
Every duration the README and the guides state is the one benchmarks/speed/doc_durations.py measured (CPU seconds with one
torch thread, the time on an idle core), within MARGIN, for the code the pages show now.
"""

import json
import re
import statistics
from pathlib import Path

import pytest
from bench_helpers import ROOT, _load

RESULTS = ROOT / "benchmarks" / "results" / "doc_durations.json"
# A stated "about N seconds" may differ from the measured figure by this fraction of it
MARGIN = 0.35
# Where each measured item's duration is stated: the page and the sentence, {N} the seconds
STATED = {
    "demo": [("README.md", "make demo trains for about {N} seconds on one idle CPU core")],
    "usage_snippet": [
        ("README.md", "This runs for about {N} seconds on one idle CPU core"),
        ("docs/guide/usage.md", "It runs for about {N} seconds on one idle CPU core"),
    ],
    "masking_evaluation": [("docs/guide/masking.md", "It runs for about {N} seconds on one idle CPU core")],
    "zoo_train": [("docs/guide/rl_zoo.md", "30,000 steps of the packaged config, about {N} seconds on one idle CPU core")],
    "compare_example": [("docs/guide/compare.md", "two at a time, in about {N} seconds on 2 idle cores")],
}
# The default suite's duration, which the README states for make test: measured by .ci/run on a fresh clone, its stage
# table stored in benchmarks/results/ci_durations.txt
CI_STATED = ("README.md", "make test runs as CI runs it from a fresh clone, about {N} minutes on 2 idle cores")
CI_DURATIONS = ROOT / "benchmarks" / "results" / "ci_durations.txt"
DURATION = re.compile(r"about \d[\d.,]* ?(?:s|seconds|minutes?|min|hours?)\b")


def _flat(page: str) -> str:
    return " ".join((ROOT / page).read_text().replace("`", "").split())


def _stated(page: str, sentence: str) -> float:
    pattern = re.escape(sentence).replace(re.escape("{N}"), r"(\d[\d.,]*)")
    match = re.search(pattern, _flat(page))
    assert match is not None, f"{page} no longer says {sentence!r}"
    return float(match.group(1).replace(",", ""))


def _stored() -> dict[str, dict]:
    return {result["item"]: result for result in json.loads(RESULTS.read_text())["results"]}


def test_every_stated_duration_is_the_measured_one() -> None:
    stored = _stored()
    assert sorted(stored) == sorted(STATED)
    for item, places in STATED.items():
        measured = stored[item]["seconds"]
        for page, sentence in places:
            stated = _stated(page, sentence)
            assert abs(stated - measured) <= MARGIN * measured, f"{page}: about {stated:g} s, measured {measured:.1f} s"


def test_the_measurement_is_of_the_code_the_pages_show() -> None:
    # An edited snippet, command or demo needs a new measurement: python benchmarks/speed/doc_durations.py --items ITEM
    bench = _load("doc_durations")
    stored = _stored()
    for item in STATED:
        _, code = bench.item_command(item)
        assert bench.code_hash(code) == stored[item]["code_sha256"], f"re-measure {item}"


def test_no_page_states_a_duration_that_is_not_measured() -> None:
    pages = ["README.md", *(str(path.relative_to(ROOT)) for path in sorted((ROOT / "docs" / "guide").glob("*.md")))]
    known = [place for places in STATED.values() for place in places] + [CI_STATED]
    for page in pages:
        found = DURATION.findall(_flat(page))
        checked = [sentence for where, sentence in known if where == page]
        assert len(found) == len(checked), f"{page} states durations {found}; the measured ones: {checked}"
        for sentence in checked:
            _stated(page, sentence)


def test_the_readme_states_the_stored_ci_duration() -> None:
    # The median of the stored runs' totals: the machine's speed varies from run to run
    totals = [float(seconds) for seconds in re.findall(r"^total\s+(\d+)$", CI_DURATIONS.read_text(), re.MULTILINE)]
    assert totals, f"{CI_DURATIONS} has no total line"
    total = statistics.median(totals)
    assert abs(_stated(*CI_STATED) * 60 - total) <= MARGIN * total


@pytest.mark.parametrize("item", sorted(STATED))
def test_each_item_reads_its_code_from_its_page(item: str) -> None:
    bench = _load("doc_durations")
    command, code = bench.item_command(item)
    assert code.strip() and Path(command[0]).name.startswith("python")
    if item in ("usage_snippet", "masking_evaluation"):
        assert "torch.set_num_threads(1)" in code  # one thread, as the figure assumes


# The speed sentence of a stored compare report: the median ratio of learn() seconds, then its pairs' range
RATIO_REPORT = re.compile(r"takes (\d\.\d\d) of ppo_lstm's time, .*?, (\d\.\d\d) to (\d\.\d\d) \(median")


def _ratios(report: str) -> tuple[str, str, str]:
    match = RATIO_REPORT.search(report)
    assert match is not None, report
    return match.group(1), match.group(2), match.group(3)


def test_the_compare_guide_quotes_the_stored_reports_ratios() -> None:
    # The run doc_durations.py measured (2 idle cores), and the first-hour check's (beside one busy process)
    stated = _flat("docs/guide/compare.md")
    ratio, low, high = _ratios(" ".join(_stored()["compare_example"]["stdout_tail"]))
    quoted = f"learn() at {ratio} of RecurrentPPO's time ({low} to {high} in its two pairs of runs"
    assert f"(benchmarks/results/doc_durations.json) it reported ResetPPO's {quoted}" in stated
    ratio, low, high = _ratios((ROOT / "benchmarks" / "results" / "first_hour" / "compare_quick_look.txt").read_text())
    quoted = f"beside one busy process at {ratio} ({low} to {high}: benchmarks/results/first_hour/compare_quick_look.txt)"
    assert quoted in stated
