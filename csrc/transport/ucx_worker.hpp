#pragma once
// One UCX context and worker, with the file descriptors that let a waiting
// thread sleep until UCX has something to do. Used by one thread at a time
// (UCS_THREAD_MODE_SERIALIZED; the ProgressEngine's worker mutex decides
// which); only interrupt(), abortWaits() and aborted() may be called from
// other threads.

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ucxcoll {

// Closes a file descriptor on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  ~FileDescriptor();

  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

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

class UcxWorker {
 public:
  UcxWorker();
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h handle() const { return worker_.get(); }

  // This worker's address, to publish to peers through the store.
  const std::vector<uint8_t>& address() const { return address_; }

  // The endpoint to the worker at `peerAddress`, created on first use and
  // cached: groups that share a peer share its endpoint.
  ucp_ep_h connect(const std::vector<uint8_t>& peerAddress);

  // One round of UCX progress; returns the number of events processed.
  unsigned progress() { return ucp_worker_progress(worker_.get()); }

  // Sleep until UCX has events, interrupt() was called, or `timeoutMs` passed.
  // Returns at once when UCX already has pending events.
  void waitForActivity(int timeoutMs);

  // Wake the thread blocked in waitForActivity(). Thread-safe.
  void interrupt();

  // Make every wait on this worker, now and later, fail at once (used when
  // the process exits: nothing may keep it waiting for peers). Thread-safe.
  void abortWaits() {
    aborted_.store(true);
    interrupt();
  }
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

  // UCX's request status as text, for error messages.
  static std::string statusText(ucs_status_t status);

 private:
  void closeEndpoints();
  void drainInterrupts();

  UcpContextPtr context_;
  UcpWorkerPtr worker_;
  std::vector<uint8_t> address_;
  std::map<std::vector<uint8_t>, ucp_ep_h> endpoints_;
  FileDescriptor epoll_;      // watches the worker's efd and interruptFd_
  FileDescriptor interrupt_;  // eventfd written by interrupt()
  int workerFd_ = -1;         // owned by UCX
  std::atomic<bool> aborted_{false};
};

}  // namespace ucxcoll
