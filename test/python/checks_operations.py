"""reduce, reduce_scatter, all_to_all, gather, scatter, the uneven
all_gather, monitored_barrier, the coalesced collectives and split groups,
each compared with gloo on the same inputs.

Reductions: every rank's input is gathered over gloo and reduced here in
rank order (rank 0's first), exactly as ucxcoll reduces each block, so
results are compared bit for bit, for every reduce op and dtype; where gloo
has the operation itself (SUM on float32), its result is compared too.
Run at world sizes 1 to 4 by test_operations.py.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from checking import (
    DTYPES,
    Checks,
    Context,
    assert_equal,
    assert_reduced_in_some_order,
    expect_error,
    for_gloo,
    from_gloo,
)

check = Checks()

INTEGERS = {torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64}


def reduce_ops(dtype):
    """(name, op, combine) for every reduce op defined on dtype."""
    ops = [("SUM", ReduceOp.SUM, torch.add), ("PRODUCT", ReduceOp.PRODUCT, torch.mul)]
    if not dtype.is_complex:
        ops += [("MIN", ReduceOp.MIN, torch.minimum), ("MAX", ReduceOp.MAX, torch.maximum)]
    if dtype in INTEGERS or dtype == torch.bool:
        ops += [
            ("BAND", ReduceOp.BAND, torch.bitwise_and),
            ("BOR", ReduceOp.BOR, torch.bitwise_or),
            ("BXOR", ReduceOp.BXOR, torch.bitwise_xor),
        ]
    if dtype != torch.bool:
        ops.append(("AVG", ReduceOp.AVG, None))
    if dtype.is_floating_point or dtype.is_complex:
        ops.append(("PREMUL_SUM(0.5)", dist._make_nccl_premul_sum(0.5), None))
        ops.append(("PREMUL_SUM(tensor 0.25)", dist._make_nccl_premul_sum(torch.tensor([0.25])), None))
    return ops


def everyone(ctx: Context, tensor: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's tensor, gathered over gloo (exact: no arithmetic)."""
    gathered = [for_gloo(torch.empty_like(tensor)) for _ in range(ctx.world)]
    dist.all_gather(gathered, for_gloo(tensor.contiguous()), group=ctx.gloo)
    return [from_gloo(t, tensor.dtype) for t in gathered]


def reduced_in_rank_order(name: str, combine, inputs: list[torch.Tensor]) -> torch.Tensor:
    """What ucxcoll computes: rank 0's input combined with rank 1's, ..."""
    dtype = inputs[0].dtype
    world = len(inputs)
    if name.startswith("PREMUL_SUM"):
        factor = 0.5 if name == "PREMUL_SUM(0.5)" else 0.25
        inputs = [(x * factor).to(dtype) for x in inputs]
    if name in ("AVG",) or name.startswith("PREMUL_SUM"):
        combine = torch.add
    result = inputs[0].clone()
    for other in inputs[1:]:
        result = combine(result, other).to(dtype)
    if name == "AVG":
        if dtype.is_complex:
            result = torch.complex(result.real / world, result.imag / world)
        elif dtype.is_floating_point:
            result = result / world
        else:
            result = torch.div(result, world, rounding_mode="trunc")
    return result.to(dtype)


def assert_reduced(ours, expected, name: str, what: str) -> None:
    """Bit for bit, except complex products: the kernel's complex multiply
    rounds differently from torch's (within a few ulp)."""
    if name == "PRODUCT" and ours.dtype.is_complex:
        assert ours.shape == expected.shape and torch.allclose(ours, expected, rtol=1e-6, atol=0), what
    else:
        assert_reduced_in_some_order(ours, expected, what)


def make_input(ctx: Context, dtype, shape, seed: int) -> torch.Tensor:
    # Small values, so that products of a few ranks neither overflow nor
    # underflow in float16/bfloat16.
    tensor = ctx.make(dtype, shape, seed)
    if dtype.is_floating_point or dtype.is_complex:
        tensor = (tensor / 4 + 1).to(dtype)
    elif dtype in INTEGERS:
        tensor = torch.remainder(tensor, 7).to(dtype)
    return tensor


