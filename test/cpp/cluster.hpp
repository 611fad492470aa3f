#pragma once
// Test rig: n simulated processes ("ranks") in this one process, each with
// its own Engine and transport, either real UCX (each rank its own context
// and worker, as separate processes would have) or the loopback transport
// (with delay and reordering injection). Groups are set up the way the
// backend does it, minus the store: channels, addresses, endpoints.
//
// Catch2's assertions are not thread-safe, so code running on rank threads
// throws on failure (expect) and runRanks collects the messages for the
// main thread to report.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collective.hpp"
#include "engine/engine.hpp"
#include "transport/loopback_transport.hpp"
#include "transport/ucx_transport.hpp"

namespace ucxcoll::testing {

enum class Wire { Ucx, Loopback };

inline const char* wireName(Wire wire) {
  return wire == Wire::Ucx ? "UCX" : "loopback";
}

// A group size on a wire: the algorithm tests run every one.
struct Setup {
  Wire wire;
  int ranks;
};

// The largest group the algorithm tests set up: UCXCOLL_TEST_MAX_RANKS if
// set (the sanitizer runs in scripts/dev.sh use it: under ASan a 16-rank
// group on two cores takes minutes per test), else no cap.
inline int maxTestRanks() {
  const char* text = std::getenv("UCXCOLL_TEST_MAX_RANKS");
  return text != nullptr && std::atoi(text) > 0 ? std::atoi(text) : 1 << 16;
}

// Loopback at 1-16 ranks (cheap, deterministic disturbances), UCX at 1-8.
inline std::vector<Setup> setups() {
  std::vector<Setup> all;
  const int cap = maxTestRanks();
  for (int n = 1; n <= std::min(16, cap); ++n) {
    all.push_back({Wire::Loopback, n});
  }
  for (int n = 1; n <= std::min(8, cap); ++n) {
    all.push_back({Wire::Ucx, n});
  }
  return all;
}

// Loopback delivery delayed and reordered, reproducibly from `seed`.
inline LoopbackOptions disturbed(int seed) {
  return LoopbackOptions{.seed = static_cast<uint64_t>(seed), .maxDelay = 4, .reorder = true};
}

class Cluster {
 public:
  Cluster(int ranks, Wire wire, LoopbackOptions options = {},
          Engine::Threading threading = Engine::Threading::ProgressThread)
      : fabric_(std::make_unique<LoopbackFabric>(options)) {
    for (int r = 0; r < ranks; ++r) {
      std::unique_ptr<Transport> transport;
      if (wire == Wire::Ucx) {
        transport = std::make_unique<UcxTransport>();
      } else {
        transport = fabric_->attach();
      }
      engines_.push_back(std::make_unique<Engine>(std::move(transport), threading));
    }
  }
  ~Cluster() {
    groups_.clear();
    // Every engine stops first, so that no progress thread still talks to a
    // peer whose transport is being torn down.
    for (auto& engine : engines_) {
      engine->stop();
    }
    engines_.clear();
  }

  int size() const { return static_cast<int>(engines_.size()); }
  Engine& engine(int rank) { return *engines_[static_cast<std::size_t>(rank)]; }

  // A group of `members` (cluster ranks, in group-rank order); element i of
  // the result is group rank i's view. `processes` (by group rank) are the
  // processes the engines watch as the ranks' (none if empty).
  std::vector<std::shared_ptr<Group>> makeGroup(const std::string& name, std::vector<int> members = {},
                                                const std::vector<ProcessIdentity>& processes = {}) {
    if (members.empty()) {
      for (int r = 0; r < size(); ++r) {
        members.push_back(r);
      }
    }
    std::vector<uint32_t> channels;
    std::vector<std::vector<uint8_t>> addresses;
    for (int member : members) {
      channels.push_back(engine(member).openChannel());
      addresses.push_back(engine(member).address());
    }
    std::vector<std::shared_ptr<Group>> views;
    for (std::size_t i = 0; i < members.size(); ++i) {
      views.push_back(engine(members[i])
                          .createGroup(name, static_cast<int>(i), static_cast<int>(members.size()), channels[i],
                                       addresses, channels, processes));
    }
    groups_.insert(groups_.end(), views.begin(), views.end());
    return views;
  }

 private:
  std::unique_ptr<LoopbackFabric> fabric_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::shared_ptr<Group>> groups_;
};

// A collective handed to an engine; wait() drives or sleeps until it ends.
class Submitted {
 public:
  Submitted(Engine& engine, std::shared_ptr<Completion> completion, std::string name)
      : engine_(&engine), completion_(std::move(completion)), name_(std::move(name)) {}

  // Rethrows the operation's error.
  void wait(std::chrono::seconds bound = std::chrono::seconds(120)) const {
    if (!engine_->wait(*completion_, Clock::now() + bound)) {
      throw std::runtime_error(name_ + " did not complete within " + std::to_string(bound.count()) + " s");
    }
    if (auto error = completion_->error()) {
      std::rethrow_exception(error);
    }
  }
  bool done() const { return completion_->done(); }
  std::exception_ptr error() const { return completion_->error(); }

 private:
  Engine* engine_;
  std::shared_ptr<Completion> completion_;
  std::string name_;
};

inline Submitted submitCollective(Engine& engine, const std::shared_ptr<Group>& group, const char* what,
                                  Collective::Body body,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  uint64_t sequence = group->takeSequence();
  auto op = std::make_unique<Collective>(group, sequence, what, timeout, std::move(body));
  std::string name = op->name();
  auto completion = op->sharedCompletion();
  [[maybe_unused]] Engine::Lease none = engine.submit(std::move(op));
  return Submitted(engine, completion, name);
}

// Runs body(rank) on one thread per rank; returns one message per failed rank.
inline std::vector<std::string> runRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::string> failures;
  std::mutex failuresMutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& error) {
        std::lock_guard<std::mutex> lock(failuresMutex);
        failures.push_back("rank " + std::to_string(r) + ": " + error.what());
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  return failures;
}

// Catch2 assertion on the main thread, reporting every rank's message.
#define checkNoFailures(failures)            \
  do {                                       \
    for (const auto& failure : (failures)) { \
      UNSCOPED_INFO(failure);                \
    }                                        \
    CHECK((failures).empty());               \
  } while (0)

inline void expect(bool condition, const std::string& what) {
  if (!condition) {
    throw std::runtime_error("expectation failed: " + what);
  }
}

// The message of the exception `fn` throws as type E, or a failure.
template <typename E, typename Fn>
std::string messageOf(Fn fn) {
  try {
    fn();
  } catch (const E& error) {
    return error.what();
  }
  throw std::runtime_error("expected an exception that was not thrown");
}

}  // namespace ucxcoll::testing
