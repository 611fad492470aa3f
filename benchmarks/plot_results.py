"""Plots and a Markdown report from the JSON that bench_collectives.py
writes, so that a table and its plot always come from the same numbers.

    python benchmarks/plot_results.py RESULT.json [RESULT.json ...] [--plots DIR] [--markdown FILE]

For each JSON file and each operation in it, one PNG under --plots
(default: benchmarks/results/plots) named <label>-<operation>.png, where
the label is the file's name without .json: median latency (us) and bus
bandwidth (GB/s) against message size, log-log, one line per backend
(ucxcoll, gloo or nccl, and any other backend the rows carry, such as Open
MPI), and as a dashed line the bound the bandwidth is read against: one
core's memcpy at that size on one host (measured in the same run), or the
TCP stream between two simulated hosts. With --markdown, a report with
the machine, the versions, the date, every table and its plots. Needs
matplotlib for the plots (an optional dependency: pip install matplotlib).
"""

import argparse
import json
import os
import textwrap

# Backends in the order they are drawn and listed; others follow by name.
KNOWN_BACKENDS = ["ucxcoll", "gloo", "nccl", "mpi"]
BACKEND_LABELS = {"ucxcoll": "ucxcoll", "gloo": "gloo", "nccl": "nccl", "mpi": "Open MPI"}


def bus_factor(operation: str, world: int) -> float:
    """Bus bandwidth over size / time, as nccl-tests define it."""
    if operation in ("ping_pong", "reduce", "broadcast"):
        return 1
    if operation == "bidirectional":
        return 2
    if operation == "all_reduce":
        return 2 * (world - 1) / world
    if operation in ("reduce_scatter_tensor", "all_to_all_single"):
        return (world - 1) / world
    return world - 1  # all_gather, gather, scatter


def normalized(result: dict) -> dict:
    """bench_small.py's JSON (nproc; rows with p50s, fake_us and an mpi
    entry, no bandwidth) in bench_collectives.py's shape."""
    if "world_size" not in result and "nproc" in result:
        result = dict(result, world_size=result["nproc"], hosts=1)
    for row in result["rows"]:
        for value in row.values():
            if isinstance(value, dict) and "median_us" in value and "busbw_gbps" not in value:
                factor = bus_factor(row["operation"], result["world_size"])
                value["busbw_gbps"] = factor * row["bytes"] / (value["median_us"] * 1e-6) / 1e9
    return result


