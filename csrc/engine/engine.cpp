#include "engine/engine.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/config.hpp"
#include "common/cores.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"
#include "common/parked.hpp"
#include "common/process_id.hpp"
#include "transport/transport_factory.hpp"

namespace ucxcoll {
namespace {

// Longest single sleep: bounds how late a stop request is noticed.
constexpr auto kMaxSleep = std::chrono::milliseconds(200);
// How long a failed operation waits for its canceled transfers to end.
constexpr auto kDrainBound = std::chrono::seconds(1);
constexpr auto kExitDrainBound = std::chrono::milliseconds(200);
// How often a busy driver checks deadlines and looks for disagreeing peers.
constexpr auto kHousekeepingPeriod = std::chrono::milliseconds(1);
// How long operations a caller leaves in flight stay with it before the
// progress thread takes them over (see Doorbell).
constexpr auto kHandOverDelay = std::chrono::microseconds(100);
// How often an idle progress thread makes a pass (desync_report.cpp): it
// answers peers' status requests, which nothing else would notice.
constexpr auto kIdleServicePeriod = std::chrono::milliseconds(100);
// The longest a caller waiting for its operation polls before sleeping
// (SpinBudget): longer waits are a peer that is busy elsewhere.
constexpr auto kCallerSpinCeiling = std::chrono::milliseconds(2);

std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}

// The live engine, if any. Weak: groups own it, this only finds it.
std::weak_ptr<Engine>& liveEngine() {
  static std::weak_ptr<Engine> engine;
  return engine;
}

void stopLiveEngineAtExit() {
  Engine::stopLiveEngine(std::chrono::milliseconds(0));
}

// The engine this thread is driving right now, if any.
thread_local const Engine* tDrivenHere = nullptr;

int millisecondsUntil(Clock::time_point at, Clock::time_point now) {
  if (at <= now) {
    return 0;
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - now).count() + 1;
  return static_cast<int>(std::min<long long>(left, kMaxSleep.count()));
}

}  // namespace

Task Engine::ControlOperation::run() {
  action_();
  co_return;
}

// ---- Process-wide engine --------------------------------------------------

std::shared_ptr<Engine> Engine::acquire(const std::function<NetworkDevices()>& networkDevices) {
  std::lock_guard<std::mutex> lock(registryMutex());
  static pid_t registeredPid = 0;
  if (registeredPid != currentProcessId()) {
    // First use in this process, or a forked child: a child must never use
    // (or destroy) the UCX state it inherited, so it starts afresh.
    liveEngine() = std::weak_ptr<Engine>();
    registeredPid = currentProcessId();
    std::atexit(stopLiveEngineAtExit);
  }
  auto engine = liveEngine().lock();
  if (!engine) {
    const NetworkDevices devices = networkDevices ? networkDevices() : NetworkDevices{};
    engine = std::make_shared<Engine>(makeProcessTransport(devices));
    engine->networkInterfaces_ = devices.inUse;
    liveEngine() = engine;
  }
  return engine;
}

void Engine::stopLiveEngine(std::chrono::milliseconds grace) {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    engine = liveEngine().lock();
  }
  if (!engine || engine->ownerPid_ != currentProcessId()) {
    return;  // none, or a forked child's copy of the parent's
  }
  if (grace.count() > 0 && !engine->waitUntilIdle(grace)) {
    UCXCOLL_WARN("exiting with collectives still pending after " << grace.count()
                                                                 << " ms (UCXCOLL_EXIT_GRACE_MS); aborting them");
  }
  engine->stop();
}

// ---- Lifetime ---------------------------------------------------------------

Engine::Engine(std::unique_ptr<Transport> transport, Threading threading)
    : transport_(std::move(transport)),
      address_(transport_->address()),
      threading_(threading),
      ownerPid_(currentProcessId()),
      spinMicroseconds_(config().spinMicroseconds),
      callerSpin_(std::chrono::microseconds(config().spinMicroseconds), kCallerSpinCeiling,
                  !config().spinMicrosecondsSet),
      channels_(tag::kMaxChannel + 1, ChannelState::NeverOpened) {
  transport_->setFailureListener([this] { wakeDriver(); });
  if (threading_ == Threading::ProgressThread) {
    thread_ = std::thread([this] { progressThreadMain(); });
    threadId_ = thread_.get_id();
  }
}

Engine::~Engine() {
  if (currentProcessId() != ownerPid_) {
    // Inherited through fork: the thread does not exist here and the
    // transport's state is the parent's. Leak it rather than tear down what
    // is not ours.
    if (thread_.joinable()) {
      thread_.detach();
    }
    parkUntilExit(std::move(transport_));
    parkUntilExit(std::move(peerWatch_));
    return;
  }
  stop();
  auto stillInFlight = [](const std::unique_ptr<Operation>& op) { return op->outstanding_ > 0; };
  if (std::any_of(zombies_.begin(), zombies_.end(), stillInFlight) ||
      std::any_of(inFlight_.begin(), inFlight_.end(), [&](const auto& entry) { return stillInFlight(entry.second); })) {
    // A transfer the transport would not let go of (a peer that never took
    // our message): tearing UCX down under it only makes UCX complain about
    // requests in use. Leave the transport, and the operations whose
    // buffers it may still touch, to the end of the process.
    UCXCOLL_DEBUG("engine destroyed with transfers in flight; leaving its transport to process exit");
    parkUntilExit(std::move(transport_));
    for (auto& zombie : zombies_) {
      parkUntilExit(std::move(zombie));
    }
    for (auto& [serial, op] : inFlight_) {
      parkUntilExit(std::move(op));
    }
  }
  // The transport goes first: closing it may still end transfers, whose
  // requests live in the operations.
  transport_.reset();
  inFlight_.clear();
  zombies_.clear();
  retired_.clear();
  submitted_.clear();
}

