"""Checks that run inside every rank process of a test group.

Started by harness.py as `python rank_checks.py RANK WORLD PORT OUTDIR`.
This module never imports ucxcoll: the backend must come from torch's
autoload, exactly as in a user's unmodified script.

Each check gets the same inputs on ucxcoll (the default group) and on a
gloo group, and compares. Gathers and broadcasts must match exactly, as
must integer sums; float sums may differ in rounding because the two
backends add in different orders, so they are compared with the
tolerances in FLOAT_TOLERANCE.
"""

import json
import os
import sys
import threading
import time
import traceback
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
]

# Float sums are checked against the exact sum of the same inputs (computed
# in float64/complex128), within the standard error bound of an n-term
# recursive summation: n * u * sum(|x_i|), u being the dtype's unit
# roundoff, plus n * 2^-53 * sum(|x_i|) for the rounding of the float64
# reference itself. gloo's result is held to the same bound, so the two agree as
# closely as any two summation orders can.
UNIT_ROUNDOFF = {
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.complex64: 2.0**-24,
}

SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4)]
GROUP_TIMEOUT = timedelta(seconds=60)

CHECKS = []


def check(min_world: int = 1):
    def register(fn):
        CHECKS.append((fn.__name__, fn, min_world))
        return fn

    return register


class Context:
    def __init__(self, rank: int, world: int):
        self.rank = rank
        self.world = world
        self.gloo = dist.new_group(backend="gloo")

    def make(self, dtype, shape, seed: int) -> torch.Tensor:
        """Deterministic input for (rank, seed); differs across ranks."""
        g = torch.Generator().manual_seed(seed * 1000 + self.rank)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dtype.is_complex:
            return torch.randn(shape, generator=g, dtype=dtype)
        if dtype.is_floating_point:
            return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        low = max(torch.iinfo(dtype).min, -100)
        return torch.randint(low, 101, shape, generator=g, dtype=dtype)


# gloo has no int16 ("Invalid scalar type"). For int16 the reference runs
# on the same values widened to int32 and is narrowed back afterwards:
# lossless for gathers and broadcasts, and sums that wrap agree mod 2^16.
def for_gloo(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(torch.int32) if tensor.dtype == torch.int16 else tensor.clone()


def from_gloo(tensor: torch.Tensor, dtype) -> torch.Tensor:
    return tensor.to(dtype)


def assert_equal(ours, reference, what: str) -> None:
    assert ours.dtype == reference.dtype, f"{what}: dtype {ours.dtype} != {reference.dtype}"
    assert ours.shape == reference.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(reference.shape)}"
    assert torch.equal(ours, reference), f"{what}: values differ\nours={ours}\ngloo={reference}"


def assert_sum_matches(ctx, ours, reference, inputs, what: str) -> None:
    """ours/reference: all_reduce(SUM) results of `inputs` on ucxcoll/gloo."""
    if inputs.dtype not in UNIT_ROUNDOFF:
        assert_equal(ours, reference, what)  # integers and bool: exact
        return
    wide_dtype = torch.complex128 if inputs.dtype.is_complex else torch.float64
    wide = inputs.to(wide_dtype)
    everyone = [torch.empty_like(wide) for _ in range(ctx.world)]
    dist.all_gather(everyone, wide, group=ctx.gloo)
    exact = torch.stack(everyone).sum(dim=0) if everyone[0].dim() > 0 else sum(everyone)
    magnitude = torch.stack([e.abs() for e in everyone]).sum(dim=0)
    bound = ctx.world * (UNIT_ROUNDOFF[inputs.dtype] + 2.0**-53) * magnitude
    for backend, result in (("ucxcoll", ours), ("gloo", reference)):
        assert result.dtype == inputs.dtype and result.shape == inputs.shape, f"{what}: {backend} dtype/shape"
        error = (result.to(wide_dtype) - exact).abs()
        worst = (error - bound).argmax() if error.numel() else None
        assert bool((error <= bound).all()), (
            f"{what}: {backend} sum off by {error.flatten()[worst].item()} at {worst.item()}, "
            f"bound {bound.flatten()[worst].item()}"
        )


