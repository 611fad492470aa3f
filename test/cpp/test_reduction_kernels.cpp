#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "collectives/datatype.hpp"

using namespace ucxcoll;

TEST_CASE("integer sums wrap like torch's", "[reduce]") {
  std::vector<int8_t> a{100, -128, 5};
  std::vector<int8_t> b{100, -1, -6};
  reduceInto(Reduction::Sum, DataType::Int8, a.data(), b.data(), a.size());
  CHECK(a == std::vector<int8_t>{-56, 127, -1});
}

TEST_CASE("bool sum is logical or", "[reduce]") {
  std::vector<uint8_t> a{0, 1, 0, 1};
  std::vector<uint8_t> b{0, 0, 1, 1};
  reduceInto(Reduction::Sum, DataType::Bool, a.data(), b.data(), a.size());
  CHECK(a == std::vector<uint8_t>{0, 1, 1, 1});
}

TEST_CASE("float16 sums round to nearest even", "[reduce]") {
  // 1.0 = 0x3c00; 0x1000 = 2^-11 is half an ulp of 1.0, so 1 + 2^-11 ties
  // to even (1.0); 0x1200 = 0.75 ulp rounds up to 1 + 2^-10 (0x3c01).
  std::vector<uint16_t> a{0x3c00, 0x3c00, 0x7bff, 0x0001};
  std::vector<uint16_t> b{0x1000, 0x1200, 0x7bff, 0x0001};
  reduceInto(Reduction::Sum, DataType::Float16, a.data(), b.data(), a.size());
  CHECK(a[0] == 0x3c00);
  CHECK(a[1] == 0x3c01);
  CHECK(a[2] == 0x7c00);  // 65504 + 65504 overflows to inf
  CHECK(a[3] == 0x0002);  // subnormals add exactly
}

TEST_CASE("bfloat16 sums round to nearest even", "[reduce]") {
  // 1.0 = 0x3f80; 2^-8 = 0x3b80 is half an ulp of 1.0 in bfloat16.
  std::vector<uint16_t> a{0x3f80, 0x3f80};
  std::vector<uint16_t> b{0x3b80, 0x3f80};
  reduceInto(Reduction::Sum, DataType::BFloat16, a.data(), b.data(), a.size());
  CHECK(a[0] == 0x3f80);
  CHECK(a[1] == 0x4000);
}

TEST_CASE("complex64 sums real and imaginary parts", "[reduce]") {
  std::vector<float> a{1.0f, 2.0f, -3.0f, 0.5f};
  std::vector<float> b{10.0f, 20.0f, 3.0f, 0.25f};
  reduceInto(Reduction::Sum, DataType::Complex64, a.data(), b.data(), 2);
  CHECK(a == std::vector<float>{11.0f, 22.0f, 0.0f, 0.75f});
}

TEST_CASE("element sizes", "[reduce]") {
  CHECK(elementSize(DataType::BFloat16) == 2);
  CHECK(elementSize(DataType::Complex64) == 8);
  CHECK(elementSize(DataType::Bool) == 1);
  CHECK(std::string(dataTypeName(DataType::Int16)) == "int16");
}

TEST_CASE("every reduction on integers, with wrap-around", "[reduce]") {
  auto apply = [](Reduction reduction, std::vector<int16_t> a, const std::vector<int16_t>& b) {
    reduceInto(reduction, DataType::Int16, a.data(), b.data(), a.size());
    return a;
  };
  std::vector<int16_t> a{300, -7, 12, 0x0f0f}, b{300, 5, -12, 0x00ff};
  CHECK(apply(Reduction::Product, a, b) ==
        std::vector<int16_t>{static_cast<int16_t>(90000), -35, -144, static_cast<int16_t>(0x0f0f * 0x00ff)});
  CHECK(apply(Reduction::Min, a, b) == std::vector<int16_t>{300, -7, -12, 0x00ff});
  CHECK(apply(Reduction::Max, a, b) == std::vector<int16_t>{300, 5, 12, 0x0f0f});
  CHECK(apply(Reduction::BitwiseAnd, a, b) == std::vector<int16_t>{300, -7 & 5, 12 & -12, 0x000f});
  CHECK(apply(Reduction::BitwiseOr, a, b) == std::vector<int16_t>{300, -7 | 5, 12 | -12, 0x0fff});
  CHECK(apply(Reduction::BitwiseXor, a, b) == std::vector<int16_t>{0, -7 ^ 5, 12 ^ -12, 0x0ff0});
}

TEST_CASE("min and max propagate NaN like torch.minimum/maximum", "[reduce]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Reduction reduction : {Reduction::Min, Reduction::Max}) {
    std::vector<float> a{nan, 1.0f, 2.0f}, b{1.0f, nan, 3.0f};
    reduceInto(reduction, DataType::Float32, a.data(), b.data(), a.size());
    CHECK(std::isnan(a[0]));
    CHECK(std::isnan(a[1]));
    CHECK(a[2] == (reduction == Reduction::Min ? 2.0f : 3.0f));
  }
}

