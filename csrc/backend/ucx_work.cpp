#include "backend/ucx_work.hpp"

#include <c10/util/Exception.h>

namespace ucxcoll {

UcxWork::UcxWork(int rank, c10d::OpType opType, const char* profilingTitle, c10::IValue result, c10::TypePtr resultType,
                 uint64_t sequence)
    : c10d::Work(rank, opType, profilingTitle),
      result_(std::move(result)),
      future_(c10::make_intrusive<c10::ivalue::Future>(std::move(resultType))),
      sequence_(sequence) {}

bool UcxWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool UcxWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr UcxWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

std::vector<at::Tensor> UcxWork::result() {
  std::vector<at::Tensor> tensors;
  if (result_.isTensorList()) {
    for (const auto& tensor : result_.toTensorVector())
      tensors.push_back(tensor);
  } else if (result_.isList()) {  // list of lists (all_gather)
    for (const auto& inner : result_.toListRef()) {
      for (const auto& tensor : inner.toTensorVector())
        tensors.push_back(tensor);
    }
  }
  return tensors;
}

bool UcxWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    C10_THROW_ERROR(DistBackendError, "ucxcoll: Work.wait(timeout=" + std::to_string(timeout.count()) +
                                          " ms) expired before operation #" + std::to_string(sequence_) +
                                          " completed (it keeps running; its own deadline still applies)");
  }
  if (exception_) {
    std::rethrow_exception(exception_);
  }
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> UcxWork::getFuture() {
  return future_;
}

void UcxWork::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
  }
  cv_.notify_all();
  // Runs the Future's callbacks (e.g. a DDP comm hook's .then()) here.
  future_->markCompleted(result_);
}

void UcxWork::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = error;
  }
  cv_.notify_all();
  future_->setError(error);
}

}  // namespace ucxcoll
