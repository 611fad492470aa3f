"""Small and medium messages on one host: ucxcoll beside gloo, torch's own
dispatch cost (the "fake" backend) and Open MPI, measured in one run.

    python benchmarks/bench_small.py [--nproc 2] [--sizes 8 4096 65536] [--iterations 300] [--json out.json]

Rows: all_reduce, all_gather_into_tensor, broadcast (root 0),
reduce_scatter_tensor and all_to_all_single on float32 tensors; size is the
bytes per rank (all_reduce's and broadcast's buffer, the others' input).
Each row is measured alike on every backend: per iteration the ranks meet
in that backend's barrier, then every rank times one call; an iteration's
time is its slowest rank's; the row gives the median (p50) and p90 over
the iterations, after warm-up. Every result is checked.

fake     torch's own per-call cost: the same call on torch's "fake" process
         group (which moves nothing), in one process; no backend can be
         faster than this.
mpi      Open MPI through mpi4py on numpy buffers (benchmarks/mpi_reference.py,
         same method), the faster of its default pml and pml ucx per row.
         It needs `mpirun` and an interpreter with mpi4py that is not the
         project's (--mpi-python, default /usr/bin/python3; Debian's
         openmpi-bin and python3-mpi4py); without them the column is left
         out and the reason printed.
pages    --pages 4k (default): every backend's buffers on the 4 KiB pages
         torch allocates by default, and numpy's huge-page advice turned
         off for Open MPI, so all of them move the same kind of memory.
         --pages huge: transparent huge pages on both sides (torch with
         THP_MEM_ALLOC_ENABLE=1, numpy as it comes). The kind matters from
         1 MiB on: a kernel copy between processes (CMA, process_vm_readv,
         which UCX and Open MPI use for large messages) reads a huge-page
         buffer about 4x faster than a 4 KiB-page one here.
bound    fake + 3 x mpi (with more ranks than cores: fake + 5 x mpi), the
         figure ucxcoll aims to stay under.

Last, the back-to-back loop (8-byte all_reduces without barriers, 2 ranks or
--nproc) on ucxcoll, fake and MPI: ucxcoll's own cost per call is its p50
minus fake's. ucxcoll writes torch's flight recorder entries (where no CUDA
device is usable; else torch's hook does), fake records nothing; the loop
is run once more with TORCH_FR_BUFFER_SIZE=0 to show what recording adds.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

OPERATIONS = ["all_reduce", "all_gather_into_tensor", "broadcast", "reduce_scatter_tensor", "all_to_all_single"]
# The names mpi_reference.py uses for the same rows.
MPI_NAMES = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather", "broadcast": "broadcast",
             "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all"}
HERE = os.path.dirname(os.path.abspath(__file__))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def element_count(operation: str, size: int, world: int) -> int:
    count = max(1, size // 4)
    if operation in ("reduce_scatter_tensor", "all_to_all_single"):
        count = max(world, count - count % world)
    return count


def make_step(operation: str, size: int, rank: int, world: int, group):
    """The call to time on `group`, and a check of its last result."""
    import torch
    import torch.distributed as dist

    count = element_count(operation, size, world)
    mine = torch.full((count,), float(rank + 1))
    if operation == "all_reduce":
        buffer = mine.clone()

        def step():
            buffer.copy_(mine)  # the same input every time, so that the result can be checked
            dist.all_reduce(buffer, group=group)

        return step, lambda: bool((buffer == world * (world + 1) / 2).all())
    if operation == "all_gather_into_tensor":
        out = torch.empty(count * world)
        expected = torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(count)
        return (lambda: dist.all_gather_into_tensor(out, mine, group=group)), lambda: bool(torch.equal(out, expected))
    if operation == "broadcast":
        buffer = torch.full((count,), 7.0 if rank == 0 else 0.0)
        return (lambda: dist.broadcast(buffer, 0, group=group)), lambda: bool((buffer == 7).all())
    if operation == "reduce_scatter_tensor":
        out = torch.empty(count // world)
        return (lambda: dist.reduce_scatter_tensor(out, mine, group=group)), \
            lambda: bool((out == world * (world + 1) / 2).all())
    out = torch.empty(count)
    expected = torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(count // world)
    return (lambda: dist.all_to_all_single(out, mine, group=group)), lambda: bool(torch.equal(out, expected))


def run_rank(args) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("ucxcoll")  # env:// from the launcher
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    groups = {"ucxcoll": dist.group.WORLD, "gloo": gloo}
    rows = []
    for operation in args.ops:
        for size in args.sizes:
            row = {"operation": operation, "bytes": size}
            for backend, group in groups.items():
                step, check = make_step(operation, size, rank, world, group)
                iterations = args.iterations if backend == "ucxcoll" else max(20, args.iterations // 5)
                for _ in range(max(10, iterations // 10)):
                    step()
                times = []
                for _ in range(iterations):
                    dist.barrier(group=group)
                    start = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - start)
                correct = torch.tensor([int(check())])
                dist.all_reduce(correct, op=dist.ReduceOp.MIN, group=gloo)
                every = [torch.empty(len(times), dtype=torch.float64) for _ in range(world)]
                dist.all_gather(every, torch.tensor(times, dtype=torch.float64), group=gloo)
                slowest = torch.stack(every).max(dim=0).values.tolist()
                row[backend] = {"median_us": statistics.median(slowest) * 1e6,
                                "p90_us": percentile(slowest, 0.9) * 1e6, "correct": bool(correct.item())}
            rows.append(row)
            if rank == 0:
                print(f"[bench_small] measured {operation} {size} B", file=sys.stderr, flush=True)
    loop = back_to_back_loop(lambda t: dist.all_reduce(t), args.loop_iterations)
    if rank == 0:
        with open(args.worker_out, "w") as out:
            json.dump({"rows": rows, "back_to_back_us": loop}, out)
    dist.destroy_process_group()


def back_to_back_loop(all_reduce, iterations: int) -> float:
    """p50 of 8-byte all_reduces called back to back, in microseconds."""
    import torch

    tensor = torch.ones(2)
    for _ in range(1000):
        all_reduce(tensor)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        all_reduce(tensor)
        times.append(time.perf_counter() - start)
    return percentile(times, 0.5) * 1e6


def run_fake(args) -> None:
    """torch's own per-call cost of every row, on the fake backend."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=args.nproc)
    rows = {}
    for operation in args.ops:
        for size in args.sizes:
            step, _ = make_step(operation, size, 0, args.nproc, None)
            for _ in range(200):
                step()
            times = []
            for _ in range(max(args.iterations, 1000)):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            rows[f"{operation}/{size}"] = statistics.median(times) * 1e6
    loop = back_to_back_loop(lambda t: dist.all_reduce(t), args.loop_iterations)
    with open(args.worker_out, "w") as out:
        json.dump({"rows": rows, "back_to_back_us": loop}, out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_environment(args) -> dict:
    """The launcher's environment with one intra-op thread per process unless
    the caller set OMP_NUM_THREADS, as torchrun does for several processes
    per node: torch parallelises a large tensor copy (the all_reduce row's
    reset of its buffer) with OpenMP, and threads of two ranks spinning on
    two cores stall each other for milliseconds, on every backend alike.
    With --pages huge torch puts tensors of 2 MiB and more on huge pages."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env.pop("THP_MEM_ALLOC_ENABLE", None)
    if args.pages == "huge":
        env["THP_MEM_ALLOC_ENABLE"] = "1"
    return env


def run_ranks(args, out: str, extra_env: dict | None = None, extra_args: tuple = ()) -> dict:
    port = free_port()
    procs = []
    for rank in range(args.nproc):
        env = dict(worker_environment(args), RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--worker-out", out,
                                       *common_arguments(args), *extra_args], env=env))
    codes = [proc.wait() for proc in procs]
    if any(codes):
        sys.exit(f"bench_small: a rank failed (exit codes {codes})")
    with open(out) as results:
        return json.load(results)


def common_arguments(args) -> list[str]:
    return ["--nproc", str(args.nproc), "--ops", *args.ops, "--sizes", *map(str, args.sizes),
            "--iterations", str(args.iterations), "--loop-iterations", str(args.loop_iterations)]


def mpi_reference(args) -> tuple[dict | None, str]:
    """Open MPI's rows (best pml per row) and its back-to-back loop, or None
    and why not."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return None, "no mpirun on PATH (Debian: apt-get install openmpi-bin python3-mpi4py)"
    if shutil.which(args.mpi_python) is None:
        return None, f"no interpreter {args.mpi_python} (--mpi-python)"
    probe = subprocess.run([args.mpi_python, "-c", "import mpi4py, numpy"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"{args.mpi_python} cannot import mpi4py and numpy (Debian: apt-get install python3-mpi4py)"
    best, library, loop = {}, "", None
    for pml in ("ob1", "ucx"):
        command = [mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "pml", pml, "-np", str(args.nproc),
                   args.mpi_python, os.path.join(HERE, "mpi_reference.py"), "--ops",
                   *sorted({MPI_NAMES[o] for o in args.ops}), "--sizes", *map(str, args.sizes),
                   "--iterations", str(args.iterations), "--back-to-back", str(args.loop_iterations),
                   "--pages", args.pages]
        result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, OMPI_MCA_btl="self,vader"))
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines() or [f"exit code {result.returncode}"]
            reason = next((line for line in lines if "cannot" in line or "rror" in line), lines[-1])
            print(f"[bench_small] Open MPI with pml {pml} left out: {reason.strip()}", file=sys.stderr)
            continue
        report = json.loads(result.stdout.strip().splitlines()[-1])
        library = report["library"]
        for row in report["rows"]:
            if not row["correct"]:
                sys.exit(f"bench_small: Open MPI ({pml}) gave a wrong result in {row}")
            key = f"{row['operation']}/{row['bytes']}"
            if key not in best or row["median_us"] < best[key]["median_us"]:
                best[key] = dict(row, pml=pml)
        loop = report["back_to_back_us"] if loop is None else min(loop, report["back_to_back_us"])
    if not best:
        return None, "mpirun failed with both pmls (see above)"
    return {"rows": best, "library": library, "back_to_back_us": loop}, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--ops", nargs="+", default=OPERATIONS, choices=OPERATIONS)
    parser.add_argument("--sizes", nargs="+", type=int, default=[8, 4096, 65536])
    parser.add_argument("--iterations", type=int, default=300, help="timed iterations per row (gloo: a fifth)")
    parser.add_argument("--loop-iterations", type=int, default=20000, help="of the back-to-back loop")
    parser.add_argument("--mpi-python", default="/usr/bin/python3", help="an interpreter with mpi4py and numpy")
    parser.add_argument("--pages", choices=["4k", "huge"], default="4k",
                        help="the memory every backend's buffers live on (see above)")
    parser.add_argument("--json", default="benchmarks/results/bench_small.json", help="'' for nowhere")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_fake(args) if args.fake else run_rank(args)
        return
    import tempfile

    cores = len(os.sched_getaffinity(0))
    factor = 3 if args.nproc <= cores else 5
    with tempfile.TemporaryDirectory() as scratch:
        measured = run_ranks(args, os.path.join(scratch, "ranks.json"))
        no_recorder = run_ranks(args, os.path.join(scratch, "ranks-no-fr.json"), {"TORCH_FR_BUFFER_SIZE": "0"},
                                ("--ops", "all_reduce", "--sizes", "8", "--iterations", "20"))
        fake_out = os.path.join(scratch, "fake.json")
        subprocess.run([sys.executable, __file__, "--worker", "--fake", "--worker-out", fake_out,
                        *common_arguments(args)], check=True, env=worker_environment(args))
        with open(fake_out) as results:
            fake = json.load(results)
    mpi, why_not = mpi_reference(args)
    print(f"# {args.nproc} ranks on {cores} cores; per iteration a barrier, then one call; slowest rank's time; "
          f"p50 (p90) in us; buffers on {'huge' if args.pages == 'huge' else '4 KiB'} pages")
    if mpi is None:
        print(f"# Open MPI left out: {why_not}")
    else:
        print(f"# mpi: {mpi['library']}, best of pml ob1 and ucx per row; bound = fake + {factor} x mpi")
    print("| operation | size | ucxcoll p50 (p90) | gloo p50 | fake | mpi | bound | ucxcoll/mpi | within bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    table = []
    for row in measured["rows"]:
        key = f"{row['operation']}/{row['bytes']}"
        u, g = row["ucxcoll"], row["gloo"]
        if not (u["correct"] and g["correct"]):
            sys.exit(f"bench_small: a wrong result in {row}")
        entry = dict(row, fake_us=fake["rows"][key])
        cells = [row["operation"], f"{row['bytes']} B", f"{u['median_us']:.1f} ({u['p90_us']:.1f})",
                 f"{g['median_us']:.1f}", f"{entry['fake_us']:.1f}"]
        if mpi is not None and f"{MPI_NAMES[row['operation']]}/{row['bytes']}" in mpi["rows"]:
            reference = mpi["rows"][f"{MPI_NAMES[row['operation']]}/{row['bytes']}"]
            bound = entry["fake_us"] + factor * reference["median_us"]
            entry.update(mpi=reference, bound_us=bound)
            cells += [f"{reference['median_us']:.1f}", f"{bound:.1f}", f"{u['median_us'] / reference['median_us']:.1f}x",
                      "yes" if u["median_us"] <= bound else "no"]
        else:
            cells += ["-", "-", "-", "-"]
        table.append(entry)
        print("| " + " | ".join(cells) + " |")
    loop_u, loop_f = measured["back_to_back_us"], fake["back_to_back_us"]
    loop_nofr = no_recorder["back_to_back_us"]
    print(f"\nback-to-back 8 B all_reduce, {args.nproc} ranks, p50: ucxcoll {loop_u:.2f} us "
          f"(with TORCH_FR_BUFFER_SIZE=0: {loop_nofr:.2f} us), fake {loop_f:.2f} us"
          + (f", Open MPI {mpi['back_to_back_us']:.2f} us" if mpi else ""))
    print(f"ucxcoll's own cost per call: {loop_u - loop_f:.2f} us ({loop_nofr - loop_f:.2f} us without torch's "
          f"flight recorder, which fake does not write)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as out:
            from importlib.metadata import version

            from bench_collectives import machine

            json.dump({"nproc": args.nproc, "cores": cores, "pages": args.pages, "bound_factor": factor, "rows": table,
                       "torch": version("torch"), "machine": machine(),
                       "mpi_library": mpi["library"] if mpi else None, "mpi_left_out": why_not or None,
                       "back_to_back_us": {"ucxcoll": loop_u, "ucxcoll_no_flight_recorder": loop_nofr,
                                           "fake": loop_f, "mpi": mpi["back_to_back_us"] if mpi else None}},
                      out, indent=1)


if __name__ == "__main__":
    main()
