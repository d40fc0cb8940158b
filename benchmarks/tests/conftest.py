import pytest
from bench_helpers import longest_first


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The known-long tests first (``bench_helpers.LONGEST_FIRST``)."""
    longest_first(items)
