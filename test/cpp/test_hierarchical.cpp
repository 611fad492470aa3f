// Host topology and the hierarchical all-reduce, ranks as threads placed on
// simulated hosts (Cluster::makeGroup's `hosts`): ranks on different hosts
// reach each other through the network transport alone, as across real
// hosts. Results are checked element by element against the sum or maximum
// over the ranks; inputs are integer-valued, so any order of summation
// gives the exact result.

#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cluster.hpp"
#include "collectives/staging.hpp"
#include "common/config.hpp"
#include "common/error.hpp"
#include "engine/host_topology.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;
using namespace std::chrono_literals;

TEST_CASE("host topology: hosts in order of their first rank, local ranks, counterparts", "[hierarchical]") {
  // Hosts named 7 and 3, interleaved: host 7 is host 0 (rank 0 is on it).
  const std::vector<int> interleaved{7, 3, 7, 3, 7, 3};
  const HostTopology rank3(interleaved, 3);
  CHECK(rank3.hosts() == 2);
  CHECK(rank3.regular());
  CHECK(rank3.hierarchical());
  CHECK(rank3.hostIndex() == 1);
  CHECK(rank3.localRanks() == std::vector<int>{1, 3, 5});
  CHECK(rank3.localIndex() == 1);
  CHECK(rank3.counterparts() == std::vector<int>{2, 3});
  const HostTopology rank4(interleaved, 4);
  CHECK(rank4.localRanks() == std::vector<int>{0, 2, 4});
  CHECK(rank4.counterparts() == std::vector<int>{4, 5});

  const HostTopology oneHost({0, 0, 0}, 1);
  CHECK(oneHost.hosts() == 1);
  CHECK_FALSE(oneHost.hierarchical());
  CHECK(oneHost.counterparts() == std::vector<int>{1});

  const HostTopology onePerHost({0, 1, 2}, 2);
  CHECK(onePerHost.hosts() == 3);
  CHECK(onePerHost.regular());
  CHECK_FALSE(onePerHost.hierarchical());

  const HostTopology uneven({0, 0, 1}, 0);
  CHECK_FALSE(uneven.regular());
  CHECK_FALSE(uneven.hierarchical());
  CHECK(uneven.counterparts().empty());

  CHECK_THROWS_AS(HostTopology({0, 0}, 2), std::out_of_range);
}

namespace {

int32_t valueOf(int rank, std::size_t index) {
  return static_cast<int32_t>(rank * 1000003 + index * 7);
}

// Host layouts: 2x2, 2x3, 3x2, 2x4, and two hosts whose ranks interleave.
const std::vector<std::vector<int>> kLayouts{
    {0, 0, 1, 1}, {0, 0, 0, 1, 1, 1}, {0, 0, 1, 1, 2, 2}, {0, 0, 0, 0, 1, 1, 1, 1}, {0, 1, 0, 1}};

// Over UCX each simulated process makes its own context, seconds per
// group: two layouts there, 2x2 and 3 hosts x 2, the rest over loopback.
std::vector<std::vector<int>> layoutsFor(Wire wire) {
  if (wire == Wire::Ucx || wire == Wire::SharedMemoryUcx) {
    return {{0, 0, 1, 1}, {0, 0, 1, 1, 2, 2}};
  }
  return kLayouts;
}

std::string layoutName(const std::vector<int>& hosts) {
  std::string name;
  for (int host : hosts) {
    name += std::to_string(host);
  }
  return name;
}

// 0 and 1 leave parts empty; 1001 and 300001 cut uneven parts; 1 << 19
// even ones of 1-2 MiB (staged or ringed inside a host).
const std::vector<std::size_t> kCounts{0, 1, 5, 1001, 300001, std::size_t{1} << 19};

using AllreduceFn = Task (*)(Collective&, void*, std::size_t, DataType, Reduction);

// Every layout over `wires`: float SUM, int64 SUM and int32 MAX at every
// count, all submitted before any is waited for.
void checkAcrossHosts(AllreduceFn algorithm, const char* name, std::initializer_list<Wire> wires) {
  for (Wire wire : wires) {
    for (const auto& hosts : layoutsFor(wire)) {
      DYNAMIC_SECTION(name << " on hosts " << layoutName(hosts) << " over " << wireName(wire)) {
        const int n = static_cast<int>(hosts.size());
        Cluster cluster(n, wire, disturbed(n + 300));
        auto group = cluster.makeGroup("g", {}, {}, hosts);
        auto failures = runRanks(n, [&](int rank) {
          std::deque<std::vector<float>> floats;
          std::deque<std::vector<int64_t>> sums;
          std::deque<std::vector<int32_t>> maxima;
          std::vector<Submitted> pending;
          for (std::size_t count : kCounts) {
            auto& f = floats.emplace_back(count);
            auto& s = sums.emplace_back(count);
            auto& m = maxima.emplace_back(count);
            for (std::size_t i = 0; i < count; ++i) {
              f[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 1024));
              s[i] = static_cast<int64_t>(valueOf(rank, i)) << 20;
              m[i] = valueOf((rank + static_cast<int>(i)) % n, i);
            }
            float* fp = f.data();
            int64_t* sp = s.data();
            int32_t* mp = m.data();
            auto submit = [&](auto body) {
              pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, body));
            };
            submit([=](Collective& c) { return algorithm(c, fp, count, DataType::Float32, Reduction::Sum); });
            submit([=](Collective& c) { return algorithm(c, sp, count, DataType::Int64, Reduction::Sum); });
            submit([=](Collective& c) { return algorithm(c, mp, count, DataType::Int32, Reduction::Max); });
          }
          for (auto& op : pending) {
            op.wait();
          }
          const int rankSum = n * (n + 1) / 2;
          for (std::size_t k = 0; k < kCounts.size(); ++k) {
            for (std::size_t i = 0; i < kCounts[k]; ++i) {
              expect(floats[k][i] == static_cast<float>(rankSum * static_cast<int>(i % 1024)),
                     [&] { return std::string(name) + " float element " + std::to_string(i); });
              int64_t sum = 0;
              int32_t max = valueOf(0, i);
              for (int r = 0; r < n; ++r) {
                sum += static_cast<int64_t>(valueOf(r, i)) << 20;
                max = std::max(max, valueOf(r, i));
              }
              expect(sums[k][i] == sum, [&] { return std::string(name) + " int64 element " + std::to_string(i); });
              expect(maxima[k][i] == max,
                     [&] { return std::string(name) + " int32 max element " + std::to_string(i); });
            }
          }
        });
        checkNoFailures(failures);
      }
    }
  }
}

