// The shared-memory lanes (transport/shared_memory_transport.hpp) beyond
// the Transport contract that test_transport.cpp checks on every wire:
// which peers take the lanes, full rings, peers that die with records in
// flight, and groups that mix lanes with network peers.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cluster.hpp"
#include "common/error.hpp"
#include "engine/peer_watch.hpp"
#include "transport/tag.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;
using namespace std::chrono_literals;

namespace {

std::vector<uint8_t> pattern(std::size_t bytes, int seed) {
  std::vector<uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<uint8_t>((i * 151 + static_cast<std::size_t>(seed) * 13) & 0xff);
  }
  return data;
}

const uint64_t kTag = tag::pointToPoint(1, 9, 0);

// Progress `transports` until `done()`; false after `bound`.
template <typename Done>
bool progressUntil(const std::vector<Transport*>& transports, Done done, std::chrono::seconds bound = 30s) {
  const auto giveUp = Clock::now() + bound;
  while (!done()) {
    if (Clock::now() > giveUp) {
      return false;
    }
    for (Transport* transport : transports) {
      transport->progress();
    }
  }
  return true;
}

bool allEnded(const std::vector<std::unique_ptr<Recorded>>& transfers) {
  return std::all_of(transfers.begin(), transfers.end(), [](const auto& t) { return t->ended; });
}

}  // namespace

TEST_CASE("shared memory: peers on this host take the lanes, peers on another host the network", "[shm]") {
  for (Wire wire : {Wire::SharedMemory, Wire::SharedMemoryUcx}) {
    DYNAMIC_SECTION(wireName(wire)) {
      LoopbackFabric fabric;
      auto a = makeTransport(wire, fabric);
      auto b = makeTransport(wire, fabric);
      auto& shm = dynamic_cast<SharedMemoryTransport&>(*a);
      PeerHandle near = a->connect(b->address(), PeerLocation::ThisHost);
      PeerHandle self = a->connect(a->address(), PeerLocation::ThisHost);
      CHECK(shm.sharesMemoryWith(near));
      CHECK(shm.sharesMemoryWith(self));
      // A second transport for the same peer, told it is on another host
      // (what a group with onOtherHost does): the network lane.
      auto c = makeTransport(wire, fabric);
      PeerHandle far = a->connect(c->address(), PeerLocation::OtherHost);
      CHECK_FALSE(shm.sharesMemoryWith(far));
      // Both kinds of lane carry messages, and the receiver matches them
      // the same way.
      PeerHandle cToA = c->connect(a->address(), PeerLocation::OtherHost);
      const int fromNear = 11, fromFar = 22;
      int got[2] = {0, 0};
      Recorded s0, s1, r0, r1;
      a->recv(nullptr, kTag, tag::kMatchAll, &got[0], sizeof(int), r0);
      a->recv(nullptr, kTag + 1, tag::kMatchAll, &got[1], sizeof(int), r1);
      PeerHandle bToA = b->connect(a->address(), PeerLocation::ThisHost);
      b->send(bToA, kTag, &fromNear, sizeof(int), SendMode::Standard, s0);
      c->send(cToA, kTag + 1, &fromFar, sizeof(int), SendMode::Standard, s1);
      REQUIRE(progressUntil({a.get(), b.get(), c.get()}, [&] { return s0.ended && s1.ended && r0.ended && r1.ended; }));
      CHECK(r0.result.status == TransferStatus::Ok);
      CHECK(r1.result.status == TransferStatus::Ok);
      CHECK(got[0] == 11);
      CHECK(got[1] == 22);
    }
  }
}

