// The collectives of UcxBackend that move blocks without reducing them:
// all_to_all (single-tensor and list forms), gather, scatter, the
// all_gather whose ranks contribute different shapes, and the monitored
// barrier. Every block goes straight from the caller's input to the
// caller's output when both are contiguous.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <numeric>
#include <string>
#include <vector>

#include "backend/collective_helpers.hpp"
#include "backend/errors.hpp"
#include "backend/tensor_checks.hpp"
#include "backend/ucx_backend.hpp"
#include "backend/ucx_work.hpp"
#include "common/error.hpp"

namespace ucxcoll {
namespace {

// Byte offsets and sizes of the row blocks of a tensor split along its
// first dimension: `splits` (one per rank) or, when empty, equal parts.
std::vector<Block> splitRows(const char* op, const at::Tensor& tensor, const std::vector<int64_t>& splits,
                             int worldSize, const char* role, const char* argument) {
  TORCH_CHECK_VALUE(tensor.dim() >= 1, "ucxcoll: ", op, ": the ", role,
                    " tensor must have at least one dimension (blocks are split along the first); got a scalar");
  const int64_t rows = tensor.size(0);
  const auto rowBytes =
      static_cast<std::size_t>(rows == 0 ? 0 : tensor.numel() / rows) * static_cast<std::size_t>(tensor.element_size());
  std::vector<int64_t> counts = splits;
  if (counts.empty()) {
    TORCH_CHECK_VALUE(rows % worldSize == 0, "ucxcoll: ", op, ": the ", role, " tensor's first dimension (", rows,
                      ") does not divide equally among ", worldSize, " ranks; pass ", argument,
                      " to split it unevenly");
    counts.assign(static_cast<std::size_t>(worldSize), rows / worldSize);
  }
  TORCH_CHECK_VALUE(static_cast<int64_t>(counts.size()) == worldSize, "ucxcoll: ", op, ": ", argument, " has ",
                    counts.size(), " entries but the group has ", worldSize, " ranks; pass one size per rank");
  int64_t sum = 0;
  for (int64_t count : counts) {
    TORCH_CHECK_VALUE(count >= 0, "ucxcoll: ", op, ": ", argument, " holds a negative size, ", count);
    sum += count;
  }
  TORCH_CHECK_VALUE(sum == rows, "ucxcoll: ", op, ": ", argument, " adds up to ", sum, " but the ", role,
                    " tensor's first dimension is ", rows, "; the sizes must add up to it");
  std::vector<Block> blocks;
  auto* base = static_cast<std::byte*>(tensor.data_ptr());
  std::size_t offset = 0;
  for (int64_t count : counts) {
    const std::size_t bytes = static_cast<std::size_t>(count) * rowBytes;
    blocks.push_back({base + offset, bytes});
    offset += bytes;
  }
  return blocks;
}

std::string trailingShape(const at::Tensor& tensor) {
  std::string text = "[*";
  for (int64_t d = 1; d < tensor.dim(); ++d) {
    text += ", " + std::to_string(tensor.size(d));
  }
  return text + "]";
}

}  // namespace

c10::intrusive_ptr<c10d::Work> UcxBackend::all_to_all_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                             std::vector<int64_t>& outputSplitSizes,
                                                             std::vector<int64_t>& inputSplitSizes,
                                                             const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  checkCpu(op, inputBuffer, "input");
  checkSameDtype(op, outputBuffer, "the output", inputBuffer, "the input");
  TORCH_CHECK_VALUE(outputBuffer.dim() >= 1 && inputBuffer.dim() >= 1 &&
                        outputBuffer.sizes().slice(1) == inputBuffer.sizes().slice(1),
                    "ucxcoll: ", op, ": the output (shape ", shapeText(outputBuffer), ") and the input (shape ",
                    shapeText(inputBuffer),
                    ") must have at least one dimension and agree in all but the first; e.g. output shape ",
                    inputBuffer.dim() >= 1 ? trailingShape(inputBuffer) : std::string("[*]"));
  const bool equalSplits = outputSplitSizes.empty() && inputSplitSizes.empty();
  if (equalSplits) {
    // Equal splits: both ends derive a block's size from their own tensors,
    // so the totals must agree here for a disagreement to show on both.
    TORCH_CHECK_VALUE(outputBuffer.numel() == inputBuffer.numel(), "ucxcoll: ", op,
                      ": without split sizes the output (", shapeText(outputBuffer),
                      ") must be shaped like the input (", shapeText(inputBuffer),
                      "); pass output_split_sizes and input_split_sizes for uneven blocks");
  }
  at::Tensor input = inputBuffer.contiguous();
  at::Tensor target = contiguousTarget(outputBuffer);
  if (target.is_alias_of(input)) {
    target = at::empty_like(target, at::MemoryFormat::Contiguous);
  }
  std::vector<Block> sends = splitRows(op, input, inputSplitSizes, size_, "input", "input_split_sizes");
  std::vector<Block> receives = splitRows(op, target, outputSplitSizes, size_, "output", "output_split_sizes");
  TORCH_CHECK_VALUE(sends[rank_].bytes == receives[rank_].bytes, "ucxcoll: ", op, ": this rank (", rank_, ") sends ",
                    sends[rank_].bytes, " bytes to itself (input_split_sizes[", rank_, "]) but expects ",
                    receives[rank_].bytes, " (output_split_sizes[", rank_, "]); they must be equal");
  CopyBacks copies;
  addCopyBack(copies, target, outputBuffer);
  Collective::Body body = [input, target, sends, receives, equalSplits](Collective& c) {
    return equalSplits ? selectAlltoall(c, sends, receives)
                       : alltoallPairwise(c, tag::Routine::AlltoallPairwise, sends, receives, true);
  };
  return runCollective(c10d::OpType::ALLTOALL_BASE, op, opts.timeout, opts.asyncOp,
                       c10::IValue(std::vector<at::Tensor>{outputBuffer}), tensorListType(),
                       withCopyBack(std::move(body), std::move(copies)), {inputBuffer});
}

