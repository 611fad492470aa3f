// UcxBackend::reconfigure: torch 2.15's fault-tolerance API. After a member
// died (or to take new ones in), every member that goes on calls
// reconfigure(uuid, handles) with the same arguments; they agree on the
// new group through the old group's store, under a prefix of their own, and
// only then is the old group aborted (anything still queued on it fails with
// "the process group was reconfigured"). A member whose arguments differ
// from the others' makes every member that sees it raise, naming it.

#include "backend/ucx_backend.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>

#include "backend/errors.hpp"
#include "backend/group_setup.hpp"
#include "common/logging.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {

std::string newReconfigureHandle(uint64_t globalRank) {
  std::random_device random;
  uint64_t nonce = (static_cast<uint64_t>(random()) << 32) ^ random();
  char text[64];
  std::snprintf(text, sizeof(text), "ucxcoll:%llu:%016llx", static_cast<unsigned long long>(globalRank),
                static_cast<unsigned long long>(nonce));
  return text;
}

#ifdef C10D_BACKEND_HAS_RECONFIGURE

namespace {

// The members in rank order: a list as given, a set sorted (every member
// sorts the same way).
std::vector<std::string> membersInRankOrder(const c10d::ReconfigureOptions& opts) {
  if (const auto* ordered = std::get_if<std::vector<c10d::ReconfigureHandle>>(&opts.handles)) {
    return *ordered;
  }
  const auto& unordered = std::get<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles);
  std::vector<std::string> members(unordered.begin(), unordered.end());
  std::sort(members.begin(), members.end());
  return members;
}

uint64_t globalRankOf(const std::string& handle) {
  // "ucxcoll:<global rank>:<random>", checked by the caller.
  return std::stoull(handle.substr(8, handle.find(':', 8) - 8));
}

bool isHandle(const std::string& handle) {
  if (handle.rfind("ucxcoll:", 0) != 0) {
    return false;
  }
  auto colon = handle.find(':', 8);
  return colon != std::string::npos && colon > 8 &&
         std::all_of(handle.begin() + 8, handle.begin() + static_cast<std::ptrdiff_t>(colon),
                     [](char c) { return c >= '0' && c <= '9'; }) &&
         handle.size() > colon + 1;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> UcxBackend::reconfigure(const c10d::ReconfigureOptions& opts) {
  const std::vector<std::string> members = membersInRankOrder(opts);
  const std::string call = "ucxcoll: reconfigure(uuid=" + std::to_string(opts.uuid) + ")";
  TORCH_CHECK_VALUE(!members.empty(), call, ": no handles given");
  TORCH_CHECK_VALUE(members.size() <= tag::kMaxGroupSize, call, ": groups of up to ", tag::kMaxGroupSize,
                    " ranks are supported, got ", members.size(), " handles");
  for (std::size_t i = 0; i < members.size(); ++i) {
    TORCH_CHECK_VALUE(isHandle(members[i]), call, ": handle ", i, " (\"", members[i],
                      "\") is not a ucxcoll reconfigure handle (get_reconfigure_handle() of a ucxcoll group)");
    for (std::size_t j = 0; j < i; ++j) {
      TORCH_CHECK_VALUE(members[i] != members[j], call, ": handle \"", members[i], "\" is given twice (", j, " and ", i,
                        ")");
    }
  }
  auto mine = std::find(members.begin(), members.end(), reconfigureHandle_);
  TORCH_CHECK_VALUE(mine != members.end(), call, ": this member's handle \"", reconfigureHandle_,
                    "\" is not among the ", members.size(), " handles given");
  TORCH_CHECK_VALUE(!reconfigureIds_.contains(opts.uuid), call, ": uuid ", opts.uuid,
                    " was used before on this group; pass a fresh one for every reconfiguration");
  const int newRank = static_cast<int>(mine - members.begin());
  const int newSize = static_cast<int>(members.size());
  const std::chrono::milliseconds timeout = opts.timeout.value_or(timeout_.load());

  // Own store connection and deadline; the prefix keeps this round's keys
  // apart from every other round's and from the group's own.
  auto store =
      c10::make_intrusive<c10d::PrefixStore>("reconfigure/" + std::to_string(opts.uuid) + "/", store_->clone());
  store->setTimeout(timeout);
  // Every member publishes what it was asked and checks the others' against
  // it: members called with different handles must not form a group.
  std::string asked;
  for (const auto& member : members) {
    asked += (asked.empty() ? "" : ", ") + member;
  }
  // Keyed by handle, not by new rank: members that disagree may each think
  // they are rank 0.
  store->set("asked/" + reconfigureHandle_, std::vector<uint8_t>(asked.begin(), asked.end()));
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    const std::string member = "member " + std::to_string(rank) + " (" + members[rank] + ")";
    std::vector<uint8_t> theirs;
    try {
      theirs = store->get("asked/" + members[rank]);
    } catch (const c10::Error& error) {
      C10_THROW_ERROR(DistBackendError, call + ": " + member + " did not join within " +
                                            std::to_string(timeout.count()) + " ms (" + error.what_without_backtrace() +
                                            ")");
    }
    if (std::string(theirs.begin(), theirs.end()) != asked) {
      C10_THROW_ERROR(DistBackendError, call + ": " + member + " was given other handles than this member: [" +
                                            std::string(theirs.begin(), theirs.end()) + "] where this member has [" +
                                            asked + "]");
    }
  }

  std::shared_ptr<Group> group;
  std::shared_ptr<const GroupRendezvous> membership;
  try {
    group = setUpGroup(store, newRank, newSize, membership);
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& error) {
    std::rethrow_exception(backendError(call + ": cannot set up the new group: " + error.what()));
  }
  std::vector<uint64_t> globalRanks;
  for (const auto& member : members) {
    globalRanks.push_back(globalRankOf(member));
  }
  std::shared_ptr<Group> old;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    TORCH_CHECK(!closed_, call, ": the process group was shut down");
    old = std::exchange(group_, group);
    membership_ = std::move(membership);
    shrinks_ = 0;
    rank_ = newRank;
    size_ = newSize;
    options_->global_ranks_in_group = std::move(globalRanks);
    reconfigureIds_.insert(opts.uuid);
  }
  engine_->abortGroup(old, "the process group was reconfigured", LeaveReason::Reconfigured);
  UCXCOLL_INFO("group \"" << groupName_ << "\" reconfigured (uuid " << opts.uuid << "): rank " << newRank << " of "
                          << newSize << " (channel " << group->channel() << ")");
  auto done = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
  done->markCompleted(c10::IValue());
  return c10d::Work::create_from_future(done);
}

#endif

}  // namespace ucxcoll
