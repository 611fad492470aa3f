// Hierarchical all-reduce, for a group across hosts with the same number of
// ranks on each (UCC's cl/hier and Open MPI's coll/han compose alike). With
// L ranks on each of H hosts and a buffer cut into L parts:
//   1. inside each host, a reduce-scatter: local rank i ends with part i
//      reduced over its host (shared memory; nothing crosses a host);
//   2. across hosts, each local rank all-reduces its part with its
//      counterparts (the ranks at its place on the other hosts), all L
//      parts at once;
//   3. inside each host, an all-gather of the parts.
// Each phase is an existing algorithm on a rank view, picked by its own
// size. A host then sends 2(H-1)/H of the buffer across, where a flat ring
// over all H*L ranks sends 2(HL-1)/HL of it over each of its H host
// crossings (1.5x as much at 2x2, nearly 2x with more ranks per host), and
// the ranks of a host combine their data in memory before it crosses.
// Every element is reduced along the same path on every rank, so all ranks
// end bit-identical.

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allreduceHierarchical(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  c.begin(tag::Routine::AllreduceHierarchical, reduction);
  const HostTopology& topology = c.group()->topology();
  if (!topology.hierarchical()) {
    throw std::logic_error("allreduceHierarchical on a group that is not across hosts with equal ranks on each");
  }
  const int parts = static_cast<int>(topology.localRanks().size());
  const int mine = topology.localIndex();
  const std::size_t element = elementSize(type);
  auto* base = static_cast<std::byte*>(buffer);

  // Part p: elements [start(p), start(p + 1)); the first count % parts
  // parts have one element more.
  auto start = [&](int part) {
    const auto p = static_cast<std::size_t>(part);
    return p * (count / static_cast<std::size_t>(parts)) + std::min(p, count % static_cast<std::size_t>(parts));
  };
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<std::size_t> counts;
  for (int part = 0; part < parts; ++part) {
    inputs.push_back(base + start(part) * element);
    outputs.push_back(base + start(part) * element);
    counts.push_back(start(part + 1) - start(part));
  }
  const bool even = count % static_cast<std::size_t>(parts) == 0;
  const std::size_t myCount = counts[static_cast<std::size_t>(mine)];
  // The part this rank reduces; the reduce-scatter's output must not
  // overlap its inputs.
  std::byte* reduced = c.compositionScratch(std::max<std::size_t>(1, myCount * element));

  {
    Collective::View host(c, topology.localRanks());
    if (even) {
      co_await selectFlatReduceScatter(c, inputs, reduced, myCount, type, reduction);
    } else {
      co_await reduceScatterUneven(c, inputs, counts, reduced, type, reduction);
    }
  }
  {
    Collective::View counterparts(c, topology.counterparts());
    co_await selectFlatAllreduce(c, reduced, myCount, type, reduction);
  }
  {
    Collective::View host(c, topology.localRanks());
    if (even) {
      co_await selectFlatAllgather(c, reduced, outputs, myCount * element);
    } else {
      std::vector<Block> sends(static_cast<std::size_t>(parts), Block{reduced, myCount * element});
      std::vector<Block> receives;
      for (int part = 0; part < parts; ++part) {
        receives.push_back(
            Block{outputs[static_cast<std::size_t>(part)], counts[static_cast<std::size_t>(part)] * element});
      }
      co_await alltoallPairwise(c, tag::Routine::AllgatherUneven, sends, receives, false);
    }
  }
}

}  // namespace ucxcoll
