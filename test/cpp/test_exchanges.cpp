// reduce, reduce-scatter, gather, scatter, all-to-all and the monitored
// barrier, ranks as threads: over the loopback transport at 1-16 ranks with
// delayed and reordered delivery, and over real UCX at 1-8, several in
// flight per group. Each receiver has several senders in one slot here, so
// a message landing in the buffer of another sender shows as wrong data.
// Inputs are integer-valued: every summation order gives the same result.

#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "collectives/staging.hpp"
#include "common/error.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;

namespace {

int64_t valueOf(int rank, std::size_t index) {
  return static_cast<int64_t>(rank) * 1000003 + static_cast<int64_t>(index) * 7;
}

// 0, tiny, and above the small-message limit (reduce's second algorithm).
std::vector<std::size_t> counts(const Setup& setup) {
  std::vector<std::size_t> all{0, 1, 5, 1000};
  if (setup.ranks <= 8) {
    all.push_back(40000);
  }
  return all;
}

// Runs `body(rank, pending)` on every rank, waits for what it submitted,
// then runs `verify(rank)`.
template <typename Body, typename Verify>
void onEveryRank(const Setup& setup, int seed, Body body, Verify verify) {
  const int n = setup.ranks;
  Cluster cluster(n, setup.wire, disturbed(seed));
  auto group = cluster.makeGroup("g");
  auto failures = runRanks(n, [&](int rank) {
    std::vector<Submitted> pending;
    body(rank, [&](const char* name, Collective::Body collective) {
      pending.push_back(submitCollective(cluster.engine(rank), group[rank], name, std::move(collective)));
    });
    for (auto& op : pending) {
      op.wait();
    }
    verify(rank);
  });
  checkNoFailures(failures);
}

// Runs `perRank(cluster, group, n, count, rank)` on every rank for each
// staging policy (AsConfigured staging from 0 bytes, so every link that can
// stage does; Never and EvenRanksOnly leave links plain, alone or beside
// staged ones), both wires, 1-6 ranks, and blocks of 1 element, 10,001 (one
// chunk) and, at up to 3 ranks, 300,001 (over 8 staging chunks: the slots
// are reused). `seedBase` keeps each test's delivery disturbance its own.
template <typename PerRank>
void forEachStagedShape(int seedBase, PerRank perRank) {
  for (StagingPolicy policy : {StagingPolicy::AsConfigured, StagingPolicy::Never, StagingPolicy::EvenRanksOnly}) {
    setStagingPolicyForTests(policy, 0);
    for (Wire wire : {Wire::Loopback, Wire::SharedMemoryUcx}) {
      for (int n = 1; n <= 6; ++n) {
        DYNAMIC_SECTION("policy " << static_cast<int>(policy) << ", " << n << " ranks over " << wireName(wire)) {
          std::vector<std::size_t> counts{1, 10001};
          if (n <= 3) {
            counts.push_back(300001);
          }
          Cluster cluster(n, wire, disturbed(static_cast<int>(policy) * 10 + n + seedBase));
          auto group = cluster.makeGroup("g");
          for (std::size_t count : counts) {
            auto failures = runRanks(n, [&](int rank) { perRank(cluster, group, n, count, rank); });
            checkNoFailures(failures);
          }
        }
      }
    }
  }
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
}

}  // namespace

