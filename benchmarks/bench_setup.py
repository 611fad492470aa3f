"""Group setup on one host: init_process_group and a new_group on ucxcoll
and gloo, time and store operations per rank, in one run.

    python benchmarks/bench_setup.py [--nproc 16] [--repeat 3] [--backends ucxcoll gloo]
                                     [--label NAME --ucxcoll-path DIR] [--json out.json]

For each backend, --nproc ranks (processes) share one TCPStore. Each
repetition gets a fresh part of it (a PrefixStore) behind a store that
counts every operation a rank makes (torch's own included, such as its
store-based barrier), and starts on a signal in the store, so that every
rank starts its init_process_group at the same moment. Then a new_group of
the first half of the ranks, whose all_reduce is checked, and
destroy_process_group. A row gives, as the median over the repetitions,
the time until the slowest rank's init_process_group returned (from the
common start), the slowest rank's new_group call, the most store
operations any rank made in each, and all ranks' store operations and
the bytes all ranks read from the store (the values its gets returned)
for init.

--ucxcoll-path DIR puts DIR first on the ranks' PYTHONPATH (a checkout's
torch_ext with its own build of ucxcoll._C), to measure another build of
ucxcoll in the same run; --label names its rows.

With more ranks than cores (16 ranks on 2 cores) most of the time is the
ranks waiting for a core; the store operations are what does not depend on
the machine.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta


def run_rank(args) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from counting_store import CountingStore

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    tcp = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world, is_master=rank == 0,
                        timeout=timedelta(seconds=300))
    half = list(range(max(1, world // 2)))
    for repetition in range(args.repeat):
        store = CountingStore(dist.PrefixStore(f"run{repetition}/", tcp))
        if tcp.add(f"ready{repetition}", 1) == world:
            tcp.set(f"go{repetition}", "1")
        tcp.wait([f"go{repetition}"])
        started = time.monotonic()
        dist.init_process_group(args.backend, store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=300))
        init_done = time.monotonic()
        store.phase = "new_group"
        group = dist.new_group(half)
        new_group_done = time.monotonic()
        if rank in half:
            value = torch.ones(1)
            dist.all_reduce(value, group=group)
            assert value.item() == len(half), value
        store.phase = "after"
        dist.destroy_process_group()
        result = dict(init=init_done - started, new_group=new_group_done - init_done,
                      init_ops=store.counts.get("init", 0), new_group_ops=store.counts.get("new_group", 0),
                      init_bytes=store.bytes_read.get("init", 0))
        tcp.set(f"result{repetition}/{rank}", json.dumps(result))
    if rank == 0:
        rows = []
        for repetition in range(args.repeat):
            results = [json.loads(tcp.get(f"result{repetition}/{r}")) for r in range(world)]
            rows.append(dict(init=max(r["init"] for r in results),
                             new_group=max(r["new_group"] for r in results),
                             init_ops=max(r["init_ops"] for r in results),
                             new_group_ops=max(r["new_group_ops"] for r in results),
                             init_ops_total=sum(r["init_ops"] for r in results),
                             init_bytes_total=sum(r.get("init_bytes", 0) for r in results)))
        print("ROWS " + json.dumps(rows), flush=True)
    # Rank 0 holds the store: it leaves last.
    if tcp.add("finished", 1) < world and rank == 0:
        while int(tcp.add("finished", 0)) < world:
            time.sleep(0.05)


def launch(args, backend: str, path: str | None) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if path:
            env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--backend", backend,
                   "--repeat", str(args.repeat)]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True))
    outputs = [proc.communicate()[0] for proc in procs]
    if any(proc.returncode != 0 for proc in procs):
        raise SystemExit(f"{backend}: a rank failed (exit codes {[proc.returncode for proc in procs]})")
    for line in outputs[0].splitlines():
        if line.startswith("ROWS "):
            return json.loads(line[5:])
    raise SystemExit(f"{backend}: rank 0 reported nothing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["ucxcoll", "gloo"])
    parser.add_argument("--ucxcoll-path", help="another build of ucxcoll (a torch_ext directory), measured too")
    parser.add_argument("--label", default="other build", help="name of the --ucxcoll-path rows")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_rank(args)
        return
    runs = [(backend, backend, None) for backend in args.backends]
    if args.ucxcoll_path:
        runs.insert(1, (f"ucxcoll ({args.label})", "ucxcoll", args.ucxcoll_path))
    print(f"{args.nproc} ranks on {os.cpu_count()} cores, {args.repeat} repetitions (median; time until the slowest "
          "rank returned, from a common start)", flush=True)
    print(f"{'backend':28s} {'init s':>8s} {'new_group s':>12s} {'store ops/rank init':>20s} "
          f"{'new_group':>10s} {'init, all ranks':>16s} {'KiB read, all ranks':>20s}", flush=True)
    report = {}
    for label, backend, path in runs:
        if sys.stdout.isatty():
            print(f"{label:28s} ... ({args.nproc} processes, {args.repeat} repetitions)", end="\r", flush=True)
        rows = launch(args, backend, path)
        median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        report[label] = rows
        print(f"{label:28s} {median['init']:8.3f} {median['new_group']:12.3f} "
              f"{median['init_ops']:20.0f} {median['new_group_ops']:10.0f} {median['init_ops_total']:16.0f} "
              f"{median['init_bytes_total'] / 1024:20.1f}",
              flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(dict(nproc=args.nproc, repeat=args.repeat, runs=report), out, indent=1)


if __name__ == "__main__":
    main()
