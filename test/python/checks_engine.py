"""Asynchronous handles, futures, groups and threads: what the engine must
get right beyond each collective's values. Run at world sizes 1-4 by
test_engine.py.
"""

import os
import threading
import time
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

from checking import Checks, Context, assert_equal, expect_error

check = Checks()


def new_group():
    """A group of every rank with the checks' deadline (new_group's default
    is 30 minutes): an operation that never completes fails with its
    description of what it still waits for, well within the harness's time."""
    return dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=60))


# ---- barrier, async handles, subgroups -------------------------------------------


@check()
def barrier_completes(ctx: Context) -> None:
    for _ in range(3):
        dist.barrier()
    work = dist.barrier(async_op=True)
    work.wait()
    assert work.is_completed()


@check()
def many_async_collectives_in_flight(ctx: Context) -> None:
    works, reduced, gathered = [], [], []
    for i in range(24):
        tensor = torch.full((1000 + i,), float(ctx.rank + i))
        reduced.append(tensor)
        works.append(dist.all_reduce(tensor, async_op=True))
        outputs = [torch.zeros(3, dtype=torch.int64) for _ in range(ctx.world)]
        gathered.append(outputs)
        works.append(dist.all_gather(outputs, torch.full((3,), ctx.rank * 100 + i), async_op=True))
    for work in works:
        assert work.wait() is True
        assert work.is_completed()
        assert work.is_success()
    rank_sum = ctx.world * (ctx.world - 1) / 2
    for i, tensor in enumerate(reduced):
        assert torch.equal(tensor, torch.full_like(tensor, rank_sum + ctx.world * i)), f"all_reduce {i}"
    for i, outputs in enumerate(gathered):
        for r in range(ctx.world):
            assert torch.equal(outputs[r], torch.full((3,), r * 100 + i)), f"all_gather {i} block {r}"


@check()
def synchronous_call_after_async_ones_keeps_issue_order(ctx: Context) -> None:
    # A synchronous collective may run on the caller's thread, but only
    # once everything issued before it has run: when it returns, the
    # earlier asynchronous ones must be complete.
    for _ in range(5):
        first = torch.full((200_000,), float(ctx.rank))
        works = [dist.all_reduce(first, async_op=True)]
        works.append(dist.barrier(async_op=True))
        last = torch.ones(8)
        dist.all_reduce(last)
        assert all(work.is_completed() for work in works), "an earlier async collective was still pending"
        assert torch.equal(first, torch.full_like(first, ctx.world * (ctx.world - 1) / 2))
        assert torch.equal(last, torch.full_like(last, float(ctx.world)))


@check()
def engine_thread_never_frees_python_tensors(ctx: Context) -> None:
    # Freeing a tensor that Python owns takes the GIL. While the interpreter
    # shuts down, CPython ends any other thread that asks for it, which
    # aborted processes that exited right after an async collective. So the
    # engine leaves the last references of finished collectives to the next
    # caller. Here the handle and the tensor are dropped at once, leaving the
    # engine as the tensor's only owner; the tensor must be freed by this
    # (Python) thread, never by the engine thread.
    freed_on = []
    tensor = torch.ones(1000)
    weakref.finalize(tensor, lambda: freed_on.append(threading.get_ident()))
    dist.all_reduce(tensor, async_op=True)
    del tensor
    # Ranks free theirs at different calls (a rank whose all_reduce completed
    # inline frees it at once), so they agree over gloo on when to stop.
    for _ in range(3000):
        everyone_freed = torch.tensor([1 if freed_on else 0])
        dist.all_reduce(everyone_freed, op=dist.ReduceOp.MIN, group=ctx.gloo)
        if everyone_freed.item() == 1:
            break
        time.sleep(0.01)  # let the engine finish the all_reduce
        dist.barrier()  # the next call destroys what the engine finished
    assert freed_on == [threading.get_ident()], (
        f"tensor freed on thread {freed_on}, expected the caller's {threading.get_ident()}"
    )


@check(min_world=2)
def work_wait_with_timeout_expires_then_completes(ctx: Context) -> None:
    group = new_group()
    tensor = torch.ones(4)
    if ctx.rank == 0:
        work = dist.all_reduce(tensor, group=group, async_op=True)
        expect_error(
            dist.DistBackendError,
            ["Work.wait(timeout=100 ms) expired before operation #0 completed"],
            lambda: work.wait(timeout=timedelta(milliseconds=100)),
        )
        assert not work.is_completed()
        dist.barrier(group=ctx.gloo)  # now let the others join
        assert work.wait() is True
    else:
        dist.barrier(group=ctx.gloo)
        dist.all_reduce(tensor, group=group)
    assert torch.equal(tensor, torch.full((4,), float(ctx.world)))
    dist.destroy_process_group(group)


