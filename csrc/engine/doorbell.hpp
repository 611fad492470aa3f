#pragma once
// How callers wake the progress thread: now (ring), or after a delay
// (ringAfter) that a caller can still call off (cancel). Two file
// descriptors the progress thread sleeps on: an eventfd and a timerfd.
//
// The delay is what lets a caller that starts an operation and waits for it
// right away (isend().wait(), a blocking recv) drive it itself: handing it
// to the progress thread at once would cost two thread wake-ups, each of
// which, with every core busy, waits for a time slice.

#include <chrono>

#include "common/file_descriptor.hpp"

namespace ucxcoll {

class Doorbell {
 public:
  Doorbell();

  void ring();
  void ringAfter(std::chrono::microseconds delay);
  void cancel();  // the delayed ring, if it has not rung yet
  // Sleep until rung or `timeoutMs` passed (-1: no limit); false if it
  // was not rung. Callable from one thread.
  bool wait(int timeoutMs = -1);

 private:
  FileDescriptor now_;    // eventfd
  FileDescriptor later_;  // timerfd
};

}  // namespace ucxcoll
