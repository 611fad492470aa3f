// Every algorithm, ranks as threads: over the loopback transport at group
// sizes 1-16 with delayed and reordered delivery, and over real UCX at 1-8.
// Each rank submits all of a test's collectives before waiting for any, so
// several are in flight per group. Inputs are integer-valued, so every
// summation order gives the exact same result.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <vector>

#include "cluster.hpp"
#include "collectives/staging.hpp"
#include "common/error.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;

namespace {

using AllgatherFn = Task (*)(Collective&, const void*, std::span<void* const>, std::size_t);
using AllreduceFn = Task (*)(Collective&, void*, std::size_t, DataType, Reduction);

int32_t valueOf(int rank, std::size_t index) {
  return static_cast<int32_t>(rank * 1000003 + index * 7);
}

// 2^19 + 1 and 300,001: ring blocks that straddle chunk boundaries
// differently on different ranks; 3 and 1000 below and around the group
// sizes (empty blocks).
const std::vector<std::size_t> kElementCounts{0, 1, 3, 1000, 65536 + 5, 300001, (1 << 19) + 1};

// Large counts only where they stay quick: loopback copies every byte.
bool affordable(const Setup& setup, std::size_t count) {
  return count * static_cast<std::size_t>(setup.ranks) <= (std::size_t{4} << 20);
}

void checkAllgather(AllgatherFn algorithm, const char* name) {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION(name << " with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      Cluster cluster(n, setup.wire, disturbed(n));
      auto group = cluster.makeGroup("g");
      auto failures = runRanks(n, [&](int rank) {
        std::deque<std::vector<int32_t>> inputs;
        std::deque<std::vector<std::vector<int32_t>>> outputs;
        std::deque<std::vector<void*>> pointers;
        std::vector<Submitted> pending;
        for (std::size_t count : kElementCounts) {
          if (!affordable(setup, count)) {
            continue;
          }
          auto& input = inputs.emplace_back(count);
          for (std::size_t i = 0; i < count; ++i) {
            input[i] = valueOf(rank, i);
          }
          auto& out = outputs.emplace_back(n, std::vector<int32_t>(count, -1));
          auto& blocks = pointers.emplace_back();
          for (auto& block : out) {
            blocks.push_back(block.data());
          }
          const void* in = input.data();
          std::span<void* const> targets(blocks);
          pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, [=](Collective& c) {
            return algorithm(c, in, targets, count * sizeof(int32_t));
          }));
        }
        for (auto& op : pending) {
          op.wait();
        }
        for (const auto& out : outputs) {
          for (int r = 0; r < n; ++r) {
            for (std::size_t i = 0; i < out[r].size(); ++i) {
              expect(out[r][i] == valueOf(r, i), [&] {
                return std::string(name) + ": block " + std::to_string(r) + " element " + std::to_string(i) + " of " +
                       std::to_string(out[r].size());
              });
            }
          }
        }
      });
      checkNoFailures(failures);
    }
  }
}

