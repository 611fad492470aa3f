#include "engine/member_exchange.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "common/fnv1a.hpp"
#include "engine/group.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {
namespace {

constexpr std::size_t kFingerprintAt = sizeof(uint32_t);
constexpr std::size_t kBitmapAt = kFingerprintAt + sizeof(uint64_t);

}  // namespace

NewGroupTerms NewGroupTerms::shrink(int parentSize, const std::vector<int>& excluded, uint32_t round) {
  NewGroupTerms terms;
  terms.reason = Reason::Shrink;
  terms.round = round;
  for (int rank = 0; rank < parentSize; ++rank) {
    if (!std::binary_search(excluded.begin(), excluded.end(), rank)) {
      terms.members.push_back(rank);
    }
  }
  return terms;
}

NewGroupTerms NewGroupTerms::subgroup(std::vector<int> members, std::string name) {
  NewGroupTerms terms;
  terms.reason = Reason::Subgroup;
  terms.members = std::move(members);
  terms.name = std::move(name);
  return terms;
}

std::vector<int> NewGroupTerms::excluded(int parentSize) const {
  std::vector<int> ranks;
  for (int rank = 0; rank < parentSize; ++rank) {
    if (std::find(members.begin(), members.end(), rank) == members.end()) {
      ranks.push_back(rank);
    }
  }
  return ranks;
}

MemberExchange::MemberExchange(std::shared_ptr<Group> parent, NewGroupTerms terms, uint32_t channel,
                               std::chrono::milliseconds timeout, std::shared_ptr<std::vector<uint32_t>> channels)
    : Operation(Kind::PointToPoint, std::move(parent), timeout),
      terms_(std::move(terms)),
      channel_(channel),
      channels_(std::move(channels)) {
  // A shrink's parent usually failed: that is why it shrinks. A subgroup
  // needs only its own members to be there.
  runsOnFailedGroup_ = true;
  if (terms_.reason == NewGroupTerms::Reason::Shrink) {
    value_ = terms_.round & tag::kMaxInternalValue;
  } else {
    // Concurrent creations between the same two ranks must not take each
    // other's offers: their names differ, and so (but for 1 in 2^26) does
    // this; the fingerprint in the offer catches the rest.
    value_ = tag::internalValueOf(fnv1a(terms_.name.data(), terms_.name.size()));
  }
  mine_ = encodeOffer();
}

std::string MemberExchange::formatRanks(const std::vector<int>& ranks) {
  return "[" + listRanks(ranks) + "]";
}

uint32_t MemberExchange::purpose() const {
  return terms_.reason == NewGroupTerms::Reason::Shrink ? tag::kShrinkOffer : tag::kSubgroupOffer;
}

uint64_t MemberExchange::fingerprint() const {
  if (terms_.reason == NewGroupTerms::Reason::Shrink) {
    return 0;  // the members are ascending and the round is in the tag
  }
  const uint64_t named = fnv1a(terms_.name.data(), terms_.name.size());
  return fnv1a(terms_.members.data(), terms_.members.size() * sizeof(int), named);
}

std::size_t MemberExchange::offerBytes() const {
  return kBitmapAt + (static_cast<std::size_t>(group()->size()) + 7) / 8;
}

std::vector<uint8_t> MemberExchange::encodeOffer() const {
  std::vector<uint8_t> offer(offerBytes(), 0);
  std::memcpy(offer.data(), &channel_, sizeof(uint32_t));
  const uint64_t print = fingerprint();
  std::memcpy(offer.data() + kFingerprintAt, &print, sizeof(uint64_t));
  uint8_t* bits = offer.data() + kBitmapAt;
  for (int rank : terms_.members) {
    bits[rank / 8] |= static_cast<uint8_t>(1u << (rank % 8));
  }
  return offer;
}

std::vector<int> MemberExchange::membersIn(const std::vector<uint8_t>& offer) const {
  std::vector<int> ranks;
  const uint8_t* bits = offer.data() + kBitmapAt;
  for (int rank = 0; rank < group()->size(); ++rank) {
    if ((bits[rank / 8] >> (rank % 8)) & 1u) {
      ranks.push_back(rank);
    }
  }
  return ranks;
}

bool MemberExchange::sameTermsAsMine(const uint8_t* offer) const {
  return std::equal(offer + kFingerprintAt, offer + offerBytes(), mine_.begin() + kFingerprintAt);
}

