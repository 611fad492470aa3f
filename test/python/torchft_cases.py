"""torchft's own process-group test cases on ucxcoll's torchft group.

torchft's `MultiPgBaseTest` runs three ranks as threads of one process on
one group (reconfigured through a store), each case for every collective
torchft wraps: the collective itself, and with resiliency (the last rank
shuts its group down in the middle; the others must raise at once, with a
message torchft recognises, and go on after a reconfiguration). gloo skips
three of the collectives (it lacks them); ucxcoll runs all of them.

Run by test_torchft.py in a process of its own:
    python -m pytest -q test/python/torchft_cases.py
"""

from datetime import timedelta

from parameterized import parameterized
from torchft import process_group_test as upstream

from ucxcoll.torchft import ProcessGroupUcxcoll


class UcxcollMultiPgTest(upstream.MultiPgBaseTest):
    BACKEND = "ucxcoll"
    WORLD_SIZE = 3
    COLLECTIVES = sorted(upstream._ALL_COLLECTIVES)

    @classmethod
    def _create_pg(cls, backend: str):
        # What torchft's gloo case uses, bar the timeout: 1 s is short for
        # three ranks as threads on a 2-core machine.
        return ProcessGroupUcxcoll(timeout=timedelta(seconds=10))

    @parameterized.expand(COLLECTIVES)
    def test_collective(self, collective: str) -> None:
        self._run_parallel(collective, device="cpu")

    @parameterized.expand(COLLECTIVES)
    def test_collective_with_resiliency(self, collective: str) -> None:
        self._run_with_resiliency(collective, device="cpu")
