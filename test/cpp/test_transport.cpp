// The Transport contract, checked on both implementations (real UCX and the
// loopback used by the engine tests), from one thread that progresses both
// "processes".

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cluster.hpp"
#include "common/error.hpp"
#include "transport/tag.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;
using namespace std::chrono_literals;

namespace {

struct Pair {
  std::unique_ptr<LoopbackFabric> fabric;
  std::unique_ptr<Transport> a;
  std::unique_ptr<Transport> b;
  PeerHandle aToB = nullptr;
  PeerHandle bToA = nullptr;
  PeerHandle aToA = nullptr;

  explicit Pair(Wire wire, LoopbackOptions options = {}) : fabric(std::make_unique<LoopbackFabric>(options)) {
    a = makeTransport(wire, *fabric);
    b = makeTransport(wire, *fabric);
    aToB = a->connect(b->address(), PeerLocation::ThisHost);
    bToA = b->connect(a->address(), PeerLocation::ThisHost);
    aToA = a->connect(a->address(), PeerLocation::ThisHost);
  }

  // Progress both until `done()` or a bound.
  template <typename Fn>
  bool progressUntil(Fn done, std::chrono::seconds bound = std::chrono::seconds(30)) {
    auto giveUp = Clock::now() + bound;
    while (!done()) {
      if (Clock::now() > giveUp) {
        return false;
      }
      a->progress();
      b->progress();
    }
    return true;
  }
  void progressFor(std::chrono::milliseconds time) {
    auto until = Clock::now() + time;
    while (Clock::now() < until) {
      a->progress();
      b->progress();
    }
  }
};

std::vector<uint8_t> pattern(std::size_t bytes, int seed) {
  std::vector<uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<uint8_t>((i * 131 + static_cast<std::size_t>(seed) * 7) & 0xff);
  }
  return data;
}

const uint64_t kTag = tag::pointToPoint(1, 5, 0);

}  // namespace

TEST_CASE("transport: payloads from 0 B to 64 MiB arrive intact, whichever side posts first", "[transport]") {
  for (Wire wire : kAllWires) {
    for (bool receiveFirst : {true, false}) {
      DYNAMIC_SECTION(wireName(wire) << (receiveFirst ? ", receive posted first" : ", send posted first")) {
        Pair pair(wire);
        for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{65539},
                                  std::size_t{1} << 20, std::size_t{64} << 20}) {
          auto data = pattern(bytes, static_cast<int>(bytes % 7));
          std::vector<uint8_t> received(bytes, 0);
          Recorded send, recv;
          if (receiveFirst) {
            pair.b->recv(nullptr, kTag, tag::kMatchAll, received.data(), bytes, recv);
            pair.a->send(pair.aToB, kTag, data.data(), bytes, SendMode::Standard, send);
          } else {
            pair.a->send(pair.aToB, kTag, data.data(), bytes, SendMode::Standard, send);
            pair.progressFor(std::chrono::milliseconds(1));
            pair.b->recv(nullptr, kTag, tag::kMatchAll, received.data(), bytes, recv);
          }
          REQUIRE(pair.progressUntil([&] { return send.ended && recv.ended; }));
          CHECK(send.result.status == TransferStatus::Ok);
          CHECK(recv.result.status == TransferStatus::Ok);
          CHECK(recv.result.length == bytes);
          CHECK(recv.result.senderTag == kTag);
          CHECK(received == data);
        }
      }
    }
  }
}

TEST_CASE("transport: a message larger than the buffer ends Truncated with its real size", "[transport][errors]") {
  for (Wire wire : kAllWires) {
    for (std::size_t sent : {std::size_t{64}, std::size_t{4} << 20}) {
      DYNAMIC_SECTION(wireName(wire) << ", " << sent << " bytes into a smaller buffer") {
        Pair pair(wire);
        auto data = pattern(sent, 1);
        std::vector<uint8_t> buffer(sent / 2);
        Recorded send, recv;
        pair.b->recv(nullptr, kTag, tag::kMatchAll, buffer.data(), buffer.size(), recv);
        pair.a->send(pair.aToB, kTag, data.data(), sent, SendMode::Standard, send);
        REQUIRE(pair.progressUntil([&] { return send.ended && recv.ended; }));
        CHECK(recv.result.status == TransferStatus::Truncated);
        // UCX 1.13 and 1.22 both report the sender's size, so errors can
        // name both sizes.
        CHECK(recv.result.length == sent);
      }
    }
  }
}

