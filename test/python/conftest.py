import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RankRun  # noqa: E402


@pytest.fixture(scope="session")
def rank_runs():
    """(check module, world size) -> RankRun, each started on first use."""
    cache = {}

    def get(module: str, world: int, env: dict | None = None) -> RankRun:
        key = (module, world, tuple(sorted((env or {}).items())))
        if key not in cache:
            cache[key] = RankRun(module, world, extra_env=env)
        return cache[key]

    return get


def check_outcome(rank_runs, module: str, world: int, check: str, env: dict | None = None) -> None:
    """Asserts that `check` passed on every rank (or skips with its reason);
    `env` is added to the ranks' environment."""
    status, details = rank_runs(module, world, env).outcome(check)
    if status == "skipped":
        pytest.skip(details)
    assert status == "passed", details


def processes_exited_cleanly(rank_runs, module: str, world: int, env: dict | None = None) -> None:
    run = rank_runs(module, world, env)
    for rank, (code, output) in enumerate(run.processes):
        assert code == 0, f"rank {rank} exited with {code}:\n{output[-4000:]}"


def check_names(module: str) -> list[str]:
    """The checks of a check module (checks_*.py), in order."""
    return importlib.import_module(module).check.names()


def check_module_tests(module: str, world_sizes: list[int]):
    """The two tests of a check module (checks_*.py): one per (world size,
    check), and one that the rank processes of each world size exited
    cleanly. A test file binds them to test_* names for pytest to collect."""
    names = check_names(module)

    @pytest.mark.parametrize("check", names)
    @pytest.mark.parametrize("world", world_sizes)
    def test_check(rank_runs, world, check):
        check_outcome(rank_runs, module, world, check)

    @pytest.mark.parametrize("world", world_sizes)
    def test_rank_processes_exit_cleanly(rank_runs, world):
        processes_exited_cleanly(rank_runs, module, world)

    return test_check, test_rank_processes_exit_cleanly
