#pragma once
// A user's point-to-point transfer (send, recv, recv from any rank) as an
// operation: one message, tagged with the user's tag and the sender (see
// tag.hpp), so that messages between two ranks with equal tags match in
// the order they were posted, and a receive from any rank learns who sent.
// Transfers do not wait for the group's collectives, nor they for them.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/group.hpp"
#include "engine/operation.hpp"

namespace ucxcoll {

class PointToPoint : public Operation {
 public:
  enum class Direction { Send, Receive };
  static constexpr int kAnySource = -1;

  // `peer` is a group rank (kAnySource for a receive from any rank);
  // `userTag` must be in [0, tag::kMaxUserTag]. The buffer must stay valid
  // until the transfer completes (a subclass may own it). `number` counts
  // the group's transfers, for messages ("send #4 to rank 1 (tag 0)").
  PointToPoint(Direction direction, std::shared_ptr<Group> group, int peer, uint64_t userTag, void* data,
               std::size_t bytes, uint64_t number, std::chrono::milliseconds timeout);

  // The group rank the message came from (a receive, once completed).
  int sourceRank() const { return source_; }

 protected:
  Task run() override;
  std::string describe() const override;
  std::string mismatchHint() const override;
  std::string peerName(const Request& request) const override;
  // The peer closed its group: this transfer will never complete.
  std::exception_ptr checkForDisagreement(Transport& transport) override;
  // A receive's message is in the buffer: a subclass may copy it on.
  virtual void received() {}

 private:
  Direction direction_;
  int peer_;
  uint64_t userTag_;
  void* data_;
  std::size_t bytes_;
  uint64_t number_;
  int source_ = -1;
};

}  // namespace ucxcoll
