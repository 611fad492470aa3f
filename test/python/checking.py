"""What every check module shares: the registry, the rank context (with a
gloo group for references and coordination), reference comparisons and
error expectations, and the runner that rank_main.py calls.

Check modules never import ucxcoll: the backend must come from torch's
autoload, exactly as in a user's unmodified script.
"""

import json
import os
import traceback
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


class Checks:
    """The checks of one module, in definition order."""

    def __init__(self):
        self.entries = []

    def __call__(self, min_world: int = 1, max_world: int | None = None):
        def register(fn):
            self.entries.append((fn.__name__, fn, min_world, max_world))
            return fn

        return register

    def names(self):
        return [name for name, *_ in self.entries]


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

    def agree(self, value: bool) -> bool:
        """True on every rank iff `value` is true on every rank (over gloo)."""
        flag = torch.tensor([1 if value else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.gloo)
        return bool(flag.item())

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


# Set where the run forces hierarchical compositions (test_across_hosts):
# they combine each host's values first, so floating-point sums and
# products round in another order than gloo's rank order.
ANY_REDUCTION_ORDER = os.environ.get("UCXCOLL_TEST_ANY_REDUCTION_ORDER") == "1"


def assert_reduced_in_some_order(ours, reference, what: str) -> None:
    """Bit for bit; where ANY_REDUCTION_ORDER, floating-point results within
    a few roundings of the reference (integers still bit for bit)."""
    if ANY_REDUCTION_ORDER and (ours.dtype.is_floating_point or ours.dtype.is_complex):
        assert ours.dtype == reference.dtype and ours.shape == reference.shape, what
        rtol = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float64: 1e-12}.get(ours.dtype, 1e-5)
        assert torch.allclose(ours, reference, rtol=rtol, atol=0, equal_nan=True), (
            f"{what}: values differ beyond rounding\nours={ours}\ngloo={reference}")
    else:
        assert_equal(ours, reference, what)


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


def expect_error(error_type, fragments, fn, also=None) -> None:
    """fn() must raise exactly error_type with every fragment in its message
    (and, with `also`, a message for which also(message) is true)."""
    try:
        fn()
    except Exception as error:  # noqa: BLE001
        assert type(error) is error_type, f"expected {error_type.__name__}, got {type(error).__name__}: {error}"
        for fragment in fragments:
            assert fragment in str(error), f"{fragment!r} not in message: {error}"
        assert also is None or also(str(error)), f"unexpected message: {error}"
        return
    raise AssertionError(f"expected {error_type.__name__}, nothing was raised")



def run(checks: Checks, rank: int, world: int, port: int, outdir: str, selected=None) -> None:
    """Runs every applicable check of `checks` and writes rank<N>.json."""
    # Across simulated hosts (harness.RankRun with hosts) the store is on
    # host 0's address.
    store = os.environ.get("UCXCOLL_TEST_STORE_ADDR", "127.0.0.1")
    dist.init_process_group(
        backend="ucxcoll", init_method=f"tcp://{store}:{port}", rank=rank, world_size=world, timeout=GROUP_TIMEOUT
    )
    ctx = Context(rank, world)
    results = {}
    for name, fn, min_world, max_world in checks.entries:
        if selected is not None and name not in selected:
            continue
        if world < min_world:
            results[name] = {"status": "skipped", "reason": f"needs at least {min_world} ranks"}
            continue
        if max_world is not None and world > max_world:
            results[name] = {"status": "skipped", "reason": f"runs at up to {max_world} ranks (cost)"}
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
