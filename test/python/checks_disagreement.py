"""Ranks that disagree about what they are doing: every rank involved gets a
DistBackendError, never data. These are the cases found against the old tag
layout (16-bit sequence, no collective or root in the tag), where all_reduce
matched all_gather's messages, broadcasts from different roots "succeeded",
and a stale message matched collective #65,536. Each check uses a fresh
group, since a disagreement fails the group. Run at world sizes 2 and 3 by
test_disagreement.py.
"""

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
    expect_error(dist.DistBackendError, ["ranks disagree about collective #0", *fragments], fn)


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
        expect_error(
            dist.DistBackendError,
            ["all_reduce #0", "(ranks disagree about the tensor sizes)"],
            lambda: dist.all_reduce(mine, group=group),
        )
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