void Engine::stop() {
  if (currentProcessId() != ownerPid_) {
    return;  // a forked child: the thread exists only in the parent
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) {
      return;
    }
    stopping_ = true;
    stopRequested_.store(true);
  }
  doorbell_.ring();
  transport_->interrupt();
  if (thread_.joinable() && !onProgressThread()) {
    thread_.join();
  } else if (threading_ == Threading::CallersOnly && tryAcquire(Driver::Caller, true)) {
    abortAndDrain();
    release();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  std::unique_ptr<PeerWatch> watch;
  {
    std::lock_guard<std::mutex> lock(peerWatchMutex_);
    watch = std::move(peerWatch_);
  }
  // `watch` joins its thread here, holding no lock its handler takes.
}

void Engine::noteRanksOnThisHost(int ranks) {
  const int cores = usableCores();
  if (ranks > cores && !oversubscribed_.exchange(true)) {
    if (!config().spinMicrosecondsSet) {
      spinMicroseconds_.store(0);
    }
    UCXCOLL_INFO(ranks << " ranks on this host share " << cores
                       << " core(s): waiting threads yield their core between polls, and the progress thread sleeps "
                          "at once");
  }
}

bool Engine::waitUntilIdle(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_for(lock, bound, [&] { return active_ == 0; });
}

// ---- The driver role ------------------------------------------------------

bool Engine::tryAcquire(Driver role, bool evenIfStopped) {
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (driver_ != Driver::None || (stopped_ && !evenIfStopped)) {
      return false;
    }
    driver_ = role;
    tDrivenHere = this;
    progressThreadWanted_ = false;
    cancel = std::exchange(handOverPending_, false);
  }
  if (cancel) {
    doorbell_.cancel();
  }
  return true;
}

void Engine::release() {
  bool handOver = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    driver_ = Driver::None;
    tDrivenHere = nullptr;
    if ((!inFlight_.empty() || !submitted_.empty()) && threading_ == Threading::ProgressThread && !stopped_) {
      handOverPending_ = true;
      handOver = true;
    }
  }
  if (handOver) {
    doorbell_.ringAfter(kHandOverDelay);
  }
}

bool Engine::drivingHere() const {
  return tDrivenHere == this;
}

void Engine::progressThreadMain() {
  // Named for top, gdb and py-spy (and checks that count our threads).
  pthread_setname_np(pthread_self(), "ucxcoll-engine");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Sleep on the doorbell until asked to drive: now, or once a caller's
    // hand-over delay has passed without the caller driving meanwhile; or
    // every kIdleServicePeriod, to answer peers' status requests.
    bool service = false;
    for (;;) {
      if (driver_ == Driver::None && (stopping_ || progressThreadWanted_ || !submitted_.empty())) {
        break;
      }
      lock.unlock();
      const bool rang = doorbell_.wait(static_cast<int>(kIdleServicePeriod.count()));
      lock.lock();
      if (std::exchange(handOverPending_, false) && driver_ == Driver::None) {
        progressThreadWanted_ = !inFlight_.empty() || !submitted_.empty();
      }
      if (!rang && driver_ == Driver::None) {
        service = true;
        break;
      }
    }
    driver_ = Driver::ProgressThread;
    tDrivenHere = this;
    progressThreadWanted_ = false;
    const bool stopping = stopping_;
    lock.unlock();
    if (stopping) {
      abortAndDrain();
    } else {
      if (service) {
        serviceWhileIdle();
      }
      drive(nullptr, Clock::time_point::max());
    }
    lock.lock();
    driver_ = Driver::None;
    tDrivenHere = nullptr;
    if (stopping) {
      return;
    }
    if (active_ == 0) {
      idle_.notify_all();
    }
  }
}

// ---- Submitting and waiting -------------------------------------------------

Engine::Lease Engine::submit(std::unique_ptr<Operation> operation, bool lead) {
  Operation& op = *operation;
  bool acquired = false;
  bool nested = false;
  bool cancelHandOver = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_ && op.kind() != Operation::Kind::Control) {
      // Nothing will ever run it; fail it here, on the caller.
      std::exception_ptr error = std::make_exception_ptr(
          AbortedError(op.name() + " was not run: the process is exiting (ucxcoll has shut down)"));
      op.completion_->set(error);
      auto callback = std::move(op.onComplete);
      if (callback) {
        callback(error);
      }
      return Lease();
    }
    op.serial_ = nextSerial_++;
    op.submittedAt_ = Clock::now();
    submitted_.push_back(std::move(operation));
    ++active_;
    hasSubmissions_.store(true, std::memory_order_seq_cst);
    if (drivingHere()) {
      nested = true;  // e.g. a Future callback running on the driver
    } else if (driver_ == Driver::None) {
      driver_ = Driver::Caller;
      tDrivenHere = this;
      progressThreadWanted_ = false;
      acquired = true;
      if (std::exchange(handOverPending_, false)) {
        cancelHandOver = true;
      }
    }
  }
  if (cancelHandOver) {
    doorbell_.cancel();
  }
  if (nested) {
    return lead ? Lease(this, true) : Lease();
  }
  if (!acquired) {
    if (driverSleeping_.load(std::memory_order_seq_cst)) {
      transport_->interrupt();
    }
    return Lease();
  }
  ++depth_;
  takeSubmissions();
  --depth_;
  if (lead) {
    return Lease(this, false);
  }
  release();
  destroyRetired();
  return Lease();
}

Engine::Lease::~Lease() {
  if (engine_ != nullptr && !nested_) {
    engine_->release();
    engine_->destroyRetired();
  }
}