TEST_CASE("transport: a smaller message ends Ok with its length", "[transport]") {
  for (Wire wire : kAllWires) {
    Pair pair(wire);
    auto data = pattern(10, 2);
    std::vector<uint8_t> buffer(100);
    Recorded send, recv;
    pair.b->recv(nullptr, kTag, tag::kMatchAll, buffer.data(), buffer.size(), recv);
    pair.a->send(pair.aToB, kTag, data.data(), data.size(), SendMode::Standard, send);
    REQUIRE(pair.progressUntil([&] { return send.ended && recv.ended; }));
    CHECK(recv.result.status == TransferStatus::Ok);
    CHECK(recv.result.length == 10);
  }
}

TEST_CASE("transport: equal tags from one sender match in send order", "[transport]") {
  for (Wire wire : kAllWires) {
    DYNAMIC_SECTION(wireName(wire)) {
      Pair pair(wire, LoopbackOptions{.seed = 3, .maxDelay = 5, .reorder = true});
      constexpr int kMessages = 50;
      std::vector<std::vector<uint8_t>> data;
      std::vector<std::vector<uint8_t>> received(kMessages);
      std::vector<Recorded> sends(kMessages), recvs(kMessages);
      for (int i = 0; i < kMessages; ++i) {
        // Mixed sizes: eager and rendezvous messages keep their order too.
        data.push_back(pattern(i % 5 == 0 ? (1 << 20) : 100, i));
        received[i].resize(data[i].size());
      }
      for (int i = 0; i < kMessages; ++i) {
        pair.a->send(pair.aToB, kTag, data[i].data(), data[i].size(), SendMode::Standard, sends[i]);
        if (i % 2 == 0) {
          pair.progressFor(std::chrono::milliseconds(1));
        }
      }
      for (int i = 0; i < kMessages; ++i) {
        pair.b->recv(nullptr, kTag, tag::kMatchAll, received[i].data(), received[i].size(), recvs[i]);
      }
      REQUIRE(pair.progressUntil([&] {
        for (int i = 0; i < kMessages; ++i) {
          if (!sends[i].ended || !recvs[i].ended) {
            return false;
          }
        }
        return true;
      }));
      for (int i = 0; i < kMessages; ++i) {
        CHECK(recvs[i].result.status == TransferStatus::Ok);
        CHECK(received[i] == data[i]);
      }
    }
  }
}

TEST_CASE("transport: a masked receive takes any sender and reports its tag", "[transport]") {
  for (Wire wire : kAllWires) {
    Pair pair(wire);
    uint64_t sent = tag::pointToPoint(1, 42, 7);
    int value = 99, received = 0;
    Recorded send, recv;
    pair.a->recv(nullptr, tag::pointToPoint(1, 42, 0), tag::kMatchAnySender, &received, sizeof(received), recv);
    pair.b->send(pair.bToA, sent, &value, sizeof(value), SendMode::Standard, send);
    REQUIRE(pair.progressUntil([&] { return send.ended && recv.ended; }));
    CHECK(received == 99);
    CHECK(tag::sender(recv.result.senderTag) == 7);
  }
}

TEST_CASE("transport: a synchronous send ends only once the receiver matched it", "[transport]") {
  for (Wire wire : kAllWires) {
    DYNAMIC_SECTION(wireName(wire)) {
      Pair pair(wire);
      int value = 5, received = 0;
      Recorded send, recv;
      pair.a->send(pair.aToB, kTag, &value, sizeof(value), SendMode::Synchronous, send);
      pair.progressFor(std::chrono::milliseconds(50));
      CHECK_FALSE(send.ended);
      pair.b->recv(nullptr, kTag, tag::kMatchAll, &received, sizeof(received), recv);
      REQUIRE(pair.progressUntil([&] { return send.ended && recv.ended; }));
      CHECK(send.result.status == TransferStatus::Ok);
      CHECK(received == 5);
    }
  }
}

