"""Every check of checks_disagreement.py, at world sizes 2 and 3."""

import pytest

import checks_disagreement
from conftest import check_outcome, processes_exited_cleanly

MODULE = "checks_disagreement"
WORLD_SIZES = [2, 3]


@pytest.mark.parametrize("check", checks_disagreement.check.names())
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_check(rank_runs, world, check):
    check_outcome(rank_runs, MODULE, world, check)


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_rank_processes_exit_cleanly(rank_runs, world):
    processes_exited_cleanly(rank_runs, MODULE, world)
