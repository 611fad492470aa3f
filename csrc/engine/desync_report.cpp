// The desync report: when a collective or a point-to-point transfer passes
// its deadline, the rank asks every other rank of the group what it is doing
// there, and its TimeoutError lists the answers, e.g.
//
//   all_reduce #1 on group "0" (rank 0 of 3, timeout 2000 ms) timed out after 2000 ms: no
//   data from rank(s) [1, 2]; what the ranks of the group are doing:
//     rank 0 (this rank): last completed collective #0; in all_reduce #1
//       (SUM, ring algorithm), 4 MiB of float32, no data from rank(s) [1, 2]
//     rank 1: last completed collective #0; in no collective of this group
//     rank 2: last completed collective #0; in no collective of this group;
//       point-to-point in flight: recv #0 from rank 1 (tag 3)
//
// NCCL's desync debug gathers the same through the store, which needs every
// rank to write its progress there on every collective (or a thread per
// group that watches a key). Here the question and the answers are internal
// messages over the group's own connections (tag.hpp: kStatusRequest,
// kStatusReply): whoever drives the engine answers in housekeeping, and an
// idle progress thread wakes every kIdleServicePeriod (engine.cpp) to do so,
// so a rank that is busy in Python or blocked in another group still answers
// within that period. A rank that does not answer within kStatusQueryBound
// is reported as such; the timed-out operation fails then at the latest.

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/logging.hpp"
#include "engine/engine.hpp"
#include "engine/group.hpp"
#include "engine/status_query.hpp"

namespace ucxcoll {
namespace {

// Ranks asked at most: in larger groups, those the collective waits for.
constexpr std::size_t kMaxAsked = 256;
// Distinct states listed at most; further ones are counted.
constexpr std::size_t kMaxStatesListed = 16;

class StatusReply final : public Operation {
 public:
  StatusReply(std::shared_ptr<Group> group, int asker, uint32_t id, std::string text)
      : Operation(Kind::Control, std::move(group), kStatusQueryBound), asker_(asker), id_(id), text_(std::move(text)) {
    runsOnFailedGroup_ = true;
    if (text_.size() >= kReplyBytes) {
      text_.resize(kReplyBytes - 4);
      text_ += "...";
    }
    // Always the full size: a receive takes only a message of its own size.
    text_.resize(kReplyBytes, '\0');
  }

 protected:
  Task run() override {
    const Group& group = *this->group();
    sendTagged(asker_,
               tag::internal(group.peerChannel(asker_), tag::kStatusReply, id_, static_cast<uint32_t>(group.rank())),
               text_.data(), text_.size());
    co_await all();
  }
  std::string describe() const override {
    return "status reply #" + std::to_string(id_) + " to rank " + std::to_string(asker_);
  }

 private:
  int asker_;
  uint32_t id_;
  std::string text_;
};

std::string formatBytes(std::size_t bytes) {
  constexpr std::size_t kKiB = 1024;
  constexpr std::size_t kMiB = kKiB * kKiB;
  if (bytes >= kMiB && bytes % kMiB == 0) {
    return std::to_string(bytes / kMiB) + " MiB";
  }
  if (bytes >= kKiB && bytes % kKiB == 0) {
    return std::to_string(bytes / kKiB) + " KiB";
  }
  return std::to_string(bytes) + " B";
}

// "rank 3", "ranks 1-3, 7".
std::string formatRanks(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) {
      ++j;
    }
    out << (i > 0 ? ", " : "") << ranks[i];
    if (j > i) {
      out << "-" << ranks[j];
    }
    i = j + 1;
  }
  return out.str();
}

// How many collectives a describeState() answer says its rank completed.
uint64_t completedIn(const std::string& state) {
  constexpr std::string_view kLast = "last completed collective #";
  if (state.rfind(kLast, 0) != 0) {
    return 0;  // "no collective completed yet"
  }
  return std::strtoull(state.c_str() + kLast.size(), nullptr, 10) + 1;
}

}  // namespace

