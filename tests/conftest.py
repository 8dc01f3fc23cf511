"""Fixtures several test modules share."""

from __future__ import annotations

import sys

import pytest
from shared_scenarios import THREE_ISLANDS

import shardmeter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


#: Tests left to CI's slow stage (``python -m pytest -m slow``): the longest property sweeps and
#: the planner's brute-force cases beyond the first (node ids; a parametrised id matches its
#: whole family). Each is seconds to a minute on 2 cores; together they are about a third of the
#: suite's CPU time.
SLOW = (
    "tests/test_properties.py::test_better_hardware_never_slows_a_step",
    "tests/test_properties.py::test_more_memory_never_makes_a_feasible_plan_infeasible",
    "tests/test_properties.py::test_bigger_island_with_same_per_gpu_work_never_lowers_throughput_unexplained",
    "tests/test_properties.py::test_better_hardware_never_slows_a_stage_group_pipeline_deep",
    "tests/test_properties.py::test_a_plans_best_is_the_estimate_of_that_plan_deep",
    "tests/test_plan_bruteforce.py::",
)
#: ... except these, which stay in the default run so that it still exercises each mechanism.
NOT_SLOW = ("tests/test_plan_bruteforce.py::test_plan_finds_the_brute_force_best[case0-time]",)


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid.replace("\\", "/")
        if nodeid.startswith(SLOW) and not nodeid.startswith(NOT_SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def est():
    """An Estimator over the installed plugins (a module may define its own)."""
    return shardmeter.Estimator()


@pytest.fixture(scope="module")
def three():
    """The raw tables of examples/multi-island/three-islands.toml."""
    return tomllib.loads(THREE_ISLANDS.read_text())
