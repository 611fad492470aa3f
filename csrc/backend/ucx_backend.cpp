#include "backend/ucx_backend.hpp"
#include "backend/future_completer.hpp"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "backend/errors.hpp"
#include "backend/group_setup.hpp"
#include "backend/tensor_checks.hpp"
#include "common/config.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"
#include "setup/table_relay.hpp"
#include "transport/tag.hpp"
#include "transport/tcp_progress.hpp"

namespace ucxcoll {

UcxBackend::UcxBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, std::string groupName, std::vector<uint64_t> globalRanks)
    : c10d::Backend(rank, size),
      groupName_(std::move(groupName)),
      options_(c10::make_intrusive<Options>("ucxcoll", timeout)),
      timeout_(timeout) {
  options_->group_name = groupName_;
  options_->global_ranks_in_group = std::move(globalRanks);
  TORCH_CHECK_VALUE(static_cast<uint32_t>(size) <= tag::kMaxGroupSize, "ucxcoll: groups of up to ", tag::kMaxGroupSize,
                    " ranks are supported, got ", size);
  try {
    validateConfig();
  } catch (const std::invalid_argument& invalid) {
    TorchStore setupStore(store);
    publishSetupFailure(setupStore, rank, size, invalid.what());
    TORCH_CHECK_VALUE(false, "ucxcoll: ", invalid.what());
  }
  try {
    try {
      engine_ = Engine::acquire([&store] { return networkDevicesFor(jobLocation(store)); });
      engine_->useJobKey(jobKey(store));
    } catch (const c10::Error&) {
      throw;  // the store itself failed: nothing could be published there
    } catch (const std::exception& error) {
      // Before this rank joined the rendezvous: its peers would wait for
      // it until the store's timeout; they raise at once instead.
      TorchStore setupStore(store);
      publishSetupFailure(setupStore, rank, size, error.what());
      throw;
    }
    group_ = setUpGroup(store, rank, size, membership_);
  } catch (const c10::Error&) {
    throw;  // e.g. the store timed out: torch's own error says it best
  } catch (const std::invalid_argument& invalid) {
    // Ranks that disagree about settings, or network devices that this
    // host does not have (UCXCOLL_NET_DEVICES / UCX_NET_DEVICES).
    TORCH_CHECK_VALUE(false, "ucxcoll: cannot set up group \"", groupName_, "\": ", invalid.what());
  } catch (const std::exception& error) {
    std::rethrow_exception(
        backendError(std::string("ucxcoll: cannot set up group \"") + groupName_ + "\": " + error.what()));
  }
  store_ = store;
  reconfigureHandle_ = newReconfigureHandle(globalRank(rank));
  UCXCOLL_INFO("group \"" << groupName_ << "\" (channel " << group_->channel() << "): rank " << rank << " of " << size);
}

UcxBackend::UcxBackend(const UcxBackend& parent, NarrowedGroup narrowed, std::chrono::milliseconds timeout,
                       std::string groupName, std::vector<uint64_t> globalRanks)
    : c10d::Backend(narrowed.rank, static_cast<int>(narrowed.membership->addresses.size())),
      groupName_(std::move(groupName)),
      options_(c10::make_intrusive<Options>("ucxcoll", timeout)),
      timeout_(timeout),
      engine_(parent.engine_),
      store_(narrowed.store ? narrowed.store : parent.store_) {
  options_->group_name = groupName_;
  options_->global_ranks_in_group = std::move(globalRanks);
  try {
    group_ = connectGroup(narrowed.membership, narrowed.rank, narrowed.channel);
  } catch (...) {
    engine_->releaseChannel(narrowed.channel);
    throw;
  }
  membership_ = std::move(narrowed.membership);
  reconfigureHandle_ = newReconfigureHandle(globalRank(rank_));
  UCXCOLL_INFO("group \"" << groupName_ << "\" (channel " << group_->channel() << "): rank " << rank_ << " of " << size_
                          << ", made from the ranks of group \"" << parent.groupName_ << "\"");
}

