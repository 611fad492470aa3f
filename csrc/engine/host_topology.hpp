#pragma once
// Which of a group's ranks share a host, as group setup found it (every
// rank reads every rank's host identity, so all build the same topology),
// and the two rank views a hierarchical algorithm composes over: this
// host's ranks, and this rank's counterparts, the ranks that hold its place
// among their own host's ranks, one per host.

#include <cstddef>
#include <vector>

namespace ucxcoll {

// Where a rank runs: its host's number and its place among that host's
// ranks.
struct RankPlace {
  int host;
  int place;
};

class HostTopology {
 public:
  // `hostOf[r]`: any number naming group rank r's host (equal numbers: one
  // host). Hosts are numbered in the order of their first rank.
  HostTopology(const std::vector<int>& hostOf, int rank);

  int hosts() const { return hosts_; }
  // Every host runs the same number of the group's ranks.
  bool regular() const { return regular_; }
  // A hierarchical algorithm has something to gain: several hosts, several
  // ranks on each, the same number on each.
  bool hierarchical() const { return hosts_ > 1 && regular_ && localRanks_.size() > 1; }

  // This host's ranks, ascending: a rank's view rank there is its place.
  const std::vector<int>& localRanks() const { return localRanks_; }
  int localIndex() const { return localIndex_; }
  // One rank per host, by host number: the rank at this rank's place on
  // each host (empty unless regular()).
  const std::vector<int>& counterparts() const { return counterparts_; }
  int hostIndex() const { return hostIndex_; }
  // The ranks of host `host` (by host number), ascending.
  const std::vector<int>& ranksOn(int host) const { return ranksOf_[static_cast<std::size_t>(host)]; }
  RankPlace placeOf(int rank) const { return placeOf_[static_cast<std::size_t>(rank)]; }

 private:
  int hosts_ = 1;
  bool regular_ = true;
  int hostIndex_ = 0;
  int localIndex_ = 0;
  std::vector<int> localRanks_;
  std::vector<int> counterparts_;
  std::vector<std::vector<int>> ranksOf_;
  std::vector<RankPlace> placeOf_;
};

}  // namespace ucxcoll
