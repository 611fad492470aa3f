"""What copying costs on this machine: the floor under the large-message rows
of bench_collectives.py.

    python benchmarks/bench_copy_floor.py [--sizes 16777216 67108864]

For each size (bytes), the median of 10 timed copies after 2 warm-ups of:

memcpy      one process copies a buffer into another (torch copy_, one thread)
memcpy x2   two processes do that at once, each with its own buffers (two
            ranks copying their own blocks in parallel)
cma         one process reads another process's buffer into its own with
            process_vm_readv: the single copy UCX makes between two ranks on
            one host (its CMA rendezvous)

A collective that must move B bytes into another rank's memory cannot beat
B / cma (or B / memcpy through shared memory, which needs a second copy on
the sender's side); README.md ("How close to the hardware") works out each
operation's floor from these figures and compares it with gloo's time.
"""

import argparse
import ctypes
import multiprocessing as mp
import os
import statistics
import time

import torch

WARMUP, TIMED = 2, 10


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def median_seconds(step) -> float:
    for _ in range(WARMUP):
        step()
    times = []
    for _ in range(TIMED):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def copy_seconds(size: int) -> float:
    torch.set_num_threads(1)
    source = torch.ones(size, dtype=torch.uint8)
    target = torch.zeros(size, dtype=torch.uint8)
    return median_seconds(lambda: target.copy_(source))


def copy_in_parallel(size: int, barrier, results) -> None:
    barrier.wait()
    results.put(copy_seconds(size))


def hold_buffer(size: int, connection) -> None:
    """Keeps a filled buffer alive and tells the reader where it is."""
    buffer = torch.ones(size, dtype=torch.uint8)
    connection.send((os.getpid(), buffer.data_ptr()))
    connection.recv()  # until the reader is done


def cma_seconds(size: int) -> float:
    context = mp.get_context("spawn")
    ours, theirs = context.Pipe()
    holder = context.Process(target=hold_buffer, args=(size, theirs))
    holder.start()
    pid, address = ours.recv()
    target = torch.zeros(size, dtype=torch.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    local = IoVec(target.data_ptr(), size)
    remote = IoVec(address, size)

    def read() -> None:
        got = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got != size:
            raise OSError(ctypes.get_errno(), f"process_vm_readv read {got} of {size} bytes")

    try:
        return median_seconds(read)
    finally:
        ours.send("done")
        holder.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[16 << 20, 64 << 20])
    args = parser.parse_args()
    context = mp.get_context("spawn")
    print(f"| {'size':>7} | {'memcpy GB/s':>11} | {'memcpy x2 GB/s (each)':>21} | {'cma GB/s':>8} |")
    print(f"|{'-' * 9}|{'-' * 13}|{'-' * 23}|{'-' * 10}|")
    for size in args.sizes:
        alone = copy_seconds(size)
        barrier, results = context.Barrier(2), context.Queue()
        workers = [context.Process(target=copy_in_parallel, args=(size, barrier, results)) for _ in range(2)]
        for worker in workers:
            worker.start()
        pair = [results.get() for _ in workers]
        for worker in workers:
            worker.join()
        cma = cma_seconds(size)
        print(f"| {size >> 20:>3} MiB | {size / alone / 1e9:>11.2f} | {size / max(pair) / 1e9:>21.2f} | "
              f"{size / cma / 1e9:>8.2f} |", flush=True)


if __name__ == "__main__":
    main()
