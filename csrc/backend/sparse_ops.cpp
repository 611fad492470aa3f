// UcxBackend::allreduce_sparse: the sum of sparse COO tensors (what
// dist.all_reduce does with a sparse tensor). Sparse tensors of different
// ranks hold different numbers of entries at different places, so there is
// nothing to reduce element by element on the wire: every rank gathers every
// rank's (coalesced) indices and values and sums them itself. Three
// all_gathers of the group, in the same order on every rank:
//   1. each rank's layout (dtype, dims, sizes, number of entries), so that
//      ranks whose tensors differ all raise, naming each other, before
//      anything else moves;
//   2. every rank's indices, 3. every rank's values (uneven all_gathers).
// The result replaces the caller's tensor, coalesced.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "backend/errors.hpp"
#include "backend/tensor_checks.hpp"
#include "backend/ucx_backend.hpp"

namespace ucxcoll {
namespace {

// The layout all_gather's record: dtype, sparse dims, dense dims, entries,
// then the sizes (unused ones -1).
constexpr int64_t kLayoutHeader = 4;
constexpr int64_t kMaxDims = 28;
constexpr int64_t kLayoutLength = kLayoutHeader + kMaxDims;

at::Tensor layoutOf(const at::Tensor& coalesced) {
  at::Tensor layout = at::full({kLayoutLength}, -1, at::kLong);
  auto* fields = layout.data_ptr<int64_t>();
  fields[0] = static_cast<int64_t>(coalesced.scalar_type());
  fields[1] = coalesced.sparse_dim();
  fields[2] = coalesced.dense_dim();
  fields[3] = coalesced._nnz();
  for (int64_t d = 0; d < coalesced.dim(); ++d) {
    fields[kLayoutHeader + d] = coalesced.size(d);
  }
  return layout;
}

// "float32 [4, 3] (1 sparse dim)"; the entry count is left out: it may differ.
std::string describeLayout(const int64_t* fields) {
  std::ostringstream out;
  out << c10::getDtypeNames(static_cast<c10::ScalarType>(fields[0])).first << " [";
  for (int64_t d = 0; d < fields[1] + fields[2]; ++d) {
    out << (d ? ", " : "") << fields[kLayoutHeader + d];
  }
  out << "] (" << fields[1] << " sparse dim" << (fields[1] == 1 ? "" : "s") << ")";
  return out.str();
}

bool sameLayout(const int64_t* a, const int64_t* b) {
  // Everything but the entry count.
  for (int64_t i = 0; i < kLayoutLength; ++i) {
    if (i != 3 && a[i] != b[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> UcxBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce (sparse)";
  TORCH_CHECK_VALUE(tensors.size() == 1, "ucxcoll: ", op, " takes exactly one tensor per rank, got ", tensors.size());
  at::Tensor& tensor = tensors[0];
  TORCH_CHECK_VALUE(tensor.device().is_cpu(), "ucxcoll: ", op, " got a tensor on device ", tensor.device().str(),
                    "; the UCX path takes CPU tensors");
  TORCH_CHECK_VALUE(tensor.layout() == at::kSparse, "ucxcoll: ", op, " takes a sparse COO tensor, got layout ",
                    tensor.layout());
  TORCH_CHECK_NOT_IMPLEMENTED(opts.reduceOp.op_ == c10d::ReduceOp::SUM, "ucxcoll: ", op,
                              " supports ReduceOp.SUM only, got ReduceOp.", reduceOpName(opts.reduceOp));
  TORCH_CHECK_VALUE(tensor.dim() <= kMaxDims, "ucxcoll: ", op, " takes tensors of up to ", kMaxDims,
                    " dimensions, got ", tensor.dim());
  TORCH_CHECK_TYPE(at::isFloatingType(tensor.scalar_type()) || at::isComplexType(tensor.scalar_type()) ||
                       at::isIntegralType(tensor.scalar_type(), /*includeBool=*/false),
                   "ucxcoll: ", op, " cannot sum ", tensor.scalar_type());

  const at::Tensor input = tensor.coalesce();
  c10d::AllgatherOptions gather;
  gather.timeout = opts.timeout;

  // 1. Layouts: every rank compares every rank's with its own.
  at::Tensor mine = layoutOf(input);
  std::vector<std::vector<at::Tensor>> layouts(1);
  for (int r = 0; r < size_; ++r) {
    layouts[0].push_back(at::empty({kLayoutLength}, at::kLong));
  }
  std::vector<at::Tensor> layoutInput{mine};
  allgather(layouts, layoutInput, gather)->wait();
  const int64_t* own = mine.data_ptr<int64_t>();
  std::string differing;
  for (int r = 0; r < size_; ++r) {
    const int64_t* theirs = layouts[0][r].data_ptr<int64_t>();
    if (!sameLayout(theirs, own)) {
      differing +=
          (differing.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " has " + describeLayout(theirs);
    }
  }
  if (!differing.empty()) {
    std::rethrow_exception(backendError("ucxcoll: " + std::string(op) + " on group \"" + groupName_ + "\" (rank " +
                                        std::to_string(rank_) + " of " + std::to_string(size_) +
                                        "): ranks disagree about the sparse tensor: this rank has " +
                                        describeLayout(own) + ", " + differing));
  }

  // 2, 3. Indices ([sparse dims, entries]) and values ([entries, dense
  // sizes...]) of every rank, flattened.
  const int64_t sparseDims = input.sparse_dim();
  std::vector<int64_t> denseSizes(input.sizes().begin() + sparseDims, input.sizes().end());
  const int64_t denseElements = c10::multiply_integers(denseSizes);
  std::vector<std::vector<at::Tensor>> indices(1), values(1);
  for (int r = 0; r < size_; ++r) {
    const int64_t entries = layouts[0][r].data_ptr<int64_t>()[3];
    indices[0].push_back(at::empty({sparseDims * entries}, at::kLong));
    values[0].push_back(at::empty({entries * denseElements}, input.scalar_type()));
  }
  std::vector<at::Tensor> indexInput{input._indices().contiguous().view({-1})};
  std::vector<at::Tensor> valueInput{input._values().contiguous().view({-1})};
  allgather(indices, indexInput, gather)->wait();
  allgather(values, valueInput, gather)->wait();

  std::vector<at::Tensor> allIndices, allValues;
  for (int r = 0; r < size_; ++r) {
    const int64_t entries = layouts[0][r].data_ptr<int64_t>()[3];
    allIndices.push_back(indices[0][r].view({sparseDims, entries}));
    std::vector<int64_t> shape{entries};
    shape.insert(shape.end(), denseSizes.begin(), denseSizes.end());
    allValues.push_back(values[0][r].view(shape));
  }
  at::Tensor sum =
      at::sparse_coo_tensor(at::cat(allIndices, 1), at::cat(allValues, 0), input.sizes(), input.options()).coalesce();
  tensor.copy_(sum);

  auto done = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  done->markCompleted(c10::IValue(tensors));
  return c10d::Work::create_from_future(done);
}

}  // namespace ucxcoll
