"""Whole-process scenarios, one per subcommand, run by test_scenarios.py:

    python scenarios.py SCENARIO RANK WORLD PORT WORKDIR

Each rank prints one line "RESULT <json>" that the test reads. Like
rank_checks.py, this never imports ucxcoll.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def report(**values) -> None:
    print("RESULT " + json.dumps(values), flush=True)


def init(rank: int, world: int, port: int, timeout_seconds: float | None = None, backend: str = "ucxcoll") -> None:
    """init_process_group over a TCP store on this machine."""
    extra = {} if timeout_seconds is None else {"timeout": timedelta(seconds=timeout_seconds)}
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, **extra)


def repeat_init(rank: int, world: int, port: int, workdir: str) -> None:
    """init/destroy three times in one process, alternating file:// and
    tcp:// stores, with a subgroup each time."""
    sums = []
    for round_ in range(3):
        if round_ % 2 == 0:
            init_method = f"file://{workdir}/store{round_}"
        else:
            init_method = f"tcp://127.0.0.1:{port + round_}"
        dist.init_process_group("ucxcoll", init_method=init_method, rank=rank, world_size=world)
        tensor = torch.full((10,), float(rank + round_))
        dist.all_reduce(tensor)
        subgroup = dist.new_group([0, 1], backend="ucxcoll")
        if rank in (0, 1):
            dist.all_reduce(tensor, group=subgroup)
        dist.barrier()
        sums.append(tensor[0].item())
        dist.destroy_process_group()
    report(sums=sums)


def ddp(rank: int, world: int, port: int, workdir: str) -> None:
    """The same DDP training on ucxcoll and on gloo, from the same seeds:
    once with DDP's built-in all-reduce, once with the fp16 compression
    hook, a Python comm hook whose .then() callback runs when ucxcoll
    completes the collective's future."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from ddp_train import train

    differences = {}
    for offset, (variant, hook) in enumerate([("plain", None), ("fp16_hook", default_hooks.fp16_compress_hook)]):
        params = {}
        for backend_offset, backend in enumerate(["ucxcoll", "gloo"]):
            init(rank, world, port + 2 * offset + backend_offset, backend=backend)
            params[backend] = train(steps=8, backend=backend, comm_hook=hook)
            dist.destroy_process_group()
        differences[variant] = {
            "max_abs_difference": (params["ucxcoll"] - params["gloo"]).abs().max().item(),
            "scale": params["gloo"].abs().max().item(),
        }
    report(**differences)


def idle_cpu(rank: int, world: int, port: int, workdir: str) -> None:
    """CPU seconds a rank uses while its group sits idle for 3 s."""
    init(rank, world, port)
    tensor = torch.ones(1000)
    dist.all_reduce(tensor)  # engine up, endpoints wired
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall_before = time.monotonic()
    time.sleep(3.0)
    after = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.monotonic() - wall_before
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    dist.all_reduce(tensor)  # still works after sleeping
    dist.destroy_process_group()
    report(cpu_seconds=cpu, wall_seconds=wall, value=tensor[0].item())


def dead_peer(rank: int, world: int, port: int, workdir: str) -> None:
    """The last rank dies after the first collective; the others must get
    an error naming it within the group timeout, then shut down cleanly."""
    init(rank, world, port, timeout_seconds=3)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if rank == world - 1:
        report(died=True)
        os._exit(0)  # no destroy, no goodbye: as a crash would
    errors = []
    for big in (False, True):  # eager and rendezvous (CMA) messages
        started = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1 << 20 if big else 4))
        except dist.DistBackendError as error:
            errors.append({"message": str(error), "seconds": time.monotonic() - started})
    started = time.monotonic()
    dist.destroy_process_group()
    report(errors=errors, destroy_seconds=time.monotonic() - started)


def leaving(rank: int, world: int, port: int, workdir: str) -> None:
    """Run with every peer treated as on another host
    (UCXCOLL_PEERS_ON_OTHER_HOSTS=1: TCP connections that report their
    end). First, 30 fresh groups, each one all_reduce and then
    destroy_process_group at once, with no barrier between: a rank that
    finishes first and leaves must not fail a peer still in the
    all_reduce. Then the last rank leaves a group while the others wait for
    it in an all_reduce: they must raise, naming it, long before the
    deadline."""
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=60))
    failures = []
    for round_ in range(30):
        dist.init_process_group("ucxcoll", store=dist.PrefixStore(f"round{round_}", store), rank=rank,
                                world_size=world, timeout=timedelta(seconds=20))
        tensor = torch.full((3,), float(rank + round_))
        try:
            dist.all_reduce(tensor)
            expected = float(sum(range(world)) + world * round_)
            if tensor.tolist() != [expected] * 3:
                failures.append(f"round {round_}: {tensor.tolist()} where {expected} was expected")
        except Exception as error:
            failures.append(f"round {round_}: {type(error).__name__}: {error}")
        dist.destroy_process_group()
        store.set(f"done{round_}/{rank}", "1")
        store.wait([f"done{round_}/{peer}" for peer in range(world)])
    dist.init_process_group("ucxcoll", store=dist.PrefixStore("leave", store), rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    if rank == world - 1:
        store.wait([f"waiting/{peer}" for peer in range(world - 1)])
        time.sleep(0.5)  # the others are inside their all_reduce by now
        if os.environ.get("UCXCOLL_TEST_LEAVE") == "abort":
            dist.distributed_c10d._abort_process_group()
        else:
            dist.destroy_process_group()
        report(failures=failures)
        return
    store.set(f"waiting/{rank}", "1")
    started = time.monotonic()
    error = None
    try:
        dist.all_reduce(torch.ones(3))
    except dist.DistBackendError as raised:
        error = str(raised)
    seconds = time.monotonic() - started
    dist.destroy_process_group()
    report(failures=failures, error=error, seconds=seconds)


def leaving_threads(rank: int, world: int, port: int, workdir: str) -> None:
    """Three ranks as threads of this one process (as torchft's tests run
    them), each with a backend made directly, as a wrapper of its own
    makes it. For each way of leaving (shutdown(), abort(), dropping the
    last reference) and each pending operation (an all_reduce, a recv from
    the leaver), the last rank leaves while the others wait: each reports
    what it raised and after how long. Then a round where the last rank
    leaves right after the all_reduce completed everywhere, which must fail
    nobody."""
    import gc

    from torch._C._distributed_c10d import _DistributedBackendOptions

    from ucxcoll import _C

    ranks = 3
    store = dist.HashStore()
    results = {}

    def make(prefix: str, member: int):
        options = _DistributedBackendOptions()
        options.store = dist.PrefixStore(prefix, store)
        options.group_rank = member
        options.group_size = ranks
        options.timeout = timedelta(seconds=60)
        options.group_id = prefix
        options.global_ranks_in_group = list(range(ranks))
        return _C.create_backend(options)

    def round_(prefix: str, way: str, pending: str) -> None:
        waiting = threading.Barrier(ranks)
        outcome = {}

        def rank_thread(member: int) -> None:
            backend = make(prefix, member)
            if way == "after":
                backend.allreduce([torch.ones(3)]).wait()
            waiting.wait()
            if member == ranks - 1:
                time.sleep(0.3)  # the others are waiting by now
                if way == "shutdown":
                    backend.shutdown()
                elif way == "abort":
                    backend.abort()
                else:  # "release", "after": the last reference goes away
                    del backend
                    gc.collect()
                return
            started = time.monotonic()
            try:
                if way == "after":
                    value = torch.ones(3)
                    backend.allreduce([value]).wait()  # a new one: must fail
                elif pending == "all_reduce":
                    backend.allreduce([torch.ones(3)]).wait()
                else:
                    backend.recv([torch.empty(3)], ranks - 1, 0).wait()
                outcome[member] = {"error": None}
            except Exception as error:  # noqa: BLE001 - the report names the type
                outcome[member] = {"type": type(error).__name__, "error": str(error),
                                   "seconds": time.monotonic() - started}
            backend.shutdown()

        threads = [threading.Thread(target=rank_thread, args=(member,)) for member in range(ranks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        results[f"{way}/{pending}"] = outcome

    for way in ("shutdown", "abort", "release"):
        for pending in ("all_reduce", "recv"):
            round_(f"{way}-{pending}", way, pending)
    round_("after", "after", "all_reduce")
    report(results=results)


def exit_without_destroy(rank: int, world: int, port: int, workdir: str) -> None:
    """Ends the process while the group is alive, as many scripts do."""
    init(rank, world, port)
    tensor = torch.ones(1 << 16)
    dist.all_reduce(tensor)
    pending = dist.all_reduce(torch.ones(8), async_op=True)
    pending.wait()
    report(value=tensor[0].item())


def fork_child(rank: int, world: int, port: int, workdir: str) -> None:
    """A child forked after init (as DataLoader workers are) must not touch
    the parent's UCX state, and must exit normally, atexit handlers and all,
    even when forked while the parent's progress thread runs a collective."""
    init(rank, world, port)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    large = torch.ones(4 << 20)
    pending = dist.all_reduce(large, async_op=True)  # likely still running at fork
    child = os.fork()
    if child == 0:
        torch.ones(3).sum()
        sys.exit(0)  # runs atexit handlers, unlike os._exit
    _, status = os.waitpid(child, 0)
    pending.wait()
    dist.all_reduce(tensor)  # the parent's group still works
    dist.destroy_process_group()
    report(child_status=status, value=tensor[0].item(), large_value=large[0].item())


