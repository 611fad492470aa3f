#pragma once
// One operation the engine runs: a collective, a point-to-point transfer or
// an internal step, written as a coroutine (run()) that posts sends and
// receives and co_awaits them. The engine starts it, resumes it whenever
// what it waits for has ended, enforces its deadline, and completes it once
// the body has returned and every message it posted has ended.
//
// Lifetime and ownership: the engine owns every operation from submit()
// until it is retired; an operation owns its coroutine frame and its
// Requests. Buffers handed to send()/recv() must stay valid until the
// operation completes (the operation itself usually owns them, e.g. through
// the tensors its subclass holds). A failed operation cancels what it
// posted and completes once that has drained; a transfer that will not
// drain (a peer gone mid-rendezvous) keeps the operation, buffers and all,
// alive as a "zombie" until the transport lets go, so that no late write
// can land in freed memory.

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.hpp"
#include "common/stable_list.hpp"
#include "engine/completion.hpp"
#include "engine/leave_reason.hpp"
#include "engine/task.hpp"
#include "transport/transport.hpp"

namespace ucxcoll {

class Engine;
class Group;
class Operation;

// One send or receive of an operation.
class Request final : public Transfer {
 public:
  Request(Operation& owner, int peer, std::size_t bytes, bool isReceive, bool takesShorter = false)
      : owner_(owner), peer_(peer), bytes_(bytes), isReceive_(isReceive), takesShorter_(takesShorter) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  int peer() const { return peer_; }  // group rank; -1: a receive from any rank
  std::size_t bytes() const { return bytes_; }
  bool isReceive() const { return isReceive_; }
  // A receive that takes a message shorter than its buffer (its length is
  // then result().length; Operation::recvUpTo); others fail on any other
  // size.
  bool takesShorter() const { return takesShorter_; }
  bool ended() const { return ended_; }
  // Once ended(): what the transport reported (length, sender's tag, ...).
  const TransferResult& result() const { return result_; }

  void transferDone(const TransferResult& result) override;

  // co_await request: resumes once this request has ended. (A separate
  // awaiter that points at the request: GCC 12 copies an awaiter returned
  // by reference.)
  struct Awaiter {
    Request& request;
    bool await_ready() const noexcept;
    void await_suspend(std::coroutine_handle<> waiter) const noexcept;
    void await_resume() const noexcept {}
  };
  Awaiter operator co_await() noexcept { return Awaiter{*this}; }

 private:
  Operation& owner_;
  int peer_;
  std::size_t bytes_;
  bool isReceive_;
  bool takesShorter_;
  bool ended_ = false;
  TransferResult result_;
};

class Operation {
 public:
  enum class Kind { Collective, PointToPoint, Control };

  Operation(Kind kind, std::shared_ptr<Group> group, std::chrono::milliseconds timeout);
  virtual ~Operation();
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  Kind kind() const { return kind_; }
  // Its number in the engine (Engine::abortOperation); set by submit().
  uint64_t serial() const { return serial_; }
  Group* group() const { return group_.get(); }
  // Names the operation in errors, e.g. `all_reduce #3 on group "0" (rank
  // 1 of 2, timeout 30000 ms)`: describe() and the group, put together
  // when first needed (not on the fast path).
  const std::string& name() const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  // " timed out after 2000 ms: ", the words gloo's and torch's timeouts
  // use, which tools and log searches (torchft's among them) look for.
  std::string timedOutAfter() const { return " timed out after " + std::to_string(timeout_.count()) + " ms: "; }

  // Set once the operation has completed; waiters use it (Engine::wait).
  Completion& completion() { return *completion_; }
  std::shared_ptr<Completion> sharedCompletion() const { return completion_; }

  // Called on the driver thread when the operation completes (after
  // completion() is set), with its error or null. Runs user code (a Work's
  // Future callbacks); it may submit new operations.
  std::function<void(std::exception_ptr)> onComplete;
  // Called on the driver thread when the operation succeeded, before
  // completion() is set: nothing has woken its waiters yet. Must be short
  // and must not wait for anything (no GIL, no submitting).
  std::function<void()> onSucceeded;

  // The size the audit log (UCXCOLL_LOG_LEVEL=info) and the desync report
  // give: the operation's output tensors' bytes and element type ("float",
  // a static string; null: unknown), set by whoever submits it.
  std::size_t payloadBytes = 0;
  const char* elementType = nullptr;

  // ---- For the body: messages by raw tag. `peer` is a group rank. --------
  Request& sendTagged(int peer, uint64_t tag, const void* data, std::size_t bytes, SendMode mode = SendMode::Standard);
  Request& recvTagged(int peer, uint64_t tag, uint64_t mask, void* data, std::size_t bytes);
  // recvTagged for a message of at most `bytes` (its length: the request's
  // result().length).
  Request& recvUpTo(int peer, uint64_t tag, uint64_t mask, void* data, std::size_t bytes);
  // For an operation outside any group (group setup, before the group
  // exists): a send on a connection from Engine::connect, naming the
  // receiver `rank` in errors. Receives from any rank (recvTagged with
  // peer -1) need no group either.
  Request& sendToProcess(PeerHandle to, int rank, uint64_t tag, const void* data, std::size_t bytes);

