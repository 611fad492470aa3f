"""Every check of checks_engine.py (async handles, futures, groups, threads),
at world sizes 1 to 4."""

import pytest

import checks_engine
from conftest import check_outcome, processes_exited_cleanly

MODULE = "checks_engine"
WORLD_SIZES = [1, 2, 3, 4]


@pytest.mark.parametrize("check", checks_engine.check.names())
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_check(rank_runs, world, check):
    check_outcome(rank_runs, MODULE, world, check)


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_rank_processes_exit_cleanly(rank_runs, world):
    processes_exited_cleanly(rank_runs, MODULE, world)
