"""The benchmarks tests' scheduling: the known-long tests that conftest.py starts first are collected under their ids."""

import subprocess
import sys
from typing import cast

import pytest
from bench_helpers import LONGEST_FIRST, ROOT, longest_first


def _collected(files: list[str], session: pytest.Session) -> list[str]:
    """
    The ids pytest collects from ``files``, in the order the hooks leave them: this session's items where it collected
    each of the files with no test filtered out by name (the whole suite, as CI runs it), else a collection of the
    files in a subprocess.
    """
    collected = [item.nodeid for item in session.items]
    by_name = session.config.option.keyword or session.config.option.deselect
    if not by_name and all(any(i.startswith(f"{name}::") for i in collected) for name in files):
        return collected
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip


def test_every_test_listed_to_start_first_is_collected(request: pytest.FixtureRequest) -> None:
    # A renamed or moved test would silently lose its place at the front: its id must be updated in bench_helpers.py
    files = sorted({node_id.split("::")[0] for node_id in LONGEST_FIRST})
    collected = _collected(files, request.session)
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert list(LONGEST_FIRST) == collected[: len(LONGEST_FIRST)], collected[: len(LONGEST_FIRST) + 2]


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_the_listed_tests_go_first_in_their_order_and_the_others_keep_theirs() -> None:
    first, second = LONGEST_FIRST[1], LONGEST_FIRST[0]
    items = [_Item("benchmarks/tests/a.py::test_one"), _Item(first), _Item("benchmarks/tests/b.py::test_two"), _Item(second)]
    # The hook reads only an item's nodeid
    longest_first(cast(list[pytest.Item], items))
    assert [item.nodeid for item in items] == [
        second,
        first,
        "benchmarks/tests/a.py::test_one",
        "benchmarks/tests/b.py::test_two",
    ]