TEST_CASE("shared memory: a full ring queues sends, which arrive intact and in order once the receiver reads",
          "[shm]") {
  for (Wire wire : {Wire::SharedMemory, Wire::SharedMemoryUcx}) {
    DYNAMIC_SECTION(wireName(wire)) {
      LoopbackFabric fabric;
      auto a = makeTransport(wire, fabric);
      auto b = makeTransport(wire, fabric);
      PeerHandle aToB = a->connect(b->address(), PeerLocation::ThisHost);
      b->connect(a->address(), PeerLocation::ThisHost);
      // Far more than one ring holds, mixing inline messages of every size,
      // synchronous ones and larger ones that go as notes plus the network.
      const std::vector<std::size_t> sizes{kInlineBytes, 8, kInlineBytes - 1, 0, kInlineBytes + 1, 1 << 20, 4096};
      std::vector<std::vector<uint8_t>> payloads;
      std::vector<std::unique_ptr<Recorded>> sends, recvs;
      std::vector<SendMode> modes;
      for (int i = 0; i < 60; ++i) {
        payloads.push_back(pattern(sizes[static_cast<std::size_t>(i) % sizes.size()], i));
        modes.push_back(i % 5 == 0 ? SendMode::Synchronous : SendMode::Standard);
        auto& send = *sends.emplace_back(std::make_unique<Recorded>());
        // One tag for all: only the order tells which message is which.
        a->send(aToB, kTag, payloads.back().data(), payloads.back().size(), modes.back(), send);
      }
      // Nothing is read yet: the synchronous sends cannot have ended.
      for (int pass = 0; pass < 200; ++pass) {
        a->progress();
      }
      for (std::size_t i = 0; i < sends.size(); ++i) {
        if (modes[i] == SendMode::Synchronous) {
          INFO("send " << i);
          CHECK_FALSE(sends[i]->ended);
        }
      }
      std::vector<std::vector<uint8_t>> received;
      for (const auto& payload : payloads) {
        received.emplace_back(payload.size() + 16, 0xee);
        auto& recv = *recvs.emplace_back(std::make_unique<Recorded>());
        b->recv(nullptr, kTag, tag::kMatchAll, received.back().data(), received.back().size(), recv);
      }
      REQUIRE(progressUntil({a.get(), b.get()}, [&] { return allEnded(sends) && allEnded(recvs); }));
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        INFO("message " << i << " of " << payloads[i].size() << " B");
        CHECK(sends[i]->result.status == TransferStatus::Ok);
        REQUIRE(recvs[i]->result.status == TransferStatus::Ok);
        REQUIRE(recvs[i]->result.length == payloads[i].size());
        CHECK(std::equal(payloads[i].begin(), payloads[i].end(), received[i].begin()));
        // Bytes past the message are untouched.
        CHECK(std::all_of(received[i].begin() + static_cast<std::ptrdiff_t>(payloads[i].size()), received[i].end(),
                          [](uint8_t byte) { return byte == 0xee; }));
      }
    }
  }
}

TEST_CASE("shared memory: sends to a receiver that died end PeerLost once it is reported gone, and other lanes go on",
          "[shm][errors]") {
  for (Wire wire : {Wire::SharedMemory, Wire::SharedMemoryUcx}) {
    DYNAMIC_SECTION(wireName(wire)) {
      LoopbackFabric fabric;
      auto a = makeTransport(wire, fabric);
      auto dying = makeTransport(wire, fabric);
      auto c = makeTransport(wire, fabric);
      PeerHandle aToDying = a->connect(dying->address(), PeerLocation::ThisHost);
      PeerHandle aToC = a->connect(c->address(), PeerLocation::ThisHost);
      c->connect(a->address(), PeerLocation::ThisHost);
      dying->connect(a->address(), PeerLocation::ThisHost);
      dying.reset();  // its inbox stays mapped here; nobody reads it any more
      const auto payload = pattern(kInlineBytes, 3);
      std::vector<std::unique_ptr<Recorded>> sends;
      for (int i = 0; i < 12; ++i) {  // more than its ring holds: some are queued
        auto& send = *sends.emplace_back(std::make_unique<Recorded>());
        a->send(aToDying, kTag, payload.data(), payload.size(), i == 0 ? SendMode::Synchronous : SendMode::Standard,
                send);
      }
      for (int pass = 0; pass < 200; ++pass) {
        a->progress();
      }
      // The synchronous one waits for an ack that will never come, the
      // queued ones for room: none may end as if delivered after the death
      // is known, and none may hang after it.
      CHECK_FALSE(sends[0]->ended);
      CHECK_FALSE(sends.back()->ended);
      a->peerGone(aToDying);
      REQUIRE(progressUntil({a.get()}, [&] { return allEnded(sends); }));
      CHECK(sends[0]->result.status == TransferStatus::PeerLost);
      CHECK(sends.back()->result.status == TransferStatus::PeerLost);
      CHECK_THAT(sends.back()->result.detail, Catch::Matchers::Contains("is gone"));
      Recorded late;
      a->send(aToDying, kTag, payload.data(), 8, SendMode::Standard, late);
      REQUIRE(late.ended);
      CHECK(late.result.status == TransferStatus::PeerLost);

      // The survivor's lane to another peer is unaffected.
      std::vector<uint8_t> got(payload.size());
      Recorded toC, atC;
      c->recv(nullptr, kTag, tag::kMatchAll, got.data(), got.size(), atC);
      a->send(aToC, kTag, payload.data(), payload.size(), SendMode::Synchronous, toC);
      REQUIRE(progressUntil({a.get(), c.get()}, [&] { return toC.ended && atC.ended; }));
      CHECK(toC.result.status == TransferStatus::Ok);
      CHECK(atC.result.status == TransferStatus::Ok);
      CHECK(got == payload);
    }
  }
}