TEST_CASE("reduce to every root, both algorithms", "[collectives]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("reduce with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      std::vector<std::deque<std::vector<int64_t>>> outputs(n);
      std::vector<std::deque<std::vector<int64_t>>> inputs(n);
      std::vector<std::vector<std::pair<int, std::size_t>>> cases(n);
      onEveryRank(
          setup, n + 400,
          [&](int rank, auto submit) {
            for (int root = 0; root < n; ++root) {
              for (std::size_t count : counts(setup)) {
                auto& input = inputs[rank].emplace_back(count);
                for (std::size_t i = 0; i < count; ++i) {
                  input[i] = valueOf(rank, i);
                }
                auto& output = outputs[rank].emplace_back(count, -1);
                cases[rank].emplace_back(root, count);
                const int64_t* in = input.data();
                int64_t* out = output.data();
                submit("reduce", [=](Collective& c) {
                  return reduceDirect(c, in, out, count, DataType::Int64, Reduction::Sum, root);
                });
              }
            }
          },
          [&](int rank) {
            for (std::size_t k = 0; k < cases[rank].size(); ++k) {
              auto [root, count] = cases[rank][k];
              for (std::size_t i = 0; i < count; ++i) {
                int64_t expected = -1;
                if (rank == root) {
                  expected = 0;
                  for (int r = 0; r < n; ++r) {
                    expected += valueOf(r, i);
                  }
                }
                expect(outputs[rank][k][i] == expected, [&] {
                  return "reduce to root " + std::to_string(root) + " of " + std::to_string(count) + ", element " +
                         std::to_string(i);
                });
              }
            }
          });
    }
  }
}

TEST_CASE("reduce-scatter pairwise and ring", "[collectives]") {
  // Both algorithms on every size, several in flight: the ring's 40,000
  // element blocks are staged where the wire allows it (over the staging
  // threshold), its smaller ones plain.
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("reduce_scatter with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      std::vector<std::deque<std::vector<int64_t>>> outputs(n);
      std::vector<std::deque<std::vector<int64_t>>> inputs(n);
      std::vector<std::deque<std::vector<const void*>>> blocks(n);
      onEveryRank(
          setup, n + 500,
          [&](int rank, auto submit) {
            for (std::size_t count : counts(setup)) {
              // Block p of this rank's input: values of (rank, p * count + i).
              auto& input = inputs[rank].emplace_back(count * static_cast<std::size_t>(n));
              for (std::size_t i = 0; i < input.size(); ++i) {
                input[i] = valueOf(rank, i);
              }
              auto& pointers = blocks[rank].emplace_back();
              for (int p = 0; p < n; ++p) {
                pointers.push_back(input.data() + count * static_cast<std::size_t>(p));
              }
              std::span<const void* const> from(pointers);
              int64_t* out = outputs[rank].emplace_back(count, -1).data();
              submit("reduce_scatter", [=](Collective& c) {
                return reduceScatterPairwise(c, from, out, count, DataType::Int64, Reduction::Sum);
              });
              int64_t* ringOut = outputs[rank].emplace_back(count, -1).data();
              submit("reduce_scatter", [=](Collective& c) {
                return reduceScatterRing(c, from, ringOut, count, DataType::Int64, Reduction::Sum);
              });
            }
          },
          [&](int rank) {
            for (const auto& output : outputs[rank]) {
              const std::size_t count = output.size();
              for (std::size_t i = 0; i < count; ++i) {
                int64_t expected = 0;
                for (int r = 0; r < n; ++r) {
                  expected += valueOf(r, count * static_cast<std::size_t>(rank) + i);
                }
                expect(output[i] == expected, [&] { return "reduce_scatter block of " + std::to_string(count); });
              }
            }
          });
    }
  }
}

