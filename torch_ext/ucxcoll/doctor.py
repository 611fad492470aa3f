"""Environment check: ``python -m ucxcoll.doctor``.

Prints what decides how ucxcoll behaves on this machine (versions, the UCX
library in use, whether single-copy CMA and shared memory are usable) and
runs a 2-rank self-test over UCX. Exit code 0 when the self-test passes.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _facts() -> list[tuple[str, str]]:
    import torch

    import ucxcoll
    from ucxcoll import _C

    facts = [
        ("ucxcoll", f"{ucxcoll.__version__} ({os.path.dirname(ucxcoll.__file__)})"),
        ("torch", torch.__version__),
        ("UCX (loaded)", _C.ucx_version()),
        ("UCX library", _ucx_library_path() or "unknown"),
        ("CPU cores", str(os.cpu_count())),
    ]
    ptrace = _read("/proc/sys/kernel/yama/ptrace_scope")
    if ptrace is None:
        facts.append(("CMA single-copy", "usable (no Yama ptrace restriction)"))
    elif ptrace == "0":
        facts.append(("CMA single-copy", "usable (ptrace_scope=0)"))
    else:
        facts.append(("CMA single-copy", f"restricted (ptrace_scope={ptrace}): UCX falls back to copies via shared memory"))
    shm = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
    facts.append(("/dev/shm", f"{shm.free >> 20} MiB free of {shm.total >> 20} MiB" if shm else "missing"))
    for name in ("UCX_TLS", "UCX_NET_DEVICES", "UCXCOLL_NET_DEVICES", "UCXCOLL_LOG_LEVEL", "UCXCOLL_SPIN_US"):
        if os.environ.get(name):
            facts.append((name, os.environ[name]))
    return facts


def _ucx_library_path() -> str | None:
    maps = _read("/proc/self/maps") or ""
    for line in maps.splitlines():
        path = line.split()[-1]
        if os.path.basename(path).startswith("libucp.so"):
            return os.path.realpath(path)
    return None


def _self_test_rank(rank: int, store_path: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("ucxcoll", init_method=f"file://{store_path}", rank=rank, world_size=2)
    tensor = torch.full((1 << 20,), float(rank + 1))
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.full_like(tensor, 3.0)), "all_reduce gave a wrong result"
    gathered = [torch.empty(4) for _ in range(2)]
    dist.all_gather(gathered, torch.full((4,), float(rank)))
    assert all(torch.equal(gathered[r], torch.full((4,), float(r))) for r in range(2)), "all_gather gave a wrong result"
    small = torch.ones(1)
    start = time.perf_counter()
    for _ in range(100):
        dist.all_reduce(small)
    latency = (time.perf_counter() - start) / 100 * 1e6
    if rank == 0:
        print(f"self-test: 2 ranks, all_reduce and all_gather correct; small all_reduce {latency:.0f} us")
    dist.destroy_process_group()


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--rank":
        _self_test_rank(int(sys.argv[2]), sys.argv[3])
        return 0
    for name, value in _facts():
        print(f"{name + ':':18s}{value}")
    with tempfile.TemporaryDirectory(prefix="ucxcoll-doctor-") as workdir:
        store = os.path.join(workdir, "store")
        procs = [
            subprocess.Popen([sys.executable, "-m", "ucxcoll.doctor", "--rank", str(rank), store])
            for rank in range(2)
        ]
        try:
            codes = [proc.wait(timeout=120) for proc in procs]
        except subprocess.TimeoutExpired:
            for proc in procs:
                proc.kill()
            print("self-test: FAILED (no answer within 120 s)")
            return 1
    if any(codes):
        print(f"self-test: FAILED (exit codes {codes}); rerun with UCXCOLL_LOG_LEVEL=debug UCX_LOG_LEVEL=info")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