def expect_error(error_type, fragments, fn) -> None:
    """fn() must raise exactly error_type with every fragment in its message."""
    try:
        fn()
    except Exception as error:  # noqa: BLE001
        assert type(error) is error_type, f"expected {error_type.__name__}, got {type(error).__name__}: {error}"
        for fragment in fragments:
            assert fragment in str(error), f"{fragment!r} not in message: {error}"
        return
    raise AssertionError(f"expected {error_type.__name__}, nothing was raised")


# ---- all_gather (list form) ------------------------------------------------


@check()
def all_gather_every_dtype_and_shape(ctx: Context) -> None:
    for seed, dtype in enumerate(DTYPES):
        for shape in SHAPES:
            tensor = ctx.make(dtype, shape, seed)
            ours = [torch.full_like(tensor, 0) for _ in range(ctx.world)]
            reference = [for_gloo(torch.full_like(tensor, 0)) for _ in range(ctx.world)]
            dist.all_gather(ours, tensor)
            dist.all_gather(reference, for_gloo(tensor), group=ctx.gloo)
            for r in range(ctx.world):
                assert_equal(ours[r], from_gloo(reference[r], dtype), f"all_gather {dtype} {shape} block {r}")


@check()
def all_gather_non_contiguous_input_and_outputs(ctx: Context) -> None:
    tensor = ctx.make(torch.float32, (4, 3), 1).t()  # transposed view
    assert not tensor.is_contiguous()
    ours = [torch.zeros(4, 3).t() for _ in range(ctx.world)]  # non-contiguous outputs
    reference = [torch.zeros(3, 4) for _ in range(ctx.world)]
    dist.all_gather(ours, tensor)
    dist.all_gather(reference, tensor.contiguous(), group=ctx.gloo)
    for r in range(ctx.world):
        assert_equal(ours[r].contiguous(), reference[r], f"non-contiguous block {r}")


@check()
def all_gather_large_message_uses_ring(ctx: Context) -> None:
    tensor = ctx.make(torch.float32, (300_000,), 2)  # 1.2 MB: above the small-message limit
    ours = [torch.empty_like(tensor) for _ in range(ctx.world)]
    reference = [torch.empty_like(tensor) for _ in range(ctx.world)]
    dist.all_gather(ours, tensor)
    dist.all_gather(reference, tensor, group=ctx.gloo)
    for r in range(ctx.world):
        assert_equal(ours[r], reference[r], f"large all_gather block {r}")


# ---- all_gather_into_tensor ------------------------------------------------


@check()
def all_gather_into_tensor_concatenated_and_stacked(ctx: Context) -> None:
    for seed, dtype in enumerate(DTYPES):
        for shape in [(), (0,), (5,), (3, 4)]:
            tensor = ctx.make(dtype, shape, 100 + seed)
            layouts = {"stacked": (ctx.world, *shape)}
            if len(shape) > 0:
                layouts["concatenated"] = (ctx.world * shape[0], *shape[1:])
            for layout, out_shape in layouts.items():
                ours = torch.zeros(out_shape, dtype=dtype)
                dist.all_gather_into_tensor(ours, tensor)
                # gloo's own all_gather_into_tensor rejects 0-dim inputs, so
                # the reference is its list form, concatenated.
                blocks = [for_gloo(torch.zeros_like(tensor)) for _ in range(ctx.world)]
                dist.all_gather(blocks, for_gloo(tensor), group=ctx.gloo)
                reference = torch.cat([b.reshape(-1) for b in blocks]).reshape(out_shape)
                assert_equal(ours, from_gloo(reference, dtype), f"all_gather_into_tensor {dtype} {shape} {layout}")


@check()
def all_gather_into_tensor_non_contiguous_input(ctx: Context) -> None:
    tensor = ctx.make(torch.int64, (5, 2), 7).t()
    ours = torch.zeros(ctx.world * 2, 5, dtype=torch.int64)
    dist.all_gather_into_tensor(ours, tensor)
    reference = torch.zeros(ctx.world * 2, 5, dtype=torch.int64)
    dist.all_gather_into_tensor(reference, tensor.contiguous(), group=ctx.gloo)
    assert_equal(ours, reference, "non-contiguous input")


@check()
def all_gather_into_tensor_in_place_view(ctx: Context) -> None:
    # The FSDP pattern: the input is this rank's slice of the output.
    output = torch.zeros(ctx.world * 6)
    output[ctx.rank * 6 : (ctx.rank + 1) * 6] = ctx.make(torch.float32, (6,), 8)
    reference = output.clone()
    dist.all_gather_into_tensor(output, output[ctx.rank * 6 : (ctx.rank + 1) * 6])
    dist.all_gather_into_tensor(reference, reference[ctx.rank * 6 : (ctx.rank + 1) * 6].clone(), group=ctx.gloo)
    assert_equal(output, reference, "in-place all_gather_into_tensor")


