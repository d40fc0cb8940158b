"""
The study kit's front door (``benchmarks/kit/studies.py``): a folder per study, pages that lead with the verdict of
their stored runs, the index of ``benchmarks/`` kept current, and every study's pages regenerated from its stored
runs equal to the committed ones; ``run`` passing a signal on to the study's command.
"""

import json
import math
import signal
import sys
from pathlib import Path
from typing import Any

import bench_helpers
import pytest
from bench_helpers import ROOT, _load, regenerated

studies = _load("studies")
# Studies whose regeneration takes long (their bootstrap over many envs and arms): run with -m slow
SLOW = {"evidence", "coverage", "fresh_memory"}


def test_every_study_folder_holds_a_study() -> None:
    folders = sorted(path for path in (ROOT / "benchmarks" / "studies").iterdir() if path.is_dir())
    assert {folder.name for folder in folders} >= set(studies.names()) and len(studies.names()) >= 6
    for folder in folders:
        assert (folder / "PROTOCOL.md").is_file(), f"{folder.name}: no protocol"
        if (folder / "study.yml").is_file():
            study = studies.load(folder.name)
            assert (folder / study.page).is_file() and (folder / "NOTES.md").is_file()
            assert study.report, f"{folder.name}: no report command"
        else:  # a study under way: no results page before its report exists
            assert not list(folder.glob("RESULTS*.md")), f"{folder.name}: a results page without a study.yml"


def test_every_page_leads_with_its_verdict_and_the_index_is_current() -> None:
    for study in (entry for name in studies.names() for entry in studies.load(name).pages()):
        text = (study.folder / study.page).read_text()
        assert studies.arrange(text, study) == text, f"{study.page}: run python benchmarks/kit/studies.py index"
        # The first screen: the title, then the question and the verdict with its numbers
        head = text.split(studies.LEAD_END)[0]
        assert text.startswith("# ") and "**Question.**" in head and "**Verdict.**" in head
        assert len(head.splitlines()) < 20
    assert (ROOT / "benchmarks" / "README.md").read_text() == studies.index()


