"""Every check of checks_point_to_point.py, at world sizes 1 to 4."""

import pytest

import checks_point_to_point
from conftest import check_outcome, processes_exited_cleanly

MODULE = "checks_point_to_point"
WORLD_SIZES = [1, 2, 3, 4]


@pytest.mark.parametrize("check", checks_point_to_point.check.names())
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_check(rank_runs, world, check):
    check_outcome(rank_runs, MODULE, world, check)


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_rank_processes_exit_cleanly(rank_runs, world):
    processes_exited_cleanly(rank_runs, MODULE, world)
