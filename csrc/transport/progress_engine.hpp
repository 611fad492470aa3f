#pragma once
// The process-wide progress engine: one UCX worker and the one thread that
// drives it, shared by every process group. Callers hand it tasks (a whole
// collective, or a setup step such as connecting endpoints); it runs them in
// order on its thread. A task waiting for peers sleeps on the worker's
// wakeup fd; an idle engine sleeps on a condition variable.
//
// A caller that would only block until its task is done may instead run it
// on its own thread when nothing is queued or running (runInlineIfIdle):
// that saves two thread hand-offs, which dominate small collectives. The
// worker mutex makes sure one thread at a time drives UCX.
//
// The engine thread never destroys a task it ran: a task may hold the last
// reference to tensors that Python owns, and dropping that takes the GIL.
// While the interpreter shuts down, CPython ends any other thread that asks
// for the GIL with pthread_exit, whose unwinding through a destructor aborts
// the process. So finished tasks are retired, and the backend destroys them
// on the next caller's thread (see destroyRetiredTasks).

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/ucx_worker.hpp"

namespace ucxcoll {

class ProgressEngine {
 public:
  // The engine of this process, created on first use. Groups hold the
  // returned pointer; the engine shuts down when the last group lets go.
  static std::shared_ptr<ProgressEngine> acquire();

  ProgressEngine();
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Run `task` on the engine thread after the tasks enqueued before it.
  // A task must not throw; it reports failure through its own channel.
  // Once the engine thread has stopped (process exit), run it right here.
  void enqueue(std::function<void()> task);

  // Run `task` on the calling thread if no task is queued or running, and
  // return true; otherwise do nothing and return false (then enqueue it).
  // Tasks still run one at a time and in the order they were handed over.
  bool runInlineIfIdle(const std::function<void()>& task);

  // Run `task` on the engine thread and wait for its result (or exception).
  template <typename Fn>
  auto runSync(Fn task) -> decltype(task()) {
    using Result = decltype(task());
    auto promise = std::make_shared<std::promise<Result>>();
    auto result = promise->get_future();
    enqueue([promise, task = std::move(task)]() mutable {
      try {
        if constexpr (std::is_void_v<Result>) {
          task();
          promise->set_value();
        } else {
          promise->set_value(task());
        }
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return result.get();
  }

  // Destroy the tasks the engine thread finished (see the note on top);
  // does nothing on the engine thread itself. Call it holding none of your
  // own locks: destroying a task may take the GIL and run Python code.
  void destroyRetiredTasks();

  bool onEngineThread() const { return std::this_thread::get_id() == threadId_; }

  // Only the thread running a task (engine or inline) may touch the worker.
  UcxWorker& worker() { return *worker_; }
  const std::vector<uint8_t>& address() const { return worker_->address(); }

  // Abort every collective waiting on the worker and stop the thread,
  // without tearing UCX down; used at process exit, when UCX's own libraries
  // may already be going away. Tasks handed over afterwards run on the
  // caller.
  void stopThread();

  // Wait until no task is queued or running, at most `bound`; true if so.
  bool waitUntilIdle(std::chrono::milliseconds bound);

  // stopThread() on this process's engine, if there is one, after giving
  // its tasks up to `grace` to finish. Runs from Python's atexit, before the
  // interpreter finalizes: collectives the script did not wait for can
  // complete, a Future callback still running on the engine thread can
  // finish with the GIL, and no engine thread is left to ask for the GIL
  // during finalization (CPython would end it with pthread_exit, aborting
  // the process). Also runs from the C atexit handler (no grace: Python is
  // gone by then), for processes that never ran Python's.
  static void stopLiveEngine(std::chrono::milliseconds grace);

 private:
  void run();

  std::unique_ptr<UcxWorker> worker_;
  std::mutex workerMutex_;          // held while a thread drives the worker
  std::mutex mutex_;                // guards the fields below
  std::condition_variable wakeup_;  // new task, or stopping
  std::condition_variable idle_;    // a task finished
  std::deque<std::function<void()>> tasks_;
  std::vector<std::function<void()>> retired_;  // run, not yet destroyed
  // Whether retired_ may be non-empty: lets the per-collective
  // destroyRetiredTasks() skip the lock when there is nothing to destroy.
  std::atomic<bool> hasRetired_{false};
  bool taskRunning_ = false;
  bool stopping_ = false;
  pid_t ownerPid_;
  std::thread thread_;
  std::thread::id threadId_;  // thread_'s id, readable while it is joined
};

}  // namespace ucxcoll
