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

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include <type_traits>
#include <vector>

#include "collectives/collective.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "engine/peer_watch.hpp"
#include "transport/loopback_transport.hpp"
#include "transport/shared_memory_transport.hpp"
#include "transport/ucx_transport.hpp"

namespace ucxcoll::testing {

// How the simulated processes reach each other: UCX or the loopback alone,
// or either one under the shared-memory lanes that real processes use
// (transport/shared_memory_transport.hpp).
enum class Wire { Ucx, Loopback, SharedMemory, SharedMemoryUcx };

inline const char* wireName(Wire wire) {
  switch (wire) {
    case Wire::Ucx:
      return "UCX";
    case Wire::Loopback:
      return "loopback";
    case Wire::SharedMemory:
      return "shared memory over loopback";
    case Wire::SharedMemoryUcx:
      return "shared memory over UCX";
  }
  return "?";
}

inline constexpr Wire kAllWires[] = {Wire::Ucx, Wire::Loopback, Wire::SharedMemory, Wire::SharedMemoryUcx};

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

// Loopback at 1-16 ranks (cheap, deterministic disturbances), UCX at 1-8,
// shared-memory lanes over loopback at 1-16 and over UCX (what processes
// use) at 1-8.
inline std::vector<Setup> setups() {
  std::vector<Setup> all;
  const int cap = maxTestRanks();
  for (Wire wire : {Wire::Loopback, Wire::SharedMemory}) {
    for (int n = 1; n <= std::min(16, cap); ++n) {
      all.push_back({wire, n});
    }
  }
  for (Wire wire : {Wire::Ucx, Wire::SharedMemoryUcx}) {
    for (int n = 1; n <= std::min(8, cap); ++n) {
      all.push_back({wire, n});
    }
  }
  return all;
}

// A transport of `wire` for one simulated process.
inline std::unique_ptr<Transport> makeTransport(Wire wire, LoopbackFabric& fabric) {
  switch (wire) {
    case Wire::Ucx:
      return std::make_unique<UcxTransport>();
    case Wire::Loopback:
      return fabric.attach();
    case Wire::SharedMemory:
      return std::make_unique<SharedMemoryTransport>(fabric.attach());
    case Wire::SharedMemoryUcx:
      return std::make_unique<SharedMemoryTransport>(std::make_unique<UcxTransport>());
  }
  return nullptr;
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
      engines_.push_back(std::make_unique<Engine>(makeTransport(wire, *fabric_), threading));
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
  // processes the engines watch as the ranks' (none if empty). `hosts` (by
  // group rank, empty: all one) puts the ranks on simulated hosts: ranks on
  // different hosts reach each other through the network transport alone.
  std::vector<std::shared_ptr<Group>> makeGroup(const std::string& name, std::vector<int> members = {},
                                                const std::vector<ProcessIdentity>& processes = {},
                                                const std::vector<int>& hosts = {},
                                                ConnectWhen connectWhen = ConnectWhen::AsConfigured) {
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
    const auto sharedAddresses = std::make_shared<const std::vector<std::vector<uint8_t>>>(std::move(addresses));
    std::vector<std::shared_ptr<Group>> views;
    for (std::size_t i = 0; i < members.size(); ++i) {
      std::vector<bool> onOtherHost;
      for (std::size_t j = 0; j < hosts.size(); ++j) {
        onOtherHost.push_back(hosts[j] != hosts[i]);
      }
      views.push_back(engine(members[i])
                          .createGroup(name, static_cast<int>(i), static_cast<int>(members.size()), channels[i],
                                       sharedAddresses, channels, processes, onOtherHost, connectWhen));
      if (!hosts.empty()) {
        views.back()->setHosts(hosts);
      }
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

// A transfer that records how it ended.
struct Recorded final : Transfer {
  bool ended = false;
  TransferResult result;
  void transferDone(const TransferResult& r) override {
    ended = true;
    result = r;
  }
};

// A child process that sleeps until killed; reaped by the destructor.
class SleepingChild {
 public:
  SleepingChild() : pid_(fork()) {
    if (pid_ == 0) {
      for (;;) {
        pause();  // async-signal-safe, as a child of a threaded process must be
      }
    }
  }
  ~SleepingChild() {
    kill();
    waitpid(pid_, nullptr, 0);
  }
  SleepingChild(const SleepingChild&) = delete;
  SleepingChild& operator=(const SleepingChild&) = delete;
  void kill() const { ::kill(pid_, SIGKILL); }
  ProcessIdentity identity() const { return processIdentity(pid_); }

 private:
  pid_t pid_;
};

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

// The same, with the description made by `describe()` only on failure: the
// element-by-element checks run millions of times per test, and building
// each one's message up front was most of what the Catch2 suite spent.
template <typename Describe>
requires std::is_invocable_r_v<std::string, Describe>
void expect(bool condition, Describe&& describe) {
  if (!condition) {
    throw std::runtime_error("expectation failed: " + describe());
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

// Each rank runs its own collective under the same sequence number, on a
// group over `wire` (across `hosts`, as in Cluster::makeGroup); the result
// is every rank's MismatchError message (empty: it succeeded).
inline std::vector<std::string> runDisagreeing(Wire wire, const std::vector<Collective::Body>& bodies,
                                               const std::vector<int>& hosts = {}) {
  const int n = static_cast<int>(bodies.size());
  Cluster cluster(n, wire);
  auto group = cluster.makeGroup("g", {}, {}, hosts);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  auto failures = runRanks(n, [&](int rank) {
    // A long deadline: the disagreement must be found, not timed out.
    auto op = submitCollective(cluster.engine(rank), group[rank], "collective", bodies[rank], std::chrono::seconds(60));
    try {
      op.wait();
    } catch (const MismatchError& error) {
      errors[rank] = error.what();
    }
  });
  checkNoFailures(failures);
  return errors;
}

}  // namespace ucxcoll::testing