void Engine::Lease::driveUntil(const Completion& completion) {
  // A lost operation is reported by the wait() that follows.
  [[maybe_unused]] bool lost = engine_->drive(&completion.flag(), Clock::time_point::max());
}

bool Engine::wait(const Completion& completion, Clock::time_point until) {
  for (;;) {
    if (completion.done()) {
      return true;
    }
    auto now = Clock::now();
    if (now >= until) {
      return false;
    }
    if (drivingHere()) {
      if (drive(&completion.flag(), until)) {
        throwLostOperation();
      }
      continue;
    }
    if (tryAcquire(Driver::Caller)) {
      const bool lost = drive(&completion.flag(), until);
      release();
      destroyRetired();
      if (lost) {
        throwLostOperation();
      }
      continue;
    }
    // Another thread drives and completes it. Wake now and then anyway: it
    // may let go of the driver role with our operation still in flight.
    completion.sleepUntil(std::min(until, now + std::chrono::milliseconds(100)));
  }
}

void Engine::throwLostOperation() {
  UCXCOLL_WARN("internal error: an operation being waited for left the engine without completing");
  throw Error(
      "ucxcoll internal error: the operation this thread waits for is no longer in flight, yet it never completed "
      "(please report it, with the output of UCXCOLL_LOG_LEVEL=debug if you can)");
}

bool Engine::pollOnce() {
  if (!tryAcquire(Driver::Caller, true)) {
    return false;
  }
  ++depth_;
  bool worked = step();
  housekeeping(Clock::now());
  worked = step() || worked;
  --depth_;
  release();
  destroyRetired();
  return worked;
}

void Engine::destroyRetired() {
  if (!hasRetired_.load(std::memory_order_acquire) || onProgressThread() || drivingHere()) {
    return;
  }
  std::vector<std::unique_ptr<Operation>> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished.swap(retired_);
    retired_.swap(spareRetired_);
    hasRetired_.store(false, std::memory_order_relaxed);
  }
  // Destroyed here, on the caller's thread, outside the lock; the emptied
  // list is kept for its capacity.
  finished.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  if (spareRetired_.capacity() < finished.capacity()) {
    spareRetired_.swap(finished);
  }
}

// ---- The driver loop ----------------------------------------------------------

bool Engine::drive(const std::atomic<bool>* until, Clock::time_point limit) {
  bool lost = false;
  ++depth_;
  // A caller (until != null) waits for its own operation: it polls for as
  // long as recent waits lasted. The progress thread polls a fixed while.
  const bool callerWaits = until != nullptr;
  const bool yield = callerWaits && oversubscribed_.load(std::memory_order_relaxed);
  auto spinFor = [&]() -> Clock::duration {
    return callerWaits ? std::chrono::duration_cast<Clock::duration>(callerSpin_.budget())
                       : std::chrono::microseconds(spinMicroseconds_.load(std::memory_order_relaxed));
  };
  auto spin = spinFor();
  auto spinUntil = Clock::now() + spin;
  bool quiet = false;  // since quietSince, the first pass of this wait that found nothing
  Clock::time_point quietSince{};
  for (;;) {
    if (stopRequested_.load(std::memory_order_relaxed) && !exitDrain_) {
      break;  // whoever stops the engine aborts what is in flight
    }
    bool worked = step();
    if (worked && quiet) {
      // The wait that just ended is noted before the exit test below: the
      // wait that ends an operation is the one the budget most needs to see.
      quiet = false;
      if (callerWaits) {
        callerSpin_.noteWait(Clock::now() - quietSince);
        spin = spinFor();
      }
    }
    const bool nothingInFlight = inFlight_.empty() && !hasSubmissions_.load(std::memory_order_acquire);
    if (until != nullptr ? until->load(std::memory_order_acquire) : nothingInFlight) {
      break;
    }
    if (nothingInFlight && zombies_.empty()) {
      // What `until` waits for was submitted before the wait began, and
      // nothing that could still complete it is left: it was lost. Say so
      // rather than wait forever.
      lost = true;
      break;
    }
    auto now = Clock::now();
    if (now >= nextHousekeeping_) {
      housekeeping(now);
    }
    if (now >= limit) {
      break;
    }
    if (worked) {
      spinUntil = now + spin;
      continue;
    }
    if (!quiet) {
      quiet = true;
      quietSince = now;
    }
    if (now < spinUntil) {
      if (yield) {
        sched_yield();  // the peer this waits for may need this core
      }
      continue;
    }
    housekeeping(now);  // before sleeping: deadlines, disagreeing peers
    if (!ready_.empty() || !attention_.empty()) {
      continue;
    }
    sleep(until, limit);
    spinUntil = Clock::now() + spin;
  }
  --depth_;
  return lost;
}

void Engine::abortAndDrain() {
  exitDrain_ = true;
  abortAll("the process is exiting");
  drive(nullptr, Clock::now() + kExitDrainBound);
  exitDrain_ = false;
}

bool Engine::step() {
  bool worked = false;
  if (peerDeathPending_.load(std::memory_order_acquire)) {
    handlePeerDeaths();
    worked = true;
  }
  if (transport_->hasFailedPeers()) {
    handleFailedConnections();
    worked = true;
  }
  if (hasSubmissions_.load(std::memory_order_acquire)) {
    takeSubmissions();
    worked = true;
  }
  worked = transport_->progress() > 0 || worked;
  while (!ready_.empty() || !attention_.empty()) {
    worked = true;
    if (!ready_.empty()) {
      Operation* op = ready_.front();
      ready_.pop_front();
      if (!op->completed_ && !op->failure_ && op->waiter_) {
        auto handle = std::exchange(op->waiter_, {});
        op->waitingFor_ = nullptr;
        resume(*op, handle);
      }
    } else {
      Operation* op = attention_.front();
      attention_.pop_front();
      review(*op);
    }
  }
  return worked;
}

