#include "engine/shrink_exchange.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "engine/group.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {

ShrinkExchange::ShrinkExchange(std::shared_ptr<Group> parent, std::vector<int> excluded, uint32_t round,
                               uint32_t channel, std::chrono::milliseconds timeout,
                               std::shared_ptr<std::vector<uint32_t>> channels)
    : Operation(Kind::PointToPoint, std::move(parent), timeout),
      excluded_(std::move(excluded)),
      round_(round & tag::kMaxInternalValue),
      channel_(channel),
      channels_(std::move(channels)) {
  // The parent usually failed: that is why it shrinks.
  runsOnFailedGroup_ = true;
  mine_ = encodeOffer();
}

std::string ShrinkExchange::formatRanks(const std::vector<int>& ranks) {
  return "[" + listRanks(ranks) + "]";
}

bool ShrinkExchange::survives(int rank) const {
  return !std::binary_search(excluded_.begin(), excluded_.end(), rank);
}

std::size_t ShrinkExchange::offerBytes() const {
  return sizeof(uint32_t) + (static_cast<std::size_t>(group()->size()) + 7) / 8;
}

std::vector<uint8_t> ShrinkExchange::encodeOffer() const {
  std::vector<uint8_t> offer(offerBytes(), 0);
  std::memcpy(offer.data(), &channel_, sizeof(uint32_t));
  uint8_t* bits = offer.data() + sizeof(uint32_t);
  for (int rank : excluded_) {
    bits[rank / 8] |= static_cast<uint8_t>(1u << (rank % 8));
  }
  return offer;
}

std::vector<int> ShrinkExchange::excludedIn(const std::vector<uint8_t>& offer) const {
  std::vector<int> ranks;
  const uint8_t* bits = offer.data() + sizeof(uint32_t);
  for (int rank = 0; rank < group()->size(); ++rank) {
    if ((bits[rank / 8] >> (rank % 8)) & 1u) {
      ranks.push_back(rank);
    }
  }
  return ranks;
}

Task ShrinkExchange::run() {
  const Group& parent = *group();
  const auto self = static_cast<uint32_t>(parent.rank());
  offers_.assign(static_cast<std::size_t>(parent.size()), {});
  std::vector<uint32_t> channels(static_cast<std::size_t>(parent.size()), 0);
  channels[self] = channel_;
  for (int peer = 0; peer < parent.size(); ++peer) {
    if (peer == parent.rank() || !survives(peer)) {
      continue;
    }
    auto& offer = offers_[static_cast<std::size_t>(peer)];
    offer.assign(offerBytes(), 0);
    recvTagged(peer, tag::internal(parent.channel(), tag::kShrinkOffer, round_, static_cast<uint32_t>(peer)),
               tag::kMatchAll, offer.data(), offer.size());
    sendTagged(peer, tag::internal(parent.peerChannel(peer), tag::kShrinkOffer, round_, self), mine_.data(),
               mine_.size());
  }
  co_await all();
  for (int peer = 0; peer < parent.size(); ++peer) {
    const auto& offer = offers_[static_cast<std::size_t>(peer)];
    if (offer.empty()) {
      continue;
    }
    if (offer != mine_) {
      const std::vector<int> theirs = excludedIn(offer);
      if (theirs != excluded_) {
        throw MismatchError(name() + ": rank " + std::to_string(peer) + " excludes ranks " + formatRanks(theirs) +
                            " where this rank excludes " + formatRanks(excluded_) +
                            "; every rank that goes on must pass the same ranks_to_exclude");
      }
    }
    std::memcpy(&channels[static_cast<std::size_t>(peer)], offer.data(), sizeof(uint32_t));
  }
  *channels_ = std::move(channels);
}

std::string ShrinkExchange::describe() const {
  return "shrink #" + std::to_string(round_) + " excluding ranks " + formatRanks(excluded_);
}

std::exception_ptr ShrinkExchange::checkForDisagreement(Transport& transport) {
  // A survivor that shut the parent down, or aborted it, will not shrink.
  const std::vector<LeftPeer> left = leftPeersAwaited(transport);
  if (left.empty()) {
    return nullptr;
  }
  return std::make_exception_ptr(
      PeerGoneError(name() + ": " + describeLeaving(left.front()) + " instead of shrinking it" + kClosedByPeer));
}

ShrinkNotice::ShrinkNotice(std::shared_ptr<Group> parent, std::vector<int> excluded, std::vector<uint8_t> offer,
                           uint32_t round, std::chrono::milliseconds timeout)
    : Operation(Kind::Control, std::move(parent), timeout),
      excluded_(std::move(excluded)),
      offer_(std::move(offer)),
      round_(round) {
  runsOnFailedGroup_ = true;
}

Task ShrinkNotice::run() {
  const Group& parent = *group();
  for (int peer : excluded_) {
    if (!parent.rankGone(peer)) {
      sendTagged(
          peer,
          tag::internal(parent.peerChannel(peer), tag::kShrinkOffer, round_, static_cast<uint32_t>(parent.rank())),
          offer_.data(), offer_.size());
    }
  }
  co_await all();
}

std::string ShrinkNotice::describe() const {
  return "shrink #" + std::to_string(round_) + " notice to the excluded ranks " +
         ShrinkExchange::formatRanks(excluded_);
}

}  // namespace ucxcoll