// Sets the staging policy for one test and restores it; staging from 0
// bytes, so that the phases inside a host stage what they can.
class StagingPolicyScope {
 public:
  explicit StagingPolicyScope(StagingPolicy policy) { setStagingPolicyForTests(policy, 0); }
  ~StagingPolicyScope() { setStagingPolicyForTests(StagingPolicy::AsConfigured); }
};

}  // namespace

TEST_CASE("allreduce hierarchical on every host layout, parts even and uneven", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  checkAcrossHosts(&allreduceHierarchical, "allreduceHierarchical", {Wire::Loopback, Wire::SharedMemory});
}

TEST_CASE("allreduce hierarchical over plain messages only, and over UCX", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::Never);
  checkAcrossHosts(&allreduceHierarchical, "allreduceHierarchical unstaged", {Wire::SharedMemoryUcx});
}

TEST_CASE("allreduce selection across hosts: hierarchical where it can run, flat elsewhere", "[hierarchical]") {
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
  checkAcrossHosts(&selectAllreduce, "selectAllreduce", {Wire::SharedMemory});
  // Hosts with different numbers of ranks, and one rank per host: the flat
  // algorithms, with the same results.
  for (const std::vector<int>& hosts : {std::vector<int>{0, 0, 1}, std::vector<int>{0, 1, 2}}) {
    DYNAMIC_SECTION("selectAllreduce on hosts " << layoutName(hosts)) {
      const int n = static_cast<int>(hosts.size());
      Cluster cluster(n, Wire::SharedMemory);
      auto group = cluster.makeGroup("g", {}, {}, hosts);
      auto failures = runRanks(n, [&](int rank) {
        std::vector<int64_t> data(300001, rank + 1);
        int64_t* pointer = data.data();
        submitCollective(cluster.engine(rank), group[rank], "selectAllreduce", [=](Collective& c) {
          return selectAllreduce(c, pointer, 300001, DataType::Int64, Reduction::Sum);
        }).wait();
        expect(std::all_of(data.begin(), data.end(), [&](int64_t x) { return x == n * (n + 1) / 2; }),
               "flat all_reduce on an uneven layout");
      });
      checkNoFailures(failures);
    }
  }
}