def test_the_verdicts_numbers_are_the_summaries(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(
        json.dumps({"a": {"p": [0.4161, 0.3427, 0.4933], "x": 0.0751, "l": [[1, 2, 3]], "n": 31}})
    )
    text = studies.fill("P = {p:s.json:a.p}, IQM {x:s.json:a.p}, p {v:s.json:a.x}, {p:s.json:a.l.0}", tmp_path)
    assert text == "P = 0.42 (0.34 to 0.49), IQM 0.416 (0.343 to 0.493), p 0.08, 1.00 (2.00 to 3.00)"
    assert studies.fill("{v:s.json:a.n} runs", tmp_path) == "31 runs"  # a count stays a count
    # A text the report wrote (an arm without stored runs) stays that text
    (tmp_path / "t.json").write_text(json.dumps({"arm": "pending (0 of 10 runs stored)"}))
    assert studies.fill("a stack: {v:t.json:arm}.", tmp_path) == "a stack: pending (0 of 10 runs stored)."
    with pytest.raises(ValueError, match="triple"):
        studies.fill("{p:s.json:a.x}", tmp_path)
    with pytest.raises(ValueError, match="unknown placeholder"):
        studies.fill("{q:s.json:a.x}", tmp_path)
    with pytest.raises(ValueError, match="study must be one of"):
        studies.load("no_such_study")


def test_arranging_moves_the_chronicle_to_the_end_and_is_idempotent(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps({"p": [0.5, 0.25, 0.75]}))
    study = studies.Study(
        name="x", title="T", question="Q?", verdict="V {p:s.json:p}.", page="RESULTS.md", figure="f.png",
        report=[["r.py"]], chronicle=["Protocol, deviations and reading"],
    )  # fmt: skip
    generated = (
        "# T\n\n- Command: `r.py`\n- Machine: m\n\n## Protocol, deviations and reading\n\nD.\n\n## Aggregate\n\n| a |\n"
    )
    arranged = studies.arrange(generated, study, tmp_path)
    lead, rest = arranged.split(studies.LEAD_END)
    assert "**Verdict.** V 0.50 (0.25 to 0.75)." in lead and "![T](f.png)" in lead
    assert rest.index("## Aggregate") < rest.index(studies.MADE) < rest.index("- Command") < rest.index("### Protocol")
    assert studies.arrange(arranged, study, tmp_path) == arranged
    (tmp_path / "s.json").write_text(json.dumps({"p": [0.9, 0.8, 1.0]}))  # new runs: a new verdict, nothing else
    again = studies.arrange(arranged, study, tmp_path)
    assert "V 0.90 (0.80 to 1.00)." in again and again.split(studies.LEAD_END)[1] == rest


def _numbers_equal(stored: Any, new: Any, where: str = "") -> None:
    if isinstance(stored, dict):
        assert set(stored) == set(new), where
        for key in stored:
            _numbers_equal(stored[key], new[key], f"{where}.{key}")
    elif isinstance(stored, list):
        assert len(stored) == len(new), where
        for i, (a, b) in enumerate(zip(stored, new, strict=True)):
            _numbers_equal(a, b, f"{where}.{i}")
    elif isinstance(stored, float) and isinstance(new, float):
        assert math.isclose(stored, new, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(stored) and math.isnan(new)), where
    elif not isinstance(stored, str):  # paths and commands name the folders they were written to
        assert stored == new, where


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow if name in SLOW else pytest.mark.xdist_group(name))
        for name in studies.names()
    ],
)
def test_regenerated_pages_equal_the_stored_ones(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    # The study's report commands on its stored runs, into scratch folders: every page equals the committed one up to
    # its chronicle (which names the folders), and every summary's numbers equal the stored summary's. Made once per
    # session (test_zoo_rows_study.py reads the same), in one worker (the study's xdist group)
    study = studies.load(name)
    pages, summaries = regenerated(name, tmp_path_factory.getbasetemp())
    for page in sorted(pages.glob("*.md")):
        stored = (study.folder / page.name).read_text().split(studies.MADE)[0]
        assert page.read_text().split(studies.MADE)[0] == stored, f"{name}: {page.name} differs from the stored page"
    written = sorted(summaries.glob("*.json"))
    assert written, f"{name}: its report wrote no summary"
    for summary in written:
        _numbers_equal(json.loads((studies.SUMMARIES / summary.name).read_text()), json.loads(summary.read_text()))


def test_every_studys_docs_page_opens_with_its_lead() -> None:
    # The documentation site's page of a study shows the same question and verdict first (included, not copied)
    for name in studies.names():
        study = studies.load(name)
        if study.docs is None:
            continue
        lines = (ROOT / study.docs).read_text().splitlines()
        assert lines[0].startswith("# ") and lines[2] == f"```{{include}} ../../benchmarks/studies/{name}/{study.page}"
        assert lines[3] == f":start-after: {studies.LEAD_START}" and lines[4] == f":end-before: {studies.LEAD_END}"


# studies.py's run_command on a stand-in for a study's command: a worker of run_workers that runs "runs" of 2 s (five
# at most) until it is stopped
STUDY_COMMAND = """
import time
from sb3_reset_ppo.experiments import executors

def work(index, stop):
    for _ in range(5):
        if stop.is_set():
            return
        print("run", "started", flush=True)  # split: the error message quotes this source
        time.sleep(2)
        print("run", "finished", flush=True)

executors.run_workers(work, 1)
"""
FORWARDING = f"from benchmarks.kit import studies; studies.run_command(['-c', {STUDY_COMMAND!r}])"


def test_run_passes_a_signal_on_to_the_studys_command(tmp_path: Path) -> None:
    command = [sys.executable, "-c", FORWARDING]
    log = tmp_path / "log.txt"
    code, text = bench_helpers.stopped_by(signal.SIGTERM, command, lambda: "run started" in log.read_text(), log)
    # The study's command got the signal, let its running run finish, started no other, and exited with an error
    line = "stopping (SIGTERM): no new run starts; waiting for the running ones (1); send the signal again to stop them now"
    assert text.count(line) == 1 and text.count("run started") == text.count("run finished") == 1, text
    assert code == 1 and "CalledProcessError" in text
