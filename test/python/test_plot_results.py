"""benchmarks/plot_results.py: the report's tables say what the JSON says,
and every operation gets a plot that is a real PNG (matplotlib is pinned in
requirements.txt, so this runs wherever the tests do)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "plot_results.py"


def result(hosts: int = 1, rails: int = 1) -> dict:
    rows = []
    for operation in ("all_reduce", "broadcast"):
        for size, ucx_us, gloo_us in ((8, 9.5, 150.25), (4096, 20.0, 400.0), (1 << 20, 300.0, 1200.0)):
            rows.append({"operation": operation, "bytes": size, "world_size": 2, "device": "cpu",
                         "ucxcoll": {"median_us": ucx_us, "busbw_gbps": size / ucx_us / 1e3, "iterations": 10},
                         "gloo": {"median_us": gloo_us, "busbw_gbps": size / gloo_us / 1e3, "iterations": 10},
                         "speedup": gloo_us / ucx_us, "copy_gbps": 12.5})
    return {"world_size": 2 * hosts, "hosts": hosts, "torch": "2.15.0",
            "link": None if hosts == 1 else
            {"tcp_stream_gbps": 1.25, "tcp_one_way_us": 4.5} if rails == 1 else
            {"tcp_stream_gbps": 0.096, "tcp_one_way_us": 30.0, "rails": 2, "rail_stream_gbps": [0.048, 0.048],
             "rate": "400mbit"},
            "machine": {"cpu": "Test CPU", "cores": 2, "commit": "abc1234", "date": "2026-12-07 00:00 UTC"},
            "rows": rows}


def test_report_tables_and_plots_come_from_the_json(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (requirements.txt pins it)")
    from PIL import Image

    names = (("one_host", 1, 1), ("two_hosts", 2, 1), ("two_rails", 2, 2))
    for name, hosts, rails in names:
        (tmp_path / f"{name}.json").write_text(json.dumps(result(hosts, rails)))
    report = tmp_path / "RESULTS.md"
    plots = tmp_path / "plots"
    done = subprocess.run([sys.executable, str(SCRIPT), *(str(tmp_path / f"{name}.json") for name, _, _ in names),
                           "--plots", str(plots), "--markdown", str(report)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = report.read_text()
    lines = text.splitlines()
    # One host: the bound is the memcpy in the row; two hosts: the link.
    assert "| all_reduce | 8 B | 9.5 | 150.2 | 0.00 | 0.00 | 12.50 | 15.82x |" in lines, text
    assert "| broadcast | 1 MiB | 300.0 | 1200.0 | 3.50 | 0.87 | 1.25 | 4.00x |" in lines, text
    assert "2 ranks on one machine, Test CPU (2 cores), torch 2.15.0, ucxcoll abc1234, 2026-12-07 00:00 UTC" in lines
    assert ("2 simulated hosts x 2 ranks (TCP stream 1.250 GB/s one way in all), Test CPU (2 cores), torch 2.15.0, "
            "ucxcoll abc1234, 2026-12-07 00:00 UTC") in lines, text
    # Two links, limited: the bound is both links' stream together.
    assert ("2 simulated hosts x 2 ranks, 2 links between the hosts limited to 400mbit each way (TCP stream 0.096 "
            "GB/s one way in all), Test CPU (2 cores), torch 2.15.0, ucxcoll abc1234, 2026-12-07 00:00 UTC") in lines, text
    assert "| broadcast | 1 MiB | 300.0 | 1200.0 | 3.50 | 0.87 | 0.10 | 4.00x |" in lines, text
    for name in ("one_host", "two_hosts", "two_rails"):
        for operation in ("all_reduce", "broadcast"):
            png = plots / f"{name}-{operation}.png"
            with Image.open(png) as image:
                assert image.format == "PNG" and image.size[0] > 500 and image.size[1] > 200, png
            assert f"![{png.name}](plots/{png.name})" in lines, text


def test_bench_small_json_gets_open_mpi_and_computed_bandwidth(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (requirements.txt pins it)")
    rows = [{"operation": "all_reduce", "bytes": size,
             "ucxcoll": {"median_us": 10.0, "p90_us": 12.0, "correct": True},
             "gloo": {"median_us": 200.0, "p90_us": 250.0, "correct": True},
             "fake_us": 4.0, "mpi": {"median_us": 1.0}, "bound_us": 7.0} for size in (8, 4096)]
    (tmp_path / "small.json").write_text(json.dumps({"nproc": 2, "cores": 2, "rows": rows}))
    report = tmp_path / "RESULTS.md"
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "small.json"), "--plots", str(tmp_path / "plots"),
                           "--markdown", str(report)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = report.read_text().splitlines()
    # Columns: ucxcoll, gloo, Open MPI us; their GB/s (2(n-1)/n x 4096 B / time); no bound; gloo / ucxcoll.
    assert "| operation | size | ucxcoll us | gloo us | Open MPI us | ucxcoll GB/s | gloo GB/s | Open MPI GB/s | " \
           "bound GB/s | gloo / ucxcoll |" in lines
    assert "| all_reduce | 4 KiB | 10.0 | 200.0 | 1.0 | 0.41 | 0.02 | 4.10 |  | 20.00x |" in lines
    assert (tmp_path / "plots" / "small-all_reduce.png").stat().st_size > 10000


def test_a_gpu_run_plots_nccl_beside_ucxcoll(tmp_path):
    """bench_collectives.py --device cuda writes nccl as the reference
    backend, and the machine's GPU: the report names both."""
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (requirements.txt pins it)")
    from PIL import Image

    rows = [{"operation": "all_reduce", "bytes": size, "world_size": 2, "device": "cuda",
             "ucxcoll": {"median_us": 30.0, "busbw_gbps": size / 30.0 / 1e3, "iterations": 10},
             "nccl": {"median_us": 25.0, "busbw_gbps": size / 25.0 / 1e3, "iterations": 10},
             "speedup": 25.0 / 30.0} for size in (8, 1 << 20)]
    gpu_run = {"world_size": 2, "hosts": 1, "link": None, "torch": "2.11.0",
               "machine": {"cpu": "Test CPU", "cores": 16, "gpu": "Test GPU", "commit": "abc1234",
                           "date": "2026-12-07 00:00 UTC"}, "rows": rows}
    (tmp_path / "gpu.json").write_text(json.dumps(gpu_run))
    report = tmp_path / "RESULTS.md"
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "gpu.json"), "--plots", str(tmp_path / "plots"),
                           "--markdown", str(report)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = report.read_text().splitlines()
    assert ("| operation | size | ucxcoll us | nccl us | ucxcoll GB/s | nccl GB/s | bound GB/s | nccl / ucxcoll |"
            in lines), lines
    assert "| all_reduce | 1 MiB | 30.0 | 25.0 | 34.95 | 41.94 |  | 0.83x |" in lines, lines
    assert ("2 ranks on one machine, CUDA tensors on Test GPU, Test CPU (16 cores), torch 2.11.0, ucxcoll abc1234, "
            "2026-12-07 00:00 UTC") in lines, lines
    with Image.open(tmp_path / "plots" / "gpu-all_reduce.png") as image:
        assert image.format == "PNG" and image.size[0] > 500, image.size
