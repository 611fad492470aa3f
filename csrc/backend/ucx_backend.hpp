#pragma once
// The c10d::Backend that torch.distributed drives for backend="ucxcoll".
// A thin router: each method checks its input on the caller's thread
// (tensor_checks.hpp), turns tensors into raw buffers, and hands an
// operation to the process-wide Engine, which runs it and completes the
// Work. The methods live by family: collective_ops.cpp (collectives) and
// point_to_point_ops.cpp (send/recv); this file's .cpp holds what they
// share: group setup, submission, coalescing, shutdown.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/ucx_work.hpp"
#include "collectives/collective.hpp"
#include "collectives/point_to_point.hpp"
#include "engine/engine.hpp"

namespace ucxcoll {

class UcxBackend : public c10d::Backend {
 public:
  UcxBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
             std::string groupName);
  ~UcxBackend() override;

  const std::string getBackendName() const override { return "ucxcoll"; }

  // ---- Collectives (collective_ops.cpp) -----------------------------------
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                           std::vector<at::Tensor>& inputTensors,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // ---- Point-to-point (point_to_point_ops.cpp) ----------------------------
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // ---- Coalescing: one Work for the operations in between -----------------
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  uint64_t getSequenceNumberForGroup() override { return group_->issued(); }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  // Finish the collectives already submitted, end pending point-to-point
  // transfers, then release this group's resources.
  void shutdown() override;
  // Fail everything pending or queued at once, then shut down.
  void abort() override;

  uint32_t channel() const { return group_->channel(); }

 private:
  // Run `body` as the group's next collective. A synchronous call
  // (`asyncOp` false) drives the engine right here until it completes, if
  // no other thread is driving.
  c10::intrusive_ptr<c10d::Work> runCollective(c10d::OpType opType, const char* opName,
                                               std::chrono::milliseconds requestedTimeout, bool asyncOp,
                                               c10::IValue result, c10::TypePtr resultType, Collective::Body body);
  // Hand over a point-to-point transfer built by `make(number, timeout)`.
  template <typename MakeTransfer>
  c10::intrusive_ptr<c10d::Work> runTransfer(c10d::OpType opType, const char* opName, c10::IValue result,
                                             MakeTransfer make);
  c10::intrusive_ptr<UcxWork> makeWork(Operation& op, c10d::OpType opType, const char* opName, c10::IValue result,
                                       c10::TypePtr resultType, uint64_t sequence);
  std::chrono::milliseconds effectiveTimeout(std::chrono::milliseconds requested) const;
  // Refuse (fail fast) once the group failed or was shut down.
  void checkUsable(const char* opName);

  std::string groupName_;
  std::atomic<std::chrono::milliseconds> timeout_;
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<Group> group_;
  std::shared_ptr<Workspace> workspace_ = std::make_shared<Workspace>();

  std::mutex submitMutex_;              // makes "take a sequence number, submit" atomic
  bool closed_ = false;                 // guarded by submitMutex_
  std::atomic<uint64_t> transfers_{0};  // point-to-point numbering, for messages

  std::mutex coalescingMutex_;  // guards batch_ (and changes of coalescing_)
  std::atomic<bool> coalescing_{false};
  std::vector<c10::intrusive_ptr<UcxWork>> batch_;
};

}  // namespace ucxcoll
