#include "backend/future_completer.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <memory>

#include "common/process_id.hpp"

namespace ucxcoll {

FutureCompleter& FutureCompleter::instance() {
  // Asked on every operation: the usual answer needs no lock.
  static std::atomic<FutureCompleter*> current{nullptr};
  static std::atomic<pid_t> owner{0};
  const pid_t self = currentProcessId();
  // owner is published after current: read in the other order.
  if (owner.load(std::memory_order_acquire) == self) {
    return *current.load(std::memory_order_acquire);
  }
  static std::mutex guard;
  static std::unique_ptr<FutureCompleter> owned;
  std::lock_guard<std::mutex> lock(guard);
  if (!owned || owner.load(std::memory_order_acquire) != self) {
    // First use, or a forked child: the child inherits the object but not
    // its threads, so it leaves it be (joining or destroying threads that
    // do not exist here is undefined) and makes its own.
    (void)owned.release();
    owned = std::make_unique<FutureCompleter>();
    owner.store(0, std::memory_order_release);
    current.store(owned.get(), std::memory_order_release);
    owner.store(self, std::memory_order_release);
  }
  return *owned;
}

void FutureCompleter::post(std::function<void()> task) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!stopped_) {
      tasks_.push_back(std::move(task));
      if (idle_ == 0 && threads_.size() < kMaxThreads) {
        threads_.emplace_back([this] { serve(); });
      } else {
        ready_.notify_one();
      }
      return;
    }
  }
  task();  // after stop(): nothing else would run it
}

void FutureCompleter::serve() {
  pthread_setname_np(pthread_self(), "ucxcoll-future");
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    ++idle_;
    ready_.wait(lock, [this] { return stopped_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) {
      return;  // stopped and drained
    }
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
    retired_.push_back(std::move(task));
  }
}

void FutureCompleter::destroyRetired() {
  std::vector<std::function<void()>> retired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    retired.swap(retired_);
  }
}

void FutureCompleter::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    threads.swap(threads_);
  }
  ready_.notify_all();
  for (auto& thread : threads) {
    thread.join();
  }
  destroyRetired();  // the interpreter is still whole: this thread may free Python objects
}

FutureCompleter::~FutureCompleter() {
  stop();
}

}  // namespace ucxcoll