TEST_CASE("gather to and scatter from every root", "[collectives]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("gather/scatter with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      const std::size_t count = 33;
      std::vector<std::deque<std::vector<int64_t>>> gathered(n);   // n * count, on roots
      std::vector<std::deque<std::vector<int64_t>>> scattered(n);  // count
      std::vector<std::deque<std::vector<int64_t>>> sources(n);
      std::vector<std::deque<std::vector<void*>>> pointers(n);
      std::vector<std::deque<std::vector<const void*>>> constPointers(n);
      onEveryRank(
          setup, n + 600,
          [&](int rank, auto submit) {
            auto& mine = sources[rank].emplace_back(count * static_cast<std::size_t>(n));
            for (std::size_t i = 0; i < mine.size(); ++i) {
              mine[i] = valueOf(rank, i);
            }
            for (int root = 0; root < n; ++root) {
              auto& into = gathered[rank].emplace_back(count * static_cast<std::size_t>(n), -1);
              auto& outputs = pointers[rank].emplace_back();
              auto& inputs = constPointers[rank].emplace_back();
              for (int p = 0; p < n; ++p) {
                outputs.push_back(into.data() + count * static_cast<std::size_t>(p));
                inputs.push_back(mine.data() + count * static_cast<std::size_t>(p));
              }
              const int64_t* in = mine.data();
              std::span<void* const> out(outputs);
              submit("gather", [=](Collective& c) { return gatherDirect(c, in, out, count * sizeof(int64_t), root); });
              int64_t* received = scattered[rank].emplace_back(count, -1).data();
              std::span<const void* const> blocks(inputs);
              submit("scatter",
                     [=](Collective& c) { return scatterDirect(c, blocks, received, count * sizeof(int64_t), root); });
            }
          },
          [&](int rank) {
            for (int root = 0; root < n; ++root) {
              const auto& into = gathered[rank][root];
              for (int p = 0; p < n; ++p) {
                for (std::size_t i = 0; i < count; ++i) {
                  int64_t expected = rank == root ? valueOf(p, i) : -1;
                  expect(into[count * static_cast<std::size_t>(p) + i] == expected,
                         [&] { return "gather to " + std::to_string(root) + ": block " + std::to_string(p); });
                }
              }
              for (std::size_t i = 0; i < count; ++i) {
                expect(scattered[rank][root][i] == valueOf(root, count * static_cast<std::size_t>(rank) + i),
                       [&] { return "scatter from " + std::to_string(root); });
              }
            }
          });
    }
  }
}

TEST_CASE("all-to-all with a different size for every pair", "[collectives]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("all_to_all with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      auto sizeOf = [](int from, int to) { return static_cast<std::size_t>((from * 3 + to * 5) % 7); };
      std::vector<std::deque<std::vector<int64_t>>> storage(n);
      std::vector<std::deque<std::vector<Block>>> plans(n);
      std::vector<std::vector<int64_t*>> received(n, std::vector<int64_t*>(n));
      onEveryRank(
          setup, n + 700,
          [&](int rank, auto submit) {
            auto& sends = plans[rank].emplace_back();
            auto& receives = plans[rank].emplace_back();
            for (int p = 0; p < n; ++p) {
              auto& out = storage[rank].emplace_back(sizeOf(rank, p));
              for (std::size_t i = 0; i < out.size(); ++i) {
                out[i] = valueOf(rank * 100 + p, i);
              }
              sends.push_back({out.data(), out.size() * sizeof(int64_t)});
              auto& in = storage[rank].emplace_back(sizeOf(p, rank), -1);
              received[rank][p] = in.data();
              receives.push_back({in.data(), in.size() * sizeof(int64_t)});
            }
            std::span<const Block> s(sends);
            std::span<const Block> r(receives);
            for (bool checkSizes : {true, false}) {
              submit("all_to_all", [=](Collective& c) {
                return alltoallPairwise(c, tag::Routine::AlltoallPairwise, s, r, checkSizes);
              });
            }
          },
          [&](int rank) {
            for (int p = 0; p < n; ++p) {
              for (std::size_t i = 0; i < sizeOf(p, rank); ++i) {
                expect(received[rank][p][i] == valueOf(p * 100 + rank, i),
                       [&] { return "all_to_all block from " + std::to_string(p); });
              }
            }
          });
    }
  }
}

