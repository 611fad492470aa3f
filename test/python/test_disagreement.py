"""Every check of checks_disagreement.py, at world sizes 2 and 3."""

from conftest import check_module_tests

test_check, test_rank_processes_exit_cleanly = check_module_tests("checks_disagreement", [2, 3])