namespace {

using ReduceScatterFn = Task (*)(Collective&, std::span<const void* const>, void*, std::size_t, DataType, Reduction);

// Rank p's output is block p of every rank's input, reduced: int64 SUM and
// int32 MAX, every layout, block sizes from empty to staged.
void checkReduceScatterAcrossHosts(ReduceScatterFn algorithm, const char* name, std::initializer_list<Wire> wires) {
  const std::vector<std::size_t> counts{0, 1, 5, 1001, 65536 + 3};
  for (Wire wire : wires) {
    for (const auto& hosts : layoutsFor(wire)) {
      DYNAMIC_SECTION(name << " on hosts " << layoutName(hosts) << " over " << wireName(wire)) {
        const int n = static_cast<int>(hosts.size());
        Cluster cluster(n, wire, disturbed(n + 400));
        auto group = cluster.makeGroup("g", {}, {}, hosts);
        auto failures = runRanks(n, [&](int rank) {
          std::deque<std::vector<int64_t>> sumInputs, sums;
          std::deque<std::vector<int32_t>> maxInputs, maxima;
          std::deque<std::vector<const void*>> blockLists;
          std::vector<Submitted> pending;
          auto blocksOf = [&](const auto& input, std::size_t count) -> std::span<const void* const> {
            auto& blocks = blockLists.emplace_back();
            for (int p = 0; p < n; ++p) {
              blocks.push_back(input.data() + static_cast<std::size_t>(p) * count);
            }
            return blocks;
          };
          for (std::size_t count : counts) {
            auto& s = sumInputs.emplace_back(count * static_cast<std::size_t>(n));
            auto& m = maxInputs.emplace_back(count * static_cast<std::size_t>(n));
            for (std::size_t i = 0; i < s.size(); ++i) {
              s[i] = static_cast<int64_t>(valueOf(rank, i)) << 20;
              m[i] = valueOf((rank + static_cast<int>(i)) % n, i);
            }
            int64_t* sumOut = sums.emplace_back(count, -1).data();
            int32_t* maxOut = maxima.emplace_back(count, -1).data();
            auto sumBlocks = blocksOf(s, count);
            auto maxBlocks = blocksOf(m, count);
            pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, [=](Collective& c) {
              return algorithm(c, sumBlocks, sumOut, count, DataType::Int64, Reduction::Sum);
            }));
            pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, [=](Collective& c) {
              return algorithm(c, maxBlocks, maxOut, count, DataType::Int32, Reduction::Max);
            }));
          }
          for (auto& op : pending) {
            op.wait();
          }
          for (std::size_t k = 0; k < counts.size(); ++k) {
            for (std::size_t i = 0; i < counts[k]; ++i) {
              const std::size_t at = static_cast<std::size_t>(rank) * counts[k] + i;
              int64_t sum = 0;
              int32_t max = valueOf(0, at);
              for (int r = 0; r < n; ++r) {
                sum += static_cast<int64_t>(valueOf(r, at)) << 20;
                max = std::max(max, valueOf(r, at));
              }
              expect(sums[k][i] == sum, [&] { return std::string(name) + " int64 element " + std::to_string(i); });
              expect(maxima[k][i] == max,
                     [&] { return std::string(name) + " int32 max element " + std::to_string(i); });
            }
          }
        });
        checkNoFailures(failures);
      }
    }
  }
}

}  // namespace

TEST_CASE("reduce_scatter hierarchical on every host layout", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  checkReduceScatterAcrossHosts(&reduceScatterHierarchical, "reduceScatterHierarchical",
                                {Wire::Loopback, Wire::SharedMemory});
}

TEST_CASE("reduce_scatter hierarchical over plain messages only, and over UCX", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::Never);
  checkReduceScatterAcrossHosts(&reduceScatterHierarchical, "reduceScatterHierarchical unstaged",
                                {Wire::SharedMemoryUcx});
}

TEST_CASE("reduce_scatter selection across hosts (the flat algorithms unless asked)", "[hierarchical]") {
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
  checkReduceScatterAcrossHosts(&selectReduceScatter, "selectReduceScatter", {Wire::SharedMemory});
}

namespace {

Collective::Body allreduceBody(AllreduceFn algorithm, std::vector<float>& data, std::size_t count,
                               Reduction reduction = Reduction::Sum) {
  float* pointer = data.data();
  return [=](Collective& c) { return algorithm(c, pointer, count, DataType::Float32, reduction); };
}

}  // namespace

