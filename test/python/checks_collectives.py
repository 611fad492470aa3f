"""Collectives on CPU tensors, each compared with gloo on the same inputs:
every dtype and shape, non-contiguous and large tensors, and the input
errors every rank must get before anything is sent. Run at world sizes 1-5
by test_collectives.py.
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from checking import (
    DTYPES,
    SHAPES,
    Checks,
    Context,
    assert_equal,
    assert_reduced_in_some_order,
    assert_sum_matches,
    expect_error,
    for_gloo,
    from_gloo,
)

check = Checks()

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


REDUCE_OPS = {
    "PRODUCT": dist.ReduceOp.PRODUCT,
    "MIN": dist.ReduceOp.MIN,
    "MAX": dist.ReduceOp.MAX,
    "BAND": dist.ReduceOp.BAND,
    "BOR": dist.ReduceOp.BOR,
    "BXOR": dist.ReduceOp.BXOR,
}


@check()
def all_reduce_other_ops_every_dtype_equal_gloo(ctx: Context) -> None:
    # Exact comparisons: products of small integers and of floats near 1 in
    # rank order, min/max pick values, bitwise ops are exact.
    for name, op in REDUCE_OPS.items():
        for seed, dtype in enumerate(DTYPES):
            if dtype.is_complex and name != "SUM":
                continue  # torch itself refuses these on complex tensors (ValueError)
            if (dtype.is_floating_point or dtype.is_complex) and name.startswith("B"):
                continue
            if dtype in (torch.float16, torch.bfloat16) and name == "PRODUCT":
                continue  # gloo computes half products differently (checked below against torch)
            for shape in [(), (0,), (7,), (40_000,)]:
                inputs = ctx.make(dtype, shape, 700 + seed)
                if name == "PRODUCT" and not dtype.is_complex and dtype != torch.bool:
                    inputs = (inputs % 3 + 1).to(dtype) if not dtype.is_floating_point else 1 + inputs / 64
                ours = inputs.clone()
                reference = for_gloo(inputs)
                dist.all_reduce(ours, op=op)
                dist.all_reduce(reference, op=op, group=ctx.gloo)
                expected = from_gloo(reference, dtype)
                if name == "PRODUCT" and (dtype.is_floating_point or dtype.is_complex):
                    assert torch.allclose(ours, expected, rtol=1e-5), f"{name} {dtype} {shape}"
                else:
                    assert_equal(ours, expected, f"all_reduce {name} {dtype} {shape}")


def assert_identical_on_all_ranks(ctx: Context, tensor: torch.Tensor, what: str) -> None:
    everyone = [torch.empty_like(tensor) for _ in range(ctx.world)]
    dist.all_gather(everyone, tensor, group=ctx.gloo)
    for r in range(ctx.world):
        assert_equal(everyone[r], everyone[0], f"{what}: rank {r}'s result differs from rank 0's")


def exactly_summable(ctx: Context, dtype, shape, seed: int) -> torch.Tensor:
    """Small integers in `dtype`: every summation order gives the same sum
    (up to 5 x 31 = 155, exact even in bfloat16), so gloo's sum and ours
    are equal bit for bit and only the scaling is under test."""
    values = ctx.make(torch.int32, shape, seed) % 32
    if dtype.is_complex:
        return torch.complex(values.float(), (values % 7).float()).to(dtype)
    return values.to(dtype)


@check()
def all_reduce_avg_and_premul_sum_equal_gloo_sum_scaled(ctx: Context) -> None:
    # AVG is the sum divided by the group size: floating types divide as
    # torch does in that dtype, complex ones part by part, integers round
    # toward zero (as C and NCCL do). PREMUL_SUM multiplies each rank's input by the factor
    # (a number, or a one-element tensor as FSDP2 passes it) and sums.
    # gloo has neither, so its SUM is scaled here.
    premul_factors = {"0.5": 0.5, "tensor(0.25)": torch.tensor([0.25])}
    for seed, dtype in enumerate(DTYPES):
        if dtype == torch.bool:
            continue
        exact = dtype.is_floating_point or dtype.is_complex
        for shape in [(), (0,), (7,), (40_000,)]:
            inputs = exactly_summable(ctx, dtype, shape, 900 + seed) if exact else ctx.make(dtype, shape, 900 + seed)
            summed = for_gloo(inputs)
            dist.all_reduce(summed, group=ctx.gloo)
            summed = from_gloo(summed, dtype)
            if dtype.is_complex:  # each part divided (torch's complex division rounds differently)
                expected = torch.complex(summed.real / ctx.world, summed.imag / ctx.world)
            elif exact:
                expected = summed / ctx.world
            else:
                expected = torch.div(summed, ctx.world, rounding_mode="trunc")
            ours = inputs.clone()
            dist.all_reduce(ours, op=dist.ReduceOp.AVG)
            assert_equal(ours, expected.to(dtype), f"AVG {dtype} {shape}")
            if not exact:
                continue
            for name, factor in premul_factors.items():
                scale = factor if isinstance(factor, float) else factor.item()
                reference = for_gloo(inputs * scale)
                dist.all_reduce(reference, group=ctx.gloo)
                ours = inputs.clone()
                dist.all_reduce(ours, op=dist._make_nccl_premul_sum(factor))
                assert_equal(ours, from_gloo(reference, dtype), f"PREMUL_SUM({name}) {dtype} {shape}")
    # Inexact inputs: whatever the rounding, every rank ends bit-identical.
    for op in (dist.ReduceOp.AVG, dist._make_nccl_premul_sum(1.0 / 3)):
        tensor = ctx.make(torch.float32, (100_000,), 950)
        dist.all_reduce(tensor, op=op)
        assert_identical_on_all_ranks(ctx, tensor, f"{op}")


@check()
def all_reduce_min_max_propagate_nan_and_half_products_round_like_torch(ctx: Context) -> None:
    values = torch.tensor([1.0, float("nan") if ctx.rank == 0 else 2.0, -3.0])
    for op in (dist.ReduceOp.MIN, dist.ReduceOp.MAX):
        tensor = values.clone()
        dist.all_reduce(tensor, op=op)
        assert torch.isnan(tensor[1]), "NaN must win, as in torch.minimum/maximum"
    for dtype in (torch.float16, torch.bfloat16):
        mine = (1 + ctx.make(torch.float32, (100,), 800) / 16).to(dtype)
        everyone = [torch.empty_like(mine) for _ in range(ctx.world)]
        dist.all_gather(everyone, mine, group=ctx.gloo)
        expected = everyone[0].clone()
        for other in everyone[1:]:
            expected = (expected.float() * other.float()).to(dtype)  # pairwise, rounded each time
        dist.all_reduce(mine, op=dist.ReduceOp.PRODUCT)
        assert_reduced_in_some_order(mine, expected, f"PRODUCT {dtype}")


@check()
def all_reduce_results_identical_on_all_ranks(ctx: Context) -> None:
    for shape in [(100,), (100_000,)]:
        tensor = ctx.make(torch.float32, shape, 11)
        dist.all_reduce(tensor)
        assert_identical_on_all_ranks(ctx, tensor, f"SUM {shape}")


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
    del payload, reduced
    # 16 MiB blocks: staged pair at 2 ranks, pairwise otherwise.
    block_count = (16 << 20) // 4
    scattered_input = torch.arange(ctx.world * block_count, dtype=torch.int32) + ctx.rank
    scattered = torch.empty(block_count, dtype=torch.int32)
    dist.reduce_scatter_tensor(scattered, scattered_input)
    expected = (torch.arange(block_count, dtype=torch.int32) + ctx.rank * block_count) * ctx.world \
        + ctx.world * (ctx.world - 1) // 2
    assert torch.equal(scattered, expected), "16 MiB-per-block reduce_scatter_tensor"
    del scattered_input, scattered
    # 8 MiB blocks: staged rounds at every world size; block p of rank r
    # holds r * 1000 + p + its index.
    block_count = (8 << 20) // 4
    index = torch.arange(block_count, dtype=torch.int32)
    exchanged_input = torch.cat([index + ctx.rank * 1000 + p for p in range(ctx.world)])
    exchanged = torch.full_like(exchanged_input, -1)
    dist.all_to_all_single(exchanged, exchanged_input)
    expected = torch.cat([index + r * 1000 + ctx.rank for r in range(ctx.world)])
    assert torch.equal(exchanged, expected), "8 MiB-per-block all_to_all_single"


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
    # This rank's own output must be shaped like its input (the others may
    # differ: ranks may contribute different shapes, see checks_operations).
    outputs = [torch.zeros(4) if r == ctx.rank else torch.zeros(3) for r in range(ctx.world)]
    expect_error(
        ValueError,
        [f"output tensor {ctx.rank} has shape [4] but the input has shape [3]"],
        lambda: dist.all_gather(outputs, torch.zeros(3)),
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
        TypeError,
        ["ucxcoll: all_reduce: ReduceOp.AVG is not defined for dtype bool", "AVG not for bool"],
        lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG),
    )
    expect_error(
        TypeError,
        ["ucxcoll: all_reduce: ReduceOp.PREMUL_SUM is not defined for dtype int32", "only for floating and complex"],
        lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0)),
    )
    expect_error(
        ValueError,
        ["ucxcoll: all_reduce: the PREMUL_SUM factor must be one real number"],
        lambda: dist.all_reduce(torch.ones(3), op=dist._make_nccl_premul_sum(torch.tensor([1j]))),
    )
    # torch refuses MAX on complex tensors before ucxcoll sees them;
    # called directly, ucxcoll says so itself.
    expect_error(
        ValueError,
        ["all_reduce does not support RedOpType.MAX on complex tensors"],
        lambda: dist.all_reduce(torch.ones(3, dtype=torch.complex64), op=dist.ReduceOp.MAX),
    )
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MAX
    expect_error(
        TypeError,
        ["ucxcoll: all_reduce: ReduceOp.MAX is not defined for dtype complex64"],
        lambda: backend.allreduce([torch.ones(3, dtype=torch.complex64)], options),
    )
    expect_error(
        TypeError,
        ["ucxcoll: all_reduce: ReduceOp.BXOR is not defined for dtype float32"],
        lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BXOR),
    )


@check()
def group_still_works_after_refused_input(ctx: Context) -> None:
    tensor = torch.full((4,), float(ctx.rank))
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.full((4,), ctx.world * (ctx.world - 1) / 2))


# ---- sparse all_reduce (COO tensors, summed as gloo sums them) ----------------


def _sparse(ctx: Context, entries: int, sizes: tuple, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A sparse COO tensor with `entries` entries (repeated places included:
    it is not coalesced) at places that overlap between ranks."""
    generator = torch.Generator().manual_seed(seed * 31 + ctx.rank)
    sparse_dims = 1 if len(sizes) == 1 else 2 if len(sizes) > 2 else 1
    indices = torch.stack([torch.randint(0, sizes[d], (entries,), generator=generator)
                           for d in range(sparse_dims)]) if entries else torch.zeros(sparse_dims, 0, dtype=torch.long)
    values = (torch.randint(-50, 50, (entries, *sizes[sparse_dims:]), generator=generator)).to(dtype)
    return torch.sparse_coo_tensor(indices, values, sizes, check_invariants=True)


