// The coalesced collectives of UcxBackend (what _coalescing_manager and the
// functional collectives call): several tensors, one collective on the
// wire. The tensors are packed into one buffer, the collective runs once,
// and the result is unpacked into the caller's tensors before the Work
// completes. (reduce_scatter_tensor_coalesced lives with the other
// reduce-scatters, in reduce_ops.cpp.)

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend/collective_helpers.hpp"
#include "backend/tensor_checks.hpp"
#include "backend/ucx_backend.hpp"

namespace ucxcoll {
namespace {

// The inputs' bytes side by side, and where each one starts.
struct PackedBytes {
  at::Tensor buffer;
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
};

PackedBytes packBytes(const std::vector<at::Tensor>& inputs) {
  PackedBytes packed;
  std::vector<at::Tensor> pieces;
  int64_t offset = 0;
  for (const auto& input : inputs) {
    pieces.push_back(asBytes(input));
    packed.offsets.push_back(offset);
    packed.sizes.push_back(pieces.back().numel());
    offset += pieces.back().numel();
  }
  packed.buffer = at::cat(pieces);
  return packed;
}

// Unpack `bytes` (a byte tensor) into `destination`: through a contiguous
// staging tensor when the destination is not contiguous.
void addByteCopyBack(CopyBacks& copies, const at::Tensor& bytes, const at::Tensor& destination) {
  at::Tensor target = contiguousTarget(destination);
  if (target.is_same(destination)) {
    copies.emplace_back(bytes, asBytes(destination));
  } else {
    copies.emplace_back(bytes, asBytes(target));
    copies.emplace_back(target, destination);
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> UcxBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "all_reduce_coalesced";
  TORCH_CHECK_VALUE(!tensors.empty(), "ucxcoll: all_reduce_coalesced needs at least one tensor");
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    checkSameDtype(op, tensors[k], "tensor " + std::to_string(k), tensors[0], "tensor 0");
  }
  DataType type = reducibleType(op, tensors[0]);
  Reduction reduction = toReduction(op, opts.reduceOp, type);
  const double factor = premulFactor(op, opts.reduceOp);
  std::vector<at::Tensor> flat;
  for (const auto& tensor : tensors) {
    flat.push_back(tensor.reshape({-1}));
  }
  at::Tensor packed = at::cat(flat);
  CopyBacks copies;
  int64_t offset = 0;
  for (const auto& tensor : tensors) {
    copies.emplace_back(packed.narrow(0, offset, tensor.numel()).view(tensor.sizes()), tensor);
    offset += tensor.numel();
  }
  auto count = static_cast<std::size_t>(packed.numel());
  Collective::Body body = [packed, count, type, reduction, factor](Collective& c) {
    return allreduceScaled(c, packed.data_ptr(), count, type, reduction, factor);
  };
  return runCollective(c10d::OpType::ALLREDUCE_COALESCED, op, opts.timeout, opts.asyncOp, c10::IValue(tensors),
                       tensorListType(), withCopyBack(std::move(body), std::move(copies)));
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputTensorLists,
                                                               std::vector<at::Tensor>& inputTensors,
                                                               const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_coalesced";
  // outputTensorLists[r][k] receives rank r's input k (torch's layout).
  TORCH_CHECK_VALUE(!inputTensors.empty(), "ucxcoll: ", op, " needs at least one input tensor");
  checkOnePerRank(op, outputTensorLists.size(), size_, "the list of output lists",
                  "pass one list per rank, each with a tensor shaped like every input");
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK_VALUE(outputTensorLists[r].size() == inputTensors.size(), "ucxcoll: ", op, ": output list ", r,
                      " holds ", outputTensorLists[r].size(), " tensors but there are ", inputTensors.size(),
                      " inputs; pass one tensor per input, shaped like it");
    for (std::size_t k = 0; k < inputTensors.size(); ++k) {
      checkShapedLike(op, outputTensorLists[r][k], "output " + std::to_string(r) + "[" + std::to_string(k) + "]",
                      inputTensors[k], "input " + std::to_string(k), "allocate it like that input");
    }
  }
  PackedBytes packed = packBytes(inputTensors);
  const int64_t rowBytes = packed.buffer.numel();
  at::Tensor gathered = at::empty({size_, rowBytes}, packed.buffer.options());
  CopyBacks copies;
  for (int r = 0; r < size_; ++r) {
    for (std::size_t k = 0; k < inputTensors.size(); ++k) {
      addByteCopyBack(copies, gathered[r].narrow(0, packed.offsets[k], packed.sizes[k]), outputTensorLists[r][k]);
    }
  }
  return allgatherPacked(op, c10d::OpType::ALLGATHER_COALESCED, packed.buffer, gathered, std::move(copies), opts,
                         c10::IValue(outputTensorLists), listOfTensorListsType(), inputTensors);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                       std::vector<at::Tensor>& inputs,
                                                                       const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor_coalesced";
  TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(), "ucxcoll: ", op,
                    " takes as many outputs as inputs (at least one), got ", outputs.size(), " outputs and ",
                    inputs.size(), " inputs");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    checkCpu(op, inputs[k], "input");
    checkAllgatherIntoTensor(op, outputs[k], inputs[k], size_);
  }
  PackedBytes packed = packBytes(inputs);
  const int64_t rowBytes = packed.buffer.numel();
  at::Tensor gathered = at::empty({size_, rowBytes}, packed.buffer.options());
  CopyBacks copies;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    // Output k, as bytes, is world_size rows of input k's size.
    at::Tensor target = contiguousTarget(outputs[k]);
    copies.emplace_back(gathered.narrow(1, packed.offsets[k], packed.sizes[k]),
                        asBytes(target).view({size_, packed.sizes[k]}));
    addCopyBack(copies, target, outputs[k]);
  }
  return allgatherPacked(op, c10d::OpType::COALESCED, packed.buffer, gathered, std::move(copies), opts,
                         c10::IValue(outputs), tensorListType(), inputs);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                           std::vector<at::Tensor>& inputs,
                                                                           const c10d::AllgatherOptions& opts) {
  return all_gather_single_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allgatherPacked(const char* op, c10d::OpType opType, at::Tensor packed,
                                                           at::Tensor gathered, CopyBacks copies,
                                                           const c10d::AllgatherOptions& opts, c10::IValue result,
                                                           c10::TypePtr resultType,
                                                           const std::vector<at::Tensor>& inputs) {
  const auto bytes = static_cast<std::size_t>(packed.numel());
  std::vector<void*> blocks;
  for (int r = 0; r < size_; ++r) {
    blocks.push_back(static_cast<std::byte*>(gathered.data_ptr()) + bytes * static_cast<std::size_t>(r));
  }
  Collective::Body body = [packed, gathered, blocks, bytes](Collective& c) {
    return selectAllgather(c, packed.data_ptr(), blocks, bytes);
  };
  return runCollective(opType, op, opts.timeout, opts.asyncOp, std::move(result), std::move(resultType),
                       withCopyBack(std::move(body), std::move(copies)), inputs);
}

}  // namespace ucxcoll
