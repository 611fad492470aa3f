"""Run by torchrun --max-restarts 1 (test_scenarios.py): in the first
attempt rank 1 is SIGKILLed after a collective; rank 0 must raise naming it
(with torch's default 30-minute timeout: found by watching the process), so
that torchrun restarts both workers; the second attempt must work."""

import os
import signal

import torch
import torch.distributed as dist

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("ucxcoll")
rank = dist.get_rank()
tensor = torch.ones(4)
dist.all_reduce(tensor)
if attempt == 0 and rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    while True:
        dist.all_reduce(torch.ones(4))
        if attempt > 0:
            break
except dist.DistBackendError as error:
    print(f"attempt {attempt} rank {rank} raised: {error}", flush=True)
    raise
print(f"attempt {attempt} rank {rank}: all_reduce gave {tensor[0].item()}", flush=True)
dist.destroy_process_group()