std::shared_ptr<Group> UcxBackend::setUpGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::shared_ptr<const GroupRendezvous>& membership) {
  uint32_t channel = engine_->openChannel();
  try {
    TorchStore setupStore(store);
    auto peers = std::make_shared<const GroupRendezvous>(
        relayedRendezvous(setupStore, *engine_, rank, size, channel, engine_->networkInterfaces(), timeout_.load()));
    std::shared_ptr<Group> group = connectGroup(peers, rank, channel);
    membership = std::move(peers);
    return group;
  } catch (...) {
    engine_->releaseChannel(channel);
    throw;
  }
}

std::shared_ptr<Group> UcxBackend::connectGroup(const std::shared_ptr<const GroupRendezvous>& membership, int rank,
                                                uint32_t channel) {
  const GroupRendezvous& peers = *membership;
  const int size = static_cast<int>(peers.addresses.size());
  std::shared_ptr<Group> group;
  try {
    group = engine_->createGroup(groupName_, rank, size, channel, PeerAddresses(membership, &membership->addresses),
                                 peers.channels, peers.processes, peers.onOtherHost);
  } catch (const UnreachableError& unreachable) {
    throw UnreachableError(describeUnreachable(unreachable.ranks(), peers, engine_->networkInterfaces()),
                           unreachable.ranks());
  }
  group->setRanksOutnumberCores(peers.ranksOutnumberCores);
  group->setHostNames(peers.hostNames);
  std::vector<std::vector<std::string>> networkAddresses;
  for (const std::string& devices : peers.networkInterfaces) {
    networkAddresses.push_back(addressesOfDevices(devices));
  }
  group->setNetworkAddresses(std::move(networkAddresses));
  // A group that connects lazily finds a rank unreachable at its first
  // message, and says so as setup would have (from the membership itself,
  // which the backend keeps anyway).
  group->setUnreachableDescription([membership, mine = engine_->networkInterfaces()](const std::vector<int>& ranks) {
    return describeUnreachable(ranks, *membership, mine);
  });
  group->setHosts(peers.hosts);
  engine_->noteRanksOnThisHost(peers.ranksOnThisHost);
  // Hooks may be Python callables: run them on a future thread, never on
  // the engine's driver (which must not wait for the GIL).
  group->setFailureListener([hooks = abortHooks_, recording = flightRecording_](const std::string& cause) {
    FutureCompleter::instance().post([hooks, recording, cause] {
      hooks->run("the group failed: " + cause);
      recording->dumpAfterFailure();
    });
  });
  return group;
}

void UcxBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  options_->timeout = timeout;
}

UcxBackend::~UcxBackend() {
  close(LeaveReason::Released);
}

void UcxBackend::shutdown() {
  close(LeaveReason::ShutDown);
}

void UcxBackend::close(LeaveReason leaving) {
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    if (closed_ || !engine_) {
      return;
    }
    closed_ = true;
  }
  if (!engine_->drivingHere()) {
    engine_->closeGroup(group_, true, leaving);  // after the collectives already queued
    engine_->destroyRetired();
    FutureCompleter::instance().destroyRetired();
    engine_.reset();
    return;
  }
  // Shut down from a completion callback on the engine's driver (e.g. the
  // callback held the last reference to this group): it cannot wait for
  // itself, and must not destroy the engine under its own feet, so it lets
  // another thread drop this reference once the callback returns.
  engine_->closeGroup(group_, false, leaving);
  std::thread([engine = std::move(engine_)]() mutable { engine.reset(); }).detach();
}

void AbortHooks::run(const std::string& why) {
  const auto hooks = snapshot();
  for (const auto& [id, hook] : *hooks) {
    try {
      hook();
    } catch (const std::exception& error) {
      UCXCOLL_WARN("abort hook " << id << " (run because " << why << ") raised: " << error.what());
    }
  }
}

#ifdef C10D_BACKEND_HAS_HOOKS
void UcxBackend::registerAbortHook(int64_t hookId, c10d::AbortHook hook) {
  abortHooks_->add(hookId, std::move(hook));
}

void UcxBackend::unregisterAbortHook(int64_t hookId) {
  abortHooks_->remove(hookId);
}

void UcxBackend::registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) {
  completionListeners_->add(hookId, [hook = std::move(hook)](uint64_t key, float durationMs) {
    c10d::CompletionHookArgs args;
    args.completionKey = key;
    args.duration_ms = durationMs;
    hook(args);
  });
}

