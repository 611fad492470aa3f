// DeviceRouter: every call looks at its tensors' device and goes, unchanged,
// to the UCX backend (CPU) or to the GPU backend (CUDA). Read with
// device_router.hpp, which says why the GPU side is torch's ProcessGroupNCCL.

#include "backend/device_router.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <c10/util/Exception.h>

namespace ucxcoll {

namespace {

void addDevices(std::vector<c10::Device>& devices, const at::Tensor& tensor) {
  if (tensor.defined()) {
    devices.push_back(tensor.device());
  }
}

void addDevices(std::vector<c10::Device>& devices, const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& tensor : tensors) {
    addDevices(devices, tensor);
  }
}

void addDevices(std::vector<c10::Device>& devices, const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& list : lists) {
    addDevices(devices, list);
  }
}

// The devices of all tensors of one call (tensors, lists, lists of lists).
template <typename... Tensors>
std::vector<c10::Device> devicesOf(const Tensors&... tensors) {
  std::vector<c10::Device> devices;
  (addDevices(devices, tensors), ...);
  return devices;
}

}  // namespace

DeviceRouter::DeviceRouter(c10::intrusive_ptr<UcxBackend> cpu, GpuBackendFactory factory, GpuGroupSpec spec)
    : c10d::Backend(cpu->getRank(), cpu->getSize()),
      cpu_(std::move(cpu)),
      factory_(std::move(factory)),
      spec_(std::move(spec)) {}

DeviceRouter::Route DeviceRouter::route(const char* op, const std::vector<c10::Device>& devices) {
  return enter(op, routeOf(op, devices));
}

DeviceRouter::Route DeviceRouter::routeOf(const char* op, const std::vector<c10::Device>& devices) const {
  Route chosen = Route::Cpu;
  if (!devices.empty()) {
    const c10::Device first = devices.front();
    for (const c10::Device& device : devices) {
      TORCH_CHECK_VALUE(device == first, "ucxcoll: ", op, " got tensors on ", first.str(), " and on ", device.str(),
                        "; the tensors of one call must all be on one device (CPU tensors go over UCX, CUDA "
                        "tensors to NCCL)");
    }
    if (first.is_cuda()) {
      chosen = Route::Gpu;
    } else {
      TORCH_CHECK_NOT_IMPLEMENTED(first.is_cpu(), "ucxcoll: ", op, " got tensors on ", first.str(),
                                  "; ucxcoll serves CPU tensors (over UCX) and CUDA tensors (over NCCL)");
    }
  }
  return chosen;
}

DeviceRouter::Route DeviceRouter::enter(const char* op, Route chosen) {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  if (coalescing_) {
    if (!coalescedRoute_) {
      if (chosen == Route::Gpu) {
        gpu().startCoalescing();
      } else {
        cpu_->startCoalescing();
      }
      coalescedRoute_ = chosen;  // once that backend's block is open
    } else {
      TORCH_CHECK_VALUE(*coalescedRoute_ == chosen, "ucxcoll: ", op, " on ", chosen == Route::Gpu ? "CUDA" : "CPU",
                        " tensors inside a coalescing block of ", chosen == Route::Gpu ? "CPU" : "CUDA",
                        " calls; a block (coalescing manager, batch_isend_irecv) takes the tensors of one device");
    }
  }
  return chosen;
}