@check()
def all_reduce_of_sparse_tensors_matches_gloo(ctx: Context) -> None:
    cases = [
        (7, (11,), torch.float32),
        (5, (6, 4), torch.float64),       # one sparse dim, one dense
        (9, (5, 4, 3), torch.int64),      # two sparse dims, one dense
        (0 if ctx.rank == 0 else 3, (8,), torch.float32),  # a rank with no entries
        (0, (4, 2), torch.float32),       # nobody has any
    ]
    for seed, (entries, sizes, dtype) in enumerate(cases):
        ours = _sparse(ctx, entries, sizes, dtype, seed)
        reference = ours.clone()
        dist.all_reduce(ours)
        dist.all_reduce(reference, group=ctx.gloo)
        assert ours.is_sparse and ours.is_coalesced(), (sizes, ours)
        assert_equal(ours.to_dense(), reference.to_dense(), f"sparse all_reduce {dtype} {sizes}")


@check(min_world=2)
def error_sparse_all_reduce_refuses_what_it_cannot_sum(ctx: Context) -> None:
    tensor = _sparse(ctx, 3, (5,), torch.float32, 0)
    expect_error(NotImplementedError, ["ucxcoll: all_reduce (sparse) supports ReduceOp.SUM only, got ReduceOp.MAX"],
                 lambda: dist.all_reduce(tensor, op=dist.ReduceOp.MAX))
    # Ranks whose tensors differ in size all raise, naming the others.
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=30))
    sizes = (6,) if ctx.rank == 0 else (5,)
    mine, other = ("float32 [6]", "float32 [5]") if ctx.rank == 0 else ("float32 [5]", "float32 [6]")
    expect_error(dist.DistBackendError,
                 ["ucxcoll: all_reduce (sparse) on group ", "ranks disagree about the sparse tensor: this rank has "
                  f"{mine} (1 sparse dim), rank ", f" has {other} (1 sparse dim)"],
                 lambda: dist.all_reduce(_sparse(ctx, 2, sizes, torch.float32, 1), group=group))


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
        # A rank may also learn it from the peer that saw the sizes (a
        # hierarchical all_gather's ranks inside the other host do).
        assert any(text in str(error) for text in ("ranks disagree about the tensor sizes", "timed out",
                                                   "ranks disagree about collective #0")), str(error)
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
    # Through a composition (or a ring) a rank may wait on one that waits
    # for rank 0: its own report then names rank 0 as not started, or, when
    # that rank's deadline came first, it learns that the rank gave up (a
    # rank that never started cannot have given up).
    timed_out = "timed out after 2000 ms: no data from rank(s) ["
    expect_error(
        dist.DistBackendError,
        ["all_reduce #0", "timeout 2000 ms"],
        lambda: dist.all_reduce(torch.ones(4), group=group),
        also=lambda text: (
            (timed_out in text and ("no data from rank(s) [0" in text or "rank 0 has not started it" in text))
            or any(f"rank {peer} gave up on this group: its collective #0 failed" in text for peer in range(1, ctx.world))
        ),
    )
    # Later collectives fail at once with the first one's cause.
    expect_error(dist.DistBackendError, ["this process group failed earlier: ", "all_reduce #0"],
                 lambda: dist.all_reduce(torch.ones(4), group=group))