# ---- reduce ---------------------------------------------------------------


@check()
def reduce_every_op_dtype_and_root(ctx: Context) -> None:
    for seed, dtype in enumerate(DTYPES):
        for shape in [(), (0,), (7,), (3, 4)]:
            tensor = make_input(ctx, dtype, shape, 10 + seed)
            inputs = everyone(ctx, tensor)
            for index, (name, op, combine) in enumerate(reduce_ops(dtype)):
                root = (seed + index) % ctx.world
                ours = tensor.clone()
                dist.reduce(ours, dst=root, op=op)
                what = f"reduce {name} {dtype} {shape} to rank {root}"
                if ctx.rank == root:
                    assert_reduced(ours, reduced_in_rank_order(name, combine, inputs), name, what)
                else:
                    assert_equal(ours, tensor, f"{what}: a non-root's tensor is left as it was")


@check()
def reduce_large_every_root_equals_gloo(ctx: Context) -> None:
    # Above the small-message limit: reduce-scatter, then gather to the
    # root. 20,001 floats (80 KiB) stay below the staging threshold (256
    # KiB); from it two ranks on one host stage the reduce through shared
    # memory (odd counts: blocks differ by one). Integer-valued floats:
    # every order sums exactly.
    cases = [
        (20_001, torch.float32),
        (300_001, torch.float32),
        (300_001, torch.int64),
        ((9 << 20) // 4 + 1, torch.float32),
    ]
    for root in range(ctx.world):
        for count, dtype in cases:
            tensor = torch.remainder(ctx.make(torch.int64, (count,), 40 + root), 1000).to(dtype)
            ours = tensor.clone()
            reference = tensor.clone()
            dist.reduce(ours, dst=root)
            dist.reduce(reference, dst=root, group=ctx.gloo)
            if ctx.rank == root:
                assert_equal(ours, reference, f"large reduce of {count} {dtype} to {root}")
            else:
                assert_equal(ours, tensor, "a non-root's tensor is left as it was")
    tensor = make_input(ctx, torch.float32, (300_001,), 45)
    expected = reduced_in_rank_order("MAX", torch.maximum, everyone(ctx, tensor))
    dist.reduce(tensor, dst=ctx.world - 1, op=ReduceOp.MAX)
    if ctx.rank == ctx.world - 1:
        assert_equal(tensor, expected, "large reduce MAX")


@check()
def reduce_non_contiguous(ctx: Context) -> None:
    tensor = make_input(ctx, torch.float64, (6, 5), 50).t()
    assert not tensor.is_contiguous()
    expected = reduced_in_rank_order("SUM", torch.add, everyone(ctx, tensor))
    dist.reduce(tensor, dst=0)
    if ctx.rank == 0:
        assert_reduced_in_some_order(tensor, expected, "non-contiguous reduce")


# ---- reduce_scatter ------------------------------------------------------


@check()
def reduce_scatter_tensor_every_op_and_dtype(ctx: Context) -> None:
    for seed, dtype in enumerate(DTYPES):
        for block in [(), (0,), (5,), (2, 3)]:
            stacked = make_input(ctx, dtype, (ctx.world, *block), 60 + seed)
            inputs = everyone(ctx, stacked)
            for name, op, combine in reduce_ops(dtype):
                expected = reduced_in_rank_order(name, combine, inputs)[ctx.rank]
                what = f"reduce_scatter_tensor {name} {dtype} {block}"
                ours = torch.zeros(block, dtype=dtype)
                dist.reduce_scatter_tensor(ours, stacked, op=op)
                assert_reduced(ours, expected, name, f"{what} (stacked)")
                if block:
                    concatenated = stacked.reshape(ctx.world * block[0], *block[1:])
                    ours = torch.zeros(block, dtype=dtype)
                    dist.reduce_scatter_tensor(ours, concatenated, op=op)
                    assert_reduced(ours, expected, name, f"{what} (concatenated)")


@check()
def reduce_scatter_tensor_equals_gloo_large_and_in_place(ctx: Context) -> None:
    for count in (10, 300_000):
        tensor = torch.remainder(ctx.make(torch.int64, (ctx.world * count,), 70), 1000).float()
        ours = torch.empty(count)
        reference = torch.empty(count)
        dist.reduce_scatter_tensor(ours, tensor)
        dist.reduce_scatter_tensor(reference, tensor.clone(), group=ctx.gloo)
        assert_equal(ours, reference, f"reduce_scatter_tensor {count}")
        # In place: the output is this rank's block of the input (FSDP does this).
        in_place = tensor.clone()
        dist.reduce_scatter_tensor(in_place.chunk(ctx.world)[ctx.rank], in_place)
        assert_equal(in_place.chunk(ctx.world)[ctx.rank], reference, f"in-place reduce_scatter_tensor {count}")


@check()
def reduce_scatter_list_form_non_contiguous(ctx: Context) -> None:
    inputs = [make_input(ctx, torch.float32, (4, 3), 80 + r).t() for r in range(ctx.world)]
    output = torch.zeros(4, 3).t()
    gathered = [everyone(ctx, x) for x in inputs]
    expected = reduced_in_rank_order("SUM", torch.add, gathered[ctx.rank])
    dist.reduce_scatter(output, inputs)
    assert_reduced_in_some_order(output.contiguous(), expected.contiguous(), "reduce_scatter list form")
    reference = torch.zeros(3, 4)
    dist.reduce_scatter(reference, [x.contiguous() for x in inputs], group=ctx.gloo)
    assert torch.allclose(output, reference), "reduce_scatter list form against gloo"


# ---- all_to_all ------------------------------------------------------------


@check()
def all_to_all_single_equal_splits_every_dtype(ctx: Context) -> None:
    for seed, dtype in enumerate(DTYPES):
        for row in [(), (3,)]:
            tensor = ctx.make(dtype, (2 * ctx.world, *row), 90 + seed)
            ours = torch.zeros_like(tensor)
            dist.all_to_all_single(ours, tensor)
            inputs = everyone(ctx, tensor)
            expected = torch.cat([inputs[r].chunk(ctx.world)[ctx.rank] for r in range(ctx.world)])
            assert_equal(ours, expected, f"all_to_all_single {dtype} {row}")
    tensor = ctx.make(torch.float32, (ctx.world * 50_000,), 99)
    ours = torch.empty_like(tensor)
    reference = torch.empty_like(tensor)
    dist.all_to_all_single(ours, tensor)
    dist.all_to_all_single(reference, tensor, group=ctx.gloo)
    assert_equal(ours, reference, "large all_to_all_single against gloo")


@check()
def all_to_all_single_explicit_splits_with_zeros(ctx: Context) -> None:
    # Rank s sends (s + d) % 3 rows to rank d: some blocks are empty.
    def rows(sender, receiver):
        return (sender + receiver) % 3

    input_splits = [rows(ctx.rank, d) for d in range(ctx.world)]
    output_splits = [rows(s, ctx.rank) for s in range(ctx.world)]
    tensor = ctx.make(torch.int32, (sum(input_splits), 2), 110)
    ours = torch.full((sum(output_splits), 2), -1, dtype=torch.int32)
    dist.all_to_all_single(ours, tensor, output_split_sizes=output_splits, input_split_sizes=input_splits)
    reference = torch.full_like(ours, -1)
    dist.all_to_all_single(
        reference, tensor, output_split_sizes=output_splits, input_split_sizes=input_splits, group=ctx.gloo
    )
    assert_equal(ours, reference, "all_to_all_single with split sizes")
    # Non-contiguous output (a transposed view).
    out_t = torch.zeros(2, sum(output_splits), dtype=torch.int32).t()
    dist.all_to_all_single(out_t, tensor, output_split_sizes=output_splits, input_split_sizes=input_splits)
    assert_equal(out_t.contiguous(), reference, "all_to_all_single into a non-contiguous output")


@check()
def all_to_all_list_different_size_per_peer(ctx: Context) -> None:
    # gloo refuses this form; the expected blocks are known exactly.
    def block(sender, receiver):
        return torch.arange((sender * 7 + receiver) % 4 + receiver, dtype=torch.float64) + 100 * sender + receiver

    inputs = [block(ctx.rank, d) for d in range(ctx.world)]
    outputs = [torch.full_like(block(s, ctx.rank), -1) for s in range(ctx.world)]
    dist.all_to_all(outputs, inputs)
    for s in range(ctx.world):
        assert_equal(outputs[s], block(s, ctx.rank), f"all_to_all block from rank {s}")


# ---- gather and scatter ------------------------------------------------------


@check()
def gather_and_scatter_every_root_equal_gloo(ctx: Context) -> None:
    for root in range(ctx.world):
        for seed, dtype in enumerate(DTYPES):
            tensor = ctx.make(dtype, (3, 2), 120 + seed)
            gathered = [torch.zeros_like(tensor) for _ in range(ctx.world)] if ctx.rank == root else None
            dist.gather(tensor, gathered, dst=root)
            inputs = everyone(ctx, tensor)
            if ctx.rank == root:
                for r in range(ctx.world):
                    assert_equal(gathered[r], inputs[r], f"gather {dtype} to {root}, block {r}")
            blocks = [ctx.make(dtype, (4,), 140 + seed + r) for r in range(ctx.world)]
            received = torch.zeros(4, dtype=dtype)
            dist.scatter(received, blocks if ctx.rank == root else None, src=root)
            root_blocks = [everyone(ctx, b)[root] for b in blocks]
            assert_equal(received, root_blocks[ctx.rank], f"scatter {dtype} from {root}")
        big = ctx.make(torch.float32, (200_000,), 150)
        ours = [torch.empty_like(big) for _ in range(ctx.world)] if ctx.rank == root else None
        reference = [torch.empty_like(big) for _ in range(ctx.world)] if ctx.rank == root else None
        dist.gather(big, ours, dst=root)
        dist.gather(big, reference, dst=root, group=ctx.gloo)
        if ctx.rank == root:
            for r in range(ctx.world):
                assert_equal(ours[r], reference[r], f"large gather block {r}")


@check()
def gather_and_scatter_non_contiguous(ctx: Context) -> None:
    tensor = ctx.make(torch.float32, (3, 4), 160).t()
    gathered = [torch.zeros(3, 4).t() for _ in range(ctx.world)] if ctx.rank == 0 else None
    dist.gather(tensor, gathered, dst=0)
    inputs = everyone(ctx, tensor)
    if ctx.rank == 0:
        for r in range(ctx.world):
            assert_equal(gathered[r].contiguous(), inputs[r].contiguous(), f"non-contiguous gather block {r}")
    received = torch.zeros(4, 3).t()
    blocks = [torch.arange(12.0).reshape(4, 3).t() + r for r in range(ctx.world)] if ctx.rank == 0 else None
    dist.scatter(received, blocks, src=0)
    assert_equal(received.contiguous(), (torch.arange(12.0).reshape(4, 3).t() + ctx.rank).contiguous(), "scatter")


# ---- all_gather with different shapes per rank -------------------------------


@check()
def all_gather_uneven_shapes(ctx: Context) -> None:
    def shape_of(rank):
        return (rank + 1, 3) if rank % 2 == 0 else (0, 3) if rank == 1 else (2, 3)

    tensor = ctx.make(torch.float32, shape_of(ctx.rank), 170)
    outputs = [torch.full(shape_of(r), -1.0) for r in range(ctx.world)]
    dist.all_gather(outputs, tensor)
    for r in range(ctx.world):
        g = torch.Generator().manual_seed(170 * 1000 + r)  # what ctx.make gave rank r
        assert_equal(outputs[r], torch.randn(shape_of(r), generator=g, dtype=torch.float64).float(), f"block {r}")


# ---- monitored_barrier --------------------------------------------------------


@check()
def monitored_barrier_passes_when_all_arrive(ctx: Context) -> None:
    for _ in range(3):
        dist.monitored_barrier(timeout=timedelta(seconds=30))
    dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)