TEST_CASE("transport: probe sees an unmatched message without taking it; discard drops it", "[transport]") {
  for (Wire wire : kAllWires) {
    DYNAMIC_SECTION(wireName(wire)) {
      Pair pair(wire);
      std::vector<uint8_t> big(1 << 20, 3);
      int small = 4;
      Recorded sendBig, sendSmall;
      uint64_t bigTag = tag::pointToPoint(2, 1, 0);
      uint64_t smallTag = tag::pointToPoint(3, 1, 0);
      pair.a->send(pair.aToB, bigTag, big.data(), big.size(), SendMode::Standard, sendBig);
      pair.a->send(pair.aToB, smallTag, &small, sizeof(small), SendMode::Standard, sendSmall);
      std::optional<ProbedMessage> probed;
      REQUIRE(pair.progressUntil([&] { return (probed = pair.b->probe(bigTag, tag::kMatchAll)).has_value(); }));
      CHECK(probed->senderTag == bigTag);
      CHECK(probed->length == big.size());
      CHECK(pair.b->probe(bigTag, tag::kMatchAll).has_value());  // still there
      REQUIRE(pair.progressUntil([&] { return pair.b->probe(smallTag, tag::kMatchAll).has_value(); }));
      // Drop everything of channel 2; channel 3's message stays.
      uint64_t channelMask = tag::kChannelFieldsMask & ~(uint64_t{3} << tag::kKindShift);
      CHECK(pair.b->discard(uint64_t{2} << tag::kChannelShift, channelMask) == 1);
      CHECK_FALSE(pair.b->probe(bigTag, tag::kMatchAll).has_value());
      CHECK(pair.b->probe(smallTag, tag::kMatchAll).has_value());
      REQUIRE(pair.progressUntil([&] { return sendBig.ended && sendSmall.ended; }));
      CHECK(pair.b->discard(smallTag, tag::kMatchAll) == 1);
    }
  }
}

TEST_CASE("transport: with a job key, only messages sent under the same key match", "[transport][errors]") {
  Pair pair(Wire::Ucx);
  pair.a->setJobKey(0x0123456789abcdefULL);
  pair.b->setJobKey(0x0123456789abcdefULL);
  const uint64_t sent = tag::pointToPoint(1, 42, 7);
  int value = 1, received = 0;
  {
    Recorded send, recv;
    pair.b->recv(nullptr, tag::pointToPoint(1, 42, 0), tag::kMatchAnySender, &received, sizeof(received), recv);
    pair.a->send(pair.aToB, sent, &value, sizeof(value), SendMode::Standard, send);
    REQUIRE(pair.progressUntil([&] { return send.ended && recv.ended; }));
    CHECK(received == 1);
    CHECK(recv.result.senderTag == sent);  // the receiver sees the tag as sent, not as on the wire
  }
  // A sender with another key (a process outside the job that learned the
  // worker's address): neither an exact nor a masked receive takes its
  // message, nor does a probe for its tag see it.
  pair.a->setJobKey(0xfedcba9876543210ULL);
  value = 2;
  Recorded send, exact, anySender;
  int exactBuffer = 0;
  pair.b->recv(nullptr, sent, tag::kMatchAll, &exactBuffer, sizeof(exactBuffer), exact);
  pair.b->recv(nullptr, tag::pointToPoint(1, 42, 0), tag::kMatchAnySender, &received, sizeof(received), anySender);
  pair.a->send(pair.aToB, sent, &value, sizeof(value), SendMode::Standard, send);
  REQUIRE(pair.progressUntil([&] { return send.ended; }));
  pair.progressFor(std::chrono::milliseconds(100));
  CHECK_FALSE(exact.ended);
  CHECK_FALSE(anySender.ended);
  CHECK_FALSE(pair.b->probe(sent, tag::kMatchAll).has_value());
  CHECK(received == 1);
  // It is there, under a tag that is none of ours; dropping it is all
  // that can happen to it.
  auto stray = pair.b->probe(0, 0);
  REQUIRE(stray.has_value());
  CHECK(stray->senderTag != sent);
  CHECK(pair.b->discard(0, 0) == 1);
  pair.b->cancel(exact);
  pair.b->cancel(anySender);
  REQUIRE(pair.progressUntil([&] { return exact.ended && anySender.ended; }));
  CHECK(exact.result.status == TransferStatus::Canceled);
  CHECK(anySender.result.status == TransferStatus::Canceled);
}

