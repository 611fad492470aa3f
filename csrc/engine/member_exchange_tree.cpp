// A group made from a lazily connecting group's ranks (a subgroup, or what
// a shrink leaves): its members trade their offers along a binomial tree
// instead of each with every other member.
// Trading with every member would connect every pair of members (a
// DeviceMesh row of 32 ranks, 31 connections each; a new_group of all
// ranks, a full mesh), which lazy connecting exists to avoid; along the
// tree each member talks to its parent and at most log2(members) children.
//
// 1. Each member sends its offer (its channel and the terms) to its tree
//    neighbours and checks theirs: two neighbours that disagree both fail
//    at once. A member whose list differs also builds another tree; an
//    offer that reaches a rank that does not count its sender as a
//    neighbour is received anyway (receiveStrayOffers) and fails it (but
//    for a shrink's, from a rank this rank excludes: the shrink's notice
//    tells that rank instead).
// 2. Each member sends its parent its part of the table (its channel and
//    its children's parts); the root then holds the whole table, and the
//    table goes down the tree. A member takes it only after its parent's
//    offer agreed with its own, and the root only after all its children's
//    parts came, each after the child checked its own children: a table
//    that arrives means every member agreed with its sender.
// 3. A member that fails (a disagreement, a neighbour gone, its deadline)
//    sends a report saying why to every neighbour but the one that told
//    it, in place of the part or table they wait for; so every member of
//    the tree raises, naming the two that disagree or the member that
//    failed, instead of waiting for its deadline.

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/error.hpp"
#include "engine/group.hpp"
#include "engine/member_exchange.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {
namespace {

// A report begins with its verdict.
enum Verdict : uint32_t {
  kAgreed = 0,      // then the channels
  kDisagreed = 1,   // two ranks and their offers
  kMemberGone = 2,  // the rank that failed and its error
  kFailed = 3,      // likewise
};
constexpr std::size_t kMaxReportText = 1024;

uint32_t wordAt(const uint8_t* bytes, std::size_t at) {
  uint32_t word = 0;
  std::memcpy(&word, bytes + at, sizeof(word));
  return word;
}

void putWord(std::vector<uint8_t>& bytes, std::size_t at, uint32_t word) {
  std::memcpy(bytes.data() + at, &word, sizeof(word));
}

}  // namespace

bool MemberExchange::overTree() const {
  return group()->connectsLazily();
}

uint32_t MemberExchange::reportPurpose(bool up) const {
  if (terms_.reason == NewGroupTerms::Reason::Shrink) {
    return up ? tag::kShrinkReportUp : tag::kShrinkReportDown;
  }
  return up ? tag::kSubgroupReportUp : tag::kSubgroupReportDown;
}

void MemberExchange::planTree() {
  sortedMembers_ = terms_.members;
  std::sort(sortedMembers_.begin(), sortedMembers_.end());
  index_ = static_cast<std::size_t>(std::find(sortedMembers_.begin(), sortedMembers_.end(), group()->rank()) -
                                    sortedMembers_.begin());
  treeParent_ = index_ == 0 ? -1 : sortedMembers_[index_ & (index_ - 1)];
  treeChildren_.clear();
  for (std::size_t bit = 1; bit < sortedMembers_.size() && (index_ & bit) == 0; bit <<= 1) {
    if (index_ + bit < sortedMembers_.size()) {
      treeChildren_.push_back(sortedMembers_[index_ + bit]);
    }
  }
}

std::size_t MemberExchange::subtreeEnd(std::size_t index) const {
  const std::size_t members = sortedMembers_.size();
  return index == 0 ? members : std::min(members, index + (index & (~index + 1)));
}

std::size_t MemberExchange::reportHeaderBytes() const {
  return sizeof(uint32_t) + std::max(2 * (sizeof(uint32_t) + offerBytes()), 2 * sizeof(uint32_t) + kMaxReportText);
}

Request& MemberExchange::expectOffer(int peer) {
  const Group& parent = *group();
  const auto p = static_cast<std::size_t>(peer);
  offers_[p].assign(offerBytes(), 0);
  Request& receive = recvTagged(peer, tag::internal(parent.channel(), purpose(), value_, static_cast<uint32_t>(peer)),
                                tag::kMatchAll, offers_[p].data(), offers_[p].size());
  offerReceives_[p] = &receive;
  return receive;
}