TEST_CASE("all-to-all: both ranks of a pair that disagrees about a size fail, the others complete", "[collectives]") {
  Cluster cluster(3, Wire::Loopback, disturbed(7));
  auto group = cluster.makeGroup("g");
  auto failures = runRanks(3, [&](int rank) {
    // Rank 2 sends 2 elements to rank 0, which expects 1: ranks 0 and 2
    // must fail without exchanging data; rank 1 agrees with both and gets
    // every block.
    std::vector<int64_t> in(8, rank);
    std::vector<int64_t> out(8, -1);
    std::vector<Block> sends;
    std::vector<Block> receives;
    for (int p = 0; p < 3; ++p) {
      sends.push_back({in.data() + 2 * p, (rank == 2 && p == 0 ? 2 : 1) * sizeof(int64_t)});
      receives.push_back({out.data() + 2 * p, sizeof(int64_t)});
    }
    auto op = submitCollective(cluster.engine(rank), group[rank], "all_to_all", [&](Collective& c) {
      return alltoallPairwise(c, tag::Routine::AlltoallPairwise, sends, receives, true);
    });
    std::string error;
    try {
      op.wait();
    } catch (const MismatchError& mismatch) {
      error = mismatch.what();
    }
    if (rank == 0) {
      expect(error.find("rank 2 sends 16 bytes to this rank, which expects 8") != std::string::npos, error);
    } else if (rank == 2) {
      expect(error.find("this rank sends 16 bytes to rank 0, which expects 8") != std::string::npos, error);
    } else {
      expect(error.empty(), "rank 1 agrees with everyone: " + error);
    }
    for (int p = 0; p < 3; ++p) {
      const bool skipped = (rank == 0 && p == 2) || (rank == 2 && p == 0);
      expect(out[2 * p] == (skipped ? -1 : p), "block from rank " + std::to_string(p));
    }
  });
  checkNoFailures(failures);
}

