import os

import pytest
import torch as th
from hypothesis import settings

# Two cores are shared by two pytest workers: one torch thread each.
th.set_num_threads(1)

# Hypothesis profiles: "ci" (the default) runs a quarter of each property test's examples (``helpers.examples``),
# "thorough" runs them all (``make test-slow`` selects it with HYPOTHESIS_PROFILE=thorough)
settings.register_profile("ci", max_examples=25)
settings.register_profile("thorough", max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The longest tests of the default suite (seconds of CPU each, most of them a real training through the RL Zoo, a Ray
# cluster, PostgreSQL, a wheel's install or the docs' build), longest first. They run first: pytest orders the paths
# of the command line by folder, so a long test may otherwise start last and leave the other xdist worker idle at
# the end. tests/packaging/test_test_order.py checks that each of these node ids exists
LONGEST_FIRST = (
    "tests/experiments/test_ray_cluster.py::test_compare_and_grid_run_on_a_ray_cluster_without_a_shared_filesystem",
    "tests/maskable/test_upstream_invalid_actions.py::test_upstream_maskable_ppo_suite_passes_with_lstm_policies",
    "tests/experiments/test_compare.py::test_compare_on_a_real_task",
    "tests/experiments/test_stopping.py::test_sigterm_lets_the_running_run_finish_and_starts_no_other",
    "tests/experiments/test_stopping.py::test_ctrl_c_lets_the_running_run_finish_and_starts_no_other",
    "tests/docs/test_docs.py::test_python_block_runs[docs/guide/compare.md:179]",
    "tests/experiments/test_postgres_tuning.py::test_two_workers_share_one_study_in_postgresql",
    "tests/packaging/test_packaging.py::test_wheel_holds_package_data_and_runs_the_zoo_from_an_install",
    "tests/docs/test_docs.py::test_docs_build_without_warnings",
    "tests/docs/test_readme.py::test_gru_snippet_and_command_run_as_written",
    "tests/export/test_export_cli.py::test_a_refused_export_keeps_the_existing_file_and_says_one_line",
    "tests/reset_ppo/test_learning.py::test_reset_ppo_solves_cue_recall[MlpGruPolicy]",
    "tests/common/test_maskable_evaluation.py::test_trained_maskable_reset_ppo_needs_its_memory",
    "tests/common/test_minibatch_weights.py::test_effective_weights_equal_the_documented_expectation",
    "tests/reset_ppo/test_update_weights.py::test_mean_update_per_step_is_the_documented_expectation[16-2-8-4-mask-full-1-False]",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests of ``LONGEST_FIRST`` first, in its order; every other test keeps its place."""
    # Node ids are relative to the rootdir, the repository's root (pyproject.toml), from whichever folder pytest runs
    rank = {node_id: index for index, node_id in enumerate(LONGEST_FIRST)}
    # list.sort is stable: the tests not listed keep their collection order, after the listed ones
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))
