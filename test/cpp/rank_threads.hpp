#pragma once
// Runs n ranks as threads of this process, each with its own UCX worker
// (its own context, as separate processes would have), connected all-to-all.
// Catch2's assertions are not thread-safe, so rank bodies throw on failure
// and the caller asserts on the collected messages.

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/ucx_transport.hpp"
#include "transport/ucx_worker.hpp"

namespace ucxcoll::testing {

using RankBody = std::function<void(int rank, UcxTransport& transport)>;

// Returns one message per failed rank; empty when every rank succeeded.
inline std::vector<std::string> runRanks(int n, const RankBody& body) {
  std::vector<std::unique_ptr<UcxWorker>> workers;
  for (int r = 0; r < n; ++r) {
    workers.push_back(std::make_unique<UcxWorker>());
  }
  std::vector<std::string> failures;
  std::mutex failuresMutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::vector<ucp_ep_h> endpoints;
        for (int peer = 0; peer < n; ++peer) {
          endpoints.push_back(workers[r]->connect(workers[peer]->address()));
        }
        UcxTransport transport(*workers[r], r, std::move(endpoints));
        body(r, transport);
      } catch (const std::exception& error) {
        std::lock_guard<std::mutex> lock(failuresMutex);
        failures.push_back("rank " + std::to_string(r) + ": " + error.what());
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  // Close endpoints while every worker still exists (flush needs the peer).
  for (auto& worker : workers) {
    worker.reset();
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

}  // namespace ucxcoll::testing
