"""One rank of the lost-host test (test_across_hosts.py), on a simulated host:

    python lost_host.py RANK WORLD PORT WORKDIR [vanish]

Loops 8-byte all_reduces until one raises (the test cuts host 1's link
once WORKDIR/looping exists), reports the error and when it came, waits
for WORKDIR/healed, then shows that the failed group stays failed and
that a new group (destroy + init on another port) works. With "vanish"
(host 1's ranks are killed too) it reports as soon as it raised."""

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


def wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.05)


def main() -> None:
    rank, world, port, workdir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    store = os.environ["UCXCOLL_TEST_STORE_ADDR"]
    timeout = timedelta(seconds=120)  # far beyond what the test waits
    dist.init_process_group("ucxcoll", init_method=f"tcp://{store}:{port}", rank=rank, world_size=world,
                            timeout=timeout)
    tensor = torch.ones(2)
    error, error_type, failed_at, iterations = None, None, None, 0
    try:
        while True:
            dist.all_reduce(tensor)
            tensor.fill_(1.0)
            iterations += 1
            if iterations == 200 and rank == 0:
                (workdir / "looping").touch()
    except Exception as raised:  # noqa: BLE001
        failed_at = time.time()
        error, error_type = str(raised), type(raised).__name__
    (workdir / f"failed{rank}").touch()
    if sys.argv[5:] == ["vanish"]:
        dist.destroy_process_group()
        print("RESULT " + json.dumps({"error": error, "error_type": error_type, "failed_at": failed_at,
                                      "iterations": iterations}), flush=True)
        return
    again, fresh, after_heal_error = None, None, None
    try:
        wait_for(workdir / "healed", 60)
        try:
            dist.all_reduce(tensor)
        except Exception as raised:  # noqa: BLE001
            again = f"{type(raised).__name__}: {raised}"
        dist.destroy_process_group()
        dist.init_process_group("ucxcoll", init_method=f"tcp://{store}:{port + 1}", rank=rank, world_size=world,
                                timeout=timeout)
        mine = torch.full((2,), float(rank))
        dist.all_reduce(mine)
        fresh = mine.tolist()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001  (reported, so that the test shows it)
        after_heal_error = traceback.format_exc()
    print("RESULT " + json.dumps({"error": error, "error_type": error_type, "failed_at": failed_at,
                                  "iterations": iterations, "again": again, "fresh_sum": fresh,
                                  "after_heal_error": after_heal_error}), flush=True)

if __name__ == "__main__":
    main()
