#pragma once
// The progress engine: one per process (one per simulated process in unit
// tests), shared by every group. It owns the transport and every operation
// in flight, and advances them all from one thread at a time, the
// "driver":
//
//  - the engine's own progress thread, which drives whenever operations are
//    in flight and nobody else does;
//  - or a caller: a synchronous collective submitted while no thread drives
//    runs right on the submitting thread (saving two thread hand-offs, which
//    dominate small collectives), and a thread waiting for an operation
//    drives while it waits if nobody else does. Such a caller advances every
//    operation in flight, not only its own, so it never holds others up.
//
// The progress thread sleeps on its Doorbell while nothing is in flight.
//
// The driver loop: start submitted operations, progress the transport (which
// ends requests), resume the coroutines whose awaited requests ended,
// complete finished operations, fail those past their deadline (one heap of
// deadlines for all), look for peers running a different collective, and
// when nothing moves for a while, sleep on the transport until a message, a
// submission or the next deadline. A caller that waits for its own
// operation polls for as long as recent waits lasted (SpinBudget), yielding
// its core between polls when ranks outnumber cores; the progress thread
// polls for UCXCOLL_SPIN_US.
//
// Ordering: the collectives of one group start one at a time, in the order
// they were submitted (as NCCL does on one communicator); collectives of
// other groups and point-to-point transfers proceed independently.
//
// Completion callbacks (onComplete; the backend's callback hands the Future
// to another thread) run on the driver thread. They may submit operations
// and even wait for them: waiting on the driver thread drives the engine
// (nested) instead of blocking it. Once an operation is retired, a caller
// may destroy it at any moment: the driver touches it no more.
//
// Finished operations are not destroyed by the progress thread: one may
// hold the last reference to tensors that Python owns, and dropping that
// takes the GIL. While the interpreter shuts down, CPython ends any other
// thread that asks for it with pthread_exit, whose unwinding through a
// destructor aborts the process. So finished operations are retired, and
// callers destroy them (destroyRetired) on their next call.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/deadline.hpp"
#include "engine/doorbell.hpp"
#include "engine/group.hpp"
#include "engine/operation.hpp"
#include "engine/peer_watch.hpp"
#include "engine/spin_budget.hpp"
#include "transport/network_devices.hpp"
#include "transport/transport.hpp"

namespace ucxcoll {

class Engine {
 public:
  enum class Threading {
    ProgressThread,  // the normal mode
    CallersOnly,     // no progress thread: callers drive (wait, pollOnce); for deterministic tests
  };

