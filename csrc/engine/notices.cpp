// Failure and leave notices in lazily connecting groups.
//
// A rank tells its group's peers what they must not wait for: that a
// collective of its failed (tag::kFailureNotice, kDisagreementNotice) or
// that it left the group (tag::kLeftNotice). An eagerly connecting group
// tells every rank; it is connected to all of them anyway. A lazily
// connecting group (UCXCOLL_CONNECT=lazy, or auto above 64 ranks) must
// not: telling every rank connects every rank to every other as the group
// fails or closes, a full mesh at every destroy_process_group (a million
// connections at 1,024 ranks), which is what connecting lazily avoids.
//
// It tells the ranks that can be waiting for it instead. A rank waits for
// a peer only on a receive from it (or a send to it), and the first one
// connects to the peer (Operation::connection) and says so: a
// tag::kReachedNotice to the peer's channel for the group, which waits in
// the peer's transport until the peer needs it. So a rank that fails or
// leaves tells the ranks it is connected to and those whose notices it
// finds (ranksToTell), and a rank that connects to it after that (even
// after it closed the group) finds its notices answered by the
// housekeeping (answerLateReaches, within a millisecond while the engine
// is busy, 100 ms while it is idle), for as long as the closed group's
// channel is not reused. Last, a rank waiting for a peer that waits for
// the leaver gets nothing from the leaver itself: the peer, failed by the
// leave notice, passes it on (Collective::announceFailure), so every rank
// that waits, directly or through others, learns who left, as every rank
// of an eager group does.

#include <vector>

#include "common/error.hpp"
#include "common/logging.hpp"
#include "engine/engine.hpp"
#include "engine/group.hpp"
#include "engine/operation.hpp"

namespace ucxcoll {
namespace {

constexpr auto kNoticeBound = std::chrono::seconds(10);

// Sends notices to processes outside any open group: the answer of a
// closed (or failed) group to ranks that connected to it late.
class LateNotices final : public Operation {
 public:
  struct Message {
    PeerHandle to;
    int rank;
    uint64_t tag;
  };
  explicit LateNotices(std::vector<Message> messages)
      : Operation(Kind::Control, nullptr, kNoticeBound), messages_(std::move(messages)) {}

 protected:
  Task run() override {
    for (const Message& message : messages_) {
      sendToProcess(message.to, message.rank, message.tag, nullptr, 0);
    }
    co_await all();
  }
  std::string describe() const override { return "notices to ranks that connected late"; }

 private:
  std::vector<Message> messages_;
};

}  // namespace

std::vector<int> Engine::takeReaches(Group& group) {
  std::vector<int> fresh;
  const uint64_t any = tag::internal(group.channel(), tag::kReachedNotice, group.nameValue(), 0);
  while (auto reached = transport_->probe(any, tag::kReachedNoticeMask)) {
    transport_->discard(reached->senderTag, tag::kMatchAll);
    const auto rank = static_cast<int>(tag::sender(reached->senderTag));
    if (rank >= group.size() || rank == group.rank()) {
      continue;
    }
    std::vector<bool>& reachedBy = group.reachedBy_;
    reachedBy.resize(static_cast<std::size_t>(group.size()));
    if (!reachedBy[static_cast<std::size_t>(rank)]) {
      reachedBy[static_cast<std::size_t>(rank)] = true;
      fresh.push_back(rank);
    }
  }
  return fresh;
}

std::vector<int> Engine::ranksToTell(Group& group) {
  std::vector<int> ranks;
  if (group.connectsLazily()) {
    takeReaches(group);
  }
  for (int peer = 0; peer < group.size(); ++peer) {
    const auto index = static_cast<std::size_t>(peer);
    if (peer != group.rank() && (!group.connectsLazily() || group.peer(peer) != nullptr ||
                                 (index < group.reachedBy_.size() && group.reachedBy_[index]))) {
      ranks.push_back(peer);
    }
  }
  return ranks;
}

void Engine::answerLateReaches() {
  std::vector<std::shared_ptr<Group>> telling;
  for (const auto& weak : groups_) {
    if (auto group = weak.lock(); group && group->connectsLazily() && !group->notices_.empty()) {
      telling.push_back(std::move(group));
    }
  }
  for (const auto& group : telling) {
    std::vector<LateNotices::Message> messages;
    for (int rank : takeReaches(*group)) {
      PeerHandle to = group->peer(rank);
      if (to == nullptr) {
        try {
          if (tryConnect(*group, rank).outcome == Reach::Connected) {
            to = group->peer(rank);
          }
        } catch (const Error& error) {
          UCXCOLL_DEBUG("group \"" << group->name() << "\": cannot tell rank " << rank << ": " << error.what());
        }
      }
      for (const Group::Notice& notice : group->notices_) {
        if (to != nullptr && notice.sender != static_cast<uint32_t>(rank)) {
          messages.push_back(
              {to, rank, tag::internal(group->peerChannel(rank), notice.purpose, notice.value, notice.sender)});
        }
      }
    }
    if (!messages.empty()) {
      [[maybe_unused]] Lease lease = submit(std::make_unique<LateNotices>(std::move(messages)));
    }
  }
}

}  // namespace ucxcoll
