"""Point-to-point on CPU tensors: send/recv/isend/irecv with tags, receives
from any rank, batch_isend_irecv, ordering, sizes up to 1 GiB, many
receives outstanding, and the errors: bad input refused before anything is
sent, a size mismatch naming both sizes, a peer that never sends. Run at
world sizes 1-4 by test_point_to_point.py.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from checking import DTYPES, SHAPES, Checks, Context, assert_equal, expect_error, for_gloo, from_gloo

check = Checks()


def made_by(ctx: Context, rank: int, dtype, shape, seed: int) -> torch.Tensor:
    """What ctx.make(dtype, shape, seed) returns on `rank`."""
    other = Context.__new__(Context)
    other.rank, other.world = rank, ctx.world
    return other.make(dtype, shape, seed)


def ring_peers(ctx: Context) -> tuple[int, int]:
    return (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world


def pattern(count: int, seed: int) -> torch.Tensor:
    """Cheap, position-dependent uint8 data (no two neighbours equal):
    (7 i + seed) mod 251 at position i. It repeats every 251 bytes, so one
    period is computed and tiled (computing it over int64 positions took 18 s
    for the 1 GiB transfer, 40 times the transfer itself)."""
    period = ((torch.arange(251, dtype=torch.int64) * 7 + seed) % 251).to(torch.uint8)
    return period.repeat(count // 251 + 1)[:count]


@check(min_world=2)
def isend_irecv_ring_every_dtype_and_shape_equals_gloo(ctx: Context) -> None:
    right, left = ring_peers(ctx)
    for seed, dtype in enumerate(DTYPES):
        for shape in SHAPES:
            mine = ctx.make(dtype, shape, 500 + seed)
            ours = torch.zeros_like(mine)
            works = [dist.isend(mine, dst=right, tag=seed), dist.irecv(ours, src=left, tag=seed)]
            for work in works:
                assert work.wait() is True
            expected = made_by(ctx, left, dtype, shape, 500 + seed)
            assert_equal(ours, expected, f"{dtype} {shape} from rank {left}")
            # The same exchange on gloo gives the same tensor.
            reference = for_gloo(torch.zeros_like(mine))
            gloo_works = [
                dist.isend(for_gloo(mine), dst=right, tag=seed, group=ctx.gloo),
                dist.irecv(reference, src=left, tag=seed, group=ctx.gloo),
            ]
            for work in gloo_works:
                work.wait()
            assert_equal(ours, from_gloo(reference, dtype), f"{dtype} {shape} against gloo")


@check(min_world=2)
def blocking_send_recv_with_tags(ctx: Context) -> None:
    # Rank 0 sends to every other rank with tag = its rank; they answer.
    if ctx.rank == 0:
        for peer in range(1, ctx.world):
            dist.send(torch.full((3,), float(peer)), dst=peer, tag=peer)
        for peer in range(1, ctx.world):
            answer = torch.empty(2, dtype=torch.int64)
            dist.recv(answer, src=peer, tag=1000 + peer)
            assert answer.tolist() == [peer, peer * peer], answer
    else:
        received = torch.empty(3)
        dist.recv(received, src=0, tag=ctx.rank)
        assert torch.equal(received, torch.full((3,), float(ctx.rank)))
        dist.send(torch.tensor([ctx.rank, ctx.rank * ctx.rank]), dst=0, tag=1000 + ctx.rank)


@check(min_world=2)
def recv_from_any_source_returns_the_sender(ctx: Context) -> None:
    if ctx.rank == 0:
        senders = []
        for _ in range(ctx.world - 1):
            value = torch.empty(4)
            sender = dist.recv(value, tag=9)  # src=None: from any rank
            assert torch.equal(value, torch.full((4,), float(sender * 10))), (sender, value)
            senders.append(sender)
        assert sorted(senders) == list(range(1, ctx.world)), senders
        # irecv from any rank: the Work knows the source too.
        work = dist.irecv(value := torch.empty(4), tag=10)
        work.wait()
        assert work._source_rank() == 1 and torch.equal(value, torch.ones(4)), (work._source_rank(), value)
    else:
        dist.send(torch.full((4,), float(ctx.rank * 10)), dst=0, tag=9)
        if ctx.rank == 1:
            dist.send(torch.ones(4), dst=0, tag=10)


@check(min_world=2, max_world=2)
def messages_with_one_tag_match_in_posting_order(ctx: Context) -> None:
    # 40 messages of mixed sizes (eager and rendezvous) on one tag, and two
    # tags whose receives are posted in the other order.
    sizes = [(1 << 20) if i % 4 == 0 else 16 + i for i in range(40)]
    if ctx.rank == 0:
        works = [dist.isend(pattern(size, i), dst=1, tag=5) for i, size in enumerate(sizes)]
        works += [dist.isend(torch.tensor([1]), dst=1, tag=1), dist.isend(torch.tensor([2]), dst=1, tag=2)]
        for work in works:
            work.wait()
    else:
        buffers = [torch.empty(size, dtype=torch.uint8) for size in sizes]
        works = [dist.irecv(buffer, src=0, tag=5) for buffer in buffers]
        second, first = torch.empty(1, dtype=torch.int64), torch.empty(1, dtype=torch.int64)
        works += [dist.irecv(second, src=0, tag=2), dist.irecv(first, src=0, tag=1)]
        for work in works:
            work.wait()
        for i, buffer in enumerate(buffers):
            assert torch.equal(buffer, pattern(sizes[i], i)), f"message {i} out of order"
        assert (first.item(), second.item()) == (1, 2)


@check(min_world=2)
def every_rank_sends_first_then_receives_up_to_64_mib(ctx: Context) -> None:
    # Both sides post their sends before any receive: with a blocking
    # engine this hung once a message needed rendezvous.
    right, left = ring_peers(ctx)
    for size in (8, 64 << 10, 64 << 20):
        outgoing = pattern(size, ctx.rank)
        send = dist.isend(outgoing, dst=right)
        incoming = torch.empty(size, dtype=torch.uint8)
        recv = dist.irecv(incoming, src=left)
        send.wait()
        recv.wait()
        assert torch.equal(incoming, pattern(size, left)), f"{size} bytes from rank {left}"


@check(min_world=2, max_world=2)
def one_gib_transfer(ctx: Context) -> None:
    size = 1 << 30
    if ctx.rank == 0:
        dist.send(pattern(size, 3), dst=1)
    else:
        received = torch.zeros(size, dtype=torch.uint8)
        dist.recv(received, src=0)
        assert torch.equal(received, pattern(size, 3)), "1 GiB payload differs"


@check(min_world=2)
def a_thousand_receives_outstanding(ctx: Context) -> None:
    count = 1000
    buffers = [torch.empty(2, dtype=torch.int64) for _ in range(count)]
    works = [dist.irecv(buffers[i], src=0, tag=i) for i in range(count)] if ctx.rank == 1 else []
    dist.barrier(group=ctx.gloo)  # every receive posted before the first send
    if ctx.rank == 0:
        works = [dist.isend(torch.tensor([i, -i]), dst=1, tag=i) for i in reversed(range(count))]
    for work in works:
        work.wait()
    if ctx.rank == 1:
        for i, buffer in enumerate(buffers):
            assert buffer.tolist() == [i, -i], (i, buffer)


@check(min_world=2, max_world=2)
def hundreds_of_large_sends_in_flight_while_the_sender_keeps_posting(ctx: Context) -> None:
    # 64 KiB messages go by rendezvous: each send stays in flight until the
    # receiver (which posts slowly) takes it, so the progress thread ends
    # sends while this thread posts more and frees the finished ones. Once
    # a race there lost a completion and Work.wait() never returned.
    count, elements = 300, 16384
    for round_ in range(3):
        if ctx.rank == 0:
            works = [dist.isend(torch.full((elements,), float(i + round_)), dst=1, tag=i) for i in range(count)]
        else:
            buffers = [torch.empty(elements) for _ in range(count)]
            works = []
            for i in range(count):
                works.append(dist.irecv(buffers[i], src=0, tag=i))
                if i % 10 == 0:
                    time.sleep(0.001)
        for work in works:
            work.wait()
        if ctx.rank == 1:
            for i, buffer in enumerate(buffers):
                assert torch.equal(buffer, torch.full((elements,), float(i + round_))), (round_, i)


@check(min_world=2)
def non_contiguous_send_and_receive(ctx: Context) -> None:
    right, left = ring_peers(ctx)
    outgoing = ctx.make(torch.float32, (5, 3), 600).t()  # transposed view
    incoming = torch.zeros(5, 3).t()
    assert not outgoing.is_contiguous() and not incoming.is_contiguous()
    works = [dist.isend(outgoing, dst=right), dist.irecv(incoming, src=left)]
    for work in works:
        work.wait()
    assert torch.equal(incoming, made_by(ctx, left, torch.float32, (5, 3), 600).t())


@check(min_world=2)
def batch_isend_irecv_exchanges_with_both_neighbours(ctx: Context) -> None:
    right, left = ring_peers(ctx)
    from_left, from_right = torch.empty(6), torch.empty(6)
    ops = [
        dist.P2POp(dist.isend, torch.full((6,), float(ctx.rank)), right),
        dist.P2POp(dist.isend, torch.full((6,), float(-ctx.rank)), left),
        dist.P2POp(dist.irecv, from_left, left),
        dist.P2POp(dist.irecv, from_right, right),
    ]
    works = dist.batch_isend_irecv(ops)
    assert len(works) == 1, f"one Work for the coalesced batch, got {len(works)}"
    for work in works:
        work.wait()
    # With 2 ranks both neighbours are one rank and both messages share tag
    # 0: they match in the order they were posted, which gives the same.
    assert torch.equal(from_left, torch.full((6,), float(left)))
    assert torch.equal(from_right, torch.full((6,), float(-right)))


@check()
def empty_coalescing_block(ctx: Context) -> None:
    # torch runs an empty block when it aborts a group; it must just work.
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as manager:
        pass
    manager.wait()
    pg = dist.group.WORLD
    pg._start_coalescing(torch.device("cpu"))
    work = pg._end_coalescing(torch.device("cpu"))
    assert work.wait() is True and work.is_completed()


@check(min_world=2)
def error_bad_peer_tag_and_self_are_refused_before_sending(ctx: Context) -> None:
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    tensor = torch.ones(2)
    expect_error(
        ValueError,
        [f"ucxcoll: send: destination rank {ctx.world} is outside the group (valid ranks are 0..{ctx.world - 1})"],
        lambda: backend.send([tensor], ctx.world, 0),
    )
    expect_error(
        ValueError,
        ["ucxcoll: recv: source rank -1 is outside the group"],
        lambda: backend.recv([tensor], -1, 0),
    )
    peer = (ctx.rank + 1) % ctx.world
    expect_error(
        ValueError, ["ucxcoll: send: tag must be non-negative, got -3"], lambda: dist.send(tensor, dst=peer, tag=-3)
    )
    expect_error(
        ValueError, ["ucxcoll: recv: tag must be non-negative, got -3"], lambda: dist.recv(tensor, src=peer, tag=-3)
    )
    expect_error(
        ValueError,
        [f"ucxcoll: send: destination rank {ctx.world + 5} is outside the group"],
        lambda: dist.send(tensor, dst=ctx.world + 5),
    )
    # torch's own check comes first where it has one.
    expect_error(ValueError, ["Invalid destination rank"], lambda: dist.send(tensor, dst=ctx.rank))
    # Nothing was sent: the next message on tag 0 is the real one.
    right, left = ring_peers(ctx)
    incoming = torch.zeros(2)
    works = [dist.isend(torch.full((2,), 4.0), dst=right), dist.irecv(incoming, src=left)]
    for work in works:
        work.wait()
    assert torch.equal(incoming, torch.full((2,), 4.0))


@check(min_world=2)
def error_size_mismatch_names_the_peer_and_both_sizes(ctx: Context) -> None:
    if ctx.rank == 0:
        dist.send(torch.ones(10), dst=1, tag=7)  # 40 bytes into a 32-byte receive
        dist.send(torch.ones(6), dst=1, tag=8)  # 24 bytes into a 32-byte receive
    elif ctx.rank == 1:
        expect_error(
            dist.DistBackendError,
            ["recv #", "from rank 0 (tag 7)", "rank 0 sent 40 bytes where 32 were expected",
             "a receive needs a tensor of exactly the size that was sent"],
            lambda: dist.recv(torch.empty(8), src=0, tag=7),
        )
        expect_error(
            dist.DistBackendError,
            ["from any rank (tag 8)", "rank 0 sent 24 bytes where 32 were expected"],
            lambda: dist.recv(torch.empty(8), tag=8),
        )
    # A failed transfer does not fail the group.
    dist.barrier(group=ctx.gloo)
    if ctx.rank == 0:
        dist.send(torch.ones(8), dst=1, tag=7)
    elif ctx.rank == 1:
        value = torch.empty(8)
        dist.recv(value, src=0, tag=7)
        assert torch.equal(value, torch.ones(8))


@check(min_world=2)
def error_peer_that_never_sends_ends_in_the_deadline_error_naming_it(ctx: Context) -> None:
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=2))
    if ctx.rank == 1:
        expect_error(
            dist.DistBackendError,
            ["recv #0 from rank 0 (tag 3)", "timeout 2000 ms", "timed out after 2000 ms: no data from rank(s) [0]"],
            lambda: dist.recv(torch.empty(4), src=0, tag=3, group=group),
        )
        expect_error(
            dist.DistBackendError,
            ["from any rank (tag 4)", "timed out after 2000 ms: no message from any rank"],
            lambda: dist.recv(torch.empty(4), tag=4, group=group),
        )
    dist.barrier(group=ctx.gloo)
    dist.destroy_process_group(group)


@check()
def isend_irecv_to_the_own_rank(ctx: Context) -> None:
    # torch refuses blocking send/recv to oneself, not isend/irecv (which
    # batch_isend_irecv uses).
    incoming = torch.zeros(5, dtype=torch.int64)
    works = [dist.irecv(incoming, src=ctx.rank, tag=3), dist.isend(torch.arange(5) + ctx.rank, dst=ctx.rank, tag=3)]
    for work in works:
        work.wait()
    assert torch.equal(incoming, torch.arange(5) + ctx.rank), incoming
