// Hierarchical broadcast, for a group across hosts with the same number of
// ranks on each:
//   1. across hosts, the root broadcasts to its counterparts (the ranks at
//      its place on the other hosts); the other places wait this out;
//   2. inside each host, the rank at the root's place broadcasts to the
//      others (shared memory).
// The message crosses to each host once, whatever the order of the ranks;
// a flat tree or chain does so only where each host's ranks are
// consecutive and the root's subtrees line up with the hosts.
// Every phase's messages carry the group's root (View::Tags::GroupDetail),
// so ranks that disagree about the root raise in whichever phase they are.

#include <stdexcept>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task broadcastHierarchical(Collective& c, void* buffer, std::size_t bytes, int root) {
  c.begin(tag::Routine::BroadcastHierarchical, static_cast<uint32_t>(root));
  const HostTopology& topology = c.group()->topology();
  if (!topology.hierarchical()) {
    throw std::logic_error("broadcastHierarchical on a group that is not across hosts with equal ranks on each");
  }
  const RankPlace rootAt = topology.placeOf(root);
  {
    Collective::View across(c, topology.counterparts(), Collective::View::Tags::GroupDetail);
    if (topology.localIndex() == rootAt.place) {
      co_await selectFlatBroadcast(c, buffer, bytes, rootAt.host);
    }
  }
  {
    Collective::View inside(c, topology.localRanks(), Collective::View::Tags::GroupDetail);
    co_await selectFlatBroadcast(c, buffer, bytes, rootAt.place);
  }
}

}  // namespace ucxcoll