@check(min_world=2)
def monitored_barrier_with_no_time_to_wait_fails_on_rank_0(ctx: Context) -> None:
    # A zero timeout, with the others not calling: gloo's words, then ours.
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=30))
    if ctx.rank == 0:
        expect_error(
            dist.DistBackendError,
            ["ucxcoll: Rank 0 timed out in monitoredBarrier after 0 ms (", "no data from rank(s) ["],
            lambda: group.monitored_barrier(timedelta(0)),
        )
    dist.barrier(group=ctx.gloo)
    dist.destroy_process_group(group)


@check(min_world=3)
def monitored_barrier_names_every_missing_rank(ctx: Context) -> None:
    missing = [r for r in range(1, ctx.world) if r % 2 == 1]  # ranks 1, 3, ...
    listed = ", ".join(map(str, missing))
    # A failed barrier fails its group for good: one group per case.
    for wait_all_ranks in (True, False):
        group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=30))
        if ctx.rank == 0:
            # gloo's sentence first (scripts and torch's tests look for it),
            # then ours, which lists every missing rank either way.
            gloo_sentence = (
                f"[Rank 0]: Ranks {listed} failed to pass monitoredBarrier in 1000 ms ("
                if wait_all_ranks
                else f"[Rank 0]: Rank {missing[0]} failed to pass monitoredBarrier in 1000 ms ("
            )
            expect_error(
                dist.DistBackendError,
                [gloo_sentence, "monitored_barrier", f"timed out after 1000 ms: no data from rank(s) [{listed}]"],
                lambda: dist.monitored_barrier(group=group, timeout=timedelta(seconds=1), wait_all_ranks=wait_all_ranks),
            )
        elif ctx.rank not in missing:
            # Arrived, but rank 0 never releases it: rank 0's failure notice
            # or its own deadline, whichever comes first, names rank 0.
            try:
                dist.monitored_barrier(group=group, timeout=timedelta(seconds=1), wait_all_ranks=wait_all_ranks)
            except dist.DistBackendError as error:
                message = str(error)
                assert message.startswith(
                    f"ucxcoll: Rank {ctx.rank} successfully reached monitoredBarrier, but received errors while "
                    "waiting for send/recv from rank 0 ("
                ), message
                assert "rank 0 gave up on this group" in message or "no data from rank(s) [0]" in message, message
            else:
                raise AssertionError("a rank that rank 0 never released passed the monitored barrier")
        dist.barrier(group=ctx.gloo)
        dist.destroy_process_group(group)


