#pragma once
// The small interface the engine drives: tagged, nonblocking sends and
// receives whose end is reported to the Transfer that asked for them, plus
// the means to sleep until something happens. Implementations:
// UcxTransport (real UCX, one per process) and LoopbackTransport
// (in-process, for unit tests).
//
// Threading: everything except interrupt() is called by one thread at a
// time, the engine's current driver. transferDone() runs on that thread,
// from inside progress() or, for a transfer that ends at once, from inside
// send()/recv() itself.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ucxcoll {

enum class TransferStatus {
  Ok,
  Truncated,  // the message was larger than the receive buffer
  Canceled,
  PeerLost,  // the connection to the peer broke: its process or host is gone
  Failed,
};

struct TransferResult {
  TransferStatus status = TransferStatus::Ok;
  std::size_t length = 0;  // receives: the sender's message size
  uint64_t senderTag = 0;  // receives: the tag the message was sent with
  std::string detail;      // Failed, PeerLost: the transport's own words
};

// One send or receive, as the transport sees it. The object must stay alive
// until transferDone() has been called, which happens exactly once.
class Transfer {
 public:
  virtual void transferDone(const TransferResult& result) = 0;

  // Owned by the transport while the transfer is in flight.
  bool inFlight = false;
  void* native = nullptr;
  void* carrier = nullptr;  // the transport object that carries it

 protected:
  ~Transfer() = default;
};

// A peer process, as returned by connect().
using PeerHandle = void*;

enum class PeerLocation {
  ThisHost,   // shared memory and CMA lanes; its death is watched by pid
  OtherHost,  // network lanes: the transport itself reports its failure
};

// A peer whose connection failed (its process or host is gone), or that
// left: it closed its transport in order, after everything it had sent
// arrived here.
struct PeerFailure {
  PeerHandle peer;
  std::string detail;     // the transport's own words
  bool departed = false;  // left in order, rather than failed
};

enum class SendMode {
  Standard,     // ends once the buffer may be reused
  Synchronous,  // ends only once the receiver has matched the message
};

struct ProbedMessage {
  uint64_t senderTag;
  std::size_t length;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // This process's address, to publish to peers.
  virtual const std::vector<uint8_t>& address() const = 0;
  // The peer at `address`, connected on first use and cached. For a peer
  // on another host the transport reports the connection's failure
  // (takeFailedPeers).
  virtual PeerHandle connect(const std::vector<uint8_t>& address, PeerLocation location) = 0;
  // Whether the process behind `address`, on this host, is known to have
  // closed the transport it published (its engine is gone, the process
  // lives on): why a connect() to it may fail. False where unknown.
  virtual bool hasLeft(const std::vector<uint8_t>& /*address*/) const { return false; }

  // Start a transfer. The buffer must stay valid (and, for sends, unchanged)
  // until the transfer ends. A receive matches a message whose tag equals
  // `tag` in every bit set in `mask`; `from` is the peer that the tag's
  // bits name as its sender (so that a transport with several lanes
  // listens on that peer's only), or null for a receive from any peer.
  virtual void send(PeerHandle peer, uint64_t tag, const void* data, std::size_t bytes, SendMode mode,
                    Transfer& transfer) = 0;
  virtual void recv(PeerHandle from, uint64_t tag, uint64_t mask, void* data, std::size_t bytes,
                    Transfer& transfer) = 0;
  // If a message matching tag/mask has arrived and no receive took it yet,
  // start receiving it as recv() would and return true; else false, and
  // nothing is posted. (How a transport with several lanes receives from
  // any peer without posting on every lane.)
  virtual bool recvWaiting(uint64_t tag, uint64_t mask, void* data, std::size_t bytes, Transfer& transfer) = 0;
  // Ask for an early end; the transfer still ends through transferDone()
  // (Canceled, or Ok when it was too late). Sends may not be cancellable.
  virtual void cancel(Transfer& transfer) = 0;

  // A message that arrived and matches no receive yet, if any; it stays
  // queued.
  virtual std::optional<ProbedMessage> probe(uint64_t tag, uint64_t mask) = 0;
  // Receive and drop every unmatched message matching tag/mask; returns how
  // many were dropped.
  virtual std::size_t discard(uint64_t tag, uint64_t mask) = 0;

  // Advance transfers; ends those that are done. Returns how many events
  // it handled (0: nothing happened).
  virtual unsigned progress() = 0;
  // Sleep until there may be something to progress, interrupt() is called,
  // or `timeoutMs` passes. Returns at once if events are already pending.
  virtual void waitForActivity(int timeoutMs) = 0;
  // Wake a thread in waitForActivity(). Callable from any thread.
  virtual void interrupt() = 0;
  // Also end waitForActivity() when `fd` (a pipe's read end) becomes
  // readable; the transport drains it. Transports that cannot wait on a
  // file descriptor return false, and the caller wakes them with
  // interrupt() instead.
  virtual bool watchWakeupFd(int /*fd*/) { return false; }

  // The process behind `peer` is known to be dead: nothing sent to it will
  // be acknowledged, so closing its connection should not wait for that.
  virtual void peerGone(PeerHandle /*peer*/) {}
  // Peers whose connection failed, or that left, since the last call
  // (driver thread).
  virtual std::vector<PeerFailure> takeFailedPeers() { return {}; }
  // Whether takeFailedPeers() has something; callable from any thread.
  virtual bool hasFailedPeers() const { return false; }
  // The job's key (see UcxTransport): every tag this transport sends,
  // receives or probes for is combined with it, so that a message sent
  // with another key matches nothing here. Driver thread; only while no
  // transfer is in flight.
  virtual void setJobKey(uint64_t /*key*/) {}
  // Called (on any thread) when a failure is queued for takeFailedPeers(),
  // so that an idle engine takes it at once. Set before the first connect.
  virtual void setFailureListener(std::function<void()> /*listener*/) {}
  // For each peer address (an IP literal) this transport reaches over a
  // kernel stream connection: the bytes that have moved over those
  // connections so far, acknowledged by the peer or received from it. What
  // tells a slow link from a cut one (engine/liveness.cpp). Empty where the
  // transport cannot tell (shared memory, RDMA, in-process loopback).
  virtual std::map<std::string, uint64_t> bytesMovedByPeerAddress() const { return {}; }
};

}  // namespace ucxcoll