void UcxBackend::unregisterCompletionHook(int64_t hookId) {
  completionListeners_->remove(hookId);
}
#endif

void UcxBackend::registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  std::lock_guard<std::mutex> lock(onCompletion_->mutex);
  TORCH_CHECK_VALUE(!onCompletion_->hook, "ucxcoll: this process group has an onCompletion hook already");
  onCompletion_->hook = hook;
  onCompletionHook_ = std::move(hook);  // c10d::Backend::hasHooks()
  onCompletion_->registered.store(true, std::memory_order_release);
}

void UcxBackend::waitForPendingWorks() {
  std::unique_lock<std::mutex> lock(onCompletion_->mutex);
  onCompletion_->drained.wait(lock, [this] { return onCompletion_->pending == 0; });
}

void UcxBackend::reportCompletion(Operation& op, c10d::OpType opType, uint64_t sequence) {
  if (!onCompletion_->registered.load(std::memory_order_acquire)) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(onCompletion_->mutex);
    ++onCompletion_->pending;
  }
  const Clock::time_point started = Clock::now();
  op.onComplete = [started, opType, sequence, tracker = onCompletion_,
                   completeFuture = std::move(op.onComplete)](std::exception_ptr error) {
    completeFuture(error);
    const Clock::time_point finished = Clock::now();
    std::lock_guard<std::mutex> lock(tracker->mutex);
    tracker->completed.push_back(
        error ? nullptr
              : std::make_shared<c10d::WorkInfo>(opType, sequence, started, finished,
                                                 std::chrono::duration<float>(finished - started)));
    if (!tracker->calling) {
      tracker->calling = true;
      // Never on the driver: the hook may be a Python callable.
      FutureCompleter::instance().post([tracker] { tracker->callHook(); });
    }
  };
}

void UcxBackend::OnCompletion::callHook() {
  std::unique_lock<std::mutex> lock(mutex);
  while (!completed.empty()) {
    std::shared_ptr<c10d::WorkInfo> info = std::move(completed.front());
    completed.pop_front();
    auto call = hook;
    lock.unlock();
    if (info && call) {
      try {
        call(std::move(info));
      } catch (const std::exception& raised) {
        UCXCOLL_WARN("the onCompletion hook raised: " << raised.what());
      }
    }
    lock.lock();
    if (--pending == 0) {
      drained.notify_all();
    }
  }
  calling = false;
}

void UcxBackend::abort() {
  abortHooks_->run("the process group is being aborted");
  if (engine_) {
    engine_->abortGroup(group(), "the process group was aborted", LeaveReason::Aborted);
  }
  close(LeaveReason::Aborted);
}

std::chrono::milliseconds UcxBackend::effectiveTimeout(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? timeout_.load() : requested;
}

void UcxBackend::checkUsable(const Group& group, const char* opName) {
  if (group.failed()) {
    std::rethrow_exception(backendError(std::string("ucxcoll: ") + opName +
                                        " refused: this process group failed earlier: " + group.failure()));
  }
}

uint64_t UcxBackend::globalRank(int rank) const {
  return options_->global_ranks_in_group.empty() ? static_cast<uint64_t>(rank)
                                                 : options_->global_ranks_in_group.at(static_cast<std::size_t>(rank));
}

std::shared_ptr<Group> UcxBackend::group() const {
  std::lock_guard<std::mutex> lock(submitMutex_);
  return group_;
}

namespace {

// The bytes of an operation's output tensors (a list, or a list of lists),
// and the element type of the first one.
void describeOutput(const c10::IValue& result, Operation& op) {
  auto note = [&](const at::Tensor& tensor) {
    op.payloadBytes += tensor.nbytes();
    if (op.elementType == nullptr) {
      if (auto type = toDataType(tensor.scalar_type())) {
        op.elementType = dataTypeName(*type);
      }
    }
  };
  // toListRef() reads the list in place; toTensorVector() would copy it on
  // every operation.
  if (result.isList()) {  // tensors, or lists of tensors
    for (const auto& element : result.toListRef())
      describeOutput(element, op);
  } else if (result.isTensor()) {
    note(result.toTensor());
  }
}

}  // namespace

