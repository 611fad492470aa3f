"""CUDA tensors through ucxcoll on real GPUs, run by test_gpu.py:

    python gpu_checks.py SCENARIO RANK WORLD PORT WORKDIR

Rank r uses cuda:r. Each rank prints one line "RESULT <json>". Like the
other scenario scripts this never imports ucxcoll: the backend comes from
torch's autoload, as in a user's script.
"""

import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.int8,
          torch.uint8]


def report(**values) -> None:
    print("RESULT " + json.dumps(values), flush=True)


def init(rank: int, world: int, port: int, backend: str = "ucxcoll", **kwargs) -> None:
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120), **kwargs)


def gpu_backend():
    return dist.group.WORLD._get_backend(torch.device("cpu"))._gpu_backend


def rank_input(dtype, rank: int, count: int, device) -> torch.Tensor:
    """Small exact values (sums and products stay exact in every dtype)."""
    values = (torch.arange(count) % 2 + 1 + rank % 2).to(dtype)
    return values.to(device)


def operation_results(rank: int, world: int, group, device, dtype) -> dict:
    """Every collective on CUDA tensors of `dtype` over `group`, results to CPU."""
    count = 6 * world
    x = rank_input(dtype, rank, count, device)
    results = {}

    def reduced(op):
        t = x.clone()
        dist.all_reduce(t, op=op, group=group)
        return t

    results["all_reduce_sum"] = reduced(dist.ReduceOp.SUM)
    results["all_reduce_max"] = reduced(dist.ReduceOp.MAX)
    results["all_reduce_min"] = reduced(dist.ReduceOp.MIN)
    results["all_reduce_product"] = reduced(dist.ReduceOp.PRODUCT)
    if dtype.is_floating_point:
        results["all_reduce_avg"] = reduced(dist.ReduceOp.AVG)
        results["all_reduce_premul_sum"] = reduced(dist._make_nccl_premul_sum(2.0))
    t = x.clone() if rank == 0 else torch.zeros_like(x)
    dist.broadcast(t, src=0, group=group)
    results["broadcast"] = t
    t = x.clone()
    dist.reduce(t, dst=0, group=group)
    if rank == 0:
        results["reduce"] = t
    outputs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(outputs, x, group=group)
    results["all_gather"] = torch.cat(outputs)
    out = torch.empty(world * count, dtype=dtype, device=device)
    dist.all_gather_into_tensor(out, x, group=group)
    results["all_gather_into_tensor"] = out
    block = torch.empty(count // world, dtype=dtype, device=device)
    dist.reduce_scatter_tensor(block, x, group=group)
    results["reduce_scatter_tensor"] = block.clone()
    dist.reduce_scatter(block, list(x.chunk(world)), group=group)
    results["reduce_scatter"] = block.clone()
    exchanged = torch.empty_like(x)
    dist.all_to_all_single(exchanged, x, group=group)
    results["all_to_all_single"] = exchanged
    pieces = [torch.empty(count // world, dtype=dtype, device=device) for _ in range(world)]
    dist.all_to_all(pieces, [p.clone() for p in x.chunk(world)], group=group)
    results["all_to_all"] = torch.cat(pieces)
    gathered = [torch.empty_like(x) for _ in range(world)] if rank == 0 else None
    dist.gather(x, gathered, dst=0, group=group)
    if rank == 0:
        results["gather"] = torch.cat(gathered)
    piece = torch.empty(count // world, dtype=dtype, device=device)
    dist.scatter(piece, [p.clone() for p in x.chunk(world)] if rank == 0 else None, src=0, group=group)
    results["scatter"] = piece
    if device.type == "cuda":
        torch.cuda.synchronize()
    return {name: value.cpu() for name, value in results.items()}


def expected_results(rank: int, world: int, dtype) -> dict:
    """The same operations computed on the CPU from every rank's input."""
    count = 6 * world
    inputs = [rank_input(dtype, r, count, "cpu") for r in range(world)]
    stacked = torch.stack([i.double() for i in inputs])
    cast = lambda t: t.to(dtype)  # noqa: E731
    expected = {
        "all_reduce_sum": cast(stacked.sum(0)),
        "all_reduce_max": cast(stacked.max(0).values),
        "all_reduce_min": cast(stacked.min(0).values),
        "all_reduce_product": cast(stacked.prod(0)),
        "broadcast": inputs[0],
        "all_gather": torch.cat(inputs),
        "all_gather_into_tensor": torch.cat(inputs),
        "reduce_scatter_tensor": cast(stacked.sum(0)).chunk(world)[rank],
        "reduce_scatter": cast(stacked.sum(0)).chunk(world)[rank],
        "all_to_all_single": torch.cat([i.chunk(world)[rank] for i in inputs]),
        "all_to_all": torch.cat([i.chunk(world)[rank] for i in inputs]),
        "scatter": inputs[0].chunk(world)[rank],
    }
    if dtype.is_floating_point:
        expected["all_reduce_avg"] = cast(stacked.mean(0))
        expected["all_reduce_premul_sum"] = cast(2 * stacked.sum(0))
    if rank == 0:
        expected["reduce"] = cast(stacked.sum(0))
        expected["gather"] = torch.cat(inputs)
    return expected


def check_operations(rank: int, world: int, group, device) -> list:
    mismatches = []
    for dtype in DTYPES:
        got = operation_results(rank, world, group, device, dtype)
        want = expected_results(rank, world, dtype)
        if set(got) != set(want):
            mismatches.append(f"{dtype}: operations {sorted(got)} != {sorted(want)}")
        for name in sorted(set(got) & set(want)):
            if not torch.equal(got[name], want[name]):
                mismatches.append(f"{name} {dtype}: {got[name].tolist()} != {want[name].tolist()}")
    return mismatches


def train(model, group, steps: int = 3, hook=None):
    """A few DDP steps on cuda; the parameters afterwards (on the CPU)."""
    torch.manual_seed(0)
    device = next(model.parameters()).device
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index], process_group=group)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1 + dist.get_rank())
    for _ in range(steps):
        optimizer.zero_grad()
        data = torch.randn(16, 32, generator=generator).to(device)
        ddp(data).square().mean().backward()
        optimizer.step()
    torch.cuda.synchronize()
    return [p.detach().cpu() for p in ddp.module.parameters()]


def make_model(device):
    torch.manual_seed(42)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)