  explicit Engine(std::unique_ptr<Transport> transport, Threading threading = Threading::ProgressThread);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The engine of this process over UCX, created on first use (with the
  // network devices `networkDevices()` chooses, see
  // transport/network_devices.hpp; it may resolve the store's host, so
  // later calls, which get the existing engine, do not call it). Groups
  // hold the returned pointer; it shuts down when the last group lets go.
  static std::shared_ptr<Engine> acquire(const std::function<NetworkDevices()>& networkDevices = {});

  const std::vector<uint8_t>& address() const { return address_; }
  // The network devices this engine's UCX offers peers, with their
  // addresses ("eth0 10.0.0.7"; NetworkDevices::inUse), for errors.
  const std::string& networkInterfaces() const { return networkInterfaces_; }

  // A group found `ranks` ranks (this one included) on this host. With
  // more ranks than this process has cores, a waiting thread yields its
  // core (sched_yield) between polls, so that the peer it waits for can
  // run, and the progress thread sleeps at once instead of polling.
  void noteRanksOnThisHost(int ranks);

  // ---- Groups -------------------------------------------------------------
  // The job this process's groups belong to (see UcxTransport::setJobKey):
  // every group of the job passes the same key. A new key is taken only
  // while no group is alive (a process that leaves one job for another);
  // otherwise a different key throws Error.
  void useJobKey(uint64_t key);

  // A channel number for a new group (see tag.hpp): unique among this
  // process's live groups. Messages left over from an earlier group with
  // the same number are dropped.
  uint32_t openChannel();
  void releaseChannel(uint32_t channel);
  // Connect to the group's ranks; `addresses`, `peerChannels` and
  // `processes` and `onOtherHost` are indexed by group rank (empty: all
  // unknown, all on this host). The processes this one can watch (known
  // identities) are watched from now on, and the transport reports broken
  // connections to other hosts: when a peer is gone, every operation of
  // the group, pending or later, fails with PeerGoneError naming its rank.
  // Throws PeerGoneError if one is gone already.
  std::shared_ptr<Group> createGroup(std::string name, int rank, int size, uint32_t channel, PeerAddresses addresses,
                                     std::vector<uint32_t> peerChannels,
                                     const std::vector<ProcessIdentity>& processes = {},
                                     const std::vector<bool>& onOtherHost = {},
                                     ConnectWhen connectWhen = ConnectWhen::AsConfigured);
  // After the collectives submitted before it: end the group's pending
  // point-to-point transfers (AbortedError), refuse new operations and
  // release its channel. With `wait`, returns once done. The peers are told
  // that this rank left and how (`leaving`).
  void closeGroup(const std::shared_ptr<Group>& group, bool wait, LeaveReason leaving);
  // Fail every operation of the group, queued or running, with
  // AbortedError(reason); the group stays open.
  void abortOperations(const std::shared_ptr<Group>& group, const std::string& reason);
  // abortOperations, then close the group.
  void abortGroup(const std::shared_ptr<Group>& group, const std::string& reason, LeaveReason leaving);

  // A connection to the process at `address` for an operation outside any
  // group (Operation::sendToProcess), made now and cached by the transport
  // (a group later reuses it). Throws UnreachableError where no network
  // device reaches it.
  PeerHandle connect(const std::vector<uint8_t>& address, PeerLocation location);

  // Fail the operation numbered `serial` (Operation::serial) with
  // AbortedError(why) if it is still in flight: one that waits for what
  // will not come (setup/table_relay.hpp gives up on a relay).
  void abortOperation(uint64_t serial, const std::string& why);

  // Messages this engine dropped because no group of this process can ever
  // receive them (see dropStrayMessages): `foreign` ones decode to a channel
  // this process never opened or to no kind of ours (sent under another job
  // key, or by a process outside the job); `late` ones are addressed to a
  // group this process has closed. Any thread.
  struct DroppedMessages {
    uint64_t foreign = 0;
    uint64_t late = 0;
  };
  DroppedMessages droppedMessages() const {
    return {foreignMessages_.load(std::memory_order_relaxed), lateMessages_.load(std::memory_order_relaxed)};
  }

  // A watched peer process has died (called by the peer watch's thread,
  // or by tests): the driver fails the groups it belonged to.
  void notePeerDied(const ProcessIdentity& process);

  // ---- Operations ---------------------------------------------------------
  // The driver role, held by a caller between submit(..., lead) and the end
  // of the Lease; drive() runs the engine on the caller's thread.
  class [[nodiscard]] Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : engine_(std::exchange(other.engine_, nullptr)), nested_(other.nested_) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    explicit operator bool() const { return engine_ != nullptr; }
    // Drive until `completion` is set.
    void driveUntil(const Completion& completion);

   private:
    friend class Engine;
    Lease(Engine* engine, bool nested) : engine_(engine), nested_(nested) {}
    Engine* engine_ = nullptr;
    bool nested_ = false;
  };

  // Hand over an operation. If no thread drives, the caller starts it right
  // here (its first messages go out at once). With `lead`, the caller then
  // keeps the driver role in the returned Lease (empty if another thread
  // drives), so that it can drive until the operation completes after
  // releasing its own locks; without, it lets go at once.
  Lease submit(std::unique_ptr<Operation> operation, bool lead = false);
  // Wait until `completion` is set or `until` passes (false then), driving
  // the engine meanwhile whenever no other thread does.
  bool wait(const Completion& completion, Clock::time_point until = Clock::time_point::max());
  // Run `action` on the driver and return its result.
  template <typename Fn>
  auto runOnDriver(Fn action) -> decltype(action());

  // Destroy retired operations. Callers only (a no-op on the progress
  // thread); call it holding none of your own locks.
  void destroyRetired();

  // CallersOnly mode: one pass of the driver loop, without sleeping; true
  // if anything happened. Returns false at once if another thread drives.
  bool pollOnce();

  // ---- Process exit -------------------------------------------------------
  // Wait until no operation is in flight, at most `bound`; true if so.
  bool waitUntilIdle(std::chrono::milliseconds bound);
  // Fail everything in flight with AbortedError ("the process is exiting")
  // and stop the progress thread. Later operations fail at once; group
  // setup and teardown then run on the caller.
  void stop();
  // stop() on this process's engine, if there is one, after giving its
  // operations up to `grace` to finish. Runs from Python's atexit, before
  // the interpreter finalizes, and again from the C atexit handler.
  static void stopLiveEngine(std::chrono::milliseconds grace);

  bool onProgressThread() const { return std::this_thread::get_id() == threadId_; }
  // Whether the calling thread is driving this engine right now (e.g. it
  // runs a completion callback).
  bool drivingHere() const;

 private:
  enum class Driver { None, ProgressThread, Caller };

  struct DeadlineEntry {
    Clock::time_point at;
    uint64_t serial;
    bool operator>(const DeadlineEntry& other) const { return at > other.at; }
  };

  class ControlOperation;