def exit_during_future_callback(rank: int, world: int, port: int, workdir: str) -> None:
    """The script ends while a .then() callback of an async all_reduce still
    runs on the progress thread. The callback must finish (it reports) and
    the process must exit cleanly: no thread may ask for the GIL while the
    interpreter finalizes."""
    init(rank, world, port)
    tensor = torch.ones(1000)
    dist.all_reduce(tensor)
    work = dist.all_reduce(tensor, async_op=True)

    def callback(future):
        time.sleep(0.3)  # still running when the main thread reaches the end
        report(callback_value=future.value()[0][0].item())

    work.get_future().then(callback)


def exit_with_pending_collective(rank: int, world: int, port: int, workdir: str) -> None:
    """Rank 0 issues an async collective that rank 1 (alive, but busy
    elsewhere) never joins, and exits. Its exit must not wait for the 60 s
    deadline."""
    init(rank, world, port, timeout_seconds=60)
    dist.all_reduce(torch.ones(4))
    if rank == 1:
        report(busy=True)
        time.sleep(5)  # past rank 0's exit: alive, so its death ends nothing
        os._exit(0)
    dist.all_reduce(torch.ones(4), async_op=True)  # rank 1 never joins
    report(exiting=True)
    sys.exit(0)


def staging_paths(rank: int, world: int, port: int, workdir: str) -> None:
    """Large all_reduces and reduces with the links staged through shared memory, sent
    as plain messages, or mixed (STAGING_MODE: on, off, mixed = odd ranks
    turn staging off), against gloo on the same integer-valued inputs."""
    mode = os.environ["STAGING_MODE"]
    if mode == "off" or (mode == "mixed" and rank % 2 == 1):
        os.environ["UCXCOLL_SHARED_MEMORY"] = "0"
    init(rank, world, port)
    gloo = dist.new_group(backend="gloo")
    mismatches = []
    for count in [(1 << 18) + 3, (1 << 20) + 1, 4 << 20]:
        generator = torch.Generator().manual_seed(1000 * rank + count)
        for dtype, op in [(torch.float32, dist.ReduceOp.SUM), (torch.int32, dist.ReduceOp.MAX)]:
            inputs = torch.randint(-1000, 1000, (count,), generator=generator).to(dtype)
            ours, reference = inputs.clone(), inputs.clone()
            dist.all_reduce(ours, op=op)
            dist.all_reduce(reference, op=op, group=gloo)
            if not torch.equal(ours, reference):
                mismatches.append(f"{count} {dtype} {op}")
            # From 256 KiB a 2-rank reduce stages too, and falls back to CMA
            # where either link cannot.
            for root in range(world):
                ours, reference = inputs.clone(), inputs.clone()
                dist.reduce(ours, dst=root, op=op)
                dist.reduce(reference, dst=root, op=op, group=gloo)
                if rank == root and not torch.equal(ours, reference):
                    mismatches.append(f"reduce to {root}: {count} {dtype} {op}")
    # The segments this process created for its own outgoing links.
    segments = sum("ucxcoll-staging" in os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}"))
    dist.destroy_process_group()
    report(mismatches=mismatches, segments=segments)


