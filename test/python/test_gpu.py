"""CUDA tensors through ucxcoll (gpu_checks.py), on machines with GPUs.

On a machine without one every test here is skipped with the reason; the
routing itself is tested everywhere by test_device_routing.py.
"""

import pytest
import torch

from harness import run_reporting_ranks

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")
# Two ranks, or four where there are four GPUs: NCCL wants one GPU per rank,
# and AVG stays exact when the rank count is a power of two.
MANY = 4 if GPUS >= 4 else 2
needs_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 or more CUDA GPUs (this machine has {GPUS})")


def run(name: str, world: int):
    return run_reporting_ranks("gpu_checks.py", name, world, timeout=600)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_expected_values_of_the_gpu_checks_hold_for_cpu_tensors(world):
    # The GPU checks compare with values computed on the CPU; here the same
    # comparison runs on CPU tensors, so a GPU failure is NCCL's or ours,
    # never the checker's.
    for report in run("operations_on_cpu", world):
        assert report == {"mismatches": [], "cuda_initialized": False}


def nccl_kind() -> str:
    """The class backend="nccl" makes on this torch: ProcessGroupNCCL2 on
    torch 2.15 unless TORCH_DIST_USE_NCCL2=0, ProcessGroupNCCL otherwise."""
    import os

    import torch

    version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    nccl2 = version >= (2, 15) and os.environ.get("TORCH_DIST_USE_NCCL2") != "0"
    return "ProcessGroupNCCL2" if nccl2 else "ProcessGroupNCCL"


NCCL_KIND = nccl_kind()


@needs_gpu
def test_one_gpu_every_operation_and_dtype_equals_expected():
    (report,) = run("operations", 1)
    assert report["mismatches"] == []
    assert report["before"] is True and report["cuda_initialized_by_cpu_calls"] is False
    assert report["kind"] == NCCL_KIND
    assert report["async_ok"] is True and report["cpu_ok"] is True
    assert report["mixed"] == ("ucxcoll: all_gather got tensors on cpu and on cuda:0; the tensors of one call must "
                               "all be on one device (CPU tensors go over UCX, CUDA tensors to NCCL)")
    assert report["seed_all_gather"] == [[0]]


@needs_gpu
def test_device_id_connects_nccl_at_init_and_barrier_runs_on_it():
    (report,) = run("eager_device_id", 1)
    assert report == {"made_at_init": True, "kind": NCCL_KIND, "sum_ok": True}


@needs_gpu
def test_one_gpu_ddp_parameters_equal_nccl():
    (report,) = run("ddp_matches_nccl", 1)
    assert report["differences"] == {"plain": 0.0, "fp16_hook": 0.0}


@needs_gpus
def test_many_gpus_every_operation_point_to_point_and_seed_example():
    reports = run("operations", MANY)
    for rank, report in enumerate(reports):
        assert report["mismatches"] == [], rank
        assert report["seed_all_gather"] == [[r] for r in range(MANY)]
        assert report["async_ok"] is True and report["kind"] == NCCL_KIND
    for rank, report in enumerate(run("many_gpus", MANY)):
        assert report == {"mismatches": [], "ring_ok": True, "batch_ok": True}, rank


@needs_gpus
def test_many_gpus_ddp_parameters_equal_nccl():
    for report in run("ddp_matches_nccl", MANY):
        assert report["differences"] == {"plain": 0.0, "fp16_hook": 0.0}