  void progressThreadMain();
  bool tryAcquire(Driver role, bool evenIfStopped = false);
  void release();
  // Drive until `*until` is set or `limit` passes; with until == nullptr,
  // until nothing is in flight. Returns true if it stopped because `*until`
  // can no longer be set: nothing is left in flight (an engine defect).
  bool drive(const std::atomic<bool>* until, Clock::time_point limit);
  [[noreturn]] void throwLostOperation();
  bool step();  // one pass; true if anything happened
  void sleep(const std::atomic<bool>* until, Clock::time_point limit);

  void takeSubmissions();
  void start(Operation& op);
  void startWaitingCollectives(Group& group);
  void resume(Operation& op, std::coroutine_handle<> handle);
  void review(Operation& op);
  void complete(Operation& op);
  // Drop the queues' pointers to an operation about to be retired.
  void forget(Operation& op);
  void housekeeping(Clock::time_point now);
  void abortAll(const std::string& why);
  // Fail those of the operations `serials` still in flight with AbortedError.
  void abortEach(const std::vector<uint64_t>& serials, const std::string& why);
  void abortAndDrain();
  void failOperation(Operation& op, std::exception_ptr error);
  // Fail the groups of the processes reported dead since the last call.
  void handlePeerDeaths();
  // Fail the groups whose connection to a peer on another host broke.
  void handleFailedConnections();
  // Connects to group rank `peer` (group.peer(peer) afterwards). Where that
  // fails because of the peer (no route to it, it left, it died), says so;
  // any other failure throws.
  enum class Reach { Connected, Unreachable, Left, Gone };
  struct ReachResult {
    Reach outcome;
    std::string detail;  // what the transport said, where it failed
  };
  ReachResult tryConnect(Group& group, int peer);
  // A lazily connecting group's first message to or from `peer`: its
  // connection, made now; null where it cannot be made, and then the rank
  // is gone from the group and the group failed, saying why.
  PeerHandle reach(Group& group, int peer);
  // Have a driver make a pass soon, even if nothing is in flight.
  void wakeDriver();
  // Mark `ranks` of `group` gone because of `why` (empty: their processes on
  // this host exited) and fail its operations.
  // `fate` says what became of them ("died", "are unreachable").
  // `spareUnaffected`: running operations that wait for none of `ranks`
  // go on (the ranks left in order, after sending everything).
  void failGroupPeers(Group& group, std::vector<int> ranks, const std::string& why, const char* fate = "died",
                      bool spareUnaffected = false);

  // ---- The desync report (desync_report.cpp) ------------------------------
  // An operation past its deadline: unless it has no peers to ask (or the
  // engine stops), ask every other rank of its group what it is doing, and
  // fail the operation once the answers are in or kStatusQueryBound has
  // passed. Returns false if no report is gathered: fail it now.
  bool startDesyncReport(Operation& op);
  // Answer the status requests that peers sent (any group); driver only.
  void answerStatusRequests();
  // What this rank is doing in `group`: the last collective it completed,
  // the one it is in, point-to-point transfers in flight.
  std::string describeState(const Group& group) const;
  // The idle progress thread's periodic pass: answer status requests even
  // while nothing is in flight.
  void serviceWhileIdle();

  // ---- Liveness of peers on other hosts (liveness.cpp) --------------------
  // At most once per kLivenessScanPeriod: an operation that has waited
  // UCXCOLL_PEER_LIVENESS_MS asks its group's ranks on other hosts whether
  // they are there; those that do not answer within as long are
  // unreachable, and the group fails naming them.
  void checkLiveness(Clock::time_point now);
  Clock::time_point nextLivenessScan_{};

  // ---- Notices in lazily connecting groups (notices.cpp) -------------------
  // The ranks of `group` that may be waiting for this one, whom a failure
  // or leave notice must reach: every other rank; where the group connects
  // lazily, those this rank is connected to and those that said they
  // connected to it (tag::kReachedNotice, taken from the transport now).
  std::vector<int> ranksToTell(Group& group);
  // Takes the reached notices waiting for `group` from the transport;
  // returns the ranks that had not sent one before.
  std::vector<int> takeReaches(Group& group);
  // Ranks that connected to a lazily connecting group after it sent its
  // notices (it failed, or closed: closedLazyGroups_) get them now; driver
  // only, with the housekeeping.
  void answerLateReaches();
  // Closed lazily connecting groups, kept until their channel is reused, so
  // that a rank that connects to this one after it left learns that at once.
  std::vector<std::shared_ptr<Group>> closedLazyGroups_;

  // ---- Stray messages (stray_messages.cpp) --------------------------------
  // At most once per kStraySweepPeriod: drop (and log) the messages waiting
  // in the transport that no group of this process can receive.
  void dropStrayMessages(Clock::time_point now);

  // Called by operations (driver thread).
  friend class Operation;
  void schedule(Operation& op) { ready_.push_back(&op); }
  void needsReview(Operation& op) { attention_.push_back(&op); }

