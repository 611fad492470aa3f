// Element-wise reductions on raw buffers, for every dtype and reduction
// the collectives support. Half-precision types are widened to float per
// element and rounded back, which is what torch and gloo do pairwise.

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

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

// The element-wise loops. Each is a plain indexed loop over restrict
// pointers, which the compiler vectorises.
template <typename T, typename Combine>
void combine(T* __restrict__ accumulator, const T* __restrict__ operand, std::size_t count, Combine op) {
  for (std::size_t i = 0; i < count; ++i) {
    accumulator[i] = op(accumulator[i], operand[i]);
  }
}

// NaN wins, as in torch.minimum/maximum: `b` replaces `a` when it is
// smaller (larger) or NaN; a NaN `a` stays.
template <typename T>
T minimum(T a, T b) {
  return (b < a || b != b) ? b : a;
}
template <typename T>
T maximum(T a, T b) {
  return (b > a || b != b) ? b : a;
}

template <typename T>
void reduceFloating(Reduction reduction, T* accumulator, const T* operand, std::size_t count) {
  switch (reduction) {
    case Reduction::Sum:
    case Reduction::Average:    // summed, then divided
    case Reduction::PremulSum:  // multiplied, then summed
      return combine(accumulator, operand, count, [](T a, T b) { return a + b; });
    case Reduction::Product:
      return combine(accumulator, operand, count, [](T a, T b) { return a * b; });
    case Reduction::Min:
      return combine(accumulator, operand, count, minimum<T>);
    case Reduction::Max:
      return combine(accumulator, operand, count, maximum<T>);
    default:
      throw std::invalid_argument("unsupported reduction for a floating-point type");
  }
}

// Integer sums and products wrap around, as torch's do; unsigned
// arithmetic makes the wrap defined behaviour.
template <typename T>
void reduceInteger(Reduction reduction, T* accumulator, const T* operand, std::size_t count) {
  using U = std::make_unsigned_t<T>;
  switch (reduction) {
    case Reduction::Sum:
    case Reduction::Average:    // summed, then divided
    case Reduction::PremulSum:  // multiplied, then summed
      return combine(accumulator, operand, count,
                     [](T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); });
    case Reduction::Product:
      return combine(accumulator, operand, count,
                     [](T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); });
    case Reduction::Min:
      return combine(accumulator, operand, count, [](T a, T b) { return b < a ? b : a; });
    case Reduction::Max:
      return combine(accumulator, operand, count, [](T a, T b) { return b > a ? b : a; });
    case Reduction::BitwiseAnd:
      return combine(accumulator, operand, count, [](T a, T b) { return static_cast<T>(a & b); });
    case Reduction::BitwiseOr:
      return combine(accumulator, operand, count, [](T a, T b) { return static_cast<T>(a | b); });
    case Reduction::BitwiseXor:
      return combine(accumulator, operand, count, [](T a, T b) { return static_cast<T>(a ^ b); });
  }
}

// Booleans as torch reduces them: a sum is a logical or, a product (and
// min) a logical and, max a logical or.
void reduceBool(Reduction reduction, uint8_t* accumulator, const uint8_t* operand, std::size_t count) {
  switch (reduction) {
    case Reduction::Sum:
    case Reduction::Average:    // summed, then divided
    case Reduction::PremulSum:  // multiplied, then summed
    case Reduction::Max:
    case Reduction::BitwiseOr:
      return combine(accumulator, operand, count,
                     [](uint8_t a, uint8_t b) { return static_cast<uint8_t>((a | b) != 0); });
    case Reduction::Product:
    case Reduction::Min:
    case Reduction::BitwiseAnd:
      return combine(accumulator, operand, count,
                     [](uint8_t a, uint8_t b) { return static_cast<uint8_t>((a & b) != 0); });
    case Reduction::BitwiseXor:
      return combine(accumulator, operand, count,
                     [](uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) != (b != 0)); });
  }
}

