import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RankRun  # noqa: E402


@pytest.fixture(scope="session")
def rank_runs():
    """(check module, world size) -> RankRun, each started on first use."""
    cache = {}

    def get(module: str, world: int) -> RankRun:
        if (module, world) not in cache:
            cache[(module, world)] = RankRun(module, world)
        return cache[(module, world)]

    return get


def check_outcome(rank_runs, module: str, world: int, check: str) -> None:
    """Asserts that `check` passed on every rank (or skips with its reason)."""
    status, details = rank_runs(module, world).outcome(check)
    if status == "skipped":
        pytest.skip(details)
    assert status == "passed", details


def processes_exited_cleanly(rank_runs, module: str, world: int) -> None:
    run = rank_runs(module, world)
    for rank, (code, output) in enumerate(run.processes):
        assert code == 0, f"rank {rank} exited with {code}:\n{output[-4000:]}"
