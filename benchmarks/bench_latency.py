"""Small-message latency: back-to-back 8 B all_reduce, and what of it is ours.

    python benchmarks/bench_latency.py [--nproc 2] [--iterations 20000] [--audit]

Each rank runs the same loop of synchronous 8-byte all_reduces, with no
barrier in between (what a training loop's small collectives look like),
on ucxcoll and then on gloo, and rank 0 reports the median (p50) and p90 of
the per-call times. The same loop on torch's "fake" backend (a process group
that does nothing) measures what torch's own Python and dispatch layers
cost per call; ucxcoll's own cost is its p50 minus that.

--audit runs the ucxcoll loop once more with the audit log on
(UCXCOLL_LOG_LEVEL=info: one line per operation, here written to a file)
and reports what it adds per call.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def timed_loop(step, iterations: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def percentile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def fake_backend_p50(iterations: int) -> float:
    """p50 of the same loop on torch's fake backend, in a child process (a
    process has one default group)."""
    code = (
        "import sys, torch, torch.distributed as dist\n"
        "from torch.testing._internal.distributed.fake_pg import FakeStore\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "from bench_latency import timed_loop, percentile\n"
        "dist.init_process_group('fake', store=FakeStore(), rank=0, world_size=2)\n"
        "t = torch.ones(2)\n"
        f"print(percentile(timed_loop(lambda: dist.all_reduce(t), {iterations}, 1000), 0.5))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def run_rank(args) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("ucxcoll")  # env:// from the launcher
    rank = dist.get_rank()
    groups = {"ucxcoll": dist.group.WORLD}
    if not args.only_ucxcoll:
        groups["gloo"] = dist.new_group(backend="gloo")
    results = {}
    for backend, group in groups.items():
        tensor = torch.ones(2)  # 8 bytes
        iterations = args.iterations if backend == "ucxcoll" else max(1000, args.iterations // 20)
        dist.barrier(group=group)
        times = timed_loop(lambda: dist.all_reduce(tensor, group=group), iterations, 1000)
        results[backend] = (percentile(times, 0.5), percentile(times, 0.9), statistics.mean(times) * 1e6)
    if rank == 0:
        for backend, (p50, p90, mean) in results.items():
            label = backend if not args.only_ucxcoll else "ucxcoll with audit log"
            print(f"{label:8s} 8 B all_reduce, {dist.get_world_size()} ranks: p50 {p50:7.2f} us  p90 {p90:7.2f} us  "
                  f"mean {mean:7.2f} us", flush=True)
        if "gloo" in results:
            print(f"speedup (gloo p50 / ucxcoll p50): {results['gloo'][0] / results['ucxcoll'][0]:.1f}x", flush=True)
    dist.destroy_process_group()


def launch(args, extra_env: dict, extra_args: list[str], stderr=None) -> int:
    """Runs --nproc worker ranks; the highest exit code."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **extra_env)
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--iterations", str(args.iterations)]
        procs.append(subprocess.Popen(command + extra_args, env=env, stderr=stderr))
    return max(proc.wait() for proc in procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--audit", action="store_true", help="also measure ucxcoll with the audit log on")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only-ucxcoll", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_rank(args)
        return
    code = launch(args, {}, [])
    if code == 0 and args.audit:
        with tempfile.TemporaryFile() as log:
            code = launch(args, {"UCXCOLL_LOG_LEVEL": "info"}, ["--only-ucxcoll"], stderr=log)
            log.seek(0)
            lines = sum(1 for line in log if b"] audit: " in line)
        print(f"(audit log: {lines} lines written by {args.nproc} ranks)")
    if code == 0:
        fake = fake_backend_p50(args.iterations)
        print(f"fake     8 B all_reduce (torch's own per-call cost): p50 {fake:7.2f} us")
    sys.exit(code)


if __name__ == "__main__":
    main()
