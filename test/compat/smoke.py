"""Smoke test of a ucxcoll build against another torch than the pinned one
(scripts/dev.sh compat): run as 2 ranks under torchrun; every operation is
compared with gloo on the same inputs, and the script exits non-zero on the
first difference.

    python -m torch.distributed.run --nproc-per-node 2 test/compat/smoke.py
"""

import sys

import torch
import torch.distributed as dist

import ucxcoll  # registers the backend (no autoload entry point here)


def same(ours: torch.Tensor, reference: torch.Tensor, what: str) -> None:
    if not torch.equal(ours, reference):
        raise AssertionError(f"{what}: ucxcoll and gloo differ")


def main() -> None:
    dist.init_process_group("ucxcoll")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    generator = torch.Generator().manual_seed(rank)

    def data(count: int) -> torch.Tensor:
        # Integer-valued floats: every summation order gives the same result.
        return torch.randint(0, 1000, (count,), generator=generator).float()

    # Small, above the small-message limit, and staged through shared memory.
    for count in (7, 100_000, (9 << 20) // 4 + 1):
        tensor = data(count)
        for name, run in (
            ("all_reduce", lambda t, g: dist.all_reduce(t, group=g)),
            ("reduce", lambda t, g: dist.reduce(t, dst=world - 1, group=g)),
            ("broadcast", lambda t, g: dist.broadcast(t, src=1 % world, group=g)),
        ):
            ours, reference = tensor.clone(), tensor.clone()
            run(ours, None)
            run(reference, gloo)
            if name != "reduce" or rank == world - 1:  # gloo leaves partial sums on non-roots
                same(ours, reference, f"{name} of {count}")

        gathered = [torch.empty(count * world), torch.empty(count * world)]
        dist.all_gather_into_tensor(gathered[0], tensor)
        dist.all_gather_into_tensor(gathered[1], tensor, group=gloo)
        same(gathered[0], gathered[1], f"all_gather_into_tensor of {count}")

        block = count - count % world or world
        inputs = data(block)
        outputs = [torch.empty(block // world), torch.empty(block // world)]
        dist.reduce_scatter_tensor(outputs[0], inputs)
        dist.reduce_scatter_tensor(outputs[1], inputs, group=gloo)
        same(outputs[0], outputs[1], f"reduce_scatter_tensor of {block}")
        exchanged = [torch.empty(block), torch.empty(block)]
        dist.all_to_all_single(exchanged[0], inputs)
        dist.all_to_all_single(exchanged[1], inputs, group=gloo)
        same(exchanged[0], exchanged[1], f"all_to_all_single of {block}")

        pieces = [data(count) for _ in range(world)] if rank == 0 else None
        scattered = [torch.empty(count), torch.empty(count)]
        dist.scatter(scattered[0], pieces, src=0)
        dist.scatter(scattered[1], pieces, src=0, group=gloo)
        same(scattered[0], scattered[1], f"scatter of {count}")

    # Point-to-point around the ring.
    message = data(1000)
    received = torch.empty(1000)
    peer_out, peer_in = (rank + 1) % world, (rank - 1) % world
    works = [dist.isend(message, peer_out), dist.irecv(received, peer_in)]
    for work in works:
        work.wait()
    expected = torch.empty(1000)
    works = [dist.isend(message, peer_out, group=gloo), dist.irecv(expected, peer_in, group=gloo)]
    for work in works:
        work.wait()
    same(received, expected, "isend/irecv")

    # A few DDP steps: the same parameters as under gloo.
    results = []
    for group in (None, gloo):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(3):
            torch.manual_seed(100 + 10 * step + rank)
            loss = ddp(torch.randn(8, 16)).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    if not torch.allclose(results[0], results[1], rtol=1e-6, atol=1e-7):
        raise AssertionError("DDP parameters differ from gloo's")

    # A size mismatch ends in DistBackendError, not a hang or wrong data.
    # (On a group of its own: a group in which ranks disagreed is failed.)
    doomed = dist.new_group(backend="ucxcoll")
    mismatched = torch.ones(8 + rank)
    try:
        dist.all_reduce(mismatched, group=doomed)
    except dist.DistBackendError as error:
        if "disagree" not in str(error):
            raise
    else:
        if world > 1:
            raise AssertionError("all_reduce of different sizes did not raise")

    nccl = check_nccl_creator()
    if rank == 0:
        print(f"compat smoke test passed: torch {torch.__version__}, ucxcoll {ucxcoll.__version__}, "
              f"UCX {ucxcoll.ucx_version()}, {world} ranks; CUDA tensors would go to {nccl}", flush=True)
    dist.destroy_process_group()


def check_nccl_creator() -> str:
    """The group's CUDA side is what backend="nccl" makes on this torch:
    torch < 2.15 makes ProcessGroupNCCL itself (no registry entry), 2.15
    registers a creator. Checked without a GPU: torch's ProcessGroupNCCL
    (or the creator) is replaced by a recorder for one factory call."""
    from ucxcoll import _registration as registration

    if not dist.is_nccl_available():
        return "nothing (this torch has no NCCL)"
    creator = registration._torch_nccl_creator()
    version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if (creator is None) != (version < (2, 15)):
        raise AssertionError(f"torch {torch.__version__}: registered creator for 'nccl' is {creator}")
    made = []
    if creator is None:
        real = dist.ProcessGroupNCCL

        class Recorder:
            Options = real.Options

            def __init__(self, store, rank, size, options):
                made.append(("ProcessGroupNCCL", type(store).__name__, rank, size, options.group_name))

        dist.ProcessGroupNCCL = Recorder
        try:
            registration._make_gpu_backend(dist.HashStore(), 0, 1, 1000, "smoke", [0])
        finally:
            dist.ProcessGroupNCCL = real
        expected = [("ProcessGroupNCCL", "PrefixStore", 0, 1, "smoke")]
    else:
        plugin = dist.Backend._plugins["NCCL"]
        dist.Backend._plugins["NCCL"] = plugin._replace(
            creator_fn=lambda opts, options: made.append((creator.__name__, type(opts.store).__name__,
                                                          opts.group_rank, opts.group_size, opts.group_id)))
        try:
            registration._make_gpu_backend(dist.HashStore(), 0, 1, 1000, "smoke", [0])
        finally:
            dist.Backend._plugins["NCCL"] = plugin
        expected = [(creator.__name__, "PrefixStore", 0, 1, "smoke")]
    if made != expected:
        raise AssertionError(f"the CUDA side was made as {made}, expected {expected}")
    return made[0][0]


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
