// Groups made from the ranks of an existing one: split_group, and
// new_group when the default group is ucxcoll. The members already know
// how to reach each other (the parent's setup found it), so they only
// trade the channel each opened for the new group, over the parent's
// connections (engine/member_exchange.hpp): no store operation, where
// setting a group up through the store costs every rank a rendezvous.

#include "backend/ucx_backend.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_map>

#include "backend/errors.hpp"
#include "backend/group_setup.hpp"

namespace ucxcoll {

UcxBackend::TradedChannels UcxBackend::tradeChannels(
    NewGroupTerms terms, std::chrono::milliseconds timeout,
    const std::function<std::unique_ptr<Operation>(const MemberExchange&)>& companion) {
  std::shared_ptr<Group> parent;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    TORCH_CHECK(!closed_, "ucxcoll: group \"", groupName_, "\" was shut down; no group can be made from its ranks");
    parent = group_;
  }
  engine_->destroyRetired();
  TradedChannels traded;
  traded.channel = engine_->openChannel();
  auto channels = std::make_shared<std::vector<uint32_t>>();
  try {
    auto exchange = std::make_unique<MemberExchange>(parent, std::move(terms), traded.channel, timeout, channels);
    auto completion = exchange->sharedCompletion();
    if (companion) {
      (void)engine_->submit(companion(*exchange));
    }
    {
      Engine::Lease lease = engine_->submit(std::move(exchange), true);
      if (lease) {
        lease.driveUntil(*completion);
      }
    }
    engine_->wait(*completion);
    if (std::exception_ptr error = completion->error()) {
      std::rethrow_exception(error);
    }
  } catch (const std::exception& error) {
    engine_->releaseChannel(traded.channel);
    std::rethrow_exception(backendError(std::string("ucxcoll: ") + error.what()));
  }
  traded.byRank = std::move(*channels);
  return traded;
}

c10::intrusive_ptr<UcxBackend> UcxBackend::makeSubgroup(const std::vector<int>& ranks, std::string name,
                                                        std::chrono::milliseconds timeout,
                                                        const c10::intrusive_ptr<c10d::Store>& store) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  TORCH_CHECK_VALUE(me != ranks.end(), "ucxcoll: group \"", name, "\" is made only by its members; rank ", rank_,
                    " of group \"", groupName_, "\" is not among its ranks ", MemberExchange::formatRanks(ranks));
  std::vector<int> ascending = ranks;
  std::sort(ascending.begin(), ascending.end());
  TORCH_CHECK_VALUE(std::adjacent_find(ascending.begin(), ascending.end()) == ascending.end(), "ucxcoll: group \"",
                    name, "\": a rank is given twice in ", MemberExchange::formatRanks(ranks));
  std::shared_ptr<const GroupRendezvous> membership;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    membership = membership_;
  }
  TradedChannels traded = tradeChannels(NewGroupTerms::subgroup(ranks, name), timeout, nullptr);
  std::vector<uint64_t> globalRanks;
  for (int rank : ranks) {
    globalRanks.push_back(globalRank(rank));
  }
  NarrowedGroup narrowed{std::make_shared<const GroupRendezvous>(narrowRendezvous(*membership, ranks, traded.byRank)),
                         static_cast<int>(me - ranks.begin()), traded.channel, store};
  try {
    return c10::make_intrusive<UcxBackend>(*this, std::move(narrowed), timeout, name, std::move(globalRanks));
  } catch (const std::exception& error) {
    std::rethrow_exception(backendError(std::string("ucxcoll: cannot set up group \"") + name + "\": " + error.what()));
  }
}

std::optional<std::vector<int>> UcxBackend::ranksOf(const std::vector<uint64_t>& globalRanks) const {
  // One pass over this group's ranks, not one per member: a DeviceMesh of
  // a large job asks this for every row and column.
  std::unordered_map<uint64_t, int> byGlobal;
  byGlobal.reserve(static_cast<std::size_t>(size_));
  for (int rank = 0; rank < size_; ++rank) {
    byGlobal.emplace(globalRank(rank), rank);
  }
  std::vector<int> ranks;
  ranks.reserve(globalRanks.size());
  for (uint64_t global : globalRanks) {
    const auto found = byGlobal.find(global);
    if (found == byGlobal.end()) {
      return std::nullopt;
    }
    ranks.push_back(found->second);
  }
  return ranks;
}

c10::intrusive_ptr<c10d::Backend> UcxBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::vector<int>& ranks,
                                                    const c10::intrusive_ptr<Options>& opts) {
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) {
    return nullptr;
  }
  for (int rank : ranks) {
    TORCH_CHECK_VALUE(rank >= 0 && rank < size_, "ucxcoll: split: rank ", rank, " is not in this group of ", size_,
                      " ranks");
  }
  const std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_.load();
  std::string name = opts && !opts->group_name.empty() ? opts->group_name : groupName_ + ":split";
  auto child = makeSubgroup(ranks, std::move(name), timeout, store);
  if (opts) {
    child->options_->group_desc = opts->group_desc;
  }
  return child;
}

}  // namespace ucxcoll
