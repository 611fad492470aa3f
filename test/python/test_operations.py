"""Every check of checks_operations.py (reduce, reduce_scatter, all_to_all,
gather, scatter, uneven all_gather, monitored_barrier, coalesced
collectives, split groups), at world sizes 1 to 4, against gloo.
"""

from conftest import check_module_tests

test_check, test_rank_processes_exit_cleanly = check_module_tests("checks_operations", [1, 2, 3, 4])
