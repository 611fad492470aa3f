"""A small DistributedDataParallel training job; the backend is a flag.

    torchrun --nproc-per-node=4 examples/ddp_train.py              # ucxcoll
    torchrun --nproc-per-node=4 examples/ddp_train.py --backend gloo
    torchrun --nproc-per-node=4 examples/ddp_train.py --fp16-compress

Every rank trains on its own shard of a synthetic regression problem; DDP
all-reduces the gradients, so all ranks hold the same parameters at the end.
"""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)  # same initial parameters on every rank
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def train(steps: int, backend: str, comm_hook=None) -> torch.Tensor:
    """Runs `steps` SGD steps and returns the flattened final parameters.
    comm_hook: optional DDP communication hook (e.g. fp16 compression)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(build_model())
    if comm_hook is not None:
        model.register_comm_hook(state=None, hook=comm_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1234 + rank)
    for step in range(steps):
        inputs = torch.randn(32, 16, generator=generator)
        targets = inputs.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and (step % 5 == 0 or step == steps - 1):
            print(f"[{backend}] step {step:3d} loss {loss.item():.4f} (world size {world_size})")
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="ucxcoll")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fp16-compress", action="store_true", help="all-reduce gradients as float16 (DDP comm hook)")
    args = parser.parse_args()

    dist.init_process_group(backend=args.backend)
    hook = default_hooks.fp16_compress_hook if args.fp16_compress else None
    parameters = train(args.steps, args.backend, comm_hook=hook)
    # DDP keeps replicas identical: check it across ranks.
    gathered = [torch.empty_like(parameters) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, parameters)
    if dist.get_rank() == 0:
        same = all(torch.equal(gathered[0], other) for other in gathered)
        print(f"[{args.backend}] parameters identical on all ranks: {same}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
