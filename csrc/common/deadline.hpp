#pragma once

#include <chrono>

namespace ucxcoll {

using Clock = std::chrono::steady_clock;

// A point in time past which an operation fails. A default-constructed
// deadline never expires.
class Deadline {
 public:
  Deadline() : at_(Clock::time_point::max()) {}
  explicit Deadline(Clock::time_point at) : at_(at) {}

  static Deadline after(std::chrono::milliseconds timeout) {
    if (timeout.count() <= 0) {
      return Deadline();
    }
    return Deadline(Clock::now() + timeout);
  }

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  bool infinite() const { return at_ == Clock::time_point::max(); }

  // Milliseconds left, clamped to [0, cap]; used as an epoll timeout.
  int millisecondsLeft(int cap) const {
    if (infinite()) {
      return cap;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) {
      return 0;
    }
    return left > cap ? cap : static_cast<int>(left);
  }

 private:
  Clock::time_point at_;
};

}  // namespace ucxcoll
