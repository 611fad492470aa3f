#pragma once
// Element types the algorithms understand, without torch. The backend maps
// torch's ScalarType onto these.

#include <cstddef>
#include <cstdint>

namespace ucxcoll {

enum class DataType : uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int8,
  UInt8,
  Int16,
  Int32,
  Int64,
  Bool,
  Complex64,
  Complex128,
};

// How contributions are combined (torch's ReduceOp, as far as supported).
enum class Reduction : uint8_t {
  Sum,
};

std::size_t elementSize(DataType type);
const char* dataTypeName(DataType type);

// accumulator[i] = accumulator[i] (op) operand[i] for i < count.
void reduceInto(Reduction reduction, DataType type, void* accumulator, const void* operand, std::size_t count);

}  // namespace ucxcoll
