// UcxBackend::shrink: torch's shrink_group. The ranks that go on trade,
// over this group's own connections (engine/member_exchange.hpp), the
// channel each opened for the smaller group and the ranks each excludes;
// then each builds the smaller group from what this group's setup found
// about them (addresses, hosts, processes). No store is involved, so a
// shrink works while the store is slow or gone, and costs one small
// message to each survivor. Survivors that pass different exclusion lists
// all raise, naming each other's lists.

#include "backend/ucx_backend.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

#include "backend/errors.hpp"
#include "backend/group_setup.hpp"
#include "common/logging.hpp"
#include "engine/member_exchange.hpp"

namespace ucxcoll {

#ifdef UCXCOLL_TORCH_HAS_SHRINK

namespace {

// torch's SHRINK_ABORT (distributed_c10d.py): abort the group's pending
// operations before shrinking.
constexpr int kShrinkAbort = 0x01;

}  // namespace

c10::intrusive_ptr<c10d::Backend> UcxBackend::shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                                     const c10::intrusive_ptr<Options>& optsOverride) {
  std::vector<int> excluded;
  for (int64_t rank : ranksToExclude) {
    TORCH_CHECK_VALUE(rank >= 0 && rank < size_, "ucxcoll: shrink: rank ", rank, " is not in this group of ", size_,
                      " ranks");
    excluded.push_back(static_cast<int>(rank));
  }
  std::sort(excluded.begin(), excluded.end());
  const std::string call = "ucxcoll: shrink(ranks_to_exclude=" + MemberExchange::formatRanks(excluded) + ")";
  TORCH_CHECK_VALUE(!excluded.empty(), call, ": no rank to exclude");
  TORCH_CHECK_VALUE(std::adjacent_find(excluded.begin(), excluded.end()) == excluded.end(), call,
                    ": a rank is given twice");
  TORCH_CHECK_VALUE(static_cast<int>(excluded.size()) < size_, call, ": every rank of the group would be excluded");
  TORCH_CHECK_VALUE(!std::binary_search(excluded.begin(), excluded.end(), rank_), call, ": this rank (", rank_,
                    ") is among the excluded; only the ranks that go on call shrink");
  TORCH_CHECK_VALUE(shrinkFlags == 0 || shrinkFlags == kShrinkAbort, call, ": shrink_flags ", shrinkFlags,
                    " is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)");

  std::shared_ptr<Group> parent;
  std::shared_ptr<const GroupRendezvous> membership;
  uint32_t round = 0;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    TORCH_CHECK(!closed_, call, ": the process group was shut down");
    parent = group_;
    membership = membership_;
    round = shrinks_++;
  }
  if (shrinkFlags == kShrinkAbort) {
    // Whatever waits on this group (for the rank that died, say) ends now;
    // the group's connections stay for the exchange.
    engine_->abortOperations(parent, "the process group is being shrunk (shrink_group with SHRINK_ABORT)");
  }
  const std::chrono::milliseconds timeout = optsOverride ? optsOverride->timeout : timeout_.load();

  NewGroupTerms terms = NewGroupTerms::shrink(size_, excluded, round);
  const std::vector<int> survivors = terms.members;
  std::vector<uint64_t> globalRanks;
  for (int rank : survivors) {
    globalRanks.push_back(globalRank(rank));
  }
  const int newRank = static_cast<int>(std::find(survivors.begin(), survivors.end(), rank_) - survivors.begin());
  // The excluded ranks that are alive hear the offer too: one that shrinks
  // by another list raises at once.
  TradedChannels traded = tradeChannels(std::move(terms), timeout, [&](const MemberExchange& exchange) {
    return std::make_unique<ShrinkNotice>(parent, excluded, exchange.offer(), exchange.tagValue(), timeout);
  });

  std::string name =
      optsOverride && !optsOverride->group_name.empty() ? optsOverride->group_name : groupName_ + ":shrunk";
  NarrowedGroup shrunk{std::make_shared<const GroupRendezvous>(narrowRendezvous(*membership, survivors, traded.byRank)),
                       newRank, traded.channel, nullptr};
  c10::intrusive_ptr<UcxBackend> child;
  try {
    child = c10::make_intrusive<UcxBackend>(*this, std::move(shrunk), timeout, std::move(name), std::move(globalRanks));
  } catch (const std::exception& error) {
    std::rethrow_exception(backendError(call + ": cannot set up the new group: " + error.what()));
  }
  if (optsOverride) {
    child->options_->group_desc = optsOverride->group_desc;
  }
  UCXCOLL_INFO("group \"" << groupName_ << "\" shrunk without ranks " << MemberExchange::formatRanks(excluded)
                          << ": rank " << newRank << " of " << survivors.size());
  return child;
}

#endif

}  // namespace ucxcoll