TEST_CASE("shared memory: what a sender published before it died is read intact, and nothing more", "[shm][errors]") {
  LoopbackFabric fabric;
  auto a = makeTransport(Wire::SharedMemory, fabric);
  auto dying = makeTransport(Wire::SharedMemory, fabric);
  a->connect(dying->address(), PeerLocation::ThisHost);
  PeerHandle toA = dying->connect(a->address(), PeerLocation::ThisHost);
  std::vector<std::vector<uint8_t>> payloads{pattern(8, 1), pattern(kInlineBytes, 2), pattern(100, 3)};
  std::vector<std::unique_ptr<Recorded>> sends;
  for (const auto& payload : payloads) {
    auto& send = *sends.emplace_back(std::make_unique<Recorded>());
    dying->send(toA, kTag, payload.data(), payload.size(), SendMode::Standard, send);
  }
  REQUIRE(progressUntil({dying.get()}, [&] { return allEnded(sends); }));
  dying.reset();
  for (const auto& payload : payloads) {
    std::vector<uint8_t> got(kInlineBytes);
    Recorded recv;
    a->recv(nullptr, kTag, tag::kMatchAll, got.data(), got.size(), recv);
    REQUIRE(progressUntil({a.get()}, [&] { return recv.ended; }));
    REQUIRE(recv.result.status == TransferStatus::Ok);
    REQUIRE(recv.result.length == payload.size());
    CHECK(std::equal(payload.begin(), payload.end(), got.begin()));
  }
  // Nothing else came from it: a fourth receive stays posted.
  int extra = 0;
  Recorded fourth;
  a->recv(nullptr, kTag, tag::kMatchAll, &extra, sizeof(extra), fourth);
  for (int pass = 0; pass < 200; ++pass) {
    a->progress();
  }
  CHECK_FALSE(fourth.ended);
  CHECK_FALSE(a->probe(kTag, tag::kMatchAll).has_value());
  a->cancel(fourth);
  REQUIRE(fourth.ended);
  CHECK(fourth.result.status == TransferStatus::Canceled);
}

