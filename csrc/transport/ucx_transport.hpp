#pragma once
// The Transport over UCX: one context and one worker (UCS_THREAD_MODE_
// SERIALIZED: the engine lets one thread at a time drive it), endpoints to
// peer workers cached by address, and the file descriptors a driver sleeps
// on: the worker's wakeup fd (UCP_FEATURE_WAKEUP) and an eventfd that
// interrupt() writes.

#include <ucp/api/ucp.h>

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "common/file_descriptor.hpp"
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

class UcxTransport final : public Transport {
 public:
  UcxTransport();
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  const std::vector<uint8_t>& address() const override { return address_; }
  PeerHandle connect(const std::vector<uint8_t>& address) override;

  void send(PeerHandle peer, uint64_t tag, const void* data, std::size_t bytes, SendMode mode,
            Transfer& transfer) override;
  void recv(uint64_t tag, uint64_t mask, void* data, std::size_t bytes, Transfer& transfer) override;
  void cancel(Transfer& transfer) override;

  std::optional<ProbedMessage> probe(uint64_t tag, uint64_t mask) override;
  std::size_t discard(uint64_t tag, uint64_t mask) override;

  unsigned progress() override { return ucp_worker_progress(worker_.get()); }
  void waitForActivity(int timeoutMs) override;
  void interrupt() override;

 private:
  void closeEndpoints();

  // Buffers UCX may still write into (a transfer that would not cancel);
  // declared first so that they outlive the worker.
  std::vector<std::vector<std::byte>> abandonedBuffers_;
  UcpContextPtr context_;
  UcpWorkerPtr worker_;
  std::vector<uint8_t> address_;
  std::map<std::vector<uint8_t>, ucp_ep_h> endpoints_;
  FileDescriptor epoll_;      // watches the worker's fd and interrupt_
  FileDescriptor interrupt_;  // eventfd written by interrupt()
  int workerFd_ = -1;         // owned by UCX
};

}  // namespace ucxcoll