TEST_CASE("bool reductions are logical", "[reduce]") {
  std::vector<uint8_t> a{0, 1, 0, 1}, b{0, 0, 1, 1};
  auto apply = [&](Reduction reduction) {
    std::vector<uint8_t> x = a;
    reduceInto(reduction, DataType::Bool, x.data(), b.data(), x.size());
    return x;
  };
  CHECK(apply(Reduction::Product) == std::vector<uint8_t>{0, 0, 0, 1});
  CHECK(apply(Reduction::Min) == std::vector<uint8_t>{0, 0, 0, 1});
  CHECK(apply(Reduction::Max) == std::vector<uint8_t>{0, 1, 1, 1});
  CHECK(apply(Reduction::BitwiseXor) == std::vector<uint8_t>{0, 1, 1, 0});
}

TEST_CASE("complex products multiply, min/max and bitwise ops are refused", "[reduce]") {
  std::vector<float> a{1.0f, 2.0f}, b{3.0f, -1.0f};  // (1+2i)(3-i) = 5+5i
  reduceInto(Reduction::Product, DataType::Complex64, a.data(), b.data(), 1);
  CHECK(a == std::vector<float>{5.0f, 5.0f});
  CHECK_FALSE(supportsReduction(Reduction::Max, DataType::Complex64));
  CHECK_FALSE(supportsReduction(Reduction::BitwiseAnd, DataType::Float32));
  CHECK(supportsReduction(Reduction::BitwiseAnd, DataType::Bool));
  CHECK_THROWS_WITH(reduceInto(Reduction::Max, DataType::Complex64, a.data(), b.data(), 1),
                    "reduction MAX is not defined for complex64");
}

TEST_CASE("float16 max returns one of the two values unchanged", "[reduce]") {
  std::vector<uint16_t> a{0x3c00, 0xbc00}, b{0x4000, 0x3c01};  // 1 vs 2, -1 vs 1.0009765625
  reduceInto(Reduction::Max, DataType::Float16, a.data(), b.data(), a.size());
  CHECK(a == std::vector<uint16_t>{0x4000, 0x3c01});
}

TEST_CASE("AVG and PREMUL_SUM combine as sums", "[reduce]") {
  std::vector<float> a{1.5f, -2.0f};
  std::vector<float> b{0.5f, 4.0f};
  reduceInto(Reduction::Average, DataType::Float32, a.data(), b.data(), a.size());
  CHECK(a == std::vector<float>{2.0f, 2.0f});
  reduceInto(Reduction::PremulSum, DataType::Float32, a.data(), b.data(), a.size());
  CHECK(a == std::vector<float>{2.5f, 6.0f});
}

TEST_CASE("AVG divides: integers toward zero, halves rounded once, complex part by part", "[reduce]") {
  std::vector<int32_t> integers{-21, 21, 7, -1};
  divideInPlace(DataType::Int32, integers.data(), integers.size(), 2);
  CHECK(integers == std::vector<int32_t>{-10, 10, 3, 0});
  std::vector<uint8_t> bytes{255, 3};
  divideInPlace(DataType::UInt8, bytes.data(), bytes.size(), 2);
  CHECK(bytes == std::vector<uint8_t>{127, 1});
  std::vector<uint16_t> half{0x4600};  // 6.0 / 4 = 1.5 = 0x3e00
  divideInPlace(DataType::Float16, half.data(), half.size(), 4);
  CHECK(half[0] == 0x3e00);
  std::vector<float> complex{74.0f, 4.0f};  // one complex64 element
  divideInPlace(DataType::Complex64, complex.data(), 1, 3);
  CHECK(complex == std::vector<float>{74.0f / 3.0f, 4.0f / 3.0f});
  uint8_t flag = 1;
  CHECK_THROWS_AS(divideInPlace(DataType::Bool, &flag, 1, 2), std::invalid_argument);
  CHECK_FALSE(supportsReduction(Reduction::Average, DataType::Bool));
}

TEST_CASE("PREMUL_SUM scales floating and complex types only", "[reduce]") {
  std::vector<double> doubles{3.0, -0.5};
  scaleInPlace(DataType::Float64, doubles.data(), doubles.size(), 0.25);
  CHECK(doubles == std::vector<double>{0.75, -0.125});
  std::vector<uint16_t> bf16{0x4040};  // 3.0 * 0.5 = 1.5 = 0x3fc0
  scaleInPlace(DataType::BFloat16, bf16.data(), bf16.size(), 0.5);
  CHECK(bf16[0] == 0x3fc0);
  std::vector<int64_t> integers{4};
  CHECK_THROWS_AS(scaleInPlace(DataType::Int64, integers.data(), 1, 2.0), std::invalid_argument);
  CHECK_FALSE(supportsReduction(Reduction::PremulSum, DataType::Int64));
  CHECK(supportsReduction(Reduction::PremulSum, DataType::Complex128));
}
