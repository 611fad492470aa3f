"""Collective and point-to-point latency and bandwidth: ucxcoll and gloo
side by side (CPU tensors), or ucxcoll and nccl (--device cuda).

    python benchmarks/bench_collectives.py [--nproc 2] [--ops ...] [--sizes ...] [--json out.json] [--plot DIR]
    python benchmarks/bench_collectives.py --device cuda --nproc <GPUs>
    python benchmarks/bench_collectives.py --hosts 2 --nproc 2   (as root)
    python benchmarks/bench_collectives.py --hosts 2 --nproc 1 --rails 2 --link-rate 400mbit

With --hosts H the ranks run on H simulated hosts (scripts/hosts.sh:
network namespaces joined by a bridge, so that only TCP over the hosts'
veth links crosses between them), --nproc on each, placed as torchrun
places them (ranks 0..nproc-1 on host 0, ...); gloo uses the hosts' eth0.
The same run first measures the link itself between host 0 and host 1:
a plain TCP stream (GB/s, one way) and an 8-byte TCP ping-pong (us one
way), the bounds that the cross-host figures are read against.
--rails 2 gives each host a second link on a second switch (eth2;
scripts/hosts.sh rail) and both backends both interfaces
(UCXCOLL_NET_DEVICES==eth0,eth2, GLOO_SOCKET_IFNAME=eth0,eth2); the link is
then measured on each rail and the bound is their sum. --link-rate RATE
limits every link to RATE each way (tc tbf, e.g. 400mbit), so that the
links, not this machine's cores, bound the transfer.

With --device cuda each rank takes cuda:<rank> and joins a ucxcoll group and
an nccl group; ucxcoll hands CUDA tensors to torch's ProcessGroupNCCL, so the
two columns should agree within noise (what ucxcoll adds is one device check
per call). Each timed iteration ends with torch.cuda.synchronize().

Starts --nproc ranks on this machine (or runs as one rank under torchrun).
Every rank joins a ucxcoll group and a gloo group; each (operation, size)
runs on both in the same processes, on the same buffers. Per iteration the
ranks first meet in a barrier of the backend being measured, then every
rank times one operation; an iteration's time is its slowest rank's (the
root of a broadcast returns before the others have the data), and the
table shows the median after warm-up. A line on
stderr after each row says how many rows are done and about how long the
rest will take. Rank 0 also times one core's memcpy of each size, the
bound for the bandwidth on one host. --json (default
benchmarks/results/bench_collectives.json) keeps every figure with the
machine, versions and date; --plot DIR draws them (plot_results.py, which
also regenerates benchmarks/RESULTS.md from the JSON alone).

Operations: all_gather_into_tensor, all_gather, all_reduce,
reduce_scatter_tensor, all_to_all_single, and (root 0) broadcast, reduce,
gather, scatter, on every rank; and between ranks 0 and 1 (the others wait):
ping_pong (rank 0 sends, rank 1 sends it back; the time shown is half the
round trip; across hosts rank 0 and the first rank of host 1) and bidirectional (both isend and irecv at once; the time of
the exchange).

size      bytes per rank (the input of all_gather, gather, reduce_scatter
          and all_to_all; the buffer of all_reduce and reduce; each rank's
          output of scatter; the message of ping_pong/bidirectional)
busbw     bus bandwidth as nccl-tests define it: all_gather, gather and
          scatter move (n-1)/n x all ranks' bytes, all_reduce 2(n-1)/n x
          buffer, reduce_scatter and all_to_all (n-1)/n x input, broadcast
          and reduce the buffer; ping_pong: size / one-way time; bidirectional:
          2 x size / time
speedup   reference (gloo, or nccl for --device cuda) median / ucxcoll
          median (> 1: ucxcoll is faster)
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from plot_results import bus_factor, human

SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20, 64 << 20]
OPERATIONS = ["all_gather_into_tensor", "all_gather", "all_reduce", "reduce_scatter_tensor", "all_to_all_single",
              "broadcast", "reduce", "gather", "scatter", "ping_pong", "bidirectional"]


def iterations_for(size: int) -> tuple[int, int]:
    """(warm-up, timed) iterations: many for small sizes, few for large."""
    if size <= 32 << 10:
        return 20, 200
    if size <= 2 << 20:
        return 5, 40
    return 2, 8


def reference_backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def run_rank(args) -> None:
    import torch
    import torch.distributed as dist

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    dist.init_process_group("ucxcoll")  # env:// from the launcher
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    reference = reference_backend(args.device)
    # ping_pong and bidirectional: rank 0 and the first rank of the next
    # host (rank 1 on one host).
    partner = world // int(os.environ.get("BENCH_HOSTS", "1")) if int(os.environ.get("BENCH_HOSTS", "1")) > 1 else 1
    groups = {"ucxcoll": dist.group.WORLD, reference: dist.new_group(backend=reference)}
    rows = []
    total, started = len(args.ops) * len(args.sizes), time.monotonic()
    for operation in args.ops:
        for size in args.sizes:
            count = max(1, size // 4)
            if operation in ("reduce_scatter_tensor", "all_to_all_single"):
                count = max(world, count - count % world)  # whole blocks per rank
            tensor = torch.ones(count, dtype=torch.float32, device=device)
            output = torch.empty(world * count, dtype=torch.float32, device=device)
            outputs = [torch.empty(count, dtype=torch.float32, device=device) for _ in range(world)]
            row = {"operation": operation, "bytes": count * 4, "world_size": world, "device": args.device}
            incoming = torch.empty(count, dtype=torch.float32, device=device)
            for backend, group in groups.items():
                peer = {0: partner, partner: 0}.get(rank)
                if operation == "all_gather_into_tensor":
                    def step(): dist.all_gather_into_tensor(output, tensor, group=group)
                elif operation == "all_gather":
                    def step(): dist.all_gather(outputs, tensor, group=group)
                elif operation == "all_reduce":
                    def step(): dist.all_reduce(tensor, group=group)
                elif operation == "reduce_scatter_tensor":
                    block = torch.empty(count // world, dtype=torch.float32)
                    def step(): dist.reduce_scatter_tensor(block, tensor, group=group)
                elif operation == "all_to_all_single":
                    exchanged = torch.empty_like(tensor)
                    def step(): dist.all_to_all_single(exchanged, tensor, group=group)
                elif operation == "broadcast":
                    def step(): dist.broadcast(tensor, src=0, group=group)
                elif operation == "reduce":
                    def step(): dist.reduce(tensor, dst=0, group=group)
                elif operation == "gather":
                    def step(): dist.gather(tensor, outputs if rank == 0 else None, dst=0, group=group)
                elif operation == "scatter":
                    def step(): dist.scatter(incoming, outputs if rank == 0 else None, src=0, group=group)
                elif operation == "ping_pong":
                    def step():
                        if rank == 0:
                            dist.send(tensor, dst=partner, group=group)
                            dist.recv(incoming, src=partner, group=group)
                        elif rank == partner:
                            dist.recv(incoming, src=0, group=group)
                            dist.send(incoming, dst=0, group=group)
                else:  # bidirectional
                    def step():
                        if peer is not None:
                            works = [dist.isend(tensor, dst=peer, group=group), dist.irecv(incoming, src=peer, group=group)]
                            for work in works:
                                work.wait()
                warmup, timed = iterations_for(size)
                for _ in range(warmup):
                    step()
                    sync()
                times = []
                for _ in range(timed):
                    dist.barrier(group=group)
                    sync()
                    start = time.perf_counter()
                    step()
                    sync()
                    times.append(time.perf_counter() - start)
                # An iteration takes as long as its slowest rank: the root
                # of a broadcast or scatter may return long before the
                # others have their data (across hosts, 64 MiB in 31 ms
                # at the root where the link needs 1.4 s).
                slowest = torch.tensor(times, dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=groups["ucxcoll"])
                times = slowest.tolist()
                median = statistics.median(times)
                if operation == "ping_pong":
                    median /= 2  # one way
                factor = bus_factor(operation, world)
                row[backend] = {
                    "median_us": median * 1e6,
                    "busbw_gbps": factor * count * 4 / median / 1e9,
                    "iterations": timed,
                }
            row["speedup"] = row[reference]["median_us"] / row["ucxcoll"]["median_us"]
            if rank == 0 and args.device == "cpu":
                row["copy_gbps"] = copy_gbps(count * 4)
            rows.append(row)
            if rank == 0:
                print_row(row, flush=True)
                elapsed = time.monotonic() - started
                left = elapsed / len(rows) * (total - len(rows))
                print(f"[{len(rows)}/{total} rows, {elapsed:.0f} s so far, about {left:.0f} s left]", file=sys.stderr,
                      flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as out:
            json.dump({"world_size": world, "hosts": int(os.environ.get("BENCH_HOSTS", "1")),
                       "link": json.loads(os.environ.get("BENCH_LINK", "null")), "torch": torch.__version__,
                       "machine": machine(args.device), "rows": rows}, out, indent=1)
    dist.destroy_process_group()


def copy_gbps(size: int) -> float:
    """One core's memcpy bandwidth for `size` bytes (GB/s, median): the
    bound that bandwidth on one host is read against."""
    import torch

    source = torch.ones(max(1, size // 4), dtype=torch.float32)
    target = torch.empty_like(source)
    warmup, timed = iterations_for(size)
    times = []
    for index in range(warmup + timed):
        start = time.perf_counter()
        target.copy_(source)
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return source.numel() * 4 / statistics.median(times) / 1e9


def machine(device: str = "cpu") -> dict:
    """Where and when the run was: for the report (plot_results.py)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    where = {"cpu": cpu, "cores": os.cpu_count(), "commit": commit, "python": sys.version.split()[0],
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if device == "cuda":
        import torch

        where["gpu"] = torch.cuda.get_device_name()
    return where


def header(reference: str) -> str:
    return (f"| {'operation':<22} | {'size':>7} | {'ucxcoll us':>10} | {reference + ' us':>10} | "
            f"{'ucxcoll GB/s':>12} | {reference + ' GB/s':>9} | {'speedup':>7} |")


def print_row(row, flush=False) -> None:
    u, g = row["ucxcoll"], row[reference_backend(row["device"])]
    print(f"| {row['operation']:<22} | {human(row['bytes']):>7} | {u['median_us']:>10.1f} | {g['median_us']:>10.1f} | "
          f"{u['busbw_gbps']:>12.2f} | {g['busbw_gbps']:>9.2f} | {row['speedup']:>6.2f}x |", flush=flush)


HOSTS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "hosts.sh")
PROBE_PORT = 29533


