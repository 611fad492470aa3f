#include "engine/peer_watch.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/logging.hpp"

namespace ucxcoll {
namespace {

constexpr auto kFallbackPeriod = std::chrono::milliseconds(100);

// Start time in clock ticks since boot, or 0 if `pid` does not exist or
// has exited (a zombie its parent has not reaped yet).
uint64_t startTimeOf(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) {
    return 0;
  }
  // The command name (field 2) is in parentheses and may itself hold
  // spaces and parentheses: count fields from the last ')'.
  auto close = line.rfind(')');
  if (close == std::string::npos) {
    return 0;
  }
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  // Fields 3 (state) .. 22 (starttime).
  for (int index = 3; index <= 22 && fields >> field; ++index) {
    if (index == 3 && (field == "Z" || field == "X")) {
      return 0;
    }
    if (index == 22) {
      return std::strtoull(field.c_str(), nullptr, 10);
    }
  }
  return 0;
}

int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

ProcessIdentity processIdentity(pid_t pid) {
  const uint64_t startTime = startTimeOf(pid);
  return startTime == 0 ? ProcessIdentity{} : ProcessIdentity{pid, startTime};
}

ProcessIdentity thisProcess() {
  return processIdentity(getpid());
}

std::string pidNamespaceIdentity() {
  std::string identity;
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::getline(bootId, identity);
  char link[PATH_MAX] = {};
  ssize_t length = ::readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
  if (identity.empty() || length <= 0) {
    return "";  // unknown: never watch by pid
  }
  return identity + "/" + std::string(link, static_cast<std::size_t>(length));
}

bool processAlive(const ProcessIdentity& process) {
  return process.known() && startTimeOf(process.pid) == process.startTime;
}

PeerWatch::PeerWatch(DeathHandler onDeath)
    : onDeath_(std::move(onDeath)), wakeup_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (wakeup_.get() < 0) {
    throw Error(std::string("cannot create the peer watch's eventfd: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void PeerWatch::wake() {
  uint64_t one = 1;
  [[maybe_unused]] auto written = ::write(wakeup_.get(), &one, sizeof(one));
}

bool PeerWatch::watch(const ProcessIdentity& process) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::any_of(watched_.begin(), watched_.end(), [&](const Watched& w) { return w.process == process; })) {
      return true;
    }
    FileDescriptor pidfd;
    if (usePidfd_) {
      pidfd = FileDescriptor(openPidfd(process.pid));
      if (pidfd.get() < 0 && errno == ESRCH) {
        return false;
      }
      if (pidfd.get() < 0) {
        UCXCOLL_INFO("pidfd_open refused (" << std::strerror(errno) << "); checking peer processes every "
                                            << kFallbackPeriod.count() << " ms instead");
        usePidfd_ = false;
        for (auto& entry : watched_) {
          entry.pidfd = FileDescriptor();
        }
      }
    }
    // Checked after opening the pidfd: the pid was the process we mean
    // when the pidfd was made, so a later reuse cannot fool the pidfd.
    if (!processAlive(process)) {
      return false;
    }
    watched_.push_back(Watched{process, std::move(pidfd)});
  }
  wake();
  return true;
}

std::size_t PeerWatch::watchedCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return watched_.size();
}

void PeerWatch::run() {
  pthread_setname_np(pthread_self(), "ucxcoll-peers");
  std::vector<pollfd> descriptors;
  std::vector<ProcessIdentity> polled;
  for (;;) {
    bool fallback = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        return;
      }
      fallback = !usePidfd_;
      descriptors.assign(1, pollfd{wakeup_.get(), POLLIN, 0});
      polled.clear();
      for (const auto& entry : watched_) {
        if (entry.pidfd.get() >= 0) {
          descriptors.push_back(pollfd{entry.pidfd.get(), POLLIN, 0});
          polled.push_back(entry.process);
        }
      }
    }
    const int timeout = fallback ? static_cast<int>(kFallbackPeriod.count()) : -1;
    int ready = ::poll(descriptors.data(), descriptors.size(), timeout);
    if (ready < 0 && errno != EINTR) {
      UCXCOLL_WARN("peer watch: poll failed (" << std::strerror(errno) << "); dead peers are found by deadlines only");
      return;
    }
    if (descriptors[0].revents != 0) {
      uint64_t count = 0;
      [[maybe_unused]] auto read = ::read(wakeup_.get(), &count, sizeof(count));
    }
    std::vector<ProcessIdentity> dead;
    for (std::size_t index = 1; index < descriptors.size(); ++index) {
      if (descriptors[index].revents != 0) {
        dead.push_back(polled[index - 1]);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (fallback) {
        for (const auto& entry : watched_) {
          if (!processAlive(entry.process)) {
            dead.push_back(entry.process);
          }
        }
      }
      std::erase_if(watched_, [&](const Watched& entry) {
        return std::find(dead.begin(), dead.end(), entry.process) != dead.end();
      });
    }
    for (const auto& process : dead) {
      onDeath_(process);
    }
  }
}

}  // namespace ucxcoll