void Engine::sleep(const std::atomic<bool>* until, Clock::time_point limit) {
  auto now = Clock::now();
  Clock::time_point wakeAt = std::min(limit, now + kMaxSleep);
  if (!deadlines_.empty()) {
    wakeAt = std::min(wakeAt, deadlines_.top().at);
  }
  driverSleeping_.store(true, std::memory_order_seq_cst);
  if (!hasSubmissions_.load(std::memory_order_seq_cst) && (exitDrain_ || !stopRequested_.load()) &&
      !(until != nullptr && until->load())) {
    transport_->waitForActivity(millisecondsUntil(wakeAt, now));
  }
  driverSleeping_.store(false, std::memory_order_relaxed);
}

void Engine::takeSubmissions() {
  if (transport_->hasFailedPeers()) {
    handleFailedConnections();  // so that these are refused, not sent into a broken connection
  }
  // Driver only; a nested call (an operation started below submits
  // another) finds no spare and allocates.
  std::vector<std::unique_ptr<Operation>> batch = std::move(spareSubmitted_);
  spareSubmitted_.clear();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch.swap(submitted_);
    hasSubmissions_.store(false, std::memory_order_relaxed);
  }
  struct KeepCapacity {
    std::vector<std::unique_ptr<Operation>>& batch;
    std::vector<std::unique_ptr<Operation>>& spare;
    ~KeepCapacity() {
      batch.clear();
      if (spare.capacity() < batch.capacity()) {
        spare.swap(batch);
      }
    }
  } keep{batch, spareSubmitted_};
  for (auto& owned : batch) {
    Operation& op = *owned;
    op.engine_ = this;
    inFlight_.emplace(op.serial_, std::move(owned));
    Group* group = op.group();
    if (group != nullptr && group->closed_) {
      failOperation(op, std::make_exception_ptr(
                            AbortedError(op.name() + " was not run: the process group was shut down or aborted")));
      continue;
    }
    if (group != nullptr && !group->deadRanks_.empty() && op.kind() == Operation::Kind::PointToPoint &&
        !op.runsOnFailedGroup_) {
      group->notifyFailure();
      failOperation(op, std::make_exception_ptr(PeerGoneError(
                            op.name() + " was not run: this process group failed earlier: " + group->failure())));
      continue;
    }
    switch (op.kind()) {
      case Operation::Kind::Collective:
        group->waiting_.push_back(&op);
        startWaitingCollectives(*group);
        break;
      case Operation::Kind::PointToPoint:
        group->transfers_.insert(&op);
        start(op);
        break;
      case Operation::Kind::Control:
        start(op);
        break;
    }
  }
}

void Engine::startWaitingCollectives(Group& group) {
  while (group.running_ == nullptr && !group.waiting_.empty()) {
    Operation& op = *group.waiting_.front();
    group.waiting_.pop_front();
    if (group.failed() && !op.runsOnFailedGroup_) {
      group.notifyFailure();
      failOperation(op, std::make_exception_ptr(
                            Error(op.name() + " was not run: this process group failed earlier: " + group.failure())));
      continue;
    }
    group.running_ = &op;
    runningCollectives_.push_back(&op);
    start(op);
  }
}

void Engine::start(Operation& op) {
  op.started_ = true;
  op.deadline_ = Deadline::after(op.timeout_);
  if (!op.deadline_.infinite()) {
    deadlines_.push({op.deadline_.at(), op.serial_});
  }
  try {
    op.task_ = op.run();
  } catch (...) {
    op.fail(std::current_exception());
    review(op);
    return;
  }
  resume(op, op.task_.handle());
}

void Engine::resume(Operation& op, std::coroutine_handle<> handle) {
  handle.resume();
  review(op);
}

void Engine::review(Operation& op) {
  if (op.completed_) {
    // A zombie whose last transfer ended: it can go now.
    if (op.outstanding_ == 0) {
      auto found = std::find_if(zombies_.begin(), zombies_.end(), [&](const auto& z) { return z.get() == &op; });
      if (found != zombies_.end()) {
        forget(op);
        std::lock_guard<std::mutex> lock(mutex_);
        retired_.push_back(std::move(*found));
        zombies_.erase(found);
        hasRetired_.store(true, std::memory_order_release);
      }
    }
    return;
  }
  if (!op.started_) {
    return;
  }
  const bool bodyDone = op.task_.valid() && op.task_.done();
  if (!op.failure_ && bodyDone && op.task_.error()) {
    op.failure_ = op.task_.error();
  }
  if (op.failure_) {
    if (!op.cancelIssued_) {
      op.cancelIssued_ = true;
      // Canceling may end requests right here; their reviews are queued.
      for (auto& request : op.requests_) {
        if (!request.ended()) {
          transport_->cancel(request);
        }
      }
      bool peerGone = false;
      try {
        std::rethrow_exception(op.failure_);
      } catch (const PeerGoneError&) {
        peerGone = true;
      } catch (...) {
      }
      op.announceFailure(op.failure_);
      // What was posted to or expected from a dead peer will not end: give
      // the rest a short moment, then keep the operation as a zombie.
      op.drainUntil_ = Clock::now() + (stopRequested_.load() || peerGone ? kExitDrainBound : kDrainBound);
      if (op.outstanding_ > 0) {
        deadlines_.push({op.drainUntil_, op.serial_});
      }
    }
    if (op.outstanding_ == 0 || Clock::now() >= op.drainUntil_) {
      complete(op);
    }
    return;
  }
  if (bodyDone && op.outstanding_ == 0) {
    complete(op);
  }
}