def probe_server() -> None:
    """On host 1: answers the link probe (a ping-pong, then a stream it sinks)."""
    server = socket.create_server(("0.0.0.0", PROBE_PORT))
    print("listening", flush=True)
    connection, _ = server.accept()
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (message := connection.recv(8, socket.MSG_WAITALL)) != b"stream..":
        connection.sendall(message)
    buffer = bytearray(4 << 20)
    while connection.recv_into(buffer):
        pass
    connection.sendall(b"done")


def probe_client(address: str) -> None:
    """On host 0: measures the link to host 1 and prints it as JSON."""
    connection = socket.create_connection((address, PROBE_PORT))
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    round_trips = []
    for _ in range(2000):
        start = time.perf_counter()
        connection.sendall(b"pingpong")
        connection.recv(8, socket.MSG_WAITALL)
        round_trips.append(time.perf_counter() - start)
    connection.sendall(b"stream..")
    chunk = bytes(4 << 20)
    sent, start = 0, time.perf_counter()
    while time.perf_counter() - start < 3:
        connection.sendall(chunk)
        sent += len(chunk)
    connection.shutdown(socket.SHUT_WR)
    connection.recv(4, socket.MSG_WAITALL)
    elapsed = time.perf_counter() - start
    print(json.dumps({"tcp_stream_gbps": sent / elapsed / 1e9,
                      "tcp_one_way_us": statistics.median(round_trips[200:]) / 2 * 1e6}), flush=True)