# ---- coalesced collectives -------------------------------------------------------


def sequence_number(group=None) -> int:
    pg = group or dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device("cpu"))._get_sequence_number_for_group()


@check()
def coalesced_collectives_are_one_operation_each(ctx: Context) -> None:
    dtypes = [torch.float32, torch.int64, torch.bfloat16]
    tensors = [make_input(ctx, torch.float32, shape, 200 + i) for i, shape in enumerate([(3,), (), (2, 5), (0,)])]
    expected = [reduced_in_rank_order("SUM", torch.add, everyone(ctx, t)) for t in tensors]
    before = sequence_number()
    dist.all_reduce_coalesced(tensors)
    assert sequence_number() == before + 1, "all_reduce_coalesced must be one collective"
    for i, (ours, reference) in enumerate(zip(tensors, expected)):
        assert_reduced_in_some_order(ours, reference, f"all_reduce_coalesced tensor {i}")

    inputs = [ctx.make(torch.int64, shape, 210 + i) for i, shape in enumerate([(2, 3), (), (0,), (5,)])]
    # torch's layout: outputs[r][i] receives rank r's input i.
    outputs = [[torch.zeros_like(x) for x in inputs] for _ in range(ctx.world)]
    before = sequence_number()
    dist.all_gather_coalesced(outputs, inputs)
    assert sequence_number() == before + 1, "all_gather_coalesced must be one collective"
    for i, x in enumerate(inputs):
        for r, block in enumerate(everyone(ctx, x)):
            assert_equal(outputs[r][i], block, f"all_gather_coalesced rank {r} tensor {i}")

    # What FSDP and the functional collectives use: the coalescing manager.
    gather_outputs = [torch.zeros(ctx.world * 4, dtype=dtype) for dtype in dtypes]
    gather_inputs = [ctx.make(dtype, (4,), 220 + i) for i, dtype in enumerate(dtypes)]
    before = sequence_number()
    with dist._coalescing_manager():
        for output, x in zip(gather_outputs, gather_inputs):
            dist.all_gather_into_tensor(output, x)
    assert sequence_number() == before + 1, "coalesced all_gather_into_tensor must be one collective"
    for i, x in enumerate(gather_inputs):
        assert_equal(gather_outputs[i], torch.cat(everyone(ctx, x)), f"coalesced all_gather_into_tensor {i}")

    scatter_inputs = [make_input(ctx, torch.float32, (ctx.world * n,), 230 + n) for n in (1, 6, 0)]
    scatter_outputs = [torch.zeros(n) for n in (1, 6, 0)]
    before = sequence_number()
    with dist._coalescing_manager():
        for output, x in zip(scatter_outputs, scatter_inputs):
            dist.reduce_scatter_tensor(output, x, op=ReduceOp.AVG)
    assert sequence_number() == before + 1, "coalesced reduce_scatter_tensor must be one collective"
    for i, x in enumerate(scatter_inputs):
        expected = reduced_in_rank_order("AVG", None, everyone(ctx, x)).chunk(ctx.world)
        mine = expected[ctx.rank] if expected else torch.zeros(0)
        assert_reduced_in_some_order(scatter_outputs[i], mine, f"coalesced reduce_scatter_tensor {i}")