TEST_CASE("hierarchical all_reduce: ranks that disagree all raise", "[hierarchical][disagreement]") {
  const std::vector<int> hosts{0, 0, 1, 1};
  std::deque<std::vector<float>> data;
  for (int r = 0; r < 4; ++r) {
    data.emplace_back(4096, 1.0f);
  }
  SECTION("one rank runs the flat ring") {
    auto errors = runDisagreeing(
        Wire::SharedMemory,
        {allreduceBody(&allreduceHierarchical, data[0], 4096), allreduceBody(&allreduceHierarchical, data[1], 4096),
         allreduceBody(&allreduceHierarchical, data[2], 4096), allreduceBody(&allreduceRing, data[3], 4096)},
        hosts);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << errors[r]);
      CHECK_THAT(errors[r], Catch::Matchers::Contains("ranks disagree about collective #0"));
    }
    // Its ring neighbour (rank 0) sees its message and names both.
    CHECK_THAT(errors[0], Catch::Matchers::Contains("this rank runs all_reduce (SUM, hierarchical algorithm), but a "
                                                    "peer sent a message of all_reduce (SUM, ring algorithm)"));
  }
  SECTION("one rank asks for MAX") {
    auto errors = runDisagreeing(
        Wire::SharedMemory,
        {allreduceBody(&allreduceHierarchical, data[0], 4096),
         allreduceBody(&allreduceHierarchical, data[1], 4096, Reduction::Max),
         allreduceBody(&allreduceHierarchical, data[2], 4096), allreduceBody(&allreduceHierarchical, data[3], 4096)},
        hosts);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << errors[r]);
      CHECK_THAT(errors[r], Catch::Matchers::Contains("ranks disagree"));
    }
    CHECK_THAT(errors[0], Catch::Matchers::Contains("phase 1: reduce_scatter (SUM, pairwise algorithm)"));
    CHECK_THAT(errors[0], Catch::Matchers::Contains("reduce_scatter (MAX, pairwise algorithm)"));
  }
  SECTION("one rank has more elements") {
    auto errors = runDisagreeing(
        Wire::SharedMemory,
        {allreduceBody(&allreduceHierarchical, data[0], 4096), allreduceBody(&allreduceHierarchical, data[1], 4096),
         allreduceBody(&allreduceHierarchical, data[2], 4096), allreduceBody(&allreduceHierarchical, data[3], 4000)},
        hosts);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << errors[r]);
      // The host that sees the sizes names them; the others learn from its
      // notice that the ranks disagree.
      CHECK_THAT(errors[r], Catch::Matchers::Contains("disagree"));
    }
    CHECK_THAT(errors[3], Catch::Matchers::Contains("(ranks disagree about the tensor sizes)"));
  }
}