def human(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def backends_of(rows: list) -> list:
    present = {key for row in rows for key, value in row.items() if isinstance(value, dict) and "median_us" in value}
    return [b for b in KNOWN_BACKENDS if b in present] + sorted(present - set(KNOWN_BACKENDS))


def operations_of(rows: list) -> list:
    seen = []
    for row in rows:
        if row["operation"] not in seen:
            seen.append(row["operation"])
    return seen


def bound_of(result: dict, row: dict):
    """(GB/s, label) the bandwidth of `row` is read against, or None."""
    if result.get("hosts", 1) > 1 and result.get("link"):
        link = result["link"]
        rails = link.get("rails", 1)
        return link["tcp_stream_gbps"], "TCP link between hosts" if rails == 1 else f"{rails} TCP links between hosts"
    if "copy_gbps" in row:
        return row["copy_gbps"], "memcpy, one core"
    return None


def describe(result: dict) -> str:
    machine = result.get("machine", {})
    hosts = result.get("hosts", 1)
    where = (f"{hosts} simulated hosts x {result['world_size'] // hosts} ranks" if hosts > 1
             else f"{result['world_size']} ranks on one machine")
    link = result.get("link") or {}
    if link.get("rails", 1) > 1:
        where += f", {link['rails']} links between the hosts"
    if link.get("rate"):
        where += f" limited to {link['rate']} each way"
    if link:
        where += f" (TCP stream {link['tcp_stream_gbps']:.3f} GB/s one way in all)"
    if any(row.get("device") == "cuda" for row in result["rows"]):
        where += ", CUDA tensors" + (f" on {machine['gpu']}" if machine.get("gpu") else "")
    parts = [where]
    if machine.get("cpu"):
        parts.append(f"{machine['cpu']} ({machine.get('cores', '?')} cores)")
    parts.append(f"torch {result.get('torch', '?')}")
    if machine.get("commit"):
        parts.append(f"ucxcoll {machine['commit']}")
    if machine.get("date"):
        parts.append(machine["date"])
    return ", ".join(parts)


def plot(result: dict, label: str, directory: str) -> list:
    """Writes one PNG per operation; returns their paths."""
    result = normalized(result)
    try:
        import matplotlib
    except ImportError as missing:
        raise SystemExit("plotting needs matplotlib (an optional dependency): pip install matplotlib") from missing
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    rows = result["rows"]
    written = []
    for operation in operations_of(rows):
        mine = sorted((row for row in rows if row["operation"] == operation), key=lambda row: row["bytes"])
        sizes = [row["bytes"] for row in mine]
        figure, (latency, bandwidth) = plt.subplots(1, 2, figsize=(11, 4.2))
        for backend in backends_of(mine):
            points = [(row["bytes"], row[backend]) for row in mine if backend in row]
            style = {"marker": "o", "linewidth": 2 if backend == "ucxcoll" else 1.3}
            latency.plot([p[0] for p in points], [p[1]["median_us"] for p in points],
                         label=BACKEND_LABELS.get(backend, backend), **style)
            bandwidth.plot([p[0] for p in points], [p[1]["busbw_gbps"] for p in points],
                           label=BACKEND_LABELS.get(backend, backend), **style)
        if all("fake_us" in row for row in mine):
            latency.plot(sizes, [row["fake_us"] for row in mine], linestyle="--", color="gray",
                         label="torch's own dispatch (fake backend)")
        bounds = [bound_of(result, row) for row in mine]
        if all(bounds):
            bandwidth.plot(sizes, [b[0] for b in bounds], linestyle="--", color="gray", label=bounds[0][1])
        for axes, what in ((latency, "median latency (us)"), (bandwidth, "bus bandwidth (GB/s)")):
            axes.set_xscale("log", base=2)
            axes.set_yscale("log")
            axes.set_xticks(sizes)
            axes.set_xticklabels([human(size) for size in sizes], rotation=45, ha="right")
            axes.set_xlabel("message size (bytes per rank)")
            axes.set_ylabel(what)
            axes.grid(True, which="major", alpha=0.3)
            axes.legend(fontsize=8, framealpha=0.85)
        figure.suptitle(textwrap.fill(f"{operation}: {describe(result)}", 130), fontsize=10)
        figure.tight_layout()
        path = os.path.join(directory, f"{label}-{operation}.png")
        figure.savefig(path, dpi=90)
        plt.close(figure)
        written.append(path)
    return written


def table(result: dict) -> str:
    """The rows as a Markdown table: each backend's median and bus
    bandwidth, the bound, and the reference backend's time over ucxcoll's."""
    result = normalized(result)
    rows = result["rows"]
    backends = backends_of(rows)
    reference = next((b for b in backends if b != "ucxcoll"), None)
    head = ["operation", "size"] + [f"{BACKEND_LABELS.get(b, b)} us" for b in backends]
    head += [f"{BACKEND_LABELS.get(b, b)} GB/s" for b in backends] + ["bound GB/s"]
    if reference:
        head.append(f"{BACKEND_LABELS.get(reference, reference)} / ucxcoll")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for row in rows:
        cells = [row["operation"], human(row["bytes"])]
        cells += [f"{row[b]['median_us']:.1f}" if b in row else "" for b in backends]
        cells += [f"{row[b]['busbw_gbps']:.2f}" if b in row else "" for b in backends]
        bound = bound_of(result, row)
        cells.append(f"{bound[0]:.2f}" if bound else "")
        if reference:
            ratio = row[reference]["median_us"] / row["ucxcoll"]["median_us"] if reference in row else None
            cells.append(f"{ratio:.2f}x" if ratio else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(results: list, plots: dict, path: str, command: str) -> None:
    """Writes the report: per JSON file, where and what ran, the table, the plots."""
    out = ["# Benchmark results", "",
           "Generated by `benchmarks/plot_results.py` from the JSON that `benchmarks/bench_collectives.py` wrote; "
           "do not edit by hand. Regenerate with:", "", "```", command, "```", "",
           "Latency is the median of the timed iterations after warm-up, each after a barrier and as long as its "
           "slowest rank; bus bandwidth as "
           "nccl-tests define it (bench_collectives.py says how per operation); the bound is one core's memcpy "
           "at that size on one host, or the TCP stream between two simulated hosts; the last column is the "
           "reference backend's time over ucxcoll's (above 1: ucxcoll is faster).", ""]
    directory = os.path.dirname(os.path.abspath(path))
    for label, result in results:
        out += [f"## {label}", "", describe(result), "", table(result), ""]
        for png in plots.get(label, []):
            out.append(f"![{os.path.basename(png)}]({os.path.relpath(os.path.abspath(png), directory)})")
        out.append("")
    with open(path, "w") as report:
        report.write("\n".join(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="JSON files from bench_collectives.py")
    parser.add_argument("--plots", default="benchmarks/results/plots", help="where the PNGs go")
    parser.add_argument("--markdown", help="write the report here (e.g. benchmarks/RESULTS.md)")
    parser.add_argument("--no-plots", action="store_true", help="only the report's tables")
    args = parser.parse_args()
    results, plots = [], {}
    for path in args.results:
        with open(path) as source:
            result = normalized(json.load(source))
        label = os.path.splitext(os.path.basename(path))[0]
        results.append((label, result))
        if not args.no_plots:
            plots[label] = plot(result, label, args.plots)
            for png in plots[label]:
                print(png)
    if args.markdown:
        command = "python benchmarks/plot_results.py " + " ".join(args.results) + f" --plots {args.plots} --markdown {args.markdown}"
        markdown(results, plots, args.markdown, command)
        print(args.markdown)


if __name__ == "__main__":
    main()
