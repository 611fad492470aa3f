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
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/collective_helpers.hpp"
#include "backend/flight_recording.hpp"
#include "backend/hook_table.hpp"
#include "backend/torch_compat.hpp"
#include "backend/ucx_work.hpp"
#include "collectives/collective.hpp"
#include "collectives/point_to_point.hpp"
#include "engine/engine.hpp"
#include "engine/member_exchange.hpp"

namespace ucxcoll {

struct GroupRendezvous;

// The abort hooks registered on a group; shared with the group's failure
// listener, which may run after the backend is gone.
class AbortHooks : public HookTable<std::function<void()>> {
 public:
  // Runs every hook; one that throws is logged and the others still run.
  // Not deduplicated here: torch's contract (Hooks.hpp) has hooks be
  // idempotent and run wherever a failure is handled, since a thread that
  // skipped a hook "already running" elsewhere could end the process in the
  // middle of that hook's capture.
  void run(const std::string& why);
};

// A new member handle for reconfigure(), for the member with this rank in
// the default group.
std::string newReconfigureHandle(uint64_t globalRank);

class UcxBackend : public c10d::Backend {
 public:
  // `globalRanks`: the default group's ranks of this group's members (empty:
  // this is the default group, or they are not known).
  UcxBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
             std::string groupName, std::vector<uint64_t> globalRanks = {});
  // A group of `parent`'s ranks that its members agreed on over the
  // parent's connections (shrink, split, new_group: subgroups.cpp):
  // `membership` (narrowed from the parent's) says how to reach them;
  // `channel` is this process's, opened by the caller and owned by this
  // group from now; `store` is the new group's (null: the parent's).
  struct NarrowedGroup {
    std::shared_ptr<const GroupRendezvous> membership;
    int rank = 0;
    uint32_t channel = 0;
    c10::intrusive_ptr<c10d::Store> store;
  };
  UcxBackend(const UcxBackend& parent, NarrowedGroup narrowed, std::chrono::milliseconds timeout, std::string groupName,
             std::vector<uint64_t> globalRanks);
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
                                                   const c10d::AllgatherOptions& opts)
      UCXCOLL_OVERRIDE_SINCE_TORCH_2_15;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // ---- Sparse all-reduce (sparse_ops.cpp) ---------------------------------
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;

  // ---- Reducing collectives (reduce_ops.cpp) ------------------------------
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputTensors,
                                                std::vector<std::vector<at::Tensor>>& inputTensors,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                       const c10d::ReduceScatterOptions& opts)
      UCXCOLL_OVERRIDE_SINCE_TORCH_2_15;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) UCXCOLL_OVERRIDE_SINCE_TORCH_2_15;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;

  // ---- Block exchanges (exchange_ops.cpp) ---------------------------------
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                   std::vector<int64_t>& outputSplitSizes,
                                                   std::vector<int64_t>& inputSplitSizes,
                                                   const c10d::AllToAllOptions& opts) UCXCOLL_OVERRIDE_SINCE_TORCH_2_15;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                        std::vector<at::Tensor>& inputTensors,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputTensors,
                                         std::vector<std::vector<at::Tensor>>& inputTensors,
                                         const c10d::ScatterOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // ---- Coalesced collectives (coalesced_ops.cpp) --------------------------
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputTensorLists,
                                                     std::vector<at::Tensor>& inputTensors,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) UCXCOLL_OVERRIDE_SINCE_TORCH_2_15;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;

  // ---- Point-to-point (point_to_point_ops.cpp) ----------------------------
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // ---- Coalescing: one Work for the operations in between -----------------
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  uint64_t getSequenceNumberForGroup() override { return group()->issued(); }
  void setTimeout(std::chrono::milliseconds timeout) override;

  // ---- Subgroups and options (subgroups.cpp) -----------------------------
  bool supportsSplitting() const override { return true; }
  // A backend for `ranks` (ranks of this group, in their new order),
  // agreed over this group's connections (makeSubgroup); null on ranks not
  // in it. `store` (already namespaced by the caller) is kept for what the
  // new group may later set up through a store (reconfigure).
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // The group of this group's `ranks` (in the new group's order; this rank
  // among them), named `name`: every member trades its channel for it with
  // the others over this group's connections (engine/member_exchange.hpp),
  // and the new group reaches them as this one does. No store operation;
  // members that pass other ranks, another order or another name raise.
  // split_group comes here, and new_group when the default group is
  // ucxcoll (python/module.cpp).
  c10::intrusive_ptr<UcxBackend> makeSubgroup(const std::vector<int>& ranks, std::string name,
                                              std::chrono::milliseconds timeout,
                                              const c10::intrusive_ptr<c10d::Store>& store);
  // The ranks of this group of the default group's `globalRanks`, or
  // nothing if one of them is not in it.
  std::optional<std::vector<int>> ranksOf(const std::vector<uint64_t>& globalRanks) const;
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }

