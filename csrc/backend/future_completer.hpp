#pragma once
// Completes the Futures of Works on threads of their own, never on the
// engine's driver thread. Completing a Future runs its callbacks (a DDP
// comm hook's .then()), and such a callback may start another collective
// and wait for its Future (PowerSGD does): on the driver thread that wait
// would block the only thread that can finish the collective. Here a
// callback that waits leaves the next completion to another thread: a new
// one is started whenever every thread is busy (up to kMaxThreads nested
// waits).

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace ucxcoll {

class FutureCompleter {
 public:
  static constexpr std::size_t kMaxThreads = 8;

  // The process's completer (a forked child gets a fresh one).
  static FutureCompleter& instance();

  void post(std::function<void()> task);
  // Destroys the tasks that have run, with what they hold (a Work and its
  // tensors, possibly Python's last reference): called on a caller's thread
  // at the start of each call, like Engine::destroyRetired, so that no
  // thread of ours frees Python objects.
  void destroyRetired();
  // Runs what is queued, then stops the threads (at interpreter exit, with
  // the GIL released, before Python finalizes). Later posts run inline.
  void stop();

  ~FutureCompleter();

 private:
  void serve();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::function<void()>> retired_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stopped_ = false;
};

}  // namespace ucxcoll
