// Ranks that disagree about what they are doing must all get an error,
// never data: the cases a hostile tester found in the old tag layout, where
// all_reduce matched all_gather's messages and a broadcast from root 0
// matched one from root 1.

#include <catch2/catch.hpp>

#include <vector>

#include "cluster.hpp"
#include "collectives/staging.hpp"
#include "common/error.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;
using namespace std::chrono_literals;

TEST_CASE("all_reduce against all_gather: both ranks raise, naming both collectives", "[disagreement]") {
  for (Wire wire : {Wire::Ucx, Wire::Loopback, Wire::SharedMemoryUcx}) {
    DYNAMIC_SECTION(wireName(wire)) {
      std::vector<float> reduced(4, 1.0f);
      std::vector<float> input(4, 2.0f), out0(4), out1(4);
      std::vector<void*> outputs{out0.data(), out1.data()};
      auto errors = runDisagreeing(
          wire,
          {[&](Collective& c) { return allreduceDirect(c, reduced.data(), 4, DataType::Float32, Reduction::Sum); },
           [&](Collective& c) { return allgatherDirect(c, input.data(), outputs, 16); }});
      CHECK_THAT(errors[0],
                 Catch::Matchers::Contains("ranks disagree about collective #0: this rank runs all_reduce "
                                           "(SUM, direct algorithm), but a peer sent a message of all_gather"));
      CHECK_THAT(errors[1], Catch::Matchers::Contains("this rank runs all_gather (direct algorithm), but a peer sent a "
                                                      "message of all_reduce (SUM, direct algorithm)"));
    }
  }
}

TEST_CASE("broadcast from root 0 against root 1: both roots raise", "[disagreement]") {
  for (Wire wire : {Wire::Ucx, Wire::Loopback, Wire::SharedMemoryUcx}) {
    DYNAMIC_SECTION(wireName(wire)) {
      std::vector<int> a(8, 1), b(8, 2);
      auto errors = runDisagreeing(wire, {[&](Collective& c) { return broadcastBinomial(c, a.data(), 32, 0); },
                                          [&](Collective& c) { return broadcastBinomial(c, b.data(), 32, 1); }});
      CHECK_THAT(errors[0], Catch::Matchers::Contains("this rank runs broadcast from rank 0 (binomial algorithm), but "
                                                      "a peer sent a message of broadcast from rank 1"));
      CHECK_THAT(errors[1], Catch::Matchers::Contains("this rank runs broadcast from rank 1"));
    }
  }
}

TEST_CASE("all_reduce against broadcast from the other rank: both raise", "[disagreement]") {
  std::vector<float> reduced(4, 1.0f), broadcasted(4, 3.0f);
  auto errors = runDisagreeing(
      Wire::Ucx,
      {[&](Collective& c) { return allreduceDirect(c, reduced.data(), 4, DataType::Float32, Reduction::Sum); },
       [&](Collective& c) { return broadcastBinomial(c, broadcasted.data(), 16, 1); }});
  CHECK_THAT(errors[0], Catch::Matchers::Contains("a peer sent a message of broadcast from rank 1"));
  CHECK_THAT(errors[1], Catch::Matchers::Contains("a peer sent a message of all_reduce"));
}

TEST_CASE("ranks choosing different algorithms (sizes around the threshold) raise", "[disagreement]") {
  std::vector<float> small(8, 1.0f), large(100000, 1.0f);
  auto errors = runDisagreeing(
      Wire::Ucx,
      {[&](Collective& c) { return selectAllreduce(c, small.data(), small.size(), DataType::Float32, Reduction::Sum); },
       [&](Collective& c) {
         return selectAllreduce(c, large.data(), large.size(), DataType::Float32, Reduction::Sum);
       }});
  CHECK_THAT(errors[0], Catch::Matchers::Contains("a peer sent a message of all_reduce (SUM, ring algorithm)"));
  CHECK_THAT(errors[1], Catch::Matchers::Contains("a peer sent a message of all_reduce (SUM, direct algorithm)"));
}