def allreduce_against_gloo(rank: int, world: int, port: int, workdir: str) -> None:
    """all_reduce under whatever UCXCOLL_ALLREDUCE_ALGO the test sets,
    against gloo on the same integer-valued inputs: every reduction gloo
    has, float32 and int64, 1 to 4,099 elements; AVG against gloo's sum
    divided by the size. Reports what differs."""
    init(rank, world, port)
    gloo = dist.new_group(backend="gloo")
    mismatches = []
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
           "product": dist.ReduceOp.PRODUCT, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
           "bxor": dist.ReduceOp.BXOR}
    for count in (1, 7, 4099):
        generator = torch.Generator().manual_seed(1000 * rank + count)
        for dtype in (torch.float32, torch.int64):
            for name, op in ops.items():
                if dtype == torch.float32 and name in ("band", "bor", "bxor"):
                    continue
                low, high = (-3, 4) if name == "product" else (-1000, 1000)
                data = torch.randint(low, high, (count,), generator=generator).to(dtype)
                ours, reference = data.clone(), data.clone()
                dist.all_reduce(ours, op=op)
                dist.all_reduce(reference, op=op, group=gloo)
                if not torch.equal(ours, reference):
                    mismatches.append(f"{name} {dtype} x{count}")
        data = torch.randint(-1000, 1000, (count,), generator=generator).to(torch.float32)
        ours, summed = data.clone(), data.clone()
        dist.all_reduce(ours, op=dist.ReduceOp.AVG)
        dist.all_reduce(summed, group=gloo)
        if not torch.equal(ours, summed / world):
            mismatches.append(f"avg x{count}")
    dist.destroy_process_group()
    report(mismatches=mismatches)


def compositions_forced_on_one_host(rank: int, world: int, port: int, workdir: str) -> None:
    """Every UCXCOLL_*_ALGO=hierarchical (set by the test) on a group whose
    ranks share one host, where no composition can run: the flat choices
    stand in. Each collective, small and large, against gloo on the same
    integer-valued inputs; reports what differs."""
    init(rank, world, port)
    gloo = dist.new_group(backend="gloo")
    mismatches = []

    def compare(what, run):
        ours, reference = run(None), run(gloo)
        if not all(torch.equal(a, b) for a, b in zip(ours, reference)):
            mismatches.append(what)

    for count in (5, 3 * (1 << 18)):
        generator = torch.Generator().manual_seed(100 * rank + count)
        data = torch.randint(-1000, 1000, (count * world,), generator=generator).to(torch.float32)

        def all_reduce(group):
            out = data.clone()
            dist.all_reduce(out, group=group)
            return [out]

        def all_gather(group):
            out = torch.empty(count * world * world)
            dist.all_gather_into_tensor(out, data, group=group)
            return [out]

        def reduce_scatter(group):
            out = torch.empty(count)
            dist.reduce_scatter_tensor(out, data, group=group)
            return [out]

        def broadcast(group):
            out = data.clone()
            dist.broadcast(out, src=world - 1, group=group)
            return [out]

        def reduce(group):
            out = data.clone()
            dist.reduce(out, dst=1, group=group)
            return [out] if rank == 1 else []

        def all_to_all(group):
            out = torch.empty_like(data)
            dist.all_to_all_single(out, data, group=group)
            return [out]

        for run in (all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all):
            compare(f"{run.__name__} of {count} per rank", run)
    dist.destroy_process_group()
    report(mismatches=mismatches)


def settings_that_differ(rank: int, world: int, port: int, workdir: str) -> None:
    """Rank 1 (or REFUSING_RANK) alone sets RANK1_SETTING ("NAME=value"), a
    setting that chooses algorithms; every rank reports what
    init_process_group raised."""
    if rank == int(os.environ.get("REFUSING_RANK", "1")):
        name, value = os.environ["RANK1_SETTING"].split("=", 1)
        os.environ[name] = value
    try:
        init(rank, world, port)
    except Exception as error:  # noqa: BLE001 - the report names what was raised
        report(error=f"{type(error).__name__}: {error}")
        # Rank 0's process holds the store: it stays until every rank has
        # read from it what it needed to raise (files, as the store may be
        # what the others still wait on).
        with open(os.path.join(workdir, f"raised{rank}"), "w"):
            pass
        deadline = time.monotonic() + 30
        while rank == 0 and time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(workdir, f"raised{peer}")) for peer in range(world)):
            time.sleep(0.05)
        return
    dist.destroy_process_group()
    report(error=None)


def cpu_only(rank: int, world: int, port: int, workdir: str) -> None:
    """A CPU-only job (collectives, point-to-point, a DDP step) must never
    initialise CUDA or make an NCCL backend, even with a CUDA build of torch
    and a GPU present."""
    init(rank, world, port)
    tensor = torch.ones(1 << 10)
    dist.all_reduce(tensor)
    dist.broadcast(tensor, src=0)
    dist.reduce(tensor, dst=0)
    outputs = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(outputs, tensor)
    if world > 1:
        peer = (rank + 1) % world
        works = [dist.isend(tensor, peer), dist.irecv(torch.empty_like(tensor), (rank - 1) % world)]
        for work in works:
            work.wait()
    dist.barrier()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    model(torch.randn(4, 8)).sum().backward()
    # The group's NCCL side is made only for a CUDA tensor.
    nccl_made = dist.group.WORLD._get_backend(torch.device("cpu"))._gpu_backend is not None
    dist.destroy_process_group()
    report(cuda_initialized=torch.cuda.is_initialized(), nccl_made=nccl_made)