void checkAllreduce(AllreduceFn algorithm, const char* name) {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION(name << " with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      Cluster cluster(n, setup.wire, disturbed(n + 100));
      auto group = cluster.makeGroup("g");
      auto failures = runRanks(n, [&](int rank) {
        std::deque<std::vector<float>> floats;
        std::deque<std::vector<int64_t>> integers;
        std::vector<Submitted> pending;
        for (std::size_t count : kElementCounts) {
          if (!affordable(setup, count)) {
            continue;
          }
          auto& f = floats.emplace_back(count);
          auto& i64 = integers.emplace_back(count);
          for (std::size_t i = 0; i < count; ++i) {
            f[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 1024));
            i64[i] = static_cast<int64_t>(valueOf(rank, i)) << 20;
          }
          float* fp = f.data();
          int64_t* ip = i64.data();
          pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, [=](Collective& c) {
            return algorithm(c, fp, count, DataType::Float32, Reduction::Sum);
          }));
          pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, [=](Collective& c) {
            return algorithm(c, ip, count, DataType::Int64, Reduction::Sum);
          }));
        }
        for (auto& op : pending) {
          op.wait();
        }
        const int rankSum = n * (n + 1) / 2;
        for (std::size_t k = 0; k < floats.size(); ++k) {
          for (std::size_t i = 0; i < floats[k].size(); ++i) {
            expect(floats[k][i] == static_cast<float>(rankSum * static_cast<int>(i % 1024)), [&] {
              return std::string(name) + " float element " + std::to_string(i) + " of " +
                     std::to_string(floats[k].size());
            });
            int64_t expected = 0;
            for (int r = 0; r < n; ++r) {
              expected += static_cast<int64_t>(valueOf(r, i)) << 20;
            }
            expect(integers[k][i] == expected,
                   [&] { return std::string(name) + " int64 element " + std::to_string(i); });
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
  checkAllgather(&selectAllgather, "selectAllgather");
}
TEST_CASE("allreduce direct exchange", "[collectives]") {
  checkAllreduce(&allreduceDirect, "allreduceDirect");
}
TEST_CASE("allreduce recursive doubling", "[collectives]") {
  checkAllreduce(&allreduceRecursiveDoubling, "allreduceRecursiveDoubling");
}
TEST_CASE("allreduce recursive doubling: every rank ends with the same bits, also where sums round", "[collectives]") {
  // Values whose sums round differently when grouped differently: the
  // result differs in its last bits from the direct exchange's (which adds
  // in rank order), but every rank must hold the same bits, or a model's
  // replicas drift apart.
  for (int n : {3, 5, 6, 8, 13}) {
    INFO(n << " ranks");
    Cluster cluster(n, Wire::Loopback, disturbed(n + 300));
    auto group = cluster.makeGroup("g");
    const std::size_t count = 257;
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n), std::vector<float>(count));
    auto failures = runRanks(n, [&](int rank) {
      std::vector<float>& data = results[static_cast<std::size_t>(rank)];
      for (std::size_t i = 0; i < count; ++i) {
        data[i] = 1.0f / static_cast<float>(3 + rank * 7 + static_cast<int>(i)) * (rank % 2 == 0 ? 1e6f : 1e-3f);
      }
      float* pointer = data.data();
      submitCollective(cluster.engine(rank), group[rank], "allreduceRecursiveDoubling", [=](Collective& c) {
        return allreduceRecursiveDoubling(c, pointer, count, DataType::Float32, Reduction::Sum);
      }).wait();
    });
    checkNoFailures(failures);
    for (int rank = 1; rank < n; ++rank) {
      CHECK(std::memcmp(results[0].data(), results[static_cast<std::size_t>(rank)].data(), count * sizeof(float)) == 0);
    }
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0;
      for (int rank = 0; rank < n; ++rank) {
        exact += 1.0 / (3 + rank * 7 + static_cast<int>(i)) * (rank % 2 == 0 ? 1e6 : 1e-3);
      }
      CHECK(std::abs(results[0][i] - exact) <= 1e-5 * std::abs(exact));
    }
  }
}
// The staging segments this process holds (memfds named ucxcoll-staging).
int stagingSegmentsOfThisProcess() {
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    found += std::filesystem::read_symlink(entry.path(), error).string().find("ucxcoll-staging") != std::string::npos;
  }
  return found;
}

// Sets the staging policy for one test and restores it. Staging starts at
// 0 bytes here, so that the test sizes (up to 4 MiB) are staged.
class StagingPolicyScope {
 public:
  explicit StagingPolicyScope(StagingPolicy policy) { setStagingPolicyForTests(policy, 0); }
  ~StagingPolicyScope() { setStagingPolicyForTests(StagingPolicy::AsConfigured); }
};

TEST_CASE("allreduce ring stages large messages through shared memory", "[collectives]") {
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
  const std::size_t count = stagingMinBytes() / sizeof(float);
  const std::size_t leasesBefore = stagingLeasesHandedOut();
  Cluster cluster(2, Wire::Ucx, disturbed(7));
  auto group = cluster.makeGroup("g");
  auto failures = runRanks(2, [&](int rank) {
    std::vector<float> data(count, static_cast<float>(rank + 1));
    float* pointer = data.data();
    submitCollective(cluster.engine(rank), group[rank], "allreduceRing", [=](Collective& c) {
      return allreduceRing(c, pointer, count, DataType::Float32, Reduction::Sum);
    }).wait();
    expect(std::all_of(data.begin(), data.end(), [](float x) { return x == 3.0f; }), "2-rank staged sum");
  });
  checkNoFailures(failures);
  CHECK(stagingLeasesHandedOut() - leasesBefore == 2);  // one per rank's outgoing link
  CHECK(stagingSegmentsOfThisProcess() >= 2);           // memfds, kept for reuse
}

TEST_CASE("staging: a segment given back is reused, an abandoned one never again", "[collectives]") {
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
  StagingOffer first;
  {
    StagingLease lease = leaseStaging(0);
    REQUIRE(lease);
    first = lease.offer();
  }
  {
    StagingLease lease = leaseStaging(0);
    CHECK(lease.offer().inode == first.inode);  // the pool hands back the last one given
    lease.abandon();
  }
  StagingLease lease = leaseStaging(0);
  CHECK(lease.offer().inode != first.inode);
}

TEST_CASE("allreduce ring", "[collectives]") {
  // Ranks are threads of one process, so every link can be staged
  // through shared memory (staging.hpp).
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  checkAllreduce(&allreduceRing, "allreduceRing");
}

