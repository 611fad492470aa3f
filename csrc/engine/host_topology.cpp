#include "engine/host_topology.hpp"

#include <algorithm>
#include <stdexcept>

namespace ucxcoll {

HostTopology::HostTopology(const std::vector<int>& hostOf, int rank) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= hostOf.size()) {
    throw std::out_of_range("HostTopology: rank " + std::to_string(rank) + " of " + std::to_string(hostOf.size()));
  }
  // Ranks of each host, hosts in the order of their first rank.
  std::vector<int> names;
  std::vector<std::vector<int>>& ranksOf = ranksOf_;
  for (std::size_t r = 0; r < hostOf.size(); ++r) {
    auto known = std::find(names.begin(), names.end(), hostOf[r]);
    if (known == names.end()) {
      names.push_back(hostOf[r]);
      ranksOf.emplace_back();
      known = names.end() - 1;
    }
    ranksOf[static_cast<std::size_t>(known - names.begin())].push_back(static_cast<int>(r));
  }
  hosts_ = static_cast<int>(names.size());
  placeOf_.resize(hostOf.size());
  for (std::size_t host = 0; host < ranksOf.size(); ++host) {
    for (std::size_t place = 0; place < ranksOf[host].size(); ++place) {
      placeOf_[static_cast<std::size_t>(ranksOf[host][place])] = {static_cast<int>(host), static_cast<int>(place)};
    }
  }
  hostIndex_ =
      static_cast<int>(std::find(names.begin(), names.end(), hostOf[static_cast<std::size_t>(rank)]) - names.begin());
  localRanks_ = ranksOf[static_cast<std::size_t>(hostIndex_)];
  localIndex_ = static_cast<int>(std::find(localRanks_.begin(), localRanks_.end(), rank) - localRanks_.begin());
  regular_ = std::all_of(ranksOf.begin(), ranksOf.end(),
                         [&](const std::vector<int>& ranks) { return ranks.size() == ranksOf.front().size(); });
  if (regular_) {
    for (const std::vector<int>& ranks : ranksOf) {
      counterparts_.push_back(ranks[static_cast<std::size_t>(localIndex_)]);
    }
  }
}

}  // namespace ucxcoll
