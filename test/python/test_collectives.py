"""Every check of checks_collectives.py, at world sizes 1 to 5, against gloo.

One test per (world size, check); the ranks of a world size are started
once and run all checks (see harness.py).
"""

import pytest

import checks_collectives
from conftest import check_outcome, processes_exited_cleanly

MODULE = "checks_collectives"
WORLD_SIZES = [1, 2, 3, 4, 5]


@pytest.mark.parametrize("check", checks_collectives.check.names())
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_check(rank_runs, world, check):
    check_outcome(rank_runs, MODULE, world, check)


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_rank_processes_exit_cleanly(rank_runs, world):
    processes_exited_cleanly(rank_runs, MODULE, world)
