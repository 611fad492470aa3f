"""Every check of rank_checks.py, at world sizes 1 to 5, against gloo.

One test per (world size, check); the ranks of a world size are started
once and run all checks (see harness.py).
"""

import pytest

import rank_checks
from conftest import WORLD_SIZES

CHECK_NAMES = [name for name, _, _ in rank_checks.CHECKS]


@pytest.mark.parametrize("check", CHECK_NAMES)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_check(rank_runs, world, check):
    status, details = rank_runs(world).outcome(check)
    if status == "skipped":
        pytest.skip(details)
    assert status == "passed", details


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_rank_processes_exit_cleanly(rank_runs, world):
    run = rank_runs(world)
    for rank, (code, output) in enumerate(run.processes):
        assert code == 0, f"rank {rank} exited with {code}:\n{output[-4000:]}"
