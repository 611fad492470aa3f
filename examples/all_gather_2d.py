"""Each rank contributes a random 2x3 tensor plus its rank; rank 0 prints them.

    torchrun --nproc-per-node=4 examples/all_gather_2d.py
"""

import argparse

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="ucxcoll")
    args = parser.parse_args()

    dist.init_process_group(backend=args.backend)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(rank)
    tensor = torch.rand(2, 3) + rank
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(gathered, tensor)
    if rank == 0:
        for source, received in enumerate(gathered):
            print(f"from rank {source}:\n{received}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
