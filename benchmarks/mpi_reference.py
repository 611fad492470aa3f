"""Open MPI's figures for the rows bench_small.py measures: run under mpirun
with an interpreter that has mpi4py and numpy (Debian's python3 with
python3-mpi4py; never the project's environment). bench_small.py starts it;
by hand:

    mpirun --allow-run-as-root --oversubscribe -np 2 /usr/bin/python3 benchmarks/mpi_reference.py \
        --sizes 8 4096 --iterations 200 [--pml ucx] [--pages huge]

Each row is measured the way bench_small.py measures ucxcoll: per iteration
a barrier, then every rank times one call; the time of an iteration is the
slowest rank's; the row gives the median and p90 over iterations. Every
result is checked against the value it must have. Rank 0 prints one JSON
object on stdout.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

OPERATIONS = ["all_reduce", "all_gather", "broadcast", "reduce_scatter", "all_to_all"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def make_step(comm, operation: str, size: int):
    """The call to time and a check of its result, for `size` bytes per rank
    (float32 elements, as bench_small.py's tensors)."""
    rank, world = comm.Get_rank(), comm.Get_size()
    count = max(1, size // 4)
    if operation in ("reduce_scatter", "all_to_all"):
        count = max(world, count - count % world)
    send = np.full(count, rank + 1, dtype=np.float32)
    if operation == "all_reduce":
        out = np.empty_like(send)
        expected = world * (world + 1) / 2
        return (lambda: comm.Allreduce(send, out, op=MPI.SUM)), (lambda: bool(np.all(out == expected)))
    if operation == "all_gather":
        out = np.empty(count * world, dtype=np.float32)
        expected = np.repeat(np.arange(1, world + 1, dtype=np.float32), count)
        return (lambda: comm.Allgather(send, out)), (lambda: bool(np.array_equal(out, expected)))
    if operation == "broadcast":
        buffer = np.full(count, 7 if rank == 0 else 0, dtype=np.float32)
        return (lambda: comm.Bcast(buffer, root=0)), (lambda: bool(np.all(buffer == 7)))
    if operation == "reduce_scatter":
        out = np.empty(count // world, dtype=np.float32)
        expected = world * (world + 1) / 2
        return (lambda: comm.Reduce_scatter_block(send, out, op=MPI.SUM)), (lambda: bool(np.all(out == expected)))
    if operation == "all_to_all":
        out = np.empty_like(send)
        expected = np.repeat(np.arange(1, world + 1, dtype=np.float32), count // world)
        return (lambda: comm.Alltoall(send, out)), (lambda: bool(np.array_equal(out, expected)))
    raise ValueError(operation)


def measure(comm, step, iterations: int, warmup: int) -> list[float]:
    """Per iteration, the slowest rank's time of one call after a barrier (s)."""
    for _ in range(warmup):
        step()
    mine = []
    for _ in range(iterations):
        comm.Barrier()
        start = time.perf_counter()
        step()
        mine.append(time.perf_counter() - start)
    every = comm.gather(mine, root=0)
    if comm.Get_rank() != 0:
        return []
    return [max(column) for column in zip(*every)]


def back_to_back(comm, iterations: int) -> float:
    """Median time of an 8-byte all_reduce in a loop without barriers (s)."""
    send = np.ones(2, dtype=np.float32)
    out = np.empty_like(send)
    for _ in range(1000):
        comm.Allreduce(send, out, op=MPI.SUM)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        comm.Allreduce(send, out, op=MPI.SUM)
        times.append(time.perf_counter() - start)
    every = comm.gather(statistics.median(times), root=0)
    return max(every) if comm.Get_rank() == 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="+", default=OPERATIONS, choices=OPERATIONS)
    parser.add_argument("--sizes", nargs="+", type=int, default=[8, 4096, 65536])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--pages", choices=["4k", "huge"], default="4k",
                        help="4k: numpy's huge-page advice off, so buffers sit on 4 KiB pages as torch's do by default")
    parser.add_argument("--back-to-back", type=int, default=5000, help="iterations of the barrier-free loop")
    args = parser.parse_args()
    # numpy advises huge pages for arrays from 4 MiB on; torch does not
    # unless THP_MEM_ALLOC_ENABLE=1. Both sides must move the same memory.
    np.core.multiarray._set_madvise_hugepage(args.pages == "huge")
    comm = MPI.COMM_WORLD
    rows = []
    for operation in args.ops:
        for size in args.sizes:
            step, check = make_step(comm, operation, size)
            times = measure(comm, step, args.iterations, warmup=max(10, args.iterations // 10))
            correct = comm.allreduce(int(check()), op=MPI.MIN) == 1
            if comm.Get_rank() == 0:
                rows.append({"operation": operation, "bytes": size, "median_us": statistics.median(times) * 1e6,
                             "p90_us": percentile(times, 0.9) * 1e6, "correct": correct})
    loop = back_to_back(comm, args.back_to_back)
    if comm.Get_rank() == 0:
        json.dump({"world_size": comm.Get_size(), "library": MPI.Get_library_version().split(",")[0].strip("\x00 "),
                   "rows": rows, "back_to_back_us": loop * 1e6}, sys.stdout)
        print()


if __name__ == "__main__":
    main()
