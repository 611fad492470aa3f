#pragma once
// The hooks torch registers on a backend by id (abort hooks, completion
// hooks; torch's Hooks.hpp). Hooks are copied out under the lock and run
// without it: a hook may take its owner's lock, and that owner may be
// unregistering (taking this lock) at the same moment, e.g. torch's flight
// recorder detaching.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace ucxcoll {

template <typename Hook>
class HookTable {
 public:
  using Entries = std::vector<std::pair<int64_t, Hook>>;

  void add(int64_t id, Hook hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(hooks_, [&](const auto& entry) { return entry.first == id; });
    hooks_.emplace_back(id, std::move(hook));
    count_.store(hooks_.size(), std::memory_order_release);
  }

  void remove(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(hooks_, [&](const auto& entry) { return entry.first == id; });
    count_.store(hooks_.size(), std::memory_order_release);
  }

  // Lock-free, for the per-operation path where usually nothing is registered.
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

  Entries snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hooks_;
  }

 private:
  mutable std::mutex mutex_;
  Entries hooks_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace ucxcoll
