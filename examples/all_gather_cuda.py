"""The GPU version of all_gather.py: each rank puts its rank on its own GPU
(cuda:<local rank>), and rank 0 prints what all_gather collected. With
backend="ucxcoll" the CUDA tensors go to NCCL (torch's ProcessGroupNCCL),
the same backend name that sends CPU tensors over UCX. Run it with one
process per GPU:

    torchrun --nproc-per-node=<GPUs> examples/all_gather_cuda.py
"""

import argparse
import os

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="ucxcoll")
    args = parser.parse_args()

    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    # device_id binds the group to this GPU: NCCL connects now rather than
    # at the first collective, and barrier() runs on NCCL.
    dist.init_process_group(backend=args.backend, device_id=device)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    tensor = torch.tensor([rank], device=device)
    gathered = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(gathered, tensor)
    if rank == 0:
        print(gathered)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
