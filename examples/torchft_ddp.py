"""DDP on CPU under torchft's Manager, with ucxcoll between the replicas.

Each replica group here is one process (a replica group of world size 1);
the replica groups average their gradients through a ucxcoll process
group that torchft's Manager reconfigures whenever a replica joins or
leaves. Kill a replica and the others go on at once (its peers raise
"Connection closed by peer" and the Manager moves to a smaller quorum);
start it again and it fetches the current weights from a live replica and
rejoins.

Start torchft's lighthouse (it drops a replica from the quorum once it
has not heard from it for --heartbeat_timeout_ms), then one process per
replica:

    torchft_lighthouse --min_replicas 1 --heartbeat_timeout_ms 1000 --bind '[::]:29510' &
    python examples/torchft_ddp.py --replica-id 0 --lighthouse http://localhost:29510 &
    python examples/torchft_ddp.py --replica-id 1 --lighthouse http://localhost:29510

Each replica prints one line per step (the step and how many replicas
took part); with --report FILE it writes those lines and its final
weights there (test/python/test_torchft.py checks that the replicas
agree).
"""

import argparse
import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn, optim

from torchft import DistributedDataParallel, Manager
from torchft.optim import OptimizerWrapper
from ucxcoll.torchft import ProcessGroupUcxcoll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replica-id", type=int, required=True)
    parser.add_argument("--lighthouse", required=True, help="the lighthouse's address (http://host:port)")
    parser.add_argument("--steps", type=int, default=40, help="train until the replicas' common step reaches this")
    parser.add_argument("--step-seconds", type=float, default=0.05, help="pause after each step")
    parser.add_argument("--die-at-step", type=int, default=None, help="SIGKILL this process at that step")
    parser.add_argument("--report", default=None, help="write steps and final weights there (JSON)")
    args = parser.parse_args()

    # The replica group's own store: this replica group has one rank.
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    torch.manual_seed(0)  # every replica starts from the same weights
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    inner_optimizer = optim.SGD(model.parameters(), lr=0.05)

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": inner_optimizer.state_dict()}

    def load_state_dict(state: dict) -> None:
        model.load_state_dict(state["model"])
        inner_optimizer.load_state_dict(state["optim"])

    manager = Manager(
        pg=ProcessGroupUcxcoll(timeout=timedelta(seconds=10)),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"replica_{args.replica_id}",
        store_addr="localhost",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=args.lighthouse,
        port=0,
        timeout=timedelta(seconds=10),
        quorum_timeout=timedelta(seconds=30),
    )
    ddp_model = DistributedDataParallel(manager, model)
    optimizer = OptimizerWrapper(manager, inner_optimizer)
    data = torch.Generator().manual_seed(1000 + args.replica_id)  # each replica its own data
    steps = []
    started = time.monotonic()
    while manager.current_step() < args.steps:
        inputs = torch.randn(16, 8, generator=data)
        labels = torch.randint(0, 4, (16,), generator=data)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(ddp_model(inputs), labels)
        loss.backward()  # DDP hands the gradients to the Manager's all_reduce here
        if args.die_at_step is not None and manager.current_step() >= args.die_at_step:
            os.kill(os.getpid(), signal.SIGKILL)  # in the middle of a step, as a crash would
        optimizer.step()  # applied only if every replica of the quorum got the averaged gradients
        step = {"step": manager.current_step(), "replicas": manager.num_participants(), "loss": round(loss.item(), 4),
                "seconds": round(time.monotonic() - started, 3)}
        steps.append(step)
        print(f"replica {args.replica_id}: " + json.dumps(step), flush=True)
        time.sleep(args.step_seconds)
    if args.report:
        weights = {name: tensor.tolist() for name, tensor in model.state_dict().items()}
        with open(args.report, "w") as report:
            json.dump({"steps": steps, "weights": weights}, report)
    manager.shutdown(wait=False)
    sys.exit(0)


if __name__ == "__main__":
    main()