@check()
def future_completes_with_output_tensors(ctx: Context) -> None:
    tensor = torch.ones(10) * (ctx.rank + 1)
    work = dist.all_reduce(tensor, async_op=True)
    future = work.get_future()
    doubled = future.then(lambda f: f.value()[0] * 2)
    value = future.wait()
    assert isinstance(value, list) and len(value) == 1
    assert value[0].data_ptr() == tensor.data_ptr(), "future value must be the output tensor itself"
    expected = torch.full((10,), ctx.world * (ctx.world + 1) / 2)
    assert torch.equal(value[0], expected)
    assert torch.equal(doubled.wait(), expected * 2)
    outputs = [torch.empty(2) for _ in range(ctx.world)]
    gather_value = dist.all_gather(outputs, torch.full((2,), float(ctx.rank)), async_op=True).get_future().wait()
    assert len(gather_value) == 1 and len(gather_value[0]) == ctx.world
    for r in range(ctx.world):
        assert gather_value[0][r].data_ptr() == outputs[r].data_ptr()
        assert torch.equal(outputs[r], torch.full((2,), float(r)))


@check()
def future_callbacks_never_run_on_the_driver_and_see_the_result(ctx: Context) -> None:
    # Work.wait() completes the Future itself when the operation completes
    # while it waits; otherwise (it completed before wait() was called) a
    # FutureCompleter thread does. Either way a callback sees the output
    # and never runs on the engine's thread.
    callback_threads = []

    def record(future):
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
            callback_threads.append(comm.read().strip())
        return future.value()[0].sum().item()

    for iteration in range(50):
        tensor = torch.full((4,), float(ctx.rank + iteration))
        work = dist.all_reduce(tensor, async_op=True)
        summed = work.get_future().then(record)
        assert work.wait() is True
        expected = sum(float(r + iteration) for r in range(ctx.world))
        assert torch.equal(work.get_future().wait()[0], torch.full((4,), expected))
        assert summed.wait() == 4 * expected
    assert len(callback_threads) == 50 and "ucxcoll-engine" not in callback_threads, callback_threads


@check()
def future_is_complete_once_wait_returns_as_with_gloo(ctx: Context) -> None:
    # torchft chains on a Work's Future right after wait() and expects the
    # callback to run at once, as it does on gloo. The hard case: the
    # operation completed before wait() was called, and its Future was
    # handed to a future thread.
    for group in (None, ctx.gloo):
        for iteration in range(100):
            work = dist.all_reduce(torch.full((4,), float(iteration)), group=group, async_op=True)
            while not work.is_completed():
                time.sleep(0)
            assert work.wait() is True
            ran = []
            work.get_future().then(lambda future: ran.append(future.value()[0][0].item()))
            assert work.get_future().done() and ran == [float(iteration * ctx.world)], (group, iteration, ran)


@check(min_world=2)
def subgroup_of_all_but_last_rank(ctx: Context) -> None:
    members = list(range(ctx.world - 1))
    ours_group = dist.new_group(members, backend="ucxcoll")
    gloo_group = dist.new_group(members, backend="gloo")
    if ctx.rank not in members:
        return
    tensor = torch.arange(1000, dtype=torch.float32) * (ctx.rank + 1)  # exact in any order
    reference = tensor.clone()
    dist.all_reduce(tensor, group=ours_group)
    dist.all_reduce(reference, group=gloo_group)
    assert_equal(tensor, reference, "subgroup all_reduce")
    outputs = [torch.empty(3) for _ in members]
    dist.all_gather(outputs, torch.full((3,), float(ctx.rank)), group=ours_group)
    for r in members:
        assert torch.equal(outputs[r], torch.full((3,), float(r)))
    dist.destroy_process_group(ours_group)


def threads_other_than_future_completers() -> int:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    assert names.count("ucxcoll-engine") == 1, names
    assert names.count("ucxcoll-peers") <= 1, names  # the one watch over peer processes
    assert names.count("ucxcoll-future") <= 8, names
    return sum(1 for name in names if name != "ucxcoll-future")


