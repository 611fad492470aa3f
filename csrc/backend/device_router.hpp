#pragma once
// The c10d::Backend that torch registers for backend="ucxcoll", on both the
// devices it serves. torch hands one object per process group every call,
// whatever the tensors' device; this one looks at the tensors and forwards:
//   CPU tensors  -> the group's UcxBackend (our collectives over UCX);
//   CUDA tensors -> torch's own ProcessGroupNCCL for the same ranks.
// The NCCL backend is made by a factory (the Python package builds it with
// torch's public API), the first time a CUDA tensor arrives, or at once for
// init_process_group(device_id=cuda:N): a CPU-only job never initialises
// CUDA. It is reached only through the c10d::Backend virtual interface, so
// no NCCL header or ABI enters this build, and CUDA calls keep NCCL's own
// semantics: the Work handed back is NCCL's (stream ordering, CUDA futures,
// recordStream, its watchdog and DistBackendError).
// A call whose tensors sit on two devices raises before anything is sent.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/torch_compat.hpp"
#include "backend/ucx_backend.hpp"

namespace ucxcoll {

// What the GPU backend of a group is built from: the group's own store
// (the factory namespaces it) and membership.
struct GpuGroupSpec {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int size = 0;
  std::chrono::milliseconds timeout{0};
  std::string groupName;
  std::vector<uint64_t> globalRanks;  // empty: the default group
};
using GpuBackendFactory = std::function<c10::intrusive_ptr<c10d::Backend>(const GpuGroupSpec&)>;

class DeviceRouter : public c10d::Backend {
 public:
  DeviceRouter(c10::intrusive_ptr<UcxBackend> cpu, GpuBackendFactory factory, GpuGroupSpec spec);

  const std::string getBackendName() const override { return "ucxcoll"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return cpu_->getBackendOptions(); }

  // (The one-tensor names of torch 2.15, all_gather_single and its kin, are
  // routed where torch has them; older torch calls the old names.)

  // ---- Collectives --------------------------------------------------------
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                           std::vector<at::Tensor>& inputTensors,
                                           const c10d::AllgatherOptions& opts) override;
#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                   const c10d::AllgatherOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputTensorLists,
                                                     std::vector<at::Tensor>& inputTensors,
                                                     const c10d::AllgatherOptions& opts) override;
#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                        std::vector<at::Tensor>& inputTensors,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputTensors,
                                         std::vector<std::vector<at::Tensor>>& inputTensors,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputTensors,
                                                std::vector<std::vector<at::Tensor>>& inputTensors,
                                                const c10d::ReduceScatterOptions& opts) override;
#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                       const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                      const c10d::ReduceScatterOptions& opts) override;
#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                   std::vector<int64_t>& outputSplitSizes,
                                                   std::vector<int64_t>& inputSplitSizes,
                                                   const c10d::AllToAllOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
                                          const c10d::AllToAllOptions& opts) override;
  // With a bound CUDA device (init_process_group(device_id=...)) or device
  // ids: NCCL; otherwise UCX.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // gloo's monitored barrier is a CPU feature: always UCX.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // ---- Point-to-point -----------------------------------------------------
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // ---- Coalescing: torch opens a block per device; the block goes to the
  // backend of the first call inside it, and a call on another device raises.
  bool supportsCoalescing() const override {
    return true;
  }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // ---- Group lifetime and settings: both sides -----------------------------
  bool supportsSplitting() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
#ifdef UCXCOLL_TORCH_HAS_SHRINK
  // The UCX side shrinks without the store (see UcxBackend::shrink); the
  // smaller group's CUDA side is made on first use, as for a split, from
  // this group's store under a prefix of the shrink's own.
  bool supportsShrinking() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& optsOverride) override;
#endif
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setGroupUid(const std::string& uid) override;
  // The bound device (init_process_group(device_id=...)) is what torch set
  // on this object when it registered it; the GPU backend gets it when made.
  void eagerConnectSingleDevice(at::Device device) override;
  c10d::ErrorType getError() override;  // NCCL's, once it exists
  uint64_t getSequenceNumberForGroup() override {
    return cpu_->getSequenceNumberForGroup();
  }
  void abort() override;
  void shutdown() override;

