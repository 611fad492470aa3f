"""Routing by device (device_routing.py), on any machine: CPU tensors over
UCX, CUDA tensors to the group's GPU backend (torch's ProcessGroupNCCL, here
a recording stand-in), mixed devices refused before anything moves."""


from harness import run_reporting_ranks

MIXED = "; the tensors of one call must all be on one device (CPU tensors go over UCX, CUDA tensors to NCCL)"


def run(name: str, world: int = 2):
    return run_reporting_ranks("device_routing.py", name, world, timeout=180)


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


def test_without_a_gpu_the_first_cuda_call_says_why_nccl_is_missing():
    for report in run("real_factory_without_gpu"):
        assert report["error"] == [
            "RuntimeError",
            'ucxcoll: cannot create the NCCL backend that CUDA tensors of group "0" go to: ValueError: '
            "ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
        ]
        assert report["gpu_backend"] is False and report["cpu_ok"] is True
        # pg_options=ProcessGroupNCCL.Options() is kept for the group's NCCL
        # side, and forgotten when a later group of that name has none.
        assert report["nccl_options_kept"] == ["0"]
        assert report["nccl_options_after_reinit"] == []


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
