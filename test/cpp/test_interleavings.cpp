// Interleavings, deterministically: all ranks' engines run on this one
// thread (Threading::CallersOnly), over the loopback transport with delayed
// and reordered delivery, and a seeded schedule decides which rank makes
// progress next. The same seed gives the same run; many seeds give many
// interleavings of many operations in flight, with groups that ranks use in
// different orders.

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "cluster.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;

namespace {

struct Rank {
  std::vector<std::unique_ptr<std::vector<int64_t>>> buffers;
  std::vector<int64_t> expected;
  std::vector<std::shared_ptr<Completion>> pending;
};

void submitAllreduce(Engine& engine, const std::shared_ptr<Group>& group, Rank& rank, std::size_t count, int64_t value,
                     int64_t expected) {
  auto& buffer = *rank.buffers.emplace_back(std::make_unique<std::vector<int64_t>>(count, value));
  rank.expected.push_back(expected);
  int64_t* data = buffer.data();
  uint64_t sequence = group->takeSequence();
  auto op = std::make_unique<Collective>(group, sequence, "all_reduce", std::chrono::seconds(600), [=](Collective& c) {
    return selectAllreduce(c, data, count, DataType::Int64, Reduction::Sum);
  });
  rank.pending.push_back(op->sharedCompletion());
  [[maybe_unused]] Engine::Lease none = engine.submit(std::move(op));
}

}  // namespace

TEST_CASE("interleavings: crossing groups and many collectives in flight, seeded schedules", "[interleavings]") {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    DYNAMIC_SECTION("seed " << seed) {
      constexpr int kRanks = 4;
      Cluster cluster(kRanks, Wire::Loopback, LoopbackOptions{.seed = seed, .maxDelay = 6, .reorder = true},
                      Engine::Threading::CallersOnly);
      auto world = cluster.makeGroup("world");
      auto even = cluster.makeGroup("even", {0, 2});
      auto odd = cluster.makeGroup("odd", {1, 3});
      auto upper = cluster.makeGroup("upper", {2, 3, 1});
      std::vector<Rank> ranks(kRanks);
      // Every rank issues its collectives of each group in the same order,
      // but interleaves the groups differently (rank r rotates by r), and
      // sizes cross the direct/ring threshold.
      const std::vector<std::size_t> counts{1, 4096, 5, 70000};
      for (int r = 0; r < kRanks; ++r) {
        for (std::size_t round = 0; round < counts.size(); ++round) {
          std::vector<int> order{0, 1, 2};
          std::rotate(order.begin(), order.begin() + (r + static_cast<int>(round)) % 3, order.end());
          for (int which : order) {
            if (which == 0) {
              submitAllreduce(cluster.engine(r), world[r], ranks[r], counts[round], r + 1, 1 + 2 + 3 + 4);
            } else if (which == 1) {
              auto& pair = r % 2 == 0 ? even : odd;
              submitAllreduce(cluster.engine(r), pair[r / 2], ranks[r], counts[round], 10 * (r + 1),
                              r % 2 == 0 ? 10 * (1 + 3) : 10 * (2 + 4));
            } else if (r != 0) {
              int position = r == 2 ? 0 : r == 3 ? 1 : 2;
              submitAllreduce(cluster.engine(r), upper[position], ranks[r], counts[round], 100 * (r + 1),
                              100 * (2 + 3 + 4));
            }
          }
        }
      }
      std::mt19937_64 schedule(seed);
      auto allDone = [&] {
        for (auto& rank : ranks) {
          for (auto& completion : rank.pending) {
            if (!completion->done()) {
              return false;
            }
          }
        }
        return true;
      };
      long steps = 0;
      while (!allDone() && steps < 5'000'000) {
        cluster.engine(static_cast<int>(schedule() % kRanks)).pollOnce();
        ++steps;
      }
      REQUIRE(allDone());
      for (int r = 0; r < kRanks; ++r) {
        for (auto& completion : ranks[r].pending) {
          CHECK(completion->error() == nullptr);
        }
      }
      for (int r = 0; r < kRanks; ++r) {
        for (std::size_t i = 0; i < ranks[r].buffers.size(); ++i) {
          const auto& buffer = *ranks[r].buffers[i];
          int64_t want = ranks[r].expected[i];
          CHECK(std::all_of(buffer.begin(), buffer.end(), [&](int64_t v) { return v == want; }));
        }
      }
    }
  }
}
