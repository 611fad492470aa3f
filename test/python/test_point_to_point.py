"""Every check of checks_point_to_point.py, at world sizes 1 to 4."""

from conftest import check_module_tests

test_check, test_rank_processes_exit_cleanly = check_module_tests("checks_point_to_point", [1, 2, 3, 4])