void Engine::forget(Operation& op) {
  std::erase(ready_, &op);
  std::erase(attention_, &op);
}

void Engine::failOperation(Operation& op, std::exception_ptr error) {
  op.fail(std::move(error));
  if (!op.started_) {
    complete(op);
  } else {
    review(op);
  }
}

void Engine::complete(Operation& op) {
  op.completed_ = true;
  auto owned = inFlight_.extract(op.serial_);
  // Once retired (below), a caller's destroyRetired() on another thread may
  // destroy the operation at any moment: what is needed of it afterwards is
  // taken now, and no queue keeps pointing at it.
  const std::shared_ptr<Completion> completion = op.completion_;
  const std::shared_ptr<Group> groupRef = op.group_;
  Group* group = groupRef.get();
  forget(op);
  if (group != nullptr) {
    if (group->running_ == &op) {
      group->running_ = nullptr;
      std::erase(runningCollectives_, &op);
      if (!op.failure_) {
        ++group->completedCollectives_;
        ++group->finishedCollectives_;
      }
      if (op.failure_) {
        try {
          std::rethrow_exception(op.failure_);
        } catch (const AbortedError&) {
          // Aborting (shutdown, exit) is not the group's failure.
        } catch (const std::exception& error) {
          // Timeouts, mismatches and transport failures leave peers in an
          // unknown state: fail the group from now on, with this cause.
          group->setFailure(error.what());
          ++group->finishedCollectives_;
        }
      }
    }
    group->transfers_.erase(&op);
  }
  std::exception_ptr error = op.failure_;
  auto callback = std::move(op.onComplete);
  auto succeeded = std::move(op.onSucceeded);
  // The audit log: operations someone submitted and waits for (those with a
  // callback), not the engine's own (closing a group).
  if (callback && op.kind() != Operation::Kind::Control && logLevel() >= LogLevel::Info) {
    logMessage(LogLevel::Info, op.auditLine(error));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!owned.empty()) {
      if (op.outstanding_ == 0) {
        retired_.push_back(std::move(owned.mapped()));
        hasRetired_.store(true, std::memory_order_release);
      } else {
        zombies_.push_back(std::move(owned.mapped()));
      }
    }
    if (--active_ == 0) {
      idle_.notify_all();
    }
  }
  if (!error && succeeded) {
    succeeded();
  }
  completion->set(error);
  // Next in line of the group, before running user code.
  if (group != nullptr) {
    startWaitingCollectives(*group);
  }
  if (callback) {
    callback(error);
  }
}

void Engine::housekeeping(Clock::time_point now) {
  nextHousekeeping_ = now + kHousekeepingPeriod;
  while (!deadlines_.empty() && deadlines_.top().at <= now) {
    uint64_t serial = deadlines_.top().serial;
    deadlines_.pop();
    auto found = inFlight_.find(serial);
    if (found == inFlight_.end()) {
      continue;
    }
    Operation& op = *found->second;
    if (!op.failure_) {
      if (startDesyncReport(op)) {
        continue;  // it fails once the report is in (unless it completes meanwhile)
      }
      op.fail(std::make_exception_ptr(
          TimeoutError(op.name() + op.timedOutAfter() + op.describeMissingPeers(), op.silentPeers())));
    }
    review(op);
  }
  // A collective waiting on peers may be waiting for messages that will
  // never come because a peer runs another collective under its number.
  std::vector<Operation*> waiting;
  for (Operation* op : runningCollectives_) {
    if (op->waiter_ && !op->failure_) {
      waiting.push_back(op);
    }
  }
  // And a transfer for a peer that closed its group.
  for (const auto& weak : groups_) {
    if (auto group = weak.lock()) {
      for (Operation* op : group->transfers_) {
        if (op->waiter_ && !op->failure_) {
          waiting.push_back(op);
        }
      }
    }
  }
  for (Operation* op : waiting) {
    if (auto disagreement = op->checkForDisagreement(*transport_)) {
      op->fail(disagreement);
      review(*op);
    }
  }
  answerStatusRequests();
  answerLateReaches();
  dropStrayMessages(now);
  checkLiveness(now);
}

void Engine::abortAll(const std::string& why) {
  takeSubmissions();
  std::vector<uint64_t> all;
  for (auto& [serial, op] : inFlight_) {
    all.push_back(serial);
  }
  abortEach(all, why);
}

PeerHandle Engine::connect(const std::vector<uint8_t>& address, PeerLocation location) {
  return runOnDriver([&] { return transport_->connect(address, location); });
}

void Engine::abortOperation(uint64_t serial, const std::string& why) {
  runOnDriver([&] { abortEach({serial}, why); });
}

void Engine::abortEach(const std::vector<uint64_t>& serials, const std::string& why) {
  // By serial, not by pointer: failing one operation may complete others
  // (the next collective of its group), which callers may then destroy.
  for (uint64_t serial : serials) {
    auto found = inFlight_.find(serial);
    if (found != inFlight_.end() && !found->second->completed_) {
      Operation& op = *found->second;
      failOperation(op, std::make_exception_ptr(AbortedError(op.name() + " was aborted: " + why)));
    }
  }
}

// ---- Groups ---------------------------------------------------------------------