def peer_killed(rank: int, world: int, port: int, workdir: str) -> None:
    """The last rank is SIGKILLed at PHASE (environment UCXCOLL_TEST_PHASE):
    setup (it dies as soon as its group exists, while the others may still
    connect), idle (between collectives), small / large (in the middle of a
    stream of 16 B / 16 MiB all_reduces), recv (rank 0 waits in a recv from
    it) or send (rank 0 sends it 16 MiB it never takes). The group timeout is
    60 s; the survivors report the errors they got and destroy the group.

    The killed rank runs in a child process of the harness's rank process,
    which reports the child's exit status: the harness wants every rank it
    starts to exit with 0."""
    phase = os.environ["UCXCOLL_TEST_PHASE"]
    if rank == world - 1:
        child = subprocess.run([sys.executable, __file__, "peer_killed_victim", str(rank), str(world), str(port), workdir])
        report(victim_status=child.returncode)
        return
    errors = []
    try:
        init(rank, world, port, timeout_seconds=60)
        dist.all_reduce(torch.ones(4))
    except dist.DistBackendError as error:
        errors.append(str(error))  # setup: the victim may die before these
        print(f"init or first all_reduce raised: {error}", file=sys.stderr, flush=True)
    if not errors:
        if phase == "idle":
            time.sleep(1.0)
        try:
            if phase == "recv" and rank == 0:
                dist.recv(torch.empty(4), src=world - 1)
            elif phase == "send" and rank == 0:
                dist.send(torch.ones(4 << 20), dst=world - 1)
            else:
                elements = 4 << 20 if phase == "large" else 4
                for _ in range(1000000):
                    dist.all_reduce(torch.ones(elements))
        except dist.DistBackendError as error:
            errors.append(str(error))
        try:
            dist.all_reduce(torch.ones(4))  # the group is done for: at once
        except dist.DistBackendError as error:
            errors.append(str(error))
    try:
        dist.destroy_process_group()
    except AssertionError:
        pass  # init itself failed: there is no group to destroy
    # Recovery in the same process: the survivors make a new group.
    dist.init_process_group("ucxcoll", init_method=f"tcp://127.0.0.1:{port + 1}", rank=rank, world_size=world - 1)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    dist.destroy_process_group()
    report(errors=errors, value_after_recovery=tensor[0].item())


def peer_killed_victim(rank: int, world: int, port: int, workdir: str) -> None:
    phase = os.environ["UCXCOLL_TEST_PHASE"]
    init(rank, world, port, timeout_seconds=60)
    if phase == "setup":
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(4))
    if phase == "idle":
        os.kill(os.getpid(), signal.SIGKILL)
    # Killed from another thread while the main thread is in whatever the
    # phase has it do.
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
    if phase in ("small", "large"):
        elements = 4 << 20 if phase == "large" else 4
        while True:
            dist.all_reduce(torch.ones(elements))
    time.sleep(60)


def dies_during_setup(rank: int, world: int, port: int, workdir: str) -> None:
    """8 ranks; rank 1 (whose children in the setup tree are ranks 5, 6
    and 7) is SIGKILLed inside init_process_group while it waits for rank
    5, which starts its init only after that death. The group timeout is
    60 s; every survivor reports the error its init raised and how long
    after the death it came. Rank 1 runs in a child process, whose exit
    status its harness process reports."""
    died_at = os.path.join(workdir, "rank1_died_at")
    if rank == 1:
        child = subprocess.run([sys.executable, __file__, "dies_during_setup_victim", str(rank), str(world), str(port),
                                workdir])
        report(victim_status=child.returncode)
        return
    if rank == 5:
        deadline = time.monotonic() + 60
        while not os.path.exists(died_at) and time.monotonic() < deadline:
            time.sleep(0.05)
    error = None
    try:
        init(rank, world, port, timeout_seconds=60)
    except dist.DistBackendError as raised:
        error = str(raised)
    raised_at = time.time()
    with open(died_at) as death:
        after_death = raised_at - float(death.read())
    # Rank 0's process holds the store: it stays until every survivor has
    # read the table that names the dead rank.
    open(os.path.join(workdir, f"done{rank}"), "w").close()
    if rank == 0:
        deadline = time.monotonic() + 30
        while len([name for name in os.listdir(workdir) if name.startswith("done")]) < world - 1:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    report(error=error, seconds_after_death=after_death)


def dies_during_setup_victim(rank: int, world: int, port: int, workdir: str) -> None:
    def die():
        with open(os.path.join(workdir, "rank1_died_at.tmp"), "w") as death:
            death.write(repr(time.time()))
        os.rename(os.path.join(workdir, "rank1_died_at.tmp"), os.path.join(workdir, "rank1_died_at"))
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Timer(1.5, die).start()
    init(rank, world, port, timeout_seconds=60)
    time.sleep(60)


