"""Every check of checks_collectives.py, at world sizes 1 to 5, against gloo;
and once more at 4 ranks with groups that connect lazily.

One test per (world size, check); the ranks of a world size are started
once and run all checks (see harness.py).
"""

import pytest

from conftest import check_module_tests, check_names, check_outcome, processes_exited_cleanly

test_check, test_rank_processes_exit_cleanly = check_module_tests("checks_collectives", [1, 2, 3, 4, 5])

# Groups of up to 64 ranks connect to every rank at setup unless told
# otherwise; these connect to a rank only at the first message to or from
# it, as larger groups do.
LAZY = {"UCXCOLL_CONNECT": "lazy"}


@pytest.mark.parametrize("check", check_names("checks_collectives"))
def test_check_with_lazy_connections(rank_runs, check):
    check_outcome(rank_runs, "checks_collectives", 4, check, LAZY)


def test_rank_processes_with_lazy_connections_exit_cleanly(rank_runs):
    processes_exited_cleanly(rank_runs, "checks_collectives", 4, LAZY)