void Engine::useJobKey(uint64_t key) {
  runOnDriver([&] {
    if (jobKey_ == key) {
      return;
    }
    const bool groupsAlive =
        std::any_of(groups_.begin(), groups_.end(), [](const std::weak_ptr<Group>& group) { return !group.expired(); });
    if (jobKey_ && groupsAlive) {
      throw Error(
          "this process still has ucxcoll groups of another job (set up through a different store); destroy them "
          "(dist.destroy_process_group()) before joining a new job");
    }
    if (jobKey_) {
      // With no group alive, whatever waits here is a late message of the
      // job this process leaves (its peers learn this process's address
      // for the new job only after this): drop it now, while its tag still
      // decodes as the old job's. First take in what has arrived (bounded:
      // a stranger may keep sending).
      for (int pass = 0; pass < 64 && transport_->progress() > 0; ++pass) {
      }
      if (std::size_t late = transport_->discard(0, 0); late > 0) {
        lateMessages_.fetch_add(late, std::memory_order_relaxed);
        UCXCOLL_INFO("dropped " << late << " late message(s) of the job this process left");
      }
      leftAJob_ = true;
    }
    transport_->setJobKey(key);
    jobKey_ = key;
  });
}

uint32_t Engine::openChannel() {
  return runOnDriver([this]() -> uint32_t {
    for (uint32_t tried = 0; tried < tag::kMaxChannel; ++tried) {
      uint32_t channel = nextChannel_;
      nextChannel_ = nextChannel_ == tag::kMaxChannel ? 1 : nextChannel_ + 1;
      if (channels_[channel] != ChannelState::Open) {
        channels_[channel] = ChannelState::Open;
        strayRangesStale_ = true;
        std::erase_if(closedLazyGroups_, [channel](const auto& closed) { return closed->channel() == channel; });
        // Messages an earlier group with this number never received.
        std::size_t dropped = transport_->discard(tag::channelBlockTag(channel), tag::channelBlockMask(0));
        if (dropped > 0) {
          UCXCOLL_DEBUG("channel " << channel << ": dropped " << dropped << " stale message(s) of an earlier group");
        }
        return channel;
      }
    }
    throw Error("more than " + std::to_string(tag::kMaxChannel) +
                " process groups are alive in this process; destroy some (dist.destroy_process_group(group))");
  });
}

void Engine::releaseChannel(uint32_t channel) {
  runOnDriver([this, channel] {
    channels_.at(channel) = ChannelState::Closed;
    strayRangesStale_ = true;
  });
}

namespace {

// Why `count` peers on this host count as dead.
std::string exitedOnThisHost(std::size_t count) {
  return count == 1 ? "(its process on this host exited)" : "(their processes on this host exited)";
}

// "rank 2 (pid 4242)", "ranks 1 (pid 11), 2 (pid 12)" for ranks this
// process watches; ranks on other hosts with their host, those of one host
// together: "ranks 2, 3 (on node7)".
std::string describeRanks(const Group& group, const std::vector<int>& ranks) {
  auto hostOf = [&](int rank) -> const std::string& {
    static const std::string none;
    return group.onOtherHost(rank) && !group.process(rank).known() ? group.hostName(rank) : none;
  };
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t index = 0; index < ranks.size(); ++index) {
    const int rank = ranks[index];
    text += (index > 0 ? ", " : "") + std::to_string(rank);
    if (group.process(rank).known()) {
      text += " (pid " + std::to_string(group.process(rank).pid) + ")";
    } else if (const std::string& host = hostOf(rank); !host.empty()) {
      if (index + 1 == ranks.size() || hostOf(ranks[index + 1]) != host) {
        text += " (on " + host + ")";
      }
    }
  }
  return text;
}

}  // namespace

std::shared_ptr<Group> Engine::createGroup(std::string name, int rank, int size, uint32_t channel,
                                           PeerAddresses addresses, std::vector<uint32_t> peerChannels,
                                           const std::vector<ProcessIdentity>& processes,
                                           const std::vector<bool>& onOtherHost, ConnectWhen connectWhen) {
  return runOnDriver([&] {
    auto group = std::make_shared<Group>(name, rank, size, channel, std::vector<PeerHandle>{}, std::move(peerChannels));
    if (!processes.empty()) {
      group->processes_ = processes;
    }
    group->onOtherHost_ = onOtherHost;
    // Watch first, so that a peer dying from here on is reported.
    std::vector<int> gone;
    for (int peer = 0; peer < size; ++peer) {
      const ProcessIdentity& process = group->process(peer);
      if (peer == rank || !process.known()) {
        continue;
      }
      std::lock_guard<std::mutex> lock(peerWatchMutex_);
      if (!peerWatch_ && !stopRequested_.load()) {
        peerWatch_ = std::make_unique<PeerWatch>([this](const ProcessIdentity& dead) { notePeerDied(dead); });
      }
      if (std::find(goneProcesses_.begin(), goneProcesses_.end(), process) != goneProcesses_.end() ||
          (peerWatch_ && !peerWatch_->watch(process))) {
        gone.push_back(peer);
      }
    }
    const bool goneBefore = !gone.empty();
    group->peers_.assign(addresses->size(), nullptr);
    group->addresses_ = std::move(addresses);
    const std::string& mode = config().connect;
    const bool atSetup =
        connectWhen == ConnectWhen::AtSetup || (connectWhen == ConnectWhen::AsConfigured &&
                                                (mode == "eager" || (mode == "auto" && size <= kEagerConnectMaxRanks)));
    group->connectsLazily_ = !atSetup;
    std::vector<int> left;         // alive, but no longer running ucxcoll
    std::vector<int> unreachable;  // no route from here to what they offer
    for (int peer = 0; peer < size; ++peer) {
      // This process itself always, so that a transport that cannot even
      // reach its own address fails the setup.
      if ((!atSetup && peer != rank) || std::find(gone.begin(), gone.end(), peer) != gone.end()) {
        continue;
      }
      // Every peer that cannot be reached is named, not just the first. A
      // dead peer, or one that left, does not make the setup throw: the
      // group is made failed instead, and its first operation raises naming
      // the rank. Ranks whose setup finished before the death learn of it
      // at their first operation too, so every survivor leaves
      // init_process_group alike; an init that raised on some ranks only
      // would leave torch's group numbering different on them, and their
      // next init_process_group (the recovery) would wait for each other
      // under different store keys.
      switch (tryConnect(*group, peer).outcome) {
        case Reach::Connected:
          break;
        case Reach::Unreachable:
          unreachable.push_back(peer);
          break;
        case Reach::Left:
          left.push_back(peer);
          break;
        case Reach::Gone:
          gone.push_back(peer);
          break;
      }
    }
    if (!unreachable.empty()) {
      throw UnreachableError("no route to what these ranks offer", unreachable);
    }
    std::vector<std::string> why;
    if (!gone.empty()) {
      std::sort(gone.begin(), gone.end());
      why.push_back(describeRanks(*group, gone) + " died " +
                    (goneBefore ? "before the group was set up " : "while the group was being set up ") +
                    exitedOnThisHost(gone.size()));
    }
    if (!left.empty()) {
      why.push_back(describeRanks(*group, left) + (left.size() == 1 ? " had" : " had each") +
                    " closed ucxcoll before this rank connected to the group (destroyed or shut down its groups)");
    }
    if (!why.empty()) {
      gone.insert(gone.end(), left.begin(), left.end());
      std::sort(gone.begin(), gone.end());
      group->deadRanks_ = gone;
      group->setFailure(why.size() == 1 ? why[0] : why[0] + "; " + why[1]);
    }
    std::erase_if(groups_, [](const std::weak_ptr<Group>& weak) { return weak.expired(); });
    groups_.push_back(group);
    return group;
  });
}