c10::intrusive_ptr<UcxWork> UcxBackend::makeWork(Operation& op, c10d::OpType opType, const char* opName,
                                                 c10::IValue result, c10::TypePtr resultType, uint64_t sequence,
                                                 const FlightRecording::Ticket& entry) {
  describeOutput(result, op);  // for the audit log and the desync report
  // c10d::Work starts a profiler record when given a title; without a
  // profiler (no RecordFunction callbacks) it would only allocate one to
  // find it inactive, on every operation.
  const std::string title = at::hasCallbacks() ? std::string("ucxcoll:") + opName : std::string();
  auto work = c10::make_intrusive<UcxWork>(engine_, op.sharedCompletion(), rank_, opType,
                                           title.empty() ? nullptr : title.c_str(), std::move(result),
                                           std::move(resultType), sequence);
  op.onComplete = [work](std::exception_ptr error) { work->completeFuture(error); };
  if (entry.id) {
    op.onSucceeded = [work, listeners = completionListeners_, recording = flightRecording_, entry] {
      work->noteSucceeded(*listeners);
      recording->retire(entry, work->getDuration());
    };
  } else {
    op.onSucceeded = [work, listeners = completionListeners_] { work->noteSucceeded(*listeners); };
  }
  reportCompletion(op, opType, sequence);
  if (coalescing_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    if (coalescing_.load(std::memory_order_relaxed)) {
      batch_.push_back(work);
    }
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> UcxBackend::runCollective(c10d::OpType opType, const char* opName,
                                                         std::chrono::milliseconds requestedTimeout, bool asyncOp,
                                                         c10::IValue result, c10::TypePtr resultType,
                                                         Collective::Body body, const std::vector<at::Tensor>& inputs) {
  // Before taking any lock: this may free tensors and take the GIL.
  engine_->destroyRetired();
  FutureCompleter::instance().destroyRetired();
  const std::chrono::milliseconds timeout = effectiveTimeout(requestedTimeout);
  // Before the lock: recording gathers the caller's traceback, which takes
  // the GIL.
  FlightRecording::Ticket entry;
  if (flightRecording_->active()) {
    entry = flightRecording_->record(opType, opName, inputs, tensorsIn(result), timeout);
  }
  // Held until the collective is handed over, so that the group's
  // collectives reach the engine in the order of their sequence numbers;
  // released before driving, so that completion callbacks may submit.
  std::unique_lock<std::mutex> lock(submitMutex_);
  checkUsable(*group_, opName);
  TORCH_CHECK(!closed_, "ucxcoll: ", opName, " called on a process group that was shut down");
  uint64_t sequence = group_->takeSequence();
  auto op = std::make_unique<Collective>(group_, sequence, opName, timeout, std::move(body), workspace_);
  auto work = makeWork(*op, opType, opName, std::move(result), std::move(resultType), sequence, entry);
  auto completion = op->sharedCompletion();
  // A synchronous collective completes its Future here, on the caller,
  // once it has driven it (UcxWork::FutureClaim). Claimed before the
  // submission, which may already complete it.
  std::optional<UcxWork::FutureClaim> claim;
  if (!asyncOp) {
    claim.emplace(*work);
  }
  {
    Engine::Lease lease = engine_->submit(std::move(op), !asyncOp);
    lock.unlock();
    if (lease) {
      lease.driveUntil(*completion);
    }
  }
  // The claim is released after the lease: the Future's callbacks never run
  // while this thread drives.
  return work;
}

void UcxBackend::startCoalescing() {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  TORCH_CHECK(!coalescing_.load(), "ucxcoll: startCoalescing() called again before endCoalescing()");
  batch_.clear();
  coalescing_.store(true, std::memory_order_release);
}

c10::intrusive_ptr<c10d::Work> UcxBackend::endCoalescing() {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  TORCH_CHECK(coalescing_.load(), "ucxcoll: endCoalescing() called without startCoalescing()");
  coalescing_.store(false, std::memory_order_release);
  return c10::make_intrusive<CoalescedWork>(rank_, std::move(batch_), completionListeners_);
}

}  // namespace ucxcoll