namespace {

// Runs `rank` on every layout over `wires` (a fresh cluster for each), and
// fails on any rank's failure.
void forEachLayout(const char* name, std::initializer_list<Wire> wires, int seed,
                   const std::function<void(Cluster&, const std::vector<std::shared_ptr<Group>>&, int, int)>& rank) {
  for (Wire wire : wires) {
    for (const auto& hosts : layoutsFor(wire)) {
      DYNAMIC_SECTION(name << " on hosts " << layoutName(hosts) << " over " << wireName(wire)) {
        const int n = static_cast<int>(hosts.size());
        Cluster cluster(n, wire, disturbed(n + seed));
        auto group = cluster.makeGroup("g", {}, {}, hosts);
        checkNoFailures(runRanks(n, [&](int r) { rank(cluster, group, n, r); }));
      }
    }
  }
}

uint8_t byteOf(int rank, std::size_t index) {
  return static_cast<uint8_t>(rank * 37 + index * 11 + index / 251);
}

// Block sizes from empty to staged (bytes).
const std::vector<std::size_t> kBlockBytes{0, 1, 5, 1001, 300001};

using AllgatherFn = Task (*)(Collective&, const void*, std::span<void* const>, std::size_t);

// Every rank's block, in order, on every rank: into one buffer (as
// all_gather_into_tensor) and in place (each rank's input is its slot).
void checkAllgatherAcrossHosts(AllgatherFn algorithm, const char* name, std::initializer_list<Wire> wires) {
  forEachLayout(name, wires, 500, [&](Cluster& cluster, const auto& group, int n, int rank) {
    std::deque<std::vector<uint8_t>> inputs, outputs;
    std::deque<std::vector<void*>> slotLists;
    std::vector<Submitted> pending;
    for (std::size_t bytes : kBlockBytes) {
      for (bool inPlace : {false, true}) {
        auto& input = inputs.emplace_back(bytes);
        auto& output = outputs.emplace_back(bytes * static_cast<std::size_t>(n) + 1, 0xEE);
        auto& slots = slotLists.emplace_back();
        for (int p = 0; p < n; ++p) {
          slots.push_back(output.data() + static_cast<std::size_t>(p) * bytes);
        }
        uint8_t* own = inPlace ? output.data() + static_cast<std::size_t>(rank) * bytes : input.data();
        for (std::size_t i = 0; i < bytes; ++i) {
          own[i] = byteOf(rank, i);
        }
        std::span<void* const> outs = slots;
        pending.push_back(submitCollective(cluster.engine(rank), group[rank], name,
                                           [=](Collective& c) { return algorithm(c, own, outs, bytes); }));
      }
    }
    for (auto& op : pending) {
      op.wait();
    }
    std::size_t k = 0;
    for (std::size_t bytes : kBlockBytes) {
      for (int twice = 0; twice < 2; ++twice, ++k) {
        const auto& output = outputs[k];
        for (int p = 0; p < n; ++p) {
          for (std::size_t i = 0; i < bytes; ++i) {
            expect(output[static_cast<std::size_t>(p) * bytes + i] == byteOf(p, i), [&] {
              return std::string(name) + ": " + std::to_string(bytes) + " bytes, rank " + std::to_string(p) +
                     "'s byte " + std::to_string(i);
            });
          }
        }
        expect(output.back() == 0xEE, std::string(name) + ": wrote past the output");
      }
    }
  });
}

using BroadcastFn = Task (*)(Collective&, void*, std::size_t, int);

// From every root, small and staged sizes.
void checkBroadcastAcrossHosts(BroadcastFn algorithm, const char* name, std::initializer_list<Wire> wires) {
  forEachLayout(name, wires, 600, [&](Cluster& cluster, const auto& group, int n, int rank) {
    std::deque<std::vector<uint8_t>> buffers;
    std::vector<Submitted> pending;
    for (int root = 0; root < n; ++root) {
      for (std::size_t bytes : {std::size_t{0}, std::size_t{7}, std::size_t{300001}}) {
        auto& buffer = buffers.emplace_back(bytes + 1, 0xEE);
        for (std::size_t i = 0; i < bytes; ++i) {
          buffer[i] = rank == root ? byteOf(root, i) : 0;
        }
        uint8_t* data = buffer.data();
        pending.push_back(submitCollective(cluster.engine(rank), group[rank], name,
                                           [=](Collective& c) { return algorithm(c, data, bytes, root); }));
      }
    }
    for (auto& op : pending) {
      op.wait();
    }
    std::size_t k = 0;
    for (int root = 0; root < n; ++root) {
      for (std::size_t bytes : {std::size_t{0}, std::size_t{7}, std::size_t{300001}}) {
        const auto& buffer = buffers[k++];
        for (std::size_t i = 0; i < bytes; ++i) {
          expect(buffer[i] == byteOf(root, i), [&] {
            return std::string(name) + " from root " + std::to_string(root) + ": byte " + std::to_string(i);
          });
        }
        expect(buffer.back() == 0xEE, std::string(name) + ": wrote past the buffer");
      }
    }
  });
}

using ReduceFn = Task (*)(Collective&, const void*, void*, std::size_t, DataType, Reduction, int);

// To every root: int64 SUM into a separate output, int32 MAX in place;
// other ranks' outputs untouched.
void checkReduceAcrossHosts(ReduceFn algorithm, const char* name, std::initializer_list<Wire> wires) {
  const std::vector<std::size_t> counts{0, 1, 1001, 65536 + 3};
  forEachLayout(name, wires, 700, [&](Cluster& cluster, const auto& group, int n, int rank) {
    std::deque<std::vector<int64_t>> sumInputs, sums;
    std::deque<std::vector<int32_t>> maxima;
    std::vector<Submitted> pending;
    for (int root = 0; root < n; ++root) {
      for (std::size_t count : counts) {
        auto& in = sumInputs.emplace_back(count);
        auto& m = maxima.emplace_back(count);
        for (std::size_t i = 0; i < count; ++i) {
          in[i] = static_cast<int64_t>(valueOf(rank, i)) << 20;
          m[i] = valueOf((rank + static_cast<int>(i)) % n, i);
        }
        const int64_t* input = in.data();
        int64_t* sumOut = sums.emplace_back(count, -1).data();
        int32_t* maxBuffer = m.data();
        pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, [=](Collective& c) {
          return algorithm(c, input, sumOut, count, DataType::Int64, Reduction::Sum, root);
        }));
        pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, [=](Collective& c) {
          return algorithm(c, maxBuffer, maxBuffer, count, DataType::Int32, Reduction::Max, root);
        }));
      }
    }
    for (auto& op : pending) {
      op.wait();
    }
    std::size_t k = 0;
    for (int root = 0; root < n; ++root) {
      for (std::size_t count : counts) {
        for (std::size_t i = 0; i < count; ++i) {
          int64_t sum = 0;
          int32_t max = valueOf(0, i);
          for (int r = 0; r < n; ++r) {
            sum += static_cast<int64_t>(valueOf(r, i)) << 20;
            max = std::max(max, valueOf(r, i));
          }
          const auto what = [&] {
            return std::string(name) + " to root " + std::to_string(root) + ": element " + std::to_string(i);
          };
          if (rank == root) {
            expect(sums[k][i] == sum, what);
            expect(maxima[k][i] == max, what);
          } else {
            expect(sums[k][i] == -1, [&] { return what() + " of a non-root's output was written"; });
          }
        }
        ++k;
      }
    }
  });
}

