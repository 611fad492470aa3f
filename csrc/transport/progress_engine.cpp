#include "transport/progress_engine.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "common/config.hpp"
#include "common/logging.hpp"

namespace ucxcoll {
namespace {

constexpr int kIdleSleepMs = 1000;

std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}

// The live engine, if any. Weak: groups own it, this only finds it.
std::weak_ptr<ProgressEngine>& liveEngine() {
  static std::weak_ptr<ProgressEngine> engine;
  return engine;
}

void stopLiveEngineAtExit() {
  ProgressEngine::stopLiveEngine(std::chrono::milliseconds(0));
}

}  // namespace

void ProgressEngine::stopLiveEngine(std::chrono::milliseconds grace) {
  std::shared_ptr<ProgressEngine> engine;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    engine = liveEngine().lock();
  }
  if (!engine || engine->ownerPid_ != getpid()) {
    return;  // none, or a forked child's copy of the parent's (see stopThread)
  }
  if (grace.count() > 0 && !engine->waitUntilIdle(grace)) {
    UCXCOLL_WARN("exiting with collectives still pending after " << grace.count()
                                                                 << " ms (UCXCOLL_EXIT_GRACE_MS); aborting them");
  }
  engine->stopThread();
}

bool ProgressEngine::waitUntilIdle(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_for(lock, bound, [&] { return !taskRunning_ && tasks_.empty(); });
}

std::shared_ptr<ProgressEngine> ProgressEngine::acquire() {
  std::lock_guard<std::mutex> lock(registryMutex());
  static pid_t registeredPid = 0;
  if (registeredPid != getpid()) {
    // First use in this process, or a forked child: a child must never use
    // (or destroy) the UCX state it inherited, so it starts afresh.
    liveEngine() = std::weak_ptr<ProgressEngine>();
    registeredPid = getpid();
    std::atexit(stopLiveEngineAtExit);
  }
  auto engine = liveEngine().lock();
  if (!engine) {
    engine = std::make_shared<ProgressEngine>();
    liveEngine() = engine;
  }
  return engine;
}

ProgressEngine::ProgressEngine() : worker_(std::make_unique<UcxWorker>()), ownerPid_(getpid()) {
  thread_ = std::thread([this] { run(); });
  threadId_ = thread_.get_id();
}

ProgressEngine::~ProgressEngine() {
  if (getpid() != ownerPid_) {
    // Inherited through fork: the thread does not exist here and UCX state is
    // the parent's. Leak it rather than tear down what is not ours.
    thread_.detach();
    [[maybe_unused]] auto* leaked = worker_.release();
    return;
  }
  stopThread();
  // Endpoints and the worker are destroyed on this thread now that the
  // engine thread is gone, so UCX is still used by one thread at a time.
}

void ProgressEngine::stopThread() {
  if (getpid() != ownerPid_) {
    // A forked child: the thread exists only in the parent, and the
    // interrupt eventfd is shared with it (writing would wake the parent).
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wakeup_.notify_all();
  // A task still waiting for peers would hold the join up to its deadline.
  worker_->abortWaits();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

void ProgressEngine::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      tasks_.push_back(std::move(task));
      wakeup_.notify_one();
      return;
    }
  }
  // The engine thread is gone or going (process exit), yet a group may
  // still be torn down, e.g. by a static destructor: run the task here, after
  // whatever the engine thread is still running.
  std::lock_guard<std::mutex> worker(workerMutex_);
  task();
}

void ProgressEngine::destroyRetiredTasks() {
  if (!hasRetired_.load(std::memory_order_acquire) || onEngineThread()) {
    return;  // nothing to do, or e.g. a Future callback issuing a collective
  }
  std::vector<std::function<void()>> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished.swap(retired_);
    hasRetired_.store(false, std::memory_order_relaxed);
  }
  // `finished` is destroyed here, on the caller's thread, outside the lock.
}

bool ProgressEngine::runInlineIfIdle(const std::function<void()>& task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || taskRunning_ || !tasks_.empty()) {
      return false;
    }
    taskRunning_ = true;
  }
  {
    std::lock_guard<std::mutex> worker(workerMutex_);
    task();
  }
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    taskRunning_ = false;
    queued = !tasks_.empty();
  }
  if (queued) {
    wakeup_.notify_one();  // tasks enqueued meanwhile may run now
  } else {
    idle_.notify_all();
  }
  return true;
}

void ProgressEngine::run() {
  const auto spin = std::chrono::microseconds(config().spinMicroseconds);
  auto spinUntil = std::chrono::steady_clock::now() + spin;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopping_) {
        return;
      }
      if (!taskRunning_ && !tasks_.empty()) {
        task = std::move(tasks_.front());
        tasks_.pop_front();
        taskRunning_ = true;
      } else if (std::chrono::steady_clock::now() >= spinUntil) {
        // Idle. Sleep on the condition variable, not on the worker's fd:
        // peers only need our progress for collectives we take part in,
        // and those progress UCX themselves, possibly inline on a caller's
        // thread, which would otherwise wake this thread on every event.
        wakeup_.wait_for(lock, std::chrono::milliseconds(kIdleSleepMs),
                         [&] { return stopping_ || (!taskRunning_ && !tasks_.empty()); });
        spinUntil = std::chrono::steady_clock::now();
        continue;
      }
    }
    if (task) {
      {
        std::lock_guard<std::mutex> worker(workerMutex_);
        task();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      taskRunning_ = false;
      retired_.push_back(std::move(task));
      hasRetired_.store(true, std::memory_order_release);
      if (tasks_.empty()) {
        idle_.notify_all();
      }
      spinUntil = std::chrono::steady_clock::now() + spin;
      continue;
    }
    // Briefly after a task: poll for the next one (back-to-back async
    // collectives then pay no wakeup) and keep UCX moving meanwhile.
    std::unique_lock<std::mutex> worker(workerMutex_, std::try_to_lock);
    if (worker.owns_lock() && worker_->progress() > 0) {
      spinUntil = std::chrono::steady_clock::now() + spin;
    }
  }
}

}  // namespace ucxcoll