#ifdef UCXCOLL_TORCH_HAS_SHRINK
  // torch's shrink_group (shrink.cpp): the ranks that go on form a smaller
  // group without the store, over the connections this group has, even
  // after it failed (a rank died). Every rank that goes on calls it with
  // the same ranks to exclude; with SHRINK_ABORT, this group's pending
  // operations are aborted first. This group stays as it is (torch
  // destroys it next).
  bool supportsShrinking() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& optsOverride) override;
#endif

  // Finish the collectives already submitted, end pending point-to-point
  // transfers, then release this group's resources.
  void shutdown() override;
  // Run the abort hooks, fail everything pending or queued at once, then
  // shut down.
  void abort() override;

#ifdef C10D_BACKEND_HAS_HOOKS
  // Abort hooks run before the group gives up: once when it first fails (a
  // timeout, a dead peer, ranks that disagree; on one of ucxcoll's future
  // threads, which may take the GIL), and in abort() (on the caller's
  // thread).
  bool supportsAbortHooks() const override {
    return true;
  }
  void registerAbortHook(int64_t hookId, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hookId) override;

  // Completion hooks are told of every operation that succeeded, on the
  // engine's driver before its waiters wake (see UcxWork); torch's flight
  // recorder marks its entries "completed" with them.
  bool supportsCompletionHooks() const override {
    return true;
  }
  void registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t hookId) override;
#endif

  // torch's onCompletion hook (ProcessGroup._register_on_completion_hook,
  // as ProcessGroupNCCL has it): told a c10d::WorkInfo (operation type,
  // sequence number, submission and completion times, the time between)
  // of every operation that succeeded, on one of ucxcoll's future threads
  // (it may take the GIL). One hook per group. waitForPendingWorks() returns
  // once every operation submitted while a hook was registered has
  // completed and its hook call has returned (destroy_process_group calls
  // it when hooks are registered). enableCollectivesTiming() is accepted:
  // durations are always measured (Work.get_duration()).
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
  void waitForPendingWorks() override;
  void enableCollectivesTiming() override {}

