#pragma once
// Notices, within milliseconds, that a peer process on this host has died
// (SIGKILL, a crash, os._exit): UCX's shared-memory and CMA lanes have no
// peer-failure detection of their own, so without this a dead peer is only
// noticed when an operation's deadline passes (torch's default: 30 min).
//
// Each watched process is a pidfd (readable once the process has exited);
// one thread sleeps in poll() on all of them and on an eventfd that wakes
// it for changes, so watching costs no CPU while nothing dies. Where
// pidfd_open is refused (old kernels, strict seccomp profiles) the thread
// instead checks the watched processes every kFallbackPeriod.
//
// A pid alone can be reused once its process is gone, so a process is known
// by its pid and its start time (field 22 of /proc/PID/stat): a pid whose
// start time changed belongs to another process, and the watched one is
// dead.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/file_descriptor.hpp"

namespace ucxcoll {

struct ProcessIdentity {
  pid_t pid = 0;  // 0: unknown (another host or pid namespace): not watched
  uint64_t startTime = 0;
  bool known() const { return pid != 0; }
  bool operator==(const ProcessIdentity&) const = default;
};

// The process that has `pid` now (unknown if none has).
ProcessIdentity processIdentity(pid_t pid);
// This process.
ProcessIdentity thisProcess();
// Which kernel and pid namespace this process's pids mean something in:
// two processes can watch each other only where these are equal.
std::string pidNamespaceIdentity();
// Whether `process` is still running (its pid exists with its start time).
bool processAlive(const ProcessIdentity& process);

class PeerWatch {
 public:
  // Called on the watch's own thread, once per dead process.
  using DeathHandler = std::function<void(const ProcessIdentity&)>;

  explicit PeerWatch(DeathHandler onDeath);
  ~PeerWatch();  // stops and joins the thread
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Start watching `process` (no-op if watched already). False if it is
  // already gone; the handler is not called for it then.
  bool watch(const ProcessIdentity& process);

  // Descriptors held, for tests: one per process still watched.
  std::size_t watchedCount() const;

 private:
  struct Watched {
    ProcessIdentity process;
    FileDescriptor pidfd;  // -1 in the fallback mode
  };

  void run();
  void wake();

  DeathHandler onDeath_;
  FileDescriptor wakeup_;  // eventfd
  mutable std::mutex mutex_;
  std::vector<Watched> watched_;  // guarded by mutex_
  bool stopping_ = false;         // guarded by mutex_
  bool usePidfd_ = true;          // guarded by mutex_
  std::thread thread_;
};

}  // namespace ucxcoll
