#pragma once
// The outcome of an operation, for the threads that wait for it: set once
// by the engine's driver thread, read from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

namespace ucxcoll {

class Completion {
 public:
  bool done() const { return done_.load(std::memory_order_acquire); }
  const std::atomic<bool>& flag() const { return done_; }

  // The error the operation failed with, or null (once done()).
  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  // Record the outcome and wake every waiter. Called once.
  void set(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::move(error);
      done_.store(true, std::memory_order_release);
    }
    changed_.notify_all();
  }

  // Sleep until done() or `until`; true if done. Does not drive the engine
  // (see Engine::wait, which does when it can).
  bool sleepUntil(std::chrono::steady_clock::time_point until) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_until(lock, until, [&] { return done(); });
  }

 private:
  std::atomic<bool> done_{false};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::exception_ptr error_;
};

}  // namespace ucxcoll
