#pragma once
// The Work handed back for every operation. It follows the engine's
// Completion of the operation: isCompleted() reads it, wait() waits for it
// (driving the engine meanwhile when no other thread does, so that a
// thread that waits right after submitting pays no thread hand-off), and
// once the operation completes the engine's callback completes the Future
// with the output tensors (what DDP comm hooks read), or with the error;
// as with gloo, the Future is complete by the time wait() returns.
//
// Once an operation succeeds, the completion listeners (torch's completion
// hooks, registered on the backend; what torch's flight recorder marks
// "completed" with) are told its completion key and duration, on the driver,
// before any waiter wakes: a dump taken right after wait() returned shows it
// completed. Failed operations are not reported (torch's contract: a failed
// collective must keep reading as "not finished").
//
// CoalescedWork stands for the operations issued between startCoalescing()
// and endCoalescing() (batch_isend_irecv): it completes when all of them
// have.

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/hook_table.hpp"
#include "backend/torch_compat.hpp"
#include "engine/completion.hpp"
#include "engine/engine.hpp"

namespace ucxcoll {

// Told (completion key, duration in ms) of every operation that succeeded.
using CompletionListener = std::function<void(uint64_t, float)>;
using CompletionListeners = HookTable<CompletionListener>;

// Keys that are never reused, for correlating a completion with its Work
// after the Work may be gone (torch's Work::getCompletionKey contract).
uint64_t nextCompletionKey();

// The tensors of an operation's result: a list of tensors, or of lists.
std::vector<at::Tensor> tensorsIn(const c10::IValue& value);

class UcxWork : public c10d::Work {
 public:
  // `result` is what the Future completes with; its type is `resultType`
  // (a list of tensors, or for all_gather a list of lists, as gloo does).
  UcxWork(std::weak_ptr<Engine> engine, std::shared_ptr<Completion> completion, int rank, c10d::OpType opType,
          const char* profilingTitle, c10::IValue result, c10::TypePtr resultType, uint64_t sequence);

  bool isCompleted() override { return completion_->done(); }
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return sequence_; }
  int sourceRank() const override;
  // Milliseconds from submission to completion, once completed successfully.
  float getDuration() const override;
#ifdef C10D_BACKEND_HAS_HOOKS
  uint64_t getCompletionKey() const override {
    return completionKey_;
  }
#endif

  // Called on the engine's driver once the operation succeeded, before its
  // waiters wake.
  void noteSucceeded(const CompletionListeners& listeners);
  // Called on the engine's driver once the operation completed: completes
  // the Future, on a FutureCompleter thread, unless a caller has claimed
  // that (below).
  void completeFuture(std::exception_ptr error);
  // A thread that is about to wait for the operation (a synchronous
  // collective driving it, Work.wait()) claims the Future's completion,
  // so that it completes the Future itself once it stops waiting instead
  // of the driver handing it to another thread: that hand-off (a thread
  // woken on a busy core) cost more than the whole 8-byte all_reduce. A
  // claim is held by one thread at a time and taken at most once; while it
  // is held the driver leaves the Future alone, and releasing it completes
  // the Future on the releasing thread if the operation completed
  // meanwhile (else the driver completes it as usual). Callbacks added to
  // the Future then run on that thread, a caller's, never the driver.
  class [[nodiscard]] FutureClaim {
   public:
    explicit FutureClaim(UcxWork& work);
    FutureClaim(const FutureClaim&) = delete;
    FutureClaim& operator=(const FutureClaim&) = delete;
    ~FutureClaim();

   private:
    UcxWork* work_;  // null: not claimed (another thread holds or held it)
  };
  void setSourceRank(int rank) {
    sourceRank_.store(rank, std::memory_order_release);
  }
  // The error the operation failed with, as ucxcoll raised it (before the
  // conversion to torch's exception types); null while running or on success.
  std::exception_ptr ucxcollError() const {
    return completion_->done() ? completion_->error() : nullptr;
  }

 private:
  std::weak_ptr<Engine> engine_;
  std::shared_ptr<Completion> completion_;
  c10::IValue result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  uint64_t sequence_;
  uint64_t completionKey_ = nextCompletionKey();
  Clock::time_point submitted_ = Clock::now();
  std::atomic<float> durationMs_{-1.0f};  // set on success
  std::atomic<int> sourceRank_{-1};
  mutable std::mutex errorMutex_;
  mutable std::exception_ptr torchError_;  // the completion's error, converted once
  // Who completes the Future (FutureClaim): nobody yet; a claim held; the
  // operation completed while the claim was held; settled (the driver posts
  // it, or the claimant completed it).
  enum FutureState : int { kUnclaimed, kClaimed, kCompletedWhileClaimed, kSettled };
  std::atomic<int> futureState_{kUnclaimed};
  std::atomic<bool> futureFinished_{false};  // the Future's completion was taken (finishFuture)
  void finishFuture(const std::exception_ptr& error);
};

class CoalescedWork : public c10d::Work {
 public:
  // `listeners` are told once every member succeeded.
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<UcxWork>> members,
                std::shared_ptr<CompletionListeners> listeners);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
#ifdef C10D_BACKEND_HAS_HOOKS
  uint64_t getCompletionKey() const override {
    return completionKey_;
  }
#endif

 private:
  uint64_t completionKey_ = nextCompletionKey();
  std::vector<c10::intrusive_ptr<UcxWork>> members_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace ucxcoll