# ---- split groups and options ----------------------------------------------------


@check(min_world=2)
def split_group_runs_collectives_on_the_halves(ctx: Context) -> None:
    halves = [list(range(0, ctx.world, 2)), list(range(1, ctx.world, 2))]
    group = dist.split_group(split_ranks=halves, timeout=timedelta(seconds=30))
    mine = halves[ctx.rank % 2]
    assert dist.get_world_size(group) == len(mine)
    assert dist.get_rank(group) == mine.index(ctx.rank)
    tensor = torch.tensor([float(ctx.rank)])
    dist.all_reduce(tensor, group=group)
    assert tensor.item() == float(sum(mine)), f"all_reduce over the half {mine}: {tensor.item()}"
    backend = group._get_backend(torch.device("cpu"))
    assert backend.name() == "ucxcoll"
    dist.destroy_process_group(group)


@check()
def on_completion_hook_reports_every_operation_in_order_and_destroy_waits_for_it(ctx: Context) -> None:
    # torch's onCompletion hook (as ProcessGroupNCCL has it): one WorkInfo
    # per operation that succeeded, in order, off the caller's thread;
    # _wait_for_pending_works (which destroy_process_group calls when hooks
    # are registered) returns only once every hook call has returned.
    import threading

    group = dist.new_group(backend="ucxcoll")
    assert not group._has_hooks()
    seen, threads = [], set()

    def hook(info) -> None:
        time.sleep(0.02)  # a slow hook: the wait below must wait for it
        threads.add(threading.get_ident())
        seen.append((info.op_type, info.seq, info.time_finished >= info.time_started,
                     info.active_duration >= timedelta(0)))

    group._enable_collectives_timing()
    group._register_on_completion_hook(hook)
    assert group._has_hooks()
    tensor = torch.ones(4)
    dist.all_reduce(tensor, group=group)
    dist.broadcast(tensor, src=0, group=group)
    dist.barrier(group=group)
    dist.all_gather_into_tensor(torch.empty(4 * ctx.world), tensor, group=group, async_op=True).wait()
    group._wait_for_pending_works()
    op = dist.distributed_c10d.OpType if hasattr(dist.distributed_c10d, "OpType") else torch._C._distributed_c10d.OpType
    kinds = [kind for kind, _, _, _ in seen]
    assert kinds == [op.ALLREDUCE, op.BROADCAST, op.BARRIER, op._ALLGATHER_BASE], kinds
    sequences = [sequence for _, sequence, _, _ in seen]
    assert sequences == sorted(sequences) and len(set(sequences)) == 4, sequences
    assert all(ordered and positive for _, _, ordered, positive in seen), seen
    assert threading.get_ident() not in threads
    expect_error(ValueError, ["ucxcoll: this process group has an onCompletion hook already"],
                 lambda: group._register_on_completion_hook(hook))
    dist.all_reduce(tensor, group=group)
    dist.destroy_process_group(group)  # waits for the last hook call
    assert len(seen) == 5, seen


