// Hierarchical all-gather, for a group across hosts with the same number of
// ranks on each. With L ranks on each of H hosts:
//   1. across hosts, each rank all-gathers its block with its counterparts
//      (the ranks at its place on the other hosts), all L places at once:
//      it then holds one block from each host, straight in its output;
//   2. inside each host, the ranks hand on those H blocks to each other in
//      one direct exchange (shared memory; nothing crosses a host).
// Each block crosses to each other host once, where a flat ring over all
// H*L ranks sends (HL-1) blocks over each of its H host crossings (1.5x as
// many at 2x2). Both phases write into the caller's output: no packing.

#include <stdexcept>
#include <vector>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allgatherHierarchical(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  c.begin(tag::Routine::AllgatherHierarchical);
  const HostTopology& topology = c.group()->topology();
  if (!topology.hierarchical()) {
    throw std::logic_error("allgatherHierarchical on a group that is not across hosts with equal ranks on each");
  }
  const auto hosts = static_cast<std::size_t>(topology.hosts());
  const std::vector<int>& counterparts = topology.counterparts();

  std::vector<void*> fromCounterparts;
  for (int rank : counterparts) {
    fromCounterparts.push_back(outputs[static_cast<std::size_t>(rank)]);
  }
  {
    Collective::View across(c, counterparts);
    co_await selectFlatAllgather(c, input, fromCounterparts, bytes);
  }

  // Local rank j's block from host h lands in the output of rank h:j.
  std::vector<const void*> held(fromCounterparts.begin(), fromCounterparts.end());
  std::vector<void*> fromHost;
  for (std::size_t place = 0; place < topology.localRanks().size(); ++place) {
    for (std::size_t host = 0; host < hosts; ++host) {
      fromHost.push_back(outputs[static_cast<std::size_t>(topology.ranksOn(static_cast<int>(host))[place])]);
    }
  }
  {
    Collective::View inside(c, topology.localRanks());
    co_await allgatherDirectBlocks(c, held, fromHost, bytes);
  }
}

}  // namespace ucxcoll
