#pragma once
// The Work handed back for every collective. It is completed from the
// progress engine's thread: finish() or fail() marks it done, wakes wait(),
// and completes its Future with the output tensors (what DDP comm hooks
// read), or with the error.

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <exception>
#include <vector>

namespace ucxcoll {

class UcxWork : public c10d::Work {
 public:
  // `result` is what the Future completes with; its type is `resultType`
  // (a list of tensors, or for all_gather a list of lists, as gloo does).
  UcxWork(int rank, c10d::OpType opType, const char* profilingTitle, c10::IValue result, c10::TypePtr resultType,
          uint64_t sequence);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return sequence_; }

  void finish();
  void fail(std::exception_ptr error);

 private:
  c10::IValue result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  uint64_t sequence_;
};

}  // namespace ucxcoll
