"""Every check of checks_collectives.py, at world sizes 1 to 5, against gloo.

One test per (world size, check); the ranks of a world size are started
once and run all checks (see harness.py).
"""

from conftest import check_module_tests

test_check, test_rank_processes_exit_cleanly = check_module_tests("checks_collectives", [1, 2, 3, 4, 5])
