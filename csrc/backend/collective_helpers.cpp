#include "backend/collective_helpers.hpp"

namespace ucxcoll {

const c10::TypePtr& tensorListType() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}

const c10::TypePtr& listOfTensorListsType() {
  static const c10::TypePtr type = c10::ListType::create(tensorListType());
  return type;
}

Collective::Body withCopyBack(Collective::Body algorithm, CopyBacks copies) {
  if (copies.empty()) {
    return algorithm;
  }
  return [algorithm = std::move(algorithm), copies = std::move(copies)](Collective& c) mutable -> Task {
    co_await algorithm(c);
    for (auto& [staged, destination] : copies) {
      destination.copy_(staged);
    }
  };
}

Collective::Body averagedIfNeeded(Collective::Body algorithm, Reduction reduction, DataType type, at::Tensor output) {
  if (reduction != Reduction::Average) {
    return algorithm;
  }
  return [algorithm = std::move(algorithm), type, output = std::move(output)](Collective& c) mutable -> Task {
    co_await algorithm(c);
    if (output.defined()) {
      divideInPlace(type, output.data_ptr(), static_cast<std::size_t>(output.numel()), c.size());
    }
  };
}

at::Tensor premultipliedIfNeeded(const at::Tensor& input, Reduction reduction, DataType type, double factor) {
  if (reduction != Reduction::PremulSum) {
    return input.contiguous();
  }
  at::Tensor copy = input.clone(at::MemoryFormat::Contiguous);
  scaleInPlace(type, copy.data_ptr(), static_cast<std::size_t>(copy.numel()), factor);
  return copy;
}

at::Tensor asBytes(const at::Tensor& tensor) {
  return tensor.contiguous().reshape({-1}).view(at::kByte);
}

}  // namespace ucxcoll