std::string Engine::describeState(const Group& group) const {
  std::ostringstream out;
  if (group.completedCollectives_ == 0) {
    out << "no collective completed yet";
  } else {
    out << "last completed collective #" << group.completedCollectives_ - 1;
  }
  if (const Operation* running = group.running_) {
    out << "; in " << running->describeProgress();
    if (running->payloadBytes > 0) {
      out << ", " << formatBytes(running->payloadBytes);
      if (running->elementType != nullptr) {
        out << " of " << running->elementType;
      }
    }
    const std::string missing = running->describeMissingPeers();
    if (!missing.empty()) {
      out << ", " << missing;
    }
  } else {
    out << "; in no collective of this group";
  }
  if (!group.waiting_.empty()) {
    out << " (" << group.waiting_.size() << " more queued)";
  }
  if (!group.transfers_.empty()) {
    std::vector<const Operation*> transfers(group.transfers_.begin(), group.transfers_.end());
    std::sort(transfers.begin(), transfers.end(),
              [](const Operation* a, const Operation* b) { return a->serial_ < b->serial_; });
    out << "; point-to-point in flight: ";
    constexpr std::size_t kListed = 3;
    for (std::size_t i = 0; i < std::min(kListed, transfers.size()); ++i) {
      out << (i > 0 ? ", " : "") << transfers[i]->describe();
    }
    if (transfers.size() > kListed) {
      out << " and " << transfers.size() - kListed << " more";
    }
  }
  if (group.failed()) {
    constexpr std::size_t kCauseShown = 160;
    std::string cause = group.failure();
    if (cause.size() > kCauseShown) {
      cause = cause.substr(0, kCauseShown) + "...";
    }
    out << "; this group failed: " << cause;
  }
  return out.str();
}

