// Every algorithm at group sizes 1-8 and message sizes from 0 bytes up,
// ranks as threads over real UCX. Inputs are integer-valued so that every
// summation order gives the exact same result.

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "collectives/collective.hpp"
#include "common/error.hpp"
#include "rank_threads.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;

namespace {

using AllgatherFn = void (*)(Collective&, const void*, std::span<void* const>, std::size_t);
using AllreduceFn = void (*)(Collective&, void*, std::size_t, DataType, ReduceOp);

Collective makeCollective(Transport& t, uint32_t sequence, const char* name) {
  return Collective(t, 1, sequence, Deadline::after(std::chrono::seconds(60)), name);
}

int32_t valueOf(int rank, std::size_t index) {
  return static_cast<int32_t>(rank * 1000003 + index * 7);
}

// 2^19 + 1: with 2 ranks the ring all-reduce's blocks straddle a 1 MiB chunk
// boundary differently (one block needs one chunk more than the other).
const std::vector<std::size_t> kElementCounts{0, 1, 3, 1000, 65536 + 5, 1 << 20, (1 << 19) + 1};

void checkAllgather(AllgatherFn algorithm, const char* name) {
  for (int n = 1; n <= 8; ++n) {
    DYNAMIC_SECTION(name << " with " << n << " ranks") {
      auto failures = runRanks(n, [&](int rank, UcxTransport& t) {
        uint32_t sequence = 0;
        for (std::size_t count : kElementCounts) {
          std::vector<int32_t> input(count);
          for (std::size_t i = 0; i < count; ++i)
            input[i] = valueOf(rank, i);
          std::vector<std::vector<int32_t>> outputs(n, std::vector<int32_t>(count, -1));
          std::vector<void*> pointers;
          for (auto& output : outputs)
            pointers.push_back(output.data());
          auto c = makeCollective(t, sequence++, name);
          algorithm(c, input.data(), pointers, count * sizeof(int32_t));
          for (int r = 0; r < n; ++r) {
            for (std::size_t i = 0; i < count; ++i) {
              expect(outputs[r][i] == valueOf(r, i), std::string(name) + ": block " + std::to_string(r) + " element " +
                                                         std::to_string(i) + " of " + std::to_string(count));
            }
          }
        }
      });
      checkNoFailures(failures);
    }
  }
}

void checkAllreduce(AllreduceFn algorithm, const char* name) {
  for (int n = 1; n <= 8; ++n) {
    DYNAMIC_SECTION(name << " with " << n << " ranks") {
      auto failures = runRanks(n, [&](int rank, UcxTransport& t) {
        uint32_t sequence = 0;
        for (std::size_t count : kElementCounts) {
          std::vector<float> floats(count);
          std::vector<int64_t> integers(count);
          for (std::size_t i = 0; i < count; ++i) {
            floats[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 1024));
            integers[i] = static_cast<int64_t>(valueOf(rank, i)) << 20;
          }
          auto c1 = makeCollective(t, sequence++, name);
          algorithm(c1, floats.data(), count, DataType::Float32, ReduceOp::Sum);
          auto c2 = makeCollective(t, sequence++, name);
          algorithm(c2, integers.data(), count, DataType::Int64, ReduceOp::Sum);
          const int rankSum = n * (n + 1) / 2;
          for (std::size_t i = 0; i < count; ++i) {
            expect(floats[i] == static_cast<float>(rankSum * static_cast<int>(i % 1024)),
                   std::string(name) + " float element " + std::to_string(i) + " of " + std::to_string(count));
            int64_t expected = 0;
            for (int r = 0; r < n; ++r)
              expected += static_cast<int64_t>(valueOf(r, i)) << 20;
            expect(integers[i] == expected,
                   std::string(name) + " int64 element " + std::to_string(i) + " of " + std::to_string(count));
          }
        }
      });
      checkNoFailures(failures);
    }
  }
}

}  // namespace

