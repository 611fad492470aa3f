#pragma once
// The Transport over UCX: one context and one worker (UCS_THREAD_MODE_
// SERIALIZED: the engine lets one thread at a time drive it), endpoints to
// peer workers cached by address, and the file descriptors a driver sleeps
// on: the worker's wakeup fd (UCP_FEATURE_WAKEUP) and an eventfd that
// interrupt() writes.
//
// Leaving in order: a process that closes the transport first tells each
// peer on another host that it leaves (a farewell, sent after everything
// else it sent to that peer) and waits, boundedly, for the peer's
// acknowledgement before it closes the connection. Why: a rank that
// finishes its last collective first and shuts down would otherwise close
// its TCP connections while a peer still reads what it sent; the peer then
// saw "Connection reset by remote peer" and failed a collective whose data
// had all been sent (4-9 of 100 fresh 2x2 groups across two simulated
// hosts; UCX's client/server connections, tried instead, made it 39: their
// connection manager's socket closes apart from the data's). The peer
// reports the farewell as a departure (PeerFailure::departed), not a
// failure, and the connection's end that follows is no news.
//
// Completion callbacks: UCX calls them inside ucp_worker_progress or the
// call that posted the request, on the driver thread; the transfers they end
// belong to the driver. Should UCX ever call one from its own async thread
// (e.g. while it replays sends queued during connection setup), the
// transfer is not touched there: the completion is queued and the driver
// ends it in its next progress().

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/file_descriptor.hpp"
#include "transport/network_devices.hpp"
#include "transport/transport.hpp"

namespace ucxcoll {

struct UcpConfigDeleter {
  void operator()(ucp_config_t* config) const { ucp_config_release(config); }
};
struct UcpContextDeleter {
  void operator()(ucp_context* context) const { ucp_cleanup(context); }
};
struct UcpWorkerDeleter {
  void operator()(ucp_worker* worker) const { ucp_worker_destroy(worker); }
};

using UcpConfigPtr = std::unique_ptr<ucp_config_t, UcpConfigDeleter>;
using UcpContextPtr = std::unique_ptr<ucp_context, UcpContextDeleter>;
using UcpWorkerPtr = std::unique_ptr<ucp_worker, UcpWorkerDeleter>;

// For UCX completion callbacks that run outside our own calls into UCX (on
// UCX's async thread): queues the completion of `transfer` (posted on a
// UcxTransport) for the driver's next progress(). Callable from any thread.
void deferCompletion(Transfer& transfer, const TransferResult& result);

class UcxTransport final : public Transport {
 public:
  // `networkDevices`: the devices this context may use (network_devices.hpp;
  // the default leaves UCX its own choice).
  explicit UcxTransport(const NetworkDevices& networkDevices = {});
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

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
  bool watchWakeupFd(int fd) override;
  void peerGone(PeerHandle peer) override;
  std::vector<PeerFailure> takeFailedPeers() override;
  bool hasFailedPeers() const override { return hasFailedPeers_.load(std::memory_order_acquire); }
  // UCX's TCP lanes are this process's sockets: the kernel counts them
  // (transport/tcp_progress.hpp).
  std::map<std::string, uint64_t> bytesMovedByPeerAddress() const override;
  void setFailureListener(std::function<void()> listener) override {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    failureListener_ = std::move(listener);
  }
  // Tags go on the wire XORed with the key. XOR keeps masked matching
  // intact ((a^k)&m == (b^k)&m exactly when a&m == b&m), and a sender
  // without the key puts tags on the wire that match none of ours unless it
  // guesses every bit the receive's mask covers.
  void setJobKey(uint64_t key) override { jobKey_.store(key, std::memory_order_relaxed); }
  uint64_t jobKey() const { return jobKey_.load(std::memory_order_relaxed); }

 private:
  friend void deferCompletion(Transfer& transfer, const TransferResult& result);
  // Read by completion callbacks, which may run on UCX's async thread.
  std::atomic<uint64_t> jobKey_{0};
  // A peer as connect() returns it (the PeerHandle).
  struct Endpoint {
    UcxTransport* transport = nullptr;
    ucp_ep_h handle = nullptr;
    uint64_t peerKey = 0;       // the peer's farewell key: keyOf(its address)
    bool otherHost = false;     // error handling on, farewells exchanged
    bool dead = false;          // peerGone(): closed without a flush
    bool failed = false;        // UCX reported it failed: a later connect() makes a new one
    bool departed = false;      // the peer said farewell
    bool acknowledged = false;  // the peer acknowledged this side's farewell
    bool broken = false;        // UCX's error handler ran (guarded by deferredMutex_)
  };
  // What a farewell message carries.
  struct FarewellMessage {
    uint64_t kind;       // kFarewell or kFarewellAck (.cpp)
    uint64_t senderKey;  // keyOf(the sender's address)
  };
  friend void endpointFailed(void* endpoint, ucp_ep_h handle, ucs_status_t status);
  friend void farewellArrived(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* transport);
  void track(Transfer& transfer, ucs_status_ptr_t request, const char* what);
  void postFarewellReceive();
  // Acknowledges the farewells that arrived and notes the acknowledgements.
  void takeFarewells();
  void sendFarewell(Endpoint& endpoint, const FarewellMessage& message);
  // Says farewell to every peer on another host still connected and waits,
  // boundedly, until each acknowledged, left too, or broke.
  void sayFarewells();
  // Cancels the farewell receive (teardown).
  void endFarewellReceive();
  void closeEndpoints();
  // Ends the transfers whose UCX callback ran on another thread.
  unsigned endDeferred();

  // Buffers UCX may still write into (a transfer that would not cancel);
  // declared first so that they outlive the worker.
  std::vector<std::vector<std::byte>> abandonedBuffers_;
  // Every endpoint ever connected, at stable addresses (UCX's error handler
  // gets one): they outlive the worker too.
  std::deque<Endpoint> endpointStore_;
  UcpContextPtr context_;
  UcpWorkerPtr worker_;
  std::vector<uint8_t> address_;
  std::map<std::vector<uint8_t>, Endpoint*> endpoints_;  // by peer address: the current one
  // The farewell receive, always posted (its buffer, and what it received
  // on UCX's own thread, for the driver; the latter guarded by
  // deferredMutex_).
  FarewellMessage farewellInbox_{};
  void* farewellReceive_ = nullptr;
  std::vector<FarewellMessage> farewellsArrived_;
  std::atomic<bool> hasFarewells_{false};
  bool farewellReceiveEnded_ = true;
  bool closing_ = false;  // no more farewell receives
  // What this side sends (stable buffers: a send may end after the call).
  FarewellMessage farewell_{};
  FarewellMessage farewellAck_{};
  FileDescriptor epoll_;      // watches the worker's fd and interrupt_
  FileDescriptor interrupt_;  // eventfd written by interrupt()
  int workerFd_ = -1;         // owned by UCX
  int wakeupFd_ = -1;         // watchWakeupFd(); owned by the caller

  // Completions reported on a thread other than the driver's (UCX's async
  // thread), ended by the driver's next progress(); guarded by
  // deferredMutex_.
  std::mutex deferredMutex_;
  std::vector<std::pair<Transfer*, TransferResult>> deferred_;
  std::atomic<bool> hasDeferred_{false};
  // Endpoints UCX reported failed (its error handler may run on UCX's
  // async thread); also guarded by deferredMutex_.
  std::vector<PeerFailure> failedPeers_;
  std::atomic<bool> hasFailedPeers_{false};
  std::function<void()> failureListener_;  // guarded by deferredMutex_
};

}  // namespace ucxcoll