# ---- broadcast -----------------------------------------------------------------


@check()
def broadcast_every_dtype_from_every_source(ctx: Context) -> None:
    for src in range(ctx.world):
        for seed, dtype in enumerate(DTYPES):
            for shape in [(), (0,), (7,), (3, 4)]:
                ours = ctx.make(dtype, shape, 200 + seed)
                reference = for_gloo(ours)
                dist.broadcast(ours, src=src)
                dist.broadcast(reference, src=src, group=ctx.gloo)
                assert_equal(ours, from_gloo(reference, dtype), f"broadcast {dtype} {shape} from {src}")


@check()
def broadcast_non_contiguous_and_large(ctx: Context) -> None:
    ours = ctx.make(torch.float32, (6, 5), 9).t()
    reference = ours.clone()
    dist.broadcast(ours, src=ctx.world - 1)
    dist.broadcast(reference, src=ctx.world - 1, group=ctx.gloo)
    assert_equal(ours, reference, "non-contiguous broadcast")
    big = ctx.make(torch.float64, (200_000,), 10)
    big_reference = big.clone()
    dist.broadcast(big, src=0)
    dist.broadcast(big_reference, src=0, group=ctx.gloo)
    assert_equal(big, big_reference, "1.6 MB broadcast")


# ---- all_reduce SUM ---------------------------------------------------------------


@check()
def all_reduce_sum_every_dtype(ctx: Context) -> None:
    # 40,000 elements exceed the small-message limit for every dtype wider
    # than one byte, so both the direct and the ring algorithm are covered.
    for seed, dtype in enumerate(DTYPES):
        for shape in [(), (0,), (7,), (3, 4), (40_000,)]:
            inputs = ctx.make(dtype, shape, 300 + seed)
            ours = inputs.clone()
            reference = for_gloo(inputs)
            dist.all_reduce(ours)
            dist.all_reduce(reference, group=ctx.gloo)
            assert_sum_matches(ctx, ours, from_gloo(reference, dtype), inputs, f"all_reduce {dtype} {shape}")


@check()
def all_reduce_results_identical_on_all_ranks(ctx: Context) -> None:
    for shape in [(100,), (100_000,)]:
        tensor = ctx.make(torch.float32, shape, 11)
        dist.all_reduce(tensor)
        everyone = [torch.empty_like(tensor) for _ in range(ctx.world)]
        dist.all_gather(everyone, tensor, group=ctx.gloo)
        for r in range(ctx.world):
            assert_equal(everyone[r], everyone[0], f"rank {r} result differs from rank 0's ({shape})")


@check()
def all_reduce_non_contiguous(ctx: Context) -> None:
    inputs = ctx.make(torch.float64, (8, 3), 12).t()
    ours = inputs.clone()  # clone keeps the transposed strides
    assert not ours.is_contiguous()
    reference = inputs.clone()
    dist.all_reduce(ours)
    dist.all_reduce(reference, group=ctx.gloo)
    assert_sum_matches(ctx, ours, reference, inputs, "non-contiguous all_reduce")


# ---- 64 MiB per rank ---------------------------------------------------------------


@check()
def sixty_four_mib_per_rank(ctx: Context) -> None:
    # Known results instead of gloo: four more 64 MiB-per-rank runs would
    # only slow the suite down. Integer data keeps every check exact.
    count = (64 << 20) // 4
    tensor = torch.arange(count, dtype=torch.int32) + ctx.rank
    output = torch.empty(ctx.world * count, dtype=torch.int32)
    dist.all_gather_into_tensor(output, tensor)
    for r in range(ctx.world):
        block = output[r * count : (r + 1) * count]
        assert block[0].item() == r and block[-1].item() == count - 1 + r, f"64 MiB all_gather block {r}"
        assert torch.equal(block, torch.arange(count, dtype=torch.int32) + r), f"64 MiB all_gather block {r}"
    del output
    outputs = [torch.empty(count, dtype=torch.int32) for _ in range(ctx.world)]
    dist.all_gather(outputs, tensor)
    for r in range(ctx.world):
        assert torch.equal(outputs[r] - r, torch.arange(count, dtype=torch.int32)), f"64 MiB list block {r}"
    del outputs
    reduced = tensor.clone()
    dist.all_reduce(reduced)
    expected = torch.arange(count, dtype=torch.int32) * ctx.world + ctx.world * (ctx.world - 1) // 2
    assert torch.equal(reduced, expected), "64 MiB all_reduce"
    payload = tensor if ctx.rank == ctx.world - 1 else torch.zeros_like(tensor)
    dist.broadcast(payload, src=ctx.world - 1)
    assert torch.equal(payload, torch.arange(count, dtype=torch.int32) + ctx.world - 1), "64 MiB broadcast"


