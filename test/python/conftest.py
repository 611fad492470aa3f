import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RankRun  # noqa: E402

WORLD_SIZES = [1, 2, 3, 4, 5]


@pytest.fixture(scope="session")
def rank_runs():
    """world size -> RankRun, each started on first use."""
    cache = {}

    def get(world: int) -> RankRun:
        if world not in cache:
            cache[world] = RankRun(world)
        return cache[world]

    return get
