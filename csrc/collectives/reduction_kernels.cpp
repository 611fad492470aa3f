// Element-wise reductions on raw buffers. Each loop is a plain indexed loop
// over restrict pointers so that the compiler vectorises it; half-precision
// types are widened to float per element and rounded back, which is what
// torch and gloo do for a pairwise sum.

#include <bit>
#include <cstring>
#include <stdexcept>

#include "collectives/datatype.hpp"

namespace ucxcoll {
namespace {

inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int shift = 0;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ff;
      bits = sign | static_cast<uint32_t>(127 - 15 - shift + 1) << 23 | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

// Round to nearest even, as torch's c10::Half conversion does.
inline uint16_t floatToHalf(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t absolute = bits & 0x7fffffff;
  if (absolute >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 | (absolute > 0x7f800000u ? 0x200 : 0));
  }
  if (absolute >= 0x477ff000u) {  // rounds to beyond the largest half
    return static_cast<uint16_t>(sign | 0x7c00);
  }
  if (absolute < 0x38800000u) {  // result is subnormal or zero
    float magnitude = std::bit_cast<float>(absolute);
    // Adding 0.5 shifts the subnormal range into float's last mantissa bits,
    // where the FPU's own round-to-nearest-even does the rounding.
    float shifted = magnitude + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  uint32_t mantissaOdd = (absolute >> 13) & 1;
  absolute += 0xc8000fffu + mantissaOdd;  // rebias exponent and round
  return static_cast<uint16_t>(sign | (absolute >> 13));
}

inline float bfloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t floatToBfloat16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffff) > 0x7f800000u) {
    return 0x7fc0;  // canonical nan
  }
  uint32_t lsb = (bits >> 16) & 1;
  return static_cast<uint16_t>((bits + 0x7fff + lsb) >> 16);
}

template <typename T>
void sumArithmetic(T* __restrict__ accumulator, const T* __restrict__ operand, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    accumulator[i] = accumulator[i] + operand[i];
  }
}

// Integer sums wrap around, as torch's do; unsigned arithmetic makes the
// wrap defined behaviour.
template <typename T, typename Unsigned>
void sumWrapping(T* __restrict__ accumulator, const T* __restrict__ operand, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    accumulator[i] = static_cast<T>(static_cast<Unsigned>(accumulator[i]) + static_cast<Unsigned>(operand[i]));
  }
}

void sumHalf(uint16_t* __restrict__ accumulator, const uint16_t* __restrict__ operand, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    accumulator[i] = floatToHalf(halfToFloat(accumulator[i]) + halfToFloat(operand[i]));
  }
}

void sumBfloat16(uint16_t* __restrict__ accumulator, const uint16_t* __restrict__ operand, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    accumulator[i] = floatToBfloat16(bfloat16ToFloat(accumulator[i]) + bfloat16ToFloat(operand[i]));
  }
}

// A sum of booleans is their logical or, as in torch.
void sumBool(uint8_t* __restrict__ accumulator, const uint8_t* __restrict__ operand, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    accumulator[i] = static_cast<uint8_t>((accumulator[i] | operand[i]) != 0);
  }
}

}  // namespace

std::size_t elementSize(DataType type) {
  switch (type) {
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Bool:
      return 1;
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int16:
      return 2;
    case DataType::Float32:
    case DataType::Int32:
      return 4;
    case DataType::Float64:
    case DataType::Int64:
    case DataType::Complex64:
      return 8;
    case DataType::Complex128:
      return 16;
  }
  throw std::invalid_argument("unknown DataType");
}

const char* dataTypeName(DataType type) {
  switch (type) {
    case DataType::Float32:
      return "float32";
    case DataType::Float64:
      return "float64";
    case DataType::Float16:
      return "float16";
    case DataType::BFloat16:
      return "bfloat16";
    case DataType::Int8:
      return "int8";
    case DataType::UInt8:
      return "uint8";
    case DataType::Int16:
      return "int16";
    case DataType::Int32:
      return "int32";
    case DataType::Int64:
      return "int64";
    case DataType::Bool:
      return "bool";
    case DataType::Complex64:
      return "complex64";
    case DataType::Complex128:
      return "complex128";
  }
  return "unknown";
}

void reduceInto(Reduction reduction, DataType type, void* accumulator, const void* operand, std::size_t count) {
  if (reduction != Reduction::Sum) {
    throw std::invalid_argument("unsupported reduction");
  }
  switch (type) {
    case DataType::Float32:
      return sumArithmetic(static_cast<float*>(accumulator), static_cast<const float*>(operand), count);
    case DataType::Float64:
      return sumArithmetic(static_cast<double*>(accumulator), static_cast<const double*>(operand), count);
    case DataType::Complex64:  // element-wise on (re, im) pairs
      return sumArithmetic(static_cast<float*>(accumulator), static_cast<const float*>(operand), 2 * count);
    case DataType::Complex128:
      return sumArithmetic(static_cast<double*>(accumulator), static_cast<const double*>(operand), 2 * count);
    case DataType::Float16:
      return sumHalf(static_cast<uint16_t*>(accumulator), static_cast<const uint16_t*>(operand), count);
    case DataType::BFloat16:
      return sumBfloat16(static_cast<uint16_t*>(accumulator), static_cast<const uint16_t*>(operand), count);
    case DataType::Int8:
      return sumWrapping<int8_t, uint8_t>(static_cast<int8_t*>(accumulator), static_cast<const int8_t*>(operand),
                                          count);
    case DataType::UInt8:
      return sumArithmetic(static_cast<uint8_t*>(accumulator), static_cast<const uint8_t*>(operand), count);
    case DataType::Int16:
      return sumWrapping<int16_t, uint16_t>(static_cast<int16_t*>(accumulator), static_cast<const int16_t*>(operand),
                                            count);
    case DataType::Int32:
      return sumWrapping<int32_t, uint32_t>(static_cast<int32_t*>(accumulator), static_cast<const int32_t*>(operand),
                                            count);
    case DataType::Int64:
      return sumWrapping<int64_t, uint64_t>(static_cast<int64_t*>(accumulator), static_cast<const int64_t*>(operand),
                                            count);
    case DataType::Bool:
      return sumBool(static_cast<uint8_t*>(accumulator), static_cast<const uint8_t*>(operand), count);
  }
}

}  // namespace ucxcoll
