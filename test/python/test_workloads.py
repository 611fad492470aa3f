"""Training workloads on ucxcoll against the same run on gloo (workloads.py):
FSDP2 (fp32, bf16 parameters with fp32 reduction, HSDP on a 2x2 mesh),
tensor parallelism with DTensor, DCP save on 4 ranks and load on 2, and
DDP with find_unused_parameters, no_sync, static_graph and PowerSGD."""

import tempfile

import pytest

from harness import run_reporting_ranks


def run_workload(name: str, world: int, timeout: float = 600, **env):
    """Runs workloads.py NAME on `world` ranks; each rank's report."""
    return run_reporting_ranks("workloads.py", name, world, timeout, **env)


def assert_close(result, what):
    # Same inputs, same reduction order on 2 ranks: bit-identical is expected;
    # with 4 ranks the two backends may add in different orders, so the
    # tolerance is 1e-5 relative to the largest value.
    assert result["max_abs_difference"] <= 1e-5 * max(1.0, result["scale"]), (what, result)


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_fully_shard_matches_gloo(world):
    for rank, report in enumerate(run_workload("fsdp2", world)):
        expected = {"fp32", "bf16_params"} | ({"hsdp_2x2"} if world == 4 else set())
        assert set(report) == expected, report
        for variant, result in report.items():
            assert_close(result, f"rank {rank} {variant}")


def test_tensor_parallel_matches_gloo():
    for rank, report in enumerate(run_workload("tensor_parallel", 2)):
        assert_close(report, f"rank {rank}")


def test_checkpoint_saved_on_four_ranks_loads_on_two():
    with tempfile.TemporaryDirectory(prefix="ucxcoll-dcp-") as checkpoint:
        assert all(r["saved"] for r in run_workload("checkpoint_save", 4, CHECKPOINT_DIR=checkpoint))
        reports = run_workload("checkpoint_load", 2, CHECKPOINT_DIR=checkpoint)
    assert all(r["equal"] for r in reports), reports


def test_ddp_variants_match_gloo():
    for rank, report in enumerate(run_workload("ddp_variants", 2)):
        assert set(report) == {"find_unused_parameters", "no_sync", "static_graph", "powersgd"}, report
        for variant, result in report.items():
            assert_close(result, f"rank {rank} {variant}")