def operations(rank: int, world: int, port: int, workdir: str) -> None:
    """Every collective on CUDA tensors of several dtypes against values
    computed on the CPU; the NCCL side is made lazily, Work and Future
    behave as NCCL's; a call mixing CPU and CUDA tensors raises."""
    init(rank, world, port)
    before = gpu_backend() is None
    cpu = torch.ones(8)
    dist.all_reduce(cpu)  # CPU traffic does not make NCCL
    cuda_initialized_by_cpu_calls = torch.cuda.is_initialized()
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    mismatches = check_operations(rank, world, dist.group.WORLD, device)
    kind = type(gpu_backend()).__name__
    # async_op: Work.wait() orders the current stream; the Future's value is
    # the CUDA tensor.
    t = torch.full((1 << 20,), 1.0, device=device)
    work = dist.all_reduce(t, async_op=True)
    future = work.get_future()
    work.wait()
    value = future.wait()[0]
    async_ok = bool(torch.all(t == world).item()) and value.device == device
    mixed = None
    try:
        dist.all_gather([torch.empty(4) for _ in range(world)], torch.ones(4, device=device))
    except ValueError as error:
        mixed = str(error)
    # The seed's example: each rank gathers [rank] tensors on cuda:<rank>.
    seed_tensor = torch.tensor([rank], device=device)
    seed = [torch.empty_like(seed_tensor) for _ in range(world)]
    dist.all_gather(seed, seed_tensor)
    dist.barrier()
    report(before=before, cuda_initialized_by_cpu_calls=cuda_initialized_by_cpu_calls, mismatches=mismatches,
           kind=kind, async_ok=async_ok, mixed=mixed, seed_all_gather=[s.tolist() for s in seed],
           cpu_ok=bool(torch.all(cpu == world)))
    dist.destroy_process_group()


def eager_device_id(rank: int, world: int, port: int, workdir: str) -> None:
    """init_process_group(device_id=cuda:r) makes and connects NCCL at once;
    barrier() then runs on NCCL."""
    device = torch.device("cuda", rank)
    init(rank, world, port, device_id=device)
    made_at_init = gpu_backend() is not None
    dist.barrier()
    t = torch.ones(4, device=device)
    dist.all_reduce(t)
    report(made_at_init=made_at_init, kind=type(gpu_backend()).__name__, sum_ok=bool(torch.all(t == world)))
    dist.destroy_process_group()


def ddp_matches_nccl(rank: int, world: int, port: int, workdir: str) -> None:
    """DDP with device_ids on ucxcoll and on nccl, same seeds and data: the
    same parameters (plain all-reduce and the fp16 compression hook, whose
    .then() callback runs on the CUDA future)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    init(rank, world, port)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    nccl = dist.new_group(backend="nccl")
    differences = {}
    for variant, hook in (("plain", None), ("fp16_hook", default_hooks.fp16_compress_hook)):
        ours = train(make_model(device), dist.group.WORLD, hook=hook)
        reference = train(make_model(device), nccl, hook=hook)
        differences[variant] = max((a - b).abs().max().item() for a, b in zip(ours, reference))
    report(differences=differences)
    dist.destroy_process_group()


def many_gpus(rank: int, world: int, port: int, workdir: str) -> None:
    """More than one GPU: every collective against the expected values,
    point-to-point in a ring and in batch_isend_irecv, all on cuda:r."""
    init(rank, world, port)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    mismatches = check_operations(rank, world, dist.group.WORLD, device)
    right, left = (rank + 1) % world, (rank - 1) % world
    outgoing = torch.full((1000,), float(rank), device=device)
    incoming = torch.empty_like(outgoing)
    if rank % 2 == 0:
        dist.send(outgoing, right)
        dist.recv(incoming, left)
    else:
        dist.recv(incoming, left)
        dist.send(outgoing, right)
    ring_ok = bool(torch.all(incoming == left).item())
    incoming.zero_()
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, right), dist.P2POp(dist.irecv, incoming, left)])
    for work in works:
        work.wait()
    batch_ok = bool(torch.all(incoming == left).item())
    report(mismatches=mismatches, ring_ok=ring_ok, batch_ok=batch_ok)
    dist.destroy_process_group()


def operations_on_cpu(rank: int, world: int, port: int, workdir: str) -> None:
    """The checks above with CPU tensors (over UCX): shows, on any machine,
    that their expected values are right."""
    init(rank, world, port)
    report(mismatches=check_operations(rank, world, dist.group.WORLD, torch.device("cpu")),
           cuda_initialized=torch.cuda.is_initialized())
    dist.destroy_process_group()


SCENARIOS = {"operations": operations, "operations_on_cpu": operations_on_cpu, "eager_device_id": eager_device_id, "ddp_matches_nccl": ddp_matches_nccl,
             "many_gpus": many_gpus}

if __name__ == "__main__":
    name, rank, world, port, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    SCENARIOS[name](rank, world, port, workdir)