  std::unique_ptr<Transport> transport_;
  std::vector<uint8_t> address_;
  std::string networkInterfaces_;  // set once by acquire(), before any group sees the engine
  const Threading threading_;
  const pid_t ownerPid_;

  // Guarded by mutex_.
  std::mutex mutex_;
  Doorbell doorbell_;  // wakes the progress thread
  std::condition_variable idle_;
  std::vector<std::unique_ptr<Operation>> submitted_;
  std::vector<std::unique_ptr<Operation>> retired_;
  // Emptied lists kept for their capacity, so that taking submissions and
  // destroying retired operations allocate nothing per operation
  // (spareSubmitted_: driver only).
  std::vector<std::unique_ptr<Operation>> spareSubmitted_;
  std::vector<std::unique_ptr<Operation>> spareRetired_;
  Driver driver_ = Driver::None;
  bool progressThreadWanted_ = false;  // now
  bool handOverPending_ = false;       // when the doorbell's delay has passed
  bool stopping_ = false;
  bool stopped_ = false;
  std::size_t active_ = 0;  // submitted, not completed
  uint64_t nextSerial_ = 1;

  std::atomic<bool> hasSubmissions_{false};
  std::atomic<bool> hasRetired_{false};
  std::atomic<bool> driverSleeping_{false};
  std::atomic<bool> stopRequested_{false};
  // How long the progress thread polls before it sleeps (UCXCOLL_SPIN_US;
  // 0 once ranks outnumber cores).
  std::atomic<int> spinMicroseconds_;
  std::atomic<bool> oversubscribed_{false};
  std::vector<ProcessIdentity> deadProcesses_;  // guarded by mutex_: reported, not handled yet
  std::atomic<bool> peerDeathPending_{false};
  std::atomic<uint64_t> foreignMessages_{0};
  std::atomic<uint64_t> lateMessages_{0};

  // The watch over peer processes, made with the first group that has a
  // peer on this host.
  std::mutex peerWatchMutex_;
  std::unique_ptr<PeerWatch> peerWatch_;

  // Driver-only.
  // How long a caller that waits for its own operation polls.
  SpinBudget callerSpin_;
  std::unordered_map<uint64_t, std::unique_ptr<Operation>> inFlight_;
  std::vector<std::unique_ptr<Operation>> zombies_;
  std::deque<Operation*> ready_;
  std::deque<Operation*> attention_;
  std::vector<Operation*> runningCollectives_;
  std::priority_queue<DeadlineEntry, std::vector<DeadlineEntry>, std::greater<>> deadlines_;
  Clock::time_point nextHousekeeping_{};
  // What became of each channel number in this process (index: channel).
  enum class ChannelState : uint8_t { NeverOpened, Open, Closed };
  std::vector<ChannelState> channels_;
  // The channel ranges that dropStrayMessages sweeps, rebuilt when a channel
  // opens or closes.
  struct StrayRange {
    uint32_t first;  // aligned to 2^bits
    uint32_t bits;
    bool foreign;  // never opened (else: closed)
  };
  std::vector<StrayRange> strayRanges_;
  bool strayRangesStale_ = true;
  Clock::time_point nextStraySweep_{};
  std::vector<std::weak_ptr<Group>> groups_;    // live groups, to fail when a peer dies
  std::vector<ProcessIdentity> goneProcesses_;  // every peer process seen dead
  uint32_t nextChannel_ = 1;
  uint32_t nextStatusQuery_ = 0;
  std::optional<uint64_t> jobKey_;  // none until the first group
  bool leftAJob_ = false;           // the key changed since the first group
  int depth_ = 0;                   // nesting of drive() on the driver thread
  bool exitDrain_ = false;          // draining aborted operations at exit

  std::thread thread_;
  std::thread::id threadId_;
};

// An operation that runs one function on the driver (group setup steps).
class Engine::ControlOperation final : public Operation {
 public:
  explicit ControlOperation(std::function<void()> action)
      : Operation(Kind::Control, nullptr, std::chrono::milliseconds(0)), action_(std::move(action)) {}

 protected:
  Task run() override;
  std::string describe() const override { return "ucxcoll internal step"; }

 private:
  std::function<void()> action_;
};

template <typename Fn>
auto Engine::runOnDriver(Fn action) -> decltype(action()) {
  using Result = decltype(action());
  if constexpr (std::is_void_v<Result>) {
    auto op = std::make_unique<ControlOperation>(std::move(action));
    auto completion = op->sharedCompletion();
    if (Lease lease = submit(std::move(op), true)) {
      lease.driveUntil(*completion);
    }
    wait(*completion);
    if (auto error = completion->error()) {
      std::rethrow_exception(error);
    }
  } else {
    std::optional<Result> result;
    runOnDriver([&] { result.emplace(action()); });
    return std::move(*result);
  }
}

}  // namespace ucxcoll