RAIL_ADDRESSES = ["10.231.0.2", "10.232.0.2"]  # host 1 on eth0 and on eth2 (scripts/hosts.sh)


def measure_rail(rig: str, address: str) -> dict:
    run_on = lambda host, *command: [HOSTS_SCRIPT, "run", str(host), rig, "--", sys.executable, __file__, *command]
    server = subprocess.Popen(run_on(1, "--probe-server"), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        result = subprocess.run(run_on(0, "--probe-client", address), capture_output=True, text=True,
                                check=True, timeout=60)
        return json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        server.wait(timeout=30)


def measure_link(rig: str, rails: int, rate: str | None) -> dict:
    """The link between host 0 and host 1: each rail measured alone, the
    stream bound their sum."""
    measured = [measure_rail(rig, address) for address in RAIL_ADDRESSES[:rails]]
    return {"tcp_stream_gbps": sum(rail["tcp_stream_gbps"] for rail in measured),
            "tcp_one_way_us": measured[0]["tcp_one_way_us"], "rails": rails,
            "rail_stream_gbps": [rail["tcp_stream_gbps"] for rail in measured], "rate": rate}


def launch(args) -> int:
    hosts = max(1, args.hosts)
    world = args.nproc * hosts
    rig = f"ucxb{os.getpid()}"
    if args.hosts:
        subprocess.run([HOSTS_SCRIPT, "up", str(hosts), rig], check=True)
    try:
        for host in range(hosts if args.hosts else 0):
            if args.rails == 2:
                subprocess.run([HOSTS_SCRIPT, "rail", str(host), rig], check=True)
            if args.link_rate:
                subprocess.run([HOSTS_SCRIPT, "shape", str(host), args.link_rate, rig], check=True)
        store_address = "10.231.0.1" if args.hosts else "127.0.0.1"
        link = measure_link(rig, args.rails, args.link_rate) if args.hosts else None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        where = f"{hosts} simulated hosts x {args.nproc} ranks" if args.hosts else f"{args.nproc} ranks on one machine"
        print(f"# {where} ({args.device} tensors); median of timed iterations after warm-up")
        if link:
            rails = "" if link["rails"] == 1 else \
                f" over {link['rails']} rails together ({', '.join(f'{g:.3f}' for g in link['rail_stream_gbps'])})"
            shaped = f", each link limited to {link['rate']} each way" if link["rate"] else ""
            print(f"# the link between two hosts: TCP stream {link['tcp_stream_gbps']:.3f} GB/s one way{rails}, "
                  f"8 B TCP ping-pong {link['tcp_one_way_us']:.1f} us one way{shaped}")
        table_header = header(reference_backend(args.device))
        print(table_header)
        print("|" + "|".join("-" * (len(c)) for c in table_header.split("|")[1:-1]) + "|", flush=True)
        procs = []
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % args.nproc),
                       LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR=store_address, MASTER_PORT=str(port),
                       BENCH_HOSTS=str(hosts), BENCH_LINK=json.dumps(link))
            command = [sys.executable, __file__, "--worker", "--device", args.device, "--ops", *args.ops,
                       "--sizes", *map(str, args.sizes), "--json", os.path.abspath(args.json) if args.json else ""]
            if args.hosts:
                env["GLOO_SOCKET_IFNAME"] = "eth0" if args.rails == 1 else "eth0,eth2"
                if args.rails == 2:
                    env["UCXCOLL_NET_DEVICES"] = "=eth0,eth2"
                command = [HOSTS_SCRIPT, "run", str(rank // args.nproc), rig, "--", *command]
            procs.append(subprocess.Popen(command, env=env))
        failed = max(proc.wait() for proc in procs)
        if not failed and args.plot and args.json:
            import plot_results

            with open(args.json) as source:
                result = json.load(source)
            label = os.path.splitext(os.path.basename(args.json))[0]
            for png in plot_results.plot(result, label, args.plot):
                print(f"# plot: {png}")
        return failed
    finally:
        if args.hosts:
            subprocess.run([HOSTS_SCRIPT, "down", rig])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="tensors on the CPU (reference: gloo) or on cuda:<rank> (reference: nccl)")
    parser.add_argument("--ops", nargs="+", default=OPERATIONS, choices=OPERATIONS)
    parser.add_argument("--sizes", nargs="+", type=int, default=SIZES)
    parser.add_argument("--json", default="benchmarks/results/bench_collectives.json",
                        help="where to write the results ('' for nowhere)")
    parser.add_argument("--plot", metavar="DIR",
                        help="also write PNG plots of the results there (needs matplotlib; plot_results.py)")
    parser.add_argument("--hosts", type=int, default=0,
                        help="run on this many simulated hosts, --nproc ranks each (root; scripts/hosts.sh)")
    parser.add_argument("--rails", type=int, default=1, choices=[1, 2],
                        help="with --hosts: links between each pair of hosts (2: a second switch, eth2)")
    parser.add_argument("--link-rate", metavar="RATE",
                        help="with --hosts: limit every link to RATE each way (tc tbf rate, e.g. 400mbit)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe-client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe_server:
        probe_server()
        return
    if args.probe_client:
        probe_client(args.probe_client)
        return
    if args.worker or "TORCHELASTIC_RUN_ID" in os.environ:
        run_rank(args)
        return
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    sys.exit(launch(args))


if __name__ == "__main__":
    main()
