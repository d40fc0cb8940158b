"""The test suite's scheduling: the known-long tests that tests/conftest.py starts first exist under their names."""

import ast
import importlib.util
from pathlib import Path
from typing import cast

import pytest
from conftest import LONGEST_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[2]


def _parametrize_ids(path: Path, name: str) -> list[str]:
    """The ids of a test function's ``pytest.mark.parametrize`` (ids given, or pytest's for plain values), from its module."""
    spec = importlib.util.spec_from_file_location(f"_order_check_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (mark,) = [mark for mark in getattr(module, name).pytestmark if mark.name == "parametrize"]
    ids = mark.kwargs.get("ids")
    if ids is not None:
        return list(ids)
    # pytest's own ids: each value's str, joined by "-" where several arguments are parametrized together
    several = "," in mark.args[0] if isinstance(mark.args[0], str) else len(mark.args[0]) > 1
    return ["-".join(map(str, values)) if several else str(values) for values in mark.args[1]]


def test_every_test_listed_to_start_first_exists() -> None:
    # A renamed or moved test would silently lose its place at the front: its id must be updated in conftest.py
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    for node_id in LONGEST_FIRST:
        file, test = node_id.split("::")
        name, _, parameter = test.partition("[")
        path = ROOT / file
        assert path.is_file(), f"{node_id}: no file {file} (update LONGEST_FIRST in tests/conftest.py)"
        functions = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{node_id}: no test {name} in {file} (update LONGEST_FIRST in tests/conftest.py)"
        if parameter:
            ids = _parametrize_ids(path, name)
            assert parameter[:-1] in ids, f"{node_id}: {name} has no case [{parameter} (its ids: {ids})"


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_the_listed_tests_go_first_in_their_order_and_the_others_keep_theirs() -> None:
    first, second = LONGEST_FIRST[1], LONGEST_FIRST[0]
    items = [_Item("tests/a.py::test_one"), _Item(first), _Item("tests/b.py::test_two"), _Item(second)]
    # The hook reads only an item's nodeid
    pytest_collection_modifyitems(cast(list[pytest.Item], items))
    assert [item.nodeid for item in items] == [second, first, "tests/a.py::test_one", "tests/b.py::test_two"]
