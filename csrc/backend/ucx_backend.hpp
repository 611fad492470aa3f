#pragma once
// The c10d::Backend that torch.distributed drives for backend="ucxcoll".
// It validates tensors on the caller's thread, turns them into raw buffers,
// and hands each collective to the process-wide ProgressEngine, which runs
// the algorithm over this group's UcxTransport and completes the Work.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backend/ucx_work.hpp"
#include "collectives/collective.hpp"
#include "transport/progress_engine.hpp"
#include "transport/ucx_transport.hpp"

namespace ucxcoll {

class UcxBackend : public c10d::Backend {
 public:
  UcxBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
             std::string groupName);
  ~UcxBackend() override;

  const std::string getBackendName() const override { return "ucxcoll"; }

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

  uint64_t getSequenceNumberForGroup() override { return issued_.load(); }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  // Finish what is queued, then release this group's UCX resources.
  void shutdown() override;
  // Fail what is pending or queued at once, then shut down.
  void abort() override;

  uint32_t groupId() const { return groupId_; }

 private:
  using Body = std::function<void(Collective&)>;

  // Run `body` as the group's next collective: on the engine, or, for a
  // synchronous call (`asyncOp` false) while the engine is idle, right here
  // on the caller's thread. The Work completes with `result` once it ran
  // (or fails with the error it threw).
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType opType, const char* opName, std::chrono::milliseconds timeout,
                                        bool asyncOp, c10::IValue result, c10::TypePtr resultType, Body body);
  void runCollective(const c10::intrusive_ptr<UcxWork>& work, const std::string& name,
                     std::chrono::milliseconds timeout, uint64_t sequence, const Body& body);
  std::chrono::milliseconds effectiveTimeout(std::chrono::milliseconds requested) const;
  void checkUsable(const char* opName);

  std::string groupName_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<ProgressEngine> engine_;
  // Used only by the thread running this group's collective; transportMutex_
  // only guards its release against a concurrent abort().
  std::unique_ptr<UcxTransport> transport_;
  std::mutex transportMutex_;
  Workspace workspace_;
  uint32_t groupId_ = 0;

  std::mutex submitMutex_;  // makes "take a sequence number, enqueue" atomic
  std::atomic<uint64_t> issued_{0};
  bool closed_ = false;  // guarded by submitMutex_

  // The first error that broke the group; later collectives fail with it.
  mutable std::mutex failureMutex_;
  std::string failure_;
};

}  // namespace ucxcoll