def debug_detail(rank: int, world: int, port: int, workdir: str) -> None:
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL torch wraps the backend in its
    collective checker: matching collectives still work (and are checked),
    and ranks that pass different shapes get torch's own mismatch error
    before ucxcoll sees the call."""
    init(rank, world, port, timeout_seconds=30)
    tensor = torch.full((5,), float(rank + 1))
    dist.all_reduce(tensor)
    gathered = [torch.empty(2) for _ in range(world)]
    dist.all_gather(gathered, torch.full((2,), float(rank)))
    wrapped = type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__
    try:
        dist.all_reduce(torch.ones(8 + rank))
        mismatch = None
    except RuntimeError as error:
        mismatch = str(error)
    report(sum=tensor[0].item(), gathered=[t[0].item() for t in gathered], backend_class=wrapped, mismatch=mismatch)


def abort_hooks(rank: int, world: int, port: int, workdir: str) -> None:
    """Abort hooks (torch 2.15's register_abort_hook) run once when their
    group fails (here: rank 0's all_reduce times out, rank 1 never joins)
    and when it is aborted; an unregistered hook never runs."""
    init(rank, world, port, timeout_seconds=1)
    other = dist.new_group([0, 1])
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        store.wait(["rank0_done"], timedelta(seconds=60))
        report(waited=True)
        return
    calls = []
    world_group = dist.group.WORLD
    world_group.register_abort_hook(1, lambda: calls.append("world hook"))
    world_group.register_abort_hook(2, lambda: calls.append("unregistered hook"))
    world_group.unregister_abort_hook(2)
    other.register_abort_hook(3, lambda: calls.append("other hook"))
    supported = world_group.supports_abort_hooks  # a property
    errors = []
    for _ in range(2):  # the second fails at once; the hook still runs once
        try:
            dist.all_reduce(torch.ones(4))
        except dist.DistBackendError as error:
            errors.append(str(error))
    for _ in range(500):  # the hook runs on one of ucxcoll's threads
        if calls:
            break
        time.sleep(0.01)
    after_failure = list(calls)
    other._get_backend(torch.device("cpu")).abort()
    after_abort = list(calls)
    store.set("rank0_done", "1")
    report(supported=supported, after_failure=after_failure, after_abort=after_abort, errors=len(errors))

def flight_recorder(rank: int, world: int, port: int, workdir: str) -> None:
    """torch's flight recorder marks what ucxcoll completed "completed" --
    collectives, an async one, both sides of a batch_isend_irecv -- and
    leaves a collective that timed out "scheduled", the state that tells a
    hang from a finished op. ucxcoll writes the entries itself (no torch
    hook attached), with each operation's input and output sizes, and the
    rank whose collective failed dumps the trace to its file. With
    UCXCOLL_TEST_PRETEND_CUDA=1 torch.cuda.is_available() says yes, and
    torch's hook records instead: the entries must read the same."""
    import pickle

    if os.environ.get("UCXCOLL_TEST_PRETEND_CUDA") == "1":
        torch.cuda.is_available = lambda: True
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(workdir, "fr_trace_rank_")
    init(rank, world, port, timeout_seconds=2)
    store = dist.distributed_c10d._get_default_store()
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    dist.broadcast(tensor, 0)
    dist.all_reduce(tensor, async_op=True).wait()
    dist.all_gather_into_tensor(torch.zeros(2 * world), torch.ones(2))
    with dist.distributed_c10d._coalescing_manager():
        dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * world))
    peer = 1 - rank
    ops = [dist.P2POp(dist.isend, torch.ones(3), peer), dist.P2POp(dist.irecv, torch.zeros(3), peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    dist.barrier()
    failed = None
    dumped = None
    dump_file = os.path.join(workdir, f"fr_trace_rank_{rank}")
    if rank == 0:
        try:
            dist.all_reduce(tensor)  # rank 1 does not join: times out
        except dist.DistBackendError as error:
            failed = "timed out" in str(error)
        deadline = time.monotonic() + 30
        while not os.path.exists(dump_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the file is written whole, not renamed into place
        with open(dump_file, "rb") as f:
            dumped = [entry["profiling_name"] for entry in pickle.load(f)["entries"]][-2:]
        store.set("rank0_done", "1")
    else:
        store.wait(["rank0_done"], timedelta(seconds=60))
    dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, False, False, backend="ucxcoll"))
    entries = [[entry["profiling_name"], entry["state"], "duration_ms" in entry]
               for entry in dump["entries"]]
    gather = next(entry for entry in dump["entries"] if entry["profiling_name"] == "ucxcoll:_all_gather_base")
    report(supported=dist.group.WORLD.supports_completion_hooks, failed=failed, entries=entries,
           hooks=len(dist.distributed_c10d._world.pg_flight_recorder_hooks),
           gather_sizes=[gather["input_sizes"], gather["output_sizes"]],
           sequence=[[entry["collective_seq_id"], entry["p2p_seq_id"]] for entry in dump["entries"]],
           dumped=dumped)

def run_victim(scenario: str, rank: int, world: int, port: int, workdir: str) -> None:
    """Runs `scenario` for this rank as a child process, which SIGKILLs
    itself, and reports how it ended."""
    child = subprocess.run([sys.executable, __file__, scenario, str(rank), str(world), str(port), workdir])
    report(victim_status=child.returncode)


def all_reduce_until_a_peer_dies() -> str | None:
    """all_reduce until one raises (a peer died); its message."""
    try:
        for _ in range(1000000):
            dist.all_reduce(torch.ones(4))
    except dist.DistBackendError as error:
        return str(error)
    return None


def reconfigure(rank: int, world: int, port: int, workdir: str) -> None:
    """torch 2.15's reconfigure: the last rank is SIGKILLed; the survivors
    get the error naming it, then reconfigure the group to themselves
    (handles exchanged through the store) and go on with it. On the way:
    every bad call raises on every rank that made it -- a foreign handle, a
    list without the caller, a handle twice, ranks given different lists, a
    dead member listed (times out after the 2 s asked for), a reused uuid --
    and the group still works afterwards."""
    if rank == world - 1:
        run_victim("reconfigure_victim", rank, world, port, workdir)
        return
    init(rank, world, port, timeout_seconds=60)
    store = dist.distributed_c10d._get_default_store()
    store.set(f"handle/{rank}", dist._get_reconfigure_handle())
    dist.all_reduce(torch.ones(4))
    handles = [store.get(f"handle/{r}").decode() for r in range(world)]
    died = all_reduce_until_a_peer_dies()
    survivors = handles[:-1]
    outcomes = {}

    def attempt(name, **arguments):
        try:
            dist._reconfigure(**arguments).wait()
            outcomes[name] = "ok"
        except Exception as error:  # noqa: BLE001 -- the type is what is checked
            outcomes[name] = f"{type(error).__name__}: {str(error).splitlines()[0]}"

    attempt("foreign", uuid=1, handles=survivors + ["gloo:0:-1:0:127.0.0.1:1"])
    attempt("without_me", uuid=1, handles=[h for i, h in enumerate(survivors) if i != rank])
    attempt("twice", uuid=1, handles=survivors + [survivors[0]])
    attempt("disagree", uuid=2, handles=survivors if rank == 0 else survivors[::-1])
    attempt("dead_listed", uuid=3, handles=handles, timeout=timedelta(seconds=2))
    attempt("survivors", uuid=4, handles=survivors)
    rank_size = [dist.get_rank(), dist.get_world_size()]
    total = torch.full((1000,), float(rank + 1))
    dist.all_reduce(total)
    attempt("uuid_reused", uuid=4, handles=survivors)
    attempt("as_a_set", uuid=5, handles=set(survivors))
    gathered = [torch.empty(2) for _ in range(len(survivors))]
    dist.all_gather(gathered, torch.full((2,), float(rank)))
    report(supported=dist._supports_reconfigure(), died=died, outcomes=outcomes, rank_size=rank_size,
           total=sorted(set(total.tolist())), gathered=[t.tolist() for t in gathered], handle=handles[rank],
           handles=handles)


def reconfigure_victim(rank: int, world: int, port: int, workdir: str) -> None:
    init(rank, world, port, timeout_seconds=60)
    dist.distributed_c10d._get_default_store().set(f"handle/{rank}", dist._get_reconfigure_handle())
    dist.all_reduce(torch.ones(4))
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
    while True:
        dist.all_reduce(torch.ones(4))

def shrink(rank: int, world: int, port: int, workdir: str) -> None:
    """torch's shrink_group: the last rank is SIGKILLed; the survivors get
    the error naming it, then shrink the default group to themselves and
    go on with it (all_reduce, all_gather, broadcast, send/recv). The store
    gains no key on the way: the survivors agree over the group's own
    connections, not through it. With 4 or more ranks, a second shrink
    drops a rank that is alive (the new last one), with SHRINK_ABORT: a
    survivor's pending irecv from it is aborted, and the excluded rank,
    waiting in a recv on the group the others leave, raises naming the
    rank that left."""
    if rank == world - 1:
        run_victim("shrink_victim", rank, world, port, workdir)
        return
    init(rank, world, port, timeout_seconds=60)
    store = dist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(4))
    died = all_reduce_until_a_peer_dies()
    keys_before = store.num_keys()
    started = time.monotonic()
    dist.shrink_group([world - 1])
    shrink_seconds = time.monotonic() - started
    keys_added = store.num_keys() - keys_before
    survivors = world - 1
    rank_size = [dist.get_rank(), dist.get_world_size()]
    total = torch.full((1000,), float(rank + 1))
    dist.all_reduce(total)
    gathered = [torch.empty(2) for _ in range(survivors)]
    dist.all_gather(gathered, torch.full((2,), float(rank)))
    root = survivors - 1
    broadcast = torch.full((3,), float(rank * 10))
    dist.broadcast(broadcast, src=root)
    ring = torch.empty(2)
    send = dist.isend(torch.full((2,), float(rank)), (rank + 1) % survivors)
    dist.recv(ring, (rank - 1) % survivors)
    send.wait()
    result = dict(died=died, keys_added=keys_added, shrink_seconds=shrink_seconds, rank_size=rank_size,
                  total=sorted(set(total.tolist())), gathered=[t.tolist() for t in gathered],
                  broadcast=broadcast.tolist(), ring=ring.tolist())
    if world >= 4:
        result.update(shrink_a_live_rank(rank, survivors))
    dist.destroy_process_group()
    report(**result)


