#include "common/process_id.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace ucxcoll {
namespace {

std::atomic<pid_t> cachedProcessId{0};

void refreshAfterFork() {
  cachedProcessId.store(::getpid(), std::memory_order_relaxed);
}

}  // namespace

pid_t currentProcessId() {
  pid_t pid = cachedProcessId.load(std::memory_order_relaxed);
  if (pid == 0) {
    // First call: register the child handler once, then cache.
    static const bool registered = [] {
      pthread_atfork(nullptr, nullptr, refreshAfterFork);
      refreshAfterFork();
      return true;
    }();
    (void)registered;
    pid = cachedProcessId.load(std::memory_order_relaxed);
  }
  return pid;
}

}  // namespace ucxcoll