c10d::Backend& DeviceRouter::gpu() {
  if (c10::intrusive_ptr<c10d::Backend> made = gpuBackendIfCreated()) {
    return *made;  // gpu_ is never reset, so the reference stays valid
  }
  // The factory and the setup calls below may take the GIL (the factory is
  // Python; so is a Python backend's every method). gpuMutex_ is never held
  // across them, so a thread that holds the GIL and changes a setting
  // (setTimeout, ...) cannot deadlock against a creation in progress.
  std::lock_guard<std::mutex> creating(creationMutex_);
  if (c10::intrusive_ptr<c10d::Backend> made = gpuBackendIfCreated()) {
    return *made;
  }
  TORCH_CHECK(factory_, "ucxcoll: this build cannot create a backend for CUDA tensors");
  GpuGroupSpec spec;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    TORCH_CHECK_NOT_IMPLEMENTED(!reconfigured_,
                                "ucxcoll: CUDA tensors on a group that was reconfigured (reconfigure()) are not "
                                "supported; create a new process group for them");
    spec = spec_;
  }
  c10::intrusive_ptr<c10d::Backend> made = factory_(spec);
  TORCH_CHECK(made, "ucxcoll: the factory of the CUDA backend returned nothing");
  // What torch does for a backend it registers itself: the group's bound
  // device (torch sets it on this object when it registers it), name and
  // description (NCCL logs and records them).
  made->setBoundDeviceId(getBoundDeviceId());
  if (!getGroupUid().empty()) {
    made->setGroupUid(getGroupUid());
  }
  made->setGroupDesc(getGroupDesc());
  std::chrono::milliseconds timeout;
  // Taken with gpu_ set, under one lock: what is registered before is
  // handed over below, what comes after sees gpu_ and goes there itself;
  // nothing is handed over twice.
  bool timing = false;
  std::function<void(std::shared_ptr<c10d::WorkInfo>)> onCompletion;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    gpu_ = made;
    timeout = spec_.timeout;
    timing = collectivesTiming_;
    onCompletion = onCompletionHook_;
  }
  if (timeout != spec.timeout) {
    made->setTimeout(timeout);  // setTimeout() came while the factory ran
  }
#ifdef C10D_BACKEND_HAS_HOOKS
  registerHooksOn(*made);
#endif
  if (timing) {
    made->enableCollectivesTiming();
  }
  if (onCompletion) {
    made->registerOnCompletionHook(std::move(onCompletion));
  }
  return *made;
}

c10::intrusive_ptr<c10d::Backend> DeviceRouter::gpuBackendIfCreated() const {
  std::lock_guard<std::mutex> lock(gpuMutex_);
  return gpu_;
}

// ---- Collectives -----------------------------------------------------------