TEST_CASE("monitored barrier: no rank leaves before the last one enters", "[collectives]") {
  for (const Setup& setup : setups()) {
    DYNAMIC_SECTION("monitored barrier with " << setup.ranks << " ranks over " << wireName(setup.wire)) {
      const int n = setup.ranks;
      Cluster cluster(n, setup.wire, disturbed(n + 800));
      auto group = cluster.makeGroup("g");
      std::atomic<int> entered{0};
      auto failures = runRanks(n, [&](int rank) {
        if (rank == n - 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        entered.fetch_add(1);
        submitCollective(cluster.engine(rank), group[rank], "monitored_barrier", &barrierMonitored).wait();
        expect(entered.load() == n, "left the barrier early");
      });
      checkNoFailures(failures);
    }
  }
}

TEST_CASE("reduce of two ranks staged through shared memory, to either root, in place or not", "[collectives]") {
  // Staging from 0 bytes, so that these sizes take reduce_staged_pair.cpp
  // where both links are staged: 10,001 floats (one chunk per block) and
  // 1,200,001 (over 8 chunks per block: the staging slots are reused).
  // Never and EvenRanksOnly leave a link plain: the ranks then fall back
  // to the pairwise path together. Random floats: with two operands every
  // order gives a + b exactly.
  for (StagingPolicy policy : {StagingPolicy::AsConfigured, StagingPolicy::Never, StagingPolicy::EvenRanksOnly}) {
    setStagingPolicyForTests(policy, 0);
    for (Wire wire : {Wire::Ucx, Wire::Loopback, Wire::SharedMemoryUcx}) {
      DYNAMIC_SECTION("policy " << static_cast<int>(policy) << " over " << wireName(wire)) {
        Cluster cluster(2, wire, disturbed(static_cast<int>(policy) + 500));
        auto group = cluster.makeGroup("g");
        std::vector<std::vector<float>> inputs(2);
        for (std::size_t count : {std::size_t{10001}, std::size_t{1200001}}) {
          for (int rank = 0; rank < 2; ++rank) {
            inputs[rank].resize(count);
            for (std::size_t i = 0; i < count; ++i) {
              inputs[rank][i] =
                  static_cast<float>((i * 2654435761u + static_cast<std::size_t>(rank) * 97) % 100003) / 7.0f;
            }
          }
          for (int root = 0; root < 2; ++root) {
            for (bool inPlace : {false, true}) {
              auto failures = runRanks(2, [&](int rank) {
                std::vector<float> input = inputs[rank];
                std::vector<float> output(count, -1.0f);
                float* out = inPlace ? input.data() : output.data();
                const float* in = input.data();
                submitCollective(cluster.engine(rank), group[rank], "reduce", [=](Collective& c) {
                  return reduceDirect(c, in, out, count, DataType::Float32, Reduction::Sum, root);
                }).wait();
                const std::string what = "reduce of " + std::to_string(count) + " to root " + std::to_string(root) +
                                         (inPlace ? " in place" : "");
                if (rank == root) {
                  std::size_t i = 0;
                  while (i < count && out[i] == inputs[0][i] + inputs[1][i]) {
                    ++i;
                  }
                  expect(i == count, what + ": first wrong element " + std::to_string(i));
                } else {
                  expect(input == inputs[rank], what + ": the non-root's input is left as it was");
                  expect(inPlace || std::all_of(output.begin(), output.end(), [](float x) { return x == -1.0f; }),
                         what + ": the non-root's output is not touched");
                }
              });
              checkNoFailures(failures);
            }
          }
        }
      }
    }
  }
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
}

TEST_CASE("reduce-scatter of two ranks staged through shared memory, or pairwise where a link cannot stage",
          "[collectives]") {
  // Staging from 0 bytes: 10,001 floats per block (one chunk) and 1,200,001
  // (the 8 staging slots are reused). Never and EvenRanksOnly leave a link
  // plain: the ranks then fall back to the pairwise exchange together.
  // Random floats: with two operands either order gives a + b exactly.
  for (StagingPolicy policy : {StagingPolicy::AsConfigured, StagingPolicy::Never, StagingPolicy::EvenRanksOnly}) {
    setStagingPolicyForTests(policy, 0);
    for (Wire wire : {Wire::Ucx, Wire::Loopback, Wire::SharedMemoryUcx}) {
      DYNAMIC_SECTION("policy " << static_cast<int>(policy) << " over " << wireName(wire)) {
        Cluster cluster(2, wire, disturbed(static_cast<int>(policy) + 600));
        auto group = cluster.makeGroup("g");
        for (std::size_t count : {std::size_t{10001}, std::size_t{1200001}}) {
          std::vector<std::vector<float>> inputs(2, std::vector<float>(2 * count));
          for (int rank = 0; rank < 2; ++rank) {
            for (std::size_t i = 0; i < 2 * count; ++i) {
              inputs[rank][i] =
                  static_cast<float>((i * 2654435761u + static_cast<std::size_t>(rank) * 89) % 100019) / 9.0f;
            }
          }
          auto failures = runRanks(2, [&](int rank) {
            const std::vector<const void*> blocks{inputs[rank].data(), inputs[rank].data() + count};
            std::vector<float> output(count, -1.0f);
            float* out = output.data();
            std::span<const void* const> from(blocks);
            submitCollective(cluster.engine(rank), group[rank], "reduce_scatter", [=](Collective& c) {
              return reduceScatterPairwise(c, from, out, count, DataType::Float32, Reduction::Sum);
            }).wait();
            const std::size_t base = count * static_cast<std::size_t>(rank);
            std::size_t i = 0;
            while (i < count && output[i] == inputs[0][base + i] + inputs[1][base + i]) {
              ++i;
            }
            expect(i == count,
                   "reduce_scatter of " + std::to_string(count) + ": first wrong element " + std::to_string(i));
          });
          checkNoFailures(failures);
        }
      }
    }
  }
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
}

TEST_CASE("all-to-all staged in rounds at 1-6 ranks, links staged, plain and mixed", "[collectives]") {
  // Every size here takes alltoall_staged.cpp (staging from 0 bytes).
  forEachStagedShape(800, [](Cluster& cluster, auto& group, int n, std::size_t count, int rank) {
    const std::size_t total = count * static_cast<std::size_t>(n);
    std::vector<int64_t> input(total);
    std::vector<int64_t> output(total, -1);
    std::vector<Block> sends;
    std::vector<Block> receives;
    for (int p = 0; p < n; ++p) {
      const std::size_t at = count * static_cast<std::size_t>(p);
      for (std::size_t i = 0; i < count; ++i) {
        input[at + i] = valueOf(rank * 100 + p, i);
      }
      sends.push_back({input.data() + at, count * sizeof(int64_t)});
      receives.push_back({output.data() + at, count * sizeof(int64_t)});
    }
    std::span<const Block> s(sends);
    std::span<const Block> r(receives);
    submitCollective(cluster.engine(rank), group[rank], "all_to_all", [=](Collective& c) {
      return alltoallStaged(c, s, r);
    }).wait();
    for (int p = 0; p < n; ++p) {
      std::size_t i = 0;
      while (i < count && output[count * static_cast<std::size_t>(p) + i] == valueOf(p * 100 + rank, i)) {
        ++i;
      }
      expect(i == count, "block of " + std::to_string(count) + " from rank " + std::to_string(p) +
                             ": first wrong element " + std::to_string(i));
    }
  });
}

TEST_CASE("reduce-scatter ring at 1-6 ranks, links staged, plain and mixed", "[collectives]") {
  // A rank may receive staged and send plain. Each input block is a vector
  // of its own (the list form of reduce_scatter); int64 sums and float
  // maxima are exact in any order.
  forEachStagedShape(900, [](Cluster& cluster, auto& group, int n, std::size_t count, int rank) {
    std::vector<std::vector<int64_t>> sums(static_cast<std::size_t>(n), std::vector<int64_t>(count));
    std::vector<std::vector<float>> maxima(static_cast<std::size_t>(n), std::vector<float>(count));
    std::vector<const void*> sumBlocks, maxBlocks;
    for (int p = 0; p < n; ++p) {
      for (std::size_t i = 0; i < count; ++i) {
        sums[p][i] = valueOf(rank * 100 + p, i);
        maxima[p][i] = static_cast<float>((i * 2654435761u + static_cast<std::size_t>(rank * 31 + p)) % 100003) / 7.0f;
      }
      sumBlocks.push_back(sums[p].data());
      maxBlocks.push_back(maxima[p].data());
    }
    std::vector<int64_t> sum(count, -1);
    std::vector<float> max(count, -1.0f);
    std::span<const void*const> sumFrom(sumBlocks), maxFrom(maxBlocks);
    int64_t* sumOut = sum.data();
    float* maxOut = max.data();
    auto summed = submitCollective(cluster.engine(rank), group[rank], "reduce_scatter", [=](Collective& c) {
      return reduceScatterRing(c, sumFrom, sumOut, count, DataType::Int64, Reduction::Sum);
    });
    auto maximised = submitCollective(cluster.engine(rank), group[rank], "reduce_scatter", [=](Collective& c) {
      return reduceScatterRing(c, maxFrom, maxOut, count, DataType::Float32, Reduction::Max);
    });
    summed.wait();
    maximised.wait();
    std::size_t i = 0;
    auto expectedSum = [&](std::size_t at) {
      int64_t total = 0;
      for (int r = 0; r < n; ++r) {
        total += valueOf(r * 100 + rank, at);
      }
      return total;
    };
    while (i < count && sum[i] == expectedSum(i)) {
      ++i;
    }
    expect(i == count, "sum of " + std::to_string(count) + ": first wrong element " + std::to_string(i));
    auto expectedMax = [&](std::size_t at) {
      float best = -1.0f;
      for (int r = 0; r < n; ++r) {
        best = std::max(
            best, static_cast<float>((at * 2654435761u + static_cast<std::size_t>(r * 31 + rank)) % 100003) / 7.0f);
      }
      return best;
    };
    i = 0;
    while (i < count && max[i] == expectedMax(i)) {
      ++i;
    }
    expect(i == count, "max of " + std::to_string(count) + ": first wrong element " + std::to_string(i));
  });
}