Engine::ReachResult Engine::tryConnect(Group& group, int peer) {
  const auto index = static_cast<std::size_t>(peer);
  try {
    group.peers_[index] = transport_->connect(
        (*group.addresses_)[index], group.onOtherHost(peer) ? PeerLocation::OtherHost : PeerLocation::ThisHost);
    return {Reach::Connected, {}};
  } catch (const UnreachableError& error) {
    return {Reach::Unreachable, error.what()};
  } catch (const Error& error) {
    // A peer that exits while we connect takes its shared memory along,
    // and UCX says only that: name the dead rank instead. A peer that lives
    // on but has already closed ucxcoll (its setup finished first, its
    // group failed, and it destroyed it) has left.
    if (peer == group.rank() || !group.process(peer).known()) {
      throw;
    }
    if (processAlive(group.process(peer))) {
      if (!transport_->hasLeft((*group.addresses_)[index])) {
        throw;
      }
      return {Reach::Left, error.what()};
    }
    return {Reach::Gone, error.what()};
  }
}

PeerHandle Engine::reach(Group& group, int peer) {
  const ReachResult result = tryConnect(group, peer);
  std::string why;
  switch (result.outcome) {
    case Reach::Connected:
      return group.peer(peer);
    case Reach::Unreachable:
      why = group.describeUnreachable_ ? group.describeUnreachable_({peer})
                                       : describeRanks(group, {peer}) + " cannot be reached: " + result.detail;
      break;
    case Reach::Left:
      why = describeRanks(group, {peer}) +
            " had closed ucxcoll before this rank first connected to it (destroyed or shut down its groups)";
      break;
    case Reach::Gone:
      why = describeRanks(group, {peer}) + " died before this rank first connected to it " + exitedOnThisHost(1);
      break;
  }
  group.deadRanks_.insert(std::upper_bound(group.deadRanks_.begin(), group.deadRanks_.end(), peer), peer);
  group.setFailure(why);
  UCXCOLL_DEBUG("group \"" << group.name() << "\": " << why);
  return nullptr;
}

void Engine::notePeerDied(const ProcessIdentity& process) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    deadProcesses_.push_back(process);
    peerDeathPending_.store(true, std::memory_order_release);
  }
  wakeDriver();
}

void Engine::wakeDriver() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (driver_ == Driver::None) {
      progressThreadWanted_ = true;
    }
  }
  doorbell_.ring();
  transport_->interrupt();
}

void Engine::handlePeerDeaths() {
  std::vector<ProcessIdentity> dead;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dead.swap(deadProcesses_);
    peerDeathPending_.store(false, std::memory_order_relaxed);
  }
  goneProcesses_.insert(goneProcesses_.end(), dead.begin(), dead.end());
  std::vector<std::shared_ptr<Group>> live;
  for (const auto& weak : groups_) {
    if (auto group = weak.lock()) {
      live.push_back(std::move(group));
    }
  }
  for (const auto& group : live) {
    std::vector<int> ranks;
    for (int peer = 0; peer < group->size(); ++peer) {
      const ProcessIdentity& process = group->process(peer);
      if (peer != group->rank() && process.known() &&
          std::find(goneProcesses_.begin(), goneProcesses_.end(), process) != goneProcesses_.end()) {
        ranks.push_back(peer);
      }
    }
    failGroupPeers(*group, std::move(ranks), "");
  }
}

void Engine::handleFailedConnections() {
  for (const PeerFailure& failure : transport_->takeFailedPeers()) {
    transport_->peerGone(failure.peer);
    for (const auto& weak : groups_) {
      auto group = weak.lock();
      if (!group) {
        continue;
      }
      std::vector<int> ranks;
      for (int peer = 0; peer < group->size(); ++peer) {
        if (peer != group->rank() && group->peer(peer) == failure.peer) {
          ranks.push_back(peer);
        }
      }
      if (failure.departed) {
        // Everything the rank sent has arrived: an operation that waits for
        // nothing more from it finishes; one that does fails now.
        failGroupPeers(*group, std::move(ranks), "(" + failure.detail + ")", "left", true);
      } else {
        failGroupPeers(*group, std::move(ranks),
                       "(the connection to its host broke: " + failure.detail + "; its process or host is gone)");
      }
    }
  }
}