  // co_await op.all(): resumes once every request posted so far has ended.
  struct AllAwaiter {
    Operation& op;
    bool await_ready() const noexcept;
    void await_suspend(std::coroutine_handle<> waiter) noexcept;
    void await_resume() const noexcept {}
  };
  AllAwaiter all() { return AllAwaiter{*this}; }

 protected:
  // The body. Called once, when the operation starts, on the driver thread.
  virtual Task run() = 0;
  // What the operation is, e.g. "all_reduce #3" or "send #0 to rank 1 (tag 0)".
  virtual std::string describe() const = 0;
  // What the operation is, for the desync report, e.g. "broadcast #17 from
  // rank 1 (binomial algorithm)"; describe() unless an operation knows more.
  virtual std::string describeProgress() const { return describe(); }
  // The algorithm it runs ("ring", "pairwise"), for the audit log; null
  // where there is no choice (point-to-point) or it has not begun.
  virtual const char* algorithm() const { return nullptr; }
  // A collective looks for messages that show its peers are running a
  // different operation under its sequence number; returns the error to
  // fail with, or null. Called while the operation waits.
  virtual std::exception_ptr checkForDisagreement(Transport&) { return nullptr; }
  // Called once, on the driver thread, when the operation has failed with
  // `error` (after its own transfers were canceled): a collective tells its
  // peers, so that those waiting for it do not wait for their deadline.
  virtual void announceFailure(const std::exception_ptr& /*error*/) {}
  // Sends the group's ranks that may be waiting for this one (every rank
  // but this one, or, where the group connects lazily, engine/notices.cpp)
  // the notice `purpose` with `value` from group rank `sender` (this rank,
  // or a rank that left, passed on), and remembers it for ranks that
  // connect to this one later (Group::rememberNotice).
  void tellGroup(uint32_t purpose, uint32_t value, uint32_t sender);
  // The peers this operation still waits for (a receive or a send that
  // has not ended), each once.
  std::vector<int> peersAwaited() const;
  // A peer this operation still waits for that closed its group
  // (tag::kLeftNotice): how it left and how many of the group's
  // collectives it had finished, completed or failed (modulo 2^26).
  // Ends the error of an operation whose peer left: gloo's words for it,
  // which tools such as torchft look for in errors.
  static constexpr const char* kClosedByPeer = " (Connection closed by peer)";
  struct LeftPeer {
    int rank;
    LeaveReason how;
    uint64_t finishedCollectives;
  };
  std::vector<LeftPeer> leftPeersAwaited(Transport& transport) const;
  // The first left notice from any rank of the group, if there is one.
  std::optional<LeftPeer> anyLeftPeer(Transport& transport) const;
  static LeftPeer leftPeerOf(const ProbedMessage& notice);
  // "rank 2 of group "x" shut its group down (...) after finishing 3 of
  // its collectives".
  std::string describeLeaving(const LeftPeer& left) const;
  // Completes a size-mismatch message: what the sizes mean in this operation.
  virtual std::string mismatchHint() const { return ""; }
  // "1, 3": ranks as errors list them.
  static std::string listRanks(const std::vector<int>& ranks);
  // "rank 3", or for a receive from any rank, "a rank".
  virtual std::string peerName(const Request& request) const;

  // Runs even after its group failed (closing the group does).
  bool runsOnFailedGroup_ = false;

 private:
  friend class Engine;
  friend class Request;

  void requestEnded(Request& request);
  Request& postReceive(Request& request, uint64_t tag, uint64_t mask, void* data);
  bool refuseGonePeer(Request& request);
  // Group rank `peer`'s connection, made now if this is the first message
  // to or from it; null where it cannot be made (the rank is then gone).
  PeerHandle connection(int peer);
  // Record the first failure; the engine takes it from there.
  void fail(std::exception_ptr error);
  std::string describeMissingPeers() const;
  // The audit log's line for the completed operation: name, size, the peers
  // it exchanged messages with, time since submission, outcome.
  std::string auditLine(const std::exception_ptr& error) const;
  // The ranks a receive of this operation still waits for, ascending.
  std::vector<int> silentPeers() const;

  const Kind kind_;
  std::shared_ptr<Group> group_;
  std::chrono::milliseconds timeout_;
  mutable std::string name_;  // built by name() on first use
  std::shared_ptr<Completion> completion_ = std::make_shared<Completion>();

  // Driver-only state, managed by the Engine.
  Engine* engine_ = nullptr;
  uint64_t serial_ = 0;
  Clock::time_point submittedAt_{};
  Task task_;
  // Stable addresses (the transport holds them); a small collective's fit
  // inside the operation.
  StableList<Request, 4> requests_;
  std::size_t outstanding_ = 0;
  std::coroutine_handle<> waiter_;       // the suspended coroutine, if any
  const Request* waitingFor_ = nullptr;  // null: waits for all()
  std::exception_ptr failure_;
  bool started_ = false;
  bool cancelIssued_ = false;
  bool completed_ = false;
  bool reportRequested_ = false;  // timed out; the desync report is being gathered
  // The liveness check (liveness.cpp): when to ask the group's ranks on
  // other hosts next (unset: not waiting yet), and whether a query is out.
  Clock::time_point livenessCheckAt_{};
  bool livenessQueryOut_ = false;
  Deadline deadline_;
  Clock::time_point drainUntil_{};
};

}  // namespace ucxcoll