bool Engine::startDesyncReport(Operation& op) {
  Group* group = op.group();
  if (op.kind() == Operation::Kind::Control || group == nullptr || group->size() < 2 || op.reportRequested_ ||
      stopRequested_.load()) {
    return false;
  }
  op.reportRequested_ = true;
  std::vector<int> asked;
  if (static_cast<std::size_t>(group->size()) <= kMaxAsked + 1) {
    for (int peer = 0; peer < group->size(); ++peer) {
      if (peer != group->rank()) {
        asked.push_back(peer);
      }
    }
  } else {
    asked = op.silentPeers();
    if (asked.size() > kMaxAsked) {
      asked.resize(kMaxAsked);
    }
  }
  auto answers = std::make_shared<Answers>(asked.size());
  const uint32_t id = nextStatusQuery_++ & tag::kMaxInternalValue;
  auto query = std::make_unique<StatusQuery>(op.group_, id, asked, answers);
  const std::size_t notAsked = static_cast<std::size_t>(group->size()) - 1 - asked.size();
  query->onComplete = [this, serial = op.serial_, asked = std::move(asked), answers, notAsked](std::exception_ptr) {
    auto found = inFlight_.find(serial);
    if (found == inFlight_.end() || found->second->completed_ || found->second->failure_) {
      return;  // it completed (late messages came) or failed otherwise meanwhile
    }
    Operation& timedOut = *found->second;
    const Group& group = *timedOut.group();
    // Ranks in the same state share a line.
    std::vector<std::pair<std::string, std::vector<int>>> states;
    std::vector<int> silent;
    std::size_t unlisted = 0;
    for (std::size_t i = 0; i < asked.size(); ++i) {
      std::string answer((*answers)[i].data(), strnlen((*answers)[i].data(), kReplyBytes));
      if (answer.empty()) {
        silent.push_back(asked[i]);
        continue;
      }
      auto same = std::find_if(states.begin(), states.end(), [&](const auto& state) { return state.first == answer; });
      if (same != states.end()) {
        same->second.push_back(asked[i]);
      } else if (states.size() < kMaxStatesListed) {
        states.emplace_back(std::move(answer), std::vector<int>{asked[i]});
      } else {
        ++unlisted;
      }
    }
    // A collective that waits on ranks that wait on others (a composition's
    // phases) names whom it waits for; the ranks that have not even started
    // it are the cause, so they are named too, unless it waits for them.
    std::vector<int> notStarted;
    if (group.running_ == &timedOut) {
      const uint64_t mine = group.completedCollectives_;
      const std::vector<int> awaited = timedOut.peersAwaited();
      for (const auto& [state, ranks] : states) {
        // (A rank whose group failed meanwhile is in no collective either,
        // but not for want of starting.)
        if (state.find("this group failed") != std::string::npos) {
          continue;
        }
        const bool idle = state.find("; in no collective of this group") != std::string::npos;
        if (completedIn(state) < mine || (completedIn(state) == mine && idle)) {
          for (int rank : ranks) {
            if (std::find(awaited.begin(), awaited.end(), rank) == awaited.end()) {
              notStarted.push_back(rank);
            }
          }
        }
      }
      std::sort(notStarted.begin(), notStarted.end());
    }
    std::ostringstream report;
    report << timedOut.name() << timedOut.timedOutAfter() << timedOut.describeMissingPeers();
    if (!notStarted.empty()) {
      report << "; " << formatRanks(notStarted) << (notStarted.size() == 1 ? " has" : " have") << " not started it";
    }
    report << "; what the ranks of the group are doing:\n  rank " << group.rank()
           << " (this rank): " << describeState(group);
    for (const auto& [state, ranks] : states) {
      report << "\n  " << formatRanks(ranks) << ": " << state;
    }
    if (unlisted > 0) {
      report << "\n  " << unlisted << " more rank(s) in other states";
    }
    if (!silent.empty()) {
      report << "\n  " << formatRanks(silent) << ": no answer within " << kStatusQueryBound.count()
             << " ms (the process is hung, stopped or unreachable)";
    }
    if (notAsked > 0) {
      report << "\n  " << notAsked << " rank(s) not asked (the report asks at most " << kMaxAsked
             << ", those this collective waits for)";
    }
    timedOut.fail(std::make_exception_ptr(TimeoutError(report.str(), timedOut.silentPeers())));
  };
  [[maybe_unused]] Lease lease = submit(std::move(query));
  return true;
}

void Engine::answerStatusRequests() {
  const uint64_t anyRequest = (static_cast<uint64_t>(tag::Kind::Internal) << tag::kKindShift) |
                              (uint64_t{tag::kStatusRequest} << tag::kPurposeShift);
  // Bounded: a flood of requests must not keep the driver from its work.
  constexpr int kAnsweredPerPass = 64;
  for (int answered = 0; answered < kAnsweredPerPass; ++answered) {
    auto request = transport_->probe(anyRequest, tag::kPurposeMask);
    if (!request) {
      return;
    }
    const uint64_t requestTag = request->senderTag;
    transport_->discard(requestTag, tag::kMatchAll);
    const uint32_t channel = tag::channel(requestTag);
    const auto asker = static_cast<int>(tag::sender(requestTag));
    std::shared_ptr<Group> group;
    for (const auto& weak : groups_) {
      if (auto live = weak.lock(); live && live->channel() == channel && !live->closed_) {
        group = std::move(live);
        break;
      }
    }
    if (!group || asker >= group->size() || asker == group->rank()) {
      continue;  // a group closed meanwhile: nobody waits for this any more
    }
    auto reply = std::make_unique<StatusReply>(group, asker, tag::internalValue(requestTag), describeState(*group));
    [[maybe_unused]] Lease lease = submit(std::move(reply));
  }
}

void Engine::serviceWhileIdle() {
  ++depth_;
  step();
  answerStatusRequests();
  answerLateReaches();
  dropStrayMessages(Clock::now());
  --depth_;
}

}  // namespace ucxcoll
