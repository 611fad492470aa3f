// Hierarchical reduce, for a group across hosts with the same number of
// ranks on each:
//   1. inside each host, a reduce to the rank at the root's place (shared
//      memory);
//   2. across hosts, those ranks reduce their hosts' results to the root.
// One message crosses from each host, where a flat reduce sends every
// rank's data (or its share) across: L times fewer bytes at L ranks a host.
// Every phase's messages carry the group's root and reduction
// (View::Tags::GroupDetail), so ranks that disagree about either raise in
// whichever phase they are.

#include <algorithm>
#include <stdexcept>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task reduceHierarchical(Collective& c, const void* input, void* output, std::size_t count, DataType type,
                        Reduction reduction, int root) {
  c.begin(tag::Routine::ReduceHierarchical,
          (static_cast<uint32_t>(root) << tag::kReductionBits) | static_cast<uint32_t>(reduction));
  const HostTopology& topology = c.group()->topology();
  if (!topology.hierarchical()) {
    throw std::logic_error("reduceHierarchical on a group that is not across hosts with equal ranks on each");
  }
  const RankPlace rootAt = topology.placeOf(root);
  const bool isRoot = c.rank() == root;
  const bool atRootPlace = topology.localIndex() == rootAt.place;
  // The host's result: the root's output on the root, scratch on the other
  // hosts' ranks at its place (other ranks' outputs are not touched).
  void* hostResult = isRoot ? output : c.compositionScratch(std::max<std::size_t>(1, count * elementSize(type)));
  {
    Collective::View inside(c, topology.localRanks(), Collective::View::Tags::GroupDetail);
    co_await reduceDirect(c, input, hostResult, count, type, reduction, rootAt.place);
  }
  {
    Collective::View across(c, topology.counterparts(), Collective::View::Tags::GroupDetail);
    if (atRootPlace) {
      co_await reduceDirect(c, hostResult, isRoot ? output : hostResult, count, type, reduction, rootAt.host);
    }
  }
}

}  // namespace ucxcoll
