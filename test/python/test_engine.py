"""Every check of checks_engine.py (async handles, futures, groups, threads),
at world sizes 1 to 4."""

from conftest import check_module_tests

test_check, test_rank_processes_exit_cleanly = check_module_tests("checks_engine", [1, 2, 3, 4])
