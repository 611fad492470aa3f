"""Each rank contributes its rank; rank 0 prints what all_gather collected.

A plain torch.distributed script: it never imports ucxcoll, it only names
the backend. Run it with:

    torchrun --nproc-per-node=4 examples/all_gather.py
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

    tensor = torch.tensor([rank])
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(gathered, tensor)
    if rank == 0:
        print(gathered)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
