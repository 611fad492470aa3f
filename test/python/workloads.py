"""Real training workloads, each run twice in the same processes, once on
ucxcoll and once on gloo, from the same seeds; test_workloads.py compares
the two. One subcommand per workload:

    python workloads.py WORKLOAD RANK WORLD PORT WORKDIR

Each rank prints one line "RESULT <json>". Like the check modules, this
never imports ucxcoll: the backend comes from torch's autoload.
"""

import gc
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

HIDDEN = 32
FINISHED_GROUPS = []  # see on_both_backends


def report(**values) -> None:
    print("RESULT " + json.dumps(values), flush=True)


def init(rank: int, world: int, port: int, backend: str) -> None:
    dist.init_process_group(
        backend,
        init_method=f"tcp://{os.environ.get('UCXCOLL_TEST_STORE_ADDR', '127.0.0.1')}:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )


def on_both_backends(rank, world, port, run):
    """run(backend) on ucxcoll, then on gloo; returns {backend: result}."""
    results = {}
    for offset, backend in enumerate(["ucxcoll", "gloo"]):
        init(rank, world, port + offset, backend)
        results[backend] = run(backend)
        # A comm hook's .then() callback holds the process group; gloo's
        # worker thread may drop the last such callback after this run
        # returns, and if that were the group's last reference, gloo's
        # destructor would run on that worker and join itself
        # (std::system_error "Resource deadlock avoided" at exit, seen with
        # PowerSGD on gloo). So the groups stay referenced here until the
        # interpreter ends, long after every worker has let go.
        gc.collect()
        FINISHED_GROUPS.append(dist.group.WORLD)
        dist.destroy_process_group()
    return results


def difference(results) -> dict:
    ours, gloo = results["ucxcoll"], results["gloo"]
    return {"max_abs_difference": (ours - gloo).abs().max().item(), "scale": gloo.abs().max().item()}


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN)
    )


def batch(rank: int, step: int, rows: int = 8) -> torch.Tensor:
    return torch.randn(rows, HIDDEN, generator=torch.Generator().manual_seed(100 * rank + step))


# ---- FSDP2 -----------------------------------------------------------------


def fsdp2(rank: int, world: int, port: int, workdir: str) -> None:
    """fully_shard on a 1-D mesh, fp32 and bf16 parameters with fp32
    reduction; with 4 ranks also HSDP on a 2x2 mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    variants = {"fp32": ((world,), None), "bf16_params": ((world,), torch.bfloat16)}
    if world == 4:
        variants["hsdp_2x2"] = ((2, 2), None)

    def train(shape, param_dtype):
        def run(backend):
            names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
            mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
            model = mlp()
            policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
            for layer in model:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=mesh, mp_policy=policy)
            fully_shard(model, mesh=mesh, mp_policy=policy)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(4):
                loss = model(batch(rank, step)).float().pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            return torch.cat([p.full_tensor().detach().flatten().float() for p in model.parameters()])

        return run

    out = {}
    for name, (shape, dtype) in variants.items():
        out[name] = difference(on_both_backends(rank, world, port + 2 * len(out), train(shape, dtype)))
    report(**out)


# ---- tensor parallel (DTensor) ---------------------------------------------------


def tensor_parallel(rank: int, world: int, port: int, workdir: str) -> None:
    """ColwiseParallel / RowwiseParallel on an MLP: output and gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def run(backend):
        mesh = init_device_mesh("cpu", (world,))
        model = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.ReLU(), nn.Linear(4 * HIDDEN, HIDDEN))
        torch.manual_seed(0)
        for layer in (model[0], model[2]):
            layer.reset_parameters()
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        inputs = batch(0, 0)  # the same input on every rank, as TP expects
        output = model(inputs)
        output.pow(2).sum().backward()
        grads = [p.grad.full_tensor().flatten() for p in model.parameters()]
        return torch.cat([output.detach().flatten(), *grads])

    report(**difference(on_both_backends(rank, world, port, run)))


# ---- torch.distributed.checkpoint ------------------------------------------------------


def checkpoint_save(rank: int, world: int, port: int, workdir: str) -> None:
    """Save a sharded (FSDP2) model; the path comes from CHECKPOINT_DIR."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    init(rank, world, port, "ucxcoll")
    model = mlp()
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    dcp.save({"model": model.state_dict()}, checkpoint_id=os.environ["CHECKPOINT_DIR"])
    dist.destroy_process_group()
    report(saved=True)


def checkpoint_load(rank: int, world: int, port: int, workdir: str) -> None:
    """Load it into a model sharded over another number of ranks; report
    whether every full parameter equals the unsharded original."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    init(rank, world, port, "ucxcoll")
    expected = [p.detach().clone() for p in mlp().parameters()]
    model = mlp()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=os.environ["CHECKPOINT_DIR"])
    model.load_state_dict(state["model"])
    loaded = [p.full_tensor().detach() for p in model.parameters()]
    dist.destroy_process_group()
    report(equal=all(torch.equal(a, b) for a, b in zip(loaded, expected)))


# ---- DDP variants ------------------------------------------------------------------------


class Branchy(nn.Module):
    """A model whose second branch is used only on even steps."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Linear(HIDDEN, HIDDEN)
        self.even = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x, step):
        x = torch.relu(self.trunk(x))
        if step % 2 == 0:
            x = x + self.even(x)
        return self.head(x)


def ddp_variants(rank: int, world: int, port: int, workdir: str) -> None:
    """find_unused_parameters, no_sync (gradient accumulation),
    static_graph and the PowerSGD comm hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(variant):
        def run(backend):
            if variant == "find_unused_parameters":
                model = DDP(Branchy(), find_unused_parameters=True)
            elif variant == "static_graph":
                model = DDP(mlp(), static_graph=True)
            else:
                model = DDP(mlp())
            if variant == "powersgd":
                state = powerSGD_hook.PowerSGDState(
                    process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2, random_seed=0
                )
                model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            for step in range(6):
                if variant == "find_unused_parameters":
                    loss = model(batch(rank, step), step).pow(2).mean()
                    loss.backward()
                elif variant == "no_sync" and step % 3 != 2:
                    with model.no_sync():  # accumulate locally, synchronise every third step
                        model(batch(rank, step)).pow(2).mean().backward()
                    continue
                else:
                    model(batch(rank, step)).pow(2).mean().backward()
                optimizer.step()
                optimizer.zero_grad()
            return torch.cat([p.detach().flatten() for p in model.parameters()])

        return run

    out = {}
    for variant in ("find_unused_parameters", "no_sync", "static_graph", "powersgd"):
        out[variant] = difference(on_both_backends(rank, world, port + 2 * len(out), train(variant)))
    report(**out)


WORKLOADS = {
    "fsdp2": fsdp2,
    "tensor_parallel": tensor_parallel,
    "checkpoint_save": checkpoint_save,
    "checkpoint_load": checkpoint_load,
    "ddp_variants": ddp_variants,
}

if __name__ == "__main__":
    name, rank, world, port, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    WORKLOADS[name](rank, world, port, workdir)
