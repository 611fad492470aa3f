#pragma once
// An in-process Transport for unit tests: "processes" are LoopbackTransports
// attached to one LoopbackFabric, each driven by its own engine, and
// messages are copied between them with UCX's matching rules (a message
// goes to the first posted receive it matches, a receive takes the first
// unmatched message it matches, equal tags between two peers match in send
// order, a message larger than the buffer ends the receive Truncated).
//
// To test interleavings, delivery can be disturbed deterministically from a
// seed: each message waits a random number (up to maxDelay) of its
// receiver's progress() calls before it can match, and with `reorder`
// messages from different senders become visible in random order. Sends
// above eagerBytes, and synchronous sends, end only once the receiver has
// matched them, like UCX's rendezvous.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "transport/transport.hpp"

namespace ucxcoll {

struct LoopbackOptions {
  uint64_t seed = 1;
  uint32_t maxDelay = 0;  // in progress() calls of the receiver
  bool reorder = false;
  std::size_t eagerBytes = 8192;
};

class LoopbackTransport;

class LoopbackFabric {
 public:
  explicit LoopbackFabric(LoopbackOptions options = {}) : options_(options) {}
  LoopbackFabric(const LoopbackFabric&) = delete;
  LoopbackFabric& operator=(const LoopbackFabric&) = delete;

  // A new "process"; the fabric must outlive it.
  std::unique_ptr<LoopbackTransport> attach();

  const LoopbackOptions& options() const { return options_; }

 private:
  friend class LoopbackTransport;
  struct Message {
    uint64_t tag;
    std::vector<std::byte> data;
    uint32_t sender;         // fabric index of the sending transport
    Transfer* sendTransfer;  // set when the send ends only once matched
    uint32_t delay = 0;
  };
  struct Acknowledgement {
    Transfer* transfer;
    TransferResult result;
  };

  // Hand `message` to transport `index`, or an acknowledgement; dropped
  // when that transport is gone.
  void deliver(uint32_t index, Message message);
  void acknowledge(uint32_t index, Acknowledgement ack);
  void detach(uint32_t index);

  LoopbackOptions options_;
  std::mutex mutex_;
  std::vector<LoopbackTransport*> members_;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(LoopbackFabric& fabric, uint32_t index);
  ~LoopbackTransport() override;

  const std::vector<uint8_t>& address() const override { return address_; }
  PeerHandle connect(const std::vector<uint8_t>& address, PeerLocation location) override;

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

  // Messages this transport has sent so far (the start-up simulation's
  // messages per rank). Any thread.
  uint64_t messagesSent() const { return messagesSent_.load(std::memory_order_relaxed); }

 private:
  friend class LoopbackFabric;
  using Message = LoopbackFabric::Message;
  struct PostedReceive {
    uint64_t tag;
    uint64_t mask;
    void* data;
    std::size_t bytes;
    Transfer* transfer;
  };

  // Complete `receive` with `message` and let the sender know.
  void match(PostedReceive& receive, Message& message);
  void complete(Transfer& transfer, TransferResult result);

  LoopbackFabric& fabric_;
  uint32_t index_;
  std::vector<uint8_t> address_;

  // Filled by other threads.
  std::mutex inboxMutex_;
  std::condition_variable inboxReady_;
  std::vector<Message> inbox_;
  std::vector<LoopbackFabric::Acknowledgement> acks_;
  bool interrupted_ = false;

  std::atomic<uint64_t> messagesSent_{0};

  // Driver-only.
  std::mt19937_64 random_;
  std::map<uint32_t, std::deque<Message>> held_;              // by sender, in send order
  std::deque<Message> unexpected_;                            // in arrival order
  std::list<PostedReceive> posted_;                           // in posting order
  std::vector<LoopbackFabric::Acknowledgement> completions_;  // to run in progress()
};

}  // namespace ucxcoll