#ifdef C10D_BACKEND_HAS_RECONFIGURE
  // Continue on a new set of members (reconfigure.cpp): every member calls
  // reconfigure() with the same uuid and handles (get_reconfigure_handle()
  // of each; a list sets the new ranks by position, a set orders them by
  // handle). The old group is aborted only once the new one is set up;
  // nothing else may run on this group meanwhile.
  bool supportsReconfigure() const override {
    return true;
  }
  c10d::ReconfigureHandle get_reconfigure_handle() const override {
    return reconfigureHandle_;
  }
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif

  FlightRecording& flightRecording() {
    return *flightRecording_;
  }
  uint32_t channel() const {
    return group()->channel();
  }

 private:
  // shutdown(), abort() and the destructor: close the group (after the
  // collectives already queued), telling the peers how this rank left.
  void close(LeaveReason leaving);
  // Run `body` as the group's next collective. A synchronous call
  // (`asyncOp` false) drives the engine right here until it completes, if
  // no other thread is driving.
  c10::intrusive_ptr<c10d::Work> runCollective(c10d::OpType opType, const char* opName,
                                               std::chrono::milliseconds requestedTimeout, bool asyncOp,
                                               c10::IValue result, c10::TypePtr resultType, Collective::Body body,
                                               const std::vector<at::Tensor>& inputs = {});
  // Hand over a point-to-point transfer with `peer` (-1: any rank) built
  // by `make(group, number, timeout)`.
  template <typename MakeTransfer>
  c10::intrusive_ptr<c10d::Work> runTransfer(c10d::OpType opType, const char* opName, c10::IValue result, int peer,
                                             MakeTransfer make);
  // `entry`: the operation's entry in torch's flight recorder, retired
  // when it succeeds.
  c10::intrusive_ptr<UcxWork> makeWork(Operation& op, c10d::OpType opType, const char* opName, c10::IValue result,
                                       c10::TypePtr resultType, uint64_t sequence,
                                       const FlightRecording::Ticket& entry = {});
  std::chrono::milliseconds effectiveTimeout(std::chrono::milliseconds requested) const;
  // The message of a failed monitored barrier: gloo's wording, then ours.
  std::string monitoredBarrierFailure(const std::exception_ptr& error, std::chrono::milliseconds timeout,
                                      bool waitAllRanks) const;
  // all_gather (list form) whose outputs differ in shape from rank to rank.
  c10::intrusive_ptr<c10d::Work> allgatherUneven(std::vector<at::Tensor>& outputs, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts);
  // reduce_scatter_tensor and its coalesced form: one collective.
  c10::intrusive_ptr<c10d::Work> reduceScatterTensors(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                      const c10d::ReduceScatterOptions& opts, const char* op,
                                                      c10d::OpType opType);
  // An all-gather of `packed` into the rows of `gathered`, then `copies`.
  c10::intrusive_ptr<c10d::Work> allgatherPacked(const char* op, c10d::OpType opType, at::Tensor packed,
                                                 at::Tensor gathered, CopyBacks copies,
                                                 const c10d::AllgatherOptions& opts, c10::IValue result,
                                                 c10::TypePtr resultType, const std::vector<at::Tensor>& inputs);
  // Agree on a group with `size` ranks through `store` and connect to
  // them; `membership` receives what the ranks told each other.
  std::shared_ptr<Group> setUpGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                    std::shared_ptr<const GroupRendezvous>& membership);
  // Connect to the ranks of `membership` as rank `rank` on `channel`.
  std::shared_ptr<Group> connectGroup(const std::shared_ptr<const GroupRendezvous>& membership, int rank,
                                      uint32_t channel);
  // Refuse (fail fast) once the group failed. Called with submitMutex_ held.
  static void checkUsable(const Group& group, const char* opName);
  // The current group (reconfigure() replaces it).
  std::shared_ptr<Group> group() const;
  // The default group's rank of this group's rank `rank`.
  uint64_t globalRank(int rank) const;
  // Opens a channel for a new group of this one's ranks and trades it with
  // the other members (MemberExchange over this group, even a failed
  // one); `companion` (may be null) is submitted beside it (shrink's
  // notice to the excluded). The channel, and every member's by this
  // group's rank; raises DistBackendError for a failed exchange.
  struct TradedChannels {
    uint32_t channel = 0;
    std::vector<uint32_t> byRank;
  };
  TradedChannels tradeChannels(NewGroupTerms terms, std::chrono::milliseconds timeout,
                               const std::function<std::unique_ptr<Operation>(const MemberExchange&)>& companion);

  std::string groupName_;
  c10::intrusive_ptr<Options> options_;  // what getBackendOptions() returns
  std::atomic<std::chrono::milliseconds> timeout_;
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<Group> group_;  // replaced by reconfigure() under submitMutex_
  // How group_'s ranks are reached (shrink() narrows it); replaced with it.
  std::shared_ptr<const GroupRendezvous> membership_;
  uint32_t shrinks_ = 0;                   // shrink() calls on this group so far; guarded by submitMutex_
  c10::intrusive_ptr<c10d::Store> store_;  // the group's; reconfigure() sets up new groups through it
  // "ucxcoll:<global rank>:<random>": names this member in reconfigure().
  std::string reconfigureHandle_;
  std::set<int64_t> reconfigureIds_;  // the uuids already used
  std::shared_ptr<Workspace> workspace_ = std::make_shared<Workspace>();
  std::shared_ptr<AbortHooks> abortHooks_ = std::make_shared<AbortHooks>();
  std::shared_ptr<CompletionListeners> completionListeners_ = std::make_shared<CompletionListeners>();
  std::shared_ptr<FlightRecording> flightRecording_ = std::make_shared<FlightRecording>(rank_);
  // The onCompletion hook and the operations whose hook calls are pending.
  // Completions queue up in the order they happen (on the driver); one
  // future thread at a time calls the hook for them, in that order.
  struct OnCompletion {
    std::mutex mutex;
    std::condition_variable drained;
    std::function<void(std::shared_ptr<c10d::WorkInfo>)> hook;  // guarded by mutex
    std::size_t pending = 0;                                    // submitted, hook not yet called; guarded by mutex
    std::deque<std::shared_ptr<c10d::WorkInfo>> completed;      // null: failed; guarded by mutex
    bool calling = false;                                       // a thread calls the hook; guarded by mutex
    std::atomic<bool> registered{false};
    void callHook();
  };
  std::shared_ptr<OnCompletion> onCompletion_ = std::make_shared<OnCompletion>();
  // Makes `work`'s completion call the onCompletion hook, if one is registered.
  void reportCompletion(Operation& op, c10d::OpType opType, uint64_t sequence);

  mutable std::mutex submitMutex_;      // makes "take a sequence number, submit" atomic
  bool closed_ = false;                 // guarded by submitMutex_
  std::atomic<uint64_t> transfers_{0};  // point-to-point numbering, for messages

  std::mutex coalescingMutex_;  // guards batch_ (and changes of coalescing_)
  std::atomic<bool> coalescing_{false};
  std::vector<c10::intrusive_ptr<UcxWork>> batch_;
};

}  // namespace ucxcoll