void Engine::failGroupPeers(Group& group, std::vector<int> ranks, const std::string& why, const char* fate,
                            bool spareUnaffected) {
  std::erase_if(ranks, [&](int peer) {
    return std::find(group.deadRanks_.begin(), group.deadRanks_.end(), peer) != group.deadRanks_.end();
  });
  if (ranks.empty()) {
    return;
  }
  for (int peer : ranks) {
    if (PeerHandle handle = group.peer(peer)) {  // never connected: nothing to drop
      transport_->peerGone(handle);
    }
    group.deadRanks_.push_back(peer);
  }
  std::sort(group.deadRanks_.begin(), group.deadRanks_.end());
  const std::string reason = why.empty() ? exitedOnThisHost(ranks.size()) : why;
  const std::string cause = describeRanks(group, ranks) + " of group \"" + group.name() + "\" " + fate + " " + reason;
  group.setFailure(cause, !spareUnaffected);
  UCXCOLL_DEBUG(cause);
  // Like abortGroup: queued collectives first, so that failing the running
  // one does not start them.
  std::vector<uint64_t> victims;
  for (Operation* op : group.waiting_) {
    victims.push_back(op->serial_);
  }
  group.waiting_.clear();
  auto affected = [&](const Operation& op) {
    // An operation made for a failed group (a shrink's exchange) fails only
    // for ranks it waits for.
    if (!spareUnaffected && !op.runsOnFailedGroup_) {
      return true;
    }
    const std::vector<int> awaited = op.peersAwaited();
    return std::any_of(ranks.begin(), ranks.end(),
                       [&](int peer) { return std::find(awaited.begin(), awaited.end(), peer) != awaited.end(); });
  };
  if (group.running_ != nullptr && affected(*group.running_)) {
    victims.push_back(group.running_->serial_);
  }
  for (Operation* op : group.transfers_) {
    if (affected(*op)) {
      victims.push_back(op->serial_);
    }
  }
  if (!victims.empty()) {
    group.notifyFailure();
  }
  for (uint64_t serial : victims) {
    auto found = inFlight_.find(serial);
    if (found != inFlight_.end() && !found->second->completed_) {
      Operation& op = *found->second;
      failOperation(op, std::make_exception_ptr(PeerGoneError(op.name() + " failed: " + cause)));
    }
  }
}

void Engine::closeGroup(const std::shared_ptr<Group>& group, bool wait, LeaveReason leaving) {
  // A collective-queue entry, so that it runs after the collectives
  // submitted before it.
  class CloseGroup final : public Operation {
   public:
    CloseGroup(Engine& engine, const std::shared_ptr<Group>& group, LeaveReason leaving)
        : Operation(Kind::Collective, group, std::chrono::milliseconds(0)),
          owner_(engine),
          closing_(group),
          leaving_(leaving) {
      runsOnFailedGroup_ = true;
    }

   protected:
    std::string describe() const override { return "closing the group"; }
    Task run() override {
      Group& group = *this->group();
      // Peers still waiting for this rank in a later collective learn at
      // once that it will not come (Collective::checkForFailureNotice).
      // Not where a rank of the group is gone: every survivor learns that by
      // itself and names it, and a notice would only race with it.
      bool rankOfGroupGone = false;
      for (int peer = 0; peer < group.size(); ++peer) {
        rankOfGroupGone = rankOfGroupGone || group.rankGone(peer);
      }
      // Once: abort() closes the group, then shuts down.
      const bool tellPeers = !rankOfGroupGone && !group.closed_;
      const auto completed = static_cast<uint32_t>(group.finishedCollectives_ & tag::kMaxInternalValue);
      if (tellPeers) {
        tellGroup(tag::kLeftNotice + static_cast<uint32_t>(leaving_), completed, static_cast<uint32_t>(group.rank()));
      }
      if (group.connectsLazily() && !group.closed_ && !group.notices_.empty()) {
        // A rank that connects later is told that this one left
        // (answerLateReaches) until the channel is reused. Nothing of the
        // backend's may be called for the group from here on.
        group.setFailureListener(nullptr);
        owner_.closedLazyGroups_.push_back(closing_);
      }
      group.closed_ = true;
      std::vector<uint64_t> transfers;
      for (Operation* transfer : group.transfers_) {
        transfers.push_back(transfer->serial_);
      }
      owner_.abortEach(transfers, "the process group was shut down");
      owner_.channels_.at(group.channel()) = ChannelState::Closed;
      owner_.strayRangesStale_ = true;
      co_return;
    }

   private:
    Engine& owner_;
    std::shared_ptr<Group> closing_;
    LeaveReason leaving_;
  };
  auto op = std::make_unique<CloseGroup>(*this, group, leaving);
  auto completion = op->sharedCompletion();
  const bool waitHere = wait && !drivingHere();
  if (Lease lease = submit(std::move(op), waitHere)) {
    lease.driveUntil(*completion);
  }
  if (waitHere) {
    this->wait(*completion);
  }
}

void Engine::abortGroup(const std::shared_ptr<Group>& group, const std::string& reason, LeaveReason leaving) {
  abortOperations(group, reason);
  closeGroup(group, false, leaving);
}

void Engine::abortOperations(const std::shared_ptr<Group>& group, const std::string& reason) {
  runOnDriver([&] {
    std::vector<uint64_t> victims;
    for (Operation* op : group->waiting_) {
      victims.push_back(op->serial_);
    }
    group->waiting_.clear();
    if (group->running_ != nullptr) {
      victims.push_back(group->running_->serial_);
    }
    for (Operation* op : group->transfers_) {
      victims.push_back(op->serial_);
    }
    abortEach(victims, reason);
  });
}

}  // namespace ucxcoll
