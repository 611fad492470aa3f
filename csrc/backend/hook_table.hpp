#pragma once
// The hooks torch registers on a backend by id (abort hooks, completion
// hooks; torch's Hooks.hpp). Hooks are copied out under the lock and run
// without it: a hook may take its owner's lock, and that owner may be
// unregistering (taking this lock) at the same moment, e.g. torch's flight
// recorder detaching.

#include <atomic>
#include <cstdint>
#include <memory>
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
    auto next = std::make_shared<Entries>(*hooks_);
    std::erase_if(*next, [&](const auto& entry) { return entry.first == id; });
    next->emplace_back(id, std::move(hook));
    publish(std::move(next));
  }

  void remove(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto next = std::make_shared<Entries>(*hooks_);
    std::erase_if(*next, [&](const auto& entry) { return entry.first == id; });
    publish(std::move(next));
  }

  // Lock-free, for the per-operation path where usually nothing is registered.
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

  // The hooks as they are now. The list is never changed in place (add and
  // remove publish a new one), so taking it costs a reference, not a copy
  // of every hook: this runs on every operation while torch's flight
  // recorder is attached.
  std::shared_ptr<const Entries> snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hooks_;
  }

 private:
  void publish(std::shared_ptr<Entries> next) {
    count_.store(next->size(), std::memory_order_release);
    hooks_ = std::move(next);
  }

  mutable std::mutex mutex_;
  std::shared_ptr<const Entries> hooks_ = std::make_shared<const Entries>();
  std::atomic<std::size_t> count_{0};
};

}  // namespace ucxcoll