TEST_CASE("shared memory: a group mixing lanes and network peers computes what one host computes", "[shm]") {
  // Six processes on two simulated hosts: lanes within a host, the network
  // (UCX) between them; every algorithm's messages cross both.
  Cluster cluster(6, Wire::SharedMemoryUcx);
  auto group = cluster.makeGroup("mixed", {}, {}, {0, 0, 0, 1, 1, 1});
  for (std::size_t count : {std::size_t{3}, std::size_t{20000}, std::size_t{300000}}) {
    DYNAMIC_SECTION(count << " floats") {
      std::vector<std::vector<float>> data(6);
      std::vector<std::vector<float>> gathered(6, std::vector<float>(count * 6));
      auto failures = runRanks(6, [&](int rank) {
        data[rank].assign(count, static_cast<float>(rank + 1));
        for (std::size_t i = 0; i < count; ++i) {
          data[rank][i] += static_cast<float>(i % 7);
        }
        float* buffer = data[rank].data();
        submitCollective(cluster.engine(rank), group[rank], "all_reduce", [&, buffer](Collective& c) {
          return selectAllreduce(c, buffer, count, DataType::Float32, Reduction::Sum);
        }).wait();
        std::vector<void*> outputs;
        for (int r = 0; r < 6; ++r) {
          outputs.push_back(gathered[rank].data() + count * static_cast<std::size_t>(r));
        }
        submitCollective(cluster.engine(rank), group[rank], "all_gather", [&, buffer, outputs](Collective& c) {
          return selectAllgather(c, buffer, outputs, count * sizeof(float));
        }).wait();
      });
      REQUIRE(failures.empty());
      // 1+2+...+6 plus six times i % 7.
      std::vector<float> expected(count);
      for (std::size_t i = 0; i < count; ++i) {
        expected[i] = 21.0f + 6.0f * static_cast<float>(i % 7);
      }
      for (int rank = 0; rank < 6; ++rank) {
        INFO("rank " << rank);
        CHECK(data[rank] == expected);
        for (int r = 0; r < 6; ++r) {
          INFO("block " << r);
          auto block = gathered[rank].begin() + static_cast<std::ptrdiff_t>(count) * r;
          CHECK(std::equal(expected.begin(), expected.end(), block));
        }
      }
    }
  }
}

TEST_CASE("shared memory: a peer that dies mid-operation fails the survivors with its rank, and no one hangs",
          "[shm][errors][peers]") {
  for (Wire wire : {Wire::SharedMemory, Wire::SharedMemoryUcx}) {
    DYNAMIC_SECTION(wireName(wire)) {
      // Ranks 0-2 are engines of this process; rank 3 "is" a child
      // process. Rank 3's engine takes part in the first all_reduce (its
      // lanes are open and used) and then falls silent, as a process killed
      // mid-operation does; the child is killed while the survivors wait.
      SleepingChild rank3;
      Cluster cluster(4, wire);
      const std::vector<ProcessIdentity> processes{thisProcess(), thisProcess(), thisProcess(), rank3.identity()};
      auto group = cluster.makeGroup("g", {}, processes);
      std::vector<std::vector<float>> data(4, std::vector<float>(1000, 1.0f));
      auto body = [&](int rank) {
        float* buffer = data[static_cast<std::size_t>(rank)].data();
        return [buffer](Collective& c) { return selectAllreduce(c, buffer, 1000, DataType::Float32, Reduction::Sum); };
      };
      REQUIRE(runRanks(4, [&](int rank) {
                submitCollective(cluster.engine(rank), group[rank], "all_reduce", body(rank)).wait();
              }).empty());
      REQUIRE(data[0][999] == 4.0f);
      std::vector<Submitted> pending;
      for (int rank : {0, 1, 2}) {
        pending.push_back(submitCollective(cluster.engine(rank), group[rank], "all_reduce", body(rank)));
      }
      std::this_thread::sleep_for(20ms);  // the survivors are inside it
      rank3.kill();
      for (int rank : {0, 1, 2}) {
        INFO("rank " << rank);
        // The deadline is 120 s: only the death ends it sooner.
        REQUIRE_THROWS_AS(pending[static_cast<std::size_t>(rank)].wait(), PeerGoneError);
        CHECK_THAT(
            messageOf<PeerGoneError>([&] { pending[static_cast<std::size_t>(rank)].wait(); }),
            Catch::Matchers::Contains("rank 3 (pid " + std::to_string(processes[3].pid) + ") of group \"g\" died"));
      }
      // The survivors' lanes still work for a group without the dead rank.
      auto rest = cluster.makeGroup("rest", {0, 1, 2});
      std::vector<std::vector<float>> values(3, std::vector<float>(50000, 2.0f));
      REQUIRE(runRanks(3, [&](int rank) {
                float* buffer = values[static_cast<std::size_t>(rank)].data();
                submitCollective(cluster.engine(rank), rest[rank], "all_reduce", [buffer](Collective& c) {
                  return selectAllreduce(c, buffer, 50000, DataType::Float32, Reduction::Sum);
                }).wait();
              }).empty());
      for (const auto& v : values) {
        CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 6.0f; }));
      }
    }
  }
}