TEST_CASE("transport: a canceled receive ends Canceled", "[transport]") {
  for (Wire wire : kAllWires) {
    Pair pair(wire);
    int value = 0;
    Recorded recv;
    pair.b->recv(nullptr, kTag, tag::kMatchAll, &value, sizeof(value), recv);
    pair.progressFor(std::chrono::milliseconds(1));
    CHECK_FALSE(recv.ended);
    pair.b->cancel(recv);
    REQUIRE(pair.progressUntil([&] { return recv.ended; }));
    CHECK(recv.result.status == TransferStatus::Canceled);
  }
}

TEST_CASE("transport: a process can send to itself", "[transport]") {
  for (Wire wire : kAllWires) {
    Pair pair(wire);
    auto data = pattern(1000, 3);
    std::vector<uint8_t> received(1000);
    Recorded send, recv;
    pair.a->recv(nullptr, kTag, tag::kMatchAll, received.data(), received.size(), recv);
    pair.a->send(pair.aToA, kTag, data.data(), data.size(), SendMode::Standard, send);
    REQUIRE(pair.progressUntil([&] { return send.ended && recv.ended; }));
    CHECK(received == data);
  }
}

TEST_CASE("loopback: delays and reordering interleave senders but never reorder one sender", "[transport]") {
  LoopbackFabric fabric(LoopbackOptions{.seed = 11, .maxDelay = 8, .reorder = true});
  auto receiver = fabric.attach();
  std::vector<std::unique_ptr<LoopbackTransport>> senders;
  for (int s = 0; s < 4; ++s) {
    senders.push_back(fabric.attach());
  }
  constexpr int kEach = 20;
  std::vector<Recorded> sends(4 * kEach);
  std::vector<int> values(4 * kEach);
  for (int i = 0; i < kEach; ++i) {
    for (int s = 0; s < 4; ++s) {
      values[s * kEach + i] = s * 1000 + i;
      PeerHandle peer = senders[s]->connect(receiver->address(), PeerLocation::ThisHost);
      senders[s]->send(peer, tag::pointToPoint(1, 0, static_cast<uint32_t>(s)), &values[s * kEach + i], sizeof(int),
                       SendMode::Standard, sends[s * kEach + i]);
    }
  }
  std::vector<int> arrivals;
  std::vector<Recorded> recvs(4 * kEach);
  std::vector<int> slots(4 * kEach);
  for (int i = 0; i < 4 * kEach; ++i) {
    receiver->recv(nullptr, tag::pointToPoint(1, 0, 0), tag::kMatchAnySender, &slots[i], sizeof(int), recvs[i]);
  }
  for (int round = 0; round < 10000 && arrivals.size() < slots.size(); ++round) {
    receiver->progress();
    while (arrivals.size() < slots.size() && recvs[arrivals.size()].ended) {
      arrivals.push_back(slots[arrivals.size()]);
    }
  }
  REQUIRE(arrivals.size() == slots.size());
  std::vector<int> next(4, 0);
  bool interleaved = false;
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    int sender = arrivals[i] / 1000;
    CHECK(arrivals[i] % 1000 == next[sender]++);  // one sender: in order
    if (i > 0 && sender < arrivals[i - 1] / 1000) {
      interleaved = true;
    }
  }
  CHECK(interleaved);  // senders: mixed
}

