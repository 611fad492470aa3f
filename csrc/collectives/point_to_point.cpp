#include "collectives/point_to_point.hpp"

#include "common/error.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {

PointToPoint::PointToPoint(Direction direction, std::shared_ptr<Group> group, int peer, uint64_t userTag, void* data,
                           std::size_t bytes, uint64_t number, std::chrono::milliseconds timeout)
    : Operation(Kind::PointToPoint, std::move(group), timeout),
      direction_(direction),
      peer_(peer),
      userTag_(userTag),
      data_(data),
      bytes_(bytes),
      number_(number) {}

std::string PointToPoint::describe() const {
  std::string text = direction_ == Direction::Send ? "send #" : "recv #";
  text += std::to_string(number_);
  if (direction_ == Direction::Send) {
    text += " to rank " + std::to_string(peer_);
  } else if (peer_ == kAnySource) {
    text += " from any rank";
  } else {
    text += " from rank " + std::to_string(peer_);
  }
  return text + " (tag " + std::to_string(userTag_) + ")";
}

Task PointToPoint::run() {
  Group& g = *group();
  const auto me = static_cast<uint32_t>(g.rank());
  if (direction_ == Direction::Send) {
    co_await sendTagged(peer_, tag::pointToPoint(g.peerChannel(peer_), userTag_, me), data_, bytes_);
    co_return;
  }
  const bool anySource = peer_ == kAnySource;
  const uint64_t wanted = tag::pointToPoint(g.channel(), userTag_, anySource ? 0 : static_cast<uint32_t>(peer_));
  Request& message = recvTagged(peer_, wanted, anySource ? tag::kMatchAnySender : tag::kMatchAll, data_, bytes_);
  co_await message;
  source_ = static_cast<int>(tag::sender(message.result().senderTag));
  received();
}

std::string PointToPoint::peerName(const Request& request) const {
  if (request.peer() == kAnySource && request.ended()) {
    return "rank " + std::to_string(tag::sender(request.result().senderTag));
  }
  return Operation::peerName(request);
}

std::exception_ptr PointToPoint::checkForDisagreement(Transport& transport) {
  // Whatever it sent before it left has arrived before its notice, and a
  // posted receive has matched it by now.
  const std::vector<LeftPeer> left = leftPeersAwaited(transport);
  if (left.empty()) {
    return nullptr;
  }
  return std::make_exception_ptr(PeerGoneError(name() + ": " + describeLeaving(left.front()) +
                                               "; this transfer will not complete" + kClosedByPeer));
}

std::string PointToPoint::mismatchHint() const {
  return " (a receive needs a tensor of exactly the size that was sent)";
}

}  // namespace ucxcoll
