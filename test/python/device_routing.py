"""How ucxcoll routes a call by its tensors' device, tested without a GPU.

    python device_routing.py SCENARIO RANK WORLD PORT WORKDIR

A group's CUDA tensors go to torch's ProcessGroupNCCL, which the package
makes with ucxcoll._registration._make_gpu_backend. Without a GPU, these
scenarios make CUDA tensors as torch's FakeTensors (cuda:0, cuda:1, ... with
no storage and no CUDA initialisation) and, in most scenarios, swap the
factory for one that returns a recording backend: the package's one test
seam. Everything between torch's call and the GPU backend is then the real
code path: device checks, lazy creation, coalescing, barrier choice, split,
shutdown. Fake tensors would take torch's dispatcher into fake-tensor
handling, so calls go to the group's backend object directly (the
dispatcher's choice of backend by device is torch's own).

Each rank prints one line "RESULT <json>" that test_device_routing.py reads.
"""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d
from torch._subclasses.fake_tensor import FakeTensorMode

import ucxcoll._registration as registration

# The calls the recording backend answers, by the names torch's Python
# Backend trampoline dispatches to.
RECORDED = [
    "allreduce",
    "allreduce_coalesced",
    "broadcast",
    "reduce",
    "allgather",
    "all_gather_single",
    "allgather_coalesced",
    "all_gather_single_coalesced",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "alltoall",
    "all_to_all_single",
    "send",
    "recv",
    "recv_anysource",
    "barrier",
    "start_coalescing",
    "end_coalescing",
    "eager_connect_single_device",
    "set_timeout",
    "_set_group_uid",
    "shutdown",
    "abort",
]


def report(**values) -> None:
    import json

    print("RESULT " + json.dumps(values), flush=True)


class RecordingBackend(c10d.Backend):
    """Stands in for ProcessGroupNCCL: notes each call, moves no data."""

    def __init__(self, rank: int, size: int, log: list):
        super().__init__(rank, size)
        self.log = log

    def note(self, name: str, args) -> c10d.Work:
        tensors = [a for a in _flatten(args) if isinstance(a, torch.Tensor)]
        self.log.append({"call": name, "devices": sorted({str(t.device) for t in tensors})})
        return c10d.FakeWork()


for _name in RECORDED:
    setattr(RecordingBackend, _name, (lambda name: lambda self, *args: self.note(name, args))(_name))


def _flatten(values):
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _flatten(value)
        else:
            yield value


_FAKE_MODE = FakeTensorMode()


def cuda(*shape, index: int = 0) -> torch.Tensor:
    """A CUDA tensor without a GPU: a FakeTensor on cuda:`index`."""
    with _FAKE_MODE:
        return torch.empty(*shape, device=f"cuda:{index}")


class Seam:
    """Installs a recording factory for the GPU backend; keeps what it made."""

    def __init__(self):
        self.made = []  # one entry per factory call: its arguments
        self.backends = []
        self.log = []
        registration._make_gpu_backend = self.make

    def make(self, store, rank, size, timeout_ms, group_name, global_ranks):
        self.made.append({"rank": rank, "size": size, "timeout_ms": timeout_ms, "group": group_name,
                          "global_ranks": list(global_ranks), "store": type(store).__name__})
        backend = RecordingBackend(rank, size, self.log)
        self.backends.append(backend)  # C++ holds a reference too; keep the Python object
        return backend

    def calls(self):
        return [entry["call"] for entry in self.log]


def init(rank: int, world: int, port: int, **kwargs) -> None:
    dist.init_process_group("ucxcoll", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60), **kwargs)


def cpu_backend(group=None):
    group = group or dist.group.WORLD
    return group._get_backend(torch.device("cpu"))