c10::intrusive_ptr<c10d::Work> UcxBackend::alltoall_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                         std::vector<int64_t>& outputSplitSizes,
                                                         std::vector<int64_t>& inputSplitSizes,
                                                         const c10d::AllToAllOptions& opts) {
  return all_to_all_single(outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes, opts);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::alltoall(std::vector<at::Tensor>& outputTensors,
                                                    std::vector<at::Tensor>& inputTensors,
                                                    const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  const std::string allocate = "pass one tensor per rank (they may differ in size from rank to rank)";
  checkOnePerRank(op, inputTensors.size(), size_, "the input list", allocate);
  checkOnePerRank(op, outputTensors.size(), size_, "the output list", allocate);
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  std::vector<Block> sends;
  std::vector<Block> receives;
  CopyBacks copies;
  for (int p = 0; p < size_; ++p) {
    const std::string index = std::to_string(p);
    checkSameDtype(op, inputTensors[p], "input tensor " + index, inputTensors[0], "input tensor 0");
    checkSameDtype(op, outputTensors[p], "output tensor " + index, inputTensors[0], "input tensor 0");
    inputs.push_back(inputTensors[p].contiguous());
    targets.push_back(contiguousTarget(outputTensors[p]));
    addCopyBack(copies, targets.back(), outputTensors[p]);
    sends.push_back({inputs.back().data_ptr(), inputs.back().nbytes()});
    receives.push_back({targets.back().data_ptr(), targets.back().nbytes()});
  }
  TORCH_CHECK_VALUE(inputs[rank_].numel() == targets[rank_].numel(), "ucxcoll: ", op, ": this rank (", rank_,
                    ") sends itself input tensor ", rank_, " (", inputs[rank_].numel(),
                    " elements) into output tensor ", rank_, " (", targets[rank_].numel(),
                    " elements); they must have the same number of elements");
  for (const auto& target : targets) {
    for (const auto& input : inputs) {
      TORCH_CHECK_VALUE(!target.is_alias_of(input) || target.numel() == 0, "ucxcoll: ", op,
                        ": an output tensor shares memory with an input tensor; use separate tensors");
    }
  }
  Collective::Body body = [inputs, targets, sends, receives](Collective& c) {
    return alltoallPairwise(c, tag::Routine::AlltoallPairwise, sends, receives, true);
  };
  return runCollective(c10d::OpType::ALLTOALL, op, opts.timeout, opts.asyncOp, c10::IValue(outputTensors),
                       tensorListType(), withCopyBack(std::move(body), std::move(copies)), inputTensors);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allgatherUneven(std::vector<at::Tensor>& outputs, at::Tensor& inputTensor,
                                                           const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather";
  at::Tensor input = inputTensor.contiguous();
  std::vector<at::Tensor> targets;
  std::vector<Block> sends;
  std::vector<Block> receives;
  CopyBacks copies;
  for (const auto& output : outputs) {
    targets.push_back(contiguousTarget(output));
    addCopyBack(copies, targets.back(), output);
    sends.push_back({input.data_ptr(), input.nbytes()});
    receives.push_back({targets.back().data_ptr(), targets.back().nbytes()});
  }
  c10::List<c10::List<at::Tensor>> result;
  result.push_back(c10::List<at::Tensor>(outputs));
  Collective::Body body = [input, targets, sends, receives](Collective& c) {
    return alltoallPairwise(c, tag::Routine::AllgatherUneven, sends, receives, true);
  };
  return runCollective(c10d::OpType::ALLGATHER, op, opts.timeout, opts.asyncOp, c10::IValue(result),
                       listOfTensorListsType(), withCopyBack(std::move(body), std::move(copies)), {inputTensor});
}

c10::intrusive_ptr<c10d::Work> UcxBackend::gather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                                  std::vector<at::Tensor>& inputTensors,
                                                  const c10d::GatherOptions& opts) {
  const char* op = "gather";
  checkSingleTensor(op, inputTensors, "input");
  checkRoot(op, opts.rootRank, size_);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor input = inputTensors[0].contiguous();
  std::vector<at::Tensor> targets;
  std::vector<void*> blocks;
  CopyBacks copies;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(outputTensors.size() == 1, "ucxcoll: gather: the root takes one output list, got ",
                      outputTensors.size());
    const std::string allocate = "on the root, pass one tensor per rank shaped like the input";
    checkOnePerRank(op, outputTensors[0].size(), size_, "the output list", allocate);
    for (std::size_t r = 0; r < outputTensors[0].size(); ++r) {
      const at::Tensor& output = outputTensors[0][r];
      checkShapedLike(op, output, "output tensor " + std::to_string(r), inputTensors[0], "the input", allocate);
      targets.push_back(contiguousTarget(output));
      blocks.push_back(targets.back().data_ptr());
      addCopyBack(copies, targets.back(), output);
    }
  } else {
    TORCH_CHECK_VALUE(outputTensors.empty() || (outputTensors.size() == 1 && outputTensors[0].empty()),
                      "ucxcoll: gather: only the root (rank ", root, ") passes output tensors; rank ", rank_,
                      " passed ", outputTensors.empty() ? 0 : outputTensors[0].size());
  }
  Collective::Body body = [input, targets, blocks, root](Collective& c) {
    return gatherDirect(c, input.data_ptr(), blocks, input.nbytes(), root);
  };
  return runCollective(c10d::OpType::GATHER, op, opts.timeout, opts.asyncOp, c10::IValue(outputTensors),
                       listOfTensorListsType(), withCopyBack(std::move(body), std::move(copies)), inputTensors);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::scatter(std::vector<at::Tensor>& outputTensors,
                                                   std::vector<std::vector<at::Tensor>>& inputTensors,
                                                   const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  checkSingleTensor(op, outputTensors, "output");
  checkRoot(op, opts.rootRank, size_);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor output = outputTensors[0];
  std::vector<at::Tensor> inputs;
  std::vector<const void*> blocks;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(inputTensors.size() == 1, "ucxcoll: scatter: the root takes one input list, got ",
                      inputTensors.size());
    const std::string allocate = "on the root, pass one tensor per rank shaped like the output";
    checkOnePerRank(op, inputTensors[0].size(), size_, "the input list", allocate);
    for (std::size_t r = 0; r < inputTensors[0].size(); ++r) {
      checkShapedLike(op, inputTensors[0][r], "input tensor " + std::to_string(r), output, "the output", allocate);
      inputs.push_back(inputTensors[0][r].contiguous());
      blocks.push_back(inputs.back().data_ptr());
    }
  } else {
    TORCH_CHECK_VALUE(inputTensors.empty() || (inputTensors.size() == 1 && inputTensors[0].empty()),
                      "ucxcoll: scatter: only the root (rank ", root, ") passes input tensors; rank ", rank_,
                      " passed ", inputTensors.empty() ? 0 : inputTensors[0].size());
  }
  at::Tensor target = contiguousTarget(output);
  CopyBacks copies;
  addCopyBack(copies, target, output);
  Collective::Body body = [inputs, blocks, target, root](Collective& c) {
    return scatterDirect(c, blocks, target.data_ptr(), target.nbytes(), root);
  };
  return runCollective(c10d::OpType::SCATTER, op, opts.timeout, opts.asyncOp, c10::IValue(outputTensors),
                       tensorListType(), withCopyBack(std::move(body), std::move(copies)),
                       inputTensors.empty() ? std::vector<at::Tensor>{} : inputTensors[0]);
}

void UcxBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // A timeout of 0 leaves no time to wait (gloo's rank 0 then fails at
  // once); ucxcoll's deadlines take 0 as "none", so it waits 1 ms.
  const auto timeout = opts.timeout == std::chrono::milliseconds(0) ? std::chrono::milliseconds(1) : opts.timeout;
  auto work = runCollective(c10d::OpType::BARRIER, "monitored_barrier", timeout, false,
                            c10::IValue(std::vector<at::Tensor>{}), tensorListType(), &barrierMonitored);
  try {
    work->wait();
  } catch (const std::exception&) {
    auto* ours = dynamic_cast<UcxWork*>(work.get());
    std::exception_ptr error = ours != nullptr ? ours->ucxcollError() : nullptr;
    if (!error) {
      throw;
    }
    std::rethrow_exception(backendError(monitoredBarrierFailure(error, effectiveTimeout(opts.timeout), waitAllRanks)));
  }
}

std::string UcxBackend::monitoredBarrierFailure(const std::exception_ptr& error, std::chrono::milliseconds timeout,
                                                bool waitAllRanks) const {
  // The first sentence is gloo's, word for word, so that scripts (and
  // torch's own tests) that look for it find it; what ucxcoll saw follows.
  std::string ours;
  std::vector<int> silent;
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& timeout) {
    ours = timeout.what();
    silent = timeout.silentPeers();
  } catch (const std::exception& other) {
    ours = other.what();
  }
  const std::string ms = std::to_string(timeout.count());
  if (rank_ != 0) {
    return "ucxcoll: Rank " + std::to_string(rank_) +
           " successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0 (" +
           ours + ")";
  }
  if (silent.empty()) {
    return ours;
  }
  if (timeout.count() == 0) {
    return "ucxcoll: Rank 0 timed out in monitoredBarrier after 0 ms (" + ours + ")";
  }
  if (!waitAllRanks) {
    // gloo names the first rank that did not arrive; every one is in `ours`.
    return "ucxcoll: [Rank 0]: Rank " + std::to_string(silent.front()) + " failed to pass monitoredBarrier in " + ms +
           " ms (" + ours + ")";
  }
  std::string ranks;
  for (int rank : silent) {
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
  }
  return "ucxcoll: [Rank 0]: Ranks " + ranks + " failed to pass monitoredBarrier in " + ms + " ms (" + ours + ")";
}

}  // namespace ucxcoll
