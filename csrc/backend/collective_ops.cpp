// The collectives of UcxBackend: input checks, then the collective's buffers
// and algorithm handed to runCollective(). Non-contiguous tensors are
// staged in contiguous copies; outputs are copied back before the Work
// completes.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend/collective_helpers.hpp"
#include "backend/tensor_checks.hpp"
#include "backend/ucx_backend.hpp"

namespace ucxcoll {

c10::intrusive_ptr<c10d::Work> UcxBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  checkSingleTensor(op, tensors, "tensor");
  checkRoot(op, opts.rootRank, size_);
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "ucxcoll: broadcast: root_tensor must be 0, got ", opts.rootTensor);
  at::Tensor tensor = tensors[0];
  at::Tensor buffer = contiguousTarget(tensor);
  int root = static_cast<int>(opts.rootRank);
  CopyBacks copies;
  if (root != rank_) {
    addCopyBack(copies, buffer, tensor);
  }
  Collective::Body body = [buffer, root](Collective& c) {
    return selectBroadcast(c, buffer.data_ptr(), buffer.nbytes(), root);
  };
  return runCollective(c10d::OpType::BROADCAST, op, opts.timeout, opts.asyncOp, c10::IValue(tensors), tensorListType(),
                       withCopyBack(std::move(body), std::move(copies)));
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  if (tensors.size() == 1 && tensors[0].is_sparse()) {
    // torch hands sparse CPU tensors to allreduce (only sparse CUDA ones to
    // allreduce_sparse).
    return allreduce_sparse(tensors, opts);
  }
  checkSingleTensor(op, tensors, "tensor");
  at::Tensor tensor = tensors[0];
  DataType type = reducibleType(op, tensor);
  Reduction reduction = toReduction(op, opts.reduceOp, type);
  const double factor = premulFactor(op, opts.reduceOp);
  at::Tensor buffer = contiguousTarget(tensor);
  auto count = static_cast<std::size_t>(buffer.numel());
  CopyBacks copies;
  addCopyBack(copies, buffer, tensor);
  Collective::Body body = [buffer, count, type, reduction, factor](Collective& c) {
    // Only AVG and PREMUL_SUM need the scaling step around the algorithm;
    // the others skip its coroutine frame.
    if (reduction != Reduction::Average && reduction != Reduction::PremulSum) {
      return selectAllreduce(c, buffer.data_ptr(), count, type, reduction);
    }
    return allreduceScaled(c, buffer.data_ptr(), count, type, reduction, factor);
  };
  return runCollective(c10d::OpType::ALLREDUCE, op, opts.timeout, opts.asyncOp, c10::IValue(tensors), tensorListType(),
                       withCopyBack(std::move(body), std::move(copies)));
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allgather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                                     std::vector<at::Tensor>& inputTensors,
                                                     const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather";
  checkSingleTensor(op, inputTensors, "input");
  TORCH_CHECK_VALUE(outputTensors.size() == 1, "ucxcoll: all_gather takes one output list per rank, got ",
                    outputTensors.size());
  if (outputsDifferInShape(outputTensors[0], inputTensors[0], size_, rank_)) {
    checkUnevenAllgatherOutputs(op, outputTensors[0], inputTensors[0], size_, rank_);
    return allgatherUneven(outputTensors[0], inputTensors[0], opts);
  }
  checkAllgatherOutputs(op, outputTensors[0], inputTensors[0], size_);
  at::Tensor input = inputTensors[0].contiguous();
  std::vector<at::Tensor> targets;
  std::vector<void*> blocks;
  CopyBacks copies;
  for (const auto& output : outputTensors[0]) {
    targets.push_back(contiguousTarget(output));
    blocks.push_back(targets.back().data_ptr());
    addCopyBack(copies, targets.back(), output);
  }
  c10::List<c10::List<at::Tensor>> result;
  result.push_back(c10::List<at::Tensor>(outputTensors[0]));
  Collective::Body body = [input, targets, blocks](Collective& c) {
    return selectAllgather(c, input.data_ptr(), blocks, input.nbytes());
  };
  return runCollective(c10d::OpType::ALLGATHER, op, opts.timeout, opts.asyncOp, c10::IValue(result),
                       listOfTensorListsType(), withCopyBack(std::move(body), std::move(copies)), inputTensors);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::all_gather_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                             const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  checkCpu(op, inputBuffer, "input");
  checkAllgatherIntoTensor(op, outputBuffer, inputBuffer, size_);
  at::Tensor input = inputBuffer.contiguous();
  at::Tensor target = contiguousTarget(outputBuffer);
  const std::size_t bytes = input.nbytes();
  std::vector<void*> blocks;
  for (int r = 0; r < size_; ++r) {
    blocks.push_back(static_cast<std::byte*>(target.data_ptr()) + bytes * static_cast<std::size_t>(r));
  }
  CopyBacks copies;
  addCopyBack(copies, target, outputBuffer);
  Collective::Body body = [input, target, blocks, bytes](Collective& c) {
    return selectAllgather(c, input.data_ptr(), blocks, bytes);
  };
  return runCollective(c10d::OpType::_ALLGATHER_BASE, op, opts.timeout, opts.asyncOp,
                       c10::IValue(std::vector<at::Tensor>{outputBuffer}), tensorListType(),
                       withCopyBack(std::move(body), std::move(copies)), {inputBuffer});
}

c10::intrusive_ptr<c10d::Work> UcxBackend::_allgather_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                           const c10d::AllgatherOptions& opts) {
  return all_gather_single(outputBuffer, inputBuffer, opts);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::barrier(const c10d::BarrierOptions& opts) {
  return runCollective(c10d::OpType::BARRIER, "barrier", opts.timeout, opts.asyncOp,
                       c10::IValue(std::vector<at::Tensor>{}), tensorListType(), &selectBarrier);
}

}  // namespace ucxcoll
