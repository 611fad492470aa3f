// Hierarchical reduce-scatter, for a group across hosts with the same
// number of ranks on each. Block p of every rank's input ends, reduced over
// all ranks, on rank p. With L ranks on each of H hosts:
//   1. each rank packs its input by counterpart: part i holds, host by
//      host, the blocks for the ranks at place i on each host;
//   2. inside each host, a reduce-scatter of the parts: local rank i ends
//      with its counterparts' blocks reduced over its host;
//   3. across hosts, a reduce-scatter of those among the counterparts.
// A rank sends H-1 blocks across, where the flat exchanges send each rank's
// (H-1)L blocks for other hosts across one by one: L times fewer bytes
// cross, at the price of one copy of the input.

#include <stdexcept>
#include <vector>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task reduceScatterHierarchical(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                               DataType type, Reduction reduction) {
  c.begin(tag::Routine::ReduceScatterHierarchical, reduction);
  const HostTopology& topology = c.group()->topology();
  if (!topology.hierarchical()) {
    throw std::logic_error("reduceScatterHierarchical on a group that is not across hosts with equal ranks on each");
  }
  const auto hosts = static_cast<std::size_t>(topology.hosts());
  const std::size_t places = topology.localRanks().size();
  const std::size_t blockBytes = count * elementSize(type);

  // [packed input: places x hosts blocks][this rank's part, reduced over
  // its host: hosts blocks]
  std::byte* packed = c.compositionScratch(std::max<std::size_t>(1, (places + 1) * hosts * blockBytes));
  std::byte* reduced = packed + places * hosts * blockBytes;
  std::vector<const void*> parts;
  for (std::size_t place = 0; place < places; ++place) {
    parts.push_back(packed + place * hosts * blockBytes);
    for (std::size_t host = 0; host < hosts; ++host) {
      const int rank = topology.ranksOn(static_cast<int>(host))[place];
      copyBytes(packed + (place * hosts + host) * blockBytes, inputs[static_cast<std::size_t>(rank)], blockBytes);
    }
  }
  {
    Collective::View host(c, topology.localRanks());
    co_await selectFlatReduceScatter(c, parts, reduced, hosts * count, type, reduction);
  }
  std::vector<const void*> blocks;
  for (std::size_t host = 0; host < hosts; ++host) {
    blocks.push_back(reduced + host * blockBytes);
  }
  {
    Collective::View counterparts(c, topology.counterparts());
    co_await selectFlatReduceScatter(c, blocks, output, count, type, reduction);
  }
}

}  // namespace ucxcoll
