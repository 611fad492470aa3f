#pragma once
// A status query: ask some ranks of a group what they are doing there
// (tag.hpp: kStatusRequest, kStatusReply). Whoever drives a rank's engine
// answers in housekeeping, and an idle progress thread wakes every
// kIdleServicePeriod (engine.cpp) to do so, so a live rank answers within
// that period even while it is busy in Python. The desync report
// (desync_report.cpp) asks when an operation times out; the liveness check
// (liveness.cpp) asks ranks on other hosts when an operation has waited.

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/group.hpp"
#include "engine/operation.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {

// How long a timed-out collective waits for its peers' answers.
inline constexpr auto kStatusQueryBound = std::chrono::milliseconds(1000);
// One answer, NUL-terminated (longer ones are cut).
inline constexpr std::size_t kReplyBytes = 512;

// answers[i] is what asked[i] said; empty (first byte NUL) if it did not answer.
using Answers = std::vector<std::array<char, kReplyBytes>>;

class StatusQuery final : public Operation {
 public:
  StatusQuery(std::shared_ptr<Group> group, uint32_t id, std::vector<int> asked, std::shared_ptr<Answers> answers,
              std::chrono::milliseconds bound = kStatusQueryBound)
      : Operation(Kind::Control, std::move(group), bound),
        id_(id),
        asked_(std::move(asked)),
        answers_(std::move(answers)) {
    runsOnFailedGroup_ = true;
    for (auto& answer : *answers_) {
      answer[0] = '\0';
    }
  }

 protected:
  Task run() override {
    const Group& group = *this->group();
    const auto self = static_cast<uint32_t>(group.rank());
    for (std::size_t i = 0; i < asked_.size(); ++i) {
      const int peer = asked_[i];
      const auto from = static_cast<uint32_t>(peer);
      recvTagged(peer, tag::internal(group.channel(), tag::kStatusReply, id_, from), tag::kMatchAll,
                 (*answers_)[i].data(), kReplyBytes);
      sendTagged(peer, tag::internal(group.peerChannel(peer), tag::kStatusRequest, id_, self), nullptr, 0);
    }
    co_await all();
  }
  std::string describe() const override { return "status query #" + std::to_string(id_); }

 private:
  uint32_t id_;
  std::vector<int> asked_;
  std::shared_ptr<Answers> answers_;  // shared with whoever reads it once this completed
};

}  // namespace ucxcoll