// float16/bfloat16: computed in float, rounded to nearest even; min/max
// pick one of the two original values.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduceHalf(Reduction reduction, uint16_t* accumulator, const uint16_t* operand, std::size_t count) {
  switch (reduction) {
    case Reduction::Sum:
    case Reduction::Average:    // summed, then divided
    case Reduction::PremulSum:  // multiplied, then summed
      return combine(accumulator, operand, count,
                     [](uint16_t a, uint16_t b) { return FromFloat(ToFloat(a) + ToFloat(b)); });
    case Reduction::Product:
      return combine(accumulator, operand, count,
                     [](uint16_t a, uint16_t b) { return FromFloat(ToFloat(a) * ToFloat(b)); });
    case Reduction::Min:
      return combine(accumulator, operand, count, [](uint16_t a, uint16_t b) {
        float x = ToFloat(a), y = ToFloat(b);
        return (y < x || y != y) ? b : a;
      });
    case Reduction::Max:
      return combine(accumulator, operand, count, [](uint16_t a, uint16_t b) {
        float x = ToFloat(a), y = ToFloat(b);
        return (y > x || y != y) ? b : a;
      });
    default:
      throw std::invalid_argument("unsupported reduction for a floating-point type");
  }
}

// Complex numbers as (re, im) pairs: sums element-wise, products as
// complex multiplication.
template <typename T>
void reduceComplex(Reduction reduction, T* accumulator, const T* operand, std::size_t count) {
  switch (reduction) {
    case Reduction::Sum:
    case Reduction::Average:    // summed, then divided
    case Reduction::PremulSum:  // multiplied, then summed
      return combine(accumulator, operand, 2 * count, [](T a, T b) { return a + b; });
    case Reduction::Product:
      for (std::size_t i = 0; i < count; ++i) {
        T re = accumulator[2 * i] * operand[2 * i] - accumulator[2 * i + 1] * operand[2 * i + 1];
        T im = accumulator[2 * i] * operand[2 * i + 1] + accumulator[2 * i + 1] * operand[2 * i];
        accumulator[2 * i] = re;
        accumulator[2 * i + 1] = im;
      }
      return;
    default:
      throw std::invalid_argument("unsupported reduction for a complex type");
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

const char* reductionName(Reduction reduction) {
  switch (reduction) {
    case Reduction::Sum:
      return "SUM";
    case Reduction::Product:
      return "PRODUCT";
    case Reduction::Min:
      return "MIN";
    case Reduction::Max:
      return "MAX";
    case Reduction::BitwiseAnd:
      return "BAND";
    case Reduction::BitwiseOr:
      return "BOR";
    case Reduction::BitwiseXor:
      return "BXOR";
    case Reduction::Average:
      return "AVG";
    case Reduction::PremulSum:
      return "PREMUL_SUM";
  }
  return "unknown";
}

bool supportsReduction(Reduction reduction, DataType type) {
  const bool complex = type == DataType::Complex64 || type == DataType::Complex128;
  const bool floating =
      type == DataType::Float32 || type == DataType::Float64 || type == DataType::Float16 || type == DataType::BFloat16;
  switch (reduction) {
    case Reduction::Sum:
    case Reduction::Product:
      return true;
    case Reduction::Min:
    case Reduction::Max:
      return !complex;
    case Reduction::BitwiseAnd:
    case Reduction::BitwiseOr:
    case Reduction::BitwiseXor:
      return !complex && !floating;
    case Reduction::Average:
      return type != DataType::Bool;
    case Reduction::PremulSum:
      return complex || floating;
  }
  return false;
}

void reduceInto(Reduction reduction, DataType type, void* accumulator, const void* operand, std::size_t count) {
  if (!supportsReduction(reduction, type)) {
    throw std::invalid_argument(std::string("reduction ") + reductionName(reduction) + " is not defined for " +
                                dataTypeName(type));
  }
  switch (type) {
    case DataType::Float32:
      return reduceFloating(reduction, static_cast<float*>(accumulator), static_cast<const float*>(operand), count);
    case DataType::Float64:
      return reduceFloating(reduction, static_cast<double*>(accumulator), static_cast<const double*>(operand), count);
    case DataType::Complex64:
      return reduceComplex(reduction, static_cast<float*>(accumulator), static_cast<const float*>(operand), count);
    case DataType::Complex128:
      return reduceComplex(reduction, static_cast<double*>(accumulator), static_cast<const double*>(operand), count);
    case DataType::Float16:
      return reduceHalf<halfToFloat, floatToHalf>(reduction, static_cast<uint16_t*>(accumulator),
                                                  static_cast<const uint16_t*>(operand), count);
    case DataType::BFloat16:
      return reduceHalf<bfloat16ToFloat, floatToBfloat16>(reduction, static_cast<uint16_t*>(accumulator),
                                                          static_cast<const uint16_t*>(operand), count);
    case DataType::Int8:
      return reduceInteger(reduction, static_cast<int8_t*>(accumulator), static_cast<const int8_t*>(operand), count);
    case DataType::UInt8:
      return reduceInteger(reduction, static_cast<uint8_t*>(accumulator), static_cast<const uint8_t*>(operand), count);
    case DataType::Int16:
      return reduceInteger(reduction, static_cast<int16_t*>(accumulator), static_cast<const int16_t*>(operand), count);
    case DataType::Int32:
      return reduceInteger(reduction, static_cast<int32_t*>(accumulator), static_cast<const int32_t*>(operand), count);
    case DataType::Int64:
      return reduceInteger(reduction, static_cast<int64_t*>(accumulator), static_cast<const int64_t*>(operand), count);
    case DataType::Bool:
      return reduceBool(reduction, static_cast<uint8_t*>(accumulator), static_cast<const uint8_t*>(operand), count);
  }
}

namespace {

template <typename T, typename Transform>
void transformEach(void* buffer, std::size_t count, Transform transform) {
  auto* values = static_cast<T*>(buffer);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = transform(values[i]);
  }
}

template <float (*toFloat)(uint16_t), uint16_t (*fromFloat)(float), typename Transform>
void transformHalf(void* buffer, std::size_t count, Transform transform) {
  transformEach<uint16_t>(buffer, count, [&](uint16_t x) { return fromFloat(transform(toFloat(x))); });
}

}  // namespace

void scaleInPlace(DataType type, void* buffer, std::size_t count, double factor) {
  switch (type) {
    case DataType::Float32:
    case DataType::Complex64:
      return transformEach<float>(buffer, count * (type == DataType::Complex64 ? 2 : 1),
                                  [=](float x) { return static_cast<float>(x * factor); });
    case DataType::Float64:
    case DataType::Complex128:
      return transformEach<double>(buffer, count * (type == DataType::Complex128 ? 2 : 1),
                                   [=](double x) { return x * factor; });
    case DataType::Float16:
      return transformHalf<halfToFloat, floatToHalf>(buffer, count,
                                                     [=](float x) { return static_cast<float>(x * factor); });
    case DataType::BFloat16:
      return transformHalf<bfloat16ToFloat, floatToBfloat16>(buffer, count,
                                                             [=](float x) { return static_cast<float>(x * factor); });
    default:
      throw std::invalid_argument(std::string("PREMUL_SUM is not defined for ") + dataTypeName(type));
  }
}

void divideInPlace(DataType type, void* buffer, std::size_t count, int64_t divisor) {
  switch (type) {
    case DataType::Float32:
    case DataType::Complex64: {
      const auto d = static_cast<float>(divisor);
      return transformEach<float>(buffer, count * (type == DataType::Complex64 ? 2 : 1),
                                  [=](float x) { return x / d; });
    }
    case DataType::Float64:
    case DataType::Complex128: {
      const auto d = static_cast<double>(divisor);
      return transformEach<double>(buffer, count * (type == DataType::Complex128 ? 2 : 1),
                                   [=](double x) { return x / d; });
    }
    case DataType::Float16:
      return transformHalf<halfToFloat, floatToHalf>(buffer, count,
                                                     [=](float x) { return x / static_cast<float>(divisor); });
    case DataType::BFloat16:
      return transformHalf<bfloat16ToFloat, floatToBfloat16>(buffer, count,
                                                             [=](float x) { return x / static_cast<float>(divisor); });
    case DataType::Int8:
      return transformEach<int8_t>(buffer, count, [=](int8_t x) { return static_cast<int8_t>(x / divisor); });
    case DataType::UInt8:
      return transformEach<uint8_t>(buffer, count, [=](uint8_t x) { return static_cast<uint8_t>(x / divisor); });
    case DataType::Int16:
      return transformEach<int16_t>(buffer, count, [=](int16_t x) { return static_cast<int16_t>(x / divisor); });
    case DataType::Int32:
      return transformEach<int32_t>(buffer, count, [=](int32_t x) { return static_cast<int32_t>(x / divisor); });
    case DataType::Int64:
      return transformEach<int64_t>(buffer, count, [=](int64_t x) { return x / divisor; });
    case DataType::Bool:
      break;
  }
  throw std::invalid_argument(std::string("AVG is not defined for ") + dataTypeName(type));
}

}  // namespace ucxcoll