TEST_CASE("ucx transport: a completion reported on another thread ends on the next progress, on its caller",
          "[transport]") {
  // What UCX's async thread would do if it ended a request: the transfer
  // must not be touched there, only on the thread that progresses.
  struct ThreadRecorded final : Transfer {
    bool ended = false;
    std::thread::id endedOn;
    TransferResult result;
    void transferDone(const TransferResult& r) override {
      ended = true;
      endedOn = std::this_thread::get_id();
      result = r;
    }
  };
  UcxTransport transport;
  ThreadRecorded transfer;
  transfer.inFlight = true;
  transfer.carrier = &transport;
  TransferResult reported;
  reported.length = 7;
  reported.senderTag = kTag;
  std::thread([&] { deferCompletion(transfer, reported); }).join();
  CHECK_FALSE(transfer.ended);
  CHECK_FALSE(transfer.inFlight);
  CHECK(transport.progress() >= 1);
  REQUIRE(transfer.ended);
  CHECK(transfer.endedOn == std::this_thread::get_id());
  CHECK(transfer.result.status == TransferStatus::Ok);
  CHECK(transfer.result.length == 7);
  CHECK(transfer.result.senderTag == kTag);
}

TEST_CASE(
    "ucx transport: a send to a gone peer on another host ends PeerLost, the peer is reported failed, and a later "
    "connect makes a new endpoint",
    "[transport][errors]") {
  // Over a network lane (what PeerLocation::OtherHost selects), a peer whose
  // worker is gone breaks the connection; the transfers on it must say so
  // (PeerLost), not fail as an unexplained transport error.
  UcxTransport sender;
  auto receiver = std::make_unique<UcxTransport>();
  const std::vector<uint8_t> receiverAddress = receiver->address();
  PeerHandle toReceiver = sender.connect(receiverAddress, PeerLocation::OtherHost);
  const int value = 42;
  int received = 0;
  Recorded first;
  Recorded arrival;
  receiver->recv(nullptr, kTag, ~uint64_t{0}, &received, sizeof(received), arrival);
  sender.send(toReceiver, kTag, &value, sizeof(value), SendMode::Standard, first);
  auto giveUp = Clock::now() + 10s;
  while (!(first.ended && arrival.ended)) {
    REQUIRE(Clock::now() < giveUp);
    sender.progress();
    receiver->progress();
  }
  REQUIRE(arrival.result.status == TransferStatus::Ok);
  REQUIRE(received == 42);

  receiver.reset();
  // Sends until one ends: those handed over before the break may still end
  // Ok (UCX had buffered them); the first that fails must be PeerLost.
  std::vector<std::unique_ptr<Recorded>> sends;
  TransferStatus failedWith = TransferStatus::Ok;
  std::string detail;
  giveUp = Clock::now() + 20s;
  while (failedWith == TransferStatus::Ok) {
    REQUIRE(Clock::now() < giveUp);
    auto& send = *sends.emplace_back(std::make_unique<Recorded>());
    sender.send(toReceiver, kTag, &value, sizeof(value), SendMode::Synchronous, send);
    for (int pass = 0; pass < 100; ++pass) {
      sender.progress();
    }
    for (const auto& earlier : sends) {
      if (earlier->ended && earlier->result.status != TransferStatus::Ok && failedWith == TransferStatus::Ok) {
        failedWith = earlier->result.status;
        detail = earlier->result.detail;
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  CHECK(failedWith == TransferStatus::PeerLost);
  CHECK_FALSE(detail.empty());
  // The endpoint's error handler reports the peer as failed too.
  giveUp = Clock::now() + 10s;
  while (!sender.hasFailedPeers()) {
    REQUIRE(Clock::now() < giveUp);
    sender.progress();
    std::this_thread::sleep_for(1ms);
  }
  const std::vector<PeerFailure> failures = sender.takeFailedPeers();
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].peer == toReceiver);
  // A failed endpoint is not handed out again: a later connect to the same
  // address (a new group once the link is back) makes a new endpoint, which
  // UCX refuses here since that worker is gone (the cached failed one would
  // have been returned without a word).
  CHECK_THROWS_AS(sender.connect(receiverAddress, PeerLocation::OtherHost), ucxcoll::Error);
  // Everything posted must have ended before the sends go out of scope.
  giveUp = Clock::now() + 10s;
  while (!std::all_of(sends.begin(), sends.end(), [](const auto& send) { return send->ended; })) {
    REQUIRE(Clock::now() < giveUp);
    sender.progress();
  }
}

TEST_CASE(
    "ucx transport: a peer on another host that closes says farewell first: what it sent still arrives, and it is "
    "reported as departed, once, not failed",
    "[transport][errors]") {
  // A rank that finishes its last collective first and shuts down used to
  // close its connections while a peer still read what it had sent; the
  // peer saw "Connection reset by remote peer" and failed.
  auto leaver = std::make_unique<UcxTransport>();
  UcxTransport stayer;
  PeerHandle toStayer = leaver->connect(stayer.address(), PeerLocation::OtherHost);
  PeerHandle toLeaver = stayer.connect(leaver->address(), PeerLocation::OtherHost);
  auto exchange = [&](Transport& from, PeerHandle to, Transport& at, uint64_t tag, int value) {
    int received = 0;
    Recorded send;
    Recorded arrival;
    at.recv(nullptr, tag, tag::kMatchAll, &received, sizeof(received), arrival);
    from.send(to, tag, &value, sizeof(value), SendMode::Standard, send);
    const auto giveUp = Clock::now() + 10s;
    while (!(send.ended && arrival.ended)) {
      REQUIRE(Clock::now() < giveUp);
      from.progress();
      at.progress();
    }
    REQUIRE(arrival.result.status == TransferStatus::Ok);
    REQUIRE(received == value);
  };
  // Connected both ways, as in a group.
  exchange(*leaver, toStayer, stayer, kTag, 7);
  exchange(stayer, toLeaver, *leaver, kTag, 8);

  // Three messages nobody has asked for yet, then the leaver closes (on
  // another thread: it waits for the stayer's acknowledgement, which the
  // stayer sends from its progress here).
  const int values[] = {11, 12, 13};
  std::vector<Recorded> sends(3);
  for (int i = 0; i < 3; ++i) {
    leaver->send(toStayer, kTag + 1 + static_cast<uint64_t>(i), &values[i], sizeof(int), SendMode::Standard,
                 sends[static_cast<std::size_t>(i)]);
  }
  auto giveUp = Clock::now() + 10s;
  while (!std::all_of(sends.begin(), sends.end(), [](const Recorded& send) { return send.ended; })) {
    REQUIRE(Clock::now() < giveUp);
    leaver->progress();
    stayer.progress();
  }
  std::thread closer([&] { leaver.reset(); });
  std::vector<PeerFailure> reported;
  giveUp = Clock::now() + 10s;
  while (reported.empty() && Clock::now() < giveUp) {
    stayer.progress();
    for (PeerFailure& failure : stayer.takeFailedPeers()) {
      reported.push_back(std::move(failure));
    }
    std::this_thread::sleep_for(1ms);
  }
  closer.join();
  REQUIRE(reported.size() == 1);
  CHECK(reported[0].peer == toLeaver);
  CHECK(reported[0].departed);
  CHECK(reported[0].detail.find("closed ucxcoll") != std::string::npos);
  // The end of the connection that follows is no news.
  const auto settle = Clock::now() + 300ms;
  while (Clock::now() < settle) {
    stayer.progress();
    CHECK(stayer.takeFailedPeers().empty());
    std::this_thread::sleep_for(1ms);
  }
  // Everything the leaver sent before it left is here.
  for (int i = 0; i < 3; ++i) {
    int received = 0;
    Recorded arrival;
    stayer.recv(nullptr, kTag + 1 + static_cast<uint64_t>(i), tag::kMatchAll, &received, sizeof(received), arrival);
    giveUp = Clock::now() + 10s;
    while (!arrival.ended) {
      REQUIRE(Clock::now() < giveUp);
      stayer.progress();
    }
    CHECK(arrival.result.status == TransferStatus::Ok);
    CHECK(received == values[i]);
  }
}