std::string MemberExchange::disagreement(int peer, const std::vector<uint8_t>& offer) const {
  const int parentSize = group()->size();
  std::vector<int> theirs = membersIn(offer);
  std::vector<int> ours = terms_.members;
  std::sort(ours.begin(), ours.end());
  if (terms_.reason == NewGroupTerms::Reason::Shrink) {
    NewGroupTerms theirTerms = terms_;
    theirTerms.members = theirs;
    return "rank " + std::to_string(peer) + " excludes ranks " + formatRanks(theirTerms.excluded(parentSize)) +
           " where this rank excludes " + formatRanks(terms_.excluded(parentSize)) +
           "; every rank that goes on must pass the same ranks_to_exclude";
  }
  if (theirs != ours) {
    return "rank " + std::to_string(peer) + " makes it of ranks " + formatRanks(theirs) +
           " where this rank makes it of " + formatRanks(ours) + "; every member must pass the same ranks";
  }
  return "rank " + std::to_string(peer) +
         " makes a group of the same ranks but names it otherwise or orders its ranks otherwise; every member must "
         "make the same groups in the same order";
}

Task MemberExchange::run() {
  return overTree() ? exchangeOverTree() : exchangeWithEveryMember();
}

Task MemberExchange::exchangeWithEveryMember() {
  const Group& parent = *group();
  const auto self = static_cast<uint32_t>(parent.rank());
  offers_.assign(static_cast<std::size_t>(parent.size()), {});
  offerReceives_.assign(static_cast<std::size_t>(parent.size()), nullptr);
  std::vector<uint32_t> channels(static_cast<std::size_t>(parent.size()), 0);
  channels[self] = channel_;
  for (int peer : terms_.members) {
    if (peer == parent.rank()) {
      continue;
    }
    const auto p = static_cast<std::size_t>(peer);
    offers_[p].assign(offerBytes(), 0);
    offerReceives_[p] =
        &recvTagged(peer, tag::internal(parent.channel(), purpose(), value_, static_cast<uint32_t>(peer)),
                    tag::kMatchAll, offers_[p].data(), offers_[p].size());
    sendTagged(peer, tag::internal(parent.peerChannel(peer), purpose(), value_, self), mine_.data(), mine_.size());
  }
  co_await all();
  if (std::exception_ptr disagreement = firstDisagreement()) {
    std::rethrow_exception(disagreement);
  }
  for (int peer : terms_.members) {
    if (peer != parent.rank()) {
      std::memcpy(&channels[static_cast<std::size_t>(peer)], offers_[static_cast<std::size_t>(peer)].data(),
                  sizeof(uint32_t));
    }
  }
  *channels_ = std::move(channels);
}

std::exception_ptr MemberExchange::firstDisagreement() {
  for (std::size_t peer = 0; peer < offerReceives_.size(); ++peer) {
    const Request* receive = offerReceives_[peer];
    if (receive != nullptr && receive->ended() && receive->result().status == TransferStatus::Ok &&
        !sameTermsAsMine(offers_[peer].data())) {
      if (!objection_) {
        objection_ = Objection{group()->rank(), mine_, static_cast<int>(peer), offers_[peer]};
      }
      return std::make_exception_ptr(
          MismatchError(name() + ": " + disagreement(static_cast<int>(peer), offers_[peer])));
    }
  }
  return nullptr;
}

std::string MemberExchange::describe() const {
  if (terms_.reason == NewGroupTerms::Reason::Shrink) {
    return "shrink #" + std::to_string(value_) + " excluding ranks " + formatRanks(terms_.excluded(group()->size()));
  }
  return "making group \"" + terms_.name + "\" of ranks " + formatRanks(terms_.members);
}

std::exception_ptr MemberExchange::checkForDisagreement(Transport& transport) {
  // An offer that disagrees fails this at once, even while another
  // member's has yet to come (a rank that is in one list only may never
  // send one).
  if (std::exception_ptr disagreement = firstDisagreement()) {
    return disagreement;
  }
  if (overTree()) {
    if (std::exception_ptr failure = reportedFailure()) {
      return failure;
    }
    receiveStrayOffers(transport);
  }
  // A member that shut the parent down, or aborted it, will not take part.
  const std::vector<LeftPeer> left = leftPeersAwaited(transport);
  if (left.empty()) {
    return nullptr;
  }
  const std::string instead = terms_.reason == NewGroupTerms::Reason::Shrink
                                  ? " instead of shrinking it"
                                  : " instead of making group \"" + terms_.name + "\" from it";
  return std::make_exception_ptr(
      PeerGoneError(name() + ": " + describeLeaving(left.front()) + instead + kClosedByPeer));
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
         MemberExchange::formatRanks(excluded_);
}

}  // namespace ucxcoll