c10::intrusive_ptr<c10d::Work> DeviceRouter::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  if (route("broadcast", devicesOf(tensors)) == Route::Gpu) {
    return gpu().broadcast(tensors, opts);
  }
  return cpu_->broadcast(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  if (route("all_reduce", devicesOf(tensors)) == Route::Gpu) {
    return gpu().allreduce(tensors, opts);
  }
  return cpu_->allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts) {
  if (route("all_reduce (sparse)", devicesOf(tensors)) == Route::Gpu) {
    return gpu().allreduce_sparse(tensors, opts);
  }
  return cpu_->allreduce_sparse(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                 const c10d::AllreduceCoalescedOptions& opts) {
  if (route("all_reduce_coalesced", devicesOf(tensors)) == Route::Gpu) {
    return gpu().allreduce_coalesced(tensors, opts);
  }
  return cpu_->allreduce_coalesced(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  if (route("reduce", devicesOf(tensors)) == Route::Gpu) {
    return gpu().reduce(tensors, opts);
  }
  return cpu_->reduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::allgather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                                       std::vector<at::Tensor>& inputTensors,
                                                       const c10d::AllgatherOptions& opts) {
  if (route("all_gather", devicesOf(outputTensors, inputTensors)) == Route::Gpu) {
    return gpu().allgather(outputTensors, inputTensors, opts);
  }
  return cpu_->allgather(outputTensors, inputTensors, opts);
}

#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
c10::intrusive_ptr<c10d::Work> DeviceRouter::all_gather_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                               const c10d::AllgatherOptions& opts) {
  if (route("all_gather_into_tensor", devicesOf(outputBuffer, inputBuffer)) == Route::Gpu) {
    return gpu().all_gather_single(outputBuffer, inputBuffer, opts);
  }
  return cpu_->all_gather_single(outputBuffer, inputBuffer, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> DeviceRouter::_allgather_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                             const c10d::AllgatherOptions& opts) {
  if (route("all_gather_into_tensor", devicesOf(outputBuffer, inputBuffer)) == Route::Gpu) {
    return gpu()._allgather_base(outputBuffer, inputBuffer, opts);
  }
  return cpu_->_allgather_base(outputBuffer, inputBuffer, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists, std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  if (route("all_gather_coalesced", devicesOf(outputTensorLists, inputTensors)) == Route::Gpu) {
    return gpu().allgather_coalesced(outputTensorLists, inputTensors, opts);
  }
  return cpu_->allgather_coalesced(outputTensorLists, inputTensors, opts);
}

#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
c10::intrusive_ptr<c10d::Work> DeviceRouter::all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                         std::vector<at::Tensor>& inputs,
                                                                         const c10d::AllgatherOptions& opts) {
  if (route("all_gather_into_tensor_coalesced", devicesOf(outputs, inputs)) == Route::Gpu) {
    return gpu().all_gather_single_coalesced(outputs, inputs, opts);
  }
  return cpu_->all_gather_single_coalesced(outputs, inputs, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> DeviceRouter::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::AllgatherOptions& opts) {
  if (route("all_gather_into_tensor_coalesced", devicesOf(outputs, inputs)) == Route::Gpu) {
    return gpu().allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  return cpu_->allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::gather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                                    std::vector<at::Tensor>& inputTensors,
                                                    const c10d::GatherOptions& opts) {
  if (route("gather", devicesOf(outputTensors, inputTensors)) == Route::Gpu) {
    return gpu().gather(outputTensors, inputTensors, opts);
  }
  return cpu_->gather(outputTensors, inputTensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::scatter(std::vector<at::Tensor>& outputTensors,
                                                     std::vector<std::vector<at::Tensor>>& inputTensors,
                                                     const c10d::ScatterOptions& opts) {
  if (route("scatter", devicesOf(outputTensors, inputTensors)) == Route::Gpu) {
    return gpu().scatter(outputTensors, inputTensors, opts);
  }
  return cpu_->scatter(outputTensors, inputTensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::reduce_scatter(std::vector<at::Tensor>& outputTensors,
                                                            std::vector<std::vector<at::Tensor>>& inputTensors,
                                                            const c10d::ReduceScatterOptions& opts) {
  if (route("reduce_scatter", devicesOf(outputTensors, inputTensors)) == Route::Gpu) {
    return gpu().reduce_scatter(outputTensors, inputTensors, opts);
  }
  return cpu_->reduce_scatter(outputTensors, inputTensors, opts);
}

#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
c10::intrusive_ptr<c10d::Work> DeviceRouter::reduce_scatter_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                                   const c10d::ReduceScatterOptions& opts) {
  if (route("reduce_scatter_tensor", devicesOf(outputBuffer, inputBuffer)) == Route::Gpu) {
    return gpu().reduce_scatter_single(outputBuffer, inputBuffer, opts);
  }
  return cpu_->reduce_scatter_single(outputBuffer, inputBuffer, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> DeviceRouter::_reduce_scatter_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                                  const c10d::ReduceScatterOptions& opts) {
  if (route("reduce_scatter_tensor", devicesOf(outputBuffer, inputBuffer)) == Route::Gpu) {
    return gpu()._reduce_scatter_base(outputBuffer, inputBuffer, opts);
  }
  return cpu_->_reduce_scatter_base(outputBuffer, inputBuffer, opts);
}

#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
c10::intrusive_ptr<c10d::Work> DeviceRouter::reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& opts) {
  if (route("reduce_scatter_tensor_coalesced", devicesOf(outputs, inputs)) == Route::Gpu) {
    return gpu().reduce_scatter_single_coalesced(outputs, inputs, opts);
  }
  return cpu_->reduce_scatter_single_coalesced(outputs, inputs, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> DeviceRouter::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& opts) {
  if (route("reduce_scatter_tensor_coalesced", devicesOf(outputs, inputs)) == Route::Gpu) {
    return gpu().reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  return cpu_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

#if UCXCOLL_TORCH_HAS_SINGLE_TENSOR_NAMES
c10::intrusive_ptr<c10d::Work> DeviceRouter::all_to_all_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                               std::vector<int64_t>& outputSplitSizes,
                                                               std::vector<int64_t>& inputSplitSizes,
                                                               const c10d::AllToAllOptions& opts) {
  if (route("all_to_all_single", devicesOf(outputBuffer, inputBuffer)) == Route::Gpu) {
    return gpu().all_to_all_single(outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes, opts);
  }
  return cpu_->all_to_all_single(outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> DeviceRouter::alltoall_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                           std::vector<int64_t>& outputSplitSizes,
                                                           std::vector<int64_t>& inputSplitSizes,
                                                           const c10d::AllToAllOptions& opts) {
  if (route("all_to_all_single", devicesOf(outputBuffer, inputBuffer)) == Route::Gpu) {
    return gpu().alltoall_base(outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes, opts);
  }
  return cpu_->alltoall_base(outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::alltoall(std::vector<at::Tensor>& outputTensors,
                                                      std::vector<at::Tensor>& inputTensors,
                                                      const c10d::AllToAllOptions& opts) {
  if (route("all_to_all", devicesOf(outputTensors, inputTensors)) == Route::Gpu) {
    return gpu().alltoall(outputTensors, inputTensors, opts);
  }
  return cpu_->alltoall(outputTensors, inputTensors, opts);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::barrier(const c10d::BarrierOptions& opts) {
  // torch's dispatcher passes only device_ids, timeout and asyncOp down, so
  // a CUDA barrier shows as device ids or as the group's bound device.
  bool onGpu = false;
  if (opts.device) {
    onGpu = opts.device->is_cuda();
  } else if (!opts.device_ids.empty()) {
    onGpu = true;
  } else {
    const std::optional<at::Device> bound = getBoundDeviceId();
    onGpu = bound && bound->is_cuda();
  }
  if (enter("barrier", onGpu ? Route::Gpu : Route::Cpu) == Route::Gpu) {
    return gpu().barrier(opts);
  }
  return cpu_->barrier(opts);
}

void DeviceRouter::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  cpu_->monitoredBarrier(opts, waitAllRanks);
}

// ---- Point-to-point --------------------------------------------------------

c10::intrusive_ptr<c10d::Work> DeviceRouter::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  if (route("send", devicesOf(tensors)) == Route::Gpu) {
    return gpu().send(tensors, dstRank, tag);
  }
  return cpu_->send(tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  if (route("recv", devicesOf(tensors)) == Route::Gpu) {
    return gpu().recv(tensors, srcRank, tag);
  }
  return cpu_->recv(tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  if (route("recv", devicesOf(tensors)) == Route::Gpu) {
    return gpu().recvAnysource(tensors, tag);
  }
  return cpu_->recvAnysource(tensors, tag);
}

// ---- Coalescing ------------------------------------------------------------

void DeviceRouter::startCoalescing() {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  TORCH_CHECK(!coalescing_, "ucxcoll: startCoalescing() called again before endCoalescing()");
  coalescing_ = true;
  coalescedRoute_.reset();
}

c10::intrusive_ptr<c10d::Work> DeviceRouter::endCoalescing() {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  TORCH_CHECK(coalescing_, "ucxcoll: endCoalescing() called without startCoalescing()");
  coalescing_ = false;
  if (coalescedRoute_ == Route::Gpu) {
    return gpu().endCoalescing();
  }
  if (!coalescedRoute_) {
    cpu_->startCoalescing();  // an empty block: an empty, completed Work
  }
  return cpu_->endCoalescing();
}

// ---- Group lifetime and settings -------------------------------------------

c10::intrusive_ptr<c10d::Backend> DeviceRouter::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::vector<int>& ranks,
                                                      const c10::intrusive_ptr<Options>& opts) {
  c10::intrusive_ptr<c10d::Backend> child = cpu_->split(store, ranks, opts);
  if (!child) {
    return nullptr;  // this rank is not in the new group
  }
  // The child's GPU backend is again made on first use: NCCL's communicator
  // for the new ranks comes from the store, not from splitting ours.
  return routerFor(c10::static_intrusive_pointer_cast<UcxBackend>(child), store);
}

c10::intrusive_ptr<DeviceRouter> DeviceRouter::routerFor(c10::intrusive_ptr<UcxBackend> cpuChild,
                                                         c10::intrusive_ptr<c10d::Store> store) const {
  const c10::intrusive_ptr<Options> childOptions = cpuChild->getBackendOptions();
  GpuGroupSpec spec{std::move(store),      cpuChild->getRank(),      cpuChild->getSize(),
                    childOptions->timeout, childOptions->group_name, childOptions->global_ranks_in_group};
  return c10::make_intrusive<DeviceRouter>(std::move(cpuChild), factory_, std::move(spec));
}

#ifdef UCXCOLL_TORCH_HAS_SHRINK
c10::intrusive_ptr<c10d::Backend> DeviceRouter::shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                                       const c10::intrusive_ptr<Options>& optsOverride) {
  auto cpuChild =
      c10::static_intrusive_pointer_cast<UcxBackend>(cpu_->shrink(ranksToExclude, shrinkFlags, optsOverride));
  c10::intrusive_ptr<c10d::Store> store;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    store = spec_.store;
  }
  // Nothing is read or written there unless CUDA tensors come.
  const std::string prefix = "shrink/" + std::to_string(shrinks_.fetch_add(1)) + "/";
  c10::intrusive_ptr<c10d::Store> childStore;
  if (store) {
    childStore = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  }
  return routerFor(std::move(cpuChild), std::move(childStore));
}
#endif

void DeviceRouter::setTimeout(std::chrono::milliseconds timeout) {
  cpu_->setTimeout(timeout);
  c10::intrusive_ptr<c10d::Backend> gpu;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    spec_.timeout = timeout;
    gpu = gpu_;
  }
  if (gpu) {
    gpu->setTimeout(timeout);
  }
}

void DeviceRouter::setGroupUid(const std::string& uid) {
  c10d::Backend::setGroupUid(uid);
  cpu_->setGroupUid(uid);
  if (auto gpu = gpuBackendIfCreated()) {
    gpu->setGroupUid(uid);
  }
}

void DeviceRouter::eagerConnectSingleDevice(at::Device device) {
  // init_process_group(device_id=cuda:N): NCCL connects now, as with
  // backend="nccl". The UCX side connected when the group was made.
  if (device.is_cuda()) {
    gpu().eagerConnectSingleDevice(device);
  }
}

c10d::ErrorType DeviceRouter::getError() {
  // NCCL's error state; the UCX side reports its failures as the
  // exceptions of the failed operations and of every later one.
  if (auto gpu = gpuBackendIfCreated()) {
    return gpu->getError();
  }
  return c10d::ErrorType::SUCCESS;
}

void DeviceRouter::abort() {
  if (auto gpu = gpuBackendIfCreated()) {
    gpu->abort();
  }
  cpu_->abort();
}

#ifdef C10D_BACKEND_HAS_HOOKS
// A hook registered while the GPU backend is being made may reach it twice
// (here and in registerHooksOn), under the same id: a backend keeps one hook
// per id, so that is harmless.
void DeviceRouter::registerAbortHook(int64_t hookId, c10d::AbortHook hook) {
  c10::intrusive_ptr<c10d::Backend> gpu;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    abortHooks_[hookId] = hook;
    gpu = gpu_;
  }
  if (gpu && gpu->supportsAbortHooks()) {
    gpu->registerAbortHook(hookId, hook);
  }
  cpu_->registerAbortHook(hookId, std::move(hook));
}

void DeviceRouter::unregisterAbortHook(int64_t hookId) {
  c10::intrusive_ptr<c10d::Backend> gpu;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    abortHooks_.erase(hookId);
    gpu = gpu_;
  }
  if (gpu && gpu->supportsAbortHooks()) {
    gpu->unregisterAbortHook(hookId);
  }
  cpu_->unregisterAbortHook(hookId);
}

void DeviceRouter::registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) {
  c10::intrusive_ptr<c10d::Backend> gpu;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    completionHooks_[hookId] = hook;
    gpu = gpu_;
  }
  if (gpu && gpu->supportsCompletionHooks()) {
    gpu->registerCompletionHook(hookId, hook);
  }
  cpu_->registerCompletionHook(hookId, std::move(hook));
}

void DeviceRouter::unregisterCompletionHook(int64_t hookId) {
  c10::intrusive_ptr<c10d::Backend> gpu;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    completionHooks_.erase(hookId);
    gpu = gpu_;
  }
  if (gpu && gpu->supportsCompletionHooks()) {
    gpu->unregisterCompletionHook(hookId);
  }
  cpu_->unregisterCompletionHook(hookId);
}

void DeviceRouter::registerHooksOn(c10d::Backend& gpu) {
  std::map<int64_t, c10d::AbortHook> abortHooks;
  std::map<int64_t, c10d::CompletionHook> completionHooks;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    abortHooks = abortHooks_;
    completionHooks = completionHooks_;
  }
  if (gpu.supportsAbortHooks()) {
    for (auto& [id, hook] : abortHooks) {
      gpu.registerAbortHook(id, std::move(hook));
    }
  }
  if (gpu.supportsCompletionHooks()) {
    for (auto& [id, hook] : completionHooks) {
      gpu.registerCompletionHook(id, std::move(hook));
    }
  }
}
#endif

void DeviceRouter::registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  c10::intrusive_ptr<c10d::Backend> gpu;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    TORCH_CHECK_VALUE(!onCompletionHook_, "ucxcoll: this process group has an onCompletion hook already");
    onCompletionHook_ = hook;  // c10d::Backend::hasHooks(), and for a GPU backend made later
    gpu = gpu_;
  }
  if (gpu) {
    auto forGpu = hook;
    gpu->registerOnCompletionHook(std::move(forGpu));
  }
  cpu_->registerOnCompletionHook(std::move(hook));
}

void DeviceRouter::waitForPendingWorks() {
  cpu_->waitForPendingWorks();
  c10::intrusive_ptr<c10d::Backend> gpu = gpuBackendIfCreated();
  if (gpu && gpu->hasHooks()) {
    gpu->waitForPendingWorks();
  }
}

void DeviceRouter::enableCollectivesTiming() {
  c10::intrusive_ptr<c10d::Backend> gpu;
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    collectivesTiming_ = true;
    gpu = gpu_;
  }
  if (gpu) {
    gpu->enableCollectivesTiming();
  }
  cpu_->enableCollectivesTiming();
}

