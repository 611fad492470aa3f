"""Routing by device (device_routing.py), on any machine: CPU tensors over
UCX, CUDA tensors to the group's GPU backend (torch's ProcessGroupNCCL, here
a recording stand-in), mixed devices refused before anything moves."""

import pytest
import torch
from harness import run_reporting_ranks

MIXED = "; the tensors of one call must all be on one device (CPU tensors go over UCX, CUDA tensors to NCCL)"


def run(name: str, world: int = 2, **env):
    return run_reporting_ranks("device_routing.py", name, world, timeout=180, **env)


def test_every_operation_on_cuda_tensors_reaches_the_gpu_backend_made_on_first_use():
    for rank, report in enumerate(run("every_operation")):
        assert report["cpu_ok_before"] and report["cpu_ok_after"], report
        # Lazy: CPU collectives made nothing; the first CUDA call made it, once.
        assert report["made_before_gpu_call"] == 0 and report["gpu_backend_before"] is False
        assert report["made"] == [
            {"rank": rank, "size": 2, "timeout_ms": 60000, "group": "0", "global_ranks": [], "store": "PrefixStore"}
        ]
        assert report["gpu_backend_is_made"] is True
        assert report["cuda_initialized"] is False
        expected = {
            "allreduce": "allreduce",
            "allreduce_coalesced": "allreduce_coalesced",
            "broadcast": "broadcast",
            "reduce": "reduce",
            "allgather": "allgather",
            # torch 2.15's Backend forwards the old names to the new ones.
            "_allgather_base": "all_gather_single",
            "all_gather_single": "all_gather_single",
            "allgather_coalesced": "allgather_coalesced",
            "all_gather_single_coalesced": "all_gather_single_coalesced",
            "gather": "gather",
            "scatter": "scatter",
            "reduce_scatter": "reduce_scatter",
            "_reduce_scatter_base": "reduce_scatter_single",
            "reduce_scatter_single": "reduce_scatter_single",
            "reduce_scatter_single_coalesced": "reduce_scatter_single_coalesced",
            "alltoall": "alltoall",
            "alltoall_base": "all_to_all_single",
            "all_to_all_single": "all_to_all_single",
            "send": "send",
            "recv": "recv",
            "recv_anysource": "recv_anysource",
        }
        assert set(report["outcomes"]) == set(expected)
        for op, outcome in report["outcomes"].items():
            assert outcome["error"] is None, (op, outcome)
            calls = [entry for entry in outcome["reached"] if entry["call"] != "_set_group_uid"]
            assert calls == [{"call": expected[op], "devices": ["cuda:0"]}], (op, outcome)
        # The group's name reached the GPU backend when it was made.
        assert report["outcomes"]["allreduce"]["reached"][0] == {"call": "_set_group_uid", "devices": []}


def test_mixed_devices_raise_before_anything_is_sent():
    for report in run("mixed_devices"):
        assert report["errors"] == {
            "all_reduce": ["ValueError", "ucxcoll: all_reduce got tensors on cpu and on cuda:0" + MIXED],
            "all_gather": ["ValueError", "ucxcoll: all_gather got tensors on cuda:0 and on cpu" + MIXED],
            "all_gather_into_tensor": ["ValueError",
                                       "ucxcoll: all_gather_into_tensor got tensors on cpu and on cuda:0" + MIXED],
            "scatter": ["ValueError", "ucxcoll: scatter got tensors on cpu and on cuda:0" + MIXED],
            "all_to_all_single": ["ValueError",
                                  "ucxcoll: all_to_all_single got tensors on cpu and on cuda:0" + MIXED],
            "two_gpus": ["ValueError", "ucxcoll: all_reduce got tensors on cuda:0 and on cuda:1" + MIXED],
        }
        # Nothing reached either side: no GPU backend was even made, and the
        # CPU side still agrees with its peer.
        assert report["made_after_errors"] == 0 and report["log_after_errors"] == []
        assert report["cpu_ok"] is True
        assert report["gpu_error"] is None and report["log"] == ["_set_group_uid", "allreduce"]


def test_coalescing_block_goes_to_one_device():
    for report in run("coalescing"):
        assert report["gpu_block"] == ["_set_group_uid", "start_coalescing", "allreduce", "allreduce", "end_coalescing"]
        assert report["cpu_in_gpu_block"] == [
            "ValueError",
            "ucxcoll: all_reduce on CPU tensors inside a coalescing block of CUDA calls; a block (coalescing "
            "manager, batch_isend_irecv) takes the tensors of one device",
        ]
        assert report["gpu_in_cpu_block"] == [
            "ValueError",
            "ucxcoll: all_reduce on CUDA tensors inside a coalescing block of CPU calls; a block (coalescing "
            "manager, batch_isend_irecv) takes the tensors of one device",
        ]
        assert report["cpu_block_ok"] is True and report["empty_block"] is None and report["cpu_ok"] is True
        # The refused calls sent nothing to the GPU side.
        assert report["log"] == report["gpu_block"] + ["start_coalescing", "allreduce", "end_coalescing"]


def test_barrier_uses_nccl_only_with_device_ids_or_a_bound_cuda_device():
    for rank, report in enumerate(run("barrier_and_settings")):
        # dist.barrier() and a plain barrier: UCX, and no NCCL made; an eager
        # connect for the CPU device makes none either.
        assert report["plain"] == {"made": 0, "log": []}
        assert report["eager_cpu"] == {"made": 0, "log": []}
        assert report["with_device_ids"] == ["_set_group_uid", "barrier"]
        assert report["with_bound_device"] == ["_set_group_uid", "barrier", "barrier"]
        assert report["settings"] == report["with_bound_device"] + [
            "eager_connect_single_device", "set_timeout", "_set_group_uid"]
        assert report["after_destroy"] == report["settings"] + ["shutdown"]
        assert len(report["made"]) == 1 and report["made"][0]["rank"] == rank


