#include "backend/tensor_checks.hpp"

#include <c10/util/Exception.h>

#include <sstream>
#include <utility>

#include "backend/torch_compat.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {

std::optional<DataType> toDataType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DataType::Float32;
    case at::kDouble:
      return DataType::Float64;
    case at::kHalf:
      return DataType::Float16;
    case at::kBFloat16:
      return DataType::BFloat16;
    case at::kChar:
      return DataType::Int8;
    case at::kByte:
      return DataType::UInt8;
    case at::kShort:
      return DataType::Int16;
    case at::kInt:
      return DataType::Int32;
    case at::kLong:
      return DataType::Int64;
    case at::kBool:
      return DataType::Bool;
    case at::kComplexFloat:
      return DataType::Complex64;
    case at::kComplexDouble:
      return DataType::Complex128;
    default:
      return std::nullopt;
  }
}

std::string shapeText(const at::Tensor& tensor) {
  std::ostringstream out;
  out << "[";
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    out << (d ? ", " : "") << tensor.size(d);
  }
  out << "]";
  return out.str();
}

void checkCpu(const char* op, const at::Tensor& tensor, const char* role) {
  // DeviceRouter sends CUDA tensors to NCCL and refuses other devices, so
  // this guards the UCX path against a direct caller.
  TORCH_CHECK_VALUE(tensor.device().is_cpu(), "ucxcoll: ", op, " got a ", role, " on device ", tensor.device().str(),
                    "; the UCX path takes CPU tensors");
  TORCH_CHECK_VALUE(!tensor.is_sparse(), "ucxcoll: ", op, " got a sparse ", role,
                    "; only dense (strided) tensors are supported");
}

void checkSingleTensor(const char* op, const std::vector<at::Tensor>& tensors, const char* role) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "ucxcoll: ", op, " takes exactly one ", role, " tensor per rank, got ",
                    tensors.size());
  checkCpu(op, tensors[0], role);
}

void checkAllgatherOutputs(const char* op, const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                           int worldSize) {
  const std::string allocate =
      "allocate one tensor per rank shaped like the input, e.g. "
      "[torch.empty_like(tensor) for _ in range(" +
      std::to_string(worldSize) + ")]";
  TORCH_CHECK_VALUE(!outputs.empty(), "ucxcoll: ", op, ": the output list is empty, but it must hold one tensor per ",
                    "rank (", worldSize, " here); ", allocate);
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == worldSize, "ucxcoll: ", op, ": the output list holds ",
                    outputs.size(), " tensors but the group has ", worldSize, " ranks; ", allocate);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& output = outputs[i];
    checkCpu(op, output, "output tensor");
    TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), "ucxcoll: ", op, ": output tensor ", i, " has dtype ",
                     output.scalar_type(), " but the input has dtype ", input.scalar_type(), "; ", allocate);
    if (output.sizes() != input.sizes()) {
      std::string hint = (output.numel() == 0 && input.numel() > 0)
                             ? " (torch.tensor([]) or torch.empty(0) is an empty tensor that cannot receive data)"
                             : "";
      TORCH_CHECK_VALUE(false, "ucxcoll: ", op, ": output tensor ", i, " has shape ", shapeText(output),
                        " but the input has shape ", shapeText(input), hint, "; ", allocate);
    }
  }
}

bool outputsDifferInShape(const std::vector<at::Tensor>& outputs, const at::Tensor& input, int worldSize, int rank) {
  if (static_cast<int>(outputs.size()) != worldSize || outputs[rank].sizes() != input.sizes()) {
    return false;  // not an uneven all_gather: checkAllgatherOutputs explains what is wrong
  }
  for (const auto& output : outputs) {
    if (output.sizes() != input.sizes() && output.scalar_type() == input.scalar_type()) {
      return true;
    }
  }
  return false;
}

void checkUnevenAllgatherOutputs(const char* op, const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                                 int worldSize, int rank) {
  const std::string allocate = "allocate one tensor per rank, shaped like that rank's input";
  checkOnePerRank(op, outputs.size(), worldSize, "the output list", allocate);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    checkSameDtype(op, outputs[i], "output tensor " + std::to_string(i), input, "the input");
  }
  checkShapedLike(op, outputs[rank], "output tensor " + std::to_string(rank) + " (this rank's)", input, "the input",
                  allocate);
}

void checkAllgatherIntoTensor(const char* op, const at::Tensor& output, const at::Tensor& input, int worldSize) {
  checkCpu(op, output, "output tensor");
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), "ucxcoll: ", op, ": the output tensor has dtype ",
                   output.scalar_type(), " but the input has dtype ", input.scalar_type());
  if (output.numel() != input.numel() * worldSize) {
    std::ostringstream concatenated;
    std::ostringstream stacked;
    stacked << "[" << worldSize;
    for (int64_t d = 0; d < input.dim(); ++d)
      stacked << ", " << input.size(d);
    stacked << "]";
    if (input.dim() == 0) {
      concatenated << "[" << worldSize << "]";
    } else {
      concatenated << "[" << worldSize * input.size(0);
      for (int64_t d = 1; d < input.dim(); ++d)
        concatenated << ", " << input.size(d);
      concatenated << "]";
    }
    TORCH_CHECK_VALUE(false, "ucxcoll: ", op, ": the output tensor has ", output.numel(), " elements (shape ",
                      shapeText(output), ") but must hold world_size (", worldSize, ") x input (", input.numel(),
                      " elements) = ", input.numel() * worldSize, " elements, e.g. shape ", concatenated.str(),
                      " (concatenated) or ", stacked.str(), " (stacked)");
  }
}

