#pragma once
// A group's view of the shared UCX worker: the endpoints of its ranks and
// the operations posted for the collective now running.

#include <atomic>
#include <vector>

#include "transport/transport.hpp"
#include "transport/ucx_worker.hpp"

namespace ucxcoll {

class UcxTransport : public Transport {
 public:
  // `endpoints[r]` reaches group rank r (including this rank itself).
  UcxTransport(UcxWorker& worker, int rank, std::vector<ucp_ep_h> endpoints);
  ~UcxTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(endpoints_.size()); }

  void postSend(int peer, uint64_t tag, const void* data, std::size_t bytes) override;
  void postRecv(int peer, uint64_t tag, void* data, std::size_t bytes) override;
  void waitAll(const Deadline& deadline, const std::string& operation) override;

  // Make the current and every later waitAll() fail with AbortedError.
  // Thread-safe.
  void abort();

 private:
  struct PendingOperation {
    void* request;  // UCX request handle
    bool isReceive;
    int peer;
    std::size_t bytes;
  };

  void checkPeer(int peer) const;
  // Test every pending operation; drop the finished ones. Returns how many
  // finished; the first failure goes to `failure`.
  std::size_t reapCompleted(std::string& failure, bool& mismatch);
  void cancelPending();
  std::string describePending() const;

  UcxWorker& worker_;
  int rank_;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<PendingOperation> pending_;
  std::atomic<bool> aborted_{false};
};

}  // namespace ucxcoll