#ifdef C10D_BACKEND_HAS_HOOKS
  // Abort hooks: the UCX side's (see UcxBackend), and the GPU backend's where
  // it has them (ProcessGroupNCCL2): the router keeps every hook registered,
  // so that a GPU backend made later gets the ones registered before it.
  bool supportsAbortHooks() const override {
    return true;
  }
  void registerAbortHook(int64_t hookId, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hookId) override;

  // Completion hooks: likewise.
  bool supportsCompletionHooks() const override {
    return true;
  }
  void registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t hookId) override;
#endif

  // torch's onCompletion hook and collective timing (see UcxBackend): the
  // UCX side's, and the GPU backend's once it exists (it gets them when it
  // is made). waitForPendingWorks() waits on both.
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
  void waitForPendingWorks() override;
  void enableCollectivesTiming() override;

#ifdef C10D_BACKEND_HAS_WINDOW
  // Windows (one-sided operations) are the GPU backend's (ProcessGroupNCCL2
  // has them): supported once the group's CUDA side exists (first CUDA
  // call, or init_process_group(device_id=cuda:N)) and has them. A window
  // over a CUDA tensor goes there, making the CUDA side if need be; one over
  // a CPU tensor is refused (the UCX side has none).
  bool supportsWindow() const override;
  c10::intrusive_ptr<c10d::Window> new_window(const std::optional<at::Tensor>& tensor) override;
#endif

#ifdef C10D_BACKEND_HAS_RECONFIGURE
  // The UCX side's (see UcxBackend); for groups without a GPU backend yet,
  // and the group gets none afterwards.
  bool supportsReconfigure() const override {
    return true;
  }
  c10d::ReconfigureHandle get_reconfigure_handle() const override {
    return cpu_->get_reconfigure_handle();
  }
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif

  UcxBackend& cpuBackend() {
    return *cpu_;
  }
  // The GPU backend if a CUDA call (or device_id) created it, else null.
  c10::intrusive_ptr<c10d::Backend> gpuBackendIfCreated() const;

 private:
  // A router for a child group (split, shrink) whose GPU side is made from
  // `store` on first use.
  c10::intrusive_ptr<DeviceRouter> routerFor(c10::intrusive_ptr<UcxBackend> cpuChild,
                                             c10::intrusive_ptr<c10d::Store> store) const;
  enum class Route { Cpu, Gpu };
  // The backend the tensors' device belongs to (ValueError when they sit on
  // two devices, NotImplementedError on a third device type) ...
  Route routeOf(const char* op, const std::vector<c10::Device>& devices) const;
  // ... taken by the call `op`: the first call of an open coalescing block
  // opens the block on that backend; a later one on the other raises.
  Route enter(const char* op, Route chosen);
  Route route(const char* op, const std::vector<c10::Device>& devices);
  c10d::Backend& gpu();  // created on first use

  c10::intrusive_ptr<UcxBackend> cpu_;
  GpuBackendFactory factory_;

  std::mutex creationMutex_;     // one creation at a time; held while the factory runs
  mutable std::mutex gpuMutex_;  // guards spec_, gpu_ and the hooks; never held while calling out
  GpuGroupSpec spec_;
  std::atomic<uint32_t> shrinks_{0};  // names each shrunk group's store prefix
#ifdef C10D_BACKEND_HAS_HOOKS
  std::map<int64_t, c10d::AbortHook> abortHooks_;  // registered on this group, by id
  std::map<int64_t, c10d::CompletionHook> completionHooks_;
  // Hands the hooks registered so far to a GPU backend just made.
  void registerHooksOn(c10d::Backend& gpu);
#endif
  bool collectivesTiming_ = false;         // guarded by gpuMutex_; for a GPU backend made later
  bool reconfigured_ = false;              // guarded by gpuMutex_
  c10::intrusive_ptr<c10d::Backend> gpu_;  // set once, never reset

  std::mutex coalescingMutex_;
  bool coalescing_ = false;
  std::optional<Route> coalescedRoute_;  // the block's backend, once a call chose it
};

}  // namespace ucxcoll
