#include "backend/ucx_backend.hpp"

#include <thread>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend/group_setup.hpp"
#include "backend/tensor_checks.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {
namespace {

std::exception_ptr backendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

const char* reduceOpName(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "unknown";
  }
}

c10::TypePtr tensorListType() {
  return c10::ListType::create(c10::TensorType::get());
}

// The buffer a collective writes into: the tensor itself when contiguous,
// otherwise a contiguous copy that is copied back afterwards.
at::Tensor contiguousTarget(const at::Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : tensor.contiguous();
}

void copyBackIfStaged(const at::Tensor& staged, at::Tensor& tensor) {
  if (!staged.is_same(tensor)) {
    tensor.copy_(staged);
  }
}

}  // namespace

UcxBackend::UcxBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, std::string groupName)
    : c10d::Backend(rank, size), groupName_(std::move(groupName)), timeout_(timeout) {
  TORCH_CHECK_VALUE(static_cast<uint32_t>(size) <= tag::kMaxGroupSize, "ucxcoll: groups of up to ", tag::kMaxGroupSize,
                    " ranks are supported, got ", size);
  try {
    engine_ = ProgressEngine::acquire();
    GroupRendezvous group = rendezvous(store, rank, size, engine_->address());
    groupId_ = group.groupId;
    engine_->runSync([&] {
      std::vector<ucp_ep_h> endpoints;
      for (const auto& address : group.addresses) {
        endpoints.push_back(engine_->worker().connect(address));
      }
      transport_ = std::make_unique<UcxTransport>(engine_->worker(), rank, std::move(endpoints));
    });
  } catch (const ucxcoll::Error& error) {
    std::rethrow_exception(
        backendError(std::string("ucxcoll: cannot set up group \"") + groupName_ + "\": " + error.what()));
  }
  UCXCOLL_INFO("group \"" << groupName_ << "\" (id " << groupId_ << "): rank " << rank << " of " << size);
}

UcxBackend::~UcxBackend() {
  shutdown();
}

void UcxBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    if (closed_) {
      return;
    }
    closed_ = true;
  }
  // Tasks run in order, so this runs after every collective already queued.
  auto release = [this] {
    std::lock_guard<std::mutex> lock(transportMutex_);
    transport_.reset();
  };
  if (!engine_->onEngineThread()) {
    engine_->runSync(release);
    engine_->destroyRetiredTasks();
    engine_.reset();
    return;
  }
  // Destroyed from inside a task (e.g. a future callback held the last
  // reference): this thread cannot join itself, so if ours is the last
  // reference to the engine, let another thread drop it once the task ends.
  release();
  std::thread([engine = std::move(engine_)]() mutable { engine.reset(); }).detach();
}

void UcxBackend::abort() {
  {
    // Not submitMutex_: a synchronous collective may be running inline
    // under it, and aborting is how it gets interrupted.
    std::lock_guard<std::mutex> lock(transportMutex_);
    if (transport_) {
      transport_->abort();
    }
  }
  shutdown();
}

std::chrono::milliseconds UcxBackend::effectiveTimeout(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? timeout_ : requested;
}

void UcxBackend::checkUsable(const char* opName) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  if (!failure_.empty()) {
    std::rethrow_exception(
        backendError(std::string("ucxcoll: ") + opName + " refused: this process group failed earlier: " + failure_));
  }
}

c10::intrusive_ptr<c10d::Work> UcxBackend::submit(c10d::OpType opType, const char* opName,
                                                  std::chrono::milliseconds timeout, bool asyncOp, c10::IValue result,
                                                  c10::TypePtr resultType, Body body) {
  // Before taking any lock: this may free tensors and take the GIL.
  engine_->destroyRetiredTasks();
  checkUsable(opName);
  // Held until the collective is queued or has run inline, so that this
  // group's collectives run in the order of their sequence numbers.
  std::lock_guard<std::mutex> lock(submitMutex_);
  TORCH_CHECK(!closed_, "ucxcoll: ", opName, " called on a process group that was shut down");
  uint64_t sequence = issued_.fetch_add(1);
  auto work = c10::make_intrusive<UcxWork>(rank_, opType, (std::string("ucxcoll:") + opName).c_str(), std::move(result),
                                           std::move(resultType), sequence);
  std::string name = std::string(opName) + " #" + std::to_string(sequence) + " on group \"" + groupName_ + "\" (rank " +
                     std::to_string(rank_) + " of " + std::to_string(size_) + ", timeout " +
                     std::to_string(timeout.count()) + " ms)";
  auto task = [this, work, name = std::move(name), timeout, sequence, body = std::move(body)] {
    runCollective(work, name, timeout, sequence, body);
  };
  if (asyncOp || !engine_->runInlineIfIdle(task)) {
    engine_->enqueue(std::move(task));
  }
  return work;
}

void UcxBackend::runCollective(const c10::intrusive_ptr<UcxWork>& work, const std::string& name,
                               std::chrono::milliseconds timeout, uint64_t sequence, const Body& body) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (!failure_.empty()) {
      error = backendError("ucxcoll: " + name + " was not run: this process group failed earlier: " + failure_);
    }
  }
  if (!error) {
    try {
      Collective collective(*transport_, groupId_, static_cast<uint32_t>(sequence), Deadline::after(timeout), name,
                            &workspace_);
      body(collective);
    } catch (const AbortedError& aborted) {
      error = backendError(std::string("ucxcoll: ") + aborted.what());
    } catch (const ucxcoll::Error& failed) {
      // Timeouts, mismatches and transport failures leave peers in an
      // unknown state: fail this group from now on, with this cause.
      {
        std::lock_guard<std::mutex> lock(failureMutex_);
        if (failure_.empty())
          failure_ = failed.what();
      }
      error = backendError(std::string("ucxcoll: ") + failed.what());
    } catch (const c10::Error&) {
      error = std::current_exception();
    } catch (const std::exception& failed) {
      error = backendError(std::string("ucxcoll: ") + name + " failed: " + failed.what());
    }
  }
  if (error) {
    work->fail(error);
  } else {
    work->finish();
  }
}