@check()
def new_groups_share_the_one_progress_thread(ctx: Context) -> None:
    # One UCX context and progress thread per process, whatever the number
    # of groups: creating and using four more groups adds no thread. (The
    # threads that complete Futures, "ucxcoll-future", are started on
    # demand, per process, up to 8; they are not counted.)
    threads_before = threads_other_than_future_completers()
    groups = [new_group() for _ in range(4)]
    for i, group in enumerate(groups):
        tensor = torch.full((3,), float(i))
        dist.all_reduce(tensor, group=group)
        assert torch.equal(tensor, torch.full((3,), float(i * ctx.world))), f"group {i}"
    threads_after = threads_other_than_future_completers()
    for group in groups:
        dist.destroy_process_group(group)
    assert threads_after == threads_before, f"{threads_before} threads before, {threads_after} after"




# ---- many operations in flight: threads, groups, point-to-point ------------------



def run_threads(*bodies) -> None:
    """Runs each body on its own thread; re-raises the first failure."""
    errors = []

    def guarded(body):
        try:
            body()
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    # Daemon threads: one that never finishes fails the check below instead
    # of keeping the rank process from exiting.
    threads = [threading.Thread(target=guarded, args=(body,), daemon=True) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), "a thread did not finish within 120 s"
    if errors:
        raise errors[0]


def all_reduces(group, count: int, rounds: int, world: int, offset: float):
    def body():
        for i in range(rounds):
            tensor = torch.full((count,), float(i) + offset)
            dist.all_reduce(tensor, group=group)
            assert torch.equal(tensor, torch.full((count,), (float(i) + offset) * world)), (offset, i, tensor[0])

    return body


@check(min_world=2)
def two_threads_two_groups_in_the_same_order(ctx: Context) -> None:
    a = new_group()
    b = new_group()
    run_threads(all_reduces(a, 100, 60, ctx.world, 0.0), all_reduces(b, 50_000, 20, ctx.world, 0.5))
    dist.destroy_process_group(a)
    dist.destroy_process_group(b)


@check(min_world=2)
def two_threads_two_groups_in_opposite_orders(ctx: Context) -> None:
    # Even ranks issue group a's first collective before group b's, odd
    # ranks b's before a's. With one queue for all groups, a on the even
    # ranks would wait behind... b on the odd ranks, which waits for b on
    # the even ranks, queued behind a: a deadlock until the deadline.
    a = new_group()
    b = new_group()

    def delayed(body):
        def run():
            time.sleep(0.2)
            body()

        return run

    on_a = all_reduces(a, 10, 30, ctx.world, 0.0)
    on_b = all_reduces(b, 10, 30, ctx.world, 0.5)
    if ctx.rank % 2 == 0:
        run_threads(on_a, delayed(on_b))
    else:
        run_threads(delayed(on_a), on_b)
    dist.destroy_process_group(a)
    dist.destroy_process_group(b)


@check(min_world=2)
def async_collectives_of_one_group_while_another_runs_synchronous_ones(ctx: Context) -> None:
    a = new_group()
    b = new_group()
    tensors = [torch.full((1 << 18,), float(i)) for i in range(16)]
    works = [dist.all_reduce(t, group=a, async_op=True) for t in tensors]
    all_reduces(b, 8, 100, ctx.world, 0.25)()
    for work in works:
        work.wait()
    for i, tensor in enumerate(tensors):
        assert torch.equal(tensor, torch.full_like(tensor, float(i) * ctx.world)), i
    dist.destroy_process_group(a)
    dist.destroy_process_group(b)


@check(min_world=2)
def point_to_point_interleaved_with_collectives_on_the_same_and_other_groups(ctx: Context) -> None:
    other = new_group()
    right, left = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
    pending = []
    for i in range(20):
        outgoing = torch.full((1000 + i,), float(ctx.rank * 100 + i))
        incoming = torch.empty(1000 + i)
        pending.append((i, incoming, dist.isend(outgoing, dst=right, tag=i), dist.irecv(incoming, src=left, tag=i)))
        world_sum = torch.full((5,), float(i))
        dist.all_reduce(world_sum)  # the group the transfers use
        other_sum = torch.full((5,), float(2 * i))
        work = dist.all_reduce(other_sum, group=other, async_op=True)
        assert torch.equal(world_sum, torch.full((5,), float(i * ctx.world)))
        work.wait()
        assert torch.equal(other_sum, torch.full((5,), float(2 * i * ctx.world)))
    for i, incoming, send, recv in pending:
        send.wait()
        recv.wait()
        assert torch.equal(incoming, torch.full_like(incoming, float(left * 100 + i))), i
    dist.destroy_process_group(other)