@check()
def options_timeout_and_sequence_number(ctx: Context) -> None:
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    options = backend.options
    assert options.backend == "ucxcoll", options.backend
    assert options._timeout == timedelta(seconds=60), options._timeout
    before = sequence_number()
    dist.all_reduce(torch.ones(1))
    assert sequence_number() == before + 1


@check(min_world=2)
def set_timeout_is_honoured(ctx: Context) -> None:
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=60))
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=1), group)
    backend = group._get_backend(torch.device("cpu"))
    assert backend.options._timeout == timedelta(seconds=1), backend.options._timeout
    if ctx.rank == 0:  # alone: the others never join, so the new deadline must end it
        expect_error(
            dist.DistBackendError,
            ["all_reduce #0", "timeout 1000 ms", "timed out after 1000 ms: "],
            lambda: dist.all_reduce(torch.ones(1), group=group),
        )
    dist.barrier(group=ctx.gloo)
    dist.destroy_process_group(group)


# ---- errors: refused before anything is sent ---------------------------------------


@check()
def bad_arguments_are_refused_clearly(ctx: Context) -> None:
    w = ctx.world
    expect_error(ValueError, ["root rank", "outside the group"], lambda: dist.reduce(torch.ones(2), dst=w))
    expect_error(
        TypeError,
        ["ReduceOp.BAND is not defined for dtype float32"],
        lambda: dist.reduce_scatter_tensor(torch.zeros(1), torch.ones(w), op=ReduceOp.BAND),
    )
    expect_error(
        TypeError,
        ["ReduceOp.MAX is not defined for dtype complex64"],
        lambda: dist.reduce(torch.ones(2, dtype=torch.complex64), dst=0, op=ReduceOp.MAX),
    )
    expect_error(
        ValueError,
        ["must hold world_size", f"{w + 1} elements"],
        lambda: dist.reduce_scatter_tensor(torch.zeros(1), torch.ones(w + 1)),
    )
    expect_error(
        ValueError,
        ["input_split_sizes adds up to", "must add up"],
        lambda: dist.all_to_all_single(torch.zeros(w), torch.zeros(w), [1] * w, [2] * w),
    )
    expect_error(
        ValueError,
        ["output_split_sizes has", "one size per rank"],
        lambda: dist.all_to_all_single(torch.zeros(w), torch.zeros(w), [1] * (w + 1), [1] * w),
    )
    expect_error(
        ValueError,
        ["negative size"],
        lambda: dist.all_to_all_single(torch.zeros(w), torch.zeros(w), [1] * w, [-1] + [1] * (w - 1)),
    )
    if w > 1:
        expect_error(
            ValueError,
            ["does not divide equally", "input_split_sizes"],
            lambda: dist.all_to_all_single(torch.zeros(w + 1), torch.zeros(w + 1)),
        )
    if ctx.rank == 0:
        expect_error(
            ValueError,
            ["the output list holds", "one tensor per rank"],
            lambda: dist.gather(torch.ones(2), [torch.zeros(2)] * (w + 1), dst=0),
        )
        expect_error(
            ValueError,
            ["input tensor 0 has shape [3]", "the output has shape [2]"],
            lambda: dist.scatter(torch.zeros(2), [torch.zeros(3)] * w, src=0),
        )
    # Every rank is still in step: a collective right after works.
    tensor = torch.ones(3)
    dist.all_reduce(tensor)
    assert_equal(tensor, torch.full((3,), float(w)), "all_reduce after the refused calls")
