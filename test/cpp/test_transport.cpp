#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <vector>

#include "common/error.hpp"
#include "rank_threads.hpp"
#include "transport/tag.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;

namespace {

std::vector<uint8_t> pattern(std::size_t bytes, int seed) {
  std::vector<uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<uint8_t>((i * 131 + static_cast<std::size_t>(seed) * 7) & 0xff);
  }
  return data;
}

Deadline soon() {
  return Deadline::after(std::chrono::seconds(30));
}

}  // namespace

TEST_CASE("send/recv between two ranks, 0 B to 64 MiB", "[transport]") {
  const std::vector<std::size_t> sizes{0, 1, 8, 4095, 65536 + 3, 1 << 20, 64u << 20};
  auto failures = runRanks(2, [&](int rank, UcxTransport& t) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::size_t bytes = sizes[i];
      uint64_t tag = tag::make(1, static_cast<uint32_t>(i), 0, static_cast<uint32_t>(rank));
      if (rank == 0) {
        auto data = pattern(bytes, static_cast<int>(i));
        t.postSend(1, tag, data.data(), bytes);
        t.waitAll(soon(), "send");
      } else {
        std::vector<uint8_t> data(bytes, 0);
        t.postRecv(0, tag::make(1, static_cast<uint32_t>(i), 0, 0), data.data(), bytes);
        t.waitAll(soon(), "recv");
        expect(data == pattern(bytes, static_cast<int>(i)), "payload of " + std::to_string(bytes) + " bytes");
      }
    }
  });
  checkNoFailures(failures);
}

TEST_CASE("a rank can send to itself", "[transport]") {
  auto failures = runRanks(1, [](int, UcxTransport& t) {
    auto data = pattern(1000, 3);
    std::vector<uint8_t> received(1000);
    t.postRecv(0, 42, received.data(), received.size());
    t.postSend(0, 42, data.data(), data.size());
    t.waitAll(soon(), "self");
    expect(received == data, "self payload");
  });
  checkNoFailures(failures);
}

TEST_CASE("messages are matched by tag, not by arrival order", "[transport]") {
  auto failures = runRanks(2, [](int rank, UcxTransport& t) {
    std::vector<int> a{1, 2, 3};
    std::vector<int> b{4, 5, 6};
    if (rank == 0) {
      t.postSend(1, tag::make(1, 1, 0, 0), a.data(), 12);
      t.postSend(1, tag::make(1, 2, 0, 0), b.data(), 12);
      t.waitAll(soon(), "send");
    } else {
      std::vector<int> second(3), first(3);
      t.postRecv(0, tag::make(1, 2, 0, 0), second.data(), 12);
      t.postRecv(0, tag::make(1, 1, 0, 0), first.data(), 12);
      t.waitAll(soon(), "recv");
      expect(first == a && second == b, "tag matching");
    }
  });
  checkNoFailures(failures);
}

TEST_CASE("a receive nobody sends to times out naming the silent peer", "[transport][errors]") {
  auto failures = runRanks(3, [](int rank, UcxTransport& t) {
    if (rank != 0) {
      return;
    }
    int value = 0;
    t.postRecv(2, 99, &value, sizeof(value));
    try {
      t.waitAll(Deadline::after(std::chrono::milliseconds(300)), "all_gather #7 on group 1");
    } catch (const TimeoutError& error) {
      std::string text = error.what();
      expect(text.find("all_gather #7 on group 1 timed out") != std::string::npos, text);
      expect(text.find("no data from rank(s) [2]") != std::string::npos, text);
      return;
    }
    throw std::runtime_error("no timeout");
  });
  checkNoFailures(failures);
}

TEST_CASE("a message larger or smaller than the receive buffer is a mismatch", "[transport][errors]") {
  for (std::size_t sent : {std::size_t{64}, std::size_t{16}, std::size_t{1} << 20}) {
    auto failures = runRanks(2, [&](int rank, UcxTransport& t) {
      std::vector<uint8_t> data(sent, 1);
      if (rank == 0) {
        t.postSend(1, 5, data.data(), sent);
        t.waitAll(soon(), "send");
        return;
      }
      std::vector<uint8_t> buffer(32 + (sent > 64 ? (1 << 19) : 0));
      t.postRecv(0, 5, buffer.data(), buffer.size());
      try {
        t.waitAll(soon(), "broadcast #3");
      } catch (const MismatchError& error) {
        std::string text = error.what();
        expect(text.find("broadcast #3: rank 0 sent") != std::string::npos, text);
        return;
      }
      throw std::runtime_error("no mismatch reported for " + std::to_string(sent) + " bytes");
    });
    checkNoFailures(failures);
  }
}

TEST_CASE("abort wakes a blocked wait", "[transport][errors]") {
  auto failures = runRanks(1, [](int, UcxTransport& t) {
    int value = 0;
    t.postRecv(0, 1, &value, sizeof(value));
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t.abort();
    });
    try {
      t.waitAll(Deadline(), "barrier #1");
    } catch (const AbortedError&) {
      aborter.join();
      return;
    }
    aborter.join();
    throw std::runtime_error("abort not reported");
  });
  checkNoFailures(failures);
}
