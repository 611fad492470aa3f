// The reducing collectives of UcxBackend other than all_reduce: reduce,
// reduce_scatter (list and tensor forms) and reduce_scatter_tensor's
// coalesced form. Every reduction torch names is accepted (toReduction);
// AVG divides the sum by the group size on the ranks that get a result,
// PREMUL_SUM multiplies a copy of each rank's input first.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend/collective_helpers.hpp"
#include "backend/tensor_checks.hpp"
#include "backend/ucx_backend.hpp"

namespace ucxcoll {
namespace {

// The reduction a call asks for, with its factor (PREMUL_SUM).
struct ReductionRequest {
  DataType type;
  Reduction reduction;
  double factor;
};

ReductionRequest reductionFor(const char* op, const at::Tensor& tensor, const c10d::ReduceOp& reduceOp) {
  DataType type = reducibleType(op, tensor);
  Reduction reduction = toReduction(op, reduceOp, type);
  return {type, reduction, premulFactor(op, reduceOp)};
}

// Where a reduce-scatter writes: the output itself, unless it is not
// contiguous or shares memory with an input (the algorithm reads every
// input block while it writes the output).
at::Tensor reduceScatterTarget(const at::Tensor& output, const std::vector<at::Tensor>& inputs) {
  for (const auto& input : inputs) {
    if (output.is_alias_of(input)) {
      return at::empty_like(output, at::MemoryFormat::Contiguous);
    }
  }
  return contiguousTarget(output);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> UcxBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  checkSingleTensor(op, tensors, "tensor");
  checkRoot(op, opts.rootRank, size_);
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "ucxcoll: reduce: root_tensor must be 0, got ", opts.rootTensor);
  at::Tensor tensor = tensors[0];
  const ReductionRequest request = reductionFor(op, tensor, opts.reduceOp);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor input = premultipliedIfNeeded(tensor, request.reduction, request.type, request.factor);
  at::Tensor output;
  CopyBacks copies;
  if (rank_ == root) {
    output = contiguousTarget(tensor);
    addCopyBack(copies, output, tensor);
  }
  auto count = static_cast<std::size_t>(input.numel());
  Collective::Body body = [input, output, count, request, root](Collective& c) {
    return selectReduce(c, input.data_ptr(), output.defined() ? output.data_ptr() : nullptr, count, request.type,
                        request.reduction, root);
  };
  body = averagedIfNeeded(std::move(body), request.reduction, request.type, output);
  return runCollective(c10d::OpType::REDUCE, op, opts.timeout, opts.asyncOp, c10::IValue(tensors), tensorListType(),
                       withCopyBack(std::move(body), std::move(copies)));
}

c10::intrusive_ptr<c10d::Work> UcxBackend::reduce_scatter(std::vector<at::Tensor>& outputTensors,
                                                          std::vector<std::vector<at::Tensor>>& inputTensors,
                                                          const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  checkSingleTensor(op, outputTensors, "output");
  TORCH_CHECK_VALUE(inputTensors.size() == 1, "ucxcoll: reduce_scatter takes one input list per rank, got ",
                    inputTensors.size());
  at::Tensor output = outputTensors[0];
  const std::string allocate = "pass one input tensor per rank, each shaped like the output";
  checkOnePerRank(op, inputTensors[0].size(), size_, "the input list", allocate);
  for (std::size_t i = 0; i < inputTensors[0].size(); ++i) {
    checkShapedLike(op, inputTensors[0][i], "input tensor " + std::to_string(i), output, "the output", allocate);
  }
  const ReductionRequest request = reductionFor(op, output, opts.reduceOp);
  std::vector<at::Tensor> inputs;
  std::vector<const void*> blocks;
  for (const auto& input : inputTensors[0]) {
    inputs.push_back(premultipliedIfNeeded(input, request.reduction, request.type, request.factor));
    blocks.push_back(inputs.back().data_ptr());
  }
  at::Tensor target = reduceScatterTarget(output, inputs);
  CopyBacks copies;
  addCopyBack(copies, target, output);
  auto count = static_cast<std::size_t>(output.numel());
  Collective::Body body = [inputs, blocks, target, count, request](Collective& c) {
    return selectReduceScatter(c, blocks, target.data_ptr(), count, request.type, request.reduction);
  };
  body = averagedIfNeeded(std::move(body), request.reduction, request.type, target);
  return runCollective(c10d::OpType::REDUCE_SCATTER, op, opts.timeout, opts.asyncOp, c10::IValue(outputTensors),
                       tensorListType(), withCopyBack(std::move(body), std::move(copies)), inputTensors[0]);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::reduce_scatter_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                                 const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{outputBuffer};
  std::vector<at::Tensor> inputs{inputBuffer};
  return reduceScatterTensors(outputs, inputs, opts, "reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::_reduce_scatter_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                                const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single(outputBuffer, inputBuffer, opts);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                           std::vector<at::Tensor>& inputs,
                                                                           const c10d::ReduceScatterOptions& opts) {
  return reduceScatterTensors(outputs, inputs, opts, "reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                           std::vector<at::Tensor>& inputs,
                                                                           const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single_coalesced(outputs, inputs, opts);
}

// reduce_scatter_tensor for one or more (output, input) pairs, as one
// collective: rank p's blocks of all pairs are packed side by side (one
// message per peer), reduced together and unpacked into the outputs.
c10::intrusive_ptr<c10d::Work> UcxBackend::reduceScatterTensors(std::vector<at::Tensor>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::ReduceScatterOptions& opts, const char* op,
                                                                c10d::OpType opType) {
  TORCH_CHECK_VALUE(!outputs.empty() && outputs.size() == inputs.size(), "ucxcoll: ", op,
                    " takes as many outputs as inputs (at least one), got ", outputs.size(), " outputs and ",
                    inputs.size(), " inputs");
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::string which = outputs.size() == 1 ? "" : " " + std::to_string(k);
    checkCpu(op, inputs[k], "input");
    checkSameDtype(op, outputs[k], "output" + which, inputs[k], "input" + which);
    checkSameDtype(op, inputs[k], "input" + which, inputs[0], "input 0");
    TORCH_CHECK_VALUE(inputs[k].numel() == outputs[k].numel() * size_, "ucxcoll: ", op, ": input", which, " has ",
                      inputs[k].numel(), " elements (shape ", shapeText(inputs[k]), ") but must hold world_size (",
                      size_, ") x output", which, " (", outputs[k].numel(), " elements) = ", outputs[k].numel() * size_,
                      " elements (the outputs of all ranks, concatenated or stacked)");
  }
  const ReductionRequest request = reductionFor(op, inputs[0], opts.reduceOp);
  const std::size_t element = elementSize(request.type);
  at::Tensor packedInput;
  at::Tensor packedOutput;
  CopyBacks copies;
  if (outputs.size() == 1) {
    packedInput = premultipliedIfNeeded(inputs[0], request.reduction, request.type, request.factor);
    packedOutput = reduceScatterTarget(outputs[0], {packedInput});
    addCopyBack(copies, packedOutput, outputs[0]);
  } else {
    // Row p of the packed input: rank p's block of every input, in order.
    std::vector<at::Tensor> rows;
    int64_t total = 0;
    for (const auto& input : inputs) {
      rows.push_back(input.reshape({size_, input.numel() / size_}));
      total += input.numel() / size_;
    }
    packedInput = at::cat(rows, 1);  // a fresh copy: scaling it is harmless
    if (request.reduction == Reduction::PremulSum) {
      scaleInPlace(request.type, packedInput.data_ptr(), static_cast<std::size_t>(packedInput.numel()), request.factor);
    }
    packedOutput = at::empty({total}, inputs[0].options());
    int64_t offset = 0;
    for (const auto& output : outputs) {
      addCopyBack(copies, packedOutput.narrow(0, offset, output.numel()).view(output.sizes()), output);
      offset += output.numel();
    }
  }
  const auto count = static_cast<std::size_t>(packedOutput.numel());
  std::vector<const void*> blocks;
  for (int p = 0; p < size_; ++p) {
    blocks.push_back(static_cast<const std::byte*>(packedInput.data_ptr()) +
                     count * element * static_cast<std::size_t>(p));
  }
  Collective::Body body = [packedInput, packedOutput, blocks, count, request](Collective& c) {
    return selectReduceScatter(c, blocks, packedOutput.data_ptr(), count, request.type, request.reduction);
  };
  body = averagedIfNeeded(std::move(body), request.reduction, request.type, packedOutput);
  return runCollective(opType, op, opts.timeout, opts.asyncOp, c10::IValue(outputs), tensorListType(),
                       withCopyBack(std::move(body), std::move(copies)), inputs);
}

}  // namespace ucxcoll