def shrink_a_live_rank(rank: int, size: int) -> dict:
    """The second round of the shrink scenario, on a healthy group of
    `size` ranks: the last one is excluded while alive."""
    excluded = size - 1
    if rank == excluded:
        store = dist.distributed_c10d._get_default_store()
        store.set("excluded_waits", "1")
        try:
            dist.recv(torch.empty(1), 0)
            left = None
        except dist.DistBackendError as error:
            left = str(error)
        return dict(excluded_saw=left)
    pending = dist.irecv(torch.empty(1), excluded) if rank == 1 else None
    dist.distributed_c10d._get_default_store().wait(["excluded_waits"])
    dist.shrink_group([excluded], shrink_flags=dist.distributed_c10d.SHRINK_ABORT)
    aborted = None
    if pending is not None:
        try:
            pending.wait()
        except dist.DistBackendError as error:
            aborted = str(error)
    total = torch.full((8,), float(rank + 1))
    dist.all_reduce(total)
    return dict(second_rank_size=[dist.get_rank(), dist.get_world_size()], second_total=sorted(set(total.tolist())),
                aborted=aborted)


def shrink_victim(rank: int, world: int, port: int, workdir: str) -> None:
    init(rank, world, port, timeout_seconds=60)
    dist.all_reduce(torch.ones(4))
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
    while True:
        dist.all_reduce(torch.ones(4))


def shrink_disagreement(rank: int, world: int, port: int, workdir: str) -> None:
    """4 ranks; rank 3 is SIGKILLed. Ranks 0 and 1 exclude [3], rank 2
    excludes [1, 3]: every one of them must raise, naming the lists, and
    none may wait for the deadline (60 s)."""
    if rank == world - 1:
        run_victim("shrink_victim", rank, world, port, workdir)
        return
    init(rank, world, port, timeout_seconds=60)
    dist.all_reduce(torch.ones(4))
    all_reduce_until_a_peer_dies()
    started = time.monotonic()
    try:
        dist.shrink_group([1, 3] if rank == 2 else [3])
        error = None
    except Exception as raised:  # noqa: BLE001 -- the type is what is checked
        error = f"{type(raised).__name__}: {str(raised).splitlines()[0]}"
    report(error=error, seconds=time.monotonic() - started)
    os._exit(0)  # the default group is half torn down: leave as a crash would