TEST_CASE("allreduce ring over plain messages only", "[collectives]") {
  StagingPolicyScope scope(StagingPolicy::Never);
  checkAllreduce(&allreduceRing, "allreduceRing unstaged");
}

TEST_CASE("allreduce ring with staged and plain links mixed", "[collectives]") {
  // Only even ranks offer staging: each rank's two links differ wherever
  // one neighbour is odd, and odd group sizes put two even ranks side by side.
  StagingPolicyScope scope(StagingPolicy::EvenRanksOnly);
  checkAllreduce(&allreduceRing, "allreduceRing mixed");
}

using BroadcastFn = Task (*)(Collective&, void*, std::size_t, int);

void checkBroadcast(BroadcastFn algorithm, const char* name) {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION(name << " with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      Cluster cluster(n, setup.wire, disturbed(n + 200));
      auto group = cluster.makeGroup("g");
      auto failures = runRanks(n, [&](int rank) {
        std::deque<std::vector<int32_t>> buffers;
        std::vector<std::pair<int, std::vector<int32_t>*>> expectations;
        std::vector<Submitted> pending;
        for (int root = 0; root < n; ++root) {
          for (std::size_t count : kElementCounts) {
            if (!affordable(setup, count) || (count > 1000 && root % 4 != 1 % n)) {
              continue;
            }
            auto& buffer = buffers.emplace_back(count, -1);
            if (rank == root) {
              for (std::size_t i = 0; i < count; ++i) {
                buffer[i] = valueOf(root, i);
              }
            }
            expectations.emplace_back(root, &buffer);
            int32_t* data = buffer.data();
            pending.push_back(submitCollective(cluster.engine(rank), group[rank], "broadcast", [=](Collective& c) {
              return algorithm(c, data, count * sizeof(int32_t), root);
            }));
          }
        }
        for (auto& op : pending) {
          op.wait();
        }
        for (auto& [root, buffer] : expectations) {
          for (std::size_t i = 0; i < buffer->size(); ++i) {
            expect((*buffer)[i] == valueOf(root, i),
                   [&] { return std::string(name) + " from root " + std::to_string(root); });
          }
        }
      });
      checkNoFailures(failures);
    }
  }
}

TEST_CASE("broadcast binomial from every root", "[collectives]") {
  checkBroadcast(&broadcastBinomial, "broadcastBinomial");
}

TEST_CASE("broadcast pipelined chain from every root, links staged, plain and mixed", "[collectives]") {
  // Staging from 0 bytes, so that every test size stages where it can;
  // EvenRanksOnly leaves a rank's two links different wherever a
  // neighbour is odd, Never leaves every link plain.
  for (StagingPolicy policy : {StagingPolicy::AsConfigured, StagingPolicy::Never, StagingPolicy::EvenRanksOnly}) {
    StagingPolicyScope scope(policy);
    checkBroadcast(&broadcastPipelined, "broadcastPipelined");
  }
}

TEST_CASE("allgather chunked ring, links staged and mixed", "[collectives]") {
  for (StagingPolicy policy : {StagingPolicy::AsConfigured, StagingPolicy::EvenRanksOnly}) {
    StagingPolicyScope scope(policy);
    checkAllgather(&allgatherChunkedRing, "allgatherChunkedRing");
  }
}

TEST_CASE("barrier: no rank leaves before the last one enters", "[collectives]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("barrier with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      Cluster cluster(n, setup.wire, disturbed(n + 300));
      auto group = cluster.makeGroup("g");
      std::atomic<int> entered{0};
      auto failures = runRanks(n, [&](int rank) {
        if (rank == n - 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        entered.fetch_add(1);
        submitCollective(cluster.engine(rank), group[rank], "barrier", &barrierDissemination).wait();
        expect(entered.load() == n, "left the barrier early");
      });
      checkNoFailures(failures);
    }
  }
}

TEST_CASE("allgather into one buffer with the input inside it (in place)", "[collectives]") {
  Cluster cluster(3, Wire::Ucx);
  auto group = cluster.makeGroup("g");
  auto failures = runRanks(3, [&](int rank) {
    std::vector<int32_t> buffer(3 * 5, -1);
    for (int i = 0; i < 5; ++i)
      buffer[rank * 5 + i] = valueOf(rank, i);
    std::vector<void*> pointers{buffer.data(), buffer.data() + 5, buffer.data() + 10};
    int32_t* mine = buffer.data() + rank * 5;
    submitCollective(cluster.engine(rank), group[rank], "all_gather", [&](Collective& c) {
      return allgatherRing(c, mine, pointers, 5 * sizeof(int32_t));
    }).wait();
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 5; ++i)
        expect(buffer[r * 5 + i] == valueOf(r, i), "in-place block");
  });
  checkNoFailures(failures);
}