c10::intrusive_ptr<c10d::Work> UcxBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  checkSingleTensor(op, tensors, "tensor");
  checkRoot(op, opts.rootRank, size_);
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "ucxcoll: broadcast: root_tensor must be 0, got ", opts.rootTensor);
  at::Tensor tensor = tensors[0];
  at::Tensor buffer = contiguousTarget(tensor);
  int root = static_cast<int>(opts.rootRank);
  bool isRoot = root == rank_;
  return submit(c10d::OpType::BROADCAST, op, effectiveTimeout(opts.timeout), opts.asyncOp, c10::IValue(tensors),
                tensorListType(), [tensor, buffer, root, isRoot](Collective& c) mutable {
                  ucxcoll::broadcast(c, buffer.data_ptr(), buffer.nbytes(), root);
                  if (!isRoot)
                    copyBackIfStaged(buffer, tensor);
                });
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  checkSingleTensor(op, tensors, "tensor");
  TORCH_CHECK_NOT_IMPLEMENTED(opts.reduceOp == c10d::ReduceOp::SUM,
                              "ucxcoll: all_reduce supports ReduceOp.SUM only so far; got ReduceOp.",
                              reduceOpName(opts.reduceOp));
  at::Tensor tensor = tensors[0];
  std::optional<DataType> type = toDataType(tensor.scalar_type());
  TORCH_CHECK_TYPE(type.has_value(), "ucxcoll: all_reduce does not support dtype ", tensor.scalar_type(),
                   "; supported: float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64, bool, "
                   "complex64, complex128");
  at::Tensor buffer = contiguousTarget(tensor);
  auto count = static_cast<std::size_t>(buffer.numel());
  return submit(c10d::OpType::ALLREDUCE, op, effectiveTimeout(opts.timeout), opts.asyncOp, c10::IValue(tensors),
                tensorListType(), [tensor, buffer, count, type = *type](Collective& c) mutable {
                  ucxcoll::allreduce(c, buffer.data_ptr(), count, type, ReduceOp::Sum);
                  copyBackIfStaged(buffer, tensor);
                });
}

c10::intrusive_ptr<c10d::Work> UcxBackend::allgather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                                     std::vector<at::Tensor>& inputTensors,
                                                     const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather";
  checkSingleTensor(op, inputTensors, "input");
  TORCH_CHECK_VALUE(outputTensors.size() == 1, "ucxcoll: all_gather takes one output list per rank, got ",
                    outputTensors.size());
  checkAllgatherOutputs(op, outputTensors[0], inputTensors[0], size_);
  at::Tensor input = inputTensors[0].contiguous();
  std::vector<at::Tensor> outputs = outputTensors[0];
  std::vector<at::Tensor> targets;
  for (const auto& output : outputs)
    targets.push_back(contiguousTarget(output));

  c10::List<c10::List<at::Tensor>> result;
  result.push_back(c10::List<at::Tensor>(outputs));
  return submit(c10d::OpType::ALLGATHER, op, effectiveTimeout(opts.timeout), opts.asyncOp, c10::IValue(result),
                c10::ListType::create(tensorListType()), [input, outputs, targets](Collective& c) mutable {
                  std::vector<void*> blocks;
                  for (auto& target : targets)
                    blocks.push_back(target.data_ptr());
                  ucxcoll::allgather(c, input.data_ptr(), blocks, input.nbytes());
                  for (std::size_t i = 0; i < outputs.size(); ++i)
                    copyBackIfStaged(targets[i], outputs[i]);
                });
}

c10::intrusive_ptr<c10d::Work> UcxBackend::all_gather_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                             const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  checkCpu(op, inputBuffer, "input");
  checkAllgatherIntoTensor(op, outputBuffer, inputBuffer, size_);
  at::Tensor input = inputBuffer.contiguous();
  at::Tensor output = outputBuffer;
  at::Tensor target = contiguousTarget(output);
  return submit(c10d::OpType::_ALLGATHER_BASE, op, effectiveTimeout(opts.timeout), opts.asyncOp,
                c10::IValue(std::vector<at::Tensor>{output}), tensorListType(),
                [input, output, target](Collective& c) mutable {
                  const std::size_t bytes = input.nbytes();
                  auto* base = static_cast<std::byte*>(target.data_ptr());
                  std::vector<void*> blocks;
                  for (int r = 0; r < c.size(); ++r)
                    blocks.push_back(base + bytes * static_cast<std::size_t>(r));
                  ucxcoll::allgather(c, input.data_ptr(), blocks, bytes);
                  copyBackIfStaged(target, output);
                });
}

c10::intrusive_ptr<c10d::Work> UcxBackend::_allgather_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                           const c10d::AllgatherOptions& opts) {
  return all_gather_single(outputBuffer, inputBuffer, opts);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::barrier(const c10d::BarrierOptions& opts) {
  return submit(c10d::OpType::BARRIER, "barrier", effectiveTimeout(opts.timeout), opts.asyncOp,
                c10::IValue(std::vector<at::Tensor>{}), tensorListType(), [](Collective& c) { ucxcoll::barrier(c); });
}

}  // namespace ucxcoll