# ---- object collectives (built by torch on all_gather and broadcast) -------------


@check()
def all_gather_object_and_broadcast_object_list(ctx: Context) -> None:
    # Objects of different pickled sizes on each rank.
    mine = {"rank": ctx.rank, "payload": "x" * (10 + 1000 * ctx.rank), "list": list(range(ctx.rank))}
    gathered = [None] * ctx.world
    dist.all_gather_object(gathered, mine)
    for r in range(ctx.world):
        assert gathered[r] == {"rank": r, "payload": "x" * (10 + 1000 * r), "list": list(range(r))}, r
    objects = [("config", ctx.world), {"lr": 0.1}] if ctx.rank == ctx.world - 1 else [None, None]
    dist.broadcast_object_list(objects, src=ctx.world - 1)
    assert objects == [("config", ctx.world), {"lr": 0.1}]


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
    group = dist.new_group(backend="ucxcoll")
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


@check()
def new_groups_share_the_one_progress_thread(ctx: Context) -> None:
    # One UCX context and progress thread per process, whatever the number
    # of groups: creating and using four more groups adds no thread.
    threads_before = len(os.listdir("/proc/self/task"))
    groups = [dist.new_group(backend="ucxcoll") for _ in range(4)]
    for i, group in enumerate(groups):
        tensor = torch.full((3,), float(i))
        dist.all_reduce(tensor, group=group)
        assert torch.equal(tensor, torch.full((3,), float(i * ctx.world))), f"group {i}"
    threads_after = len(os.listdir("/proc/self/task"))
    for group in groups:
        dist.destroy_process_group(group)
    assert threads_after == threads_before, f"{threads_before} threads before, {threads_after} after"


# ---- bad input: refused before anything is sent -------------------------------


@check()
def error_output_list_wrong_length(ctx: Context) -> None:
    tensor = torch.tensor([ctx.rank])
    expect_error(
        ValueError,
        [f"the output list holds {ctx.world + 1} tensors but the group has {ctx.world} ranks", "torch.empty_like"],
        lambda: dist.all_gather([torch.empty_like(tensor) for _ in range(ctx.world + 1)], tensor),
    )


@check()
def error_empty_output_list(ctx: Context) -> None:
    # The classic mistake: out = []; dist.all_gather(out, tensor)
    expect_error(
        ValueError,
        ["the output list is empty", f"range({ctx.world})", "torch.empty_like(tensor)"],
        lambda: dist.all_gather([], torch.tensor([ctx.rank])),
    )


@check()
def error_outputs_preallocated_with_torch_tensor_empty(ctx: Context) -> None:
    # The other classic: out = [torch.tensor([]) for _ in range(world)]
    expect_error(
        ValueError,
        ["output tensor 0 has shape [0] but the input has shape [2, 3]", "torch.tensor([])", "torch.empty_like"],
        lambda: dist.all_gather([torch.tensor([]) for _ in range(ctx.world)], torch.rand(2, 3)),
    )
    # With an integer input torch's own dtype check fires first.
    expect_error(
        ValueError,
        ["Invalid usage of tensors with different dtypes"],
        lambda: dist.all_gather([torch.tensor([]) for _ in range(ctx.world)], torch.tensor([ctx.rank])),
    )


@check()
def error_output_shape_differs(ctx: Context) -> None:
    expect_error(
        ValueError,
        [f"output tensor {ctx.world - 1} has shape [4] but the input has shape [3]"],
        lambda: dist.all_gather([torch.zeros(3)] * (ctx.world - 1) + [torch.zeros(4)], torch.zeros(3)),
    )