def audit_log(rank: int, world: int, port: int, workdir: str) -> None:
    """UCXCOLL_LOG_LEVEL=info (set by the test) writes one audit line per
    operation; the test reads them from each rank's output. Ends with an
    all_reduce whose sizes the ranks disagree on: a failed line on both.
    With UCXCOLL_TEST_ONE_CORE=1 every rank runs on the same one core, so
    the ranks outnumber the cores they have."""
    if os.environ.get("UCXCOLL_TEST_ONE_CORE") == "1":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    init(rank, world, port, timeout_seconds=30)
    dist.all_reduce(torch.ones(1024))
    gathered = [torch.empty(4) for _ in range(world)]
    dist.all_gather(gathered, torch.ones(4))
    # Blocks of 256 KiB: staged rounds, unless the ranks outnumber the cores.
    block = 64 << 10
    received = torch.empty(block * world)
    dist.all_to_all_single(received, torch.full((block * world,), float(rank)))
    assert received.tolist() == [float(r) for r in range(world) for _ in range(block)]
    if rank == 0:
        dist.send(torch.ones(8, dtype=torch.float64), 1)
    else:
        dist.recv(torch.empty(8, dtype=torch.float64), 0)
    try:
        dist.all_reduce(torch.ones(4 + rank))
        mismatch = None
    except dist.DistBackendError as error:
        mismatch = str(error)
    report(mismatch=mismatch)

def listening_addresses(exclude_port: int) -> list[str]:
    """The addresses this process listens on over TCP ("127.0.0.1",
    "192.0.2.2", "::1", ...), from /proc/net/tcp{,6} and this process's
    socket fds; the store's port left out."""
    return sorted({address for address, _ in listening_endpoints(exclude_port)})


def listening_endpoints(exclude_port: int) -> list[tuple[str, int]]:
    """(address, port) of each TCP listener of this process but the store's."""
    import ipaddress

    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                address_hex, port_hex = local.split(":")
                if int(port_hex, 16) == exclude_port:
                    continue
                raw = bytes.fromhex(address_hex)
                # The kernel prints each 32-bit word in host (little-endian) order.
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                addresses.append((str(ipaddress.ip_address(raw)), int(port_hex, 16)))
    return addresses


def listeners(rank: int, world: int, port: int, workdir: str) -> None:
    """Where ucxcoll listens, for a store at UCXCOLL_TEST_STORE_HOST (set by
    the test, with or without torchrun's LOCAL_WORLD_SIZE)."""
    host = os.environ["UCXCOLL_TEST_STORE_HOST"]
    dist.init_process_group("ucxcoll", init_method=f"tcp://{host}:{port}", rank=rank, world_size=world)
    tensor = torch.full((4,), float(rank + 1))
    dist.all_reduce(tensor)
    report(sum=tensor[0].item(), listening=listening_addresses(port))
    dist.destroy_process_group()

def stray_connections(rank: int, world: int, port: int, workdir: str) -> None:
    """While the ranks run all_reduces (small, and 1 MiB), a thread of each
    rank keeps connecting to that rank's own UCX listeners and sending them
    random bytes: UCX's handshake drops them; no result may change."""
    init(rank, world, port, timeout_seconds=60)
    dist.all_reduce(torch.ones(4))
    targets = [(address, listener_port) for address, listener_port in listening_endpoints(port)]
    stop = threading.Event()
    attempts = [0]

    def stray() -> None:
        import socket

        while not stop.is_set():
            for address, listener_port in targets:
                try:
                    with socket.create_connection((address, listener_port), timeout=1) as connection:
                        connection.sendall(os.urandom(4096))
                        time.sleep(0.005)
                    attempts[0] += 1
                except OSError:
                    pass

    thread = threading.Thread(target=stray)
    thread.start()
    wrong = 0
    for _ in range(200):
        for elements in (1000, 1 << 18):
            tensor = torch.full((elements,), float(rank + 1))
            dist.all_reduce(tensor)
            wrong += int(not torch.all(tensor == world * (world + 1) / 2))
    stop.set()
    thread.join()
    report(listeners=len(targets), stray_connections=attempts[0] > 0, wrong=wrong)
    dist.destroy_process_group()

def process_resources() -> dict:
    """This process's open fds, threads and resident memory (MiB; after
    giving freed heap memory back to the system, so that what is counted
    is what is still allocated)."""
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": len(os.listdir("/proc/self/task")),
            "rss_mib": resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20}


def soak_cycle(rank: int, world: int, store_path: str, victim_at: int | None) -> int:
    """One init/destroy cycle of mixed collectives and point-to-point on a
    group of `world` ranks; returns the number of operations that raised. A
    rank given `victim_at` SIGKILLs itself after that many operations."""
    dist.init_process_group("ucxcoll", init_method=f"file://{store_path}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    failed = 0
    operations = 0
    subgroup = dist.new_group([0, 1])
    step = 0
    while operations < 200:
        step += 1
        if victim_at is not None and operations >= victim_at:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            value = torch.full((1 + step % 700,), float(rank + 1))
            dist.all_reduce(value)
            assert torch.all(value == world * (world + 1) / 2)
            large = torch.full((1 << 16,), float(rank))
            dist.broadcast(large, src=step % world)
            assert torch.all(large == step % world)
            gathered = torch.empty(world * 3)
            dist.all_gather_into_tensor(gathered, torch.full((3,), float(rank)))
            assert gathered.tolist() == [float(r) for r in range(world) for _ in range(3)]
            exchanged = torch.empty(world * 2)
            dist.all_to_all_single(exchanged, torch.full((world * 2,), float(rank)))
            assert exchanged.tolist() == [float(r) for r in range(world) for _ in range(2)]
            right, left = (rank + 1) % world, (rank - 1) % world
            received = torch.empty(5)
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((5,), float(rank)), right),
                                                dist.P2POp(dist.irecv, received, left)]):
                work.wait()
            assert torch.all(received == left)
            pending = dist.all_reduce(torch.ones(64), async_op=True)
            summed = pending.get_future().then(lambda future: future.value()[0].sum().item()).wait()
            assert summed == 64 * world
            if rank in (0, 1):
                pair = torch.ones(8)
                dist.all_reduce(pair, group=subgroup)
                assert torch.all(pair == 2)
        except dist.DistBackendError:
            failed += 1  # a peer died: every later call raises at once
        operations += 8
    dist.destroy_process_group()
    return failed