using AlltoallFn = Task (*)(Collective&, std::span<const Block>, std::span<const Block>);

// Rank p's block q lands on rank q as block p, every layout, block sizes
// from empty to 300001 bytes, blocks in one buffer and in separate ones.
void checkAlltoallAcrossHosts(AlltoallFn algorithm, const char* name, std::initializer_list<Wire> wires) {
  forEachLayout(name, wires, 800, [&](Cluster& cluster, const auto& group, int n, int rank) {
    const auto ranks = static_cast<std::size_t>(n);
    std::deque<std::vector<uint8_t>> inputs, outputs;
    std::deque<std::vector<Block>> blockLists;
    std::vector<Submitted> pending;
    for (std::size_t bytes : kBlockBytes) {
      auto& input = inputs.emplace_back(bytes * ranks);
      auto& output = outputs.emplace_back(bytes * ranks + 1, 0xEE);
      for (std::size_t i = 0; i < input.size(); ++i) {
        input[i] = byteOf(rank * n + static_cast<int>(i / std::max<std::size_t>(1, bytes)), i);
      }
      auto& sends = blockLists.emplace_back();
      auto& receives = blockLists.emplace_back();
      for (std::size_t p = 0; p < ranks; ++p) {
        sends.push_back(Block{input.data() + p * bytes, bytes});
        receives.push_back(Block{output.data() + p * bytes, bytes});
      }
      std::span<const Block> out = sends, in = receives;
      pending.push_back(submitCollective(cluster.engine(rank), group[rank], name,
                                         [=](Collective& c) { return algorithm(c, out, in); }));
    }
    for (auto& op : pending) {
      op.wait();
    }
    for (std::size_t k = 0; k < kBlockBytes.size(); ++k) {
      const std::size_t bytes = kBlockBytes[k];
      for (std::size_t p = 0; p < ranks; ++p) {
        for (std::size_t i = 0; i < bytes; ++i) {
          // Rank p's block for this rank sat at p's offset rank * bytes.
          const std::size_t at = static_cast<std::size_t>(rank) * bytes + i;
          expect(outputs[k][p * bytes + i] == byteOf(static_cast<int>(p) * n + rank, at), [&] {
            return std::string(name) + ": " + std::to_string(bytes) + " bytes, block from rank " + std::to_string(p) +
                   ", byte " + std::to_string(i);
          });
        }
      }
      expect(outputs[k].back() == 0xEE, std::string(name) + ": wrote past the output");
    }
  });
}

}  // namespace

TEST_CASE("all_to_all hierarchical on every host layout", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  checkAlltoallAcrossHosts(&alltoallHierarchical, "alltoallHierarchical", {Wire::Loopback, Wire::SharedMemory});
  checkAlltoallAcrossHosts(&selectAlltoall, "selectAlltoall", {Wire::SharedMemory});
  checkAlltoallAcrossHosts(&alltoallHierarchical, "alltoallHierarchical over UCX", {Wire::SharedMemoryUcx});
}

TEST_CASE("all_gather hierarchical on every host layout", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  checkAllgatherAcrossHosts(&allgatherHierarchical, "allgatherHierarchical", {Wire::Loopback, Wire::SharedMemory});
  checkAllgatherAcrossHosts(&selectAllgather, "selectAllgather", {Wire::SharedMemory});
}

TEST_CASE("all_gather selection across hosts: the composition from 256 KiB a rank, the flat choice below",
          "[hierarchical]") {
  // Rank 0 selects; the others run what it should take. Ranks that run
  // different algorithms never match each other's messages and all raise.
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  const std::vector<int> hosts{0, 0, 1, 1};
  const std::size_t large = kHierarchicalAllgatherMinBytes;
  for (const auto& [bytes, expected, label] :
       {std::tuple<std::size_t, AllgatherFn, const char*>{large, &allgatherHierarchical, "hierarchical"},
        std::tuple<std::size_t, AllgatherFn, const char*>{large - 1, &selectFlatAllgather, "flat"}}) {
    DYNAMIC_SECTION(bytes << " bytes a rank: " << label) {
      Cluster cluster(4, Wire::SharedMemory);
      auto group = cluster.makeGroup("g", {}, {}, hosts);
      auto failures = runRanks(4, [&, bytes = bytes, expected = expected](int rank) {
        std::vector<uint8_t> input(bytes);
        std::vector<uint8_t> output(bytes * 4);
        std::vector<void*> slots;
        for (std::size_t p = 0; p < 4; ++p) {
          slots.push_back(output.data() + p * bytes);
        }
        for (std::size_t i = 0; i < bytes; ++i) {
          input[i] = byteOf(rank, i);
        }
        const AllgatherFn algorithm = rank == 0 ? &selectAllgather : expected;
        const void* in = input.data();
        std::span<void* const> outs = slots;
        submitCollective(cluster.engine(rank), group[rank], "all_gather", [=](Collective& c) {
          return algorithm(c, in, outs, bytes);
        }).wait();
        for (std::size_t p = 0; p < 4; ++p) {
          for (std::size_t i = 0; i < bytes; i += 997) {
            expect(output[p * bytes + i] == byteOf(static_cast<int>(p), i), "block of rank " + std::to_string(p));
          }
        }
      });
      checkNoFailures(failures);
    }
  }
}