@check()
def error_all_gather_into_tensor_wrong_size(ctx: Context) -> None:
    stacked = f"[{ctx.world}, 2, 3]"
    concatenated = f"[{ctx.world * 2}, 3]"
    expect_error(
        ValueError,
        ["must hold world_size", f"{6 * ctx.world} elements", concatenated, stacked],
        lambda: dist.all_gather_into_tensor(torch.zeros(ctx.world * 6 + 1), torch.zeros(2, 3)),
    )


@check()
def error_all_gather_into_tensor_dtype_differs(ctx: Context) -> None:
    expect_error(
        TypeError,
        ["all_gather_into_tensor: the output tensor has dtype Long but the input has dtype Float"],
        lambda: dist.all_gather_into_tensor(torch.zeros(ctx.world * 2, dtype=torch.int64), torch.zeros(2)),
    )


@check()
def error_unsupported_reduce_op(ctx: Context) -> None:
    expect_error(
        NotImplementedError,
        ["all_reduce supports ReduceOp.SUM only so far; got ReduceOp.MAX"],
        lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.MAX),
    )


@check()
def error_cuda_tensor_not_supported_yet(ctx: Context) -> None:
    if not torch.cuda.is_available():
        return  # recorded as a skip by the harness: no GPU to make a CUDA tensor
    tensor = torch.ones(3, device="cuda")
    expect_error(NotImplementedError, ["CUDA tensors are not supported yet"], lambda: dist.all_reduce(tensor))


@check()
def group_still_works_after_refused_input(ctx: Context) -> None:
    tensor = torch.full((4,), float(ctx.rank))
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.full((4,), ctx.world * (ctx.world - 1) / 2))


# ---- ranks that disagree, peers that never come: errors, not hangs ---------------


@check(min_world=2)
def error_ranks_disagree_about_size(ctx: Context) -> None:
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=10))
    count = 4 if ctx.rank == 0 else 8
    outputs = [torch.zeros(count) for _ in range(ctx.world)]
    try:
        dist.all_gather(outputs, torch.ones(count), group=group)
    except dist.DistBackendError as error:
        assert "all_gather #0" in str(error), str(error)
        assert "ranks disagree about the tensor sizes" in str(error) or "timed out" in str(error), str(error)
    else:
        # A rank whose receives all matched may finish; rank 0 (smaller
        # buffers) always receives too much and must fail.
        assert ctx.rank != 0, "rank 0 received 32-byte messages into 16-byte buffers and did not fail"
        return
    # The group failed: later collectives fail fast with the original cause.
    expect_error(dist.DistBackendError, ["failed earlier", "all_gather #0"], lambda: dist.barrier(group=group))


@check(min_world=2)
def error_timeout_names_the_missing_rank(ctx: Context) -> None:
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=2))
    if ctx.rank == 0:
        return  # rank 0 never joins the collective
    expect_error(
        dist.DistBackendError,
        ["all_reduce #0", "timeout 2000 ms", "timed out", "no data from rank(s) [0"],
        lambda: dist.all_reduce(torch.ones(4), group=group),
    )
    expect_error(dist.DistBackendError, ["failed earlier", "timed out"], lambda: dist.all_reduce(torch.ones(4), group=group))


# ---- runner ---------------------------------------------------------------------


def main() -> None:
    rank, world, port, outdir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    selected = set(sys.argv[5].split(",")) if len(sys.argv) > 5 and sys.argv[5] else None
    dist.init_process_group(
        backend="ucxcoll", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=GROUP_TIMEOUT
    )
    ctx = Context(rank, world)
    results = {}
    for name, fn, min_world in CHECKS:
        if selected is not None and name not in selected:
            continue
        if world < min_world:
            results[name] = {"status": "skipped", "reason": f"needs at least {min_world} ranks"}
            continue
        if name == "error_cuda_tensor_not_supported_yet" and not torch.cuda.is_available():
            results[name] = {"status": "skipped", "reason": "no GPU on this machine to create a CUDA tensor"}
            continue
        try:
            fn(ctx)
            results[name] = {"status": "passed"}
        except Exception:  # noqa: BLE001
            results[name] = {"status": "failed", "error": traceback.format_exc()}
        # Keep ranks in step between checks (gloo: unaffected by ucxcoll failures).
        dist.barrier(group=ctx.gloo)
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as out:
        json.dump(results, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