def error_of(call) -> list | None:
    """[exception type name, message] of `call`, or None if it returned."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the type is what is reported
        return [type(error).__name__, str(error)]
    return None


def cpu_sum_ok(world: int, group=None) -> bool:
    tensor = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(tensor, group=group)
    return bool(torch.all(tensor == world * (world + 1) / 2))


def every_operation(rank: int, world: int, port: int, workdir: str) -> None:
    """Each operation with CUDA tensors reaches the GPU backend, with
    the tensors given; the GPU backend is made once, on the first such call,
    and never for CPU calls."""
    seam = Seam()
    init(rank, world, port)
    backend = cpu_backend()
    cpu_ok_before = cpu_sum_ok(world)
    made_before_gpu_call = len(seam.made)
    gpu_backend_before = backend._gpu_backend is not None

    x, out = cuda(4), cuda(4 * world)
    calls = {
        "allreduce": lambda: backend.allreduce([x], c10d.AllreduceOptions()),
        "allreduce_coalesced": lambda: backend.allreduce_coalesced([x, cuda(2)], c10d.AllreduceCoalescedOptions()),
        "broadcast": lambda: backend.broadcast([x], c10d.BroadcastOptions()),
        "reduce": lambda: backend.reduce([x], c10d.ReduceOptions()),
        "allgather": lambda: backend.allgather([[cuda(4) for _ in range(world)]], [x], c10d.AllgatherOptions()),
        "_allgather_base": lambda: backend._allgather_base(out, x, c10d.AllgatherOptions()),
        "all_gather_single": lambda: backend.all_gather_single(out, x, c10d.AllgatherOptions()),
        "allgather_coalesced": lambda: backend.allgather_coalesced([[cuda(4) for _ in range(world)]], [x],
                                                                   c10d.AllgatherOptions()),
        "all_gather_single_coalesced": lambda: backend.all_gather_single_coalesced(
            [out], [x], c10d.AllgatherOptions()),
        "gather": lambda: backend.gather([[cuda(4) for _ in range(world)]], [x], c10d.GatherOptions()),
        "scatter": lambda: backend.scatter([x], [[cuda(4) for _ in range(world)]], c10d.ScatterOptions()),
        "reduce_scatter": lambda: backend.reduce_scatter([x], [[cuda(4) for _ in range(world)]],
                                                         c10d.ReduceScatterOptions()),
        "_reduce_scatter_base": lambda: backend._reduce_scatter_base(x, out, c10d.ReduceScatterOptions()),
        "reduce_scatter_single": lambda: backend.reduce_scatter_single(x, out, c10d.ReduceScatterOptions()),
        "reduce_scatter_single_coalesced": lambda: backend.reduce_scatter_single_coalesced(
            [x], [out], c10d.ReduceScatterOptions()),
        "alltoall": lambda: backend.alltoall([cuda(4) for _ in range(world)], [cuda(4) for _ in range(world)],
                                             c10d.AllToAllOptions()),
        "alltoall_base": lambda: backend.alltoall_base(out, out, [], [], c10d.AllToAllOptions()),
        "all_to_all_single": lambda: backend.all_to_all_single(out, out, [], [], c10d.AllToAllOptions()),
        "send": lambda: backend.send([x], (rank + 1) % world, 3),
        "recv": lambda: backend.recv([x], (rank + 1) % world, 3),
        "recv_anysource": lambda: backend.recv_anysource([x], 3),
    }
    outcomes = {}
    for name, call in calls.items():
        before = len(seam.log)
        error = error_of(call)
        outcomes[name] = {"error": error, "reached": [entry for entry in seam.log[before:]]}
    report(cuda_initialized=torch.cuda.is_initialized(), cpu_ok_before=cpu_ok_before, made_before_gpu_call=made_before_gpu_call,
           gpu_backend_before=gpu_backend_before, made=seam.made,
           gpu_backend_is_made=backend._gpu_backend is seam.backends[0] if seam.backends else False,
           outcomes=outcomes, cpu_ok_after=cpu_sum_ok(world))
    dist.destroy_process_group()


def mixed_devices(rank: int, world: int, port: int, workdir: str) -> None:
    """A call whose tensors sit on two devices raises before anything moves,
    on either side, and both sides work afterwards."""
    seam = Seam()
    init(rank, world, port)
    backend = cpu_backend()
    cpu, gpu = torch.ones(4), cuda(4)
    errors = {
        "all_reduce": error_of(lambda: backend.allreduce([cpu, gpu], c10d.AllreduceOptions())),
        "all_gather": error_of(lambda: backend.allgather([[gpu] * world], [cpu], c10d.AllgatherOptions())),
        "all_gather_into_tensor": error_of(
            lambda: backend._allgather_base(torch.empty(4 * world), gpu, c10d.AllgatherOptions())),
        "scatter": error_of(lambda: backend.scatter([cpu], [[gpu] * world], c10d.ScatterOptions())),
        "all_to_all_single": error_of(
            lambda: backend.alltoall_base(torch.empty(4 * world), cuda(4 * world), [], [],
                                          c10d.AllToAllOptions())),
        "two_gpus": error_of(lambda: backend.allreduce([cuda(4, index=0), cuda(4, index=1)],
                                                       c10d.AllreduceOptions())),
    }
    made_after_errors = len(seam.made)
    log_after_errors = seam.calls()
    cpu_ok = cpu_sum_ok(world)
    gpu_error = error_of(lambda: backend.allreduce([gpu], c10d.AllreduceOptions()))
    report(errors=errors, made_after_errors=made_after_errors, log_after_errors=log_after_errors, cpu_ok=cpu_ok,
           gpu_error=gpu_error, log=seam.calls())
    dist.destroy_process_group()


def coalescing(rank: int, world: int, port: int, workdir: str) -> None:
    """A coalescing block goes to the backend of its first call; a call on
    the other device inside it raises; CPU blocks are unchanged."""
    seam = Seam()
    init(rank, world, port)
    backend = cpu_backend()
    gpu = cuda(4)
    backend._start_coalescing()
    backend.allreduce([gpu], c10d.AllreduceOptions())
    backend.allreduce([gpu], c10d.AllreduceOptions())
    backend._end_coalescing()
    gpu_block = seam.calls()

    backend._start_coalescing()
    backend.allreduce([gpu], c10d.AllreduceOptions())
    cpu_in_gpu_block = error_of(lambda: backend.allreduce([torch.ones(4)], c10d.AllreduceOptions()))
    backend._end_coalescing()

    # A CPU block through torch's own API, then a GPU call inside a CPU block.
    tensors = [torch.full((8,), float(rank + 1)) for _ in range(3)]
    with dist._coalescing_manager(device=torch.device("cpu")):
        for tensor in tensors:
            dist.all_reduce(tensor)
    cpu_block_ok = all(bool(torch.all(t == world * (world + 1) / 2)) for t in tensors)
    backend._start_coalescing()
    work = backend.allreduce([torch.ones(4)], c10d.AllreduceOptions())
    gpu_in_cpu_block = error_of(lambda: backend.allreduce([gpu], c10d.AllreduceOptions()))
    backend._end_coalescing().wait()
    work.wait()
    empty_block = error_of(lambda: (backend._start_coalescing(), backend._end_coalescing().wait()))
    report(gpu_block=gpu_block, cpu_in_gpu_block=cpu_in_gpu_block, cpu_block_ok=cpu_block_ok,
           gpu_in_cpu_block=gpu_in_cpu_block, empty_block=empty_block, log=seam.calls(),
           cpu_ok=cpu_sum_ok(world))
    dist.destroy_process_group()


def barrier_and_settings(rank: int, world: int, port: int, workdir: str) -> None:
    """barrier: UCX unless device ids are given or a GPU device is bound;
    eager connect, timeout, group name and shutdown reach the GPU side."""
    seam = Seam()
    init(rank, world, port)
    backend = cpu_backend()
    dist.barrier()
    backend.barrier(c10d.BarrierOptions())
    plain = {"made": len(seam.made), "log": seam.calls()}
    backend.eager_connect_single_device(torch.device("cpu"))
    eager_cpu = {"made": len(seam.made), "log": seam.calls()}

    options = c10d.BarrierOptions()
    options.device_ids = [0]
    backend.barrier(options)
    with_device_ids = seam.calls()

    backend.bound_device_id = torch.device("cuda:0")
    backend.barrier(c10d.BarrierOptions())
    with_bound_device = seam.calls()
    backend.bound_device_id = None

    backend.eager_connect_single_device(torch.device("cuda:0"))
    backend.set_timeout(timedelta(seconds=42))
    backend._set_group_uid("renamed")
    settings = seam.calls()
    dist.destroy_process_group()
    report(plain=plain, eager_cpu=eager_cpu, with_device_ids=with_device_ids, with_bound_device=with_bound_device,
           settings=settings, after_destroy=seam.calls(), made=seam.made)


def subgroups(rank: int, world: int, port: int, workdir: str) -> None:
    """New groups and splits get their own GPU backend, made on their first
    GPU call with their own ranks and name."""
    seam = Seam()
    init(rank, world, port)
    gpu = cuda(4)
    pair = dist.new_group([0, 1], backend="ucxcoll")
    made = {}
    if rank in (0, 1):
        sub = cpu_backend(pair)
        made["new_group_before"] = len(seam.made)
        sub.allreduce([gpu], c10d.AllreduceOptions())
        made["new_group"] = seam.made[-1]
        made["new_group_cpu_ok"] = cpu_sum_ok(2, pair)
    parent = cpu_backend()
    child = parent.split(dist.distributed_c10d._get_default_store(), [world - 1, 0], None) if world > 1 else None
    if child is not None:
        made["split_before"] = child._gpu_backend is not None
        child.allreduce([gpu], c10d.AllreduceOptions())
        made["split"] = seam.made[-1]
    dist.barrier()
    report(made=made, split_member=child is not None)
    dist.destroy_process_group()


def real_factory_without_gpu(rank: int, world: int, port: int, workdir: str) -> None:
    """The package's own factory, on a machine without a GPU: the first GPU
    call says that NCCL could not be made and why, and the group goes on."""
    options = dist.ProcessGroupNCCL.Options() if dist.is_nccl_available() else None
    init(rank, world, port, **({"pg_options": options} if options is not None else {}))
    backend = cpu_backend()
    error = error_of(lambda: backend.allreduce([cuda(4)], c10d.AllreduceOptions()))
    kept = nccl_options_kept()
    gpu_made, cpu_ok = backend._gpu_backend is not None, cpu_sum_ok(world)
    dist.destroy_process_group()
    # A new default group (same name, "0") without pg_options must not
    # inherit the earlier group's.
    dist.init_process_group("ucxcoll", init_method=f"file://{workdir}/store2", rank=rank, world_size=world)
    kept_after_reinit = nccl_options_kept()
    # A collective before leaving: a rank that exits while its peer still
    # connects to it would fail the peer's setup (a dead peer).
    cpu_ok_after_reinit = cpu_sum_ok(world)
    dist.destroy_process_group()
    report(error=error, nccl_options_kept=kept, gpu_backend=gpu_made, cpu_ok=cpu_ok and cpu_ok_after_reinit,
           nccl_options_after_reinit=kept_after_reinit)


def nccl_options_kept() -> list:
    """The groups whose pg_options the package keeps for their NCCL side."""
    return [name for name, creation in registration._creation_by_group.items() if creation.nccl_options is not None]


def torch_nccl_creator(rank: int, world: int, port: int, workdir: str) -> None:
    """Without the seam: the package's own factory makes what backend="nccl"
    makes on this torch. torch's two creators are replaced by recorders
    before "nccl" is first registered (lazily, on first use), so the
    registry holds whichever one TORCH_DIST_USE_NCCL2 picks; the report
    says which one the first CUDA call reached, and with what."""
    c10d_module = dist.distributed_c10d
    options = dist.ProcessGroupNCCL.Options()
    calls, backends, log = [], [], []

    def recorder(creator: str):
        def create(opts, backend_options):
            calls.append({"creator": creator, "store": type(opts.store).__name__, "rank": opts.group_rank,
                          "size": opts.group_size, "timeout_s": opts.timeout.total_seconds(), "group": opts.group_id,
                          "global_ranks": list(opts.global_ranks_in_group),
                          "process_group_is_the_group": opts.process_group is dist.group.WORLD,
                          "enable_reconfigure": opts.enable_reconfigure, "split_from": opts.split_from is not None,
                          "backend_options_are_the_users": backend_options is options})
            backends.append(RecordingBackend(opts.group_rank, opts.group_size, log))
            return backends[-1]
        create.__name__ = creator
        return create

    c10d_module._create_nccl2_process_group = recorder("_create_nccl2_process_group")
    c10d_module._create_nccl_process_group = recorder("_create_nccl_process_group")
    init(rank, world, port, pg_options=options)
    backend = cpu_backend()
    made_before = len(calls)
    error = error_of(lambda: backend.allreduce([cuda(4)], c10d.AllreduceOptions()))
    report(made_before=made_before, calls=calls, error=error, reached=[entry["call"] for entry in log],
           gpu_backend_is_made=bool(backends) and backend._gpu_backend is backends[0],
           registered_creator=dist.Backend._plugins["NCCL"].creator_fn.__name__, cpu_ok=cpu_sum_ok(world))
    dist.destroy_process_group()


def windows(rank: int, world: int, port: int, workdir: str) -> None:
    """Windows are the CUDA side's: a window over a CUDA tensor reaches the
    GPU backend (made for it), one over a CPU tensor is refused, and
    supports_window follows the GPU backend once it exists."""
    seam = Seam()
    window_calls = []

    def new_window(self, tensor=None):
        window_calls.append(None if tensor is None else str(tensor.device))
        # (c10d.Window cannot be made from Python: the stand-in answers with
        # an error that the router hands back unchanged.)
        raise RuntimeError("the stand-in made no window")

    RecordingBackend.supports_window = True
    RecordingBackend.new_window = new_window
    init(rank, world, port)
    backend = cpu_backend()
    before = {"supports_window": backend.supports_window,
              "no_tensor": error_of(lambda: backend.new_window()),
              "cpu_tensor": error_of(lambda: backend.new_window(torch.ones(4))),
              "made": len(seam.made)}
    cuda_tensor = error_of(lambda: backend.new_window(cuda(4)))
    after = {"supports_window": backend.supports_window, "no_tensor": error_of(lambda: backend.new_window()),
             "made": len(seam.made)}
    report(before=before, cuda_tensor=cuda_tensor, after=after, window_calls=window_calls, cpu_ok=cpu_sum_ok(world))
    dist.destroy_process_group()


def unsupported_device(rank: int, world: int, port: int, workdir: str) -> None:
    """Without the seam: tensors on a device that is neither CPU nor CUDA."""
    init(rank, world, port)
    backend = cpu_backend()
    report(error=error_of(lambda: backend.allreduce([torch.empty(4, device="meta")], c10d.AllreduceOptions())),
           cpu_ok=cpu_sum_ok(world))
    dist.destroy_process_group()


def bound_cpu_device(rank: int, world: int, port: int, workdir: str) -> None:
    """init_process_group(device_id=cpu:0) binds the group; torch then asks
    ranks outside a new group to take part in a split of the parent
    (perform_nocolor_split). Subgroups still work."""
    seam = Seam()
    init(rank, world, port, device_id=torch.device("cpu:0"))
    backend_type = type(cpu_backend())
    nocolor_splits = []
    original = backend_type.perform_nocolor_split
    backend_type.perform_nocolor_split = lambda self, device: (nocolor_splits.append(str(device)),
                                                               original(self, device))[1]
    pair = dist.new_group([0, 1], backend="ucxcoll")
    ok = cpu_sum_ok(2, pair) if rank in (0, 1) else None
    report(pair_ok=ok, world_ok=cpu_sum_ok(world), made=len(seam.made), nocolor_splits=nocolor_splits,
           bound=str(cpu_backend().bound_device_id))
    dist.destroy_process_group()


SCENARIOS = {name: fn for name, fn in globals().items() if callable(fn) and fn.__doc__ and name in {
    "every_operation", "mixed_devices", "coalescing", "barrier_and_settings", "subgroups",
    "real_factory_without_gpu", "torch_nccl_creator", "windows", "unsupported_device", "bound_cpu_device"}}

if __name__ == "__main__":
    name, rank, world, port, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    SCENARIOS[name](rank, world, port, workdir)
