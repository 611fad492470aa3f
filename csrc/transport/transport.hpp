#pragma once
// The small interface every collective algorithm is written against: post
// tagged sends and receives to group ranks, then wait for all of them.
// Implementation: UcxTransport (ucx_transport.hpp).

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/deadline.hpp"

namespace ucxcoll {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Post a send of `bytes` bytes to group rank `peer`. The buffer must stay
  // valid and unchanged until waitAll() returns.
  virtual void postSend(int peer, uint64_t tag, const void* data, std::size_t bytes) = 0;

  // Post a receive of exactly `bytes` bytes from group rank `peer`. A message
  // of any other size is an error (ranks disagree about the collective).
  virtual void postRecv(int peer, uint64_t tag, void* data, std::size_t bytes) = 0;

  // Block until every posted operation has completed. On failure every
  // operation still pending is cancelled before this throws:
  //  - TimeoutError past `deadline`, naming the peers that did not deliver;
  //  - MismatchError when a message's size differs from the posted buffer;
  //  - AbortedError when the transport was aborted;
  //  - Error on any other transport failure.
  // `operation` names the collective in error messages.
  virtual void waitAll(const Deadline& deadline, const std::string& operation) = 0;
};

}  // namespace ucxcoll