def test_subgroups_and_splits_make_their_own_gpu_backend():
    reports = run("subgroups", world=3)
    for rank in (0, 1):
        made = reports[rank]["made"]
        assert made["new_group_before"] == 0 and made["new_group_cpu_ok"] is True
        assert made["new_group"]["rank"] == rank and made["new_group"]["size"] == 2
        assert made["new_group"]["global_ranks"] == [0, 1] and made["new_group"]["group"] == "1"
    # split([2, 0]): rank 2 becomes rank 0 of the child, rank 0 rank 1.
    assert reports[1]["split_member"] is False
    for rank, child_rank in ((2, 0), (0, 1)):
        made = reports[rank]["made"]
        assert made["split_before"] is False
        assert made["split"] == {"rank": child_rank, "size": 2, "timeout_ms": 60000, "group": "0:split",
                                 "global_ranks": [2, 0], "store": "PrefixStore"}


# What torch's own backend="nccl" raises on a machine without a GPU, by
# TORCH_DIST_USE_NCCL2: torch 2.15's default ProcessGroupNCCL2 looks for a
# device first; the legacy ProcessGroupNCCL refuses in its constructor.
NO_GPU_ERROR = {
    "1": "RuntimeError: nccl2 requires at least one CUDA device",
    "0": "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
}


@pytest.mark.parametrize("use_nccl2", ["1", "0"])
def test_without_a_gpu_the_first_cuda_call_says_why_nccl_is_missing(use_nccl2):
    for report in run("real_factory_without_gpu", TORCH_DIST_USE_NCCL2=use_nccl2):
        assert report["error"] == [
            "RuntimeError",
            'ucxcoll: cannot create the NCCL backend that CUDA tensors of group "0" go to: ' + NO_GPU_ERROR[use_nccl2],
        ]
        assert report["gpu_backend"] is False and report["cpu_ok"] is True
        # pg_options=ProcessGroupNCCL.Options() is kept for the group's NCCL
        # side, and forgotten when a later group of that name has none.
        assert report["nccl_options_kept"] == ["0"]
        assert report["nccl_options_after_reinit"] == []


@pytest.mark.parametrize("use_nccl2, creator", [("1", "_create_nccl2_process_group"),
                                                 ("0", "_create_nccl_process_group")])
def test_the_cuda_side_is_made_by_what_backend_nccl_resolves_to(use_nccl2, creator):
    for rank, report in enumerate(run("torch_nccl_creator", TORCH_DIST_USE_NCCL2=use_nccl2)):
        assert report["registered_creator"] == creator
        assert report["made_before"] == 0 and report["error"] is None and report["cpu_ok"] is True
        # The fields torch fills for backend="nccl", the user's pg_options
        # object itself, and the group's ProcessGroup (NCCL2 binds its device).
        assert report["calls"] == [{
            "creator": creator, "store": "PrefixStore", "rank": rank, "size": 2, "timeout_s": 60.0, "group": "0",
            "global_ranks": [], "process_group_is_the_group": True, "enable_reconfigure": False,
            "split_from": False, "backend_options_are_the_users": True,
        }]
        # The router hands it the group's uid, as torch does for a backend it makes.
        assert report["reached"] == ["_set_group_uid", "allreduce"] and report["gpu_backend_is_made"] is True


@pytest.mark.skipif(not hasattr(torch._C._distributed_c10d.Backend, "new_window"),
                    reason="this torch has no windows (new_window came with torch 2.15)")
def test_windows_over_cuda_tensors_go_to_the_gpu_backend_and_cpu_ones_are_refused():
    for report in run("windows"):
        assert report["before"] == {
            "supports_window": False,
            "no_tensor": ["NotImplementedError",
                          "ucxcoll: new_window() without a tensor on a group whose CUDA side does not exist yet; "
                          "pass a CUDA tensor, or create the group with init_process_group(device_id=cuda:N)"],
            "cpu_tensor": ["NotImplementedError",
                           "ucxcoll: new_window got a tensor on cpu; windows (one-sided operations) are served for "
                           "CUDA tensors, by the group's NCCL backend"],
            "made": 0,
        }
        assert report["cuda_tensor"] == ["RuntimeError", "the stand-in made no window"]
        assert report["after"] == {"supports_window": True,
                                   "no_tensor": ["RuntimeError", "the stand-in made no window"], "made": 1}
        assert report["window_calls"] == ["cuda:0", None] and report["cpu_ok"] is True


def test_tensors_on_another_device_type_are_refused():
    for report in run("unsupported_device"):
        assert report["error"] == [
            "NotImplementedError",
            "ucxcoll: all_reduce got tensors on meta; ucxcoll serves CPU tensors (over UCX) and CUDA tensors "
            "(over NCCL)",
        ]
        assert report["cpu_ok"] is True


def test_bound_device_subgroup_non_members_take_part_in_torchs_split_protocol():
    reports = run("bound_cpu_device", world=3)
    assert [r["pair_ok"] for r in reports] == [True, True, None]
    assert all(r["world_ok"] and r["made"] == 0 and r["bound"] == "cpu:0" for r in reports)
    # torch calls perform_nocolor_split on the rank outside the new group.
    assert [r["nocolor_splits"] for r in reports] == [[], [], ["cpu:0"]]