#ifdef C10D_BACKEND_HAS_WINDOW
bool DeviceRouter::supportsWindow() const {
  c10::intrusive_ptr<c10d::Backend> gpu = gpuBackendIfCreated();
  return gpu && gpu->supportsWindow();
}

c10::intrusive_ptr<c10d::Window> DeviceRouter::new_window(const std::optional<at::Tensor>& tensor) {
  if (tensor.has_value() && tensor->defined()) {
    TORCH_CHECK_NOT_IMPLEMENTED(tensor->is_cuda(), "ucxcoll: new_window got a tensor on ", tensor->device().str(),
                                "; windows (one-sided operations) are served for CUDA tensors, by the group's NCCL "
                                "backend");
    return gpu().new_window(tensor);
  }
  c10::intrusive_ptr<c10d::Backend> made = gpuBackendIfCreated();
  const std::optional<at::Device> bound = getBoundDeviceId();
  TORCH_CHECK_NOT_IMPLEMENTED(made || (bound && bound->is_cuda()),
                              "ucxcoll: new_window() without a tensor on a group whose CUDA side does not exist yet; "
                              "pass a CUDA tensor, or create the group with init_process_group(device_id=cuda:N)");
  return gpu().new_window(tensor);
}
#endif

#ifdef C10D_BACKEND_HAS_RECONFIGURE
c10::intrusive_ptr<c10d::Work> DeviceRouter::reconfigure(const c10d::ReconfigureOptions& opts) {
  {
    std::lock_guard<std::mutex> lock(gpuMutex_);
    TORCH_CHECK_NOT_IMPLEMENTED(gpu_ == nullptr,
                                "ucxcoll: reconfigure() of a group that has run CUDA collectives (over NCCL) is not "
                                "supported; reconfigure a group that serves CPU tensors only");
  }
  auto done = cpu_->reconfigure(opts);
  std::lock_guard<std::mutex> lock(gpuMutex_);
  reconfigured_ = true;  // from now on, no GPU backend for the old membership
  rank_ = cpu_->getRank();
  size_ = cpu_->getSize();
  return done;
}
#endif

void DeviceRouter::shutdown() {
  if (auto gpu = gpuBackendIfCreated()) {
    gpu->shutdown();
  }
  cpu_->shutdown();
}

}  // namespace ucxcoll