TEST_CASE("all_gather hierarchical over UCX", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::Never);
  checkAllgatherAcrossHosts(&allgatherHierarchical, "allgatherHierarchical unstaged", {Wire::SharedMemoryUcx});
}

TEST_CASE("broadcast hierarchical from every root on every host layout", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  checkBroadcastAcrossHosts(&broadcastHierarchical, "broadcastHierarchical", {Wire::Loopback, Wire::SharedMemory});
  checkBroadcastAcrossHosts(&selectBroadcast, "selectBroadcast", {Wire::SharedMemory});
}

TEST_CASE("broadcast hierarchical over UCX", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::Never);
  checkBroadcastAcrossHosts(&broadcastHierarchical, "broadcastHierarchical unstaged", {Wire::SharedMemoryUcx});
}

TEST_CASE("reduce hierarchical to every root on every host layout", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::AsConfigured);
  checkReduceAcrossHosts(&reduceHierarchical, "reduceHierarchical", {Wire::Loopback, Wire::SharedMemory});
  checkReduceAcrossHosts(&selectReduce, "selectReduce", {Wire::SharedMemory});
}

TEST_CASE("reduce hierarchical over UCX", "[hierarchical]") {
  StagingPolicyScope scope(StagingPolicy::Never);
  checkReduceAcrossHosts(&reduceHierarchical, "reduceHierarchical unstaged", {Wire::SharedMemoryUcx});
}