TEST_CASE("allgather direct exchange", "[collectives]") {
  checkAllgather(&allgatherDirect, "allgatherDirect");
}
TEST_CASE("allgather ring", "[collectives]") {
  checkAllgather(&allgatherRing, "allgatherRing");
}
TEST_CASE("allgather with size-based selection", "[collectives]") {
  checkAllgather(&allgather, "allgather");
}

TEST_CASE("allreduce direct exchange", "[collectives]") {
  checkAllreduce(&allreduceDirect, "allreduceDirect");
}
TEST_CASE("allreduce ring", "[collectives]") {
  checkAllreduce(&allreduceRing, "allreduceRing");
}

TEST_CASE("allgather into one buffer with the input inside it (in place)", "[collectives]") {
  auto failures = runRanks(3, [](int rank, UcxTransport& t) {
    std::vector<int32_t> buffer(3 * 5, -1);
    for (int i = 0; i < 5; ++i)
      buffer[rank * 5 + i] = valueOf(rank, i);
    std::vector<void*> pointers{buffer.data(), buffer.data() + 5, buffer.data() + 10};
    auto c = makeCollective(t, 0, "in-place allgather");
    allgatherRing(c, buffer.data() + rank * 5, pointers, 5 * sizeof(int32_t));
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 5; ++i)
        expect(buffer[r * 5 + i] == valueOf(r, i), "in-place block");
  });
  checkNoFailures(failures);
}

TEST_CASE("broadcast binomial from every root", "[collectives]") {
  for (int n = 1; n <= 8; ++n) {
    DYNAMIC_SECTION("broadcast with " << n << " ranks") {
      auto failures = runRanks(n, [&](int rank, UcxTransport& t) {
        uint32_t sequence = 0;
        for (int root = 0; root < n; ++root) {
          for (std::size_t count : kElementCounts) {
            std::vector<int32_t> buffer(count, -1);
            if (rank == root)
              for (std::size_t i = 0; i < count; ++i)
                buffer[i] = valueOf(root, i);
            auto c = makeCollective(t, sequence++, "broadcast");
            broadcastBinomial(c, buffer.data(), count * sizeof(int32_t), root);
            for (std::size_t i = 0; i < count; ++i)
              expect(buffer[i] == valueOf(root, i), "broadcast from root " + std::to_string(root));
          }
        }
      });
      checkNoFailures(failures);
    }
  }
}

TEST_CASE("barrier: no rank leaves before the last one enters", "[collectives]") {
  for (int n = 1; n <= 8; ++n) {
    DYNAMIC_SECTION("barrier with " << n << " ranks") {
      std::atomic<int> entered{0};
      auto failures = runRanks(n, [&](int rank, UcxTransport& t) {
        if (rank == n - 1)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        entered.fetch_add(1);
        auto c = makeCollective(t, 0, "barrier");
        barrierDissemination(c);
        expect(entered.load() == n, "left the barrier early");
      });
      checkNoFailures(failures);
    }
  }
}

TEST_CASE("ranks disagreeing about the size get a mismatch error, not wrong data", "[collectives][errors]") {
  auto failures = runRanks(2, [](int rank, UcxTransport& t) {
    std::size_t count = rank == 0 ? 100 : 50;
    std::vector<int32_t> input(count, rank);
    std::vector<int32_t> out0(count), out1(count);
    std::vector<void*> pointers{out0.data(), out1.data()};
    Collective c(t, 1, 0, Deadline::after(std::chrono::seconds(2)), "all_gather #0 on group 1");
    try {
      allgatherDirect(c, input.data(), pointers, count * sizeof(int32_t));
    } catch (const MismatchError&) {
      return;  // the receiving side must notice
    } catch (const TimeoutError&) {
      return;
    }
    throw std::runtime_error("size disagreement went unnoticed");
  });
  checkNoFailures(failures);
}
