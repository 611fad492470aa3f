#pragma once
// A Transport that carries messages between processes of one host through
// shared memory of its own, and everything else through a network
// transport (UCX) that it wraps.
//
// Why: a small collective is a handful of messages of a few bytes. Through
// UCX each is a request, a pass over every UCX transport in
// ucp_worker_progress and a walk of UCX's tag-matching queues. Here it is
// a record written into a ring in the receiver's memory and read by the
// receiver's next poll, matched against the few receives posted for that
// one sender.
//
// Layout: every process owns one inbox (a shared segment, see
// shared_segment.hpp) with one ring per sending process. A sender claims
// its ring the first time it connects, and from then on is the ring's only
// writer; the inbox's owner is its only reader. A ring holds records:
//   Data  a message of at most kInlineBytes, copied in whole;
//   Note  "a message of N bytes with this tag comes over the network":
//         larger messages keep UCX's zero-copy rendezvous, and the note
//         keeps their order with the small ones and tells the receiver to
//         post the network receive;
//   Ack   "your synchronous send was matched".
// A record becomes visible only once it is complete (the ring's head moves
// after the copy), so a sender that dies mid-write leaves nothing half
// read. A receiver that dies leaves a ring that fills up: sends to it wait
// in a queue until the engine hears of the death (its peer watch) and
// calls peerGone().
//
// Which peers use the lanes: those on this host (PeerLocation::ThisHost)
// whose address carries an inbox with this host's identity. Both ends
// decide from the same two addresses, so they agree; a peer whose inbox
// cannot be mapped although it should be fails connect() with the reason.
//
// Sleeping: a reader that is about to sleep sets its inbox's `sleeping`
// flag and looks at its rings once more; a writer that finds the flag set
// after publishing a record clears it and wakes the reader, through a pipe
// that the network transport watches (/proc/<pid>/fd/<fd>) or, for a reader
// in this same process (the unit tests' simulated processes), through its
// interrupt().

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/file_descriptor.hpp"
#include "transport/shared_segment.hpp"
#include "transport/transport.hpp"

namespace ucxcoll {

// Messages up to this size go through the rings.
inline constexpr std::size_t kInlineBytes = std::size_t{64} << 10;

class SharedMemoryTransport final : public Transport {
 public:
  // Throws Error if no inbox can be made (no memfd, or this host's
  // identity is unknown); callers then use `network` alone.
  explicit SharedMemoryTransport(std::unique_ptr<Transport> network);
  ~SharedMemoryTransport() override;
  SharedMemoryTransport(const SharedMemoryTransport&) = delete;
  SharedMemoryTransport& operator=(const SharedMemoryTransport&) = delete;

  const std::vector<uint8_t>& address() const override { return address_; }
  PeerHandle connect(const std::vector<uint8_t>& address, PeerLocation location) override;
  bool hasLeft(const std::vector<uint8_t>& address) const override;

  void send(PeerHandle peer, uint64_t tag, const void* data, std::size_t bytes, SendMode mode,
            Transfer& transfer) override;
  void recv(PeerHandle from, uint64_t tag, uint64_t mask, void* data, std::size_t bytes, Transfer& transfer) override;
  bool recvWaiting(uint64_t tag, uint64_t mask, void* data, std::size_t bytes, Transfer& transfer) override;
  void cancel(Transfer& transfer) override;

  std::optional<ProbedMessage> probe(uint64_t tag, uint64_t mask) override;
  std::size_t discard(uint64_t tag, uint64_t mask) override;

  unsigned progress() override;
  void waitForActivity(int timeoutMs) override;
  void interrupt() override;

  void peerGone(PeerHandle peer) override;
  std::vector<PeerFailure> takeFailedPeers() override;
  bool hasFailedPeers() const override;
  std::map<std::string, uint64_t> bytesMovedByPeerAddress() const override;
  void setJobKey(uint64_t key) override;
  void setFailureListener(std::function<void()> listener) override;

  // Whether `peer` (from connect) is reached through the rings.
  bool sharesMemoryWith(PeerHandle peer) const;

  struct Identity;
  struct Peer;
  struct Ring;

 private:
  struct Posted {
    uint64_t tag;
    uint64_t mask;
    void* data;
    std::size_t bytes;
    Transfer* transfer;
    uint64_t order;  // posting order, across a peer's list and the any-peer list
  };
  struct Arrived {  // a message that matched no receive yet
    uint32_t kind;
    uint64_t tag;  // as sent (job key applied)
    std::size_t bytes;
    uint64_t ackId;
    std::vector<std::byte> payload;
    uint64_t order;  // arrival order, across peers
  };

  Peer& peerByIdentity(const Identity& identity);
  // Maps the peer's inbox and claims this process's ring in it.
  void openLane(Peer& peer);
  // Write a record, or queue it while the ring is full.
  void post(Peer& peer, uint32_t kind, uint64_t tag, uint64_t id, const void* data, std::size_t bytes,
            Transfer* transfer);
  bool write(Peer& peer, uint32_t kind, uint64_t tag, uint64_t id, const void* data, std::size_t bytes);
  void wake(Peer& peer);
  unsigned flushQueued();
  unsigned pollRings();
  void handleRecord(Peer& from, uint32_t kind, uint64_t tag, uint64_t id, const std::byte* payload, std::size_t bytes);
  // Hand a message to the receive `posted` (removed from its list already).
  void deliver(Peer& from, const Posted& posted, uint32_t kind, uint64_t tag, uint64_t ackId, const std::byte* payload,
               std::size_t bytes);
  bool matchArrived(Peer* only, uint64_t tag, uint64_t mask, void* data, std::size_t bytes, Transfer& transfer);
  unsigned serviceAnyPeer();
  bool anythingToRead() const;
  void endWith(Transfer& transfer, TransferStatus status, std::size_t length = 0, uint64_t senderTag = 0,
               std::string detail = {});

  // Receives that drop the payload of a discarded note when it arrives over
  // the network; declared before network_ so that they outlive it.
  struct Sink final : Transfer {
    std::vector<std::byte> buffer;
    bool ended = false;
    void transferDone(const TransferResult&) override { ended = true; }
  };
  std::list<Sink> sinks_;
  std::unique_ptr<Transport> network_;
  std::unique_ptr<OwnedSegment> inbox_;
  FileDescriptor wakeRead_;
  FileDescriptor wakeWrite_;
  bool wakeThroughPipe_ = false;
  uint32_t serial_ = 0;
  std::vector<uint8_t> address_;
  uint64_t jobKey_ = 0;

  std::list<Peer> peers_;  // stable addresses: they are the PeerHandles
  std::map<std::vector<uint8_t>, Peer*> byAddress_;
  std::map<std::tuple<int32_t, uint32_t, uint64_t>, Peer*> byIdentity_;  // (pid, serial, inode)
  std::unordered_map<PeerHandle, Peer*> byNetworkHandle_;
  std::vector<Peer*> incoming_;     // by ring index of this inbox; null until its writer is known
  std::vector<uint64_t> readUpTo_;  // by ring index: this reader's tail
  std::list<Posted> anyPeer_;       // receives from any peer, in posting order
  uint64_t nextOrder_ = 1;
  uint64_t nextAckId_ = 1;
  std::size_t queuedRecords_ = 0;
  std::size_t arrivedCount_ = 0;
};

}  // namespace ucxcoll