Task MemberExchange::exchangeOverTree() {
  const Group& parent = *group();
  const auto self = static_cast<uint32_t>(parent.rank());
  const auto ranks = static_cast<std::size_t>(parent.size());
  planTree();
  offers_.assign(ranks, {});
  offerReceives_.assign(ranks, nullptr);
  reports_.assign(ranks, {});
  reportReceives_.assign(ranks, nullptr);
  const std::size_t header = reportHeaderBytes();
  const std::size_t members = sortedMembers_.size();

  // Everything this rank will receive, posted before anything is sent.
  std::vector<int> neighbours = treeChildren_;
  if (treeParent_ >= 0) {
    neighbours.insert(neighbours.begin(), treeParent_);
  }
  std::vector<Request*> offerFrom(ranks, nullptr);
  std::vector<Request*> reportFrom(ranks, nullptr);
  for (int peer : neighbours) {
    const auto p = static_cast<std::size_t>(peer);
    offerFrom[p] = &expectOffer(peer);
    // At most a table of every parent rank: a member whose list differs
    // may send a longer one, which must fail on what it says, not its size.
    reports_[p].assign(header + sizeof(uint32_t) * ranks, 0);
    const uint32_t kind = reportPurpose(peer != treeParent_);
    reportFrom[p] = &recvUpTo(peer, tag::internal(parent.channel(), kind, value_, static_cast<uint32_t>(peer)),
                              tag::kMatchAll, reports_[p].data(), reports_[p].size());
    reportReceives_[p] = reportFrom[p];
  }
  for (int peer : neighbours) {
    sendTagged(peer, tag::internal(parent.peerChannel(peer), purpose(), value_, self), mine_.data(), mine_.size());
  }
  auto throwIfFailed = [this] {
    if (std::exception_ptr disagreement = firstDisagreement()) {
      std::rethrow_exception(disagreement);
    }
    if (std::exception_ptr failure = reportedFailure()) {
      std::rethrow_exception(failure);
    }
  };
  auto checkLength = [&](int peer, std::size_t channelsExpected) {
    const std::size_t length = reportFrom[static_cast<std::size_t>(peer)]->result().length;
    if (length != header + sizeof(uint32_t) * channelsExpected) {
      throw MismatchError(name() + ": rank " + std::to_string(peer) + " sent " +
                          std::to_string((length - std::min(length, header)) / sizeof(uint32_t)) +
                          " members' channels where this rank expects " + std::to_string(channelsExpected) +
                          "; every member must pass the same ranks");
    }
  };

  // This rank's part of the table, then each child's (indices [index_,
  // subtreeEnd(index_)) of sortedMembers_, in order).
  upReport_.assign(header + sizeof(uint32_t) * (subtreeEnd(index_) - index_), 0);
  putWord(upReport_, header, channel_);
  for (int child : treeChildren_) {
    const auto c = static_cast<std::size_t>(child);
    co_await *offerFrom[c];
    co_await *reportFrom[c];
    throwIfFailed();
    const auto childIndex = static_cast<std::size_t>(std::find(sortedMembers_.begin(), sortedMembers_.end(), child) -
                                                     sortedMembers_.begin());
    const std::size_t count = subtreeEnd(childIndex) - childIndex;
    checkLength(child, count);
    std::memcpy(upReport_.data() + header + sizeof(uint32_t) * (childIndex - index_), reports_[c].data() + header,
                sizeof(uint32_t) * count);
  }

  const uint8_t* table = upReport_.data();
  if (treeParent_ >= 0) {
    const auto p = static_cast<std::size_t>(treeParent_);
    sendTagged(treeParent_, tag::internal(parent.peerChannel(treeParent_), reportPurpose(true), value_, self),
               upReport_.data(), upReport_.size());
    reportedUp_ = true;
    co_await *offerFrom[p];
    co_await *reportFrom[p];
    throwIfFailed();
    checkLength(treeParent_, members);
    table = reports_[p].data();
  }
  for (int child : treeChildren_) {
    sendTagged(child, tag::internal(parent.peerChannel(child), reportPurpose(false), value_, self), table,
               header + sizeof(uint32_t) * members);
  }
  co_await all();
  std::vector<uint32_t> channels(ranks, 0);
  for (std::size_t index = 0; index < members; ++index) {
    channels[static_cast<std::size_t>(sortedMembers_[index])] = wordAt(table, header + sizeof(uint32_t) * index);
  }
  *channels_ = std::move(channels);
}

std::exception_ptr MemberExchange::reportedFailure() {
  const std::size_t header = reportHeaderBytes();
  for (std::size_t peer = 0; peer < reportReceives_.size(); ++peer) {
    const Request* receive = reportReceives_[peer];
    if (receive != nullptr && receive->ended() && receive->result().status == TransferStatus::Ok &&
        receive->result().length == header && wordAt(reports_[peer].data(), 0) != kAgreed) {
      return failureIn(static_cast<int>(peer), reports_[peer]);
    }
  }
  return nullptr;
}

