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

// How contributions are combined: torch's ReduceOp, as far as supported.
// (The value goes into message tags, see tag.hpp: at most 16.)
enum class Reduction : uint8_t {
  Sum = 0,
  Product = 1,
  Min = 2,
  Max = 3,
  BitwiseAnd = 4,
  BitwiseOr = 5,
  BitwiseXor = 6,
  // Sums whose result is divided by the group size afterwards (AVG), or
  // whose inputs are multiplied by a factor first (PREMUL_SUM); the
  // algorithms combine them as sums (see scaleInPlace / divideInPlace).
  Average = 7,
  PremulSum = 8,
};

std::size_t elementSize(DataType type);
const char* dataTypeName(DataType type);
const char* reductionName(Reduction reduction);  // "SUM", as torch names it

// Whether `reduction` is defined for `type`: min/max not for complex
// numbers, the bitwise ones only for integers and bool.
bool supportsReduction(Reduction reduction, DataType type);

// accumulator[i] = accumulator[i] (op) operand[i] for i < count, as torch
// computes it: integers wrap, bool sums are a logical or (products an and),
// float16/bfloat16 are computed in float and rounded to nearest even,
// min/max propagate NaN. Throws std::invalid_argument for an unsupported
// combination.
void reduceInto(Reduction reduction, DataType type, void* accumulator, const void* operand, std::size_t count);

// buffer[i] *= factor, for floating and complex types (PREMUL_SUM's
// factor), computed in double and rounded once to the type.
void scaleInPlace(DataType type, void* buffer, std::size_t count, double factor);

// buffer[i] /= divisor (AVG): floating and complex types (part by part) divide in their
// own precision (float16/bfloat16 in float, rounded to nearest even),
// integers round toward zero. Not for bool.
void divideInPlace(DataType type, void* buffer, std::size_t count, int64_t divisor);

}  // namespace ucxcoll