TEST_CASE("sizes that differ are a mismatch naming both sizes, on every rank", "[disagreement]") {
  for (Wire wire : {Wire::Ucx, Wire::Loopback, Wire::SharedMemoryUcx}) {
    DYNAMIC_SECTION(wireName(wire)) {
      std::vector<float> four(4, 1.0f), eight(8, 1.0f);
      auto errors = runDisagreeing(
          wire,
          {[&](Collective& c) { return allreduceDirect(c, four.data(), 4, DataType::Float32, Reduction::Sum); },
           [&](Collective& c) { return allreduceDirect(c, eight.data(), 8, DataType::Float32, Reduction::Sum); }});
      CHECK_THAT(errors[0], Catch::Matchers::Contains("rank 1 sent 32 bytes where 16 were expected (ranks disagree "
                                                      "about the tensor sizes)"));
      CHECK_THAT(errors[1], Catch::Matchers::Contains("rank 0 sent 16 bytes where 32 were expected"));
    }
  }
}

TEST_CASE("collectives issued in opposite orders: the first raises on both ranks, the group then fails fast",
          "[disagreement]") {
  Cluster cluster(2, Wire::Ucx);
  auto group = cluster.makeGroup("g");
  std::vector<std::vector<std::string>> errors(2);
  auto failures = runRanks(2, [&](int rank) {
    std::vector<float> reduced(4, static_cast<float>(rank + 1));
    std::vector<float> input(4, 2.0f), out0(4), out1(4);
    std::vector<void*> outputs{out0.data(), out1.data()};
    Collective::Body allreduce = [&](Collective& c) {
      return allreduceDirect(c, reduced.data(), 4, DataType::Float32, Reduction::Sum);
    };
    Collective::Body allgather = [&](Collective& c) { return allgatherDirect(c, input.data(), outputs, 16); };
    std::vector<Submitted> ops;
    ops.push_back(submitCollective(cluster.engine(rank), group[rank], "first", rank == 0 ? allreduce : allgather, 60s));
    ops.push_back(
        submitCollective(cluster.engine(rank), group[rank], "second", rank == 0 ? allgather : allreduce, 60s));
    for (auto& op : ops) {
      try {
        op.wait();
        errors[rank].push_back("");
      } catch (const Error& error) {
        errors[rank].push_back(error.what());
      }
    }
  });
  checkNoFailures(failures);
  for (int rank = 0; rank < 2; ++rank) {
    REQUIRE(errors[rank].size() == 2);
    CHECK_THAT(errors[rank][0], Catch::Matchers::Contains("ranks disagree about collective #0"));
    CHECK_THAT(errors[rank][1], Catch::Matchers::Contains("was not run: this process group failed earlier"));
  }
}

TEST_CASE("all_reduce with different reductions (SUM against MAX) raises on both ranks", "[disagreement]") {
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  auto errors = runDisagreeing(
      Wire::Ucx, {[&](Collective& c) { return allreduceDirect(c, a.data(), 4, DataType::Float32, Reduction::Sum); },
                  [&](Collective& c) { return allreduceDirect(c, b.data(), 4, DataType::Float32, Reduction::Max); }});
  CHECK_THAT(errors[0], Catch::Matchers::Contains("this rank runs all_reduce (SUM, direct algorithm), but a peer sent "
                                                  "a message of all_reduce (MAX, direct algorithm)"));
  CHECK_THAT(errors[1], Catch::Matchers::Contains("this rank runs all_reduce (MAX"));
}

TEST_CASE("ring all_reduce with sizes that cut different blocks raises on both ranks", "[disagreement]") {
  // 2^20 against 2^20 + 1 floats: most chunks fit either way; without the
  // size check one rank could finish.
  std::vector<float> a(1 << 20, 1.0f), b((1 << 20) + 1, 1.0f);
  auto errors = runDisagreeing(
      Wire::Ucx,
      {[&](Collective& c) { return allreduceRing(c, a.data(), a.size(), DataType::Float32, Reduction::Sum); },
       [&](Collective& c) { return allreduceRing(c, b.data(), b.size(), DataType::Float32, Reduction::Sum); }});
  CHECK_THAT(errors[0], Catch::Matchers::Contains("rank 1 works on 4194308 bytes where this rank works on 4194304"));
  CHECK_THAT(errors[1], Catch::Matchers::Contains("rank 0 works on 4194304 bytes where this rank works on 4194308"));
}

