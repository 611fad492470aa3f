#include "backend/ucx_work.hpp"

#include "backend/future_completer.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

#include "backend/errors.hpp"
#include "common/logging.hpp"

namespace ucxcoll {

uint64_t nextCompletionKey() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {

void tell(const CompletionListeners& listeners, uint64_t key, float durationMs) {
  if (listeners.empty()) {
    return;
  }
  const auto hooks = listeners.snapshot();
  for (const auto& [id, listener] : *hooks) {
    try {
      listener(key, durationMs);
    } catch (const std::exception& error) {
      UCXCOLL_WARN("completion hook " << id << " raised: " << error.what());
    }
  }
}

}  // namespace

UcxWork::UcxWork(std::weak_ptr<Engine> engine, std::shared_ptr<Completion> completion, int rank, c10d::OpType opType,
                 const char* profilingTitle, c10::IValue result, c10::TypePtr resultType, uint64_t sequence)
    : c10d::Work(rank, opType, profilingTitle),
      engine_(std::move(engine)),
      completion_(std::move(completion)),
      result_(std::move(result)),
      future_(c10::make_intrusive<c10::ivalue::Future>(std::move(resultType))),
      sequence_(sequence) {}

float UcxWork::getDuration() const {
  float duration = durationMs_.load(std::memory_order_acquire);
  TORCH_CHECK(duration >= 0, "ucxcoll: getDuration() is known only once operation #", sequence_,
              " completed successfully");
  return duration;
}

void UcxWork::noteSucceeded(const CompletionListeners& listeners) {
  float duration = std::chrono::duration<float, std::milli>(Clock::now() - submitted_).count();
  durationMs_.store(duration, std::memory_order_release);
  tell(listeners, completionKey_, duration);
}

bool UcxWork::isSuccess() const {
  return completion_->done() && !completion_->error();
}

std::exception_ptr UcxWork::exception() const {
  if (!completion_->done()) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(errorMutex_);
  if (!torchError_) {
    torchError_ = toTorchError(completion_->error());
  }
  return torchError_;
}

int UcxWork::sourceRank() const {
  int rank = sourceRank_.load(std::memory_order_acquire);
  TORCH_CHECK(rank >= 0, "ucxcoll: sourceRank() is known only for a completed receive from any rank");
  return rank;
}

std::vector<at::Tensor> tensorsIn(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  if (value.isList()) {  // tensors, or lists of tensors (all_gather)
    for (const auto& element : value.toListRef()) {
      if (element.isTensor()) {
        tensors.push_back(element.toTensor());
      } else if (element.isList()) {
        for (const auto& inner : element.toListRef())
          tensors.push_back(inner.toTensor());
      }
    }
  }
  return tensors;
}

std::vector<at::Tensor> UcxWork::result() {
  return tensorsIn(result_);
}

bool UcxWork::wait(std::chrono::milliseconds timeout) {
  auto until = timeout == kNoTimeout ? Clock::time_point::max() : Clock::now() + timeout;
  bool done = completion_->done();
  if (!done) {
    FutureClaim claim(*this);
    if (auto engine = engine_.lock()) {
      done = engine->wait(*completion_, until);
    } else {
      // The engine is gone; it completed (aborted) everything before.
      done = completion_->sleepUntil(until == Clock::time_point::max() ? Clock::now() + std::chrono::hours(24) : until);
    }
  }
  if (!done) {
    C10_THROW_ERROR(DistBackendError, "ucxcoll: Work.wait(timeout=" + std::to_string(timeout.count()) +
                                          " ms) expired before operation #" + std::to_string(sequence_) +
                                          " completed (it keeps running; its own deadline still applies)");
  }
  if (!future_->completed()) {
    // As with gloo, the Future is complete once wait() returns: code that
    // chains on it right after (torchft's managed work) expects its
    // callbacks to run at once. The driver may have handed the completion
    // to a future thread that has not run yet: complete it here instead,
    // or wait the moment it takes a thread that is completing it.
    finishFuture(completion_->error());
    future_->wait();
  }
  if (auto error = exception()) {
    std::rethrow_exception(error);
  }
  return true;
}

void UcxWork::completeFuture(std::exception_ptr error) {
  // The profiler's record of this operation (started by c10d::Work when a
  // profiler is active) ends now, as gloo's ends when its work finishes:
  // left to the Work's destructor it would end whenever the last reference
  // goes, possibly after the profiler that started it is gone.
  if (recordFunctionEndCallback_) {
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
  int state = kUnclaimed;
  if (!futureState_.compare_exchange_strong(state, kSettled, std::memory_order_acq_rel) && state == kClaimed &&
      futureState_.compare_exchange_strong(state, kCompletedWhileClaimed, std::memory_order_acq_rel)) {
    return;  // the claimant completes it when it stops waiting
  }
  // Completing runs the Future's callbacks (e.g. a DDP comm hook's
  // .then()), which may wait for other collectives: not on the driver.
  FutureCompleter::instance().post(
      [work = c10::intrusive_ptr<UcxWork>::reclaim_copy(this), error] { work->finishFuture(error); });
}

void UcxWork::finishFuture(const std::exception_ptr& error) {
  if (futureFinished_.exchange(true, std::memory_order_acq_rel)) {
    return;  // another thread completes it (the future thread, a waiter, a claimant)
  }
  if (error) {
    future_->setError(exception());
  } else {
    future_->markCompleted(result_);
  }
}

UcxWork::FutureClaim::FutureClaim(UcxWork& work) : work_(&work) {
  // Code that runs on the driver (a completion hook that starts a
  // collective) must not claim: it would complete the Future there.
  auto engine = work.engine_.lock();
  int state = kUnclaimed;
  if ((engine && engine->drivingHere()) ||
      !work.futureState_.compare_exchange_strong(state, kClaimed, std::memory_order_acq_rel)) {
    work_ = nullptr;
  }
}

UcxWork::FutureClaim::~FutureClaim() {
  if (work_ != nullptr && work_->futureState_.exchange(kSettled, std::memory_order_acq_rel) == kCompletedWhileClaimed) {
    // Not on the driver: a claim is released by a thread that stopped
    // driving (Engine::Lease) or never drove.
    work_->finishFuture(work_->completion_->error());
  }
}

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<UcxWork>> members,
                             std::shared_ptr<CompletionListeners> listeners)
    : c10d::Work(rank, c10d::OpType::COALESCED, "ucxcoll:coalesced"),
      members_(std::move(members)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
  if (members_.empty()) {
    tell(*listeners, completionKey_, 0.0f);
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>{}));
    return;
  }
  // Completes once the last member's Future has; carries the members'
  // tensors, or the first error. Its duration is its slowest member's.
  auto remaining = std::make_shared<std::atomic<std::size_t>>(members_.size());
  auto future = future_;
  auto all = members_;
  for (auto& member : members_) {
    member->getFuture()->addCallback([remaining, future, all, listeners, key = completionKey_](c10::ivalue::Future&) {
      if (remaining->fetch_sub(1) != 1) {
        return;
      }
      std::vector<at::Tensor> tensors;
      for (const auto& m : all) {
        if (auto error = m->exception()) {
          future->setError(error);
          return;
        }
        for (auto& tensor : m->result())
          tensors.push_back(tensor);
      }
      float slowest = 0.0f;
      for (const auto& m : all)
        slowest = std::max(slowest, m->getDuration());
      tell(*listeners, key, slowest);
      future->markCompleted(c10::IValue(tensors));
    });
  }
}

bool CoalescedWork::isCompleted() {
  for (auto& member : members_) {
    if (!member->isCompleted()) {
      return false;
    }
  }
  return true;
}

bool CoalescedWork::isSuccess() const {
  for (const auto& member : members_) {
    if (!member->isSuccess()) {
      return false;
    }
  }
  return true;
}

std::exception_ptr CoalescedWork::exception() const {
  for (const auto& member : members_) {
    if (auto error = member->exception()) {
      return error;
    }
  }
  return nullptr;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> tensors;
  for (auto& member : members_) {
    for (auto& tensor : member->result())
      tensors.push_back(tensor);
  }
  return tensors;
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  auto until = Clock::now() + timeout;
  for (auto& member : members_) {
    if (timeout == kNoTimeout) {
      member->wait(kNoTimeout);
    } else {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      member->wait(std::max(left, std::chrono::milliseconds(1)));  // 0 would mean "no timeout"
    }
  }
  // The last member's Future completes this one from its callback, which
  // may still be running on another thread.
  future_->wait();
  return true;
}

}  // namespace ucxcoll
