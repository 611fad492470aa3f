#include "engine/doorbell.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace ucxcoll {

Doorbell::Doorbell()
    : now_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      later_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
  if (now_.get() < 0 || later_.get() < 0) {
    throw Error(std::string("cannot create the progress thread's wake-up descriptors: ") + std::strerror(errno));
  }
}

void Doorbell::ring() {
  uint64_t one = 1;
  // A full counter already means "wake up"; nothing else can go wrong here.
  [[maybe_unused]] auto written = ::write(now_.get(), &one, sizeof(one));
}

void Doorbell::ringAfter(std::chrono::microseconds delay) {
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(delay.count() / 1000000);
  when.it_value.tv_nsec = static_cast<long>((delay.count() % 1000000) * 1000);
  if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) {
    when.it_value.tv_nsec = 1;  // zero would disarm
  }
  ::timerfd_settime(later_.get(), 0, &when, nullptr);
}

void Doorbell::cancel() {
  itimerspec never{};
  ::timerfd_settime(later_.get(), 0, &never, nullptr);
}

bool Doorbell::wait(int timeoutMs) {
  pollfd fds[2] = {{now_.get(), POLLIN, 0}, {later_.get(), POLLIN, 0}};
  const int ready = ::poll(fds, 2, timeoutMs);
  if (ready <= 0) {
    return ready < 0;  // EINTR: the caller checks its state and waits again
  }
  uint64_t count = 0;
  for (const auto& fd : fds) {
    if (fd.revents & POLLIN) {
      [[maybe_unused]] auto read = ::read(fd.fd, &count, sizeof(count));
    }
  }
  return true;
}

}  // namespace ucxcoll
