#include <catch2/catch.hpp>

#include <cstring>
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
