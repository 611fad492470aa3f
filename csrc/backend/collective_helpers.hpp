#pragma once
// What the collective methods of UcxBackend share (collective_ops.cpp,
// reduce_ops.cpp, exchange_ops.cpp, coalesced_ops.cpp): the types of their
// Work results, staging of non-contiguous tensors and the copies back into
// the caller's tensors, and the scaled reductions (AVG, PREMUL_SUM).

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "collectives/collective.hpp"

namespace ucxcoll {

const c10::TypePtr& tensorListType();
const c10::TypePtr& listOfTensorListsType();

// The buffer a collective writes into: the tensor itself when contiguous,
// otherwise a contiguous copy that is copied back afterwards.
inline at::Tensor contiguousTarget(const at::Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : tensor.contiguous();
}

// (staged, destination) pairs whose staged copy must be written back, in
// order.
using CopyBacks = std::vector<std::pair<at::Tensor, at::Tensor>>;

inline void addCopyBack(CopyBacks& copies, const at::Tensor& staged, const at::Tensor& destination) {
  if (!staged.is_same(destination)) {
    copies.emplace_back(staged, destination);
  }
}

// `algorithm`, then the copies back, still inside the collective (so that
// the outputs are final when the Work completes).
Collective::Body withCopyBack(Collective::Body algorithm, CopyBacks copies);

// AVG: `algorithm` sums, then `output` (if defined: the ranks that get a
// result) is divided by the group size. Other reductions: `algorithm`.
Collective::Body averagedIfNeeded(Collective::Body algorithm, Reduction reduction, DataType type, at::Tensor output);

// PREMUL_SUM: a contiguous copy of `input` multiplied by `factor` (the
// caller's tensor stays as it was). Other reductions: `input`, contiguous.
at::Tensor premultipliedIfNeeded(const at::Tensor& input, Reduction reduction, DataType type, double factor);

// A tensor's elements as bytes (contiguous, one dimension): a view when
// the tensor is contiguous.
at::Tensor asBytes(const at::Tensor& tensor);

}  // namespace ucxcoll