TEST_CASE("large collectives: another root, another size, either side of the staging threshold: every rank raises",
          "[disagreement]") {
  // The pipelined broadcast, the chunked all_gather and the 2-rank staged
  // reduce_scatter take over from stagingMinBytes() under routines of their
  // own; ranks on either side of it, or with another root, must raise
  // rather than wait for the deadline.
  const std::size_t large = stagingMinBytes();
  std::vector<std::byte> a(2 * large), b(2 * large);
  SECTION("pipelined broadcast from root 0 against root 1") {
    auto errors = runDisagreeing(Wire::SharedMemoryUcx,
                                 {[&](Collective& c) { return broadcastPipelined(c, a.data(), 4096, 0); },
                                  [&](Collective& c) { return broadcastPipelined(c, b.data(), 4096, 1); }});
    CHECK_THAT(errors[0], Catch::Matchers::Contains("this rank runs broadcast from rank 0 (pipelined chain algorithm), "
                                                    "but a peer sent a message of broadcast from rank 1"));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("this rank runs broadcast from rank 1 (pipelined chain"));
  }
  SECTION("pipelined broadcast of different sizes") {
    auto errors = runDisagreeing(Wire::SharedMemoryUcx,
                                 {[&](Collective& c) { return broadcastPipelined(c, a.data(), 4096, 0); },
                                  [&](Collective& c) { return broadcastPipelined(c, b.data(), 8192, 0); }});
    CHECK_THAT(errors[0], Catch::Matchers::Contains("rank 1 works on 8192 bytes where this rank works on 4096"));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("rank 0 works on 4096 bytes where this rank works on 8192"));
  }
  SECTION("broadcast below and above the threshold") {
    auto errors =
        runDisagreeing(Wire::SharedMemoryUcx, {[&](Collective& c) { return selectBroadcast(c, a.data(), 4096, 0); },
                                               [&](Collective& c) { return selectBroadcast(c, b.data(), large, 0); }});
    CHECK_THAT(errors[0], Catch::Matchers::Contains("a peer sent a message of broadcast from rank 0 (pipelined chain"));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("a peer sent a message of broadcast from rank 0 (binomial"));
  }
  SECTION("all_gather below and above the threshold") {
    std::vector<void*> smallOut{a.data(), a.data() + large / 2}, largeOut{b.data(), b.data() + large};
    auto errors = runDisagreeing(Wire::SharedMemoryUcx,
                                 {[&](Collective& c) { return selectAllgather(c, a.data(), smallOut, large / 2); },
                                  [&](Collective& c) { return selectAllgather(c, b.data(), largeOut, large); }});
    CHECK_THAT(errors[0], Catch::Matchers::Contains("a peer sent a message of all_gather (chunked ring algorithm)"));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("a peer sent a message of all_gather (ring algorithm)"));
  }
  SECTION("2-rank reduce_scatter below and above the threshold") {
    const std::size_t smallCount = large / 8 / sizeof(float), largeCount = large / sizeof(float);
    auto* af = reinterpret_cast<float*>(a.data());
    auto* bf = reinterpret_cast<float*>(b.data());
    std::vector<float> out0(smallCount), out1(largeCount);
    const std::vector<const void*> smallIn{af, af + smallCount}, largeIn{bf, bf + largeCount};
    auto errors = runDisagreeing(
        Wire::SharedMemoryUcx,
        {[&](Collective& c) {
           return reduceScatterPairwise(c, smallIn, out0.data(), smallCount, DataType::Float32, Reduction::Sum);
         },
         [&](Collective& c) {
           return reduceScatterPairwise(c, largeIn, out1.data(), largeCount, DataType::Float32, Reduction::Sum);
         }});
    CHECK_THAT(errors[0], Catch::Matchers::Contains("a peer sent a message of reduce_scatter (SUM, staged pair"));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("a peer sent a message of reduce_scatter (SUM, pairwise"));
  }
  SECTION("3-rank reduce_scatter: one rank above the threshold, or on another size, in the ring") {
    // The ring takes over from the threshold on more than two ranks; every
    // rank of three is a neighbour of the one that disagrees.
    const std::size_t smallCount = large / 8 / sizeof(float), largeCount = large / sizeof(float);
    std::vector<float> in(3 * largeCount + 3), out0(largeCount + 1), out1(largeCount + 1), out2(largeCount + 1);
    const std::vector<const void*> smallIn{in.data(), in.data() + smallCount, in.data() + 2 * smallCount};
    const std::vector<const void*> largeIn{in.data(), in.data() + largeCount, in.data() + 2 * largeCount};
    const std::vector<const void*> otherIn{in.data(), in.data() + largeCount + 1, in.data() + 2 * largeCount + 2};
    auto select = [](const std::vector<const void*>& blocks, std::vector<float>& out, std::size_t count) {
      return [from = std::span<const void* const>(blocks), into = out.data(), count](Collective& c) {
        return selectReduceScatter(c, from, into, count, DataType::Float32, Reduction::Sum);
      };
    };
    auto errors = runDisagreeing(
        Wire::SharedMemoryUcx,
        {select(smallIn, out0, smallCount), select(smallIn, out1, smallCount), select(largeIn, out2, largeCount)});
    CHECK_THAT(errors[0], Catch::Matchers::Contains("a peer sent a message of reduce_scatter (SUM, ring"));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("a peer sent a message of reduce_scatter (SUM, ring"));
    CHECK_THAT(errors[2], Catch::Matchers::Contains("a peer sent a message of reduce_scatter (SUM, pairwise"));
    errors = runDisagreeing(
        Wire::SharedMemoryUcx,
        {select(largeIn, out0, largeCount), select(largeIn, out1, largeCount), select(otherIn, out2, largeCount + 1)});
    const std::string larger = std::to_string((largeCount + 1) * sizeof(float));
    const std::string usual = std::to_string(largeCount * sizeof(float));
    CHECK_THAT(errors[0],
               Catch::Matchers::Contains("rank 2 works on " + larger + " bytes where this rank works on " + usual));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("rank 2 works on " + larger + " bytes"));
    CHECK_THAT(errors[2], Catch::Matchers::Contains("works on " + usual + " bytes where this rank works on " + larger));
  }
  SECTION("2-rank all_to_all below and above the threshold") {
    const std::vector<Block> smallSends{{a.data(), large / 2}, {a.data() + large / 2, large / 2}};
    const std::vector<Block> smallReceives{{b.data(), large / 2}, {b.data() + large / 2, large / 2}};
    const std::vector<Block> largeSends{{a.data(), large}, {a.data() + large, large}};
    const std::vector<Block> largeReceives{{b.data(), large}, {b.data() + large, large}};
    auto errors = runDisagreeing(Wire::SharedMemoryUcx,
                                 {[&](Collective& c) { return selectAlltoall(c, smallSends, smallReceives); },
                                  [&](Collective& c) { return selectAlltoall(c, largeSends, largeReceives); }});
    CHECK_THAT(errors[0], Catch::Matchers::Contains("a peer sent a message of all_to_all (staged pairwise algorithm)"));
    CHECK_THAT(errors[1], Catch::Matchers::Contains("a peer sent a message of all_to_all (pairwise algorithm)"));
  }
}

