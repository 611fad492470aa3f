"""Ranks that disagree about what they are doing: every rank involved gets a
DistBackendError, never data. These are the cases found against the old tag
layout (16-bit sequence, no collective or root in the tag), where all_reduce
matched all_gather's messages, broadcasts from different roots "succeeded",
and a stale message matched collective #65,536. Each check uses a fresh
group, since a disagreement fails the group. Run at world sizes 2 and 3 by
test_disagreement.py.
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from checking import Checks, Context, expect_error

check = Checks()

# Long enough that a disagreement found only by the deadline fails the
# check (its message says "timed out", not "disagree").
TIMEOUT = timedelta(seconds=30)


def fresh_group():
    return dist.new_group(backend="ucxcoll", timeout=TIMEOUT)


def expect_disagreement(fragments, fn) -> None:
    """fn() raises DistBackendError about collective #0 with `fragments`
    (what this rank saw itself), or learnt of the disagreement from a peer's
    failure notice first ("rank R found that they do"): with 3 ranks either
    may arrive first."""
    try:
        fn()
    except dist.DistBackendError as error:
        message = str(error)
        assert "ranks disagree about collective #0" in message, message
        if "found that they do" not in message:
            for fragment in fragments:
                assert fragment in message, f"{fragment!r} not in message: {message}"
        return
    raise AssertionError("expected DistBackendError, nothing was raised")


@check(min_world=2)
def all_reduce_then_all_gather_against_the_opposite_order(ctx: Context) -> None:
    group = fresh_group()
    tensor = torch.full((4,), float(ctx.rank + 1))
    gathered = [torch.zeros(4) for _ in range(ctx.world)]

    def all_reduce():
        dist.all_reduce(tensor, group=group)

    def all_gather():
        dist.all_gather(gathered, torch.full((4,), 2.0), group=group)

    first, second = (all_reduce, all_gather) if ctx.rank == 0 else (all_gather, all_reduce)
    expect_disagreement([], first)
    expect_error(dist.DistBackendError, ["failed earlier", "ranks disagree"], second)
    dist.destroy_process_group(group)


@check(min_world=2)
def all_reduce_avg_against_sum(ctx: Context) -> None:
    # AVG travels as a sum; the reduction in the tag keeps it apart.
    group = fresh_group()
    op = dist.ReduceOp.AVG if ctx.rank == 0 else dist.ReduceOp.SUM
    expect_disagreement(["AVG", "SUM"], lambda: dist.all_reduce(torch.ones(4), op=op, group=group))
    dist.destroy_process_group(group)


@check(min_world=2)
def all_reduce_against_all_gather(ctx: Context) -> None:
    group = fresh_group()
    if ctx.rank == 0:
        expect_disagreement(
            ["this rank runs all_reduce", "a peer sent a message of all_gather"],
            lambda: dist.all_reduce(torch.ones(4), group=group),
        )
    else:
        expect_disagreement(
            ["this rank runs all_gather", "a peer sent a message of all_reduce"],
            lambda: dist.all_gather([torch.zeros(4) for _ in range(ctx.world)], torch.ones(4), group=group),
        )
    dist.destroy_process_group(group)


@check(min_world=2)
def all_reduce_against_broadcast_from_another_rank(ctx: Context) -> None:
    group = fresh_group()
    if ctx.rank == 0:
        expect_disagreement(
            ["this rank runs all_reduce", "a peer sent a message of broadcast from rank 1"],
            lambda: dist.all_reduce(torch.ones(4), group=group),
        )
    elif ctx.rank == 1:
        expect_disagreement(
            ["this rank runs broadcast from rank 1", "a peer sent a message of all_reduce"],
            lambda: dist.broadcast(torch.full((4,), 1.0), src=1, group=group),
        )
    else:
        # A rank that agrees with the root may finish its broadcast before it
        # sees rank 0's messages; then it holds exactly what it asked for
        # (the root's data) and its next collective on the group fails.
        tensor = torch.zeros(4)
        try:
            dist.broadcast(tensor, src=1, group=group)
        except dist.DistBackendError as error:
            assert "ranks disagree about collective #0" in str(error), str(error)
        else:
            assert torch.equal(tensor, torch.full((4,), 1.0)), tensor
    dist.destroy_process_group(group)


@check(min_world=2)
def broadcast_with_a_different_root_on_every_rank(ctx: Context) -> None:
    # Every rank believes it is the root: none receives anything, so each
    # must learn from its peers' messages (and its synchronous sends) that
    # they disagree, rather than keep its own data and return.
    group = fresh_group()
    mine = torch.full((8,), float(ctx.rank))
    expect_disagreement(
        [f"this rank runs broadcast from rank {ctx.rank}", "a peer sent a message of broadcast from rank"],
        lambda: dist.broadcast(mine, src=ctx.rank, group=group),
    )
    dist.destroy_process_group(group)


@check(min_world=2)
def sizes_that_differ_name_both_sizes(ctx: Context) -> None:
    # Small (direct exchange) and large (ring): 4 MiB against 4 MiB + 4 B.
    for count in (8, 1 << 20):
        group = fresh_group()
        mine = torch.ones(count + (1 if ctx.rank == 1 else 0))
        # A rank whose ring neighbours agree with it learns of the mismatch
        # from the notice of a rank that saw it (at 4 ranks, rank 3 often
        # does): that message names the collective and the finder instead.
        try:
            dist.all_reduce(mine, group=group)
            raise AssertionError("expected DistBackendError, nothing was raised")
        except dist.DistBackendError as error:
            message = str(error)
            assert "all_reduce #0" in message, message
            if "found that they do" not in message:
                assert "(ranks disagree about the tensor sizes)" in message, message
        dist.barrier(group=ctx.gloo)
        dist.destroy_process_group(group)


@check(min_world=2, max_world=2)
def staged_reduce_sizes_that_differ_raise_on_both_ranks(ctx: Context) -> None:
    # 9 MiB against 9 MiB + 4 B: two ranks that stage a reduce through
    # shared memory compare sizes first; both raise, naming both sizes.
    for root in (0, 1):
        group = fresh_group()
        mine = torch.ones((9 << 20) // 4 + (1 if ctx.rank == 1 else 0))
        expect_error(
            dist.DistBackendError,
            ["reduce #0", "rank " + str(1 - ctx.rank) + " works on", "(ranks disagree about the tensor sizes)"],
            lambda: dist.reduce(mine, dst=root, group=group),
        )
        assert torch.equal(mine, torch.ones_like(mine)), "the failed reduce left the tensor as it was"
        dist.barrier(group=ctx.gloo)
        dist.destroy_process_group(group)


@check(min_world=2)
def a_failed_group_refuses_everything_afterwards(ctx: Context) -> None:
    # A message left behind by a disagreement can never be matched later:
    # the group is failed for good (and a new group gets a new channel).
    group = fresh_group()
    if ctx.rank == 0:
        expect_disagreement([], lambda: dist.broadcast(torch.ones(2), src=0, group=group))
    else:
        expect_disagreement([], lambda: dist.all_reduce(torch.ones(2), group=group))
    for _ in range(3):
        expect_error(dist.DistBackendError, ["refused: this process group failed earlier"],
                     lambda: dist.all_reduce(torch.ones(2), group=group))
    dist.destroy_process_group(group)


@check(min_world=2, max_world=2)
def seventy_thousand_collectives_on_one_group(ctx: Context) -> None:
    # Past the 65,536 where the old 16-bit sequence number wrapped.
    group = fresh_group()
    tensor = torch.ones(1)
    for i in range(70_000):
        tensor.fill_(float(i % 7))
        dist.all_reduce(tensor, group=group)
        if tensor.item() != 2.0 * (i % 7):
            raise AssertionError(f"collective #{i}: {tensor.item()} instead of {2.0 * (i % 7)}")
    dist.destroy_process_group(group)


@check(min_world=2)
def staged_all_to_all_block_sizes_that_differ_raise_on_every_rank(ctx: Context) -> None:
    # Blocks of 8 MiB where the last rank's are 4 B longer: every rank
    # raises, from its own check or from the notice of a rank that made it
    # first. The staged rounds (chosen from 8 MiB blocks) check the sizes
    # before any copy, so no rank's output is written. Where the ranks
    # outnumber the cores (all of them run on this host), auto chooses the
    # pairwise exchange instead, which finds the sizes from the messages it
    # receives straight into the output.
    group = fresh_group()
    staged = ctx.world <= len(os.sched_getaffinity(0))
    block = (8 << 20) // 4 + (1 if ctx.rank == ctx.world - 1 else 0)
    mine = torch.ones(block * ctx.world)
    out = torch.zeros_like(mine)
    try:
        dist.all_to_all_single(out, mine, group=group)
        raise AssertionError("expected DistBackendError, nothing was raised")
    except dist.DistBackendError as error:
        message = str(error)
        assert "all_to_all_single #0" in message, message
        assert "(ranks disagree about the tensor sizes)" in message or "found that they do" in message, message
        if staged and "found that they do" not in message:
            assert "works on blocks of" in message, message
        if not staged and "found that they do" not in message:
            assert "were expected" in message and "works on blocks of" not in message, message
    if staged:
        assert torch.equal(out, torch.zeros_like(out)), "the failed all_to_all_single left the output as it was"
    dist.barrier(group=ctx.gloo)
    dist.destroy_process_group(group)


@check(min_world=2)
def all_to_all_single_split_sizes_that_disagree(ctx: Context) -> None:
    # Rank 1 sends two rows to rank 0, which expects one: ranks 0 and 1
    # raise, naming each other and both sizes; any other rank agrees with
    # both, gets every block and completes.
    group = fresh_group()
    w = ctx.world
    input_splits = [2 if ctx.rank == 1 and d == 0 else 1 for d in range(w)]
    output_splits = [1] * w
    tensor = torch.full((sum(input_splits),), float(ctx.rank))
    output = torch.full((w,), -1.0)

    def exchange():
        dist.all_to_all_single(output, tensor, output_splits, input_splits, group=group)

    if ctx.rank == 0:
        expect_error(dist.DistBackendError, ["split sizes", "rank 1 sends 8 bytes to this rank, which expects 4"], exchange)
    elif ctx.rank == 1:
        expect_error(dist.DistBackendError, ["split sizes", "this rank sends 8 bytes to rank 0, which expects 4"], exchange)
    else:
        exchange()
        assert output.tolist() == [float(r) for r in range(w)], output
    dist.destroy_process_group(group)


@check(min_world=2)
def uneven_all_gather_shapes_that_disagree(ctx: Context) -> None:
    # Rank 0 believes rank 1 contributes 3 elements; rank 1 contributes 2.
    group = fresh_group()
    mine = torch.ones(2 if ctx.rank == 1 else 1)
    shapes = [3 if (r == 1 and ctx.rank == 0) else (2 if r == 1 else 1) for r in range(ctx.world)]
    outputs = [torch.zeros(n) for n in shapes]
    if ctx.rank == 0 and ctx.world > 1:
        outputs[0] = torch.zeros(1)
    fragments = ["split sizes", "bytes"]
    if ctx.rank in (0, 1):
        expect_error(dist.DistBackendError, fragments, lambda: dist.all_gather(outputs, mine, group=group))
    else:
        dist.all_gather(outputs, mine, group=group)
    dist.destroy_process_group(group)


@check(min_world=2)
def reduce_against_all_reduce(ctx: Context) -> None:
    group = fresh_group()
    if ctx.rank == 0:
        expect_disagreement(
            ["this rank runs reduce to rank 0 (SUM", "a peer sent a message of all_reduce"],
            lambda: dist.reduce(torch.ones(4), dst=0, group=group),
        )
    else:
        # Rank 0, the root, receives everything and sends nothing: it finds
        # the disagreement and tells the others (a failure notice).
        expect_disagreement(["rank 0 found that they do"], lambda: dist.all_reduce(torch.ones(4), group=group))
    dist.destroy_process_group(group)


@check(min_world=2)
def reduce_scatter_avg_against_sum(ctx: Context) -> None:
    group = fresh_group()
    op = dist.ReduceOp.AVG if ctx.rank == 0 else dist.ReduceOp.SUM
    expect_disagreement(
        ["reduce_scatter", "AVG", "SUM"],
        lambda: dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * ctx.world), op=op, group=group),
    )
    dist.destroy_process_group(group)


@check(min_world=2)
def reduce_with_another_reduction_on_one_rank(ctx: Context) -> None:
    # Every non-root sends to the root; the root sees rank 1's MAX where it
    # asked for SUM and fails; rank 1's send is never matched, and the
    # root's failure notice ends it. Another rank's SUM agrees with the
    # root: it ends normally if the root took its message before failing,
    # or with the root's notice if not (both happen on a loaded machine).
    group = fresh_group()
    op = dist.ReduceOp.MAX if ctx.rank == 1 else dist.ReduceOp.SUM
    fragments = {0: ["this rank runs reduce to rank 0 (SUM", "reduce to rank 0 (MAX"], 1: ["rank 0 found that they do"]}
    if ctx.rank in fragments:
        expect_disagreement(fragments[ctx.rank], lambda: dist.reduce(torch.ones(4), dst=0, op=op, group=group))
    else:
        try:
            dist.reduce(torch.ones(4), dst=0, op=op, group=group)
        except dist.DistBackendError as error:
            assert "ranks disagree about collective #0: rank 0 found that they do" in str(error), str(error)
    dist.destroy_process_group(group)
