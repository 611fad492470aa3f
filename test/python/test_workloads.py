"""Training workloads on ucxcoll against the same run on gloo (workloads.py):
FSDP2 (fp32, bf16 parameters with fp32 reduction, HSDP on a 2x2 mesh),
tensor parallelism with DTensor, DCP save on 4 ranks and load on 2, and
DDP with find_unused_parameters, no_sync, static_graph and PowerSGD."""

import json
import os
import sys
import tempfile

import pytest

from harness import HERE, free_port, run_processes


def run_workload(name: str, world: int, timeout: float = 600, **env):
    port = free_port()
    with tempfile.TemporaryDirectory(prefix=f"ucxcoll-{name}-") as workdir:
        commands = [
            [sys.executable, str(HERE / "workloads.py"), name, str(rank), str(world), str(port), workdir]
            for rank in range(world)
        ]
        results = run_processes(commands, timeout, env=dict(os.environ, **env))
    reports = []
    for rank, (code, output) in enumerate(results):
        assert code == 0, f"rank {rank} of {name} exited with {code}:\n{output[-4000:]}"
        lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
        assert lines, f"rank {rank} of {name} reported nothing:\n{output[-4000:]}"
        reports.append(json.loads(lines[-1][len("RESULT ") :]))
    return reports


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