TEST_CASE("staged all_to_all: one rank with other block sizes fails every rank of the group, at 2-5 ranks",
          "[disagreement]") {
  // The last rank's blocks are 8 bytes longer. Rounds pair each rank with
  // that one at different times; every rank must still raise at once.
  setStagingPolicyForTests(StagingPolicy::AsConfigured, 0);
  for (int n = 2; n <= 5; ++n) {
    DYNAMIC_SECTION(n << " ranks") {
      std::vector<std::vector<std::byte>> in(n), out(n);
      std::vector<std::vector<Block>> sends(n), receives(n);
      std::vector<Collective::Body> bodies;
      for (int rank = 0; rank < n; ++rank) {
        const std::size_t block = rank == n - 1 ? 4104 : 4096;
        in[rank].resize(block * n);
        out[rank].resize(block * n);
        for (int p = 0; p < n; ++p) {
          sends[rank].push_back({in[rank].data() + block * p, block});
          receives[rank].push_back({out[rank].data() + block * p, block});
        }
        bodies.push_back([&, rank](Collective& c) { return alltoallStaged(c, sends[rank], receives[rank]); });
      }
      auto errors = runDisagreeing(Wire::SharedMemoryUcx, bodies);
      for (int rank = 0; rank < n - 1; ++rank) {
        CHECK_THAT(errors[rank], Catch::Matchers::Contains("rank " + std::to_string(n - 1) +
                                                           " works on blocks of 4104 bytes where this rank works on "
                                                           "4096 (ranks disagree about the tensor sizes)"));
      }
      CHECK_THAT(errors[n - 1],
                 Catch::Matchers::Contains("works on blocks of 4096 bytes where this rank works on 4104"));
    }
  }
  setStagingPolicyForTests(StagingPolicy::AsConfigured);
}
