#include <catch2/catch.hpp>

#include "transport/tag.hpp"

using namespace ucxcoll;

TEST_CASE("tag fields round-trip and do not overlap", "[tag]") {
  uint64_t t = tag::make(0xabcd, 0x1234, 0x5678, 0x9abc);
  CHECK(t == 0xabcd123456789abcull);
  CHECK(tag::group(t) == 0xabcd);
  CHECK(tag::sequence(t) == 0x1234);
  CHECK(tag::step(t) == 0x5678);
  CHECK(tag::sender(t) == 0x9abc);
}

TEST_CASE("tag fields wrap modulo 2^16 instead of spilling into neighbours", "[tag]") {
  uint64_t t = tag::make(1, 0x10002, 0x10003, 0x10004);
  CHECK(tag::group(t) == 1);
  CHECK(tag::sequence(t) == 2);
  CHECK(tag::step(t) == 3);
  CHECK(tag::sender(t) == 4);
}

TEST_CASE("any-sender mask ignores exactly the sender field", "[tag]") {
  uint64_t a = tag::make(7, 8, 9, 1);
  uint64_t b = tag::make(7, 8, 9, 2);
  uint64_t c = tag::make(7, 9, 9, 1);
  CHECK((a & tag::kMatchAnySender) == (b & tag::kMatchAnySender));
  CHECK((a & tag::kMatchAnySender) != (c & tag::kMatchAnySender));
  CHECK(tag::kMatchAll == ~uint64_t{0});
}

TEST_CASE("consecutive collectives and groups get distinct tags", "[tag]") {
  CHECK(tag::make(1, 5, 0, 0) != tag::make(1, 6, 0, 0));
  CHECK(tag::make(1, 5, 0, 0) != tag::make(2, 5, 0, 0));
  CHECK(tag::make(1, 5, 0, 0) != tag::make(1, 5, 1, 0));
}