std::exception_ptr MemberExchange::failureIn(int sender, const std::vector<uint8_t>& report) {
  const std::size_t header = reportHeaderBytes();
  toldBy_ = sender;
  toldReport_.assign(report.begin(), report.begin() + static_cast<std::ptrdiff_t>(header));
  const uint8_t* bytes = report.data();
  const uint32_t verdict = wordAt(bytes, 0);
  if (verdict == kDisagreed) {
    // Two members that disagree, found somewhere in the tree: this rank
    // names the one whose terms differ from its own.
    const std::size_t offerAt = sizeof(uint32_t);
    const std::size_t secondAt = offerAt + sizeof(uint32_t) + offerBytes();
    const bool agreesWithFirst = sameTermsAsMine(bytes + offerAt + sizeof(uint32_t));
    const std::size_t namedAt = agreesWithFirst ? secondAt : offerAt;
    const uint8_t* offer = bytes + namedAt + sizeof(uint32_t);
    return std::make_exception_ptr(MismatchError(
        name() + ": " +
        disagreement(static_cast<int>(wordAt(bytes, namedAt)), std::vector<uint8_t>(offer, offer + offerBytes()))));
  }
  const uint32_t failed = wordAt(bytes, sizeof(uint32_t));
  const std::size_t textBytes = std::min<std::size_t>(wordAt(bytes, 2 * sizeof(uint32_t)), kMaxReportText);
  const std::string text(reinterpret_cast<const char*>(bytes) + 3 * sizeof(uint32_t), textBytes);
  const std::string message =
      name() + " failed: rank " + std::to_string(failed) +
      (static_cast<int>(failed) == sender ? "" : " (told by rank " + std::to_string(sender) + ")") +
      " could not take part: " + text;
  if (verdict == kMemberGone) {
    return std::make_exception_ptr(PeerGoneError(message));
  }
  return std::make_exception_ptr(Error(message));
}

std::vector<uint8_t> MemberExchange::encodeFailureReport(const std::exception_ptr& error) const {
  std::vector<uint8_t> report(reportHeaderBytes(), 0);
  if (objection_) {
    putWord(report, 0, kDisagreed);
    std::size_t at = sizeof(uint32_t);
    for (const auto& [rank, offer] :
         {std::pair(objection_->rankA, &objection_->offerA), std::pair(objection_->rankB, &objection_->offerB)}) {
      putWord(report, at, static_cast<uint32_t>(rank));
      std::memcpy(report.data() + at + sizeof(uint32_t), offer->data(), offerBytes());
      at += sizeof(uint32_t) + offerBytes();
    }
    return report;
  }
  uint32_t verdict = kFailed;
  std::string text = "unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const PeerGoneError& gone) {
    verdict = kMemberGone;
    text = gone.what();
  } catch (const std::exception& other) {
    text = other.what();
  } catch (...) {
  }
  text.resize(std::min(text.size(), kMaxReportText));
  putWord(report, 0, verdict);
  putWord(report, sizeof(uint32_t), static_cast<uint32_t>(group()->rank()));
  putWord(report, 2 * sizeof(uint32_t), static_cast<uint32_t>(text.size()));
  std::memcpy(report.data() + 3 * sizeof(uint32_t), text.data(), text.size());
  return report;
}

void MemberExchange::announceFailure(const std::exception_ptr& error) {
  if (!overTree() || sortedMembers_.empty()) {
    return;  // every member waits for every other one itself
  }
  failureReport_ = toldBy_ >= 0 ? toldReport_ : encodeFailureReport(error);
  const Group& parent = *group();
  auto tell = [&](int peer, uint32_t purpose) {
    if (peer != toldBy_ && !parent.rankGone(peer)) {
      sendTagged(peer, tag::internal(parent.peerChannel(peer), purpose, value_, static_cast<uint32_t>(parent.rank())),
                 failureReport_.data(), failureReport_.size());
    }
  };
  if (treeParent_ >= 0 && !reportedUp_) {
    tell(treeParent_, reportPurpose(true));
  }
  for (int child : treeChildren_) {
    tell(child, reportPurpose(false));
  }
}

void MemberExchange::receiveStrayOffers(Transport& transport) {
  const Group& parent = *group();
  while (auto stray = transport.probe(tag::internal(parent.channel(), purpose(), value_, 0),
                                      tag::kMatchAll & tag::kMatchAnySender)) {
    const auto sender = static_cast<int>(tag::sender(stray->senderTag));
    if (sender >= parent.size() || offerReceives_[static_cast<std::size_t>(sender)] != nullptr) {
      return;  // not a rank of the parent, or one already taken
    }
    if (terms_.reason == NewGroupTerms::Reason::Shrink &&
        !std::binary_search(sortedMembers_.begin(), sortedMembers_.end(), sender)) {
      // From a rank this shrink excludes: the shrink's notice tells it this
      // rank's list, and it raises on that (as where every member trades
      // with every other, whose exchange does not read its offer either).
      transport.discard(stray->senderTag, tag::kMatchAll);
      continue;
    }
    expectOffer(sender);
  }
}

}  // namespace ucxcoll
