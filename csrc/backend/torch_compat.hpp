#pragma once
// What differs between the torch versions ucxcoll builds against (2.11 to
// 2.15, see README), in one place.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

// torch 2.15 gave the one-tensor collectives canonical names
// (all_gather_single, reduce_scatter_single, all_to_all_single and the two
// *_single_coalesced), virtual and forwarding to the old names
// (_allgather_base, _reduce_scatter_base, alltoall_base, ...) and back;
// older torch has the old names only. The forwarding guard macro came with
// them, so it tells the two apart. UcxBackend implements the new names and
// overrides the old ones to call them: with older torch the new names are
// plain member functions.
#ifdef C10D_BACKEND_FORWARDING_GUARD
#define UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES 1
#define UCXCOLL_OVERRIDE_SINCE_TORCH_2_15 override
#else
#define UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES 0
#define UCXCOLL_OVERRIDE_SINCE_TORCH_2_15
#endif

namespace ucxcoll {

// The factor of a PREMUL_SUM. torch 2.15 renamed NCCLPreMulSumSupplement to
// PreMulSumSupplement and kept the old name as an alias; older torch has
// only the old one.
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;

}  // namespace ucxcoll