void checkRoot(const char* op, int64_t root, int worldSize) {
  TORCH_CHECK_VALUE(root >= 0 && root < worldSize, "ucxcoll: ", op, ": root rank ", root,
                    " is outside the group (valid ranks are 0..", worldSize - 1, ")");
}

void checkOnePerRank(const char* op, std::size_t count, int worldSize, const std::string& what,
                     const std::string& allocate) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(count) == worldSize, "ucxcoll: ", op, ": ", what, " holds ", count,
                    " tensors but the group has ", worldSize, " ranks; ", allocate);
}

void checkSameDtype(const char* op, const at::Tensor& tensor, const std::string& what, const at::Tensor& reference,
                    const std::string& referenceName) {
  checkCpu(op, tensor, what.c_str());
  TORCH_CHECK_TYPE(tensor.scalar_type() == reference.scalar_type(), "ucxcoll: ", op, ": ", what, " has dtype ",
                   tensor.scalar_type(), " but ", referenceName, " has dtype ", reference.scalar_type(),
                   "; all tensors of one call must have the same dtype");
}

void checkShapedLike(const char* op, const at::Tensor& tensor, const std::string& what, const at::Tensor& reference,
                     const std::string& referenceName, const std::string& allocate) {
  checkSameDtype(op, tensor, what, reference, referenceName);
  TORCH_CHECK_VALUE(tensor.sizes() == reference.sizes(), "ucxcoll: ", op, ": ", what, " has shape ", shapeText(tensor),
                    " but ", referenceName, " has shape ", shapeText(reference), "; ", allocate);
}

void checkPeer(const char* op, int64_t peer, int worldSize, const char* role) {
  TORCH_CHECK_VALUE(peer >= 0 && peer < worldSize, "ucxcoll: ", op, ": ", role, " rank ", peer,
                    " is outside the group (valid ranks are 0..", worldSize - 1, ")");
}

void checkTag(const char* op, int64_t tag) {
  TORCH_CHECK_VALUE(tag >= 0, "ucxcoll: ", op, ": tag must be non-negative, got ", tag);
  TORCH_CHECK_VALUE(static_cast<uint64_t>(tag) <= tag::kMaxUserTag, "ucxcoll: ", op, ": tag ", tag,
                    " is above the largest supported tag, ", tag::kMaxUserTag);
}

DataType reducibleType(const char* op, const at::Tensor& tensor) {
  std::optional<DataType> type = toDataType(tensor.scalar_type());
  TORCH_CHECK_TYPE(type.has_value(), "ucxcoll: ", op, " does not support dtype ", tensor.scalar_type(),
                   "; supported: float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64, bool, "
                   "complex64, complex128");
  return *type;
}

Reduction toReduction(const char* op, const c10d::ReduceOp& reduceOp, DataType type) {
  static constexpr std::pair<c10d::ReduceOp::RedOpType, Reduction> kReductions[] = {
      {c10d::ReduceOp::SUM, Reduction::Sum},
      {c10d::ReduceOp::AVG, Reduction::Average},
      {c10d::ReduceOp::PRODUCT, Reduction::Product},
      {c10d::ReduceOp::MIN, Reduction::Min},
      {c10d::ReduceOp::MAX, Reduction::Max},
      {c10d::ReduceOp::BAND, Reduction::BitwiseAnd},
      {c10d::ReduceOp::BOR, Reduction::BitwiseOr},
      {c10d::ReduceOp::BXOR, Reduction::BitwiseXor},
      {c10d::ReduceOp::PREMUL_SUM, Reduction::PremulSum},
  };
  std::optional<Reduction> reduction;
  for (const auto& [torchOp, ours] : kReductions) {
    if (reduceOp.op_ == torchOp) {
      reduction = ours;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(reduction.has_value(), "ucxcoll: ", op, " does not support ReduceOp.",
                              reduceOpName(reduceOp),
                              "; supported: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM");
  TORCH_CHECK_TYPE(supportsReduction(*reduction, type), "ucxcoll: ", op, ": ReduceOp.", reduceOpName(reduceOp),
                   " is not defined for dtype ", dataTypeName(type),
                   " (MIN and MAX are not defined for complex numbers; BAND, BOR and BXOR only for integers and "
                   "bool; AVG not for bool; PREMUL_SUM only for floating and complex types)");
  return *reduction;
}

double premulFactor(const char* op, const c10d::ReduceOp& reduceOp) {
  if (reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM) {
    return 1.0;
  }
  const auto* supplement = dynamic_cast<const PreMulSumSupplement*>(reduceOp.supplement_.get());
  TORCH_CHECK_VALUE(supplement != nullptr, "ucxcoll: ", op,
                    ": ReduceOp.PREMUL_SUM without a factor; make it with "
                    "torch.distributed._make_nccl_premul_sum(factor)");
  if (!supplement->tensor_factor.defined()) {
    return supplement->double_factor;
  }
  const at::Tensor& factor = supplement->tensor_factor;
  TORCH_CHECK_VALUE(factor.numel() == 1 && !factor.is_complex(), "ucxcoll: ", op,
                    ": the PREMUL_SUM factor must be one real number, got a tensor of ", factor.numel(),
                    " element(s) of dtype ", factor.scalar_type());
  return factor.item<double>();
}

const char* reduceOpName(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "unknown";
  }
}

}  // namespace ucxcoll