def soak(rank: int, world: int, port: int, workdir: str) -> None:
    """Many init/destroy cycles of mixed operations (SOAK_CYCLES, set by the
    test); in every third cycle a third member of the group, a child of rank
    0, is SIGKILLed part-way. Reports fds, threads and RSS after the first
    cycles and at the end."""
    cycles = int(os.environ["UCXCOLL_TEST_SOAK_CYCLES"])
    seen = []
    failures_per_cycle = []
    for cycle in range(cycles):
        store_path = os.path.join(workdir, f"store{cycle}")
        victim_at = 40 + 8 * (cycle % 5) if cycle % 3 == 2 else None
        child = None
        if rank == 0:
            command = [sys.executable, __file__, "soak_member", "2", "3", str(victim_at if victim_at else -1), store_path]
            child = subprocess.Popen(command)
        failures_per_cycle.append(soak_cycle(rank, 3, store_path, None))
        if child is not None:
            status = child.wait(timeout=120)
            assert status == (-signal.SIGKILL if victim_at else 0), status
        seen.append(process_resources())
    report(failures=failures_per_cycle, warm=seen[2], end=seen[-1],
           max_threads=max(entry["threads"] for entry in seen), rss_mib=[round(entry["rss_mib"]) for entry in seen])


def soak_member(rank: int, world: int, victim_at: int, store_path: str) -> None:
    soak_cycle(rank, world, store_path, victim_at if victim_at >= 0 else None)


def store_operations(rank: int, world: int, port: int, workdir: str) -> None:
    """How many store operations on its own keys ucxcoll makes per rank:
    for init_process_group, a new_group of half the ranks, and a 2-D
    DeviceMesh (a subgroup per row and per column). Each group's
    all_reduce is checked, so the groups work."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
    from counting_store import CountingStore

    tcp = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(seconds=120))
    store = CountingStore(tcp, key_part="ucxcoll/")
    started = time.monotonic()
    dist.init_process_group("ucxcoll", store=store, rank=rank, world_size=world)
    init_seconds = time.monotonic() - started
    total = torch.ones(1)
    dist.all_reduce(total)
    store.phase = "new_group"
    half = list(range(world // 2))
    group = dist.new_group(half)
    sums = {"world": total.item()}
    if rank in half:
        part = torch.full((1,), float(rank))
        dist.all_reduce(part, group=group)
        sums["new_group"] = part.item()
    store.phase = "device_mesh"
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    for dim in ("replicate", "shard"):
        value = torch.full((1,), float(rank))
        dist.all_reduce(value, group=mesh.get_group(dim))
        sums[dim] = value.item()
    store.phase = "after"
    dist.destroy_process_group()
    table_bytes = sum(size for key, size in store.bytes_set.items() if key.endswith("/table"))
    report(counts=store.counts, sums=sums, init_seconds=init_seconds,
           bytes_read=store.bytes_read.get("init", 0), table_bytes=table_bytes)


def late_rank_slow_store(rank: int, world: int, port: int, workdir: str) -> None:
    """The last rank starts its init_process_group 10 s after the others,
    and every store operation takes 20 ms more (a slow store server): the
    group still sets up, its all_reduce and a new_group's are right, and
    the ranks' store operations stay within the bound."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
    from counting_store import CountingStore

    class SlowStore(CountingStore):
        def _count(self, key):
            time.sleep(0.02)
            super()._count(key)

    tcp = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(seconds=120))
    store = SlowStore(tcp, key_part="ucxcoll/")
    if rank == world - 1:
        time.sleep(10)
    started = time.monotonic()
    dist.init_process_group("ucxcoll", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    waited = time.monotonic() - started
    total = torch.full((1,), float(rank))
    dist.all_reduce(total)
    store.phase = "new_group"
    group = dist.new_group(list(range(1, world)))
    part = torch.full((1,), float(rank))
    if rank >= 1:
        dist.all_reduce(part, group=group)
    dist.destroy_process_group()
    report(total=total.item(), part=part.item(), counts=store.counts, waited=waited)


SCENARIOS = {"allreduce_against_gloo": allreduce_against_gloo, "dies_during_setup": dies_during_setup, "dies_during_setup_victim": dies_during_setup_victim, "store_operations": store_operations, "late_rank_slow_store": late_rank_slow_store, "leaving": leaving, "leaving_threads": leaving_threads, "soak": soak, "soak_member": soak_member, "stray_connections": stray_connections, "listeners": listeners, "audit_log": audit_log, "reconfigure": reconfigure, "reconfigure_victim": reconfigure_victim, "shrink": shrink, "shrink_victim": shrink_victim, "shrink_disagreement": shrink_disagreement, "flight_recorder": flight_recorder, "abort_hooks": abort_hooks, "debug_detail": debug_detail, "peer_killed": peer_killed, "peer_killed_victim": peer_killed_victim, "cpu_only": cpu_only, "exit_during_future_callback": exit_during_future_callback, "exit_with_pending_collective": exit_with_pending_collective, "fork_child": fork_child, "exit_without_destroy": exit_without_destroy, "repeat_init": repeat_init, "ddp": ddp, "idle_cpu": idle_cpu, "dead_peer": dead_peer, "staging_paths": staging_paths, "settings_that_differ": settings_that_differ, "compositions_forced_on_one_host": compositions_forced_on_one_host}

if __name__ == "__main__":
    name, rank, world, port, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if name == "soak_member":
        soak_member(rank, world, port, workdir)  # port: when to die (-1: never); workdir: the store file
    else:
        SCENARIOS[name](rank, world, port, workdir)
