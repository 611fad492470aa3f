"""How long until every rank learns that a host is gone: ucxcoll and gloo
on the same simulated hosts (scripts/hosts.sh; run as root).

    python benchmarks/bench_lost_host.py [--timeout 60] [--backends ucxcoll gloo]

Two hosts with two ranks each loop 8-byte all_reduces with the given group
timeout; then host 1's link is cut (the veth to the bridge goes down: no
packet crosses, no connection is reset, as when a switch port or a host
dies). For each backend the table shows, per rank, the seconds from the
cut to the exception its all_reduce raised, and the start of that
exception's message. Ranks that have not raised after twice the timeout
are shown as "-" and killed.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HOSTS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "hosts.sh")

RANK_CODE = """
import json, os, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
backend, rank, port, timeout, workdir = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5]
dist.init_process_group(backend, init_method=f"tcp://10.231.0.1:{port}", rank=rank, world_size=4,
                        timeout=timedelta(seconds=timeout))
tensor, iterations = torch.ones(2), 0
try:
    while True:
        dist.all_reduce(tensor)
        iterations += 1
        if iterations == 200 and rank == 0:
            open(os.path.join(workdir, "looping"), "w").close()
except Exception as error:
    print("RESULT " + json.dumps({"at": time.time(), "error": f"{type(error).__name__}: {error}"}), flush=True)
    os._exit(0)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(backend: str, rig: str, timeout: float) -> list:
    workdir = tempfile.mkdtemp(prefix="lost_host_")
    port = free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen([HOSTS_SCRIPT, "run", str(rank // 2), rig, "--", sys.executable, "-c", RANK_CODE,
                               backend, str(rank), str(port), str(timeout), workdir],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                              start_new_session=True) for rank in range(4)]
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(workdir, "looping")):
        if time.time() > deadline or any(proc.poll() is not None for proc in procs):
            raise RuntimeError(f"{backend}: the ranks never started looping")
        time.sleep(0.05)
    subprocess.run([HOSTS_SCRIPT, "cut", "1", rig], check=True)
    cut_at = time.time()
    results = []
    try:
        for proc in procs:
            try:
                output, _ = proc.communicate(timeout=max(1.0, cut_at + 2 * timeout - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.communicate()
                results.append(None)
                continue
            lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
            report = json.loads(lines[-1][len("RESULT "):]) if lines else None
            results.append(None if report is None else (report["at"] - cut_at, report["error"]))
    finally:
        subprocess.run([HOSTS_SCRIPT, "heal", "1", rig], check=True)
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=60, help="the groups' timeout in seconds")
    parser.add_argument("--backends", nargs="+", default=["ucxcoll", "gloo"])
    args = parser.parse_args()
    rig = f"ucxl{os.getpid()}"
    subprocess.run([HOSTS_SCRIPT, "up", "2", rig], check=True)
    try:
        print(f"# 2 simulated hosts x 2 ranks, 8 B all_reduce loop, group timeout {args.timeout:g} s; host 1's "
              "link cut")
        print("| backend | rank | seconds to its error | error |")
        print("|---|---|---|---|", flush=True)
        for backend in args.backends:
            for rank, result in enumerate(measure(backend, rig, args.timeout)):
                seconds, error = result if result else (None, "none: still waiting, killed")
                shown = "-" if seconds is None else f"{seconds:.1f}"
                # What follows "failed: " says why; the rest is the operation.
                why = error.split(" failed: ", 1)[-1]
                print(f"| {backend} | {rank} | {shown} | {why[:110].replace('|', '/')} |", flush=True)
    finally:
        subprocess.run([HOSTS_SCRIPT, "down", rig])


if __name__ == "__main__":
    main()