@check()
def work_wait_from_several_threads(ctx: Context) -> None:
    tensor = torch.full((1 << 16,), float(ctx.rank))
    dist.barrier()
    work = dist.all_reduce(tensor, async_op=True)
    results = []

    def waiter():
        results.append(work.wait())

    run_threads(*([waiter] * 4))
    assert results == [True] * 4
    assert torch.equal(tensor, torch.full_like(tensor, ctx.world * (ctx.world - 1) / 2))


# ---- pipeline parallelism -------------------------------------------------------


def stage_layers(world: int):
    torch.manual_seed(0)
    return [torch.nn.Linear(16, 16) for _ in range(world)]


def microbatches(count: int):
    torch.manual_seed(1)
    return torch.randn(count, 3, 16)


@check(min_world=2)
def pipeline_1f1b_with_isend_irecv_matches_one_process(ctx: Context) -> None:
    # Stage s = rank s holds layer s. Microbatches flow forward (activations)
    # and backward (gradients) with isend/irecv, in 1F1B order: warm-up
    # forwards, then one forward and one backward alternately, then the
    # remaining backwards.
    n, stage, m = ctx.world, ctx.rank, 6
    layer = stage_layers(n)[stage]
    inputs = microbatches(m)
    saved, losses, sends = {}, {}, []

    def forward(mb):
        if stage == 0:
            x = inputs[mb].clone().requires_grad_()
        else:
            x = torch.empty(3, 16)
            dist.recv(x, src=stage - 1, tag=mb)
            x.requires_grad_()
        y = torch.tanh(layer(x))
        saved[mb] = (x, y)
        if stage < n - 1:
            sends.append(dist.isend(y.detach(), dst=stage + 1, tag=mb))
        else:
            losses[mb] = (y**2).sum()

    def backward(mb):
        x, y = saved.pop(mb)
        if stage == n - 1:
            losses[mb].backward()
        else:
            grad = torch.empty(3, 16)
            dist.recv(grad, src=stage + 1, tag=1000 + mb)
            y.backward(grad)
        if stage > 0:
            sends.append(dist.isend(x.grad, dst=stage - 1, tag=1000 + mb))

    warmup = min(n - stage - 1, m)
    for mb in range(warmup):
        forward(mb)
    for i in range(m - warmup):
        forward(warmup + i)
        backward(i)
    for mb in range(m - warmup, m):
        backward(mb)
    for work in sends:
        work.wait()

    # The same computation in one process, microbatch by microbatch.
    reference = stage_layers(n)
    for mb in range(m):
        y = inputs[mb]
        for ref in reference:
            y = torch.tanh(ref(y))
        (y**2).sum().backward()
    assert torch.allclose(layer.weight.grad, reference[stage].weight.grad, rtol=0, atol=1e-6), stage
    assert torch.allclose(layer.bias.grad, reference[stage].bias.grad, rtol=0, atol=1e-6), stage
    if stage == n - 1:
        total = sum(loss.item() for loss in losses.values())
        expected = 0.0
        for mb in range(m):
            y = inputs[mb]
            for ref in reference:
                y = torch.tanh(ref(y))
            expected += (y**2).sum().item()
        assert abs(total - expected) <= 1e-5 * max(1.0, abs(expected)), (total, expected)


@check(min_world=2, max_world=2)
def torch_pipelining_schedules_match_gloo(ctx: Context) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    def run(schedule_class, group):
        torch.manual_seed(0)
        full = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)
        )
        part = full[:2] if ctx.rank == 0 else full[2:]
        stage = PipelineStage(part, ctx.rank, 2, torch.device("cpu"), group=group)
        schedule = schedule_class(stage, n_microbatches=4, loss_fn=lambda out, target: ((out - target) ** 2).mean())
        torch.manual_seed(2)
        x, target = torch.randn(8, 16), torch.randn(8, 4)
        losses = []
        if ctx.rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=target, losses=losses)
        grads = [p.grad.clone() for p in part.parameters()]
        return [loss.item() for loss in losses], grads

    for schedule_class in (ScheduleGPipe, Schedule1F1B):
        ours = run(schedule_class, dist.group.WORLD)
        reference = run(schedule_class, ctx.gloo)
        assert ours[0] == reference[0], (schedule_class.__name__, ours[0], reference[0])
        if ctx.rank == 1:
            assert len(ours[0]) == 4, ours[0]
        for mine, theirs in zip(ours[1], reference[1]):
            assert torch.equal(mine, theirs), schedule_class.__name__