@check(min_world=2)
def error_a_rank_that_leaves_is_named_by_every_rank_still_waiting(ctx: Context) -> None:
    # The last rank destroys the group while the others are in its second
    # all_reduce: every one of them raises long before the 60 s deadline,
    # naming the rank and what it did. In a ring or a composition some wait
    # only for ranks that wait for the leaver.
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=60))
    dist.all_reduce(torch.ones(4), group=group)  # collective #0, completed everywhere
    last = ctx.world - 1
    if ctx.rank == last:
        time.sleep(0.5)  # the others are inside all_reduce #1 by now
        dist.destroy_process_group(group)
        return
    started = time.monotonic()
    expect_error(
        dist.DistBackendError,
        ["all_reduce #1 on group", f"): rank {last} of group ",
         " shut its group down (shutdown() or destroy_process_group()) after finishing 1 of its collectives; "
         "it will take part in no more (Connection closed by peer)"],
        lambda: dist.all_reduce(torch.ones(4), group=group),
    )
    # Not the deadline (a 2-core machine under load stays far below it).
    assert time.monotonic() - started < 30


@check(min_world=2)
def error_timeout_reports_what_every_rank_is_doing(ctx: Context) -> None:
    # Only rank 0 has a short deadline: when it asks, the others are still
    # where the test put them (rank 1 in a recv, the rest idle in Python).
    group = dist.new_group(backend="ucxcoll", timeout=timedelta(seconds=2 if ctx.rank == 0 else 6))
    dist.all_reduce(torch.ones(4), group=group)  # collective #0, completed everywhere
    if ctx.rank == 0:
        fragments = [
            "all_reduce #1 on group",
            "timeout 2000 ms) timed out after 2000 ms: no data from rank(s) [",
            "; what the ranks of the group are doing:\n"
            "  rank 0 (this rank): last completed collective #0; in all_reduce #1 (SUM, ",
            # Across hosts the all_reduce is hierarchical and names its
            # phase: "(SUM, hierarchical algorithm), phase 1: reduce_scatter
            # (...) among ranks 0, 1, 4 MiB of float32".
            " algorithm)",
            ", 4 MiB of float32, no data from rank(s) [",
            "\n  rank 1: last completed collective #0; in no collective of this group; "
            "point-to-point in flight: recv #0 from rank 0 (tag 7)",
        ]
        if ctx.world > 2:
            others = "rank 2" if ctx.world == 3 else f"ranks 2-{ctx.world - 1}"
            fragments.append(f"\n  {others}: last completed collective #0; in no collective of this group")
        expect_error(dist.DistBackendError, fragments, lambda: dist.all_reduce(torch.ones(1 << 20), group=group))
    elif ctx.rank == 1:
        expect_error(
            dist.DistBackendError,
            [
                "recv #0 from rank 0 (tag 7)",
                "timeout 6000 ms) timed out after 6000 ms: no data from rank(s) [0]; what the ranks of the group are doing:\n"
                "  rank 1 (this rank): last completed collective #0; in no collective of this group; "
                "point-to-point in flight: recv #0 from rank 0 (tag 7)",
                "\n  rank 0: last completed collective #0; in no collective of this group; this group failed: "
                "all_reduce #1 on group",
            ],
            lambda: dist.recv(torch.zeros(2), src=0, group=group, tag=7),
        )
    else:
        time.sleep(3)
    dist.barrier(group=ctx.gloo)  # rank 1 is late by design: the next check starts together