TEST_CASE("hierarchical broadcast, reduce and all_gather: ranks that disagree raise", "[hierarchical][disagreement]") {
  // 2 hosts x 2: ranks 0, 1 on host 0, ranks 2, 3 on host 1.
  const std::vector<int> hosts{0, 0, 1, 1};
  std::deque<std::vector<int32_t>> data;
  for (int r = 0; r < 4; ++r) {
    data.emplace_back(1024, r);
  }
  auto broadcastFrom = [&](int rank, int root) -> Collective::Body {
    int32_t* pointer = data[rank].data();
    return [=](Collective& c) { return broadcastHierarchical(c, pointer, 4096, root); };
  };
  auto reduceTo = [&](int rank, int root, Reduction reduction) -> Collective::Body {
    int32_t* pointer = data[rank].data();
    return
        [=](Collective& c) { return reduceHierarchical(c, pointer, pointer, 1024, DataType::Int32, reduction, root); };
  };
  SECTION("rank 3 broadcasts from rank 1, the others from rank 0") {
    // Rank 3 waits for rank 1 across the hosts, where rank 1 has no part;
    // rank 2 waits for rank 3 inside host 1. The phases' messages carry the
    // group's root, so rank 3 sees that rank 2 runs a broadcast from rank 0
    // and raises; rank 2 learns it from rank 3's notice.
    auto errors =
        runDisagreeing(Wire::SharedMemory,
                       {broadcastFrom(0, 0), broadcastFrom(1, 0), broadcastFrom(2, 0), broadcastFrom(3, 1)}, hosts);
    INFO("rank 2: " << errors[2] << "\nrank 3: " << errors[3]);
    CHECK_THAT(errors[3], Catch::Matchers::Contains("this rank runs broadcast from rank 1 (hierarchical algorithm)"));
    CHECK_THAT(errors[3], Catch::Matchers::Contains("but a peer sent a message of broadcast (hierarchical algorithm), "
                                                    "phase 2: broadcast from rank 0"));
    CHECK_THAT(errors[2], Catch::Matchers::Contains("ranks disagree"));
  }
  SECTION("rank 1 broadcasts from rank 1, the others from rank 0") {
    // Both think they are their host's root-place rank in a phase.
    auto errors =
        runDisagreeing(Wire::SharedMemory,
                       {broadcastFrom(0, 0), broadcastFrom(1, 1), broadcastFrom(2, 0), broadcastFrom(3, 0)}, hosts);
    INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1] << "\nrank 3: " << errors[3]);
    CHECK_THAT(errors[0], Catch::Matchers::Contains("ranks disagree"));
    // Rank 1 finds the disagreement itself, or first hears it from rank 3,
    // which also waits for a message of rank 1's in a phase, and then
    // names what it runs and what rank 1 sent.
    const bool rank1Found =
        errors[1].find("this rank runs broadcast from rank 1 (hierarchical algorithm)") != std::string::npos;
    const bool rank3Found =
        errors[1].find("rank 3 found that they do") != std::string::npos &&
        errors[3].find("this rank runs broadcast from rank 0 (hierarchical algorithm)") != std::string::npos;
    CHECK((rank1Found || rank3Found));
  }
  SECTION("rank 2 reduces with MAX, the others with SUM") {
    auto errors = runDisagreeing(Wire::SharedMemory,
                                 {reduceTo(0, 0, Reduction::Sum), reduceTo(1, 0, Reduction::Sum),
                                  reduceTo(2, 0, Reduction::Max), reduceTo(3, 0, Reduction::Sum)},
                                 hosts);
    INFO("rank 2: " << errors[2]);
    CHECK_THAT(errors[2], Catch::Matchers::Contains("ranks disagree"));
    CHECK_THAT(errors[0], Catch::Matchers::Contains("ranks disagree"));
  }
  SECTION("rank 3 reduces to rank 2, the others to rank 0") {
    // Host 1 reduces to rank 2 in the first phase either way; rank 3's
    // message there carries root 2, which rank 2 does not match.
    auto errors = runDisagreeing(Wire::SharedMemory,
                                 {reduceTo(0, 0, Reduction::Sum), reduceTo(1, 0, Reduction::Sum),
                                  reduceTo(2, 0, Reduction::Sum), reduceTo(3, 2, Reduction::Sum)},
                                 hosts);
    INFO("rank 0: " << errors[0] << "\nrank 2: " << errors[2] << "\nrank 3: " << errors[3]);
    CHECK_THAT(errors[2], Catch::Matchers::Contains("this rank runs reduce to rank 0 (SUM, hierarchical algorithm), "
                                                    "phase 1: reduce to rank 0 (SUM, direct algorithm)"));
    CHECK_THAT(errors[2], Catch::Matchers::Contains("a peer sent a message of reduce (hierarchical algorithm), "
                                                    "phase 1: reduce to rank 2 (SUM, direct algorithm)"));
    CHECK_THAT(errors[3], Catch::Matchers::Contains("ranks disagree"));
    CHECK_THAT(errors[0], Catch::Matchers::Contains("ranks disagree"));
  }
  SECTION("rank 3 runs the flat all_gather ring") {
    std::deque<std::vector<int32_t>> outputs;
    std::deque<std::vector<void*>> slots;
    std::vector<Collective::Body> bodies;
    for (int r = 0; r < 4; ++r) {
      auto& out = outputs.emplace_back(4 * 1024);
      auto& s = slots.emplace_back();
      for (int p = 0; p < 4; ++p) {
        s.push_back(out.data() + p * 1024);
      }
      AllgatherFn algorithm = r == 3 ? &allgatherRing : &allgatherHierarchical;
      int32_t* input = data[r].data();
      std::span<void* const> outs = s;
      bodies.push_back([=](Collective& c) { return algorithm(c, input, outs, 4096); });
    }
    auto errors = runDisagreeing(Wire::SharedMemory, bodies, hosts);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << errors[r]);
      CHECK_THAT(errors[r], Catch::Matchers::Contains("ranks disagree"));
    }
  }
}

TEST_CASE("selection tables: each UCXCOLL_*_ALGO accepts exactly its table's algorithms", "[hierarchical][config]") {
  for (const char* setting : {"UCXCOLL_ALLGATHER_ALGO", "UCXCOLL_BCAST_ALGO", "UCXCOLL_ALLREDUCE_ALGO",
                              "UCXCOLL_ALLTOALL_ALGO", "UCXCOLL_REDUCE_SCATTER_ALGO", "UCXCOLL_REDUCE_ALGO"}) {
    INFO(setting);
    const std::vector<std::string> names = selectableAlgorithms(setting);
    std::string list;
    for (const std::string& name : names) {
      const char* value = name.c_str();
      const Config accepted =
          parseConfig([&](const char* variable) { return std::string(variable) == setting ? value : nullptr; });
      CHECK(accepted.problems.empty());
      list += (list.empty() ? "" : ", ") + name;
    }
    const Config refused = parseConfig(
        [&](const char* variable) { return std::string(variable) == setting ? "no-such-algorithm" : nullptr; });
    REQUIRE(refused.problems.size() == 1);
    CHECK(refused.problems[0] == std::string(setting) + "=no-such-algorithm: expected one of " + list);
  }
}
